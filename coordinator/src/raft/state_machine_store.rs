//! openraft's state-machine storage (`RaftStateMachine`, `RaftSnapshotBuilder`) around the pure
//! [`StateMachine`].
//!
//! The machine lives in memory; what is durable is the log (`log_store.rs`) and the latest
//! snapshot, stored in redb when it is built and when it is installed. At start the latest
//! snapshot is restored and openraft re-applies the log after it (up to the saved committed id
//! at once, the rest as it commits again).
//!
//! ```text
//!  openraft sm worker ── apply(entries) ──▶ lock ─▶ for each entry:
//!      Blank, Membership ─▶ no replies (membership remembered)
//!      Normal(Proposal)  ─▶ for each command, in order:
//!                           StateMachine::apply(LogMeta{index, term, now_ms}, command)
//!                             ├─ Ok((reply, events)) ─▶ Proposed{meta, reply} to openraft
//!                             │                         (→ the proposer), and
//!                             │                         Applied::Entry (after the lock is
//!                             │                         released) ─▶ AppliedSink, called on
//!                             │                         this same task (the node's fan-out)
//!                             ├─ Err(broken log)     ─▶ fatal StorageError, Raft stops
//!                             └─ panic               ─▶ caught here (catch_unwind): one ERROR
//!                                naming the entry's log id and command kind, the machine
//!                                marked broken (every later read or apply refused with
//!                                StoreError::ApplyPanicked, no poisoned mutex), and a fatal
//!                                StorageError: Raft stops, the node fails, `hivekeeper serve`
//!                                exits with EXIT_APPLY_PANICKED (docs/OPERATIONS.md)
//!  build_snapshot: copy of the machine (taken on the sm worker) ─▶ snapshot() bytes
//!                  ─▶ redb `snapshot` table (fsync) ─▶ openraft purges the log behind it
//! ```
//!
//! Applied entries go to an [`AppliedSink`], called on the state-machine worker itself once the
//! machine's lock is released: the node's fan-out answers waiting requests from there, with no
//! channel or task in between (a sink must therefore never block). Until the node installs its
//! sink ([`StateMachineStore::deliver_to`]) the notices are kept, in order, and handed over
//! first; entries re-applied at start come before the node is up.
//!
//! Invariants:
//! 1. `last_applied` is the id of the last entry applied (or of the installed snapshot), and
//!    `membership` the last membership entry at or before it: both move with the machine, under
//!    one lock, and both go into every snapshot's metadata.
//! 2. A snapshot's bytes are exactly `StateMachine::snapshot()` of the machine after
//!    `last_applied`; a snapshot that does not restore is an error, never a panic.
//! 3. A panic in `StateMachine::apply` never escapes this store and never poisons its lock:
//!    it is caught, and from then on the store answers [`StoreError::ApplyPanicked`] (the
//!    machine may be half changed), so the node stops with that named error.

use std::io::Cursor;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use openraft_legacy::network_v1::SnapshotReceiverFactory;
use tokio::sync::mpsc;

use super::database::{KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META, SNAPSHOT, get_json};
use super::error::{ApplyPanic, StoreError};
use super::types::{
    LogId, Proposed, Snapshot, SnapshotData, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig, log_id_text,
};
use super::writer::{Store, WriteOp};
use crate::state_machine::{Command, Event, LogMeta, Reply, StateMachine};

/// A panic caught while applying one command, with its message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Panicked {
    /// The panic's message, or a note that it had none.
    message: String,
}

/// The agent request a command carries: who asked, and the request's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The asking agent.
    pub agent: String,
    /// Its request id.
    pub request_id: String,
}

impl Origin {
    /// The origin of `command`, if it is an agent's request.
    pub fn of(command: &Command) -> Option<Origin> {
        match command {
            Command::Request { agent, request } => Some(Origin {
                agent: agent.clone(),
                request_id: request.id.clone(),
            }),
            _ => None,
        }
    }
}

/// What the state-machine store tells the node layer, in log order.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// A command of a normal entry was applied (one notice per command).
    Entry {
        /// The command's position (see [`Proposal::meta`]) and the entry's stamp.
        meta: LogMeta,
        /// The agent request the command carried; `None` for the node's own commands.
        origin: Option<Origin>,
        /// The machine's answer, also returned to the proposer's `client_write`.
        reply: Reply,
        /// What the entry did (deferred answers, notices, lease bookkeeping).
        events: Vec<Event>,
        /// True when the entry is re-applied at start (it was committed, and maybe answered,
        /// before the restart): agents may already have had its answer.
        ///
        /// [`Proposal::meta`]: super::Proposal::meta
        replayed: bool,
    },
    /// The machine was replaced by a snapshot from the leader: everything derived from it
    /// (lease deadlines, pending answers) must be rebuilt from [`StateMachine::leases`] etc.
    SnapshotInstalled {
        /// The last log index the snapshot covers.
        last_log_index: Option<u64>,
    },
}

