//! One batch of the writer thread, from its first write to its durable point: the segment
//! log's sync, then the redb commit. The diagram and the numbered invariants are in
//! `writer.rs`; this file keeps invariant 1's durable point (the log synced and redb
//! committed before `run` fires a completion), invariant 4 (the committed id rides along, and
//! only once the log on disk holds its entry) and invariant 6 (the purged id is durable
//! before a segment is deleted).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Instant;

use metrics::histogram;
use redb::{Database, Durability, WriteTransaction};

use super::super::database::{
    KEY_COMMITTED, KEY_LAST_PURGED, KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META, KEY_VOTE, META, SNAPSHOT,
    get_json, to_json,
};
use super::super::error::StoreError;
use super::super::metrics::DISK_SYNC_SECONDS;
use super::super::types::{LogId, SnapshotMeta};
use super::{COMMITTED_SAVE_INTERVAL, Request, Shared, WriteOp};

/// The writer thread's state while it writes one batch: what it has written and not yet made
/// durable.
pub(super) struct Batch<'a> {
    /// The store's shared state (the log, the committed and purged ids, the counters).
    pub(super) shared: &'a Shared,
    /// The redb file.
    pub(super) database: &'a Database,
    /// The committed log id last written to redb (invariant 4).
    pub(super) committed_written: Option<LogId>,
    /// When redb was last committed (it carries the committed id when that moved).
    pub(super) committed_saved_at: Instant,
    /// The redb transaction of the batch, opened by its first record for redb.
    pub(super) txn: Option<WriteTransaction>,
    /// The segment log was written since its last sync.
    pub(super) log_written: bool,
    /// Entries written since the last durable point.
    pub(super) entries: u64,
}

