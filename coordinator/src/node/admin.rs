//! The operator's reads: `admin.status` and `admin.leases`. (`admin.revoke` is a write and goes
//! through the log like any other; the state machine decides it.)
//!
//! ```text
//!  admin.status ─▶ openraft metrics + committed index ─▶ Reply::Status   (this node's view,
//!                                                                         never forwarded)
//!  admin.leases ─▶ read-index ─▶ StateMachine::query (a page of leases)
//!                ─▶ LeaseKeeper::Remaining (deadlines, leader only) ─▶ Reply::Leases
//! ```
//!
//! Neither needs a credential yet: the service has no authentication. When it gets one, these
//! and `admin.revoke` are the ops that require the admin credential (`Op::is_admin`).

use std::time::Duration;

use hivekeeper_protocol::{MemberInfo, NodeStatus, Op, ReplicationInfo};

use super::lease_keeper::KeeperMsg;
use super::{NodeError, NodeHandle};
use crate::raft::RaftMetrics;
use crate::state_machine::{LeaseId, Reply};

/// How long `admin.leases` waits for the keeper's deadlines before answering without them.
const REMAINING_TIMEOUT: Duration = Duration::from_secs(2);

/// This node's status from openraft's metrics. openraft 0.9's metrics have no commit index,
/// so it is passed in (see `RaftHandle::committed_index`).
pub(super) fn status_of(metrics: &RaftMetrics, committed_index: Option<u64>) -> NodeStatus {
    let members = crate::raft::members_of(metrics)
        .into_iter()
        .map(|info| MemberInfo {
            id: info.id,
            name: info.member.name,
            addr: info.member.addr,
            voter: info.voter,
        })
        .collect();
    let replication = metrics.replication.as_ref().map(|replication| {
        replication
            .iter()
            // openraft lists the leader too; its own log needs no replicating.
            .filter(|(id, _)| **id != metrics.id)
            .map(|(id, matched)| ReplicationInfo {
                id: *id,
                matched_index: matched.map(|log_id| log_id.index),
            })
            .collect()
    });
    NodeStatus {
        node_id: metrics.id,
        term: metrics.current_term,
        is_leader: metrics.current_leader == Some(metrics.id),
        leader_id: metrics.current_leader,
        last_log_index: metrics.last_log_index,
        committed_index,
        applied_index: metrics.last_applied.map(|log_id| log_id.index),
        snapshot_index: metrics.snapshot.map(|log_id| log_id.index),
        purged_index: metrics.purged.map(|log_id| log_id.index),
        members,
        replication,
    }
}

impl NodeHandle {
    /// `admin.status`: this node's own view, answered here without a quorum round. Not
    /// linearizable: a deposed leader may still call itself leader for an election timeout.
    pub(super) fn admin_status(&self) -> Reply {
        Reply::Status(Box::new(status_of(
            &self.raft.metrics(),
            self.raft.committed_index(),
        )))
    }

    /// `admin.leases`: a page of live leases (linearizable, read-index), with the time left
    /// before each deadline when this node's keeper holds deadlines (a ready leader).
    pub(super) async fn admin_leases(&self, agent: &str, op: &Op) -> Result<Reply, NodeError> {
        let op = match crate::wire::read(op) {
            Ok(op) => op,
            Err(not_read) => return Ok(not_read.refusal()),
        };
        self.read_index.confirm().await?;
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
}
