//! The node: the actors that do a Hivekeeper node's I/O and orchestration around Raft and the
//! pure state machine. No domain logic lives here: decisions are the state machine's; this layer
//! batches proposals, keeps lease deadlines, routes applied events and bounds its ingress.
//!
//! ```text
//!  bridge ──NodeHandle::submit_ordered(agent, request)──┐ ingress permit (bounded: `unavailable`
//!     │                                                   past it)
//!     ├ write op   ─▶ Proposer (enqueued at once, in arrival order) ─▶ raft.propose_batch
//!     │              ─▶ Reply (Queued: answered later)
//!     ├ keepalive  ─▶ read-index (rounds shared) ─▶ LeaseKeeper (deadline = now + TTL)
//!     └ fence/inspect ─▶ read-index (rounds shared) ─▶ StateMachine::query
//!  raft applied entries ─▶ FanOut ─┬─▶ Outbound::{Respond, Notify} ─▶ bridge
//!                                  ├─▶ LeaseKeeper (LeaseGranted / LeaseEnded)
//!                                  └─▶ metrics (counters, histograms, gauges)
//!  LeaseKeeper Tick ─▶ overdue ─▶ Proposer: ExpireLeases { term }
//! ```
//!
//! In a cluster, a follower's proposer forwards its batches to the leader, and a follower's
//! keepalives and reads are forwarded too (`forward.rs`); the peer server answers what other
//! nodes forward here. Deferred answers and notices come from this node's own applied entries:
//! every replica applies the same log, so an agent hears them from whichever node it is
//! connected to.
//!
//! `docs/actors.md` draws the supervision tree and says what happens when an actor fails.
//!
//! # Layout
//! - `supervisor.rs`: starts the actors linked; any failure stops the node.
//! - `proposer.rs`: batches commands into log entries.
//! - `lease_keeper.rs`: keepalive deadlines on the leader, expiry proposals.
//! - `fan_out.rs`: applied events to the bridge and the keeper, and to the metrics.
//! - `metrics.rs`: lease and resource metrics, from applied events (names and help texts).
//! - `cluster.rs`: [`ClusterConfig`], the etcd-style membership flags.
//! - `forward.rs`: forwarding to the leader.
//! - `read_index.rs`: leadership confirmations, one round for many keepalives and reads.
//! - `admin.rs`: the operator's reads, `admin.status` and `admin.leases`.
//! - `raft_metrics.rs`: Raft's term, leader, indexes and elections, from openraft's metrics.

mod admin;
mod cluster;
mod fan_out;
mod forward;
mod lease_keeper;
pub mod metrics;
mod proposer;
pub mod raft_metrics;
mod read_index;
mod supervisor;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hivekeeper_protocol::{ErrorCode, Op, Request};
use ractor::{Actor, ActorRef};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::raft::{self, RaftConfig, RaftError, RaftHandle, TcpNetwork};
use crate::state_machine::{Command, Limits, Reply, Text};
use crate::transport::{self, ForwardHandler, NetworkFaults};
pub use cluster::{ClusterConfig, ClusterState};
use forward::Forwarder;
use lease_keeper::KeeperMsg;
use proposer::ProposerMsg;
use read_index::ReadIndex;
use supervisor::{Supervisor, SupervisorArgs, SupervisorMsg};

/// What the node sends to the bridge.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// The final answer to a request that was queued.
    Respond {
        /// The agent to answer.
        agent: Text,
        /// Its request id.
        request_id: String,
        /// The answer.
        reply: Reply,
    },
    /// An unsolicited event for an agent (`lease.expired`, `lock.lost`, ...).
    Notify {
        /// The agent to tell.
        agent: Text,
        /// What happened.
        event: hivekeeper_protocol::Event,
    },
}

