//! Model test of the key space: random calls against [`Model`], a naive `BTreeMap` of keys and
//! a `Vec` of events written from the module docs (linear scans, a clone per call that is
//! thrown away on a refusal, compaction by `retain`).
//!
//! The universe is small so that limits, reserved keys, leases and compaction are hit often:
//! six keys (two reserved, two pairs sharing a prefix), values up to past `value_bytes_max`,
//! three leases, and tight bounds. Each step's revision is the last accepted one plus 0 to 2
//! (0 must be refused). After every step the test compares the answer (the exact refusal too),
//! the keys, the lease index, the byte count, the whole history, the revisions, and a watch
//! page from a random cursor, and runs `check_invariants()`. A step also replaces the key
//! space by its JSON round trip, which must be equal.
//!
//! ```text
//! cargo test -p hivekeeper-state-machine --lib kv::model_test
//! PROPTEST_CASES=20000 cargo test -p hivekeeper-state-machine --lib kv::model_test --release
//! ```

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use crate::kv_test::no_holds;
use crate::{
    Compacted, Compare, CompareOp, CompareTarget, Deleted, EventKind, Get, KeySelector, KeySpace,
    KeyValue, KvError, KvEvent, KvLimits, LeaseId, Put, PutResult, RangePage, Txn, TxnOp,
    TxnOutcome, TxnResult, WatchPage, Writer,
};

const KEYS: [&str; 6] = ["a", "ab", "b", "ba", "$s", "$t"];
const PREFIXES: [&str; 5] = ["", "a", "b", "$", "c"];
const VALUES: [&str; 4] = ["", "x", "yyyy", "zzzzzzz"];
const LEASES: [u64; 3] = [1, 2, 3];

fn limits() -> KvLimits {
    KvLimits {
        keys_max: 4,
        bytes_max: 24,
        keys_per_lease_max: 2,
        key_bytes_max: 512,
        value_bytes_max: 6,
        history_events_max: 6,
        history_bytes_max: 30,
    }
}

/// A key or a prefix of the universe.
#[derive(Debug, Clone)]
enum Target {
    Key(usize),
    Prefix(usize),
}

impl Target {
    fn selector(&self) -> KeySelector {
        match self {
            Target::Key(key) => KeySelector::Key(KEYS[*key].to_string()),
            Target::Prefix(prefix) => KeySelector::Prefix(PREFIXES[*prefix].to_string()),
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Put {
        put: Put,
        writer: Writer,
    },
    Delete {
        target: Target,
        writer: Writer,
    },
    /// `version(key) == version`, then puts, else a prefix delete.
    Txn {
        key: usize,
        version: u64,
        puts: Vec<Put>,
        failure_prefix: usize,
        writer: Writer,
    },
    EndLeases(Vec<u64>),
    Restore,
}

fn writer() -> impl Strategy<Value = Writer> {
    prop_oneof![4 => Just(Writer::Client), 1 => Just(Writer::Service)]
}

fn put() -> impl Strategy<Value = Put> {
    (
        0..KEYS.len(),
        0..VALUES.len(),
        prop::option::of(prop::sample::select(&LEASES[..])),
        any::<bool>(),
    )
        .prop_map(|(key, value, lease, prev_kv)| Put {
            key: KEYS[key].to_string(),
            value: VALUES[value].to_string(),
            lease: lease.map(|lease| LeaseId(lease).to_string()),
            prev_kv,
        })
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (0..KEYS.len()).prop_map(Target::Key),
        (0..PREFIXES.len()).prop_map(Target::Prefix),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (put(), writer()).prop_map(|(put, writer)| Step::Put { put, writer }),
        2 => (target(), writer()).prop_map(|(target, writer)| Step::Delete { target, writer }),
        2 => (0..KEYS.len(), 0..3u64, prop::collection::vec(put(), 0..3), 0..PREFIXES.len(), writer())
            .prop_map(|(key, version, puts, failure_prefix, writer)| Step::Txn {
                key,
                version,
                puts,
                failure_prefix,
                writer,
            }),
        1 => prop::collection::vec(prop::sample::select(&LEASES[..]), 1..3).prop_map(Step::EndLeases),
        1 => Just(Step::Restore),
    ]
}

/// The naive key space.
#[derive(Debug, Clone, Default)]
struct Model {
    keys: BTreeMap<String, KeyValue>,
    history: Vec<KvEvent>,
    compact_revision: u64,
    revision: u64,
}

fn event_bytes(event: &KvEvent) -> u64 {
    (event.kv.key.len() + event.kv.value.len()) as u64
}

impl Model {
    fn bytes(&self) -> u64 {
        self.keys
            .values()
            .map(|kv| (kv.key.len() + kv.value.len()) as u64)
            .sum()
    }

