//! The group-commit writer: one OS thread that owns every write to the data directory (the
//! Raft log's segment log and the redb file).
//!
//! ```text
//!  LogStore::append ─┐                      writer thread (std::thread, never a tokio worker)
//!  save_vote ────────┤  Request{seq, op,    ┌───────────────────────────────────────────────┐
//!  truncate / purge ─┼─ completion} ──────▶ │ recv one, then drain every pending request    │
//!  snapshot save ────┘  (std mpsc, FIFO)    │ apply all, in order:                          │
//!                                           │   append   ─▶ SegmentLog::write (page cache)  │
//!                                           │   truncate ─▶ SegmentLog::truncate_from       │
//!                                           │   vote, snapshot, last purged ─▶ ONE redb txn │
//!                                           │   purge: sync + commit so far, THEN purge_upto│
//!                                           │ SegmentLog::sync (one fdatasync) if written,  │
//!                                           │ THEN the redb commit (fsync) if it has rows   │
//!                                           │ publish progress (seq), then fire callbacks   │
//!                                           └───────────────────────────────────────────────┘
//! ```
//!
//! Why a thread: the segment log serves one writer, redb allows one write transaction at a
//! time, and both block on fsync; on a tokio worker that would stall every task behind it. Why
//! draining: each fsync costs the same whether it carries one request or a thousand, so
//! requests that arrive while a batch is being made durable share the next one. openraft 0.10
//! does not wait for an append's flush before it submits the next one, or before it replicates
//! the entries: appends that arrive during a sync share the next sync. A batch of appends only
//! (the common case) costs one `pwrite` and one `fdatasync`, and no redb commit.
//!
//! What is submitted but not yet durable stays readable from memory ([`Tail`]): openraft 0.10
//! reads the entries it replicates as soon as `append` returns, and the leader must not wait
//! for its own fsync to send them (so the leader's and the followers' fsyncs overlap). The tail
//! rather than reads of the segment log's written-but-unsynced records: `append` returns when
//! the request is queued, before this thread has called `SegmentLog::write`, and this thread
//! may be inside the previous batch's fdatasync then, so a read served by the log alone would
//! wait for that fsync. The segment log is behind an `RwLock` for the reads of durable entries:
//! `write`, `truncate_from` and `purge_upto` take the write lock (page-cache writes, or the
//! rare truncate and purge), `sync` the read lock, so no read waits for an fdatasync.
//! Durability does not rest on the tail: the flush callback fires only after the sync.
//!
//! Invariants:
//! 1. Requests are applied in submission order; a request's completion fires only after
//!    everything its batch wrote is durable: the segment log synced and the redb transaction
//!    committed (an append's `IOFlushed` callback included: sebadob/hiqlite#361 is the bug this
//!    prevents).
//! 2. After one failed write, sync or commit (of either store) nothing else is written: every
//!    later request gets [`StoreError::Failed`]. A failed fsync is never retried (the segment
//!    log also poisons itself).
//! 3. `progress.processed` only grows, and covers a request only after its batch ended, so
//!    a reader that waits for the sequence number it saw at submission time reads every write
//!    submitted before it.
//! 4. The committed log id is never fsynced on its own: it rides along with the next redb
//!    transaction (a vote, a snapshot, a purge) or the final one at close, and when none came
//!    for [`COMMITTED_SAVE_INTERVAL`], a batch of appends adds a redb commit for it. Losing it
//!    in a crash only means openraft re-applies less of the log at start and catches up once
//!    the leader commits again; but the entries past the saved id are then applied as new, not
//!    as a replay (their notices go out again), hence the bound. It is written only when the
//!    log on disk holds its entry: a leader may learn an entry is committed (on a majority of
//!    followers) before its own append of it is durable, so the segment log's sync of a batch
//!    precedes the redb commit that carries it.
//! 5. The tail holds exactly the appended rows not yet durable, minus those a later truncate
//!    or purge removed; a row leaves it only after the batch holding it ended.
//! 6. A purge makes the last purged id durable in redb before `purge_upto` deletes a segment:
//!    a crash in between leaves entries at or below the purged id, which reads clamp.
//!
//! This file keeps invariants 2, 3 and 5 and the order of invariant 1 (`run`: a batch's rows
//! leave the tail, then the progress moves, then the completions fire); `writer/batch.rs`
//! makes one batch durable (invariant 1's sync-then-commit, 4 and 6).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use openraft::storage::IOFlushed;
use redb::Database;
use tokio::sync::{oneshot, watch};

