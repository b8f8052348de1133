//! Truncate, purge and reopen round trips, and the exact errors of bad calls.

mod common;

use common::{append_range, expected, open, payload, segments};
use hivekeeper_segment_log::{SegmentLog, SegmentLogConfig, SegmentLogError};

/// A log of entries 1..=40, one append each, over several 1 KiB segments.
fn forty(dir: &std::path::Path) -> SegmentLog {
    let mut log = open(dir);
    for index in 1..=40 {
        append_range(&mut log, index, index);
    }
    assert!(segments(dir).len() >= 3);
    log
}

#[test]
fn a_fresh_log_is_empty_and_starts_where_its_first_append_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    assert_eq!(
        (log.first_index(), log.last_index(), log.next_index()),
        (None, None, None)
    );
    assert_eq!(log.read(..).expect("reads"), Vec::new());
    append_range(&mut log, 7, 9);
    assert_eq!(
        (log.first_index(), log.last_index(), log.next_index()),
        (Some(7), Some(9), Some(10))
    );
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.read(..).expect("reads"), expected(7, 9));
    assert_eq!(log.read(8..=8).expect("reads"), expected(8, 8));
    assert_eq!(log.read(8..).expect("reads"), expected(8, 9));
    assert_eq!(log.read(..8).expect("reads"), expected(7, 7));
    assert_eq!(log.read(10..).expect("reads"), Vec::new());
    assert_eq!(log.read(0..7).expect("reads"), Vec::new());
}

/// Entries cut by a truncation never come back, even when the new entries are shorter than the
/// old ones (the cut zeroes the old bytes).
#[test]
fn truncated_entries_stay_gone_after_shorter_rewrites_and_a_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    append_range(&mut log, 1, 8);
    log.truncate_after(5).expect("truncates");
    log.check_invariants().expect("invariants hold");
    assert_eq!(log.last_index(), Some(5));
    log.append([(6, b"six".as_slice())]).expect("appends");
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.recovered(), None);
    let mut want = expected(1, 5);
    want.push((6, b"six".to_vec()));
    assert_eq!(log.read(..).expect("reads"), want);
}

#[test]
fn a_truncation_across_segments_removes_the_newer_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    let files = segments(dir.path());
    log.truncate_after(12).expect("truncates");
    log.check_invariants().expect("invariants hold");
    assert_eq!(log.last_index(), Some(12));
    assert_eq!(segments(dir.path()), files[..1].to_vec());
    append_range(&mut log, 13, 15);
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.read(..).expect("reads"), expected(1, 15));
    assert!(segments(dir.path()).len() < files.len());
}

#[test]
fn a_truncation_to_before_the_first_entry_empties_the_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    log.truncate_after(0).expect("truncates");
    assert_eq!(
        (log.first_index(), log.last_index(), log.next_index()),
        (None, None, Some(1))
    );
    drop(log);
    let mut log = open(dir.path());
    assert_eq!(log.next_index(), Some(1));
    append_range(&mut log, 1, 2);
    assert_eq!(log.read(..).expect("reads"), expected(1, 2));
}

/// `truncate_from` reaches what `truncate_after` cannot: index 0 (a Raft `truncate_after(None)`
/// on a log that starts at 0), and an index below the first stored entry empties the log.
#[test]
fn truncate_from_empties_a_log_starting_at_zero_and_clamps_below_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    append_range(&mut log, 0, 30);
    log.truncate_from(31).expect("a no-op past the end");
    assert_eq!(log.last_index(), Some(30));
    log.truncate_from(12).expect("truncates");
    log.check_invariants().expect("invariants hold");
    assert_eq!(log.read(..).expect("reads"), expected(0, 11));
    log.truncate_from(0).expect("empties");
    log.check_invariants().expect("invariants hold");
    assert_eq!(
        (log.first_index(), log.last_index(), log.next_index()),
        (None, None, Some(0))
    );
    drop(log);
    let mut log = open(dir.path());
    assert_eq!(log.next_index(), Some(0));
    append_range(&mut log, 0, 3);
    assert_eq!(log.read(..).expect("reads"), expected(0, 3));

    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    log.purge_upto(20).expect("purges");
    let first = log.first_index().expect("entries remain");
    log.truncate_from(first - 1)
        .expect("below the start: empties");
    assert_eq!(
        (log.first_index(), log.last_index(), log.next_index()),
        (None, None, Some(first))
    );
}

#[test]
fn truncating_past_the_end_is_a_no_op_and_before_the_start_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    log.truncate_after(40).expect("a no-op");
    log.truncate_after(99).expect("a no-op");
    assert_eq!(log.last_index(), Some(40));
    log.purge_upto(20).expect("purges");
    let first = log.first_index().expect("entries remain");
    assert!(first > 1 && first <= 21, "first {first}");
    let error = log.truncate_after(first - 2).expect_err("below the start");
    assert_eq!(
        error.to_string(),
        format!(
            "cannot truncate after index {}: the log starts at {first}",
            first - 2
        )
    );
    assert_eq!(log.last_index(), Some(40));
}

#[test]
fn a_purge_drops_whole_segments_and_survives_a_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    let files = segments(dir.path());
    log.purge_upto(20).expect("purges");
    log.check_invariants().expect("invariants hold");
    let first = log.first_index().expect("entries remain");
    // The segment holding 21 is kept whole; every older one is gone.
    assert!(first <= 21);
    let kept = segments(dir.path());
    assert!(kept.len() < files.len());
    assert_eq!(kept, files[files.len() - kept.len()..].to_vec());
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.first_index(), Some(first));
    assert_eq!(log.read(21..).expect("reads"), expected(21, 40));
    assert_eq!(log.read(..).expect("reads"), expected(first, 40));
}

