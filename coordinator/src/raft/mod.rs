//! The openraft adapter: Hivekeeper's log on a segment log (`hivekeeper-segment-log`), its
//! vote and snapshots on redb, and a small facade that opens a node from its data directory.
//!
//! openraft is pinned (`=0.10.0-alpha.37`, with `openraft-legacy` for the chunked snapshot
//! transport) and nothing outside this module names it, so a move to another version stays
//! here: the node layer uses [`RaftHandle`] (propose, query, confirm leadership, watch
//! [`Leadership`], membership, quorum, status), [`Applied`] through its [`AppliedSink`], and
//! [`RaftError`].
//!
//! # How a write flows
//!
//! ```text
//!  RaftHandle::propose(command) / propose_batch(commands)   (node layer batches concurrent ones)
//!    │ stamps now_ms (the leader's clock) ─▶ Proposal { now_ms, commands }
//!    ▼
//!  openraft client_write ─▶ leader appends one entry
//!    │
//!    ▼ LogStore::append (returns at once)          writer thread (writer.rs)
//!  Request{Append, IOFlushed} ─── channel ───▶ drain all pending requests
//!    │ (the rows stay readable in memory          SegmentLog::write of the batch's entries,
//!    │  until durable: the writer's tail)         one fdatasync, THEN fire IOFlushed
//!    ▼ replicated at once (not after the leader's fsync); each follower answers only after
//!    │ its own fsync; the leader's own flush counts once its IOFlushed fires
//!    ▼ flushed on a majority = committed
//!  StateMachineStore::apply ─▶ per command: StateMachine::apply(LogMeta{index, term, now_ms}, cmd)
//!    │                           ├─ Proposed{meta, reply} ─▶ back to propose()'s caller
//!    │                           └─ Applied::Entry { meta, reply, events } ─▶ node layer
//!    ▼ every `snapshot_every_entries`
//!  snapshot: StateMachine::snapshot() ─▶ redb (fsync) ─▶ log purged behind it
//! ```
//!
//! Durable before acknowledged (DESIGN.md §5.5): a reply exists only after its entry was applied,
//! an entry is applied only after it is committed, and it is committed only after the writer's
//! fdatasync returned. At restart [`open`] restores the latest snapshot and openraft re-applies the
//! log after it, up to the saved committed index.
//!
//! Throughput: openraft appends one entry per client write, and each entry costs one fsync on
//! each member (appends arriving during a commit share the next one: openraft waits for an
//! append's flush neither before the next append nor before it replicates). Throughput
//! therefore comes mostly from putting many commands in one entry
//! ([`RaftHandle::propose_batch`], up to [`BATCH_MAX`]); see [`Proposal::meta`] for how
//! commands of one entry get distinct state-machine positions. `tests/raft_group_commit.rs`
//! measures both ways (docs/BENCHMARKS.md, "Durable log: group commit").
//!
//! # Layout
//! - `types.rs`: the openraft type configuration ([`TypeConfig`], [`Proposal`]).
//! - `database.rs`: the data directory (the redb file, its tables and identity record, and the
//!   Raft log's `raft-log/` segment log); opening, the format-1 migration, reading.
//! - `writer.rs`: the group-commit writer thread, the only writer of the data directory;
//!   `writer/batch.rs`: one batch's way to its durable point.
//! - `log_store.rs`: [`LogStore`], openraft's log and vote storage.
//! - `state_machine_store.rs`: [`StateMachineStore`], the pure machine behind a lock, snapshots.
//! - `network.rs`: [`TcpNetwork`], openraft's RPCs on [`transport`].
//! - [`transport`]: TCP between members, for openraft's RPCs and the requests followers forward
//!   (inside `raft/` because its frames carry openraft's messages).
//! - `leadership.rs`: [`Leadership`], one watch for every watcher of who leads.
//! - `read_index.rs`: leadership confirmations shared by concurrent reads and keepalives.
//! - `view.rs`: the handle's reads of this node's own view (leader, members, quorum, local
//!   state). `status.rs`: `admin.status` from openraft's metrics. `metrics.rs`: the Raft metrics.
//! - `membership.rs`: adding a member (dialled, a learner, a voter once caught up: [`CatchUp`])
//!   and removing one.
//! - `quorum.rs`: [`Quorum`], whether this node is backed by a quorum now; `contact.rs`:
//!   [`PeerContact`], when each peer last answered.
//! - `seed.rs`: online backup: [`RaftHandle::applied_state`] (the state at one applied index,
//!   after read-index) and [`seed_data_dir`] (a new member's data directory from a backup).
//! - `config.rs`: [`RaftConfig`]. `error.rs`: [`RaftError`].

