//! openraft's log storage (`RaftLogStorage`, `RaftLogReader`) on redb.
//!
//! Writes (append, vote, truncate, purge) are handed to the group-commit writer (`writer.rs`);
//! `append` returns as soon as the entries are queued and openraft's `LogFlushed` callback fires
//! after the transaction holding them has been fsynced. The committed log id is kept in memory
//! and written with the next transaction (`writer.rs`, invariant 4).
//!
//! Reads see every write submitted before them: each read first waits for the writer to finish
//! the requests queued before it ([`Store::caught_up`]), then reads a redb snapshot. Keeping the
//! unflushed tail in memory instead would let a read skip that wait, but truncations and purges
//! in flight would then have to be replayed over the tail by hand; waiting is simpler and costs
//! nothing in practice, because openraft 0.9.25 waits for each append's flush itself before it
//! reads or writes anything else. Reads run inline on the calling task: they are short, touch
//! pages redb usually has cached, and never fsync.
//!
//! Invariants:
//! 1. No hole: entries are contiguous from the last purged index + 1 to the last entry.
//! 2. `get_log_state().last_log_id` is the last entry's id, or the last purged id when the log
//!    is empty (openraft's contract).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use redb::ReadableTable;

use super::database::{KEY_LAST_PURGED, KEY_VOTE, LOG, META, get_json, to_json};
use super::error::StoreError;
use super::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use super::writer::{Completion, Store, WriteOp};

/// The Raft log and vote of one node. Cheap to clone: clones share the file and the writer.
#[derive(Clone)]
pub struct LogStore {
    /// The data file and its writer, shared with the state-machine store.
    store: Arc<Store>,
}

/// A summary of the log on disk, for status pages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStatus {
    /// The index the log was purged up to (inclusive), `None` if never purged.
    pub last_purged_index: Option<u64>,
    /// The last index present (or the last purged one when the log is empty).
    pub last_index: Option<u64>,
    /// How many entries are stored.
    pub entries: u64,
}

impl LogStore {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        LogStore { store }
    }

    /// Reads the log's bounds after every submitted write has landed.
    async fn log_state(&self) -> Result<(Option<LogId>, Option<LogId>, u64), StoreError> {
        self.store.caught_up().await?;
        let txn = self.store.db().read()?;
        let meta = txn.open_table(META).map_err(StoreError::redb)?;
        let last_purged: Option<LogId> = get_json(&meta, KEY_LAST_PURGED, "last purged log id")?;
        let log = txn.open_table(LOG).map_err(StoreError::redb)?;
        let entries = redb::ReadableTableMetadata::len(&log).map_err(StoreError::redb)?;
        let last = match log.last().map_err(StoreError::redb)? {
            Some((_, row)) => Some(decode_entry(row.value())?.log_id),
            None => None,
        };
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

    /// Entries in `range`, after every submitted write has landed.
    async fn entries(&self, range: (Bound<u64>, Bound<u64>)) -> Result<Vec<Entry>, StoreError> {
        self.store.caught_up().await?;
        if range_is_empty(&range) {
            return Ok(Vec::new());
        }
        let txn = self.store.db().read()?;
        let log = txn.open_table(LOG).map_err(StoreError::redb)?;
        let mut entries = Vec::new();
        for row in log.range::<u64>(range).map_err(StoreError::redb)? {
            let (_, row) = row.map_err(StoreError::redb)?;
            entries.push(decode_entry(row.value())?);
        }
        Ok(entries)
    }
}

/// True when `range` holds no index (redb refuses a range whose start is after its end).
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

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        let read = async {
            self.store.caught_up().await?;
            let txn = self.store.db().read()?;
            let meta = txn.open_table(META).map_err(StoreError::redb)?;
            get_json(&meta, KEY_VOTE, "vote")
        };
        read.await.map_err(StoreError::read_vote)
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
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for entry in entries {
            let row = serde_json::to_vec(&entry).map_err(|error| {
                StoreError::Decode {
                    what: "log entry (encoding it)",
                    reason: error.to_string(),
                }
                .write_logs()
            })?;
            rows.push((entry.log_id.index, row));
        }
        if rows.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        self.store
            .submit(WriteOp::Append { rows }, Completion::Flushed(callback))
            .map_err(StoreError::write_logs)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.store
            .write(WriteOp::Truncate {
                since: log_id.index,
            })
            .await
            .map_err(StoreError::write_logs)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
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
        /// Issue 15: a log row of arbitrary bytes is a decode error, never a panic.
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
