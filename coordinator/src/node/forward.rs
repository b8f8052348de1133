//! Forwarding to the leader: a follower hands what only the leader can answer to the leader
//! over the inter-node transport, and gives the answer to its own bridge.
//!
//! ```text
//!  follower proposer ─ Writes(agents' writes) ─▶ leader: each wrapped into Command::Request,
//!                                                 raft.propose_batch ─▶ replies
//!  follower submit   ─ Submit(agent, keepalive | read) ─▶ leader: answered as the leader
//!  leader gone (refused / deposed / silent while another leader is elected)
//!      ─▶ wait for the next leader (≤ leader_wait) ─▶ once more
//!         └─ this member is cut off meanwhile (quorum.rs, rule 4) ─▶ `unavailable` now
//! ```
//!
//! Only agents' requests are forwarded; the types allow nothing else ([`AgentWrite`] has no
//! room for a node's command). Lease and wait expiry and limits are proposed by the leader
//! itself (`proposer.rs`), and a follower's waits arm no timer that would need to reach it.
//!
//! Deferred answers (a queued acquire's grant) and notices do not travel back this way: every
//! replica applies the same entries and emits the same events, so the follower's own fan-out
//! publishes them on its own broker, where the agent is. A forwarded request the leader could
//! not answer (it was deposed, the link broke) is answered `unavailable`; the agent retries
//! with the same request id, which the dedup memory makes safe.

use std::sync::Arc;
use std::time::Duration;

use hivekeeper_protocol::Request;

use super::NodeError;
use crate::answer::Answer;
use crate::raft::transport::{AgentWrite, PeerPool, PeerRequest, PeerResponse, TransportError};
use crate::raft::{Member, NodeId, RaftError, RaftHandle};
use crate::state_machine::Reply;

/// How often a request waiting for a leader looks whether this member is cut off: the
/// cluster watch's look (`cluster_watch.rs`), a heartbeat interval.
const CUT_OFF_LOOK: Duration = Duration::from_millis(50);

/// Sends requests to the current leader.
#[derive(Clone)]
pub(crate) struct Forwarder {
    raft: Arc<RaftHandle>,
    pool: PeerPool,
    timeout: Duration,
    /// How long a request waits for a leader to be known (an election under way) before it is
    /// answered `unavailable`.
    leader_wait: Duration,
}

/// Where a request goes.
pub(crate) enum Route {
    /// This node leads: answer here.
    Here,
    /// To the leader.
    Leader(NodeId, Member),
}

impl Forwarder {
    pub(crate) fn new(
        raft: Arc<RaftHandle>,
        pool: PeerPool,
        timeout: Duration,
        leader_wait: Duration,
    ) -> Forwarder {
        Forwarder {
            raft,
            pool,
            timeout,
            leader_wait,
        }
    }

    /// Where requests go now. Without a known leader (mid-election) it waits up to
    /// `leader_wait` for one, so a request arriving during a failover is served by the new
    /// leader instead of bouncing; a node cut off from the majority answers `unavailable`
    /// after that wait.
    pub(crate) async fn route(&self) -> Result<Route, NodeError> {
        let leader = match self.raft.leader() {
            Some(leader) => leader,
            None => {
                self.wait_for_leader(None).await?;
                self.raft.leader().ok_or_else(|| self.no_leader())?
            }
        };
        Ok(if leader.0 == self.raft.node_id() {
            Route::Here
        } else {
            Route::Leader(leader.0, leader.1)
        })
    }

