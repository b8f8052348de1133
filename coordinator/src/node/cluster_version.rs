//! The cluster version on this node: the leader raises it once every member's build supports
//! a higher one, and every node refuses an op above it before the log (the state machine's
//! `cluster_version.rs` holds the version and the rule).
//!
//! ```text
//!  every 1 s on a ready leader (a single node: once, at start):
//!    RaftHandle::cluster_version_every_member_applies  (this build's, and each other voter's
//!      and learner's peer protocol version agreed in its latest hello; none while a member
//!      was never reached)
//!    └─ above the machine's ─▶ propose RaiseClusterVersion ─▶ INFO "cluster version raised"
//!  submit: an op whose `cluster_version_needed` is above the applied version ─▶ `unavailable`
//! ```
//!
//! The leader dials every voter and learner to replicate, so it hears each member's build
//! within a heartbeat of its start; the last member upgraded raises the version within about
//! a second of rejoining. A node's applied version never runs ahead of the committed one, and
//! the version only rises, so refusing against it is never wrong for long and never admits an
//! op that an older member would have to apply.

use std::time::Duration;

use hivekeeper_protocol::{CLUSTER_VERSION_INITIAL, Op};

use super::NodeError;
use super::handle::NodeHandle;
use super::proposer::NodeCommand;
use crate::raft::CLUSTER_TARGET;
use crate::state_machine::{self, Command, Reply};

/// How often a leader looks whether every member's build supports a higher version.
const LOOK_EVERY: Duration = Duration::from_secs(1);

impl NodeHandle {
    /// Proposes the highest cluster version every member applies, when it is above the
    /// machine's (this node must lead).
    pub(super) async fn raise_cluster_version(&self) -> Result<(), NodeError> {
        let Some(version) = self.raft.cluster_version_every_member_applies() else {
            return Ok(());
        };
        let current = self.raft.query(|sm| sm.cluster_version())?;
        if version <= current {
            return Ok(());
        }
        let command = NodeCommand::new(Command::RaiseClusterVersion { version });
        match self.proposer.propose(command).await? {
            Reply::Done => tracing::info!(
                target: CLUSTER_TARGET,
                from = current,
                to = version,
                "cluster version raised: every member runs a build that supports {version}"
            ),
            other => tracing::warn!(
                ?other,
                version,
                "the machine refused a cluster version raise"
            ),
        }
        Ok(())
    }

    /// Refuses an op that needs a higher cluster version than this node applied: a member of
    /// an older build could not apply it. No lookup for the ops every cluster supports.
    pub(super) fn admit_at_cluster_version(&self, op: &Op) -> Result<(), Reply> {
        if op.cluster_version_needed() <= CLUSTER_VERSION_INITIAL {
            return Ok(());
        }
        let version = self
            .raft
            .query(|sm| sm.cluster_version())
            .unwrap_or(CLUSTER_VERSION_INITIAL);
        state_machine::admit(op, version)
    }
}

/// In a cluster: while this node is a ready leader, raises the cluster version whenever every
/// member's build supports a higher one. Ends when the node stops.
pub(super) async fn raise_when_every_member_can(handle: NodeHandle) {
    let mut leadership = handle.raft.leadership();
    loop {
        let ready = leadership.borrow_and_update().ready;
        if ready && let Err(error) = handle.raise_cluster_version().await {
            tracing::debug!(%error, "could not raise the cluster version; trying again");
        }
        if let Ok(Err(_)) = tokio::time::timeout(LOOK_EVERY, leadership.changed()).await {
            return;
        }
    }
}
