//! [`NodeHandle`]: what a front door calls. One request in, one final response out.
//!
//! ```text
//!  submit(agent, request, respond)   (the agent's rate, or `rate_limited` at once; then an
//!    │                                ingress permit, or `unavailable` at once: keepalives
//!    │                                have a lane of their own, so a flood never delays them)
//!    ├ write op ─▶ Waits::register ─▶ Proposer (queued now, in call order) ─▶ Raft
//!    │             the answer comes back to Waits from the fan-out or the proposer
//!    │             ─▶ respond(final response)     (Queued: later, from the entry that grants,
//!    │                                             times out or ends its lease)
//!    └ keepalive, read, admin ─▶ a task: forwarded to the leader, or answered here
//!                               (read-index, then the keeper or the machine) ─▶ respond
//! ```

use std::sync::Arc;
use std::time::Duration;

use hivekeeper_protocol::{ErrorCode, KeySelector, Op, Request, Response, Role};
use ractor::ActorRef;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::NodeError;
use super::auth;
use super::forward::Forwarder;
use super::lease_keeper::KeeperMsg;
use super::membership::{MemberChange, MembershipChanges};
use super::proposer::{NodeCommand, Proposer};
use super::rate::AgentRates;
use super::snapshot::KeptSnapshots;
use super::waits::{Respond, Waits, answer_with};
use super::watches::{self, PollRequest, Watches};
use crate::answer::Answer;
use crate::raft::transport::{AgentWrite, ForwardHandler, ForwardRefused};
use crate::raft::{self, CatchUp, Origin, RaftHandle};
use crate::state_machine::{AgentRequest, Command, KvLimits, LeaseId, Limits, Reply};

/// How long `admin.leases` waits for the keeper's deadlines before answering without them.
const REMAINING_TIMEOUT: Duration = Duration::from_secs(2);

/// What a front door uses to talk to the node. Cheap to clone.
#[derive(Clone)]
pub struct NodeHandle {
    pub(super) raft: Arc<RaftHandle>,
    pub(super) proposer: Proposer,
    pub(super) keeper: ActorRef<KeeperMsg>,
    pub(super) waits: Arc<Waits>,
    /// Requests admitted at once; a permit is held until the request is queued or answered.
    pub(super) ingress: Arc<Semaphore>,
    /// The bound of `ingress` (`ingress_max`), for the `Overloaded` message.
    pub(super) ingress_max: usize,
    /// The keepalive lane: `lease.keepalive` requests admitted at once, apart from `ingress`,
    /// so that a flood of other requests filling `ingress` never refuses or delays the
    /// keepalives that keep the other agents' leases alive.
    pub(super) keepalive_ingress: Arc<Semaphore>,
    /// The bound of `keepalive_ingress` (`keepalive_ingress_max`).
    pub(super) keepalive_ingress_max: usize,
    /// Requests a second per agent (`rate_per_s_max`), checked before any permit.
    pub(super) rates: Arc<AgentRates>,
    pub(super) propose_timeout: Duration,
    /// To the leader, in a cluster.
    pub(super) forwarder: Option<Forwarder>,
    /// Whether accounts and roles are enforced (`NodeConfig::auth_enabled`).
    pub(super) auth_enabled: bool,
    /// Membership changes, one at a time, with their answers kept for resends.
    pub(super) membership: Arc<MembershipChanges>,
    /// The snapshots `admin.snapshot` readers are reading, page by page.
    pub(super) snapshots: Arc<KeptSnapshots>,
    /// The `watch.poll`s waiting on this member.
    pub(super) watches: Arc<Watches>,
}

