//! openraft's log storage (`RaftLogStorage`, `RaftLogReader`): entries in the segment log
//! (`data_dir/raft-log/`), the vote and the last purged id in redb.
//!
//! ```text
//!  append ─▶ Store::submit (returns at once) ─▶ writer: SegmentLog::write, sync ─▶ IOFlushed
//!                 │ rows kept in the tail until durable
//!        └─ the entries themselves kept decoded in RecentEntries (the last 1,024)
//!  try_get_log_entries ─▶ RecentEntries when it holds the whole range, else
//!                         tail rows (not yet durable) over SegmentLog::read (durable),
//!                         clamped above the last purged index
//!  read_vote ─▶ the last vote submitted, else redb's
//!  get_log_state ─▶ after the writer caught up: the log's last entry, the purged id
//! ```
//!
//! Writes (append, vote, truncate, purge) are handed to the group-commit writer (`writer.rs`);
//! `append` returns as soon as the entries are queued and openraft's `IOFlushed` callback fires
//! after the segment log holding them has been synced. The committed log id is kept in memory
//! and written with the next redb transaction (`writer.rs`, invariant 4).
//!
//! Reads see every write submitted before them without waiting for its fsync: openraft 0.10
//! reads the entries it replicates as soon as `append` returns, so the leader sends them while
//! its own fsync runs. Entries come from the writer's in-memory tail (appended, not yet
//! durable) over a read of the segment log (its read lock, which an fdatasync never holds
//! exclusively); while a truncate or purge is in flight (rare: a follower's conflicting
//! entries, a purge behind a snapshot) a read waits for the writer ([`Store::caught_up`])
//! instead. The vote read is the last one submitted. Reads run inline on the calling task: they
//! are short (one `pread` per segment touched, pages usually cached) and never fsync.
//!
//! Invariants:
//! 1. No hole: entries are contiguous from the last purged index + 1 to the last entry. The
//!    segment log drops whole segments only, so it may hold entries at or below the last
//!    purged index: every read clamps them away.
//! 2. `get_log_state().last_log_id` is the last entry's id, or the last purged id when the log
//!    is empty (openraft's contract).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};

use super::database::{KEY_VOTE, META, get_json, to_json};
use super::error::StoreError;
use super::recent_entries::RecentEntries;
use super::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use super::writer::{Completion, Store, WriteOp};

/// The Raft log and vote of one node. Cheap to clone: clones share the file and the writer.
#[derive(Clone)]
pub struct LogStore {
    /// The data file and its writer, shared with the state-machine store.
    store: Arc<Store>,
    /// The last entries appended, decoded, so replication and the apply need not parse their
    /// rows again.
    recent: Arc<RecentEntries>,
}

/// A summary of the log on disk, for status pages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStatus {
    /// The index the log was purged up to (inclusive), `None` if never purged.
    pub last_purged_index: Option<u64>,
    /// The last index present (or the last purged one when the log is empty).
    pub last_index: Option<u64>,
    /// How many entries are stored after the last purged one.
    pub entries: u64,
}

