//! [`Health`]: what the metrics port's `/health` and `/ready` answer, from the node's own
//! view of Raft (no request to anyone: a probe must be cheap and never hang).
//!
//! ```text
//!  RaftHandle::quorum() (raft/quorum.rs), committed and applied index ─▶ Health
//!    healthy = has_quorum                                         /health: 200 or 503
//!    ready   = has_quorum and committed − applied ≤ 100 entries     /ready: 200 or 503
//! ```
//!
//! Ready allows a small apply lag: an entry is applied a moment after it commits, so a busy
//! node is always a few entries behind its commit index; what `/ready` keeps traffic from is
//! a node replaying its log after a restart or installing a snapshot, thousands behind.

use super::handle::NodeHandle;
use crate::raft;

/// The apply lag, in entries, below which a node with a quorum is ready: well above what a
/// busy node's pipeline holds (a few entries), well below a replay after a restart.
pub const READY_APPLY_LAG_ENTRIES_MAX: u64 = 100;

/// A node's health as a load balancer or an orchestrator asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `/health`: the node is backed by a quorum (a leader acknowledged by a majority of the
    /// voters within an election timeout, or a follower that knows a leader). Without one,
    /// every request it gets is answered `unavailable`.
    pub healthy: bool,
    /// `/ready`: healthy, and the node has applied what it knows committed (to within
    /// [`READY_APPLY_LAG_ENTRIES_MAX`] entries), so what it answers from its own state (a
    /// forwarded request's follow-ups, events) is current.
    pub ready: bool,
    /// One line for people: why, with the figures.
    pub detail: String,
}

impl NodeHandle {
    /// This node's health now.
    pub fn health(&self) -> Health {
        let quorum = self.raft.quorum();
        let status = self.raft.status();
        let (committed, applied) = (status.committed_index, status.applied_index);
        let caught_up =
            raft::metrics::entries_behind(committed, applied) <= READY_APPLY_LAG_ENTRIES_MAX;
        let role = if quorum.leading { "leader" } else { "follower" };
        let detail = if quorum.has_quorum && caught_up {
            format!("ok: {role} with a quorum, applied up to {}", index(applied))
        } else if quorum.has_quorum {
            format!(
                "catching up: {role} with a quorum, applied {} of {} committed",
                index(applied),
                index(committed)
            )
        } else if quorum.leading {
            format!(
                "no quorum: leader not acknowledged by a majority of its {} voters for {} ms \
                 (election timeout {} ms){}",
                quorum.voters,
                quorum.ack_age_ms.unwrap_or(0),
                quorum.timeout_ms,
                if quorum.unreachable.is_empty() {
                    String::new()
                } else {
                    format!("; unreachable: {}", quorum.unreachable.join(", "))
                }
            )
        } else {
            "no quorum: no leader known (an election is under way, or this node is cut off \
             from the majority)"
                .to_string()
        };
        Health {
            healthy: quorum.has_quorum,
            ready: quorum.has_quorum && caught_up,
            detail,
        }
    }
}

/// A log index for people: `-` for none.
fn index(index: Option<u64>) -> String {
    index.map_or_else(|| "-".to_string(), |index| index.to_string())
}