mod config;
mod contact;
mod database;
mod election;
mod error;
mod leadership;
mod log_store;
mod membership;
pub mod metrics;
mod metrics_watch;
mod network;
mod quorum;
mod read_index;
mod recent_entries;
mod seed;
mod state_machine_store;
mod status;
pub mod transport;
mod types;
mod view;
mod writer;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::error::InitializeError;

pub use config::RaftConfig;
pub use contact::PeerContact;
pub use database::{DATA_FILE_NAME, DATA_FORMAT, Identity, LOG_DIR_NAME};
pub use election::ElectionClock;
pub use error::{ApplyPanic, RaftError, StoreError};
pub use leadership::Leadership;
pub use log_store::{LogStatus, LogStore};
pub use membership::CatchUp;
pub use network::{TcpNetwork, TcpPeer};
pub use quorum::Quorum;
pub use seed::{AppliedState, Seed, seed_data_dir};
pub use state_machine_store::{
    Applied, AppliedReceiver, AppliedSink, Origin, SnapshotBuilder, StateMachineStore,
};
pub use types::{
    BATCH_MAX, Entry, LogId, Member, Node, NodeId, Proposal, Proposed, Raft, RaftMetrics, Snapshot,
    SnapshotMeta, StorageError, StoredMembership, TypeConfig, Vote, node_id_for,
};
pub use writer::WriterStats;

use crate::state_machine::Command;
use database::Db;
use quorum::LeaderSince;
use read_index::ReadIndex;
use tokio::sync::watch;

use metrics_watch::MetricsWatch;
use transport::client::Dialler;
use writer::Store;

/// The target of the lines that report a change in the cluster (a peer lost or back, quorum
/// lost or regained, membership changed). Each is written once per change by construction, so
/// the binary's repeat limiter lets them all through (`serve`'s log set-up).
pub const CLUSTER_TARGET: &str = "hivekeeper::cluster";

/// How long closing the data file may take at shutdown (the writer finishes its last commit).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's storage, opened from its data directory: what openraft needs, before `Raft` exists.
/// [`open`] uses it; the storage test suite and inspection tools use it alone.
pub struct Storage {
    /// The log and vote.
    pub log_store: LogStore,
    /// The state machine and its snapshots; applied entries are kept until a sink is installed
    /// ([`StateMachineStore::deliver_to`]).
    pub state_machine: StateMachineStore,
    /// The file and its writer, to close it and read its counters.
    store: Arc<Store>,
}

impl Storage {
    /// Creates or opens `data_dir/hivekeeper.redb` and the Raft log `data_dir/raft-log/` for
    /// `node_id` with `config`'s page cache and segment size, checks the identity record (migrating a
    /// format-1 directory) and restores the latest snapshot. A foreign, corrupt, newer or other
    /// node's file, a damaged log, or an unusable directory, is an error naming the path.
    pub async fn open(
        data_dir: &Path,
        node_id: NodeId,
        config: &RaftConfig,
    ) -> Result<Storage, RaftError> {
        let dir = data_dir.to_path_buf();
        let cache_bytes = config.cache_bytes();
        let log_config = hivekeeper_segment_log::SegmentLogConfig {
            segment_bytes: config.log_segment_bytes(),
        };
        let (db, loaded) = tokio::task::spawn_blocking(move || {
            open_blocking(&dir, node_id, cache_bytes, log_config)
        })
        .await
        .map_err(|error| RaftError::Runtime(format!("opening the data file: {error}")))??;
        let path = db.path.clone();
        let store = Store::start(db, loaded.committed, loaded.last_purged)?;
        let replay_upto = loaded.committed.map(|log_id| log_id.index);
        match StateMachineStore::new(store.clone(), loaded.snapshot, replay_upto) {
            Ok(state_machine) => Ok(Storage {
                log_store: LogStore::new(store.clone()),
                state_machine,
                store,
            }),
            Err(error) => {
                store.close(CLOSE_TIMEOUT).await?;
                Err(RaftError::Snapshot {
                    path,
                    reason: error.to_string(),
                })
            }
        }
    }