/// What [`NodeHandle::submit`] did with a request, for the front door's flow control (the
/// request's answer goes to its `respond` either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Taken: answered now or later through `respond`.
    Taken,
    /// Refused `rate_limited`: the agent's bucket is empty for `wait`. A front door that can
    /// (the agent endpoint) reads nothing more from that agent's connection meanwhile, so
    /// TCP paces a flooder to its rate instead of the node refusing it at full speed.
    OverRate {
        /// Until the agent's bucket has a token again.
        wait: std::time::Duration,
    },
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

    /// Who leads, as it changes: the one watch every watcher of leadership reads.
    pub fn leadership(&self) -> tokio::sync::watch::Receiver<raft::Leadership> {
        self.raft.leadership()
    }

    /// The leader this node knows of.
    pub fn leader_id(&self) -> Option<u64> {
        self.raft.leader().map(|(id, _)| id)
    }

    /// The members as this node knows them.
    pub fn members(&self) -> Vec<raft::MemberInfo> {
        self.raft.members()
    }

    /// Ticks whenever this member applied an entry or installed a snapshot (the web console's
    /// live updates wait on it).
    pub fn applied_ticks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watches.applied_ticks()
    }

    /// On the leader, the voters it has not heard from within the election timeout, by name;
    /// `None` on any other member, which does not hear from every member.
    pub fn unreachable_members(&self) -> Option<Vec<String>> {
        let quorum = self.raft.quorum();
        quorum.leading.then_some(quorum.unreachable)
    }

    /// Answers one request from `agent`: `respond` gets its final response, once. A write is
    /// handed to the proposer before this returns, so calling this in arrival order makes log
    /// order the arrival order (one agent's QoS 1 messages, which MQTT delivers in order: an
    /// acquire and the release published right after it). A queued acquire's final answer
    /// comes when it is granted, its `wait_ms` runs out or its lease ends. A resend of a
    /// request still pending here replaces the first one's `respond`.
    ///
    /// With authentication on, this is the one place roles and key permissions are checked,
    /// for both front doors: an op the agent's role may not send, or a key op outside the
    /// account's key prefixes, is answered `forbidden` here, before the log (`auth.rs`).
    pub fn submit(&self, agent: &str, request: Request, respond: Respond) -> Submitted {
        let started = Instant::now();
        let op = request.op.name();
        if let Err(error) = self.rates.check(agent) {
            let wait = match &error {
                NodeError::RateLimited { retry_after, .. } => *retry_after,
                _ => std::time::Duration::ZERO,
            };
            answer_with(op, started, &request.id, Err(error), respond);
            return Submitted::OverRate { wait };
        }
        self.route(agent, request, respond, started);
        Submitted::Taken
    }

    /// Counts a message from `agent` that never becomes a request (it did not decode) against
    /// the agent's request rate, as `submit` counts a request: the time until its bucket has
    /// a token again when it is over, for the front door to pause it as `OverRate` says.
    pub fn charge_rate(&self, agent: &str) -> Option<std::time::Duration> {
        match self.rates.check(agent) {
            Err(NodeError::RateLimited { retry_after, .. }) => Some(retry_after),
            Ok(()) | Err(_) => None,
        }
    }

    /// [`NodeHandle::submit`] past the rate check: the role, the ingress permit, then the
    /// proposer (a write) or a task (anything else).
    fn route(&self, agent: &str, request: Request, respond: Respond, started: Instant) {
        let op = request.op.name();
        let respond = super::audit::audited(agent, &request.op, respond);
        let role = self.role_for(agent, &request.op);
        if !role.allows(Role::needed_for(&request.op)) {
            let refusal = auth::forbidden(&request.op, agent, role);
            return answer_with(op, started, &request.id, Ok(refusal.into()), respond);
        }
        if let Some(access) = self.kv_access_for(agent, &request.op)
            && let Err(denied) = access.check(&request.op)
        {
            let refusal = auth::kv_forbidden(agent, &denied);
            return answer_with(op, started, &request.id, Ok(refusal.into()), respond);
        }
        if let Err(refusal) = self.admit_at_cluster_version(&request.op) {
            return answer_with(op, started, &request.id, Ok(refusal.into()), respond);
        }
        // A leader without a quorum can commit nothing: say so now, not after the commit
        // timeout. `admin.status` still answers: it is how an operator sees this.
        if !matches!(request.op, Op::AdminStatus {})
            && let Err(error) = self.raft.check_quorum()
        {
            return answer_with(op, started, &request.id, Err(error.into()), respond);
        }
        let Ok(permit) = self.admit(&request.op) else {
            let error = self.overloaded(&request.op);
            return answer_with(op, started, &request.id, Err(error), respond);
        };
        if let Op::WatchPoll { .. } = &request.op {
            // A waiting poll holds no ingress permit: the watches bound them per agent, and
            // thousands of idle watchers must not refuse other requests.
            drop(permit);
            let handle = self.clone();
            let agent = agent.to_string();
            tokio::spawn(Box::pin(async move {
                let id = request.id.clone();
                let answer = handle.watch_poll(&agent, request.op).await;
                answer_with(op, started, &id, answer, respond);
            }));
            return;
        }
        if request.op.makes_secret() {
            let handle = self.clone();
            let agent = agent.to_string();
            tokio::spawn(Box::pin(async move {
                handle
                    .write_secret(&agent, request, permit, respond, started)
                    .await;
            }));
            return;
        }
        let origin = Origin {
            agent: agent.to_string(),
            request_id: request.id.clone(),
        };
        if request.op.is_write() {
            self.waits.register(origin.clone(), op, permit, respond);
            let write = AgentWrite {
                agent: agent.to_string(),
                request: AgentRequest::new(request.id, request.op),
            };
            if let Err(error) = self.proposer.write(write, origin.clone()) {
                self.waits.failed(&origin, &error);
            }
            return;
        }
        // Not a write: a keepalive, a read or an admin op.
        let handle = self.clone();
        let agent = agent.to_string();
        // Boxed: with the forwarding and read-index futures inline the task would be
        // kilobytes, copied at spawn (see docs/BENCHMARKS.md).
        tokio::spawn(Box::pin(async move {
            let id = request.id.clone();
            let inspect = matches!(request.op, Op::Inspect { .. });
            let airspace = matches!(request.op, Op::AirspaceQuery { .. });
            let mut answer = handle.answer_read(&agent, request).await;
            if inspect && !role.allows(Role::Admin) {
                answer = answer
                    .map(|answer| answer.map_reply(|reply| auth::redact_inspect(&agent, reply)));
            }
            if airspace && !role.allows(Role::Observer) {
                answer = answer
                    .map(|answer| answer.map_reply(|reply| auth::redact_conflicts(&agent, reply)));
            }
            drop(permit);
            answer_with(op, started, &id, answer, respond);
        }));
    }

    /// An ingress permit for `op` from its lane: keepalives from their own.
    fn admit(
        &self,
        op: &Op,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::TryAcquireError> {
        match op {
            Op::LeaseKeepalive { .. } => self.keepalive_ingress.clone().try_acquire_owned(),
            _ => self.ingress.clone().try_acquire_owned(),
        }
    }

    /// The refusal when `op`'s lane is full.
    fn overloaded(&self, op: &Op) -> NodeError {
        NodeError::Overloaded {
            in_flight: match op {
                Op::LeaseKeepalive { .. } => self.keepalive_ingress_max,
                _ => self.ingress_max,
            },
        }
    }

    /// Like [`NodeHandle::submit`], for callers that await the answer (tests, tools).
    pub async fn call(&self, agent: &str, request: Request) -> Response {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = request.id.clone();
        // The answer comes through `respond` also when over the rate.
        let _ = self.submit(
            agent,
            request,
            Box::new(move |response| {
                let _ = tx.send(response);
            }),
        );
        rx.await.unwrap_or_else(|_| {
            Response::error(
                Some(id),
                hivekeeper_protocol::ErrorCode::Unavailable,
                NodeError::Stopping.to_string(),
            )
        })
    }

    /// A keepalive, read or admin op: forwarded to the leader in a cluster (except
    /// `admin.status`, this node's own view, and a serializable `kv.get`, this node's own
    /// replica), else answered here.
    async fn answer_read(&self, agent: &str, request: Request) -> Result<Answer, NodeError> {
        let local = matches!(
            request.op,
            Op::AdminStatus {}
                | Op::KvGet {
                    serializable: Some(true),
                    ..
                }
        );
        match &self.forwarder {
            Some(forwarder) if !local => match forwarder.submit(agent, request).await? {
                Ok(reply) => Ok(reply),
                Err(request) => self.answer_here(agent, request).await,
            },
            _ => self.answer_here(agent, request).await,
        }
    }

    /// Answers a keepalive, read or admin op on this node (the leader, or a single node).
    async fn answer_here(&self, agent: &str, request: Request) -> Result<Answer, NodeError> {
        match &request.op {
            Op::LeaseKeepalive { lease } => {
                // Leadership confirmed by a quorum before the deadline moves (DESIGN.md §2).
                self.raft.confirm_leadership().await?;
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
                    Ok(ractor::rpc::CallResult::Success(reply)) => Ok(reply.into()),
                    _ => Err(NodeError::Stopping),
                }
            }
            Op::AdminStatus {} => Ok(Answer::Status(Box::new(self.raft.status()))),
            Op::AdminMemberAdd {
                name,
                addr,
                catch_up_timeout_ms,
                catch_up_lag_entries_max,
            } => {
                let catch_up = CatchUp {
                    timeout_ms: catch_up_timeout_ms.unwrap_or(CatchUp::DEFAULTS.timeout_ms),
                    lag_entries_max: catch_up_lag_entries_max
                        .unwrap_or(CatchUp::DEFAULTS.lag_entries_max),
                };
                let change = MemberChange::Add {
                    name,
                    addr,
                    catch_up,
                };
                self.change_membership(agent, &request.id, change)
                    .await
                    .map(Answer::from)
            }
            Op::AdminMemberRemove { name } => {
                let change = MemberChange::Remove { name };
                self.change_membership(agent, &request.id, change)
                    .await
                    .map(Answer::from)
            }
            Op::AdminLeases { .. } => self
                .admin_leases(agent, &request.op)
                .await
                .map(Answer::from),
            Op::AdminSnapshot {
                index,
                offset,
                page_bytes_max,
            } => {
                self.snapshots
                    .page(&self.raft, *index, *offset, *page_bytes_max)
                    .await
            }
            // A serializable read answers from this member's replica as it is: no read-index
            // round, so it may miss the latest writes, and a follower answers it alone.
            Op::KvGet {
                serializable: Some(true),
                ..
            } => {
                let op = request.op.clone();
                Ok(self.raft.query(|sm| sm.query(agent, &op))?.into())
            }
            op => {
                let op = op.clone();
                self.raft.confirm_leadership().await?;
                Ok(self.raft.query(|sm| sm.query(agent, &op))?.into())
            }
        }
    }

    /// `watch.poll`, answered from this member's replica (never forwarded).
    async fn watch_poll(&self, agent: &str, op: Op) -> Result<Answer, NodeError> {
        let Op::WatchPoll {
            key,
            prefix,
            after,
            after_key,
            max_events,
            wait_ms,
        } = op
        else {
            return Ok(Reply::refused(ErrorCode::BadRequest, "not a watch.poll").into());
        };
        let selector = match KeySelector::from_fields(key.as_deref(), prefix.as_deref()) {
            Ok(selector) => selector,
            Err(invalid) => {
                let message = format!("watch.poll: {invalid}");
                return Ok(Reply::refused(ErrorCode::BadRequest, message).into());
            }
        };
        let request = PollRequest {
            selector,
            after,
            after_key,
            max_events,
            wait_ms,
        };
        watches::poll(&self.raft, &self.watches, agent, request).await
    }

    /// `admin.leases`: a page of live leases (linearizable, read-index), with the time left
    /// before each deadline when this node's keeper holds deadlines (a ready leader).
    async fn admin_leases(&self, agent: &str, op: &Op) -> Result<Reply, NodeError> {
        let op = op.clone();
        self.raft.confirm_leadership().await?;
        let reply = self.raft.query(|sm| sm.query(agent, &op))?;
        let Reply::Leases {
            mut leases,
            next_after,
        } = reply
        else {
            return Ok(reply);
        };
        let ids: Vec<LeaseId> = leases
            .iter()
            .map(|info| LeaseId::parse(&info.lease).expect("the machine writes lease ids"))
            .collect();
        let remaining = self
            .keeper
            .call(
                |reply| KeeperMsg::Remaining { leases: ids, reply },
                Some(REMAINING_TIMEOUT),
            )
            .await;
        // Without the keeper's answer the leases are still worth listing, without the time
        // left (as on a follower).
        if let Ok(ractor::rpc::CallResult::Success(remaining)) = remaining {
            for (info, remaining_ms) in leases.iter_mut().zip(remaining) {
                info.remaining_ms = remaining_ms;
            }
        }
        Ok(Reply::Leases { leases, next_after })
    }

    /// Proposes `limits` and the key space's `kv` bounds if the replicated ones differ (this
    /// node must lead). The entry carries `kv` only when those differ, so a cluster at the
    /// default key-space bounds writes the entries it always wrote.
    pub(super) async fn configure(&self, limits: &Limits, kv: &KvLimits) -> Result<(), NodeError> {
        let (current, current_kv) = self
            .raft
            .query(|sm| (sm.limits().clone(), sm.kv_limits().clone()))?;
        if &current == limits && &current_kv == kv {
            return Ok(());
        }
        let command = NodeCommand::new(Command::Configure {
            limits: limits.clone(),
            kv: (&current_kv != kv).then(|| kv.clone()),
        });
        match self.proposer.propose(command).await? {
            Reply::Done => Ok(()),
            other => Err(NodeError::Start {
                reason: format!("the machine refused the configured limits: {other:?}"),
            }),
        }
    }
}

