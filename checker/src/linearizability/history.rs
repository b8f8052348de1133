//! The recorded history of a key-value workload: what each client asked, when, and what it learned.
//!
//! Invariants a well-formed history keeps (checked by `validate`, reported as `HistoryError`):
//! 1. `call_ns <= return_ns` for every operation whose outcome is known.
//! 2. A known reply is of the same kind as its input (a put is answered by a put reply).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The index of an operation in the history slice given to the checker.
pub type OpId = usize;

/// One operation of one client, with the interval in which it took effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The client that issued it. Only used in reports: the checker needs no per-client order,
    /// since a client's operations never overlap and their intervals already order them.
    pub client_id: u64,
    /// When the client sent the request, on the one monotonic clock of the whole history.
    pub call_ns: u64,
    /// When the client learned the reply. Ignored for an `Outcome::Unknown` operation, whose
    /// effect may land at any time after its call.
    pub return_ns: u64,
    /// What was asked.
    pub input: Input,
    /// What was answered, or that no answer was learned.
    pub outcome: Outcome,
}

/// A request on one key. Every input names exactly one key, which is what lets the checker
/// partition the history by key (P-compositionality).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Input {
    /// `kv.put {key, value}`.
    Put {
        /// The key written.
        key: String,
        /// The value written.
        value: String,
    },
    /// `kv.get {key}`, linearizable.
    Get {
        /// The key read.
        key: String,
    },
    /// `kv.delete {key}`.
    Delete {
        /// The key deleted.
        key: String,
    },
    /// `kv.txn` with one compare on the key and one put on success: a compare-and-set.
    CompareAndSet {
        /// The key compared and written.
        key: String,
        /// What the compare expects of the key.
        expected: Expected,
        /// The value put when the compare holds.
        value: String,
    },
}

impl Input {
    /// The one key this input touches.
    pub fn key(&self) -> &str {
        match self {
            Input::Put { key, .. }
            | Input::Get { key }
            | Input::Delete { key }
            | Input::CompareAndSet { key, .. } => key,
        }
    }

    /// The input's kind, as reports name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Put { .. } => "put",
            Input::Get { .. } => "get",
            Input::Delete { .. } => "delete",
            Input::CompareAndSet { .. } => "cas",
        }
    }
}

/// The compare of a compare-and-set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    /// The key holds this value; `None` means the key is absent.
    Value(Option<String>),
    /// The key's `mod_revision` is this; 0 means the key is absent, as in etcd.
    ModRevision(u64),
}

/// What the client learned of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The reply arrived.
    Ok(Reply),
    /// No reply arrived (timeout, lost connection): the operation took effect once at some
    /// point after its call, or never.
    Unknown,
}

/// A successful reply. Revisions are optional: a workload that does not record them still gets
/// its values checked, and one that does also gets its revisions checked. `V` is how a value is
/// held: the text in a history, an interned id in the model ([`Reply::map_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply<V = String> {
    /// The answer to a put.
    Put {
        /// The revision of the put.
        revision: Option<u64>,
    },
    /// The answer to a get.
    Get {
        /// The value read; `None` when the key was absent.
        value: Option<V>,
        /// The key's `mod_revision`; `None` (or 0) when absent or not recorded.
        mod_revision: Option<u64>,
    },
    /// The answer to a delete.
    Delete {
        /// Whether a key was deleted, when recorded.
        deleted: Option<bool>,
        /// The store's revision after the delete.
        revision: Option<u64>,
    },
    /// The answer to a compare-and-set.
    CompareAndSet {
        /// Whether the compare held and the put was applied.
        succeeded: bool,
        /// The store's revision after the txn: the put's revision when it succeeded.
        revision: Option<u64>,
    },
}

