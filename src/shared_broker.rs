//! What a member of a cluster publishes when the members share one external broker.
//!
//! Every member applies every entry, so every member's fan-out produces every notice
//! (`lease.expired`, `lock.lost`, ...) and every deferred answer. With an agent endpoint per
//! member each goes only to the agents connected to that member; on one shared broker every
//! member would reach every agent, so each would be told three times. Hence, on a shared
//! broker:
//!
//! 1. A request's answers, deferred ones included, come from the member that received it
//!    (the broker's shared subscription picked it): its wait is pending there, and the
//!    node answers it along its route. The answers the fan-out hands over because their
//!    request is not pending here (`Outbound::Respond`) are not published: the member that
//!    has it pending answers it, and if that member died the agent's retry of the same id
//!    reaches another member, which answers from the dedup memory or waits in the queue.
//! 2. Notices are published by the leader alone, as it applies their entries.
//! 3. A member that does not lead keeps the notices of the entries it applied during the last
//!    [`REPLAY_ELECTIONS`] election timeouts ([`RecentNotices`]); when it becomes the leader it
//!    publishes them. The old leader may have died between applying an entry and publishing
//!    its notice; the entries it committed last are the ones the new leader applied just
//!    before its election. So around a leader change a notice may reach its agent twice
//!    (at least once), which the SDK tolerates: a second `lease.expired` of an ended session
//!    or `*.lost` of an ended hold changes nothing.
//! 4. Disconnect notices are the broker's business (it holds the agents' connections).

use std::collections::VecDeque;
use std::time::Duration;

use hivekeeper_coordinator::node::{NodeHandle, Outbound};
use hivekeeper_coordinator::state_machine::Text;
use hivekeeper_mqtt::Transport;
use hivekeeper_protocol::Event;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::bridge;

/// How many of the longest election timeouts a follower keeps its notices for: a leader
/// change takes one election timeout to notice and usually one round to elect; this leaves
/// room for a split vote and for the old leader's publishing lagging behind its applies.
pub const REPLAY_ELECTIONS: u32 = 4;

/// Most notices a follower keeps; past it the oldest is dropped. Bounds its memory during a
/// storm of expiries (a notice is about a hundred bytes).
const RECENT_NOTICES_MAX: usize = 65_536;

/// The notices a member applied while it did not lead, kept for `window`.
#[derive(Debug)]
pub(crate) struct RecentNotices {
    window: Duration,
    notices: VecDeque<(Instant, Text, Event)>,
}

impl RecentNotices {
    pub(crate) fn new(window: Duration) -> RecentNotices {
        RecentNotices {
            window,
            notices: VecDeque::new(),
        }
    }

    /// Keeps the notice of an entry applied at `now`.
    pub(crate) fn keep(&mut self, now: Instant, agent: Text, event: Event) {
        self.forget_before(now);
        if self.notices.len() == RECENT_NOTICES_MAX {
            self.notices.pop_front();
        }
        self.notices.push_back((now, agent, event));
    }

    /// The notices kept within the window before `now`, in the order they were applied; none
    /// is kept afterwards.
    pub(crate) fn take(&mut self, now: Instant) -> Vec<(Text, Event)> {
        self.forget_before(now);
        self.notices
            .drain(..)
            .map(|(_, agent, event)| (agent, event))
            .collect()
    }

    fn forget_before(&mut self, now: Instant) {
        while let Some((at, ..)) = self.notices.front()
            && now.saturating_duration_since(*at) > self.window
        {
            self.notices.pop_front();
        }
    }
}

/// Publishes the node's outbound stream on a broker shared with the other members (the rules
/// of this module's doc). Runs until `outbound` ends (the node stopped) or the task is aborted.
pub async fn publish_outbound(
    transport: Transport,
    mut outbound: mpsc::UnboundedReceiver<Outbound>,
    node: NodeHandle,
    replay_window: Duration,
) {
    let mut recent = RecentNotices::new(replay_window);
    let mut leading = false;
    // Leadership changes wake the loop too, so that a new leader republishes what it kept
    // without waiting for its next notice. A closed watch (Raft stopped) keeps its last value.
    let mut leadership = node.leadership();
    let mut leadership_open = true;
    loop {
        let message = tokio::select! {
            message = outbound.recv() => match message {
                Some(message) => Some(message),
                None => return,
            },
            changed = leadership.changed(), if leadership_open => {
                leadership_open = changed.is_ok();
                None
            }
        };
        let now_leading = node.is_leader();
        if now_leading && !leading {
            let kept = recent.take(Instant::now());
            tracing::info!(
                notices = kept.len(),
                "leading: republishing the notices of the entries applied just before"
            );
            for (agent, event) in kept {
                bridge::publish_notice(&transport, &agent, &event);
            }
        }
        leading = now_leading;
        match message {
            Some(Outbound::Notify { agent, event }) if leading => {
                bridge::publish_notice(&transport, &agent, &event);
            }
            Some(Outbound::Notify { agent, event }) => recent.keep(Instant::now(), agent, event),
            Some(Outbound::Respond { .. } | Outbound::Disconnect { .. }) | None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expired(lease: &str) -> Event {
        Event::LeaseExpired {
            lease: lease.to_string(),
        }
    }

    #[test]
    fn only_the_notices_within_the_window_are_taken_and_only_once() {
        let start = Instant::now();
        let window = Duration::from_millis(1_200);
        let mut recent = RecentNotices::new(window);
        recent.keep(start, Text::from("a1"), expired("1"));
        recent.keep(
            start + Duration::from_millis(500),
            Text::from("a2"),
            expired("2"),
        );
        recent.keep(
            start + Duration::from_millis(1_000),
            Text::from("a1"),
            expired("3"),
        );
        let taken = recent.take(start + Duration::from_millis(1_600));
        assert_eq!(
            taken,
            vec![
                (Text::from("a2"), expired("2")),
                (Text::from("a1"), expired("3"))
            ],
            "the first is older than the window"
        );
        assert!(recent.take(start + Duration::from_millis(1_600)).is_empty());
    }

    #[test]
    fn the_oldest_notice_gives_way_past_the_bound() {
        let now = Instant::now();
        let mut recent = RecentNotices::new(Duration::from_secs(60));
        for n in 0..=RECENT_NOTICES_MAX {
            recent.keep(now, Text::from("a"), expired(&n.to_string()));
        }
        let taken = recent.take(now);
        assert_eq!(taken.len(), RECENT_NOTICES_MAX);
        assert_eq!(taken[0].1, expired("1"));
    }
}