impl NodeHandle {
    /// What a forwarded request needs of this node: that it leads, with a quorum. The
    /// refusal is the reason, as the peer wire carries it.
    fn leading_with_quorum(&self) -> Result<(), ForwardRefused> {
        if !self.raft.is_leader() {
            return Err(ForwardRefused(format!(
                "member {} is not the leader",
                self.raft.member_name(self.raft.node_id())
            )));
        }
        self.raft.check_quorum().map_err(refused)
    }
}

/// What other nodes forward here: agents' requests only (the peer wire has no encoding for
/// anything else). This node answers as the leader, its proposer putting the writes into its
/// next entry beside its own agents' (`proposer.rs`), or refuses (it was deposed since the
/// follower looked) and the follower answers `unavailable`.
impl ForwardHandler for NodeHandle {
    async fn propose(&self, writes: Vec<AgentWrite>) -> Result<Vec<Reply>, ForwardRefused> {
        self.leading_with_quorum()?;
        // Through this leader's proposer: the writes share its next entry with its own agents'
        // and other followers' writes.
        self.proposer.forwarded(writes).await.map_err(refused)
    }

    async fn submit(&self, agent: String, request: Request) -> Result<Answer, ForwardRefused> {
        self.leading_with_quorum()?;
        // The follower checked the agent's rate; the leader bounds what it answers, in the
        // request's lane.
        let _permit = self
            .admit(&request.op)
            .map_err(|_| refused(self.overloaded(&request.op)))?;
        self.answer_here(&agent, request).await.map_err(refused)
    }
}

/// A leader's error, as the refusal the peer wire carries back to the follower.
fn refused(error: impl std::fmt::Display) -> ForwardRefused {
    ForwardRefused(error.to_string())
}