/// After a snapshot installed from the leader, the log is purged past its end and continues
/// at the snapshot's next index, across a reopen.
#[test]
fn a_purge_past_the_end_moves_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    log.purge_upto(100).expect("purges");
    log.check_invariants().expect("invariants hold");
    assert_eq!(
        (log.first_index(), log.last_index(), log.next_index()),
        (None, None, Some(101))
    );
    assert_eq!(segments(dir.path()).len(), 1);
    drop(log);
    let mut log = open(dir.path());
    assert_eq!(log.next_index(), Some(101));
    let error = log.append([(50, b"old")]).expect_err("out of order");
    assert_eq!(
        error.to_string(),
        "append out of order: the next index is 101, the entry has 50"
    );
    append_range(&mut log, 101, 103);
    assert_eq!(log.read(..).expect("reads"), expected(101, 103));
}

#[test]
fn a_purge_of_a_fresh_log_sets_its_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    log.purge_upto(9).expect("purges");
    assert_eq!(log.next_index(), Some(10));
    drop(log);
    assert_eq!(open(dir.path()).next_index(), Some(10));
}

/// A bad batch writes nothing: not the valid entries before the bad one either.
#[test]
fn a_bad_batch_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    append_range(&mut log, 1, 3);
    let before = std::fs::read(&segments(dir.path())[0]).expect("reads");
    let error = log
        .append([(4, payload(4)), (6, payload(6))])
        .expect_err("a hole");
    assert!(
        matches!(
            error,
            SegmentLogError::OutOfOrder {
                expected: 5,
                found: 6
            }
        ),
        "{error:?}"
    );
    let huge = vec![7u8; 2000];
    let error = log
        .append([(4, payload(4)), (5, huge)])
        .expect_err("too large");
    assert_eq!(
        error.to_string(),
        "entry 5 is 2000 bytes; a segment holds at most 984"
    );
    assert_eq!(log.last_index(), Some(3));
    assert_eq!(
        std::fs::read(&segments(dir.path())[0]).expect("reads"),
        before
    );
    // Neither error poisons the log: it was refused before anything was written.
    append_range(&mut log, 4, 4);
}

#[test]
fn the_largest_index_is_refused_rather_than_overflowing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    let error = log
        .append([(u64::MAX, b"last")])
        .expect_err("no room after it");
    assert_eq!(
        error.to_string(),
        "entry index 18446744073709551615 is the largest there is; the log cannot continue after it"
    );
    assert_eq!(segments(dir.path()).len(), 0);
    log.purge_upto(u64::MAX)
        .expect("nothing can follow it: a no-op");
    assert_eq!(log.next_index(), None);
}

/// `write` makes entries readable at once; `sync` makes them durable. Unsynced writes that
/// cross several segments are sealed at each roll, so the log reopens whole.
#[test]
fn written_entries_are_readable_before_the_sync_and_survive_a_reopen_after_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    log.write((1..=3).map(|index| (index, payload(index))))
        .expect("writes");
    assert_eq!(log.read(..).expect("reads"), expected(1, 3));
    for index in 4..=40 {
        log.write([(index, payload(index))]).expect("writes");
    }
    assert!(segments(dir.path()).len() >= 3);
    log.sync().expect("syncs");
    log.check_invariants().expect("invariants hold");
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.recovered(), None);
    assert_eq!(log.read(..).expect("reads"), expected(1, 40));
}

/// The adapter's shape: one writer thread writes under the exclusive lock and syncs under a
/// shared one, while another thread reads under shared locks; every read sees a prefix.
#[test]
fn a_reader_thread_reads_while_the_writer_syncs() {
    use std::sync::{Arc, RwLock};
    let dir = tempfile::tempdir().expect("temp dir");
    let log = Arc::new(RwLock::new(open(dir.path())));
    let reader_log = log.clone();
    let reader = std::thread::spawn(move || {
        for _ in 0..200 {
            let entries = reader_log
                .read()
                .expect("not poisoned")
                .read(..)
                .expect("reads");
            assert_eq!(entries, expected(1, entries.len() as u64));
        }
    });
    for index in 1..=60 {
        log.write()
            .expect("not poisoned")
            .write([(index, payload(index))])
            .expect("writes");
        log.read().expect("not poisoned").sync().expect("syncs");
    }
    reader.join().expect("the reader ends");
    assert_eq!(
        log.read().expect("not poisoned").read(..).expect("reads"),
        expected(1, 60)
    );
}

#[test]
fn an_empty_batch_is_a_no_op() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    log.append(Vec::<(u64, Vec<u8>)>::new())
        .expect("nothing to do");
    assert_eq!(segments(dir.path()).len(), 0);
}

#[test]
fn a_config_out_of_range_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let error = SegmentLog::open(dir.path(), SegmentLogConfig { segment_bytes: 100 })
        .expect_err("too small");
    assert_eq!(
        error.to_string(),
        "config: segment_bytes = 100: must be between 256 bytes and 1 GiB"
    );
}

/// Reopening with another segment size keeps the old files as they are and uses the new size
/// for new segments.
#[test]
fn a_new_segment_size_applies_to_new_segments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = forty(dir.path());
    drop(log);
    log = SegmentLog::open(
        dir.path(),
        SegmentLogConfig {
            segment_bytes: 4096,
        },
    )
    .expect("opens");
    for index in 41..=80 {
        append_range(&mut log, index, index);
    }
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.read(..).expect("reads"), expected(1, 80));
    let sizes: Vec<u64> = segments(dir.path())
        .iter()
        .map(|path| std::fs::metadata(path).expect("metadata").len())
        .collect();
    assert!(sizes.contains(&1024) && sizes.contains(&4096), "{sizes:?}");
}
