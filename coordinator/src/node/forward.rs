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
}

impl Forwarder {
    pub(crate) fn new(raft: Arc<RaftHandle>, pool: PeerPool, timeout: Duration) -> Forwarder {
        Forwarder {
            raft,
            pool,
            timeout,
        }
    }

    /// Whether requests must go to another node: this node does not lead.
    pub(crate) fn must_forward(&self) -> bool {
        !self.raft.is_leader()
    }

    fn leader(&self) -> Result<(NodeId, Member), NodeError> {
        self.raft.leader().ok_or_else(|| {
            NodeError::Unavailable(
                "no leader known: an election is under way, or this node is cut off from the \
                 majority; retry"
                    .into(),
            )
        })
    }

    async fn call(&self, request: PeerRequest, expected: usize) -> Result<Vec<Reply>, NodeError> {
        let (leader, member) = self.leader()?;
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

    /// Proposes `commands` through the leader, as one entry; one reply per command.
    pub(crate) async fn propose(&self, commands: Vec<Command>) -> Result<Vec<Reply>, NodeError> {
        let expected = commands.len();
        self.call(PeerRequest::Propose(commands), expected).await
    }

    /// Has the leader answer a keepalive or a read.
    pub(crate) async fn submit(&self, agent: &str, request: Request) -> Result<Reply, NodeError> {
        let request = PeerRequest::Submit {
            agent: agent.to_string(),
            request,
        };
        let mut replies = self.call(request, 1).await?;
        replies
            .pop()
            .ok_or_else(|| NodeError::Failed("the leader answered nothing".into()))
    }
}