    /// Runs `change` on a copy at `revision`; keeps the copy, trimmed, only when it succeeds.
    fn commit<T>(
        &mut self,
        revision: u64,
        change: impl FnOnce(&mut Model) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        if revision <= self.revision {
            return Err(KvError::RevisionNotIncreasing {
                last: self.revision,
                got: revision,
            });
        }
        let mut copy = self.clone();
        let answer = change(&mut copy)?;
        copy.revision = revision;
        let limits = limits();
        loop {
            let bytes: u64 = copy.history.iter().map(event_bytes).sum();
            if copy.history.len() <= limits.history_events_max as usize
                && bytes <= limits.history_bytes_max
            {
                break;
            }
            let oldest = copy.history[0].revision;
            copy.history.retain(|event| event.revision != oldest);
            copy.compact_revision = oldest;
        }
        *self = copy;
        Ok(answer)
    }

    fn check_write(writer: Writer, key: &str) -> Result<(), KvError> {
        if writer == Writer::Client && key.starts_with('$') {
            return Err(KvError::Reserved {
                key: key.to_string(),
            });
        }
        Ok(())
    }

    fn check_put(writer: Writer, put: &Put) -> Result<(), KvError> {
        Model::check_write(writer, &put.key)?;
        if put.value.len() > 6 {
            return Err(KvError::ValueLength {
                len: put.value.len(),
                max: 6,
            });
        }
        Ok(())
    }

    fn check_delete(writer: Writer, selector: &KeySelector) -> Result<(), KvError> {
        match selector {
            KeySelector::Key(key) | KeySelector::Prefix(key) => Model::check_write(writer, key),
        }
    }

    fn put_in(&mut self, revision: u64, put: Put) -> Result<PutResult, KvError> {
        let old = self.keys.get(&put.key).cloned();
        if old.is_none() && self.keys.len() >= 4 {
            return Err(KvError::KeysFull { max: 4 });
        }
        let old_bytes = old.as_ref().map_or(0, |kv| kv.key.len() + kv.value.len());
        let bytes = self.bytes() - old_bytes as u64 + (put.key.len() + put.value.len()) as u64;
        if bytes > 24 {
            return Err(KvError::BytesFull { bytes, max: 24 });
        }
        if let Some(lease) = &put.lease {
            let bound = self
                .keys
                .values()
                .filter(|kv| kv.lease.as_ref() == Some(lease))
                .count();
            let already = old
                .as_ref()
                .is_some_and(|kv| kv.lease.as_ref() == Some(lease));
            if !already && bound >= 2 {
                let lease = LeaseId::parse(lease).expect("a lease id");
                return Err(KvError::LeaseKeysFull { lease, max: 2 });
            }
        }
        let kv = KeyValue {
            key: put.key.clone(),
            value: put.value.clone(),
            create_revision: old.as_ref().map_or(revision, |kv| kv.create_revision),
            mod_revision: revision,
            version: old.as_ref().map_or(0, |kv| kv.version) + 1,
            lease: put.lease,
        };
        self.keys.insert(put.key.clone(), kv.clone());
        self.history.push(KvEvent {
            revision,
            kind: EventKind::Put,
            kv,
        });
        Ok(PutResult {
            prev_kv: if put.prev_kv { old } else { None },
        })
    }

    fn delete_in(&mut self, revision: u64, writer: Writer, selector: &KeySelector) -> Deleted {
        let doomed: Vec<String> = self
            .keys
            .keys()
            .filter(|key| selector.matches(key))
            .filter(|key| {
                writer == Writer::Service
                    || matches!(selector, KeySelector::Key(_))
                    || !key.starts_with('$')
            })
            .cloned()
            .collect();
        for key in &doomed {
            self.remove(revision, key);
        }
        Deleted {
            deleted: doomed.len() as u64,
        }
    }