use super::database::Db;
use super::error::{RaftError, StoreError};
use super::types::{LogId, SnapshotMeta, TypeConfig};
use batch::Batch;

mod batch;

/// Most requests in one batch, so one batch's latency stays bounded under a flood.
const BATCH_REQUESTS_MAX: usize = 4096;
/// Longest time a moved committed id waits for a redb transaction to ride along with before
/// a batch commits one for it (invariant 4): at most a few redb commits per second under load,
/// and after a crash at most this long of entries is applied again as new rather than as a
/// replay.
const COMMITTED_SAVE_INTERVAL: Duration = Duration::from_millis(100);

/// Most bytes of entries and snapshots in one batch.
const BATCH_BYTES_MAX: usize = 32 * 1024 * 1024;

/// One write, as the writer applies it.
pub(crate) enum WriteOp {
    /// Insert log entries (index, serialized entry).
    Append {
        /// The entries, in index order (shared with the [`Tail`] until they are durable).
        rows: Vec<(u64, Arc<[u8]>)>,
    },
    /// Delete every entry at or after `since` (durably, at once: the segment log syncs it).
    Truncate {
        /// First index to delete.
        since: u64,
    },
    /// Delete every entry up to and including `upto`, and remember it as the last purged
    /// (invariant 6: remembered durably first).
    Purge {
        /// Last log id to delete.
        upto: LogId,
    },
    /// Replace the saved vote (serialized).
    SaveVote {
        /// The vote's JSON.
        vote: Vec<u8>,
    },
    /// Replace the stored snapshot.
    SaveSnapshot {
        /// Its metadata.
        meta: SnapshotMeta,
        /// Its bytes.
        data: Vec<u8>,
        /// True for an installed snapshot (it always replaces); false for one built here, which
        /// must not replace a newer one installed while it was being built.
        install: bool,
    },
}

impl WriteOp {
    fn bytes(&self) -> usize {
        match self {
            WriteOp::Append { rows } => rows.iter().map(|(_, row)| row.len() + 8).sum(),
            WriteOp::SaveSnapshot { data, .. } => data.len(),
            WriteOp::Truncate { .. } | WriteOp::Purge { .. } | WriteOp::SaveVote { .. } => 64,
        }
    }
}

/// Who to tell when a request's batch has ended.
pub(crate) enum Completion {
    /// openraft's append callback: fired only once the entries are durable.
    Flushed(IOFlushed<TypeConfig>),
    /// An awaiting caller (vote, truncate, purge, snapshot, tests).
    Reply(oneshot::Sender<Result<(), StoreError>>),
}

impl Completion {
    fn complete(self, result: Result<(), StoreError>) {
        match self {
            Completion::Flushed(callback) => {
                callback.io_completed(result.map_err(std::io::Error::other));
            }
            Completion::Reply(reply) => {
                // The caller may have given up (its task was cancelled); nothing to do then.
                let _ = reply.send(result);
            }
        }
    }
}

/// A request on its way to the writer.
struct Request {
    /// Submission order, from 1.
    seq: u64,
    /// What to write.
    op: WriteOp,
    /// Who to tell.
    done: Completion,
}

/// What the writer has done, published after every batch.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// Highest sequence number whose batch has ended (durable or failed).
    processed: u64,
    /// The first failure; once set the writer writes nothing more.
    failed: Option<StoreError>,
    /// The writer thread has exited and dropped its database handle.
    closed: bool,
}

/// Counters of the writer's work, for tests, benchmarks and (later) metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Batches made durable: each one segment-log fdatasync, one redb commit, or both.
    pub transactions: u64,
    /// Requests carried by those batches.
    pub requests: u64,
    /// Log entries appended.
    pub entries: u64,
    /// fdatasyncs of the segment log for appended entries (truncations and purges sync
    /// themselves and are not counted).
    pub log_syncs: u64,
    /// redb transactions committed (votes, snapshots, purges, the committed id at close).
    pub redb_commits: u64,
}

#[derive(Default)]
struct Counters {
    transactions: AtomicU64,
    requests: AtomicU64,
    entries: AtomicU64,
    log_syncs: AtomicU64,
    redb_commits: AtomicU64,
}