/// Why the node could not answer a request. Every variant is answered `unavailable` on the
/// wire: the request may be retried (with the same id) and dedup keeps that safe.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NodeError {
    /// Too many requests in flight: back off and retry.
    #[error("node overloaded: {in_flight} requests in flight; retry with backoff")]
    Overloaded {
        /// The configured bound.
        in_flight: usize,
    },
    /// This node cannot commit right now (no leader, not the leader, shutting down).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The node's actors or storage failed.
    #[error("node failure: {0}")]
    Failed(String),
}

impl From<RaftError> for NodeError {
    fn from(error: RaftError) -> Self {
        NodeError::Unavailable(error.to_string())
    }
}

/// Node settings. Units are in the names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the Raft log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// This node's Raft id when it runs alone; a cluster member's id comes from its name.
    pub node_id: u64,
    /// Cluster membership; absent: a single node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    /// Raft timing and snapshot policy.
    pub raft: RaftConfig,
    /// The replicated limits this node proposes when it first leads with other limits in force.
    pub limits: Limits,
    /// Requests admitted at once (proposals in flight, reads, keepalives); past it the answer is
    /// `unavailable` instead of an ever-growing queue (ractor mailboxes are unbounded).
    pub ingress_max: usize,
    /// Most commands in one log entry: many requests share one fsync.
    pub batch_max: usize,
    /// How often the lease keeper looks for overdue leases. The reclaim delay after a TTL is at
    /// most this plus one commit.
    pub keeper_tick_ms: u64,
    /// How long a request may wait for its commit before it is answered `unavailable`.
    pub propose_timeout_ms: u64,
}

impl NodeConfig {
    /// The defaults, in one place.
    pub fn defaults() -> NodeConfig {
        NodeConfig {
            data_dir: PathBuf::from("hivekeeper-data"),
            node_id: 1,
            cluster: None,
            raft: RaftConfig::default(),
            limits: Limits::DEFAULTS,
            ingress_max: 10_000,
            batch_max: raft::BATCH_MAX,
            keeper_tick_ms: 20,
            propose_timeout_ms: 5_000,
        }
    }

    /// Cross-field rules.
    pub fn validate(&self) -> Result<(), String> {
        self.limits.validate().map_err(|error| error.to_string())?;
        self.raft.validate()?;
        // A lease must outlive a few heartbeats, or an ordinary hiccup expires it (DESIGN.md §2).
        let heartbeats_min = 3 * self.raft.heartbeat_interval_ms;
        if self.limits.lease_ttl_ms_min < heartbeats_min {
            return Err(format!(
                "limits.lease_ttl_ms_min ({} ms) must be at least three heartbeat intervals \
                 ({heartbeats_min} ms)",
                self.limits.lease_ttl_ms_min
            ));
        }
        if self.ingress_max == 0 || self.batch_max == 0 {
            return Err("ingress_max and batch_max must be at least 1".into());
        }
        if self.batch_max > raft::BATCH_MAX {
            return Err(format!("batch_max must be at most {}", raft::BATCH_MAX));
        }
        if self.keeper_tick_ms == 0 || self.propose_timeout_ms == 0 {
            return Err("keeper_tick_ms and propose_timeout_ms must be positive".into());
        }
        // A failover must fit in the shortest lease: an election (at most the longest election
        // timeout) before a new leader gives every lease a fresh deadline.
        if self.raft.election_timeout_ms_max >= self.limits.lease_ttl_ms_min {
            return Err(format!(
                "raft.election_timeout_ms_max ({} ms) must be below limits.lease_ttl_ms_min \
                 ({} ms): a failover must fit in the shortest lease",
                self.raft.election_timeout_ms_max, self.limits.lease_ttl_ms_min
            ));
        }
        if let Some(cluster) = &self.cluster {
            cluster.validate()?;
        }
        Ok(())
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig::defaults()
    }
}

/// Where the answer to a command handed to the proposer arrives.
type ProposalReply = ractor::concurrency::OneshotReceiver<Result<Reply, NodeError>>;