    /// What the writer has done so far.
    pub fn writer_stats(&self) -> WriterStats {
        self.store.stats()
    }

    /// Flushes what is pending and closes the file.
    pub async fn close(self) -> Result<(), RaftError> {
        self.store.close(CLOSE_TIMEOUT).await
    }
}

fn open_blocking(
    dir: &Path,
    node_id: NodeId,
    cache_bytes: usize,
    log_config: hivekeeper_segment_log::SegmentLogConfig,
) -> Result<(Db, database::Loaded), RaftError> {
    std::fs::create_dir_all(dir).map_err(|source| RaftError::DataDir {
        path: dir.to_path_buf(),
        source,
    })?;
    Db::open(dir, node_id, cache_bytes, log_config)
}

/// Opens a single node: its storage in `data_dir`, and a running openraft instance on it.
/// Returns the handle and the stream of applied entries (re-applied ones first, marked
/// `replayed`). Its network has no peers to dial: enough for a single-member cluster
/// ([`RaftHandle::initialize_single_node`]); a cluster member uses [`open_with_network`].
pub async fn open(
    data_dir: &Path,
    node_id: NodeId,
    config: &RaftConfig,
) -> Result<(RaftHandle, AppliedReceiver), RaftError> {
    let network = TcpNetwork::new(
        node_id,
        "hivekeeper",
        transport::NetworkFaults::default(),
        config,
    );
    let handle = open_with_network(data_dir, node_id, config, network).await?;
    let (sink, applied) = tokio::sync::mpsc::unbounded_channel();
    handle.deliver_applied_to(Arc::new(sink));
    Ok((handle, applied))
}

/// Opens a node that talks to its peers through `network`. Applied entries are kept until the
/// caller installs its sink with [`RaftHandle::deliver_applied_to`].
pub async fn open_with_network(
    data_dir: &Path,
    node_id: NodeId,
    config: &RaftConfig,
    network: TcpNetwork,
) -> Result<RaftHandle, RaftError> {
    let openraft_config = Arc::new(config.to_openraft()?);
    let election = network.election_clock();
    let (contact, dialler) = (network.contact(), network.dialler());
    let storage = Storage::open(data_dir, node_id, config).await?;
    let Storage {
        log_store,
        state_machine,
        store,
    } = storage;
    let raft = match Raft::new(
        node_id,
        openraft_config,
        network,
        log_store.clone(),
        state_machine.clone(),
    )
    .await
    {
        Ok(raft) => raft,
        Err(error) => {
            store.close(CLOSE_TIMEOUT).await?;
            return Err(error.into());
        }
    };
    let metrics = MetricsWatch::of(&raft);
    let searching = election.searching();
    tokio::spawn(election::drive(
        raft.clone(),
        metrics.clone(),
        node_id,
        election,
    ));
    let handle = RaftHandle {
        leadership: leadership::follow(metrics.clone(), searching, node_id),
        metrics,
        read_index: ReadIndex::start(raft.clone()),
        raft,
        node_id,
        store,
        log_store,
        state_machine,
        contact,
        dialler,
        leader_since: LeaderSince::default(),
        quorum_timeout: Duration::from_millis(config.election_timeout_ms_max),
        cut_off_timeout: Duration::from_millis(
            config.election_timeout_ms_max + 2 * config.heartbeat_interval_ms,
        ),
        election_timeout_ms_max: config.election_timeout_ms_max,
        write_lease: Duration::from_millis(config.openraft_election_timeouts_ms().1),
        clock_offset_ms: AtomicI64::new(0),
    };
    Ok(handle)
}