/// The part of the store the writer thread shares. It holds no sender, so the writer exits
/// once every [`Store`] is gone (or closed).
struct Shared {
    /// The data file and the Raft log.
    db: Db,
    /// The writer's progress; readers wait on it.
    progress: watch::Sender<Progress>,
    /// The latest committed log id openraft reported (see invariant 4).
    committed: Mutex<Option<LogId>>,
    /// The last purged log id durable in redb; reads clamp the log above it (invariant 6).
    purged: Mutex<Option<LogId>>,
    /// What is submitted and not yet durable, readable at once (invariant 5).
    tail: Mutex<Tail>,
    /// Work counters.
    counters: Counters,
}

/// Log rows and the vote submitted to the writer, kept in memory until they are durable so a
/// read need not wait for the fsync (see the module doc).
#[derive(Default)]
struct Tail {
    /// Appended rows not yet committed: index → (sequence number of the append, row).
    rows: BTreeMap<u64, (u64, Arc<[u8]>)>,
    /// Sequence number of the last truncate or purge submitted: until the writer has processed
    /// it, the file may still hold rows it removes, so reads wait for the writer instead.
    barrier: u64,
    /// The last vote submitted (JSON), durable or about to be.
    vote: Option<Vec<u8>>,
}

/// What a read of the log may use without waiting for the writer: the rows of the tail in the
/// range asked for. `None` when a truncate or purge is still in flight.
pub(crate) type TailRows = Option<BTreeMap<u64, Arc<[u8]>>>;

/// The submission side: the channel to the writer and the last sequence number handed out,
/// under one lock so sequence numbers follow channel order.
struct Queue {
    /// `None` once closed.
    tx: Option<mpsc::Sender<Request>>,
    /// Sequence number of the last request sent.
    submitted: u64,
}

/// The data file plus its writer: what the log store and the state-machine store share.
pub(crate) struct Store {
    shared: Arc<Shared>,
    queue: Mutex<Queue>,
}

impl Store {
    /// Starts the writer thread for an opened data directory.
    pub(crate) fn start(
        db: Db,
        committed: Option<LogId>,
        last_purged: Option<LogId>,
    ) -> Result<Arc<Store>, RaftError> {
        let database = db.database()?;
        let shared = Arc::new(Shared {
            db,
            progress: watch::Sender::new(Progress::default()),
            committed: Mutex::new(committed),
            purged: Mutex::new(last_purged),
            tail: Mutex::new(Tail::default()),
            counters: Counters::default(),
        });
        let (tx, rx) = mpsc::channel();
        let writer_shared = shared.clone();
        std::thread::Builder::new()
            .name("hivekeeper-raft-writer".into())
            .spawn(move || run(writer_shared, database, rx, committed))
            .map_err(|error| {
                RaftError::Runtime(format!("cannot start the writer thread: {error}"))
            })?;
        Ok(Arc::new(Store {
            shared,
            queue: Mutex::new(Queue {
                tx: Some(tx),
                submitted: 0,
            }),
        }))
    }

    /// The data file and the Raft log, for reads.
    pub(crate) fn db(&self) -> &Db {
        &self.shared.db
    }

    /// The last purged log id, durable in redb (entries at or below it are gone for readers).
    pub(crate) fn last_purged(&self) -> Option<LogId> {
        *self
            .shared
            .purged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a request to the writer. Returns at once; `done` fires once it is durable.
    pub(crate) fn submit(&self, op: WriteOp, done: Completion) -> Result<(), StoreError> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = queue.tx.as_ref() else {
            done.complete(Err(StoreError::Closed));
            return Err(StoreError::Closed);
        };
        let seq = queue.submitted + 1;
        self.shared.remember(seq, &op);
        if let Err(mpsc::SendError(request)) = tx.send(Request { seq, op, done }) {
            request.done.complete(Err(StoreError::Closed));
            return Err(StoreError::Closed);
        }
        queue.submitted = seq;
        Ok(())
    }

    /// Submits a request and waits until it is durable.
    pub(crate) async fn write(&self, op: WriteOp) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.submit(op, Completion::Reply(tx))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Waits until every request submitted before this call has left the writer, so a read that
    /// follows sees all of them (openraft may read what it appended before the flush returned).
    /// Costs nothing when the writer is idle.
    pub(crate) async fn caught_up(&self) -> Result<(), StoreError> {
        let target = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .submitted;
        let mut progress = self.shared.progress.subscribe();
        let progress = progress
            .wait_for(|progress| {
                progress.processed >= target || progress.closed || progress.failed.is_some()
            })
            .await
            .map_err(|_| StoreError::Closed)?
            .clone();
        match progress.failed {
            Some(error) => Err(StoreError::Failed(error.to_string())),
            None if progress.processed < target => Err(StoreError::Closed),
            None => Ok(()),
        }
    }

