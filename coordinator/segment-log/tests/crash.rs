//! Crash and damage tests: what opening does with the bytes a crash or a bad disk leaves.
//!
//! A torn tail (a write whose fdatasync never returned) is cut and the log goes on; damage with
//! valid records after it is refused with an error naming the file and byte offset.

mod common;

use std::path::{Path, PathBuf};

use common::{
    SMALL, append_range, copy_dir, expected, open, payload, record_offsets, record_size, segments,
    write_at,
};
use hivekeeper_segment_log::{Damage, SegmentLog, SegmentLogError, TornTail};

/// A log of entries 1..=5 in one segment, closed cleanly.
fn five_entries(dir: &Path) {
    let mut log = open(dir);
    append_range(&mut log, 1, 3);
    append_range(&mut log, 4, 5);
    assert_eq!(segments(dir).len(), 1);
}

/// A five-entry log in a temporary directory, and its one segment file.
fn five_entry_log() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    five_entries(dir.path());
    let path = segments(dir.path())[0].clone();
    (dir, path)
}

/// After recovery cut entry 5: entries 1..=4 are there, and appending 5 and 6 again works and
/// survives a reopen.
fn assert_recovered_to_four_and_appendable(dir: &Path, mut log: SegmentLog) {
    assert_eq!(log.last_index(), Some(4));
    assert_eq!(log.read(..).expect("reads"), expected(1, 4));
    log.check_invariants().expect("invariants hold");
    append_range(&mut log, 5, 6);
    drop(log);
    let log = open(dir);
    assert_eq!(log.recovered(), None);
    assert_eq!(log.read(..).expect("reads"), expected(1, 6));
}

fn non_zero(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&byte| byte != 0).count() as u64
}

/// For each `written` (the bytes of entry 5's record that reached the disk), a fresh copy of a
/// five-entry log is damaged by `damage(segment, record offset, written)`, opened, checked by
/// `check(log, segment, record offset, written)`, and shown to have lost exactly entry 5 and to
/// take appends again.
fn each_torn_copy(
    written: impl IntoIterator<Item = u64>,
    damage: impl Fn(&Path, u64, u64),
    check: impl Fn(&SegmentLog, &Path, u64, u64),
) {
    let root = tempfile::tempdir().expect("temp dir");
    let pristine = root.path().join("pristine");
    five_entries(&pristine);
    let segment_name = segments(&pristine)[0]
        .file_name()
        .expect("a file name")
        .to_owned();
    let offset = record_offsets(1, 5)[4];
    for written in written {
        let dir = root.path().join(format!("copy-{written}"));
        copy_dir(&pristine, &dir);
        let path = dir.join(&segment_name);
        damage(&path, offset, written);
        let log = SegmentLog::open(&dir, SMALL).expect("a torn tail opens");
        check(&log, &path, offset, written);
        assert_recovered_to_four_and_appendable(&dir, log);
        std::fs::remove_dir_all(&dir).expect("cleans up");
    }
}

/// Entry 5's record as written.
fn last_record(dir: &Path) -> Vec<u8> {
    let offset = record_offsets(1, 5)[4] as usize;
    std::fs::read(&segments(dir)[0]).expect("reads")[offset..offset + record_size(5) as usize]
        .to_vec()
}

/// Every prefix of the last record reached the disk and the rest is still zeros (the
/// preallocated space): the partial record is cut, whatever byte the write stopped at.
#[test]
fn a_torn_write_at_every_byte_of_the_last_record_is_cut() {
    let reference = tempfile::tempdir().expect("temp dir");
    five_entries(reference.path());
    let record = last_record(reference.path());
    let size = record_size(5);
    each_torn_copy(
        0..size,
        |path, offset, written| {
            write_at(
                path,
                offset + written,
                &vec![0u8; (size - written) as usize],
            );
        },
        |log, path, offset, written| {
            let dirty = non_zero(&record[..written as usize]);
            match log.recovered() {
                None => assert_eq!(dirty, 0, "{written} bytes written, nothing cut"),
                Some(torn) => assert_eq!(
                    (torn.path.as_path(), torn.offset, torn.bytes),
                    (path, offset, dirty)
                ),
            }
        },
    );
}

/// The same torn record, but the file itself ends inside it (its preallocation was lost too):
/// the record is cut and the segment is preallocated again to its full size.
#[test]
fn a_file_that_ends_inside_the_last_record_is_cut_and_extended() {
    each_torn_copy(
        0..record_size(5),
        |path, offset, written| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|file| file.set_len(offset + written))
                .expect("the file is shortened");
        },
        |log, path, offset, _| {
            assert_eq!(
                std::fs::metadata(path).expect("metadata").len(),
                SMALL.segment_bytes
            );
            assert_eq!(
                log.recovered().map(|torn| torn.offset).unwrap_or(offset),
                offset
            );
        },
    );
}

