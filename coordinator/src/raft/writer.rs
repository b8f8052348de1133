//! The group-commit writer: one OS thread that owns every write to the data file.
//!
//! ```text
//!  LogStore::append ─┐                      writer thread (std::thread, never a tokio worker)
//!  save_vote ────────┤  Request{seq, op,    ┌──────────────────────────────────────────────┐
//!  truncate / purge ─┼─ completion} ──────▶ │ recv one, then drain every pending request   │
//!  snapshot save ────┘  (std mpsc, FIFO)    │ apply all, in order, in ONE write transaction│
//!                                           │ commit with Durability::Immediate (fsync)    │
//!                                           │ publish progress (seq), then fire callbacks  │
//!                                           └──────────────────────────────────────────────┘
//! ```
//!
//! Why a thread: redb allows one write transaction at a time and its commit blocks on fsync;
//! on a tokio worker that would stall every task behind it. Why draining: each fsync costs the
//! same whether it carries one request or a thousand, so requests that arrive while a commit is
//! in flight share the next one. openraft 0.10 does not wait for an append's flush before it
//! submits the next one, or before it replicates the entries: appends that arrive during a
//! commit share the next commit.
//!
//! What is submitted but not yet committed stays readable from memory ([`Tail`]): openraft
//! 0.10 reads the entries it replicates as soon as `append` returns, and the leader must not
//! wait for its own fsync to send them (issue 17: the leader's and the followers' fsyncs then
//! overlap). Durability is unchanged: the flush callback still fires only after the commit.
//!
//! Invariants:
//! 1. Requests are applied in submission order; a request's completion fires only after the
//!    transaction holding it has committed durably (an append's `LogFlushed` callback included:
//!    sebadob/hiqlite#361 is the bug this prevents).
//! 2. After one failed commit nothing else is written: every later request gets
//!    [`StoreError::Failed`]. A failed fsync is never retried.
//! 3. `progress.processed` only grows, and covers a request only after its transaction ended, so
//!    a reader that waits for the sequence number it saw at submission time reads every write
//!    submitted before it.
//! 4. The committed log id is never fsynced on its own: it rides along with the next transaction
//!    (or the final one at close). Losing it in a crash only means openraft re-applies less of
//!    the log at start and catches up once the leader commits again. It is written only when
//!    the log on disk holds its entry: a leader may learn an entry is committed (on a majority
//!    of followers) before its own append of it is durable.
//! 5. The tail holds exactly the appended rows not yet committed, minus those a later
//!    truncate or purge removed; a row leaves it only after the transaction holding it ended.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use openraft::storage::IOFlushed;
use redb::{Database, Durability, ReadableTable};
use tokio::sync::{oneshot, watch};

use super::database::{
    Db, KEY_COMMITTED, KEY_LAST_PURGED, KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META, KEY_VOTE, LOG, META,
    SNAPSHOT, get_json, to_json,
};
use super::error::{RaftError, StoreError};
use super::types::{LogId, SnapshotMeta, TypeConfig};

/// Most requests in one transaction, so one commit's latency stays bounded under a flood.
const BATCH_REQUESTS_MAX: usize = 4096;
/// Most bytes of entries and snapshots in one transaction.
const BATCH_BYTES_MAX: usize = 32 * 1024 * 1024;

/// One write, as the writer applies it.
pub(crate) enum WriteOp {
    /// Insert log entries (index, serialized entry).
    Append {
        /// The entries, in index order (shared with the [`Tail`] until they are durable).
        rows: Vec<(u64, Arc<[u8]>)>,
    },
    /// Delete every entry at or after `since`.
    Truncate {
        /// First index to delete.
        since: u64,
    },
    /// Delete every entry up to and including `upto`, and remember it as the last purged.
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

/// Who to tell when a request's transaction has ended.
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

/// What the writer has done, published after every transaction.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// Highest sequence number whose transaction has ended (committed or failed).
    processed: u64,
    /// The first failure; once set the writer writes nothing more.
    failed: Option<StoreError>,
    /// The writer thread has exited and dropped its database handle.
    closed: bool,
}