/// The exit status of `hivekeeper serve` when the state machine panicked applying an entry
/// ([`ApplyPanic`]): 70, sysexits' `EX_SOFTWARE` (an internal software error), distinct from
/// the 1 of every other failure, so a supervisor can tell "a bug stopped this node, and will
/// stop it again on this entry at restart" from a refusal to start or a full disk.
pub const EXIT_APPLY_PANICKED: u8 = 70;

/// The members `metrics` record: id, name and address, and whether each votes.
fn members_of(metrics: &RaftMetrics) -> Vec<MemberInfo> {
    let membership = metrics.membership_config.membership();
    let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, member)| MemberInfo {
            id: *id,
            member: member.clone(),
            voter: voters.contains(id),
        })
        .collect()
}

/// Member `id`'s name in the membership `metrics` record; the number itself for an id outside
/// it (or one without a name).
fn name_in(metrics: &RaftMetrics, id: NodeId) -> String {
    metrics
        .membership_config
        .membership()
        .get_node(&id)
        .filter(|member| !member.name.is_empty())
        .map_or_else(|| id.to_string(), |member| member.name.clone())
}

/// One member as the membership records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberInfo {
    /// Its id (derived from its name).
    pub id: NodeId,
    /// Its name and inter-node address.
    pub member: Member,
    /// Whether it votes; a learner is still being caught up.
    pub voter: bool,
}

/// A running node's Raft: propose commands, read the state, snapshot, shut down.
pub struct RaftHandle {
    /// The openraft instance.
    raft: Raft,
    /// This node's id.
    node_id: NodeId,
    /// Leadership as one value, published on change ([`RaftHandle::leadership`]).
    leadership: watch::Receiver<Leadership>,
    /// openraft's metrics, as they change (`metrics_watch.rs`).
    metrics: MetricsWatch,
    /// Leadership confirmations shared by concurrent keepalives and reads.
    read_index: ReadIndex,
    /// The file and its writer (closed at shutdown).
    store: Arc<Store>,
    /// A reader of the log, for status.
    log_store: LogStore,
    /// The machine, for local reads.
    state_machine: StateMachineStore,
    /// When each peer last answered a Raft call (the leader's view of who is reachable).
    contact: Arc<PeerContact>,
    /// Dials a member being added before it is proposed (`membership.rs`).
    dialler: Dialler,
    /// When this node took office, for the quorum of a leader not yet acknowledged.
    leader_since: LeaderSince,
    /// How long a leader may go without a quorum's acknowledgement and still claim one: the
    /// longest election timeout (`quorum.rs`).
    quorum_timeout: Duration,
    /// How long a member without a leader may be out of touch with a majority before it is
    /// cut off: the longest election timeout plus two heartbeat intervals (`quorum.rs`, rule 4).
    cut_off_timeout: Duration,
    /// The configured `election_timeout_ms_max`: the longest a proposal waits for the write
    /// lease.
    election_timeout_ms_max: u64,
    /// openraft's quorum lease (its `election_timeout_max`): a leader whose last quorum
    /// acknowledgement is older refuses proposals ([`RaftHandle::write_lease_held`]).
    write_lease: Duration,
    /// Added to the wall clock this node stamps entries with ([`RaftHandle::clock_ms`]): 0,
    /// except when a test or a fault-injection harness makes this member's clock jump.
    clock_offset_ms: AtomicI64,
}

impl RaftHandle {
    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Leadership as this node knows it, published whenever the term, the leader, readiness
    /// or a fatal stop changes. Every watcher of leadership subscribes here.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// Returns once a quorum confirmed this node's leadership in a round that started after
    /// the call, and everything committed before that round is applied here (read-index):
    /// a read of the machine after it is linearizable. Concurrent callers share rounds.
    pub async fn confirm_leadership(&self) -> Result<(), RaftError> {
        self.read_index.confirm().await
    }