/// The unwritten part of the torn record holds garbage rather than zeros: still a torn tail,
/// since no valid record follows it.
#[test]
fn a_torn_record_followed_by_garbage_is_cut() {
    let size = record_size(5);
    each_torn_copy(
        [0, 1, 8, 15, 16, 17, size / 2, size - 1],
        |path, offset, written| {
            write_at(
                path,
                offset + written,
                &vec![0xa5u8; (size - written) as usize],
            );
        },
        |log, _, offset, _| {
            assert_eq!(log.recovered().map(|torn| torn.offset), Some(offset));
        },
    );
}

/// A lost batch of three records (all zeros now, as preallocated) leaves the log at the batch
/// before it, with nothing to report; a clean log's preallocated zeros are no damage either.
#[test]
fn a_zero_filled_tail_ends_the_log_quietly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    append_range(&mut log, 1, 5);
    append_range(&mut log, 6, 8);
    drop(log);
    let log = open(dir.path());
    assert_eq!((log.recovered(), log.last_index()), (None, Some(8)));
    drop(log);
    let offsets = record_offsets(1, 8);
    let path = segments(dir.path())[0].clone();
    let lost = (offsets[7] + record_size(8) - offsets[5]) as usize;
    write_at(&path, offsets[5], &vec![0u8; lost]);
    let log = open(dir.path());
    assert_eq!(log.recovered(), None);
    assert_eq!(log.read(..).expect("reads"), expected(1, 5));
    assert_eq!(log.next_index(), Some(6));
}

/// CRC-32C of a record as the format defines it (length, index, payload).
fn record_crc(payload: &[u8], index: u64) -> u32 {
    let crc = crc32c::crc32c(&(payload.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &index.to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

/// One flipped bit in entry 3 of 5: opening fails with the file, the record's offset and both
/// checksums, and the file is left exactly as it was (no silent truncation).
#[test]
fn a_bad_crc_in_the_middle_is_refused_naming_the_file_and_offset() {
    let (dir, path) = five_entry_log();
    let offset = record_offsets(1, 5)[2];
    let mut damaged = payload(3);
    damaged[4] ^= 0x01;
    write_at(&path, offset + 16, &damaged);
    let before = std::fs::read(&path).expect("reads");
    let stored = record_crc(&payload(3), 3);
    let computed = record_crc(&damaged, 3);
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("a damaged log must not open");
    assert_eq!(
        error.to_string(),
        format!(
            "{}: damaged record at byte {offset}: CRC-32C mismatch (stored {stored:#010x}, \
             computed {computed:#010x}); refusing to open, since dropping it would drop the \
             entries after it",
            path.display()
        )
    );
    assert!(
        matches!(
            error,
            SegmentLogError::Corrupt { path: ref at, offset: found, damage: Damage::Crc { .. } }
                if *at == path && found == offset
        ),
        "{error:?}"
    );
    assert_eq!(std::fs::read(&path).expect("reads"), before);
}

/// The last record of a sealed (older) segment is never a torn tail: a bad CRC there is refused.
#[test]
fn a_bad_crc_at_the_end_of_a_sealed_segment_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    for index in 1..=30 {
        append_range(&mut log, index, index);
    }
    let first_segment_last = log.read(..).expect("reads").len(); // all 30
    assert_eq!(first_segment_last, 30);
    drop(log);
    let files = segments(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    let second_first: u64 = files[1]
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.parse().ok())
        .expect("a segment name is its first index");
    let last_of_first = second_first - 1;
    let offset = record_offsets(1, last_of_first)[last_of_first as usize - 1];
    write_at(&files[0], offset + 16, b"X");
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("a damaged log must not open");
    match error {
        SegmentLogError::Corrupt {
            path,
            offset: at,
            damage: Damage::Crc { .. },
        } => assert_eq!((path, at), (files[0].clone(), offset)),
        other => panic!("expected a CRC error in the first segment, got {other:?}"),
    }
}

/// A zeroed header in the middle (a lost sector) is not mistaken for the end of the log.
#[test]
fn zeros_in_the_middle_are_refused() {
    let (dir, path) = five_entry_log();
    let offset = record_offsets(1, 5)[1];
    write_at(&path, offset, &[0u8; 16]);
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("a damaged log must not open");
    assert!(
        matches!(error, SegmentLogError::Corrupt { offset: at, damage: Damage::Zeroed, .. } if at == offset),
        "{error:?}"
    );
}

/// A well-formed record with another index where entry 3 belongs (a stale record) is refused.
#[test]
fn a_record_with_the_wrong_index_in_the_middle_is_refused() {
    let (dir, path) = five_entry_log();
    let offset = record_offsets(1, 5)[2];
    let body = payload(3);
    let mut stale = Vec::new();
    stale.extend_from_slice(&(body.len() as u32).to_le_bytes());
    stale.extend_from_slice(&record_crc(&body, 42).to_le_bytes());
    stale.extend_from_slice(&42u64.to_le_bytes());
    stale.extend_from_slice(&body);
    write_at(&path, offset, &stale);
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("a damaged log must not open");
    assert!(
        matches!(
            error,
            SegmentLogError::Corrupt { offset: at, damage: Damage::Index { expected: 3, found: 42 }, .. } if at == offset
        ),
        "{error:?}"
    );
}

/// A newest segment whose creation never became durable (all zeros) is removed at open.
#[test]
fn an_unborn_newest_segment_is_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    five_entries(dir.path());
    let unborn = dir.path().join("00000000000000000006.seg");
    std::fs::write(&unborn, vec![0u8; 1024]).expect("writes");
    let mut log = open(dir.path());
    assert!(!unborn.exists());
    assert_eq!(log.last_index(), Some(5));
    append_range(&mut log, 6, 6);
    assert_eq!(log.read(..).expect("reads"), expected(1, 6));
}

/// A purge past the end that crashed after creating its new segment, before removing the old
/// ones, is finished at open.
#[test]
fn an_interrupted_purge_is_finished_at_open() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("log");
    let mut log = open(&dir);
    for index in 1..=20 {
        append_range(&mut log, index, index);
    }
    drop(log);
    // The segment the purge creates first, made by a purge in another directory.
    let other = root.path().join("other");
    let mut purged = open(&other);
    purged.purge_upto(30).expect("purges");
    drop(purged);
    let new_segment = segments(&other)[0].clone();
    std::fs::copy(
        &new_segment,
        dir.join(new_segment.file_name().expect("a name")),
    )
    .expect("copies");
    let log = open(&dir);
    assert_eq!((log.first_index(), log.last_index()), (None, None));
    assert_eq!(log.next_index(), Some(31));
    assert_eq!(segments(&dir).len(), 1);
}