    /// The tail's rows in `range` (see [`TailRows`]). Take them before reading the file: a row
    /// leaves the tail only once it is in the file, so the two together miss nothing.
    pub(crate) fn tail_rows(
        &self,
        range: (std::ops::Bound<u64>, std::ops::Bound<u64>),
    ) -> TailRows {
        let tail = self.shared.tail();
        if tail.barrier > self.shared.progress.borrow().processed {
            return None;
        }
        Some(
            tail.rows
                .range(range)
                .map(|(index, (_, row))| (*index, row.clone()))
                .collect(),
        )
    }

    /// The last vote submitted (JSON), if any was since the start: newer than the file's
    /// until its batch ends.
    pub(crate) fn submitted_vote(&self) -> Option<Vec<u8>> {
        self.shared.tail().vote.clone()
    }

    /// Records the committed log id; it is written with the next transaction.
    pub(crate) fn set_committed(&self, committed: Option<LogId>) {
        *self
            .shared
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = committed;
    }

    /// The committed log id last recorded (durable or about to be).
    pub(crate) fn committed(&self) -> Option<LogId> {
        *self
            .shared
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What the writer has done so far.
    pub(crate) fn stats(&self) -> WriterStats {
        let counters = &self.shared.counters;
        WriterStats {
            transactions: counters.transactions.load(Ordering::Relaxed),
            requests: counters.requests.load(Ordering::Relaxed),
            entries: counters.entries.load(Ordering::Relaxed),
            log_syncs: counters.log_syncs.load(Ordering::Relaxed),
            redb_commits: counters.redb_commits.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting writes, lets the writer finish what it has (and write the committed id),
    /// then closes the log and the file so they can be reopened at once. Waits at most
    /// `timeout`.
    pub(crate) async fn close(&self, timeout: Duration) -> Result<(), RaftError> {
        let deadline = Instant::now() + timeout;
        let timed_out = |what| RaftError::Timeout {
            what,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
        // Dropping the only sender ends the writer's loop once it has drained the channel.
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .tx
                .take(),
        );
        let mut progress = self.shared.progress.subscribe();
        tokio::time::timeout(timeout, progress.wait_for(|progress| progress.closed))
            .await
            .map_err(|_| timed_out("the raft writer thread to exit"))?
            .map_err(|_| RaftError::Runtime("the writer's progress channel closed".into()))?;
        self.shared.db.close_log();
        let Some(mut database) = self.shared.db.take() else {
            return Ok(());
        };
        // Readers hold the database for one read at most; wait for them to let go.
        let database = loop {
            match Arc::try_unwrap(database) {
                Ok(database) => break database,
                Err(shared) if Instant::now() < deadline => {
                    database = shared;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(_) => return Err(timed_out("readers to release the data file")),
            }
        };
        tokio::task::spawn_blocking(move || database.close())
            .await
            .map_err(|error| RaftError::Runtime(format!("closing the data file: {error}")))?
            .map_err(|error| RaftError::Store(StoreError::redb(error)))
    }
}

impl Shared {
    /// The tail; it is only ever changed whole under the lock, so a poisoned lock is used as is.
    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a request about to be sent as request `seq` in the tail (invariant 5).
    fn remember(&self, seq: u64, op: &WriteOp) {
        let mut tail = self.tail();
        match op {
            WriteOp::Append { rows } => {
                for (index, row) in rows {
                    tail.rows.insert(*index, (seq, row.clone()));
                }
            }
            WriteOp::Truncate { since } => {
                tail.rows.split_off(since);
                tail.barrier = seq;
            }
            WriteOp::Purge { upto } => {
                tail.rows = tail.rows.split_off(&(upto.index.saturating_add(1)));
                tail.barrier = seq;
            }
            WriteOp::SaveVote { vote } => tail.vote = Some(vote.clone()),
            WriteOp::SaveSnapshot { .. } => {}
        }
    }

    /// Drops from the tail the rows of requests up to `seq`, whose batch has ended.
    fn forget_upto(&self, seq: u64) {
        self.tail().rows.retain(|_, (appended, _)| *appended > seq);
    }
}

/// Marks the writer closed however it ends, a panic included, so `close()` never waits forever.
struct ExitGuard(Arc<Shared>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let panicked = std::thread::panicking();
        self.0.progress.send_modify(|progress| {
            progress.closed = true;
            if panicked && progress.failed.is_none() {
                progress.failed = Some(StoreError::Failed("the writer thread panicked".into()));
            }
        });
    }
}

/// The writer thread's body.
fn run(
    shared: Arc<Shared>,
    database: Arc<Database>,
    rx: mpsc::Receiver<Request>,
    committed_written: Option<LogId>,
) {
    let _exit = ExitGuard(shared.clone());
    let mut failed: Option<StoreError> = None;
    let mut batch_writer = Batch {
        shared: &shared,
        database: &database,
        committed_written,
        committed_saved_at: Instant::now(),
        txn: None,
        log_written: false,
        entries: 0,
    };
    while let Ok(first) = rx.recv() {
        let mut bytes = first.op.bytes();
        let mut batch = vec![first];
        while batch.len() < BATCH_REQUESTS_MAX && bytes < BATCH_BYTES_MAX {
            match rx.try_recv() {
                Ok(request) => {
                    bytes += request.op.bytes();
                    batch.push(request);
                }
                Err(_) => break,
            }
        }
        let result = match &failed {
            Some(error) => Err(StoreError::Failed(error.to_string())),
            None => batch_writer.write(&batch),
        };
        if let (Err(error), None) = (&result, &failed) {
            tracing::error!(%error, "raft store write failed; the store accepts no more writes");
            failed = Some(error.clone());
        }
        let last_seq = batch.last().map_or(0, |request| request.seq);
        // The rows are durable (or the store failed): they leave the tail before the progress
        // says so, so a reader that saw the progress finds them in the log.
        shared.forget_upto(last_seq);
        shared.progress.send_modify(|progress| {
            progress.processed = last_seq;
            progress.failed.clone_from(&failed);
        });
        for request in batch {
            request.done.complete(result.clone());
        }
    }
    // Closed: write the committed id if it moved since the last transaction.
    let committed = *shared
        .committed
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if failed.is_none()
        && committed != batch_writer.committed_written
        && let Err(error) = batch_writer.save_committed()
    {
        tracing::warn!(%error, "could not save the committed log id at close");
    }
    drop(database);
}

#[cfg(test)]
mod tests {
    use redb::ReadableDatabase;

    use super::super::database::{
        Db, KEY_COMMITTED, KEY_VOTE, META, TOOL_CACHE_BYTES, get_json, to_json,
    };
    use super::super::types::Vote;
    use super::*;

    fn start(dir: &std::path::Path) -> Arc<Store> {
        let (db, loaded) = Db::open(dir, 7, TOOL_CACHE_BYTES, hivekeeper_segment_log::DEFAULTS)
            .expect("a fresh directory opens");
        Store::start(db, loaded.committed, loaded.last_purged).expect("the writer starts")
    }

    /// Appends a row `x` at each index of `indexes` and waits until they are durable.
    async fn append_durably(store: &Store, indexes: std::ops::RangeInclusive<u64>) {
        let rows = indexes.map(|index| (index, Arc::from(&b"x"[..]))).collect();
        store
            .write(WriteOp::Append { rows })
            .await
            .expect("the entries are written");
    }

    fn log_id(index: u64) -> LogId {
        openraft::testing::log_id::<TypeConfig>(1, 7, index)
    }

    /// The entries the segment log holds (synced or not), by index.
    fn logged(store: &Store) -> Vec<u64> {
        store
            .db()
            .with_log(|log| log.read(..).map_err(StoreError::from))
            .expect("the log reads")
            .into_iter()
            .map(|(index, _)| index)
            .collect()
    }

    /// Group commit: requests pending together share one fdatasync, and each completion fires
    /// only once its entries are in the log; appends alone never commit redb.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pending_appends_share_transactions_and_complete_after_the_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        let appends = 500u64;
        let mut completions = Vec::new();
        for index in 1..=appends {
            let (tx, rx) = oneshot::channel();
            let row: Arc<[u8]> = format!("entry {index}").into_bytes().into();
            store
                .submit(
                    WriteOp::Append {
                        rows: vec![(index, row)],
                    },
                    Completion::Reply(tx),
                )
                .expect("the writer accepts");
            completions.push((index, rx));
        }
        for (index, completion) in completions {
            tokio::time::timeout(Duration::from_secs(20), completion)
                .await
                .expect("completes in time")
                .expect("the writer answers")
                .expect("the commit succeeds");
            assert!(
                logged(&store).contains(&index),
                "entry {index} is in the log when its completion fires"
            );
        }
        let stats = store.stats();
        println!(
            "{appends} pending appends committed in {} transactions",
            stats.transactions
        );
        assert_eq!(stats.entries, appends);
        assert_eq!(stats.requests, appends);
        assert_eq!(stats.redb_commits, 0, "appends alone never commit redb");
        assert_eq!(stats.log_syncs, stats.transactions, "{stats:?}");
        assert!(
            stats.transactions < appends / 5,
            "far fewer transactions than appends: {stats:?}"
        );
        store.close(Duration::from_secs(10)).await.expect("closes");
    }

    /// Reads wait for the writes submitted before them, including ones not yet committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_after_a_submission_sees_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        for index in 1..=50 {
            let (tx, _rx) = oneshot::channel();
            store
                .submit(
                    WriteOp::Append {
                        rows: vec![(index, Arc::from(&b"x"[..]))],
                    },
                    Completion::Reply(tx),
                )
                .expect("accepted");
        }
        let (tx, _rx) = oneshot::channel();
        store
            .submit(WriteOp::Truncate { since: 41 }, Completion::Reply(tx))
            .expect("accepted");
        store.caught_up().await.expect("caught up");
        assert_eq!(logged(&store), (1..=40).collect::<Vec<_>>());
        store.close(Duration::from_secs(10)).await.expect("closes");
    }