    /// Sends every applied entry to `sink` from now on, after those applied so far.
    pub fn deliver_applied_to(&self, sink: Arc<dyn AppliedSink>) {
        self.state_machine.deliver_to(sink);
    }

    /// Makes this node a single-member cluster if its log is empty; does nothing on a node that
    /// is already initialized (a restart), so it is safe to call at every start.
    pub async fn initialize_single_node(&self) -> Result<(), RaftError> {
        if self.raft.is_initialized().await? {
            return Ok(());
        }
        let members = BTreeMap::from([(self.node_id, Node::default())]);
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(openraft::error::RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Makes `members` the first membership of a new cluster if this node's log is empty (every
    /// initial member calls it with the same list, which openraft allows: the voting decides).
    /// Does nothing on a node that is already initialized (a restart).
    pub async fn initialize_cluster(
        &self,
        members: BTreeMap<NodeId, Node>,
    ) -> Result<(), RaftError> {
        if self.raft.is_initialized().await? {
            return Ok(());
        }
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(openraft::error::RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Proposes one command in its own entry; returns once it is committed (durable on a
    /// majority) and applied. On a follower: [`RaftError::NotLeader`] with the leader to retry
    /// at. Each call costs one fsync: batch concurrent commands with
    /// [`RaftHandle::propose_batch`].
    pub async fn propose(&self, command: Command) -> Result<Proposed, RaftError> {
        self.propose_batch(vec![command])
            .await?
            .pop()
            .ok_or_else(|| RaftError::Runtime("an applied entry returned no reply".into()))
    }

    /// Proposes up to [`BATCH_MAX`] commands in one entry (one append, one fsync, one
    /// replication round); returns their results in order once the entry is committed and
    /// applied. The commands are applied one after another, as if proposed in that order.
    pub async fn propose_batch(&self, commands: Vec<Command>) -> Result<Vec<Proposed>, RaftError> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        if commands.len() > BATCH_MAX {
            return Err(RaftError::BatchTooLarge {
                commands: commands.len(),
                max: BATCH_MAX,
            });
        }
        self.write_lease_held().await;
        let now_ms = self.clock_ms();
        let response = self
            .raft
            .client_write(Proposal { now_ms, commands })
            .await?;
        Ok(response.data)
    }

    /// Waits, when this node leads without a fresh quorum acknowledgement, until it has one
    /// (at most the longest election timeout), so a proposal is not refused for it.
    ///
    /// openraft 0.10 refuses a leader's proposals while its quorum lease has run out
    /// (`ForwardToLeader` with no leader, reason `LeaseExpired`), and a leader just elected has
    /// no acknowledgement at all until its first entry comes back: requests forwarded to it
    /// right after an election were refused as "no leader known". A leader that is really cut
    /// off still gets the refusal, after the wait (and Hivekeeper's `NoQuorum` check in front
    /// usually answers first). Costs one read of the metrics when the lease is held.
    async fn write_lease_held(&self) {
        let me = self.node_id;
        let lease = self.write_lease;
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let held = move |metrics: &RaftMetrics| {
            metrics.current_leader != Some(me)
                || quorum::quorum_ack_age_ms(metrics).is_some_and(|age_ms| age_ms < lease_ms)
        };
        if held(&self.metrics.borrow()) {
            return;
        }
        let _ = self
            .wait_for(
                Duration::from_millis(self.election_timeout_ms_max),
                "a quorum acknowledgement",
                held,
            )
            .await;
    }

    /// The clock a leader stamps into its entries (`Proposal::now_ms`): wall-clock ms since
    /// the Unix epoch, plus the fault-injection offset (normally 0). The leader's keeper asks
    /// the machine whether a wait is due at the clock an entry stamped now would get, so it
    /// proposes a wait's expiry when the entry will end it.
    pub fn clock_ms(&self) -> u64 {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            });
        wall_ms.saturating_add_signed(self.clock_offset_ms.load(Ordering::Relaxed))
    }

    /// Fault injection: moves the clock this node stamps entries with by `offset_ms` from
    /// the wall clock (a member whose clock runs ahead, or jumps back), as the state machine
    /// must survive (`clock.rs` there). Replaces the previous offset; 0 restores the wall
    /// clock. For tests and fault-injection harnesses; nothing else sets it.
    pub fn set_clock_offset_ms(&self, offset_ms: i64) {
        self.clock_offset_ms.store(offset_ms, Ordering::Relaxed);
    }

    /// Waits until `condition` holds on openraft's metrics, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &'static str,
        condition: impl Fn(&RaftMetrics) -> bool + Send,
    ) -> Result<RaftMetrics, RaftError> {
        // On the same watch every reader here uses, so what a caller reads after the wait is
        // at least as new as what satisfied it.
        let mut metrics = self.metrics.clone();
        let timed_out = || RaftError::Timeout {
            what,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
        tokio::time::timeout(timeout, metrics.wait_for(condition))
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| timed_out())
    }

    /// Waits until a leader other than `gone` is known (any leader when `gone` is `None`),
    /// at most `timeout`; returns it.
    pub async fn wait_for_new_leader(
        &self,
        gone: Option<NodeId>,
        timeout: Duration,
    ) -> Option<NodeId> {
        let mut leadership = self.leadership();
        let found = tokio::time::timeout(
            timeout,
            leadership.wait_for(|now| now.leader.is_some() && now.leader != gone),
        )
        .await;
        found.ok()?.ok()?.leader
    }

    /// Waits until `leader` is no longer the leader this node knows (another leads, or none is
    /// known: an election under way), and returns the new leader if one is known. If that
    /// does not happen within `timeout` (or Raft stops), it never returns: it is meant to race
    /// a call to `leader` in a `select!`, whose own timeout then decides.
    pub async fn wait_for_leader_change(
        &self,
        leader: NodeId,
        timeout: Duration,
    ) -> Option<NodeId> {
        let mut leadership = self.leadership();
        let changed = tokio::time::timeout(
            timeout,
            leadership.wait_for(|now| now.leader != Some(leader)),
        )
        .await
        .ok()
        .and_then(|found| found.ok().map(|now| now.leader));
        match changed {
            Some(next) => next,
            None => std::future::pending().await,
        }
    }

    /// Waits until some node is leader; returns its id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, RaftError> {
        let metrics = self
            .wait_for(timeout, "a leader", |metrics| {
                metrics.current_leader.is_some()
            })
            .await?;
        metrics.current_leader.ok_or(RaftError::Timeout {
            what: "a leader",
            timeout_ms: 0,
        })
    }