impl Batch<'_> {
    /// Applies a batch in submission order and makes it durable (invariants 1, 4 and 6). An
    /// error leaves the batch's writes undone or unknown; the caller writes nothing more.
    pub(super) fn write(&mut self, batch: &[Request]) -> Result<(), StoreError> {
        let result = self.apply(batch);
        if result.is_err() {
            // Dropping an uncommitted redb transaction aborts it.
            self.txn = None;
            self.log_written = false;
        }
        result
    }

    fn apply(&mut self, batch: &[Request]) -> Result<(), StoreError> {
        for request in batch {
            match &request.op {
                WriteOp::Append { rows } => {
                    self.shared.db.with_log_mut(|log| {
                        log.write(rows.iter().map(|(index, row)| (*index, row.as_ref())))
                            .map_err(StoreError::from)
                    })?;
                    self.log_written = true;
                    self.entries += rows.len() as u64;
                }
                WriteOp::Truncate { since } => {
                    self.shared
                        .db
                        .with_log_mut(|log| log.truncate_from(*since).map_err(StoreError::from))?;
                }
                WriteOp::Purge { upto } => {
                    let purged = *self
                        .shared
                        .purged
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if purged.is_none_or(|purged| purged < *upto) {
                        let txn = self.txn()?;
                        txn.open_table(META)
                            .map_err(StoreError::redb)?
                            .insert(KEY_LAST_PURGED, to_json(upto).as_slice())
                            .map_err(StoreError::redb)?;
                        // Invariant 6: the purged id is durable before any segment goes.
                        self.make_durable(Some(*upto))?;
                        self.shared.db.with_log_mut(|log| {
                            log.purge_upto(upto.index).map_err(StoreError::from)
                        })?;
                    }
                }
                WriteOp::SaveVote { vote } => {
                    self.txn()?
                        .open_table(META)
                        .map_err(StoreError::redb)?
                        .insert(KEY_VOTE, vote.as_slice())
                        .map_err(StoreError::redb)?;
                }
                WriteOp::SaveSnapshot {
                    meta: snapshot_meta,
                    data,
                    install,
                } => {
                    let txn = self.txn()?;
                    let mut snapshot = txn.open_table(SNAPSHOT).map_err(StoreError::redb)?;
                    let stored: Option<SnapshotMeta> =
                        get_json(&snapshot, KEY_SNAPSHOT_META, "snapshot meta")?;
                    let newer_stored =
                        stored.is_some_and(|stored| stored.last_log_id > snapshot_meta.last_log_id);
                    if *install || !newer_stored {
                        snapshot
                            .insert(KEY_SNAPSHOT_META, to_json(snapshot_meta).as_slice())
                            .map_err(StoreError::redb)?;
                        snapshot
                            .insert(KEY_SNAPSHOT_DATA, data.as_slice())
                            .map_err(StoreError::redb)?;
                    }
                }
            }
        }
        if self.txn.is_none() && self.committed_saved_at.elapsed() >= COMMITTED_SAVE_INTERVAL {
            let committed = *self
                .shared
                .committed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if committed != self.committed_written {
                // Invariant 4's bound: no redb transaction came for a while to carry it.
                self.txn()?;
            }
        }
        self.make_durable(None)?;
        let counters = &self.shared.counters;
        counters.transactions.fetch_add(1, Ordering::Relaxed);
        counters
            .requests
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The batch's redb transaction, begun on first use.
    fn txn(&mut self) -> Result<&mut WriteTransaction, StoreError> {
        if self.txn.is_none() {
            let mut txn = self.database.begin_write().map_err(StoreError::redb)?;
            txn.set_durability(Durability::Immediate)
                .map_err(StoreError::redb)?;
            self.txn = Some(txn);
        }
        Ok(self.txn.as_mut().expect("begun above"))
    }

    /// Syncs the segment log if it was written, then commits the redb transaction if one was
    /// begun, with the committed id when it moved and its entry is in the log on disk
    /// (invariant 4). `purging` is a last purged id the transaction carries, not yet in
    /// `shared.purged`, which this sets once it is durable.
    fn make_durable(&mut self, purging: Option<LogId>) -> Result<(), StoreError> {
        let counters = &self.shared.counters;
        if self.log_written {
            let started = Instant::now();
            self.shared
                .db
                .with_log(|log| log.sync().map_err(StoreError::from))?;
            histogram!(DISK_SYNC_SECONDS, "store" => "log").record(started.elapsed().as_secs_f64());
            self.log_written = false;
            counters.log_syncs.fetch_add(1, Ordering::Relaxed);
            counters
                .entries
                .fetch_add(std::mem::take(&mut self.entries), Ordering::Relaxed);
        }
        if self.txn.is_none() {
            return Ok(());
        }
        self.write_committed(purging)?;
        let txn = self.txn.take().expect("checked above");
        let started = Instant::now();
        txn.commit().map_err(StoreError::redb)?;
        self.committed_saved_at = Instant::now();
        histogram!(DISK_SYNC_SECONDS, "store" => "redb").record(
            self.committed_saved_at
                .duration_since(started)
                .as_secs_f64(),
        );
        counters.redb_commits.fetch_add(1, Ordering::Relaxed);
        if let Some(purging) = purging {
            *self
                .shared
                .purged
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(purging);
        }
        Ok(())
    }

    /// Puts the committed id into the open transaction if it moved and the log on disk holds
    /// its entry (or the purge covers it).
    fn write_committed(&mut self, purging: Option<LogId>) -> Result<(), StoreError> {
        let committed = *self
            .shared
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(committed) =
            committed.filter(|committed| Some(*committed) != self.committed_written)
        else {
            return Ok(());
        };
        let last_index = self.shared.db.with_log(|log| Ok(log.last_index()))?;
        let purged = purging.or(*self
            .shared
            .purged
            .lock()
            .unwrap_or_else(PoisonError::into_inner));
        let in_log = last_index.is_some_and(|last| committed.index <= last)
            || purged.is_some_and(|purged| committed.index <= purged.index);
        if in_log {
            self.txn()?
                .open_table(META)
                .map_err(StoreError::redb)?
                .insert(KEY_COMMITTED, to_json(&committed).as_slice())
                .map_err(StoreError::redb)?;
            self.committed_written = Some(committed);
        }
        Ok(())
    }

    /// At close: one transaction for the committed id alone.
    pub(super) fn save_committed(&mut self) -> Result<(), StoreError> {
        self.txn()?;
        self.make_durable(None)
    }
}