    /// The committed id is not fsynced on its own but is saved by the next transaction or at
    /// close, and the file can be reopened as soon as `close` returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_committed_id_rides_along_and_is_saved_at_close() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        append_durably(&store, 1..=5).await;
        let appended = store.stats().transactions;
        store.set_committed(Some(log_id(3)));
        assert_eq!(
            store.stats().transactions,
            appended,
            "no fsync for the committed id alone"
        );
        store
            .write(WriteOp::SaveVote {
                vote: to_json(&Vote::new(1, 7)),
            })
            .await
            .expect("vote saved");
        store.set_committed(Some(log_id(5)));
        store.close(Duration::from_secs(10)).await.expect("closes");
        assert!(matches!(
            store.write(WriteOp::Truncate { since: 1 }).await,
            Err(StoreError::Closed)
        ));

        let (db, loaded) = Db::open(
            dir.path(),
            7,
            TOOL_CACHE_BYTES,
            hivekeeper_segment_log::DEFAULTS,
        )
        .expect("reopens");
        assert_eq!(loaded.committed, Some(log_id(5)));
        let database = db.database().expect("open");
        let txn = database.begin_read().expect("read");
        let meta = txn.open_table(META).expect("meta");
        let vote: Option<Vote> = get_json(&meta, KEY_VOTE, "vote").expect("vote");
        assert_eq!(vote, Some(Vote::new(1, 7)));
    }

    /// Invariant 4's bound: under appends alone (no vote, snapshot or purge to ride along
    /// with), a moved committed id still reaches redb once [`COMMITTED_SAVE_INTERVAL`] passed,
    /// and only then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_appends_alone_the_committed_id_is_saved_after_the_interval() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        append_durably(&store, 1..=2).await;
        store.set_committed(Some(log_id(2)));
        tokio::time::sleep(COMMITTED_SAVE_INTERVAL + Duration::from_millis(20)).await;
        append_durably(&store, 3..=3).await;
        assert_eq!(store.stats().redb_commits, 1, "{:?}", store.stats());
        let saved = || {
            let txn = store.db().read().expect("read");
            let meta = txn.open_table(META).expect("meta");
            get_json::<LogId>(&meta, KEY_COMMITTED, "committed").expect("decodes")
        };
        assert_eq!(saved(), Some(log_id(2)));
        // Unchanged since: the next appends commit no redb transaction.
        tokio::time::sleep(COMMITTED_SAVE_INTERVAL + Duration::from_millis(20)).await;
        append_durably(&store, 4..=4).await;
        assert_eq!(store.stats().redb_commits, 1, "{:?}", store.stats());
        store.close(Duration::from_secs(10)).await.expect("closes");
    }

    /// Invariant 4: a leader may learn that an entry is committed (on a majority of followers)
    /// before its own append of it is durable; the committed id is then not written until the
    /// file holds the entry, so a restart never finds a committed id past its log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committed_id_past_the_log_waits_for_its_entry() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        append_durably(&store, 1..=2).await;
        store.set_committed(Some(log_id(4)));
        store
            .write(WriteOp::SaveVote {
                vote: to_json(&Vote::new(1, 7)),
            })
            .await
            .expect("vote saved");
        store.close(Duration::from_secs(10)).await.expect("closes");
        let (_, loaded) = Db::open(
            dir.path(),
            7,
            TOOL_CACHE_BYTES,
            hivekeeper_segment_log::DEFAULTS,
        )
        .expect("reopens");
        assert_eq!(loaded.committed, None, "entry 4 never reached the file");

        let store = start(dir.path());
        store.set_committed(Some(log_id(4)));
        append_durably(&store, 3..=4).await;
        store.close(Duration::from_secs(10)).await.expect("closes");
        let (_, loaded) = Db::open(
            dir.path(),
            7,
            TOOL_CACHE_BYTES,
            hivekeeper_segment_log::DEFAULTS,
        )
        .expect("reopens");
        assert_eq!(loaded.committed, Some(log_id(4)));
    }

    /// Found by e2e_nemesis's disk-full fault: a follower installing a leader's snapshot purges
    /// past its log's end; the purged id became durable, then the new segment after it could
    /// not be preallocated on the full disk, and the member stopped. At the restart its log
    /// ended before the purged id, so the leader's next entries (purged id + 1) were refused
    /// as out of order and the member stopped again, every time. The open now finishes the
    /// purge: the log continues after the purged id.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purge_past_the_end_that_did_not_complete_is_finished_at_open() {
        use super::super::database::{KEY_LAST_PURGED, META};
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        append_durably(&store, 1..=5).await;
        store.close(Duration::from_secs(10)).await.expect("closes");
        // The purge's first step only: the purged id, durable in redb.
        {
            let (db, _) = Db::open(
                dir.path(),
                7,
                TOOL_CACHE_BYTES,
                hivekeeper_segment_log::DEFAULTS,
            )
            .expect("reopens");
            let database = db.database().expect("open");
            let txn = database.begin_write().expect("a write transaction");
            txn.open_table(META)
                .expect("the meta table")
                .insert(KEY_LAST_PURGED, to_json(&log_id(10)).as_slice())
                .expect("written");
            txn.commit().expect("committed");
            db.close_log();
        }
        let store = start(dir.path());
        append_durably(&store, 11..=12).await;
        assert_eq!(logged(&store), vec![11, 12]);
        store.close(Duration::from_secs(10)).await.expect("closes");
    }

    /// Entries appended but not yet durable are readable at once from the tail, and a truncate
    /// in flight makes the tail unusable until the writer has done it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn submitted_rows_are_readable_before_their_commit() {
        use std::ops::Bound;
        let dir = tempfile::tempdir().expect("temp dir");
        let store = start(dir.path());
        let everything = (Bound::Unbounded, Bound::Unbounded);
        for index in 1..=20 {
            let (tx, _rx) = oneshot::channel();
            let rows = vec![(index, Arc::from(format!("row {index}").as_bytes()))];
            store
                .submit(WriteOp::Append { rows }, Completion::Reply(tx))
                .expect("accepted");
            let tail = store.tail_rows(everything).expect("no truncate in flight");
            assert_eq!(
                tail.get(&index).map(|row| row.to_vec()),
                Some(format!("row {index}").into_bytes()),
                "row {index} is readable as soon as it is submitted"
            );
        }
        let (tx, _rx) = oneshot::channel();
        store
            .submit(WriteOp::Truncate { since: 11 }, Completion::Reply(tx))
            .expect("accepted");
        if let Some(tail) = store.tail_rows(everything) {
            // The writer already processed the truncate: nothing at or after 11 remains.
            assert!(tail.keys().all(|index| *index < 11), "{:?}", tail.keys());
        }
        store.caught_up().await.expect("caught up");
        let tail = store.tail_rows(everything).expect("the truncate is done");
        assert!(
            tail.is_empty(),
            "durable rows leave the tail: {:?}",
            tail.keys()
        );
        store.close(Duration::from_secs(10)).await.expect("closes");
    }
}