/// A running node.
pub struct Node {
    handle: NodeHandle,
    /// Answers peers (a cluster member only).
    peer_server: Option<tokio::task::JoinHandle<()>>,
    /// Links cut on purpose (tests).
    faults: NetworkFaults,
    supervisor: ActorRef<SupervisorMsg>,
    supervisor_done: tokio::task::JoinHandle<()>,
    failure: watch::Receiver<Option<String>>,
}

/// What the bridge uses to talk to the node. Cheap to clone.
#[derive(Clone)]
pub struct NodeHandle {
    raft: Arc<RaftHandle>,
    proposer: ActorRef<ProposerMsg>,
    keeper: ActorRef<KeeperMsg>,
    ingress: Arc<Semaphore>,
    ingress_max: usize,
    propose_timeout: Duration,
    /// To the leader, in a cluster.
    forwarder: Option<Forwarder>,
    /// Leadership confirmations shared by concurrent keepalives and reads.
    read_index: ReadIndex,
}

impl Node {
    /// Opens the data directory, starts Raft and the actors, and makes sure the configured
    /// limits are the replicated ones. Returns the node and the stream of answers and notices
    /// for the bridge.
    ///
    /// A single node makes itself a one-member cluster and waits until it leads. A cluster
    /// member listens for its peers, bootstraps the initial membership on a fresh data dir
    /// (`initial_cluster_state = new`) and returns without waiting for a leader: its peers
    /// may not be up yet, and until there is a leader it answers `unavailable`.
    pub async fn start(
        config: NodeConfig,
    ) -> Result<(Node, mpsc::UnboundedReceiver<Outbound>), NodeError> {
        config.validate().map_err(NodeError::Failed)?;
        let failed = |error: RaftError| NodeError::Failed(error.to_string());
        let node_id = config
            .cluster
            .as_ref()
            .map_or(config.node_id, ClusterConfig::node_id);
        let faults = NetworkFaults::default();
        let network = TcpNetwork::new(node_id, CLUSTER_NAME, faults.clone(), &config.raft);
        // Bound before the data file opens, so a taken port fails fast and names the port.
        let peer_listener = match &config.cluster {
            Some(cluster) => {
                let addr = cluster.listen_addr().map_err(NodeError::Failed)?;
                let listener = tokio::net::TcpListener::bind(addr).await.map_err(|error| {
                    NodeError::Failed(format!(
                        "cannot listen for peers on {addr}: {error} (is another node using it?)"
                    ))
                })?;
                Some(listener)
            }
            None => None,
        };
        let (raft, applied) =
            raft::open_with_network(&config.data_dir, node_id, &config.raft, network.clone())
                .await
                .map_err(failed)?;
        let raft = Arc::new(raft);
        match &config.cluster {
            None => raft.initialize_single_node().await.map_err(failed)?,
            Some(cluster) if cluster.initial_cluster_state == ClusterState::New => {
                let members = cluster.members().map_err(NodeError::Failed)?;
                raft.initialize_cluster(members).await.map_err(failed)?;
            }
            Some(_) => {}
        }
        let forwarder = config.cluster.as_ref().map(|_| {
            Forwarder::new(
                raft.clone(),
                network.forwarding_pool(),
                Duration::from_millis(config.propose_timeout_ms),
                // Two of the longest elections: long enough for a failover, short enough that a
                // cut-off node answers `unavailable` promptly.
                Duration::from_millis(2 * config.raft.election_timeout_ms_max),
            )
        });
        let (outbound, outbound_rx) = mpsc::unbounded_channel();
        let (failure_tx, failure) = watch::channel(None);
        tokio::spawn(report_raft_stop(raft.raft().clone(), failure_tx.clone()));
        let (supervisor, supervisor_done) = Actor::spawn(
            Some(format!("node@{node_id}")),
            Supervisor,
            SupervisorArgs {
                raft: raft.clone(),
                applied,
                outbound,
                batch_max: config.batch_max,
                keeper_tick_ms: config.keeper_tick_ms,
                forwarder: forwarder.clone(),
                failure: failure_tx,
            },
        )
        .await
        .map_err(|error| NodeError::Failed(format!("starting the node's actors: {error}")))?;
        let (proposer, keeper) = supervisor
            .call(SupervisorMsg::Children, Some(Duration::from_secs(5)))
            .await
            .ok()
            .and_then(|result| match result {
                ractor::rpc::CallResult::Success(children) => Some(children),
                _ => None,
            })
            .ok_or_else(|| NodeError::Failed("the node's actors did not start".into()))?;
        let handle = NodeHandle {
            raft: raft.clone(),
            proposer,
            keeper,
            ingress: Arc::new(Semaphore::new(config.ingress_max)),
            ingress_max: config.ingress_max,
            propose_timeout: Duration::from_millis(config.propose_timeout_ms),
            forwarder,
            read_index: ReadIndex::start(raft.raft().clone()),
        };
        let peer_server = peer_listener.map(|listener| {
            tokio::spawn(transport::serve(
                listener,
                node_id,
                CLUSTER_NAME.to_string(),
                raft.raft().clone(),
                network.election_clock(),
                handle.clone(),
                faults.clone(),
            ))
        });
        if config.cluster.is_none() {
            raft.wait_for_leader(Duration::from_secs(10))
                .await
                .map_err(failed)?;
            handle.configure(&config.limits).await?;
        } else {
            tokio::spawn(configure_when_leading(
                handle.clone(),
                config.limits.clone(),
            ));
        }
        let node = Node {
            handle,
            peer_server,
            faults,
            supervisor,
            supervisor_done,
            failure,
        };
        Ok((node, outbound_rx))
    }

