//! [`SegmentLog`]: the segments of one directory as one log of entries keyed by `u64` index.
//!
//! Invariants (checked by [`SegmentLog::check_invariants`]):
//! 1. Segments are ordered by first index and contiguous: each starts at the index after the
//!    previous one's last record.
//! 2. Every segment but the newest holds at least one record; only the newest takes appends.
//! 3. Within a segment, record offsets start right after the header, increase, and end before
//!    `end`, which is at most the file's capacity (the segment's own invariants, `segment.rs`).
//! 4. After a failed write, sync or file operation nothing more is written (`failed` is set and
//!    every later write answers [`SegmentLogError::Poisoned`]); reopening recovers.
//!
//! Crash safety of each multi-step change, by the order of its steps:
//! - A segment roll syncs the old segment before it creates the new one, so only the newest
//!   segment can end in a torn write.
//! - `truncate_after` removes whole segments newest first (syncing the directory after each),
//!   then cuts the one holding the new last entry: every intermediate state is a prefix.
//! - `purge_upto` removes whole segments oldest first (syncing the directory after each): every
//!   intermediate state is a suffix. A purge past the last entry first removes every segment,
//!   then creates the empty one the log continues in, so that on a full disk the new segment
//!   fits in the room of the old ones. A crash in between leaves a suffix of the old segments or
//!   none: the log then ends at or before the purged index, which the caller made durable before
//!   the purge, and the caller finishes the purge on open (`purge_upto` again). A log with an
//!   empty newest segment after a gap (a purge that created the new segment before removing the
//!   old ones, then crashed) is still recognised on open and finished.

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::config::SegmentLogConfig;
use crate::error::{Result, SegmentLogError, io};
use crate::record::{self, RECORD_HEADER_BYTES};
use crate::segment::{self, Opened, SEGMENT_HEADER_BYTES, Segment, TornTail};

/// The name of the lock file that keeps a second process out of the directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// An append-only log of opaque entries in one directory. Writes take `&mut self` and are
/// durable when they return; reads take `&self`.
#[derive(Debug)]
pub struct SegmentLog {
    /// The directory holding the segments.
    dir: PathBuf,
    /// The segment size new segments get.
    config: SegmentLogConfig,
    /// Oldest first (invariant 1).
    segments: Vec<Segment>,
    /// The first failure of a write or sync; set, nothing more is written (invariant 4). A
    /// `OnceLock` so that [`SegmentLog::sync`], which takes `&self`, can set it.
    failed: OnceLock<String>,
    /// What recovery cut from the newest segment at open, if anything.
    recovered: Option<TornTail>,
    /// The locked LOCK file, held while the log is open (the lock goes with the descriptor).
    _lock: File,
}

/// A broken invariant, found by [`SegmentLog::check_invariants`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvariantViolation {
    /// The invariant's number in the list at the top of `log.rs`.
    pub invariant: u8,
    /// What was found.
    pub detail: String,
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {} broken: {}", self.invariant, self.detail)
    }
}

impl std::error::Error for InvariantViolation {}