    /// Waits up to `leader_wait` for a leader other than `gone` to be known. Ends early with
    /// the reason when this member is cut off from the majority meanwhile (`quorum.rs`, rule
    /// 4): no leader it could reach will come, and its agent should move to another member now
    /// rather than after its election timeout plus the whole leader wait (about 0.9 s). A
    /// member only slow to hear an election is still in touch with a majority, so it is not cut
    /// off and waits up to `leader_wait`.
    async fn wait_for_leader(&self, gone: Option<NodeId>) -> Result<(), NodeError> {
        let cut_off = async {
            loop {
                if let Err(error @ RaftError::CutOff { .. }) = self.raft.check_quorum() {
                    return error;
                }
                tokio::time::sleep(CUT_OFF_LOOK).await;
            }
        };
        tokio::select! {
            _ = self.raft.wait_for_new_leader(gone, self.leader_wait) => Ok(()),
            error = cut_off => Err(NodeError::from(error)),
        }
    }

    /// The error when no leader became known within the leader wait.
    fn no_leader(&self) -> NodeError {
        NodeError::NoLeader {
            waited_ms: u64::try_from(self.leader_wait.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// One forwarded call to `leader`. `Err(Gone)` when the leader could not be reached or
    /// said it no longer leads: worth one retry at the next leader.
    async fn call(
        &self,
        (leader, member): &(NodeId, Member),
        request: PeerRequest,
        expected: usize,
    ) -> Result<Vec<Answer>, Failure> {
        let leader = *leader;
        let client = self.pool.client(leader, &member.name, &member.addr);
        // A leader that stopped answering without closing its sockets (paused: a GC or VM
        // stall, SIGSTOP; or cut off by a partition that drops packets) would hold the call
        // for the whole timeout. Once this node learns of another leader, the call is over:
        // the request goes to the new one (safe, as for a dead leader: the request id makes a
        // write the old leader did commit come back from the dedup memory).
        // Likewise once this node no longer knows `leader` as the leader at all: it campaigns
        // because it heard nothing (a partition that cut it off), and the request should fail
        // over to `unavailable` within the next leader wait, not sit out the whole timeout.
        let answer = tokio::select! {
            answer = client.call(request, self.timeout) => answer,
            next = self.raft.wait_for_leader_change(leader, self.timeout) => {
                return Err(Failure::Gone(match next {
                    Some(next) => format!(
                        "member {} leads now; member {} did not answer in time",
                        self.raft.member_name(next),
                        member.name
                    ),
                    None => format!(
                        "member {} is no longer known to lead and did not answer",
                        member.name
                    ),
                }));
            }
        };
        let leader = &member.name;
        match answer {
            Ok(PeerResponse::Replies(Ok(replies))) if replies.len() == expected => Ok(replies),
            Ok(PeerResponse::Replies(Ok(replies))) => Err(Failure::Other(NodeError::Forward {
                reason: format!(
                    "the leader ({leader}) answered {} replies for {expected} commands",
                    replies.len()
                ),
            })),
            Ok(PeerResponse::Replies(Err(reason))) => Err(Failure::Gone(format!(
                "the leader ({leader}) could not answer: {reason}"
            ))),
            Ok(other) => Err(Failure::Other(NodeError::Forward {
                reason: format!(
                    "the leader ({leader}) answered a forwarded request with {}",
                    other.kind()
                ),
            })),
            Err(error @ TransportError::Timeout { .. }) => {
                Err(Failure::Other(NodeError::Forward {
                    reason: error.to_string(),
                }))
            }
            Err(error) => Err(Failure::Gone(error.to_string())),
        }
    }

    /// Forwards `request` to the leader and returns its replies, or `Here` when this node
    /// leads (then the caller answers itself).
    ///
    /// A failover absorbed here: when the leader is gone (killed: connection refused; deposed:
    /// it says so), the request waits up to `leader_wait` for the cluster to elect another and
    /// goes there, once. Sending it again is safe: every write carries its agent's request id,
    /// so one the old leader did commit is answered from the dedup memory, not done twice.
    ///
    /// `may_resend` is asked before that second send: a batch of writes whose agents were
    /// answered meanwhile, or that waited too long (`proposer::WRITE_WAIT_MAX`), is not sent
    /// again, so no copy of a write reaches the log after its agent moved on.
    async fn forward(
        &self,
        request: PeerRequest,
        expected: usize,
        may_resend: &(dyn Fn() -> bool + Sync),
    ) -> Result<Forwarded, NodeError> {
        let mut retried = false;
        loop {
            let leader = match self.route().await? {
                Route::Here => return Ok(Forwarded::Here(request)),
                Route::Leader(id, member) => (id, member),
            };
            match self.call(&leader, request.clone(), expected).await {
                Ok(replies) => return Ok(Forwarded::Answered(replies)),
                Err(Failure::Gone(reason)) if !retried && may_resend() => {
                    retried = true;
                    tracing::debug!(%reason, "the leader is gone; waiting for the next one");
                    self.wait_for_leader(Some(leader.0)).await?;
                    // Waited once already: a node that still knows no leader (cut off from
                    // the majority) answers now rather than after a second wait.
                    if self.raft.leader().is_none() {
                        return Err(self.no_leader());
                    }
                }
                Err(Failure::Gone(reason)) => return Err(NodeError::Forward { reason }),
                Err(Failure::Other(error)) => return Err(error),
            }
        }
    }

    /// Proposes agents' `writes` through the leader, as one entry: one reply per write, or
    /// the writes back when this node leads. `may_resend` says whether they may go to the
    /// next leader when this one is gone ([`Forwarder::forward`]).
    pub(crate) async fn propose(
        &self,
        writes: Vec<AgentWrite>,
        may_resend: &(dyn Fn() -> bool + Sync),
    ) -> Result<Result<Vec<Reply>, Vec<AgentWrite>>, NodeError> {
        let expected = writes.len();
        Ok(
            match self
                .forward(PeerRequest::Writes(writes), expected, may_resend)
                .await?
            {
                Forwarded::Answered(answers) => Ok(machine_replies(answers)?),
                Forwarded::Here(PeerRequest::Writes(writes)) => Err(writes),
                Forwarded::Here(_) => unreachable_request(),
            },
        )
    }

    /// Has the leader answer a keepalive or a read: its reply, or the request back when this
    /// node leads.
    pub(crate) async fn submit(
        &self,
        agent: &str,
        request: Request,
    ) -> Result<Result<Answer, Request>, NodeError> {
        let request = PeerRequest::Submit {
            agent: agent.to_string(),
            request,
        };
        // A keepalive or a read changes nothing: sending it to the next leader is always safe.
        match self.forward(request, 1, &|| true).await? {
            Forwarded::Answered(mut replies) => {
                replies.pop().map(Ok).ok_or_else(|| NodeError::Forward {
                    reason: "the leader answered nothing".into(),
                })
            }
            Forwarded::Here(PeerRequest::Submit { request, .. }) => Ok(Err(request)),
            Forwarded::Here(_) => unreachable_request(),
        }
    }
}

/// What [`Forwarder::forward`] did. Not boxed although `Here` is large (a wire request with a
/// waypoint's fields and priority): on the leader every request comes back `Here`, and a
/// value moved once on the stack is cheaper than an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Forwarded {
    /// The leader's answers.
    Answered(Vec<Answer>),
    /// This node leads: the request, back.
    Here(PeerRequest),
}

/// Why a forwarded call failed.
enum Failure {
    /// The leader is unreachable or no longer leads: retry at the next one.
    Gone(String),
    /// Anything else: answered as is.
    Other(NodeError),
}

/// `forward` hands back the request it was given; any other variant is a bug in this file.
fn unreachable_request<T>() -> T {
    unreachable!("Forwarder::forward returns the request it was given")
}

/// The machine's replies to forwarded writes: a leader answers a write with nothing else.
fn machine_replies(answers: Vec<Answer>) -> Result<Vec<Reply>, NodeError> {
    answers
        .into_iter()
        .map(|answer| match answer {
            Answer::Machine(reply) => Ok(reply),
            other => Err(NodeError::Forward {
                reason: format!("the leader answered a write with {other:?}"),
            }),
        })
        .collect()
}