/// A missing middle segment is a gap: refused, naming both neighbours.
#[test]
fn a_missing_middle_segment_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = open(dir.path());
    for index in 1..=30 {
        append_range(&mut log, index, index);
    }
    drop(log);
    let files = segments(dir.path());
    std::fs::remove_file(&files[1]).expect("removes");
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("a log with a gap must not open");
    match error {
        SegmentLogError::Gap { before, after, .. } => {
            assert_eq!((before, after), (files[0].clone(), files[2].clone()));
        }
        other => panic!("expected a gap, got {other:?}"),
    }
}

/// A second open of the same directory is refused while the first is open.
#[test]
fn a_second_open_is_refused_while_the_first_is_open() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = open(dir.path());
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("the directory is locked");
    assert!(matches!(error, SegmentLogError::InUse { .. }), "{error:?}");
    drop(log);
    open(dir.path());
}

/// A segment file of another format is named, not misread.
#[test]
fn a_foreign_segment_file_is_refused() {
    let (dir, path) = five_entry_log();
    write_at(&path, 0, b"NOTOURS!");
    let error = SegmentLog::open(dir.path(), SMALL).expect_err("a foreign file must not open");
    assert!(
        matches!(
            error,
            SegmentLogError::BadSegmentHeader {
                damage: Damage::Magic,
                ..
            }
        ),
        "{error:?}"
    );
}

/// The torn tail report names what was cut.
#[test]
fn the_recovery_report_names_the_file_offset_and_bytes() {
    let (dir, path) = five_entry_log();
    let offset = record_offsets(1, 5)[4];
    let mut torn_record = last_record(dir.path());
    torn_record[20..29].fill(0);
    write_at(&path, offset + 20, &[0u8; 9]);
    let log = open(dir.path());
    let record = payload(5);
    let dirty = non_zero(&torn_record);
    assert_eq!(
        log.recovered(),
        Some(&TornTail {
            path: path.clone(),
            offset,
            bytes: dirty,
            damage: Damage::Crc {
                stored: record_crc(&record, 5),
                computed: {
                    let mut torn = record.clone();
                    torn[4..13].fill(0);
                    record_crc(&torn, 5)
                },
            },
        })
    );
}