impl LogStore {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        LogStore {
            store,
            recent: Arc::default(),
        }
    }

    /// Reads the log's bounds after every submitted write has landed: the last purged id, the
    /// last log id (the purged one when the log is empty) and the entries after the purged one.
    async fn log_state(&self) -> Result<(Option<LogId>, Option<LogId>, u64), StoreError> {
        self.store.caught_up().await?;
        let last_purged = self.store.last_purged();
        let start = first_unpurged(last_purged);
        let (first, last) = self
            .store
            .db()
            .with_log(|log| {
                let bounds = log.first_index().zip(log.last_index());
                let Some((first, last)) = bounds.filter(|(_, last)| *last >= start) else {
                    return Ok(None);
                };
                let row = log.read(last..=last)?;
                let entry = match row.first() {
                    Some((_, row)) => decode_entry(row)?,
                    None => {
                        return Err(StoreError::Decode {
                            what: "log",
                            reason: format!("the last entry, {last}, did not read back"),
                        });
                    }
                };
                Ok(Some((first.max(start), entry.log_id)))
            })?
            .map_or((0, None), |(first, last)| (first, Some(last)));
        let entries = last.map_or(0, |last| last.index - first + 1);
        Ok((last_purged, last.or(last_purged), entries))
    }

    /// The log's bounds and size on disk.
    pub async fn status(&self) -> Result<LogStatus, StoreError> {
        let (last_purged, last, entries) = self.log_state().await?;
        Ok(LogStatus {
            last_purged_index: last_purged.map(|log_id| log_id.index),
            last_index: last.map(|log_id| log_id.index),
            entries,
        })
    }

    /// Entries in `range` as submitted: the writer's tail over the file, or, while a truncate
    /// or purge is in flight, the file once every submitted write has landed.
    async fn entries(&self, range: (Bound<u64>, Bound<u64>)) -> Result<Vec<Entry>, StoreError> {
        if range_is_empty(&range) {
            return Ok(Vec::new());
        }
        if let Some(entries) = self.recent_under(range) {
            return Ok(entries);
        }
        if let Some(tail) = self.store.tail_rows(range)
            && let Some(entries) = self.file_under(range, tail)?
        {
            return Ok(entries);
        }
        self.store.caught_up().await?;
        self.file_under(range, BTreeMap::new())?
            .ok_or_else(|| StoreError::Decode {
                what: "log",
                reason: "entries missing inside the range read (a hole in the log)".into(),
            })
    }

    /// The entries in `range` above the last purged index from [`RecentEntries`], if it holds
    /// every one. An open-ended range goes to the log, which knows where it ends.
    fn recent_under(&self, range: (Bound<u64>, Bound<u64>)) -> Option<Vec<Entry>> {
        let (from, last) = readable(range, first_unpurged(self.store.last_purged()));
        self.recent.get(from, last?)
    }

    /// The log's entries in `range` above the last purged index, with `tail`'s rows over
    /// them. `None` if they are not consecutive: a truncate ran between the tail's copy and the
    /// log's read, so the caller reads again once the writer is idle.
    fn file_under(
        &self,
        range: (Bound<u64>, Bound<u64>),
        mut rows: BTreeMap<u64, Arc<[u8]>>,
    ) -> Result<Option<Vec<Entry>>, StoreError> {
        let start = first_unpurged(self.store.last_purged());
        let (from, last) = readable(range, start);
        // A leader replicating what it just appended reads entries the tail holds whole: no
        // `pread` then (the tail's keys are distinct, so as many as the range is wide means
        // all of them).
        let tail_covers = last.is_some_and(|last| {
            from <= last && rows.range(from..=last).count() as u64 == last - from + 1
        });
        if !tail_covers {
            let stored = self
                .store
                .db()
                .with_log(|log| Ok(log.read((Bound::Included(from), range.1))?))?;
            for (index, row) in stored {
                rows.entry(index).or_insert_with(|| Arc::from(row));
            }
        }
        let mut entries = Vec::with_capacity(rows.len());
        let mut expected = None;
        for (index, row) in rows.range(start..) {
            if expected.is_some_and(|expected| expected != *index) {
                return Ok(None);
            }
            expected = index.checked_add(1);
            entries.push(decode_entry(row)?);
        }
        Ok(Some(entries))
    }
}

/// The first index a reader may see: the one after the last purged (invariant 1).
fn first_unpurged(last_purged: Option<LogId>) -> u64 {
    last_purged.map_or(0, |purged| purged.index.saturating_add(1))
}

/// `range` as the first and last index a read may return: from `start`, the first unpurged
/// index (invariant 1), up to the range's end (`None`: open-ended, or below index 0).
fn readable(range: (Bound<u64>, Bound<u64>), start: u64) -> (u64, Option<u64>) {
    let from = match range.0 {
        Bound::Included(from) => from.max(start),
        Bound::Excluded(from) => from.saturating_add(1).max(start),
        Bound::Unbounded => start,
    };
    let last = match range.1 {
        Bound::Included(last) => Some(last),
        Bound::Excluded(end) => end.checked_sub(1),
        Bound::Unbounded => None,
    };
    (from, last)
}