/// The receiving end of [`Applied`] notices, for tools and tests ([`super::open`]).
pub type AppliedReceiver = mpsc::UnboundedReceiver<Applied>;

/// Where applied entries go, in log order. Called on openraft's state-machine worker: it must
/// not block or wait (queue work elsewhere if it needs to).
pub trait AppliedSink: Send + Sync + 'static {
    /// One applied command, or a snapshot installed.
    fn applied(&self, applied: Applied);
}

/// A channel is a sink: what tools and tests read with [`AppliedReceiver`]. Nobody listening
/// is fine (the reply still reaches openraft).
impl AppliedSink for mpsc::UnboundedSender<Applied> {
    fn applied(&self, applied: Applied) {
        let _ = self.send(applied);
    }
}

/// Notices kept until a sink is installed, then the sink, until Raft stops.
enum SinkState {
    /// No sink yet: kept in log order.
    Backlog(Vec<Applied>),
    /// The sink.
    Installed(Arc<dyn AppliedSink>),
    /// Raft has stopped: the sink was dropped (a channel sink's receiver sees its end), and
    /// nothing more is delivered.
    Closed,
}

impl SinkState {
    fn send(&mut self, applied: Applied) {
        match self {
            SinkState::Backlog(kept) => kept.push(applied),
            SinkState::Installed(sink) => sink.applied(applied),
            SinkState::Closed => {}
        }
    }
}

/// The machine and what openraft needs to know about it, changed together.
struct Applier {
    /// The pure state machine.
    machine: StateMachine,
    /// Last entry applied (or covered by the installed snapshot).
    last_applied: Option<LogId>,
    /// The last membership applied.
    membership: StoredMembership,
    /// Set when an apply panicked: the machine may be half changed, so nothing reads it any
    /// more (invariant 3).
    broken: Option<ApplyPanic>,
}

struct Inner {
    /// The data file and its writer.
    store: Arc<Store>,
    /// The state; a std mutex because nothing awaits while holding it.
    applier: Mutex<Applier>,
    /// Where applied entries go. Locked only after `applier` is released, and held while a
    /// batch is handed over, so the sink sees entries in log order.
    delivery: Mutex<SinkState>,
    /// Entries up to this index were committed before this start: applying them is a replay.
    replay_upto: Option<u64>,
    /// Test only: an apply of a request from this agent panics (the store's panic path).
    #[cfg(test)]
    panic_on_agent: Mutex<Option<String>>,
}

/// The state machine as openraft sees it. Cheap to clone: clones share the machine.
#[derive(Clone)]
pub struct StateMachineStore {
    inner: Arc<Inner>,
}

impl StateMachineStore {
    /// Builds the store from the stored snapshot (if any); `Err` if the snapshot is unreadable.
    pub(crate) fn new(
        store: Arc<Store>,
        snapshot: Option<(SnapshotMeta, Vec<u8>)>,
        replay_upto: Option<u64>,
    ) -> Result<StateMachineStore, crate::state_machine::Error> {
        let applier = match snapshot {
            None => Applier {
                machine: StateMachine::default(),
                last_applied: None,
                membership: StoredMembership::default(),
                broken: None,
            },
            Some((meta, data)) => Applier {
                machine: StateMachine::restore(&data)?,
                last_applied: meta.last_log_id,
                membership: meta.last_membership,
                broken: None,
            },
        };
        let inner = Inner {
            store,
            applier: Mutex::new(applier),
            delivery: Mutex::new(SinkState::Backlog(Vec::new())),
            replay_upto,
            #[cfg(test)]
            panic_on_agent: Mutex::new(None),
        };
        Ok(StateMachineStore {
            inner: Arc::new(inner),
        })
    }

    /// Sends every applied entry to `sink` from now on, after the ones kept so far.
    pub fn deliver_to(&self, sink: Arc<dyn AppliedSink>) {
        let mut delivery = self.delivery();
        if let SinkState::Backlog(kept) =
            std::mem::replace(&mut *delivery, SinkState::Installed(sink.clone()))
        {
            for applied in kept {
                sink.applied(applied);
            }
        }
    }

