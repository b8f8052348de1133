//! What the segment log's test files share: a small-segment config, deterministic payloads, and
//! the byte layout the tests damage on purpose.

#![allow(dead_code)] // Each test file uses a different part.

use std::path::{Path, PathBuf};

use hivekeeper_segment_log::{
    RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentLog, SegmentLogConfig,
};

/// 1 KiB segments: a handful of entries each, so tests cross segment boundaries often.
pub const SMALL: SegmentLogConfig = SegmentLogConfig {
    segment_bytes: 1024,
};

/// The payload of entry `index`: its index in text, padded to a length that varies with it.
pub fn payload(index: u64) -> Vec<u8> {
    let mut bytes = format!("entry {index}:").into_bytes();
    bytes.resize(
        bytes.len() + (index as usize * 37) % 90,
        b'a' + (index % 26) as u8,
    );
    bytes
}

/// Opens `dir` with [`SMALL`] segments.
pub fn open(dir: &Path) -> SegmentLog {
    SegmentLog::open(dir, SMALL).expect("the log opens")
}

/// Appends entries `from..=to` (payloads from [`payload`]) in one batch.
pub fn append_range(log: &mut SegmentLog, from: u64, to: u64) {
    log.append((from..=to).map(|index| (index, payload(index))))
        .expect("the append succeeds");
}

/// The entries `from..=to` as [`SegmentLog::read`] returns them.
pub fn expected(from: u64, to: u64) -> Vec<(u64, Vec<u8>)> {
    (from..=to).map(|index| (index, payload(index))).collect()
}

/// The segment files of `dir`, oldest first.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the log directory lists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    paths.sort();
    paths
}

/// Byte offset of each entry's record in a segment that starts at `first` and holds entries
/// `first..=last` written by [`append_range`].
pub fn record_offsets(first: u64, last: u64) -> Vec<u64> {
    let mut at = SEGMENT_HEADER_BYTES;
    let mut offsets = Vec::new();
    for index in first..=last {
        offsets.push(at);
        at += RECORD_HEADER_BYTES + payload(index).len() as u64;
    }
    offsets
}

/// The size of entry `index`'s record.
pub fn record_size(index: u64) -> u64 {
    RECORD_HEADER_BYTES + payload(index).len() as u64
}

/// Overwrites `bytes` at `offset` in `path`.
pub fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("the segment opens for writing");
    file.write_all_at(bytes, offset)
        .expect("the bytes are written");
}

/// Copies every file of `from` into a fresh `to` (a pristine log to damage once per case).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("the copy's directory");
    for entry in std::fs::read_dir(from).expect("the directory lists") {
        let entry = entry.expect("a directory entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("the file copies");
    }
}
