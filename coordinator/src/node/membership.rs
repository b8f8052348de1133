//! `admin.member.add` and `admin.member.remove` on the leader: one change at a time, each
//! request id carried out once, refusals as final answers (`raft/membership.rs` does the
//! change itself).
//!
//! ```text
//!  admin.member.add / .remove (here, or forwarded by a follower)
//!    ─▶ wait for the change before (one at a time: openraft refuses a second in progress)
//!    ─▶ a resend of an id already carried out? ─▶ its recorded answer
//!    ─▶ RaftHandle::add_member / remove_member ─▶ record the answer by (agent, id)
//! ```
//!
//! Why record answers: a change can take its whole catch-up bound (10 s by default), and the
//! SDK resends a request that is not answered within its attempt timeout. Without the record a
//! resend started a second change after the first answered, and could promote a learner after
//! the operator was told it was left a learner.

use std::collections::VecDeque;

use hivekeeper_protocol::ErrorCode;
use tokio::sync::Mutex;

use super::NodeError;
use super::cluster::{ClusterConfig, ClusterState};
use super::handle::NodeHandle;
use crate::raft::{self, CatchUp, RaftError};
use crate::state_machine::Reply;

/// How many answers to membership requests are kept for resends: a resend comes within
/// seconds, and membership changes are rare.
const ANSWERS_KEPT: usize = 16;

/// A membership request's identity: the agent that sent it and its request id.
type RequestKey = (String, String);

/// The leader's membership changes: the lock that makes changes one at a time, and the answers
/// given by request.
#[derive(Debug, Default)]
pub(super) struct MembershipChanges {
    /// The latest answers by (agent, request id), oldest first; the lock is held for the whole
    /// of a change.
    answers: Mutex<VecDeque<(RequestKey, Result<Reply, NodeError>)>>,
}

/// A membership request: what to change.
pub(super) enum MemberChange<'a> {
    /// Add a member, promoting it once it caught up.
    Add {
        /// Its `--name`.
        name: &'a str,
        /// Its inter-node address, `host:port`.
        addr: &'a str,
        /// How close and how soon it must catch up to be made a voter.
        catch_up: CatchUp,
    },
    /// Remove a member.
    Remove {
        /// Its `--name`.
        name: &'a str,
    },
}

impl NodeHandle {
    /// Carries out `change` for `agent`'s request `request_id` (once: a resend gets the first
    /// answer). Refusals that retrying cannot help are replies (`bad_request`, `timeout`), so
    /// that they survive forwarding; other failures are errors (`unavailable`, retried).
    pub(super) async fn change_membership(
        &self,
        agent: &str,
        request_id: &str,
        change: MemberChange<'_>,
    ) -> Result<Reply, NodeError> {
        let key = (agent.to_string(), request_id.to_string());
        let mut answers = self.membership.answers.lock().await;
        if let Some((_, answer)) = answers.iter().find(|(seen, _)| *seen == key) {
            return answer.clone();
        }
        let result = match change {
            MemberChange::Add {
                name,
                addr,
                catch_up,
            } => self.add_member_with(name, addr, catch_up).await.map(drop),
            MemberChange::Remove { name } => self.remove_member(name).await,
        };
        let answer = membership_answer(result);
        if answers.len() == ANSWERS_KEPT {
            answers.pop_front();
        }
        answers.push_back((key, answer.clone()));
        answer
    }

    /// Adds member `name` reachable at `addr` (host:port) with the default catch-up bounds
    /// ([`CatchUp::DEFAULTS`]); see [`NodeHandle::add_member_with`].
    pub async fn add_member(&self, name: &str, addr: &str) -> Result<raft::MemberInfo, NodeError> {
        self.add_member_with(name, addr, CatchUp::DEFAULTS).await
    }

    /// Adds member `name` reachable at `addr` (host:port): dialled first, then a learner, then
    /// a voter once it caught up within `catch_up`. This node must lead. The new node is
    /// started with `initial_cluster_state = existing` before this call.
    pub async fn add_member_with(
        &self,
        name: &str,
        addr: &str,
        catch_up: CatchUp,
    ) -> Result<raft::MemberInfo, NodeError> {
        let entry = ClusterConfig {
            name: name.to_string(),
            initial_cluster: format!("{name}={addr}"),
            initial_cluster_state: ClusterState::Existing,
            peer_listen: None,
            peer_tls_cert: None,
            peer_tls_key: None,
            peer_ca: None,
        };
        let member = entry.me().map_err(|error| NodeError::BadRequest {
            reason: error.to_string(),
        })?;
        self.must_lead()?;
        self.raft.check_quorum()?;
        Ok(self
            .raft
            .add_member(entry.node_id(), member, catch_up)
            .await?)
    }

    /// Removes member `name`, running or not. This node must lead.
    pub async fn remove_member(&self, name: &str) -> Result<(), NodeError> {
        self.must_lead()?;
        let id = raft::node_id_for(name);
        if !self.members().iter().any(|info| info.id == id) {
            return Err(NodeError::BadRequest {
                reason: format!("{name:?} is not a member"),
            });
        }
        self.raft.check_quorum()?;
        Ok(self.raft.remove_member(id).await?)
    }

    /// Membership changes need the inter-node transport and the leader.
    fn must_lead(&self) -> Result<(), NodeError> {
        if self.forwarder.is_none() {
            return Err(NodeError::BadRequest {
                reason: "this node runs alone (started without --name and --initial-cluster): \
                         it has no inter-node transport to add members to"
                    .into(),
            });
        }
        if self.raft.is_leader() {
            Ok(())
        } else {
            Err(NodeError::NotLeader {
                node: self.raft.member_name(self.raft.node_id()),
                leader: self.raft.leader().map(|(_, member)| member.name),
            })
        }
    }
}

/// The answer to a membership op: `Done`; a refusal for one that cannot succeed as asked (a
/// single node, an unknown name, nothing at the address, a build too old for the cluster's
/// version: `bad_request`; a learner that did not
/// catch up: `timeout`), as a reply so that it survives forwarding; or the error, for
/// `unavailable` and a retry.
fn membership_answer(result: Result<(), NodeError>) -> Result<Reply, NodeError> {
    let refused = |code, message: String| Ok(Reply::Refused { code, message });
    match result {
        Ok(()) => Ok(Reply::Done),
        Err(NodeError::BadRequest { reason }) => refused(ErrorCode::BadRequest, reason),
        Err(NodeError::Raft(error)) => match &*error {
            RaftError::MemberUnreachable { .. }
            | RaftError::MemberElsewhere { .. }
            | RaftError::MemberTooOld { .. } => refused(ErrorCode::BadRequest, error.to_string()),
            RaftError::LearnerBehind { .. } => refused(ErrorCode::Timeout, error.to_string()),
            _ => Err(NodeError::Raft(error)),
        },
        Err(error) => Err(error),
    }
}