    fn remove(&mut self, revision: u64, key: &str) {
        let kv = self.keys.remove(key).expect("listed");
        self.history.push(KvEvent {
            revision,
            kind: EventKind::Delete,
            kv,
        });
    }

    fn txn(&mut self, revision: u64, writer: Writer, txn: Txn) -> Result<TxnOutcome, KvError> {
        for branch in [&txn.success, &txn.failure] {
            for op in branch {
                match op {
                    TxnOp::Put(put) => Model::check_put(writer, put)?,
                    TxnOp::Delete(delete) => {
                        Model::check_delete(writer, &delete.selector().expect("a selector"))?
                    }
                    TxnOp::Get { .. } => {}
                }
            }
            let mut puts: Vec<&str> = Vec::new();
            for op in branch {
                if let TxnOp::Put(put) = op {
                    if puts.contains(&put.key.as_str()) {
                        return Err(KvError::TxnDuplicateKey {
                            key: put.key.clone(),
                        });
                    }
                    puts.push(&put.key);
                }
            }
            let puts: BTreeSet<&str> = puts.into_iter().collect();
            for op in branch {
                if let TxnOp::Delete(delete) = op
                    && let Ok(selector) = delete.selector()
                    && let Some(key) = puts.iter().find(|key| selector.matches(key))
                {
                    return Err(KvError::TxnDuplicateKey {
                        key: key.to_string(),
                    });
                }
            }
        }
        let succeeded = txn.compare.iter().all(|compare| match compare {
            Compare::Key {
                key,
                op: CompareOp::Eq,
                target: CompareTarget::Version(version),
            } => self.keys.get(key).map_or(0, |kv| kv.version) == *version,
            _ => unreachable!("the model draws version equality only"),
        });
        let branch = if succeeded { txn.success } else { txn.failure };
        self.commit(revision, |model| {
            let mut results = Vec::new();
            for op in branch {
                results.push(match op {
                    TxnOp::Put(put) => TxnResult::Put(model.put_in(revision, put)?),
                    TxnOp::Delete(delete) => {
                        let selector = delete.selector().expect("a selector");
                        TxnResult::Delete(model.delete_in(revision, writer, &selector))
                    }
                    TxnOp::Get { .. } => TxnResult::Get(RangePage {
                        kvs: model.keys.values().cloned().collect(),
                        next_after: None,
                    }),
                });
            }
            Ok(TxnOutcome { succeeded, results })
        })
    }

    fn end_leases(&mut self, revision: u64, leases: &[u64]) -> Result<Vec<KvEvent>, KvError> {
        self.commit(revision, |model| {
            let start = model.history.len();
            for lease in leases {
                let doomed: Vec<String> = model
                    .keys
                    .values()
                    .filter(|kv| kv.lease == Some(LeaseId(*lease).to_string()))
                    .map(|kv| kv.key.clone())
                    .collect();
                for key in doomed {
                    model.remove(revision, &key);
                }
            }
            Ok(model.history[start..].to_vec())
        })
    }

