//! Model-based property test: random appends, truncations, purges, reads and reopens against
//! the real log and a `BTreeMap` of what it should hold, with the invariants checked after
//! every step.

use std::collections::BTreeMap;

use hivekeeper_segment_log::{SegmentLog, SegmentLogConfig, SegmentLogError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Append a batch with these payload sizes (each payload's bytes come from `seed`); with
    /// `split`, as `write` then `sync`.
    Append {
        sizes: Vec<usize>,
        seed: u8,
        split: bool,
    },
    /// Append one entry `skip + 1` past the next index: refused, nothing changes.
    AppendOutOfOrder { skip: u64 },
    /// `truncate_after(last - back)`.
    TruncateAfter { back: u64 },
    /// `purge_upto(first + ahead)`, which may run past the end.
    PurgeUpto { ahead: u64 },
    /// Entries `from..to`, offsets from the model's first index.
    Read { from: u64, len: u64 },
    /// Close and open again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::collection::vec(0usize..200, 1..5), any::<u8>(), any::<bool>())
            .prop_map(|(sizes, seed, split)| Op::Append { sizes, seed, split }),
        1 => (0u64..3).prop_map(|skip| Op::AppendOutOfOrder { skip }),
        2 => (0u64..12).prop_map(|back| Op::TruncateAfter { back }),
        2 => (0u64..30).prop_map(|ahead| Op::PurgeUpto { ahead }),
        2 => (0u64..20, 0u64..20).prop_map(|(from, len)| Op::Read { from, len }),
        2 => Just(Op::Reopen),
    ]
}

/// What the log should hold.
#[derive(Debug, Default)]
struct Model {
    /// Every entry that may still be stored: a purge drops entries lazily (whole segments), so
    /// entries at or below `purged` stay here and are compared only where the log has them.
    entries: BTreeMap<u64, Vec<u8>>,
    /// The highest index purged.
    purged: Option<u64>,
    /// The index the next append must carry (`None` while fresh).
    next: Option<u64>,
}

fn payload(index: u64, size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|at| (index as u8).wrapping_mul(31) ^ seed ^ (at as u8))
        .collect()
}

fn check(log: &SegmentLog, model: &Model) -> Result<(), TestCaseError> {
    log.check_invariants()
        .map_err(|violation| TestCaseError::fail(violation.to_string()))?;
    prop_assert_eq!(log.next_index(), model.next);
    prop_assert_eq!(log.last_index(), model.entries.keys().next_back().copied());
    match log.first_index() {
        None => prop_assert!(model.entries.is_empty()),
        Some(first) => {
            // Lazily purged: the log starts no later than the first unpurged entry, and holds
            // nothing the model does not.
            let first_live = model
                .entries
                .keys()
                .find(|&&index| model.purged.is_none_or(|purged| index > purged));
            if let Some(&first_live) = first_live {
                prop_assert!(first <= first_live, "first {} live {}", first, first_live);
            }
            prop_assert!(Some(&first) >= model.entries.keys().next());
            let want: Vec<(u64, Vec<u8>)> = model
                .entries
                .range(first..)
                .map(|(&index, bytes)| (index, bytes.clone()))
                .collect();
            prop_assert_eq!(log.read(..).map_err(fail)?, want);
        }
    }
    Ok(())
}

fn fail(error: SegmentLogError) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_log_matches_a_map_through_any_sequence(
        segment_bytes in 256u64..1200,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = SegmentLogConfig { segment_bytes };
        let mut log = SegmentLog::open(dir.path(), config).map_err(fail)?;
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Append { sizes, seed, split } => {
                    let start = model.next.unwrap_or(1);
                    let batch: Vec<(u64, Vec<u8>)> = sizes
                        .iter()
                        .enumerate()
                        .map(|(at, &size)| {
                            let index = start + at as u64;
                            (index, payload(index, size, seed))
                        })
                        .collect();
                    if split {
                        log.write(batch.clone()).map_err(fail)?;
                        // Readable before the sync.
                        let written = log.read(start..).map_err(fail)?;
                        prop_assert_eq!(&written, &batch);
                        log.sync().map_err(fail)?;
                    } else {
                        log.append(batch.clone()).map_err(fail)?;
                    }
                    model.next = Some(start + batch.len() as u64);
                    model.entries.extend(batch);
                }
                Op::AppendOutOfOrder { skip } => {
                    let Some(next) = model.next else { continue };
                    let index = next + 1 + skip;
                    let refused = log.append([(index, b"x")]);
                    let expected_error = matches!(
                        refused,
                        Err(SegmentLogError::OutOfOrder { expected, found })
                            if expected == next && found == index
                    );
                    prop_assert!(expected_error, "{:?}", refused);
                }
                Op::TruncateAfter { back } => {
                    let (Some(first), Some(last)) = (log.first_index(), log.last_index()) else {
                        log.truncate_after(back).map_err(fail)?;
                        continue;
                    };
                    let Some(index) = last.checked_sub(back) else { continue };
                    let result = log.truncate_after(index);
                    if index + 1 < first {
                        let refused = matches!(
                            result,
                            Err(SegmentLogError::TruncateBeforeStart { .. })
                        );
                        prop_assert!(refused, "{:?}", result);
                    } else {
                        result.map_err(fail)?;
                        if index < last {
                            // Entries below the log's first index were purged (lazily
                            // kept by the model): the truncation leaves none of them.
                            model.entries.retain(|&at, _| at >= first && at <= index);
                            model.next = Some(index + 1);
                        }
                    }
                }
                Op::PurgeUpto { ahead } => {
                    let base = model.entries.keys().next().copied().or(model.next).unwrap_or(0);
                    let index = base + ahead;
                    log.purge_upto(index).map_err(fail)?;
                    model.purged = model.purged.max(Some(index));
                    if model.next.is_none_or(|next| next <= index + 1) {
                        model.entries.clear();
                        model.next = Some(index + 1);
                    }
                }
                Op::Read { from, len } => {
                    let Some(first) = log.first_index() else { continue };
                    let (from, to) = (first + from, first + from + len);
                    let want: Vec<(u64, Vec<u8>)> = model
                        .entries
                        .range(from..to)
                        .map(|(&index, bytes)| (index, bytes.clone()))
                        .collect();
                    prop_assert_eq!(log.read(from..to).map_err(fail)?, want);
                }
                Op::Reopen => {
                    drop(log);
                    log = SegmentLog::open(dir.path(), config).map_err(fail)?;
                    prop_assert_eq!(log.recovered(), None);
                }
            }
            check(&log, &model)?;
        }
    }
}
