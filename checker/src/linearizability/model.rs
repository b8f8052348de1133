//! The sequential specification of one key: a register with a value and a `mod_revision`, plus a
//! lower bound on the store's revision so that revisions are checked too.
//!
//! Invariants of `KeyState`:
//! 1. An absent key has `mod_revision == Rev::Known(0)`, as in etcd.
//! 2. A present key's `mod_revision` is at most `floor`: every revision linearized so far on this
//!    key (a write's own, or one a reply reported) is at most `floor`.
//! 3. A write linearized next gets a revision strictly greater than `floor`; a reply revision of
//!    an operation that wrote nothing is at least `floor`.
//!
//! Revisions are one counter over all keys, so checking per key finds every revision that goes
//! backwards on one key but not an anomaly that shows only across keys.

use std::collections::HashMap;

use super::history::{Expected, Input, Operation, Outcome, Reply};

/// A value, interned per key so that states hash and compare in constant time.
pub(crate) type ValueId = u32;

/// What is known of a key's `mod_revision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Rev {
    /// Exactly this revision.
    Known(u64),
    /// Written by an operation whose revision was not recorded: at least this. A later read of
    /// the revision, or a compare on it that succeeded, pins it.
    AtLeast(u64),
}

/// The state of one key in the sequential model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KeyState {
    /// The value, or `None` when absent.
    value: Option<ValueId>,
    /// The key's `mod_revision`.
    mod_revision: Rev,
    /// A lower bound on the store's revision at this point of the linearization.
    floor: u64,
}

/// A model operation: the input and reply with values interned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelOp {
    /// What was asked.
    input: ModelInput,
    /// What was answered; `None` for an unknown outcome, which any state accepts.
    reply: Option<ModelReply>,
}

#[derive(Debug, Clone, Copy)]
enum ModelInput {
    Put(ValueId),
    Get,
    Delete,
    CompareAndSet {
        expected: ModelExpected,
        value: ValueId,
    },
}

#[derive(Debug, Clone, Copy)]
enum ModelExpected {
    Value(Option<ValueId>),
    ModRevision(u64),
}

/// A reply with its value interned.
type ModelReply = Reply<ValueId>;

/// The states an operation may lead to: one for most, two for an unknown compare-and-set whose
/// compare the model cannot decide (a compare on a revision that was never recorded).
pub(crate) type Successors = [Option<KeyState>; 2];

/// Interns the values of one key's operations.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    ids: HashMap<String, ValueId>,
}

impl Interner {
    fn id(&mut self, value: &str) -> ValueId {
        let next = ValueId::try_from(self.ids.len()).expect("fewer than 2^32 values per key");
        *self.ids.entry(value.to_owned()).or_insert(next)
    }

    /// Turns a validated history operation into a model operation.
    pub(crate) fn prepare(&mut self, operation: &Operation) -> ModelOp {
        let input = match &operation.input {
            Input::Put { value, .. } => ModelInput::Put(self.id(value)),
            Input::Get { .. } => ModelInput::Get,
            Input::Delete { .. } => ModelInput::Delete,
            Input::CompareAndSet {
                expected, value, ..
            } => ModelInput::CompareAndSet {
                expected: match expected {
                    Expected::Value(expected) => {
                        ModelExpected::Value(expected.as_deref().map(|v| self.id(v)))
                    }
                    Expected::ModRevision(revision) => ModelExpected::ModRevision(*revision),
                },
                value: self.id(value),
            },
        };
        let reply = match &operation.outcome {
            Outcome::Unknown => None,
            Outcome::Ok(reply) => Some(reply.map_value(|value| self.id(value))),
        };
        ModelOp { input, reply }
    }
}

impl KeyState {
    /// The key before the history: absent, at revision 0.
    pub(crate) fn initial() -> Self {
        KeyState {
            value: None,
            mod_revision: Rev::Known(0),
            floor: 0,
        }
    }

    /// The states `op` may lead to from `self`; none when its reply contradicts the model.
    pub(crate) fn successors(&self, op: &ModelOp) -> Successors {
        match (op.input, op.reply) {
            (ModelInput::Put(value), Some(Reply::Put { revision })) => {
                [self.write(Some(value), revision), None]
            }
            (ModelInput::Put(value), _) => [self.write(Some(value), None), None],
            (
                ModelInput::Get,
                Some(Reply::Get {
                    value,
                    mod_revision,
                }),
            ) => [self.read(value, mod_revision), None],
            (ModelInput::Get, _) => [Some(*self), None],
            (ModelInput::Delete, reply) => [self.delete(reply), None],
            (ModelInput::CompareAndSet { expected, value }, reply) => {
                self.compare_and_set(expected, value, reply)
            }
        }
    }