    /// The node's deliberate network faults: cut it off from peers to test a partition.
    pub fn faults(&self) -> &NetworkFaults {
        &self.faults
    }

    /// A handle for the bridge.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// Resolves with the reason when one of the node's actors fails.
    pub async fn failed(&self) -> String {
        let mut failure = self.failure.clone();
        loop {
            if let Some(reason) = failure.borrow_and_update().clone() {
                return reason;
            }
            if failure.changed().await.is_err() {
                return "the node's supervisor ended".into();
            }
        }
    }

    /// Stops the actors and Raft, and closes the data file.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        if let Some(server) = self.peer_server {
            // Its connection tasks hold node handles; they end with their connections.
            server.abort();
            let _ = server.await;
        }
        self.supervisor.stop(None);
        let _ = self.supervisor_done.await;
        let NodeHandle { raft, .. } = self.handle;
        match Arc::try_unwrap(raft) {
            Ok(raft) => raft
                .shutdown()
                .await
                .map_err(|error| NodeError::Failed(error.to_string())),
            // A bridge task still holds a handle: Raft stops when the last one is dropped.
            Err(_) => Ok(()),
        }
    }
}

impl NodeHandle {
    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.raft.node_id()
    }

    /// Whether this node leads now, as far as it knows.
    pub fn is_leader(&self) -> bool {
        self.raft.is_leader()
    }

    /// The leader this node knows of.
    pub fn leader_id(&self) -> Option<u64> {
        self.raft.leader().map(|(id, _)| id)
    }

    /// The members as this node knows them.
    pub fn members(&self) -> Vec<raft::MemberInfo> {
        self.raft.members()
    }

    /// Adds member `name` reachable at `addr` (host:port): as a learner until it has caught up,
    /// then as a voter. This node must lead. The new node is started with
    /// `initial_cluster_state = existing` (before or after this call).
    pub async fn add_member(&self, name: &str, addr: &str) -> Result<raft::MemberInfo, NodeError> {
        let entry = ClusterConfig {
            name: name.to_string(),
            initial_cluster: format!("{name}={addr}"),
            initial_cluster_state: ClusterState::Existing,
            peer_listen: None,
        };
        let member = entry.me().map_err(NodeError::Failed)?;
        self.must_lead()?;
        let id = entry.node_id();
        if let Some(known) = self.members().into_iter().find(|info| info.id == id)
            && known.member == member
            && known.voter
        {
            return Ok(known);
        }
        self.raft.add_member(id, member.clone()).await?;
        Ok(raft::MemberInfo {
            id,
            member,
            voter: true,
        })
    }

    /// Removes member `name`. This node must lead.
    pub async fn remove_member(&self, name: &str) -> Result<(), NodeError> {
        self.must_lead()?;
        let id = raft::node_id_for(name);
        if !self.members().iter().any(|info| info.id == id) {
            return Err(NodeError::Failed(format!("{name:?} is not a member")));
        }
        Ok(self.raft.remove_member(id).await?)
    }

    /// The answer to a membership op: `Done`, a refusal for a request that cannot succeed
    /// (`bad_request`: a single node, an unknown name), or `unavailable` to retry.
    fn membership_change(&self, result: Result<(), NodeError>) -> Result<Reply, NodeError> {
        match result {
            Ok(()) => Ok(Reply::Done),
            Err(NodeError::Failed(reason)) => Ok(Reply::refused(ErrorCode::BadRequest, reason)),
            Err(error) => Err(error),
        }
    }

    fn must_lead(&self) -> Result<(), NodeError> {
        if self.forwarder.is_none() {
            return Err(NodeError::Failed(
                "this node runs alone (started without --name and --initial-cluster): it has no \
                 inter-node transport to add members to"
                    .into(),
            ));
        }
        if self.raft.is_leader() {
            Ok(())
        } else {
            Err(NodeError::Unavailable(format!(
                "node {} is not the leader (leader: {:?})",
                self.raft.node_id(),
                self.leader_id()
            )))
        }
    }

    /// Answers one request from `agent`: write ops through the log, keepalives through the
    /// lease keeper, reads with read-index. `Reply::Queued` means the final answer will come as
    /// an [`Outbound::Respond`].
    pub async fn submit(&self, agent: &str, request: Request) -> Result<Reply, NodeError> {
        let _permit = self
            .ingress
            .try_acquire()
            .map_err(|_| NodeError::Overloaded {
                in_flight: self.ingress_max,
            })?;
        match &self.forwarder {
            // `admin.status` is this node's own view: never forwarded.
            Some(forwarder)
                if !request.op.is_write() && !matches!(request.op, Op::AdminStatus {}) =>
            {
                match forwarder.submit(agent, request).await? {
                    Ok(reply) => Ok(reply),
                    Err(request) => self.answer_here(agent, request).await,
                }
            }
            _ => self.answer_here(agent, request).await,
        }
    }

    /// Answers a request on this node (the leader, or a single node).
    async fn answer_here(&self, agent: &str, request: Request) -> Result<Reply, NodeError> {
        match &request.op {
            Op::LeaseKeepalive { lease } => {
                // Leadership confirmed by a quorum before the deadline moves (DESIGN.md §2).
                self.read_index.confirm().await?;
                let (agent, lease) = (agent.to_string(), lease.clone());
                let result = self
                    .keeper
                    .call(
                        |reply| KeeperMsg::Keepalive {
                            agent,
                            lease,
                            reply,
                        },
                        Some(self.propose_timeout),
                    )
                    .await;
                match result {
                    Ok(ractor::rpc::CallResult::Success(reply)) => Ok(reply),
                    _ => Err(NodeError::Unavailable(
                        "the lease keeper did not answer".into(),
                    )),
                }
            }
            Op::AdminStatus {} => Ok(self.admin_status()),
            Op::AdminMemberAdd { name, addr } => {
                self.membership_change(self.add_member(name, addr).await.map(|_| ()))
            }
            Op::AdminMemberRemove { name } => {
                self.membership_change(self.remove_member(name).await)
            }
            Op::AdminLeases { .. } => self.admin_leases(agent, &request.op).await,
            op if !op.is_write() => {
                let op = match crate::wire::read(op) {
                    Ok(op) => op,
                    Err(not_read) => return Ok(not_read.refusal()),
                };
                self.read_index.confirm().await?;
                Ok(self.raft.query(|sm| sm.query(agent, &op))?)
            }
            _ => match crate::wire::command(agent, request) {
                Ok(command) => self.propose(command).await,
                Err(request) => Ok(crate::wire::NotARead::NodeOnly {
                    op: request.op.name(),
                }
                .refusal()),
            },
        }
    }

    /// Like [`NodeHandle::submit`], except that a write op is handed to the proposer before
    /// this returns, not when the returned future is first polled.
    ///
    /// Why: the bridge answers each request in a task of its own. With `submit`, a write
    /// reached the proposer only once its task ran, so two requests that arrived in order
    /// (one agent's QoS 1 messages, which MQTT delivers in order) could be proposed in the
    /// other order: an acquire published right before its release was applied after it (the
    /// release answered `not_holder` and the lock stayed held), and two agents' acquires could
    /// queue in the opposite order of their arrival. Calling this in arrival order from one
    /// task makes log order the arrival order, because the proposer keeps its queue's order
    /// and proposes one batch at a time. Reads and keepalives are not ordered (they change
    /// nothing, and read-index already makes them linearizable).
    pub fn submit_ordered(
        &self,
        agent: &str,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Reply, NodeError>> + Send + 'static {
        let handle = self.clone();
        let agent = agent.to_string();
        // Ok: a write, enqueued (or refused) now. Err: a read or keepalive, submitted later.
        let enqueued = crate::wire::command(&agent, request).map(|command| self.enqueue(command));
        async move {
            match enqueued {
                Ok(Ok((permit, reply))) => {
                    let result = handle.await_proposal(reply).await;
                    // The ingress permit is held for the life of the request, as in `submit`.
                    drop(permit);
                    result
                }
                Ok(Err(error)) => Err(error),
                Err(request) => handle.submit(&agent, request).await,
            }
        }
    }

    /// Takes an ingress permit and puts `command` in the proposer's mailbox now.
    fn enqueue(
        &self,
        command: Command,
    ) -> Result<(tokio::sync::OwnedSemaphorePermit, ProposalReply), NodeError> {
        let permit =
            self.ingress
                .clone()
                .try_acquire_owned()
                .map_err(|_| NodeError::Overloaded {
                    in_flight: self.ingress_max,
                })?;
        Ok((permit, self.send_to_proposer(command)?))
    }

    /// Puts `command` in the proposer's mailbox now; the answer arrives on the returned receiver.
    fn send_to_proposer(&self, command: Command) -> Result<ProposalReply, NodeError> {
        let (tx, rx) = ractor::concurrency::oneshot();
        let port: ractor::RpcReplyPort<_> = (tx, self.propose_timeout).into();
        self.proposer
            .cast(ProposerMsg::Propose(command, port))
            .map_err(|_| NodeError::Unavailable("the proposer is stopping".into()))?;
        Ok(rx)
    }

    /// Waits for the answer of a command sent to the proposer, at most `propose_timeout`.
    async fn await_proposal(&self, reply: ProposalReply) -> Result<Reply, NodeError> {
        match tokio::time::timeout(self.propose_timeout, reply).await {
            Ok(Ok(reply)) => reply,
            Err(_) => Err(NodeError::Unavailable(format!(
                "no commit within {} ms",
                self.propose_timeout.as_millis()
            ))),
            Ok(Err(_)) => Err(NodeError::Unavailable("the proposer is stopping".into())),
        }
    }

    /// Cancels a waiter whose `wait_ms` ran out (a grant that came first wins).
    pub async fn cancel_wait(&self, agent: &str, request_id: &str) -> Result<Reply, NodeError> {
        let command = Command::CancelWait {
            agent: agent.to_string(),
            request_id: request_id.to_string(),
        };
        self.propose(command).await
    }

    async fn propose(&self, command: Command) -> Result<Reply, NodeError> {
        let reply = self.send_to_proposer(command)?;
        self.await_proposal(reply).await
    }

    /// Proposes `limits` if the replicated ones differ (this node must lead).
    async fn configure(&self, limits: &Limits) -> Result<(), NodeError> {
        let current = self.raft.query(|sm| sm.limits().clone())?;
        if &current == limits {
            return Ok(());
        }
        let command = Command::Configure {
            limits: limits.clone(),
        };
        match self.propose(command).await? {
            Reply::Done => Ok(()),
            other => Err(NodeError::Failed(format!("configuring limits: {other:?}"))),
        }
    }

    /// The error code a [`NodeError`] is answered with.
    pub fn error_code(_error: &NodeError) -> ErrorCode {
        ErrorCode::Unavailable
    }
}

