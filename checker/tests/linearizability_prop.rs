//! Generated histories: a sequential execution against a `BTreeMap` with one revision counter,
//! given random overlapping call and return times around each operation's point in that order.
//! Every such history is linearizable, and stays so with outcomes forgotten (`Unknown`) or
//! extra unknown puts that never applied; replacing a read's value with one that real time
//! proves overwritten makes it not linearizable.

use std::collections::BTreeMap;

use hivekeeper_checker::linearizability::{
    Budget, Expected, Input, Operation, Outcome, Reply, Verdict, check,
};
use proptest::prelude::*;

/// An operation to generate, before the execution fills in values and replies.
#[derive(Debug, Clone)]
enum Planned {
    Put {
        key: u8,
    },
    Get {
        key: u8,
    },
    Delete {
        key: u8,
    },
    /// `current`: compare with the key's current value (succeeds), else with a stale one.
    CompareAndSet {
        key: u8,
        current: bool,
        by_revision: bool,
    },
    /// A put whose request was lost: it never applies and its outcome is unknown.
    LostPut {
        key: u8,
    },
}

/// How each planned operation is timed and recorded.
#[derive(Debug, Clone)]
struct Timing {
    /// How long before its linearization point it was called.
    before_ns: u64,
    /// How long after it returned.
    after_ns: u64,
    /// Whether its outcome is forgotten.
    unknown: bool,
}

fn planned() -> impl Strategy<Value = Planned> {
    let key = 0u8..2;
    prop_oneof![
        3 => key.clone().prop_map(|key| Planned::Put { key }),
        3 => key.clone().prop_map(|key| Planned::Get { key }),
        1 => key.clone().prop_map(|key| Planned::Delete { key }),
        2 => (key.clone(), any::<bool>(), any::<bool>()).prop_map(|(key, current, by_revision)| {
            Planned::CompareAndSet { key, current, by_revision }
        }),
        1 => key.prop_map(|key| Planned::LostPut { key }),
    ]
}

fn timing() -> impl Strategy<Value = Timing> {
    (0u64..40, 0u64..40, prop::bool::weighted(0.1)).prop_map(|(before_ns, after_ns, unknown)| {
        Timing {
            before_ns,
            after_ns,
            unknown,
        }
    })
}

/// The key-value store the execution runs against: (value, mod_revision) per key, one counter.
#[derive(Default)]
struct Store {
    keys: BTreeMap<String, (String, u64)>,
    revision: u64,
}

impl Store {
    fn write(&mut self, key: &str, value: Option<String>) -> u64 {
        self.revision += 1;
        match value {
            Some(value) => self.keys.insert(key.into(), (value, self.revision)),
            None => self.keys.remove(key),
        };
        self.revision
    }

    /// Runs `plan` as the `index`th operation, returning its input and true reply (`None` for a
    /// lost put, which never runs).
    fn run(&mut self, index: usize, plan: &Planned) -> (Input, Option<Reply>) {
        let value = format!("v{index}");
        match plan {
            Planned::Put { key } | Planned::LostPut { key } => {
                let key = format!("k{key}");
                let input = Input::Put {
                    key: key.clone(),
                    value: value.clone(),
                };
                if matches!(plan, Planned::LostPut { .. }) {
                    return (input, None);
                }
                let revision = self.write(&key, Some(value));
                (
                    input,
                    Some(Reply::Put {
                        revision: Some(revision),
                    }),
                )
            }
            Planned::Get { key } => {
                let key = format!("k{key}");
                let current = self.keys.get(&key).cloned();
                let reply = Reply::Get {
                    value: current.as_ref().map(|(value, _)| value.clone()),
                    mod_revision: current.map(|(_, revision)| revision),
                };
                (Input::Get { key }, Some(reply))
            }
            Planned::Delete { key } => {
                let key = format!("k{key}");
                let deleted = self.keys.contains_key(&key);
                let revision = if deleted {
                    self.write(&key, None)
                } else {
                    self.revision
                };
                let reply = Reply::Delete {
                    deleted: Some(deleted),
                    revision: Some(revision),
                };
                (Input::Delete { key }, Some(reply))
            }
            Planned::CompareAndSet {
                key,
                current,
                by_revision,
            } => {
                let key = format!("k{key}");
                let now = self.keys.get(&key).cloned();
                let expected = match (by_revision, current) {
                    (true, true) => Expected::ModRevision(now.map_or(0, |(_, revision)| revision)),
                    (true, false) => Expected::ModRevision(self.revision + 100),
                    (false, true) => Expected::Value(now.map(|(value, _)| value)),
                    (false, false) => Expected::Value(Some("never written".into())),
                };
                let input = Input::CompareAndSet {
                    key: key.clone(),
                    expected,
                    value: value.clone(),
                };
                let revision = if *current {
                    self.write(&key, Some(value))
                } else {
                    self.revision
                };
                let reply = Reply::CompareAndSet {
                    succeeded: *current,
                    revision: Some(revision),
                };
                (input, Some(reply))
            }
        }
    }
}

