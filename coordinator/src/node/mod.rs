//! The node: the actors that do a Hivekeeper node's I/O and orchestration around Raft and the
//! pure state machine. No domain logic lives here: decisions are the state machine's; this layer
//! batches proposals, keeps lease deadlines, routes applied events and bounds its ingress.
//!
//! ```text
//!  bridge ──NodeHandle::submit_ordered(agent, request)──┐ ingress permit (bounded: `unavailable`
//!     │                                                   past it)
//!     ├ write op   ─▶ Proposer (enqueued at once, in arrival order) ─▶ raft.propose_batch
//!     │              ─▶ Reply (Queued: answered later)
//!     ├ keepalive  ─▶ read-index ─▶ LeaseKeeper (deadline = now + TTL) ─▶ Reply::Ttl
//!     └ fence/inspect ─▶ read-index ─▶ StateMachine::query
//!  raft applied entries ─▶ FanOut ─┬─▶ Outbound::{Respond, Notify} ─▶ bridge
//!                                  ├─▶ LeaseKeeper (LeaseGranted / LeaseEnded)
//!                                  └─▶ metrics (counters, histograms, gauges)
//!  LeaseKeeper Tick ─▶ overdue ─▶ Proposer: ExpireLeases { term }
//! ```
//!
//! `docs/actors.md` draws the supervision tree and says what happens when an actor fails.
//!
//! # Layout
//! - `supervisor.rs`: starts the actors linked; any failure stops the node.
//! - `proposer.rs`: batches commands into log entries.
//! - `lease_keeper.rs`: keepalive deadlines on the leader, expiry proposals.
//! - `fan_out.rs`: applied events to the bridge and the keeper, and to the metrics.
//! - `metrics.rs`: lease and resource metrics, from applied events (names and help texts).
//! - `admin.rs`: the operator's reads, `admin.status` and `admin.leases`.
//! - `raft_metrics.rs`: Raft's term, leader, indexes and elections, from openraft's metrics.

mod admin;
mod fan_out;
mod lease_keeper;
pub mod metrics;
mod proposer;
pub mod raft_metrics;
mod supervisor;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hivekeeper_protocol::{ErrorCode, Op, Request};
use ractor::{Actor, ActorRef};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::raft::{self, RaftConfig, RaftError, RaftHandle};
use crate::state_machine::{Command, Limits, Reply, Text};
use lease_keeper::KeeperMsg;
use proposer::ProposerMsg;
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
    /// This node's Raft id.
    pub node_id: u64,
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
        self.limits.validate()?;
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
}

impl Node {
    /// Opens the data directory, starts Raft (a single-member cluster) and the actors, waits
    /// for leadership and makes sure the configured limits are the replicated ones. Returns the
    /// node and the stream of answers and notices for the bridge.
    pub async fn start(
        config: NodeConfig,
    ) -> Result<(Node, mpsc::UnboundedReceiver<Outbound>), NodeError> {
        config.validate().map_err(NodeError::Failed)?;
        let (raft, applied) = raft::open(&config.data_dir, config.node_id, &config.raft)
            .await
            .map_err(|error| NodeError::Failed(error.to_string()))?;
        let raft = Arc::new(raft);
        raft.initialize_single_node()
            .await
            .map_err(|error| NodeError::Failed(error.to_string()))?;
        let (outbound, outbound_rx) = mpsc::unbounded_channel();
        let (failure_tx, failure) = watch::channel(None);
        let (supervisor, supervisor_done) = Actor::spawn(
            Some("node".into()),
            Supervisor,
            SupervisorArgs {
                raft: raft.clone(),
                applied,
                outbound,
                batch_max: config.batch_max,
                keeper_tick_ms: config.keeper_tick_ms,
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
        };
        raft.wait_for_leader(Duration::from_secs(10))
            .await
            .map_err(|error| NodeError::Failed(error.to_string()))?;
        let limits = raft
            .query(|sm| sm.limits().clone())
            .map_err(|error| NodeError::Failed(error.to_string()))?;
        if limits != config.limits {
            let command = Command::Configure {
                limits: config.limits.clone(),
            };
            match handle.propose(command).await? {
                Reply::Done => {}
                other => return Err(NodeError::Failed(format!("configuring limits: {other:?}"))),
            }
        }
        let node = Node {
            handle,
            supervisor,
            supervisor_done,
            failure,
        };
        Ok((node, outbound_rx))
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
        match &request.op {
            Op::LeaseKeepalive { lease } => {
                // Leadership confirmed by a quorum before the deadline moves (DESIGN.md §2).
                self.raft
                    .raft()
                    .ensure_linearizable()
                    .await
                    .map_err(|error| {
                        NodeError::Unavailable(format!("leadership not confirmed: {error}"))
                    })?;
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
            Op::AdminLeases { .. } => self.admin_leases(agent, &request.op).await,
            op if !op.is_write() => Ok(self
                .raft
                .query_linearizable(|sm| sm.query(agent, op))
                .await?),
            _ => {
                let command = Command::Request {
                    agent: agent.to_string(),
                    request,
                };
                self.propose(command).await
            }
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
        let enqueued = if request.op.is_write() {
            Ok(self.enqueue(Command::Request {
                agent: agent.clone(),
                request,
            }))
        } else {
            Err(request)
        };
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

    /// The error code a [`NodeError`] is answered with.
    pub fn error_code(_error: &NodeError) -> ErrorCode {
        ErrorCode::Unavailable
    }
}
