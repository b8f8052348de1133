//! What this node does when its contact with the cluster changes: it answers what it holds
//! pending, and tells the operator. A WARN line when this leader loses its quorum and one when
//! it regains it, a WARN line when this member is cut off and one when it is back in touch,
//! and an INFO line for each membership change.
//!
//! ```text
//!  every 50 ms: RaftHandle::check_quorum (quorum.rs: a leader's quorum, rule 1; a member
//!               without a leader cut off, rule 4)
//!    ├─ Err(no quorum) ─▶ Waits::fail_all: every pending request answered `unavailable` now
//!    │                    (queued waits too), so its agent moves to another member instead
//!    │                    of waiting out a commit timeout it cannot meet
//!    ├─ Err(cut off)   ─▶ Waits::fail_queued: the queued waits, which would hear nothing
//!    │                    until the partition heals; requests on their way to the leader are
//!    │                    the forwarder's (a member only slow to hear an election, on a
//!    │                    loaded machine, must not drop them)
//!    │  and, on the change, WARN "quorum lost" / "cut off from the cluster"
//!    ├─ Ok after either         ─▶ WARN "quorum regained" / "back in touch with the cluster"
//!  every 250 ms: RaftHandle::members
//!    └─ voters or learners differ from last time ─▶ INFO "membership changed"
//! ```
//!
//! Requests that arrive while the node is in either state are refused at submit by the same
//! check (`handle.rs`); this task answers those that were already pending, and any that
//! slipped in between a check and the change. Each line is written once per change, never
//! repeated while the state lasts. A leader deposed while without quorum and then cut off is
//! one episode: nothing more is said until it is back in touch.

use std::sync::Arc;
use std::time::Duration;

use super::NodeError;
use super::waits::Waits;
use crate::raft::{CLUSTER_TARGET, MemberInfo, RaftError, RaftHandle};

/// How often the task looks at the quorum: a heartbeat interval (the default), so a lost
/// quorum is acted on within about the election timeout plus this.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Membership is looked at every this many quorum looks (250 ms).
const MEMBERSHIP_EVERY_LOOKS: u32 = 5;

/// This node's contact with the cluster, as one look finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Contact {
    /// A leader with its quorum, or a member that knows a leader or is in touch with a
    /// majority.
    #[default]
    Fine,
    /// A leader not acknowledged by a quorum within the election timeout.
    NoQuorum,
    /// A member that knows no leader and is out of touch with a majority.
    CutOff,
}

impl Contact {
    /// The contact `checked` (a `check_quorum` result) says.
    fn of(checked: &Result<(), RaftError>) -> Contact {
        match checked {
            Ok(()) => Contact::Fine,
            Err(RaftError::CutOff { .. }) => Contact::CutOff,
            Err(_) => Contact::NoQuorum,
        }
    }
}

/// What to tell the operator when the contact changes from `was` to `now`, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    QuorumLost,
    QuorumRegained,
    CutOff,
    BackInTouch,
}

/// The line for a change from `was` to `now` (rules in the module doc).
fn line_for(was: Contact, now: Contact) -> Option<Line> {
    match (was, now) {
        (Contact::Fine, Contact::NoQuorum) => Some(Line::QuorumLost),
        (Contact::Fine, Contact::CutOff) => Some(Line::CutOff),
        (Contact::NoQuorum, Contact::Fine) => Some(Line::QuorumRegained),
        (Contact::CutOff, Contact::Fine) => Some(Line::BackInTouch),
        // No change; or deposed while without quorum, then cut off (or the reverse): the
        // same episode.
        _ => None,
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

/// Writes `line`, with `checked`'s error for the details.
fn write(line: Line, checked: &Result<(), RaftError>) {
    match (line, checked) {
        (Line::QuorumLost, Err(RaftError::NoQuorum { ack_age_ms, .. })) => tracing::warn!(
            target: CLUSTER_TARGET,
            age_ms = ack_age_ms,
            "quorum lost: no majority of voters has answered this leader for {ack_age_ms} ms; \
             requests are answered `unavailable` (pending ones too) until one does again"
        ),
        (Line::QuorumRegained, _) => tracing::warn!(
            target: CLUSTER_TARGET,
            "quorum regained: a majority of voters answers this leader again"
        ),
        (
            Line::CutOff,
            Err(RaftError::CutOff {
                in_touch,
                voters,
                timeout_ms,
                ..
            }),
        ) => {
            tracing::warn!(
                target: CLUSTER_TARGET,
                in_touch,
                voters,
                "cut off from the cluster: no leader known, and only {in_touch} of {voters} \
                 voters in touch within {timeout_ms} ms; requests are answered `unavailable` \
                 (pending ones too) until a leader or a majority is heard again"
            )
        }
        (Line::BackInTouch, _) => tracing::warn!(
            target: CLUSTER_TARGET,
            "back in touch with the cluster"
        ),
        // A change to a bad state always comes with its error (`Contact::of`).
        (Line::QuorumLost | Line::CutOff, _) => {}
    }
}

/// Runs until aborted (the supervisor's task list).
pub(super) async fn run(raft: Arc<RaftHandle>, waits: Arc<Waits>) {
    let mut contact = Contact::Fine;
    let mut membership = describe(&raft.members());
    let mut looks = tokio::time::interval(LOOK_EVERY);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut count = 0u32;
    loop {
        looks.tick().await;
        let checked = raft.check_quorum();
        let now = Contact::of(&checked);
        if let Some(line) = line_for(contact, now) {
            write(line, &checked);
        }
        contact = now;
        if let Err(error) = checked {
            let answered = match now {
                Contact::CutOff => waits.fail_queued(&NodeError::from(error)),
                _ => waits.fail_all(&NodeError::from(error)),
            };
            if answered > 0 {
                tracing::debug!(answered, "pending requests answered unavailable");
            }
        }
        count = count.wrapping_add(1);
        if !count.is_multiple_of(MEMBERSHIP_EVERY_LOOKS) {
            continue;
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
    use super::{Contact, Line, line_for};

    #[test]
    fn each_change_of_contact_is_reported_once_and_an_episode_once() {
        use Contact::{CutOff, Fine, NoQuorum};
        assert_eq!(line_for(Fine, Fine), None, "a healthy node says nothing");
        assert_eq!(line_for(Fine, NoQuorum), Some(Line::QuorumLost));
        assert_eq!(line_for(NoQuorum, NoQuorum), None, "still lost: no repeat");
        assert_eq!(line_for(NoQuorum, Fine), Some(Line::QuorumRegained));
        assert_eq!(line_for(Fine, CutOff), Some(Line::CutOff));
        assert_eq!(line_for(CutOff, CutOff), None);
        assert_eq!(line_for(CutOff, Fine), Some(Line::BackInTouch));
        // A leader cut off loses its quorum, is deposed by the majority's election and
        // campaigns cut off: one episode, one line each way.
        assert_eq!(line_for(NoQuorum, CutOff), None);
        assert_eq!(line_for(CutOff, NoQuorum), None);
    }
}