/// Executes `plans` in order, the `i`th at instant `10 i + 50`, timed by `timings`.
fn execute(plans: &[(Planned, Timing)], record_revisions: bool) -> Vec<Operation> {
    let mut store = Store::default();
    let mut history = Vec::new();
    for (index, (plan, timing)) in plans.iter().enumerate() {
        let point_ns = 10 * index as u64 + 50;
        let (input, reply) = store.run(index, plan);
        let outcome = match reply {
            Some(reply) if !timing.unknown => Outcome::Ok(strip(reply, record_revisions)),
            _ => Outcome::Unknown,
        };
        history.push(Operation {
            client_id: index as u64 % 5,
            call_ns: point_ns - timing.before_ns,
            return_ns: point_ns + timing.after_ns,
            input,
            outcome,
        });
    }
    history
}

/// Forgets the reply's revisions when the workload does not record them.
fn strip(reply: Reply, record_revisions: bool) -> Reply {
    if record_revisions {
        return reply;
    }
    match reply {
        Reply::Put { .. } => Reply::Put { revision: None },
        Reply::Get { value, .. } => Reply::Get {
            value,
            mod_revision: None,
        },
        Reply::Delete { deleted, .. } => Reply::Delete {
            deleted,
            revision: None,
        },
        Reply::CompareAndSet { succeeded, .. } => Reply::CompareAndSet {
            succeeded,
            revision: None,
        },
    }
}

/// The value a known write left on its key (`None` for a delete), if it changed the key.
fn written(operation: &Operation) -> Option<Option<&str>> {
    match (&operation.input, &operation.outcome) {
        (Input::Put { value, .. }, Outcome::Ok(_))
        | (
            Input::CompareAndSet { value, .. },
            Outcome::Ok(Reply::CompareAndSet {
                succeeded: true, ..
            }),
        ) => Some(Some(value)),
        (
            Input::Delete { .. },
            Outcome::Ok(Reply::Delete {
                deleted: Some(true),
                ..
            }),
        ) => Some(None),
        _ => None,
    }
}

/// Reads whose value can be replaced by an older one that real time proves overwritten: a
/// known write `old` of another value returned before a known write `newer` of the key was
/// called, which returned before the read was called. Values are unique per write, so reading
/// `old`'s value places the read between `old` and `newer`, which real time forbids.
fn stale_candidates(history: &[Operation]) -> Vec<(usize, String)> {
    let mut candidates = Vec::new();
    for (read, get) in history.iter().enumerate() {
        let Outcome::Ok(Reply::Get { value: seen, .. }) = &get.outcome else {
            continue;
        };
        for old in history {
            let Some(Some(old_value)) = written(old) else {
                continue;
            };
            if old.input.key() != get.input.key() || seen.as_deref() == Some(old_value) {
                continue;
            }
            let overwritten = history.iter().any(|newer| {
                written(newer).is_some()
                    && newer.input.key() == get.input.key()
                    && old.return_ns < newer.call_ns
                    && newer.return_ns < get.call_ns
            });
            if overwritten {
                candidates.push((read, old_value.to_owned()));
            }
        }
    }
    candidates
}

fn history_strategy() -> impl Strategy<Value = (Vec<(Planned, Timing)>, bool)> {
    (
        prop::collection::vec((planned(), timing()), 1..80),
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_sequential_execution_with_overlapping_timing_is_linearizable(
        (plans, record_revisions) in history_strategy()
    ) {
        let history = execute(&plans, record_revisions);
        let verdict = check(&history, &Budget::default()).expect("well-formed history");
        prop_assert!(verdict.is_linearizable(), "{}", verdict);
    }

    #[test]
    fn a_read_of_a_provably_overwritten_value_is_rejected(
        (plans, record_revisions) in history_strategy(),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut history = execute(&plans, record_revisions);
        let candidates = stale_candidates(&history);
        prop_assume!(!candidates.is_empty());
        let (read, stale) = candidates[pick.index(candidates.len())].clone();
        history[read].outcome = Outcome::Ok(Reply::Get {
            value: Some(stale),
            mod_revision: None,
        });
        let verdict = check(&history, &Budget::default()).expect("well-formed history");
        let rejected = matches!(&verdict, Verdict::NotLinearizable(counterexample)
            if counterexample.key == history[read].input.key());
        prop_assert!(rejected, "{}", verdict);
    }
}

/// A deterministic plan of `len` operations from a linear congruential generator, so the size
/// test needs no proptest run.
fn plan_from_seed(len: usize, mut seed: u64) -> Vec<(Planned, Timing)> {
    let mut next = move |bound: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % bound
    };
    (0..len)
        .map(|_| {
            let key = next(2) as u8;
            let plan = match next(10) {
                0..=2 => Planned::Put { key },
                3..=5 => Planned::Get { key },
                6 => Planned::Delete { key },
                7 | 8 => Planned::CompareAndSet {
                    key,
                    current: next(2) == 0,
                    by_revision: next(2) == 0,
                },
                _ => Planned::LostPut { key },
            };
            let timing = Timing {
                before_ns: next(40),
                after_ns: next(40),
                unknown: next(100) < 2,
            };
            (plan, timing)
        })
        .collect()
}

#[test]
fn five_thousand_operations_are_checked_within_the_default_budget() {
    for seed in 1..=3 {
        let history = execute(&plan_from_seed(5000, seed), seed % 2 == 0);
        let verdict = check(&history, &Budget::default()).expect("well-formed history");
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict}");
    }
}