    /// A write of `value` (`None` deletes) with its revision, when recorded.
    fn write(&self, value: Option<ValueId>, revision: Option<u64>) -> Option<KeyState> {
        let (revision, mod_revision) = match revision {
            Some(revision) if revision <= self.floor => return None,
            Some(revision) => (revision, Rev::Known(revision)),
            None => (self.floor + 1, Rev::AtLeast(self.floor + 1)),
        };
        Some(KeyState {
            value,
            mod_revision: if value.is_some() {
                mod_revision
            } else {
                Rev::Known(0)
            },
            floor: revision,
        })
    }

    /// A reply revision of an operation that wrote nothing: the store's revision then.
    fn observe(&self, revision: Option<u64>) -> Option<KeyState> {
        match revision {
            Some(revision) if revision < self.floor => None,
            Some(revision) => Some(KeyState {
                floor: revision,
                ..*self
            }),
            None => Some(*self),
        }
    }

    /// Pins an `AtLeast` revision to `revision`, or checks a `Known` one against it.
    fn pin(&self, revision: u64) -> Option<KeyState> {
        match self.mod_revision {
            Rev::Known(known) => (known == revision).then_some(*self),
            Rev::AtLeast(lower) => (revision >= lower).then_some(KeyState {
                mod_revision: Rev::Known(revision),
                floor: self.floor.max(revision),
                ..*self
            }),
        }
    }

    fn read(&self, value: Option<ValueId>, mod_revision: Option<u64>) -> Option<KeyState> {
        if value != self.value {
            return None;
        }
        match (value, mod_revision) {
            (_, None) => Some(*self),
            (None, Some(revision)) => (revision == 0).then_some(*self),
            (Some(_), Some(revision)) => self.pin(revision),
        }
    }

    fn delete(&self, reply: Option<ModelReply>) -> Option<KeyState> {
        let existed = self.value.is_some();
        let (deleted, revision) = match reply {
            Some(Reply::Delete { deleted, revision }) => (deleted, revision),
            _ => (None, None),
        };
        if deleted.is_some_and(|deleted| deleted != existed) {
            return None;
        }
        if existed {
            self.write(None, revision)
        } else {
            self.observe(revision)
        }
    }

    /// Whether the compare holds; `None` when the model cannot tell (an unpinned revision).
    fn holds(&self, expected: ModelExpected) -> Option<bool> {
        match expected {
            ModelExpected::Value(expected) => Some(expected == self.value),
            ModelExpected::ModRevision(expected) => match self.mod_revision {
                Rev::Known(known) => Some(expected == known),
                Rev::AtLeast(lower) if expected < lower => Some(false),
                Rev::AtLeast(_) => None,
            },
        }
    }

    fn compare_and_set(
        &self,
        expected: ModelExpected,
        value: ValueId,
        reply: Option<ModelReply>,
    ) -> Successors {
        let holds = self.holds(expected);
        match reply {
            Some(Reply::CompareAndSet {
                succeeded: true,
                revision,
            }) => {
                let pinned = match (holds, expected) {
                    (Some(false), _) => None,
                    (None, ModelExpected::ModRevision(expected)) => self.pin(expected),
                    _ => Some(*self),
                };
                [
                    pinned.and_then(|state| state.write(Some(value), revision)),
                    None,
                ]
            }
            Some(Reply::CompareAndSet {
                succeeded: false,
                revision,
            }) => match holds {
                Some(true) => [None, None],
                _ => [self.observe(revision), None],
            },
            _ => match holds {
                Some(true) => [self.write(Some(value), None), None],
                Some(false) => [Some(*self), None],
                None => [
                    self.pin(expected_revision(expected))
                        .and_then(|state| state.write(Some(value), None)),
                    Some(*self),
                ],
            },
        }
    }
}

/// The revision a compare expects; only called for a compare on the revision.
fn expected_revision(expected: ModelExpected) -> u64 {
    match expected {
        ModelExpected::ModRevision(revision) => revision,
        ModelExpected::Value(_) => 0,
    }
}
