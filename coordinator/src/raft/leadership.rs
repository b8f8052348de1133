//! One leadership watch for the whole node: what openraft's metrics say about who leads, reduced
//! to the few facts the node layer acts on, and published only when one of them changes.
//!
//! ```text
//!  openraft metrics watch ─▶ follow(): Leadership { term, leader, ready, stopped }
//!                                      │ send_if_modified (only on a change)
//!                                      ▼
//!         lease keeper (ready?), limits configurer (took office?), failure report (stopped?)
//! ```
//!
//! Before this, four tasks watched openraft's metrics each on their own, and each woke for
//! every metrics change (every applied entry) to compute the same two booleans.

use tokio::sync::watch;

use super::types::{NodeId, RaftMetrics};

/// What this node knows about leadership, as one value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leadership {
    /// The current term.
    pub term: u64,
    /// The leader this node knows of in `term`.
    pub leader: Option<NodeId>,
    /// Whether this node is a *ready* leader: it leads and has applied an entry of its own
    /// term, so everything committed before its term is in its state machine. Only a ready
    /// leader keeps lease deadlines and configures limits.
    pub ready: bool,
    /// Set when Raft stopped on its own (a storage error, a panic in apply), with the reason;
    /// a shutdown we asked for is not reported here.
    pub stopped: Option<String>,
}

/// Whether node `me` is a ready leader according to `metrics` (see [`Leadership::ready`]).
pub(crate) fn is_ready_leader(metrics: &RaftMetrics, me: NodeId) -> bool {
    metrics.current_leader == Some(me)
        && metrics
            .last_applied
            .is_some_and(|id| id.leader_id.term == metrics.current_term)
}

/// The leadership that `metrics` describe for node `me`; a leader other than `me` is not known
/// while `searching` (this node campaigned and has not heard from it since, `election.rs`).
fn leadership_of(metrics: &RaftMetrics, me: NodeId, searching: bool) -> Leadership {
    let stopped = match &metrics.running_state {
        Ok(()) => None,
        Err(openraft::error::Fatal::Stopped) => None,
        Err(fatal) => Some(format!("Raft stopped: {fatal}")),
    };
    Leadership {
        term: metrics.current_term,
        leader: metrics
            .current_leader
            .filter(|leader| *leader == me || !searching),
        ready: is_ready_leader(metrics, me),
        stopped,
    }
}

/// Starts the task that follows `raft`'s metrics and returns the watch it publishes. The task
/// ends when Raft shuts down (its metrics watch closes); the last value stays readable.
pub(crate) fn follow(
    mut metrics: watch::Receiver<RaftMetrics>,
    mut searching: watch::Receiver<bool>,
    me: NodeId,
) -> watch::Receiver<Leadership> {
    let first = leadership_of(
        &metrics.borrow_and_update(),
        me,
        *searching.borrow_and_update(),
    );
    let (publish, leadership) = watch::channel(first);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { break },
                changed = searching.changed() => if changed.is_err() { break },
            }
            let now = leadership_of(
                &metrics.borrow_and_update(),
                me,
                *searching.borrow_and_update(),
            );
            publish.send_if_modified(|current| {
                let changed = *current != now;
                if changed {
                    *current = now;
                }
                changed
            });
        }
    });
    leadership
}