    /// Drops the sink (or what was kept for one): called once Raft has stopped, so that
    /// whoever reads the notices sees their end.
    pub(crate) fn close_delivery(&self) {
        *self.delivery() = SinkState::Closed;
    }

    /// The delivery slot; a sink that panicked cannot leave it half-updated (it is only ever
    /// replaced whole), so a poisoned lock is used as is.
    fn delivery(&self) -> MutexGuard<'_, SinkState> {
        self.inner
            .delivery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The applier, unless an apply panicked (invariant 3): then the named error.
    fn lock(&self) -> Result<MutexGuard<'_, Applier>, StoreError> {
        let applier = self
            .inner
            .applier
            .lock()
            .map_err(|_| StoreError::Poisoned)?;
        match &applier.broken {
            Some(panic) => Err(StoreError::ApplyPanicked(panic.clone())),
            None => Ok(applier),
        }
    }

    /// The panic that stopped this store, if an apply panicked.
    pub fn apply_panic(&self) -> Option<ApplyPanic> {
        match self.inner.applier.lock() {
            Ok(applier) => applier.broken.clone(),
            Err(_) => None,
        }
    }

    /// Test only: from now on, applying a request of `agent` panics.
    #[cfg(test)]
    pub(crate) fn panic_on_agent(&self, agent: &str) {
        *self.inner.panic_on_agent.lock().expect("only tests set it") = Some(agent.to_string());
    }

    /// Applies one command, catching a panic (invariant 3). `Ok(Err(..))` is the machine's own
    /// error (a broken log); `Err(..)` a panic, with its message.
    fn apply_one(
        &self,
        machine: &mut StateMachine,
        meta: LogMeta,
        command: Command,
    ) -> Result<Result<(Reply, Vec<Event>), crate::state_machine::Error>, Panicked> {
        #[cfg(test)]
        let panics = {
            let agent = self.inner.panic_on_agent.lock().expect("only tests set it");
            matches!((&*agent, &command), (Some(boom), Command::Request { agent, .. }) if boom == agent)
        };
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            #[cfg(test)]
            if panics {
                panic!("test hook: apply panics on this agent's requests");
            }
            machine.apply(meta, command)
        }))
        .map_err(|payload| Panicked {
            message: payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into()),
        })
    }

    /// Runs `read` on the machine as applied so far on this node (not linearizable by itself).
    pub fn read<T>(&self, read: impl FnOnce(&StateMachine) -> T) -> Result<T, StoreError> {
        Ok(read(&self.lock()?.machine))
    }

    /// The last log id applied.
    pub fn last_applied(&self) -> Result<Option<LogId>, StoreError> {
        Ok(self.lock()?.last_applied)
    }

    /// A copy of the machine and the id of the last entry applied into it, taken under one
    /// lock, so the copy is exactly the state after that entry (an online backup,
    /// `seed.rs`; serializing it is the caller's, off this lock).
    pub(crate) fn applied_copy(&self) -> Result<(StateMachine, Option<LogId>), StoreError> {
        let applier = self.lock()?;
        Ok((applier.machine.clone(), applier.last_applied))
    }

    /// The stored snapshot, read from the file after every submitted write has landed.
    async fn stored_snapshot(&self) -> Result<Option<Snapshot>, StoreError> {
        let store = &self.inner.store;
        store.caught_up().await?;
        let txn = store.db().read()?;
        let table = txn.open_table(SNAPSHOT).map_err(StoreError::redb)?;
        let Some(meta) = get_json::<SnapshotMeta>(&table, KEY_SNAPSHOT_META, "snapshot meta")?
        else {
            return Ok(None);
        };
        let data = table
            .get(KEY_SNAPSHOT_DATA)
            .map_err(StoreError::redb)?
            .map(|data| data.value().to_vec())
            .ok_or_else(|| StoreError::Decode {
                what: "snapshot",
                reason: "snapshot metadata without snapshot data".into(),
            })?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Cursor::new(data),
        }))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let applier = self.lock().map_err(StoreError::read_state_machine)?;
        Ok((applier.last_applied, applier.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), StorageError>
    where
        Strm:
            Stream<Item = Result<EntryResponder<TypeConfig>, StorageError>> + Unpin + OptionalSend,
    {
        // openraft hands the committed entries as a stream with one responder per entry it
        // has a waiting `client_write` for; each entry is applied, then answered, in log order.
        // The stream is drained before the machine is locked: nothing awaits under the lock.
        let mut batch = Vec::new();
        while let Some(item) = entries.next().await {
            batch.push(item?);
        }
        let mut applier = self.lock().map_err(StoreError::read_state_machine)?;
        let mut answers = Vec::with_capacity(batch.len());
        let mut notices = Vec::new();
        for (entry, responder) in batch {
            let log_id = entry.log_id;
            let entry_replies = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Membership(membership) => {
                    applier.membership = StoredMembership::new(Some(log_id), membership);
                    Vec::new()
                }
                EntryPayload::Normal(proposal) => {
                    let _span = tracing::debug_span!("apply", log_index = log_id.index).entered();
                    let mut entry_replies = Vec::with_capacity(proposal.commands.len());
                    let replayed = self
                        .inner
                        .replay_upto
                        .is_some_and(|upto| log_id.index <= upto);
                    for (command_index, command) in proposal.commands.iter().cloned().enumerate() {
                        let meta = proposal.meta(&log_id, applier.machine.applied_index());
                        let origin = Origin::of(&command);
                        let kind = command.kind();
                        let (reply, events) =
                            match self.apply_one(&mut applier.machine, meta, command) {
                                Ok(applied) => applied.map_err(|error| {
                                    StoreError::Apply {
                                        log_id: log_id_text(&log_id),
                                        reason: error.to_string(),
                                    }
                                    .apply()
                                })?,
                                Err(Panicked { message }) => {
                                    let panic = ApplyPanic {
                                        log_id: log_id_text(&log_id),
                                        command_index,
                                        command: kind,
                                        message,
                                    };
                                    tracing::error!(
                                        log_id = %log_id_text(&log_id),
                                        log_index = log_id.index,
                                        command_index,
                                        command = kind,
                                        "{panic}; stopping this node (fatal: every replica \
                                         applies this entry alike, report it)"
                                    );
                                    applier.broken = Some(panic.clone());
                                    return Err(StoreError::ApplyPanicked(panic).apply());
                                }
                            };
                        notices.push(Applied::Entry {
                            meta,
                            origin,
                            reply: reply.clone(),
                            events,
                            replayed,
                        });
                        entry_replies.push(Proposed { meta, reply });
                    }
                    entry_replies
                }
            };
            applier.last_applied = Some(log_id);
            if let Some(responder) = responder {
                answers.push((responder, entry_replies));
            }
        }
        // Handed over with the machine unlocked: the sink may read it (the fan-out counts live
        // leases), and reads and keepalives need not wait for the fan-out.
        drop(applier);
        let mut delivery = self.delivery();
        for notice in notices {
            delivery.send(notice);
        }
        drop(delivery);
        for (responder, replies) in answers {
            responder.send(replies);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // openraft calls this on its state-machine worker, between applies, so the copy is a
        // consistent view; serializing it happens later on the builder's own task.
        let (machine, last_applied, membership) = match self.lock() {
            Ok(applier) => (
                Ok(applier.machine.clone()),
                applier.last_applied,
                applier.membership.clone(),
            ),
            Err(error) => (
                Err(error.read_state_machine()),
                None,
                StoredMembership::default(),
            ),
        };
        SnapshotBuilder {
            store: self.inner.store.clone(),
            machine,
            last_applied,
            membership,
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let machine = StateMachine::restore(&data).map_err(|error| {
            StoreError::Decode {
                what: "installed snapshot",
                reason: error.to_string(),
            }
            .read_snapshot()
        })?;
        self.inner
            .store
            .write(WriteOp::SaveSnapshot {
                meta: meta.clone(),
                data,
                install: true,
            })
            .await
            .map_err(StoreError::write_snapshot)?;
        {
            let mut applier = self.lock().map_err(StoreError::read_state_machine)?;
            applier.machine = machine;
            applier.last_applied = meta.last_log_id;
            applier.membership = meta.last_membership.clone();
        }
        self.delivery().send(Applied::SnapshotInstalled {
            last_log_index: meta.last_log_id.map(|log_id| log_id.index),
        });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        self.stored_snapshot()
            .await
            .map_err(StoreError::read_snapshot)
    }
}

/// Where a snapshot sent in chunks (`transport`'s `InstallSnapshot`, openraft-legacy's
/// chunked receiver) is assembled before openraft installs it whole.
impl SnapshotReceiverFactory<TypeConfig> for StateMachineStore {
    type SnapshotReceiver = SnapshotData;

    async fn begin_receiving_snapshot(&mut self) -> Result<SnapshotData, StorageError> {
        Ok(Cursor::new(Vec::new()))
    }
}

/// Builds one snapshot from a copy of the machine taken when openraft asked for the builder.
pub struct SnapshotBuilder {
    /// Where the snapshot is persisted.
    store: Arc<Store>,
    /// The copy (or the error met taking it).
    machine: Result<StateMachine, StorageError>,
    /// The last log id the copy covers.
    last_applied: Option<LogId>,
    /// The membership at that point.
    membership: StoredMembership,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let machine = std::mem::replace(
            &mut self.machine,
            Err(StoreError::BuilderUsed.read_state_machine()),
        )?;
        // Serializing a large machine takes milliseconds of CPU: keep it off the async workers.
        let data = tokio::task::spawn_blocking(move || machine.snapshot())
            .await
            .map_err(|error| StoreError::Runtime(error.to_string()).read_state_machine())?;
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
        };
        self.store
            .write(WriteOp::SaveSnapshot {
                meta: meta.clone(),
                data: data.clone(),
                install: false,
            })
            .await
            .map_err(StoreError::write_snapshot)?;
        tracing::info!(snapshot = %meta, bytes = data.len(), "snapshot built and stored");
        Ok(Snapshot {
            meta,
            snapshot: Cursor::new(data),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::raft::{self, ApplyPanic, RaftConfig, RaftError, StoreError};
    use crate::state_machine::{AgentRequest, Command, Reply};
    use hivekeeper_protocol::Op;

    fn grant(agent: &str, id: &str) -> Command {
        Command::Request {
            agent: agent.into(),
            request: AgentRequest {
                id: id.into(),
                op: Op::LeaseGrant {
                    ttl_ms: 5_000,
                    lock_delay_ms: 0,
                },
                secret_hash: None,
            },
        }
    }

    /// A panic inside apply is caught at this store rather than left to poison the applier's
    /// mutex (every later read would fail with "poisoned", on every replica, with nothing
    /// naming the entry): the node's Raft stops with a named error giving the entry's log id
    /// and command, reads are refused with the same error, and the node can tell
    /// `hivekeeper serve` to exit with its own status.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_apply_is_a_named_fatal_stop_not_a_poisoned_lock() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (node, _applied) = raft::open(dir.path(), 1, &RaftConfig::DEFAULTS)
            .await
            .expect("the data directory opens");
        node.initialize_single_node().await.expect("initialize");
        node.wait_for_leader(Duration::from_secs(20))
            .await
            .expect("a leader");
        let granted = node
            .propose(grant("a", "a1"))
            .await
            .expect("a grant commits");
        assert!(matches!(granted.reply, Reply::Lease { .. }), "{granted:?}");
        let index = granted.meta.index;
        node.state_machine.panic_on_agent("boom");
        // The second command of the batch panics; the batch's entry is the next log entry.
        // Bounded: before the panic was caught, the worker died and this never returned.
        let failed = tokio::time::timeout(
            Duration::from_secs(20),
            node.propose_batch(vec![grant("a", "a2"), grant("boom", "b1")]),
        )
        .await
        .expect("the proposal is answered within 20 s");
        assert!(failed.is_err(), "a panicking apply answered {failed:?}");
        let expected = ApplyPanic {
            log_id: format!("T1-N1-{}", index + 1),
            command_index: 1,
            command: "lease.grant",
            message: "test hook: apply panics on this agent's requests".into(),
        };
        assert_eq!(node.apply_panic(), Some(expected.clone()));
        assert_eq!(
            expected.to_string(),
            format!(
                "the state machine panicked applying log entry T1-N1-{} (command 1 of the entry, \
                 lease.grant): test hook: apply panics on this agent's requests",
                index + 1
            )
        );
        // Reads get the named error, not a poisoned lock.
        match node.query(|machine| machine.lease_count()) {
            Err(RaftError::Store(StoreError::ApplyPanicked(panic))) => assert_eq!(panic, expected),
            other => panic!("a read after the panic answered {other:?}"),
        }
        // Raft stopped with the reason, which names the entry.
        let mut leadership = node.leadership();
        let stopped = tokio::time::timeout(
            Duration::from_secs(20),
            leadership.wait_for(|now| now.stopped.is_some()),
        )
        .await
        .expect("Raft stops within 20 s")
        .expect("the leadership watch lives")
        .stopped
        .clone()
        .expect("stopped");
        assert!(
            stopped.contains(&expected.to_string()),
            "Raft stopped with {stopped:?}"
        );
        let _ = node.shutdown().await;
    }
}