/// Counters of the writer's work, for tests, benchmarks and (later) metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Write transactions committed (each one fsync).
    pub transactions: u64,
    /// Requests carried by those transactions.
    pub requests: u64,
    /// Log entries appended.
    pub entries: u64,
}

#[derive(Default)]
struct Counters {
    transactions: AtomicU64,
    requests: AtomicU64,
    entries: AtomicU64,
}

/// The part of the store the writer thread shares. It holds no sender, so the writer exits
/// once every [`Store`] is gone (or closed).
struct Shared {
    /// The data file.
    db: Db,
    /// The writer's progress; readers wait on it.
    progress: watch::Sender<Progress>,
    /// The latest committed log id openraft reported (see invariant 4).
    committed: Mutex<Option<LogId>>,
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
    /// Starts the writer thread for an opened database.
    pub(crate) fn start(db: Db, committed: Option<LogId>) -> Result<Arc<Store>, RaftError> {
        let database = db.database()?;
        let shared = Arc::new(Shared {
            db,
            progress: watch::Sender::new(Progress::default()),
            committed: Mutex::new(committed),
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

    /// The data file, for reads.
    pub(crate) fn db(&self) -> &Db {
        &self.shared.db
    }

    /// Hands a request to the writer. Returns at once; `done` fires after the commit.
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
    /// until its transaction ends.
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
        }
    }

    /// Stops accepting writes, lets the writer finish what it has (and write the committed id),
    /// then closes the file so it can be reopened at once. Waits at most `timeout`.
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

    /// Drops from the tail the rows of requests up to `seq`, whose transaction has ended.
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
    mut committed_written: Option<LogId>,
) {
    let _exit = ExitGuard(shared.clone());
    let mut failed: Option<StoreError> = None;
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
            None => commit(&database, &shared, &batch, &mut committed_written),
        };
        if let (Err(error), None) = (&result, &failed) {
            tracing::error!(%error, "raft store commit failed; the store accepts no more writes");
            failed = Some(error.clone());
        }
        let last_seq = batch.last().map_or(0, |request| request.seq);
        // The rows are in the file (or the store failed): they leave the tail before the
        // progress says so, so a reader that saw the progress finds them in the file.
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
        && committed != committed_written
        && let Err(error) = commit(&database, &shared, &[], &mut committed_written)
    {
        tracing::warn!(%error, "could not save the committed log id at close");
    }
    drop(database);
}