/// True when `range` holds no index.
fn range_is_empty(range: &(Bound<u64>, Bound<u64>)) -> bool {
    let start = match range.0 {
        Bound::Included(start) => start,
        Bound::Excluded(start) => match start.checked_add(1) {
            Some(start) => start,
            None => return true,
        },
        Bound::Unbounded => 0,
    };
    match range.1 {
        Bound::Included(end) => start > end,
        Bound::Excluded(end) => start >= end,
        Bound::Unbounded => false,
    }
}

fn decode_entry(row: &[u8]) -> Result<Entry, StoreError> {
    serde_json::from_slice(row).map_err(|error| StoreError::Decode {
        what: "log entry",
        reason: error.to_string(),
    })
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        self.entries(range).await.map_err(StoreError::read_logs)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.vote().map_err(StoreError::read_vote)
    }
}

impl LogStore {
    /// The last vote submitted, or the file's when none was since the start. Replication reads
    /// it around every read of entries (openraft's `leader_bounded_stream`), so it never waits
    /// for the writer.
    fn vote(&self) -> Result<Option<Vote>, StoreError> {
        if let Some(vote) = self.store.submitted_vote() {
            return serde_json::from_slice(&vote)
                .map(Some)
                .map_err(|error| StoreError::Decode {
                    what: "vote",
                    reason: error.to_string(),
                });
        }
        let txn = self.store.db().read()?;
        let meta = txn.open_table(META).map_err(StoreError::redb)?;
        get_json(&meta, KEY_VOTE, "vote")
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let (last_purged_log_id, last_log_id, _) =
            self.log_state().await.map_err(StoreError::read_logs)?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.store
            .write(WriteOp::SaveVote {
                vote: to_json(vote),
            })
            .await
            .map_err(StoreError::write_vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.store.set_committed(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.store.committed())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        let mut appended = Vec::new();
        for entry in entries {
            let row = serde_json::to_vec(&entry).map_err(|error| {
                StoreError::Decode {
                    what: "log entry (encoding it)",
                    reason: error.to_string(),
                }
                .write_logs()
            })?;
            rows.push((entry.log_id.index, Arc::from(row)));
            appended.push(entry);
        }
        if rows.is_empty() {
            callback.io_completed(Ok(()));
            return Ok(());
        }
        self.recent.appended(appended);
        self.store
            .submit(WriteOp::Append { rows }, Completion::Flushed(callback))
            .map_err(StoreError::write_logs)
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), StorageError> {
        self.recent
            .forget_after(last_log_id.map(|log_id| log_id.index));
        self.store
            .write(WriteOp::Truncate {
                since: last_log_id.map_or(0, |log_id| log_id.index.saturating_add(1)),
            })
            .await
            .map_err(StoreError::write_logs)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.recent.forget_upto(log_id.index);
        self.store
            .write(WriteOp::Purge { upto: log_id })
            .await
            .map_err(StoreError::write_logs)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::decode_entry;

    /// A log entry of data format 1 (`tests/data_format.rs` pins it).
    const ENTRY: &[u8] = include_bytes!("../../tests/data/log-entry-format1.json");

    proptest! {
        /// A log row of arbitrary bytes is a decode error, never a panic.
        #[test]
        fn fuzz_log_entry_decode_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_entry(&bytes);
        }

        /// A real entry cut short or with one byte changed: a decode error or an entry,
        /// never a panic.
        #[test]
        fn fuzz_log_entry_decode_a_damaged_entry(at in any::<usize>(), byte in any::<u8>(), cut in any::<bool>()) {
            let mut row = ENTRY.to_vec();
            let at = at % row.len();
            if cut {
                row.truncate(at);
            } else {
                row[at] = byte;
            }
            let _ = decode_entry(&row);
        }
    }
}
