//! What an operator should read about the cluster as a whole: a WARN line when this leader
//! loses its quorum and one when it regains it, and an INFO line for each membership change.
//!
//! ```text
//!  every 250 ms: RaftHandle::quorum_ack_age_ms (leader only), RaftHandle::members
//!    ├─ age > the longest election timeout, was fine ─▶ WARN "quorum lost"
//!    ├─ age back within it, was lost               ─▶ WARN "quorum regained"
//!    └─ voters or learners differ from last time   ─▶ INFO "membership changed"
//! ```
//!
//! Each line is written once per change, never repeated while the state lasts. A leader that
//! is deposed while without quorum says nothing more here: "no longer leading" (the
//! supervisor's line) tells it.

use std::sync::Arc;
use std::time::Duration;

use crate::raft::{CLUSTER_TARGET, MemberInfo, RaftHandle};

/// How often the task looks: a few heartbeats, well under an election timeout.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// A change of this leader's quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuorumChange {
    /// No quorum acknowledged this leader for longer than an election timeout.
    Lost { age_ms: u64 },
    /// A quorum acknowledged it again.
    Regained,
}

/// Whether this leader has a quorum, from one look to the next.
#[derive(Debug, Default)]
struct QuorumView {
    /// Whether the last look found the quorum lost.
    lost: bool,
}

impl QuorumView {
    /// The change, if any, that `age_ms` (`None`: not leading) makes, with `limit_ms` the
    /// longest election timeout.
    fn look(&mut self, age_ms: Option<u64>, limit_ms: u64) -> Option<QuorumChange> {
        let Some(age_ms) = age_ms else {
            self.lost = false;
            return None;
        };
        let lost = age_ms > limit_ms;
        if lost == self.lost {
            return None;
        }
        self.lost = lost;
        Some(if lost {
            QuorumChange::Lost { age_ms }
        } else {
            QuorumChange::Regained
        })
    }
}

/// The members as one line: `n1,n2,n3` voters, `n4` learners.
fn describe(members: &[MemberInfo]) -> (String, String) {
    let names = |voter: bool| {
        let mut names: Vec<&str> = members
            .iter()
            .filter(|info| info.voter == voter)
            .map(|info| info.member.name.as_str())
            .collect();
        names.sort_unstable();
        names.join(",")
    };
    (names(true), names(false))
}

/// Runs until aborted (the supervisor's task list).
pub(super) async fn run(raft: Arc<RaftHandle>) {
    let limit_ms = raft.election_timeout_ms_max();
    let mut quorum = QuorumView::default();
    let mut membership = describe(&raft.members());
    let mut looks = tokio::time::interval(LOOK_EVERY);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        looks.tick().await;
        match quorum.look(raft.quorum_ack_age_ms(), limit_ms) {
            Some(QuorumChange::Lost { age_ms }) => tracing::warn!(
                target: CLUSTER_TARGET,
                age_ms,
                "quorum lost: no majority of voters has answered this leader for {age_ms} ms; \
                 writes and linearizable reads wait, then answer `unavailable`"
            ),
            Some(QuorumChange::Regained) => {
                tracing::warn!(
                    target: CLUSTER_TARGET,
                    "quorum regained: a majority of voters answers this leader again"
                )
            }
            None => {}
        }
        let now = describe(&raft.members());
        if now != membership {
            let (voters, learners) = &now;
            tracing::info!(target: CLUSTER_TARGET, %voters, %learners, "membership changed");
            membership = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{QuorumChange, QuorumView};

    #[test]
    fn quorum_loss_and_return_are_each_reported_once() {
        let mut view = QuorumView::default();
        let limit = 300;
        assert_eq!(view.look(Some(50), limit), None, "a healthy leader");
        assert_eq!(
            view.look(Some(301), limit),
            Some(QuorumChange::Lost { age_ms: 301 })
        );
        assert_eq!(view.look(Some(5_000), limit), None, "still lost: no repeat");
        assert_eq!(view.look(Some(20), limit), Some(QuorumChange::Regained));
        assert_eq!(view.look(Some(20), limit), None);
        // Deposed while lost: nothing here, and the next term starts afresh.
        assert_eq!(
            view.look(Some(900), limit),
            Some(QuorumChange::Lost { age_ms: 900 })
        );
        assert_eq!(view.look(None, limit), None);
        assert_eq!(view.look(Some(10), limit), None);
    }
}