/// Applies a batch in one durable transaction.
fn commit(
    database: &Database,
    shared: &Shared,
    batch: &[Request],
    committed_written: &mut Option<LogId>,
) -> Result<(), StoreError> {
    let mut txn = database.begin_write().map_err(StoreError::redb)?;
    txn.set_durability(Durability::Immediate)
        .map_err(StoreError::redb)?;
    let committed = *shared
        .committed
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mut entries = 0u64;
    {
        let mut log = txn.open_table(LOG).map_err(StoreError::redb)?;
        let mut meta = txn.open_table(META).map_err(StoreError::redb)?;
        let mut snapshot = txn.open_table(SNAPSHOT).map_err(StoreError::redb)?;
        for request in batch {
            match &request.op {
                WriteOp::Append { rows } => {
                    for (index, row) in rows {
                        log.insert(index, row.as_ref()).map_err(StoreError::redb)?;
                    }
                    entries += rows.len() as u64;
                }
                WriteOp::Truncate { since } => {
                    log.retain_in(*since.., |_, _| false)
                        .map_err(StoreError::redb)?;
                }
                WriteOp::Purge { upto } => {
                    log.retain_in(..=upto.index, |_, _| false)
                        .map_err(StoreError::redb)?;
                    let purged: Option<LogId> =
                        get_json(&meta, KEY_LAST_PURGED, "last purged log id")?;
                    if purged.is_none_or(|purged| purged < *upto) {
                        meta.insert(KEY_LAST_PURGED, to_json(upto).as_slice())
                            .map_err(StoreError::redb)?;
                    }
                }
                WriteOp::SaveVote { vote } => {
                    meta.insert(KEY_VOTE, vote.as_slice())
                        .map_err(StoreError::redb)?;
                }
                WriteOp::SaveSnapshot {
                    meta: snapshot_meta,
                    data,
                    install,
                } => {
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
        let last_index = log
            .last()
            .map_err(StoreError::redb)?
            .map(|(index, _)| index.value());
        let purged: Option<LogId> = get_json(&meta, KEY_LAST_PURGED, "last purged log id")?;
        let in_log = |log_id: &LogId| {
            last_index.is_some_and(|last| log_id.index <= last)
                || purged.is_some_and(|purged| log_id.index <= purged.index)
        };
        if committed != *committed_written
            && let Some(committed) = &committed
            && in_log(committed)
        {
            meta.insert(KEY_COMMITTED, to_json(committed).as_slice())
                .map_err(StoreError::redb)?;
            *committed_written = Some(*committed);
        }
    }
    txn.commit().map_err(StoreError::redb)?;
    let counters = &shared.counters;
    counters.transactions.fetch_add(1, Ordering::Relaxed);
    counters
        .requests
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    counters.entries.fetch_add(entries, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use redb::ReadableDatabase;

    use super::super::database::{DATA_FILE_NAME, Db, TOOL_CACHE_BYTES};
    use super::super::types::Vote;
    use super::*;

    fn start(dir: &std::path::Path) -> Arc<Store> {
        let (db, loaded) =
            Db::open(&dir.join(DATA_FILE_NAME), 7, TOOL_CACHE_BYTES).expect("a fresh file opens");
        Store::start(db, loaded.committed).expect("the writer starts")
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

    /// Group commit: requests pending together share one fsynced transaction, and each
    /// completion fires only once its entries are committed (readable from a new read).
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
            let txn = store.db().read().expect("read");
            let log = txn.open_table(LOG).expect("log table");
            assert!(
                log.get(index).expect("read").is_some(),
                "entry {index} is committed when its completion fires"
            );
        }
        let stats = store.stats();
        println!(
            "{appends} pending appends committed in {} transactions",
            stats.transactions
        );
        assert_eq!(stats.entries, appends);
        assert_eq!(stats.requests, appends);
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
        let txn = store.db().read().expect("read");
        let log = txn.open_table(LOG).expect("log table");
        assert_eq!(redb::ReadableTableMetadata::len(&log).expect("len"), 40);
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

        let (db, loaded) =
            Db::open(&dir.path().join(DATA_FILE_NAME), 7, TOOL_CACHE_BYTES).expect("reopens");
        assert_eq!(loaded.committed, Some(log_id(5)));
        let database = db.database().expect("open");
        let txn = database.begin_read().expect("read");
        let meta = txn.open_table(META).expect("meta");
        let vote: Option<Vote> = get_json(&meta, KEY_VOTE, "vote").expect("vote");
        assert_eq!(vote, Some(Vote::new(1, 7)));
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
        let (_, loaded) =
            Db::open(&dir.path().join(DATA_FILE_NAME), 7, TOOL_CACHE_BYTES).expect("reopens");
        assert_eq!(loaded.committed, None, "entry 4 never reached the file");

        let store = start(dir.path());
        store.set_committed(Some(log_id(4)));
        append_durably(&store, 3..=4).await;
        store.close(Duration::from_secs(10)).await.expect("closes");
        let (_, loaded) =
            Db::open(&dir.path().join(DATA_FILE_NAME), 7, TOOL_CACHE_BYTES).expect("reopens");
        assert_eq!(loaded.committed, Some(log_id(4)));
    }

    /// Issue 17: entries appended but not yet durable are readable at once from the tail, and
    /// a truncate in flight makes the tail unusable until the writer has done it.
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
