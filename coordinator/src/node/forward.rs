//! Forwarding to the leader: a follower hands what only the leader can answer to the leader
//! over the inter-node transport, and gives the answer to its own bridge.
//!
//! ```text
//!  follower proposer ─ Propose(batch) ─▶ leader: raft.propose_batch ─▶ replies
//!  follower submit   ─ Submit(agent, keepalive | read) ─▶ leader: answered as the leader
//! ```
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
use crate::raft::{Member, NodeId, RaftHandle};
use crate::state_machine::{Command, Reply};
use crate::transport::{PeerPool, PeerRequest, PeerResponse};

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
                let _ = self.raft.wait_for_leader(self.leader_wait).await;
                self.raft.leader().ok_or_else(|| {
                    NodeError::Unavailable(format!(
                        "no leader known after {} ms: an election is under way, or this node \
                         is cut off from the majority; retry",
                        self.leader_wait.as_millis()
                    ))
                })?
            }
        };
        Ok(if leader.0 == self.raft.node_id() {
            Route::Here
        } else {
            Route::Leader(leader.0, leader.1)
        })
    }

    async fn call(
        &self,
        (leader, member): (NodeId, Member),
        request: PeerRequest,
        expected: usize,
    ) -> Result<Vec<Reply>, NodeError> {
        let client = self.pool.client(leader, &member.addr);
        match client.call(request, self.timeout).await {
            Ok(PeerResponse::Replies(Ok(replies))) if replies.len() == expected => Ok(replies),
            Ok(PeerResponse::Replies(Ok(replies))) => Err(NodeError::Failed(format!(
                "the leader (node {leader}) answered {} replies for {expected} commands",
                replies.len()
            ))),
            Ok(PeerResponse::Replies(Err(reason))) => Err(NodeError::Unavailable(format!(
                "the leader (node {leader}) could not answer: {reason}"
            ))),
            Ok(other) => Err(NodeError::Failed(format!(
                "the leader (node {leader}) answered a forwarded request with {}",
                other.kind()
            ))),
            Err(error) => Err(NodeError::Unavailable(format!(
                "forwarding to the leader failed: {error}"
            ))),
        }
    }

    /// Proposes `commands` through `leader`, as one entry; one reply per command.
    pub(crate) async fn propose(
        &self,
        leader: (NodeId, Member),
        commands: Vec<Command>,
    ) -> Result<Vec<Reply>, NodeError> {
        let expected = commands.len();
        self.call(leader, PeerRequest::Propose(commands), expected)
            .await
    }

    /// Has `leader` answer a keepalive or a read.
    pub(crate) async fn submit(
        &self,
        leader: (NodeId, Member),
        agent: &str,
        request: Request,
    ) -> Result<Reply, NodeError> {
        let request = PeerRequest::Submit {
            agent: agent.to_string(),
            request,
        };
        let mut replies = self.call(leader, request, 1).await?;
        replies
            .pop()
            .ok_or_else(|| NodeError::Failed("the leader answered nothing".into()))
    }
}