    /// Builds a snapshot of everything applied now and waits until it is stored; returns the
    /// last log index it covers. openraft then purges the log behind it (keeping
    /// `entries_kept_after_snapshot` entries).
    pub async fn snapshot_now(&self, timeout: Duration) -> Result<Option<u64>, RaftError> {
        let applied = self
            .state_machine
            .last_applied()?
            .map(|log_id| log_id.index);
        self.raft.trigger().snapshot().await?;
        let metrics = self
            .wait_for(timeout, "a snapshot", move |metrics| {
                metrics.snapshot.map(|log_id| log_id.index) >= applied
            })
            .await?;
        Ok(metrics.snapshot.map(|log_id| log_id.index))
    }

    /// Stops Raft, writes what is pending and closes the data file, so it can be reopened at
    /// once (by this process too). Takes a shared reference: whoever still holds a handle (a
    /// front door's task, a forwarder) gets Raft's "stopped" error from then on, and the data
    /// file is closed all the same.
    pub async fn shutdown(&self) -> Result<(), RaftError> {
        self.raft
            .shutdown()
            .await
            .map_err(|error| RaftError::Runtime(format!("stopping raft: {error}")))?;
        self.state_machine.close_delivery();
        self.store.close(CLOSE_TIMEOUT).await
    }
}
