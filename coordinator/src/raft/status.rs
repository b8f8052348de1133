//! `admin.status`: this node's own view of Raft, as the wire protocol's [`NodeStatus`].
//!
//! ```text
//!  openraft metrics + the committed index the writer keeps + the quorum (quorum.rs) ─▶ NodeStatus
//! ```
//!
//! Answered without a quorum round: not linearizable (a deposed leader may still call itself
//! leader for an election timeout).

use hivekeeper_protocol::{MemberInfo as WireMember, NodeStatus, ReplicationInfo};

use super::{Quorum, RaftHandle, RaftMetrics, members_of};

impl RaftHandle {
    /// This node's status now.
    pub fn status(&self) -> NodeStatus {
        let quorum = self.quorum();
        let mut status = status_of(&self.metrics.borrow(), self.committed_index(), &quorum);
        status.cluster_version = self.query(|sm| sm.cluster_version()).ok();
        status
    }
}

/// The status `metrics` describe. The commit index is the one openraft hands the log store, so
/// it is passed in (see [`RaftHandle::committed_index`]), and so is the quorum.
fn status_of(metrics: &RaftMetrics, committed_index: Option<u64>, quorum: &Quorum) -> NodeStatus {
    let members = members_of(metrics)
        .into_iter()
        .map(|info| WireMember {
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
        has_quorum: Some(quorum.has_quorum),
        quorum_ack_age_ms: quorum.ack_age_ms,
        cluster_version: None,
    }
}