    fn page(
        &self,
        after: u64,
        selector: &KeySelector,
        max_events: usize,
    ) -> Result<WatchPage, Compacted> {
        if after < self.compact_revision {
            return Err(Compacted {
                compact_revision: self.compact_revision,
            });
        }
        let mut revisions: BTreeMap<u64, Vec<KvEvent>> = BTreeMap::new();
        for event in &self.history {
            if event.revision > after && selector.matches(&event.kv.key) {
                revisions
                    .entry(event.revision)
                    .or_default()
                    .push(event.clone());
            }
        }
        let mut events: Vec<KvEvent> = Vec::new();
        for (_, group) in revisions {
            if !events.is_empty() && events.len() + group.len() > max_events {
                let next = events.last().expect("not empty").revision;
                return Ok(WatchPage {
                    events,
                    next,
                    next_key: None,
                    progress: None,
                });
            }
            events.extend(group);
        }
        let progress = self.revision.max(after);
        Ok(WatchPage {
            events,
            next: progress,
            next_key: None,
            progress: Some(progress),
        })
    }
}

/// Applies one step to both and compares the answers.
fn apply(
    space: &mut KeySpace,
    model: &mut Model,
    revision: u64,
    step: Step,
) -> Result<(), TestCaseError> {
    match step {
        Step::Put { put, writer } => {
            let expected = Model::check_put(writer, &put)
                .and_then(|()| model.commit(revision, |model| model.put_in(revision, put.clone())));
            prop_assert_eq!(space.put(revision, writer, put), expected);
        }
        Step::Delete { target, writer } => {
            let selector = target.selector();
            let expected = Model::check_delete(writer, &selector).and_then(|()| {
                model.commit(revision, |model| {
                    Ok(model.delete_in(revision, writer, &selector))
                })
            });
            prop_assert_eq!(space.delete(revision, writer, &selector), expected);
        }
        Step::Txn {
            key,
            version,
            puts,
            failure_prefix,
            writer,
        } => {
            let mut success: Vec<TxnOp> = puts.into_iter().map(TxnOp::Put).collect();
            success.push(TxnOp::Get(Get::new(
                KeySelector::Prefix(String::new()),
                None,
                Some(100),
            )));
            let txn = Txn {
                compare: vec![Compare::Key {
                    key: KEYS[key].to_string(),
                    op: CompareOp::Eq,
                    target: CompareTarget::Version(version),
                }],
                success,
                failure: vec![TxnOp::Delete(
                    KeySelector::Prefix(PREFIXES[failure_prefix].to_string()).into(),
                )],
            };
            let expected = model.txn(revision, writer, txn.clone());
            prop_assert_eq!(space.txn(revision, writer, txn, &no_holds), expected);
        }
        Step::EndLeases(leases) => {
            let ids: Vec<LeaseId> = leases.iter().copied().map(LeaseId).collect();
            let expected = model.end_leases(revision, &leases);
            prop_assert_eq!(space.end_leases(revision, &ids), expected);
        }
        Step::Restore => {
            let bytes = serde_json::to_vec(&*space).expect("serializes");
            let restored: KeySpace = serde_json::from_slice(&bytes).expect("deserializes");
            prop_assert_eq!(&restored, &*space);
            *space = restored;
        }
    }
    Ok(())
}

/// The key space's state against the model's.
fn compare(space: &KeySpace, model: &Model) -> Result<(), TestCaseError> {
    if let Err(broken) = space.check_invariants() {
        return Err(TestCaseError::fail(broken.to_string()));
    }
    let keys: Vec<KeyValue> = model.keys.values().cloned().collect();
    prop_assert_eq!(&space.range("", None, 100).kvs, &keys);
    prop_assert_eq!(space.bytes(), model.bytes());
    prop_assert_eq!(space.revision(), model.revision);
    prop_assert_eq!(space.compact_revision(), model.compact_revision);
    let all = KeySelector::Prefix(String::new());
    let history = space.events_after(model.compact_revision, &all, usize::MAX);
    prop_assert_eq!(history.map(|page| page.events), Ok(model.history.clone()));
    for lease in LEASES {
        let expected: Vec<&str> = keys
            .iter()
            .filter(|kv| kv.lease == Some(LeaseId(lease).to_string()))
            .map(|kv| kv.key.as_str())
            .collect();
        prop_assert_eq!(
            space.lease_keys(LeaseId(lease)).collect::<Vec<_>>(),
            expected
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn the_key_space_behaves_as_the_naive_model(
        steps in prop::collection::vec(
            (prop_oneof![1 => Just(0u64), 4 => Just(1u64), 2 => Just(2u64)], step()),
            1..60,
        ),
        watches in prop::collection::vec((0..8u64, target(), 0..4usize), 60),
    ) {
        let mut space = KeySpace::new(limits());
        let mut model = Model::default();
        for ((gap, step), (back, target, max_events)) in steps.into_iter().zip(watches) {
            let revision = model.revision + gap;
            apply(&mut space, &mut model, revision, step)?;
            compare(&space, &model)?;
            let after = model.revision.saturating_sub(back);
            let selector = target.selector();
            prop_assert_eq!(
                space.events_after(after, &selector, max_events),
                model.page(after, &selector, max_events)
            );
        }
    }
}