/// The name every Hivekeeper peer says in its hello; a node refuses another cluster's.
const CLUSTER_NAME: &str = "hivekeeper";

/// In a cluster: each time this node takes office, makes its configured limits the replicated
/// ones (the members should all be configured alike; the latest leader's win). A failure is
/// logged and retried at the next term: limits are not worth stopping a node for.
async fn configure_when_leading(handle: NodeHandle, limits: Limits) {
    let mut metrics = handle.raft.raft().metrics();
    let me = handle.raft.node_id();
    let mut configured_term = None;
    loop {
        let (leads, term) = {
            let m = metrics.borrow_and_update();
            (raft::is_ready_leader(&m, me), m.current_term)
        };
        if leads && configured_term != Some(term) {
            configured_term = Some(term);
            if let Err(error) = handle.configure(&limits).await {
                tracing::warn!(%error, term, "could not make the configured limits the replicated ones");
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// What other nodes forward here: this node answers as the leader, or refuses (it was deposed
/// since the follower looked) and the follower answers `unavailable`.
impl ForwardHandler for NodeHandle {
    async fn propose(&self, commands: Vec<Command>) -> Result<Vec<Reply>, String> {
        if !self.raft.is_leader() {
            return Err(format!("node {} is not the leader", self.raft.node_id()));
        }
        let proposed = self
            .raft
            .propose_batch(commands)
            .await
            .map_err(|error| error.to_string())?;
        Ok(proposed.into_iter().map(|p| p.reply).collect())
    }

    async fn submit(&self, agent: String, request: Request) -> Result<Reply, String> {
        if !self.raft.is_leader() {
            return Err(format!("node {} is not the leader", self.raft.node_id()));
        }
        let _permit = self
            .ingress
            .try_acquire()
            .map_err(|_| format!("node overloaded: {} requests in flight", self.ingress_max))?;
        self.answer_here(&agent, request)
            .await
            .map_err(|error| error.to_string())
    }
}

/// Reports Raft stopping on its own as the node's failure. openraft ends its core on a storage
/// error (a full disk, a failed fsync: the writer accepts nothing after one); before this the
/// process stayed up, answered nothing and logged an error for every request. Now `serve`
/// exits non-zero with the reason, so a supervisor or an operator sees it, and in a cluster the
/// agents fail over to the other members. Raft stopping because we shut it down is not a
/// failure.
async fn report_raft_stop(raft: crate::raft::Raft, failure: watch::Sender<Option<String>>) {
    let mut metrics = raft.metrics();
    loop {
        if let Err(fatal) = &metrics.borrow_and_update().running_state {
            if !matches!(fatal, openraft::error::Fatal::Stopped) {
                let reason = format!("Raft stopped: {fatal}");
                failure.send_if_modified(|current| {
                    current.is_none() && {
                        *current = Some(reason);
                        true
                    }
                });
            }
            return;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