impl SegmentLog {
    /// Opens the log in `dir`, creating the directory if needed, and recovers it: a torn tail
    /// of the newest segment is cut (see [`SegmentLog::recovered`]); damage anywhere else is a
    /// [`SegmentLogError::Corrupt`] naming the file and byte offset, and the log does not open.
    pub fn open(dir: &Path, config: SegmentLogConfig) -> Result<SegmentLog> {
        config.validate()?;
        std::fs::create_dir_all(dir).map_err(io(dir, "creating the log directory"))?;
        let lock_path = dir.join(LOCK_FILE_NAME);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io(&lock_path, "opening the lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(SegmentLogError::InUse {
                    dir: dir.to_path_buf(),
                });
            }
            Err(TryLockError::Error(source)) => {
                return Err(io(&lock_path, "locking the lock file")(source));
            }
        }
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir, "listing the log directory"))? {
            let entry = entry.map_err(io(dir, "listing the log directory"))?;
            if let Some(index) = entry.file_name().to_str().and_then(segment::parse_name) {
                names.push((index, entry.path()));
            }
        }
        names.sort();
        let mut segments = Vec::with_capacity(names.len());
        let mut recovered = None;
        let count = names.len();
        for (position, (index, path)) in names.into_iter().enumerate() {
            let last = position + 1 == count;
            match Segment::open(&path, index, last, config.segment_bytes)? {
                Opened::Segment(segment, torn) => {
                    segments.push(segment);
                    recovered = torn;
                }
                Opened::Unborn => {
                    std::fs::remove_file(&path).map_err(io(&path, "removing an unborn segment"))?;
                    segment::sync_dir(dir)?;
                }
            }
        }
        finish_interrupted_purge(dir, &mut segments)?;
        for pair in segments.windows(2) {
            if pair[1].first_index != pair[0].next_index() {
                return Err(SegmentLogError::Gap {
                    before: pair[0].path.clone(),
                    last_index: pair[0].next_index().wrapping_sub(1),
                    after: pair[1].path.clone(),
                    first_index: pair[1].first_index,
                });
            }
        }
        Ok(SegmentLog {
            dir: dir.to_path_buf(),
            config,
            segments,
            failed: OnceLock::new(),
            recovered,
            _lock: lock,
        })
    }

    /// What recovery cut from the end of the newest segment at open: a write torn by a crash
    /// (never acknowledged, since its fdatasync had not returned). `None` after a clean close.
    pub fn recovered(&self) -> Option<&TornTail> {
        self.recovered.as_ref()
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first index stored, `None` when the log holds no entry. A purge drops whole segments
    /// only, so entries at or below the last purged index may still be here.
    pub fn first_index(&self) -> Option<u64> {
        self.last_index()?;
        self.segments.first().map(|segment| segment.first_index)
    }

    /// The last index stored, `None` when the log holds no entry.
    pub fn last_index(&self) -> Option<u64> {
        let first = self.segments.first()?.first_index;
        let next = self.segments.last()?.next_index();
        (next > first).then(|| next - 1)
    }

    /// The index the next append must start at; `None` for a fresh log (no segment yet), whose
    /// first append may start at any index.
    pub fn next_index(&self) -> Option<u64> {
        self.segments.last().map(Segment::next_index)
    }

    /// Appends entries (`(index, bytes)`, indexes continuing the log) and makes them durable:
    /// one write and one fdatasync for the batch (two of each when it crosses into a new
    /// segment). Nothing is written unless every entry is valid. The same as [`write`]
    /// then [`sync`].
    ///
    /// [`write`]: SegmentLog::write
    /// [`sync`]: SegmentLog::sync
    pub fn append<I, B>(&mut self, entries: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, B)>,
        B: AsRef<[u8]>,
    {
        self.write(entries)?;
        self.sync()
    }

    /// Writes entries like [`SegmentLog::append`] but without the final fdatasync: they are
    /// readable at once and durable only once [`SegmentLog::sync`] returns. For a caller that
    /// shares the log behind a lock: write under the exclusive lock, then sync under a shared
    /// one, so reads (a leader replicating the entries it is flushing) do not wait for the
    /// disk. A batch that crosses into a new segment syncs the old one before the new one
    /// holds anything (crash safety), so only the newest segment is ever unsynced.
    pub fn write<I, B>(&mut self, entries: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, B)>,
        B: AsRef<[u8]>,
    {
        self.check_not_failed()?;
        let payload_max = self.config.payload_bytes_max();
        // Plan: the encoded records, cut into chunks that each fill one segment.
        let mut chunks: Vec<Chunk> = Vec::new();
        let mut room = self.segments.last().map_or(0, Segment::room);
        let mut expected = self.next_index();
        for (index, payload) in entries {
            let payload = payload.as_ref();
            if let Some(expected) = expected.filter(|&expected| expected != index) {
                return Err(SegmentLogError::OutOfOrder {
                    expected,
                    found: index,
                });
            }
            if payload.len() as u64 > payload_max {
                return Err(SegmentLogError::TooLarge {
                    index,
                    payload_bytes: payload.len() as u64,
                    payload_bytes_max: payload_max,
                });
            }
            let size = record::record_bytes(payload.len() as u64);
            // A fresh log has no segment and so no room: its first record starts one.
            let new_segment = size > room;
            if new_segment {
                room = self.config.segment_bytes - SEGMENT_HEADER_BYTES;
            }
            if new_segment || chunks.is_empty() {
                chunks.push(Chunk {
                    new_segment_at: new_segment.then_some(index),
                    bytes: Vec::new(),
                    sizes: Vec::new(),
                });
            }
            let chunk = chunks.last_mut().expect("a chunk was pushed above");
            record::encode(index, payload, &mut chunk.bytes);
            chunk.sizes.push(size);
            room -= size;
            expected = Some(
                index
                    .checked_add(1)
                    .ok_or(SegmentLogError::IndexMax { index })?,
            );
        }
        if chunks.is_empty() {
            return Ok(());
        }
        let written = self.write_chunks(&chunks);
        self.fail_on_error(written)
    }

    /// Makes every write before it durable: one fdatasync of the newest segment (the only one
    /// that can hold unsynced records). A failure poisons the log (invariant 4): the kernel
    /// may have dropped the pages it could not write, so nothing after it can be trusted until
    /// the log is reopened and recovered.
    pub fn sync(&self) -> Result<()> {
        self.check_not_failed()?;
        let synced = match self.segments.last() {
            Some(active) => active.sync(),
            None => Ok(()),
        };
        self.fail_on_error(synced)
    }

    /// Writes planned chunks, rolling segments where planned (not syncing the last).
    fn write_chunks(&mut self, chunks: &[Chunk]) -> Result<()> {
        for chunk in chunks {
            if let Some(first_index) = chunk.new_segment_at {
                if let Some(active) = self.segments.last() {
                    // Seal the old segment (this batch's records and any earlier unsynced
                    // ones) before the new one holds anything: only the newest segment may
                    // end in a torn write.
                    active.sync()?;
                }
                let segment = Segment::create(&self.dir, first_index, self.config.segment_bytes)?;
                segment::sync_dir(&self.dir)?;
                self.segments.push(segment);
            }
            let active = self
                .segments
                .last_mut()
                .expect("a chunk goes to an existing segment or a new one");
            active.write(&chunk.bytes, &chunk.sizes)?;
        }
        Ok(())
    }

    /// Entries with indexes in `range` that the log holds, in order.
    pub fn read(&self, range: impl RangeBounds<u64>) -> Result<Vec<(u64, Vec<u8>)>> {
        let (Some(first), Some(last)) = (self.first_index(), self.last_index()) else {
            return Ok(Vec::new());
        };
        let from = match range.start_bound() {
            Bound::Included(&start) => start,
            Bound::Excluded(&start) => match start.checked_add(1) {
                Some(start) => start,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => first,
        }
        .max(first);
        let to = match range.end_bound() {
            Bound::Included(&end) => end,
            Bound::Excluded(&end) => match end.checked_sub(1) {
                Some(end) => end,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => last,
        }
        .min(last);
        let mut out = Vec::new();
        if from > to {
            return Ok(out);
        }
        for segment in &self.segments {
            let next = segment.next_index();
            if next <= from || segment.first_index > to || next == segment.first_index {
                continue;
            }
            segment.read(from.max(segment.first_index), to.min(next - 1), &mut out)?;
        }
        Ok(out)
    }

    /// Deletes every entry after `index` (a Raft log conflict), durably. A no-op when the log
    /// ends at or before `index`; `index = first_index - 1` empties the log (the next append
    /// then starts at the old first index).
    pub fn truncate_after(&mut self, index: u64) -> Result<()> {
        self.check_not_failed()?;
        let (Some(first), Some(last)) = (self.first_index(), self.last_index()) else {
            return Ok(());
        };
        if index >= last {
            return Ok(());
        }
        if index.checked_add(1).is_none_or(|after| after < first) {
            return Err(SegmentLogError::TruncateBeforeStart {
                index,
                first_index: first,
            });
        }
        let truncated = self.truncate_segments(index + 1);
        self.fail_on_error(truncated)
    }

    /// Deletes every entry at or after `index`, durably, like [`SegmentLog::truncate_after`]
    /// (`index - 1`) but also for `index = 0`, and with an `index` at or below the first stored
    /// entry emptying the log (entries below it are gone already): what a Raft
    /// `truncate_after(None)` needs. The next append then starts at the old first index.
    pub fn truncate_from(&mut self, index: u64) -> Result<()> {
        self.check_not_failed()?;
        let (Some(first), Some(last)) = (self.first_index(), self.last_index()) else {
            return Ok(());
        };
        if index > last {
            return Ok(());
        }
        let truncated = self.truncate_segments(index.max(first));
        self.fail_on_error(truncated)
    }

    /// Removes the segments that start at or after `from`, then cuts the one holding `from`
    /// (`from` is at least the first stored index).
    fn truncate_segments(&mut self, from: u64) -> Result<()> {
        while self.segments.len() > 1
            && self
                .segments
                .last()
                .is_some_and(|segment| segment.first_index >= from)
        {
            let segment = self.segments.pop().expect("more than one segment");
            remove_segment(&self.dir, segment)?;
        }
        let active = self
            .segments
            .last_mut()
            .expect("the oldest segment is never removed by a truncation");
        let keep = (from - active.first_index) as usize;
        active.cut_to(keep)
    }

    /// Drops whole segments whose entries are all at or below `index` (entries the state
    /// machine's snapshot covers), durably. Entries at or below `index` that share a segment
    /// with later ones stay until that segment goes. Past the last entry, the log is emptied and
    /// continues at `index + 1` (after a snapshot was installed from the leader); that start is
    /// durable too, in the new segment's header.
    pub fn purge_upto(&mut self, index: u64) -> Result<()> {
        self.check_not_failed()?;
        let purged = self.purge_segments(index);
        self.fail_on_error(purged)
    }

    fn purge_segments(&mut self, index: u64) -> Result<()> {
        let Some(start) = index.checked_add(1) else {
            // Nothing can follow u64::MAX; keeping the entries is the safe answer.
            return Ok(());
        };
        if self.next_index().is_none_or(|next| next <= start)
            && self
                .segments
                .last()
                .is_none_or(|segment| segment.first_index != start)
        {
            // Every stored entry goes: continue in an empty segment starting at `start`. The
            // old segments are removed first, so that on a full disk the new one is
            // preallocated in their room. A crash in between leaves no segment at all: the
            // caller made the purged index durable first and finishes the purge on open.
            for segment in std::mem::take(&mut self.segments) {
                remove_segment(&self.dir, segment)?;
            }
            segment::sync_dir(&self.dir)?;
            let segment = Segment::create(&self.dir, start, self.config.segment_bytes)?;
            segment::sync_dir(&self.dir)?;
            self.segments.push(segment);
        }
        while self.segments.len() > 1 && self.segments[1].first_index <= start {
            let segment = self.segments.remove(0);
            remove_segment(&self.dir, segment)?;
        }
        Ok(())
    }

    /// Checks invariants 1 to 3 on the in-memory layout (tests call it after every step).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let broken = |invariant, detail: String| Err(InvariantViolation { invariant, detail });
        for pair in self.segments.windows(2) {
            if pair[1].first_index != pair[0].next_index() {
                return broken(
                    1,
                    format!(
                        "{} ends before {}, {} starts at {}",
                        pair[0].path.display(),
                        pair[0].next_index(),
                        pair[1].path.display(),
                        pair[1].first_index
                    ),
                );
            }
            if pair[0].offsets.is_empty() {
                return broken(2, format!("{} is empty", pair[0].path.display()));
            }
        }
        for segment in &self.segments {
            let mut previous_end = SEGMENT_HEADER_BYTES;
            for &offset in &segment.offsets {
                if offset < previous_end {
                    return broken(
                        3,
                        format!("{}: a record at {offset} overlaps", segment.path.display()),
                    );
                }
                previous_end = offset + RECORD_HEADER_BYTES;
            }
            if segment
                .offsets
                .first()
                .is_some_and(|&first| first != SEGMENT_HEADER_BYTES)
                || previous_end > segment.end
                || segment.end > segment.capacity
            {
                return broken(
                    3,
                    format!(
                        "{}: records end at {}, capacity {}",
                        segment.path.display(),
                        segment.end,
                        segment.capacity
                    ),
                );
            }
        }
        Ok(())
    }

    fn check_not_failed(&self) -> Result<()> {
        match self.failed.get() {
            Some(first) => Err(SegmentLogError::Poisoned {
                first: first.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Remembers the first failed write or sync (invariant 4) and passes the result on.
    fn fail_on_error(&self, result: Result<()>) -> Result<()> {
        if let Err(error) = &result {
            // Only the first failure is kept; a later one loses the race harmlessly.
            let _ = self.failed.set(error.to_string());
        }
        result
    }
}

/// Records to write into one segment, in one call.
struct Chunk {
    /// `Some(first index)` when the chunk starts a new segment.
    new_segment_at: Option<u64>,
    /// The encoded records.
    bytes: Vec<u8>,
    /// Each record's size in `bytes`.
    sizes: Vec<u64>,
}

/// Deletes a segment's file and makes the deletion durable before the next step.
fn remove_segment(dir: &Path, segment: Segment) -> Result<()> {
    let Segment { path, file, .. } = segment;
    drop(file);
    std::fs::remove_file(&path).map_err(io(&path, "removing a segment"))?;
    segment::sync_dir(dir)
}

/// A log whose newest segment is empty and does not continue the one before it was left by a
/// purge past the last entry that created the new segment before removing the old ones, then
/// crashed: remove everything before it, as the purge would have.
fn finish_interrupted_purge(dir: &Path, segments: &mut Vec<Segment>) -> Result<()> {
    let count = segments.len();
    if count < 2 {
        return Ok(());
    }
    let newest = &segments[count - 1];
    let before = &segments[count - 2];
    if newest.offsets.is_empty() && newest.first_index > before.next_index() {
        for segment in segments.drain(..count - 1) {
            remove_segment(dir, segment)?;
        }
    }
    Ok(())
}