impl<V> Reply<V> {
    /// The same reply with its value, if any, passed through `map`.
    pub fn map_value<W>(&self, map: impl FnOnce(&V) -> W) -> Reply<W> {
        match *self {
            Reply::Put { revision } => Reply::Put { revision },
            Reply::Get {
                ref value,
                mod_revision,
            } => Reply::Get {
                value: value.as_ref().map(map),
                mod_revision,
            },
            Reply::Delete { deleted, revision } => Reply::Delete { deleted, revision },
            Reply::CompareAndSet {
                succeeded,
                revision,
            } => Reply::CompareAndSet {
                succeeded,
                revision,
            },
        }
    }

    /// The reply's kind, as reports name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Put { .. } => "put",
            Reply::Get { .. } => "get",
            Reply::Delete { .. } => "delete",
            Reply::CompareAndSet { .. } => "cas",
        }
    }
}

/// A history the checker cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HistoryError {
    /// An operation returned before it was called.
    #[error("operation #{op} returns at {return_ns} before its call at {call_ns}")]
    ReturnBeforeCall {
        /// The operation.
        op: OpId,
        /// Its call time.
        call_ns: u64,
        /// Its return time.
        return_ns: u64,
    },
    /// A reply of another kind than its input.
    #[error("operation #{op} is a {input} answered by a {reply} reply")]
    ReplyMismatch {
        /// The operation.
        op: OpId,
        /// The input's kind.
        input: &'static str,
        /// The reply's kind.
        reply: &'static str,
    },
}

/// Checks the invariants listed at the top of this module.
pub(crate) fn validate(history: &[Operation]) -> Result<(), HistoryError> {
    for (op, operation) in history.iter().enumerate() {
        let Outcome::Ok(reply) = &operation.outcome else {
            continue;
        };
        if operation.return_ns < operation.call_ns {
            return Err(HistoryError::ReturnBeforeCall {
                op,
                call_ns: operation.call_ns,
                return_ns: operation.return_ns,
            });
        }
        if operation.input.kind() != reply.kind() {
            return Err(HistoryError::ReplyMismatch {
                op,
                input: operation.input.kind(),
                reply: reply.kind(),
            });
        }
    }
    Ok(())
}

fn fmt_revision(f: &mut fmt::Formatter<'_>, revision: Option<u64>) -> fmt::Result {
    match revision {
        Some(revision) => write!(f, " @{revision}"),
        None => Ok(()),
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Put { key, value } => write!(f, "put({key:?}, {value:?})"),
            Input::Get { key } => write!(f, "get({key:?})"),
            Input::Delete { key } => write!(f, "delete({key:?})"),
            Input::CompareAndSet {
                key,
                expected,
                value,
            } => match expected {
                Expected::Value(expected) => write!(f, "cas({key:?}, {expected:?} -> {value:?})"),
                Expected::ModRevision(expected) => {
                    write!(f, "cas({key:?}, mod_revision {expected} -> {value:?})")
                }
            },
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Unknown => write!(f, "unknown"),
            Outcome::Ok(Reply::Put { revision }) => {
                write!(f, "ok")?;
                fmt_revision(f, *revision)
            }
            Outcome::Ok(Reply::Get {
                value,
                mod_revision,
            }) => {
                match value {
                    Some(value) => write!(f, "{value:?}")?,
                    None => write!(f, "absent")?,
                }
                fmt_revision(f, *mod_revision)
            }
            Outcome::Ok(Reply::Delete { deleted, revision }) => {
                match deleted {
                    Some(true) => write!(f, "deleted")?,
                    Some(false) => write!(f, "not found")?,
                    None => write!(f, "ok")?,
                }
                fmt_revision(f, *revision)
            }
            Outcome::Ok(Reply::CompareAndSet {
                succeeded,
                revision,
            }) => {
                write!(f, "{}", if *succeeded { "succeeded" } else { "failed" })?;
                fmt_revision(f, *revision)
            }
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {} [{}, ", self.client_id, self.call_ns)?;
        match self.outcome {
            Outcome::Unknown => write!(f, "∞)")?,
            Outcome::Ok(_) => write!(f, "{}]", self.return_ns)?,
        }
        write!(f, " {} -> {}", self.input, self.outcome)
    }
}
