//! Whether this node is backed by a quorum right now: the truth behind `status`'s `NO QUORUM`,
//! `hivekeeper_raft_has_quorum`, `/health`, and the leader's immediate `unavailable`.
//!
//! ```text
//!  openraft metrics: leader? last_quorum_acked, voters ───────┐
//!  when this node took office (LeaderSince)                   ├─▶ quorum_of() ─▶ Quorum
//!  PeerContact: time since each peer last answered ───────────┘
//! ```
//!
//! openraft never steps down on its own: a leader cut off from its followers goes on calling
//! itself leader, and refuses proposals only once its quorum lease (openraft's
//! `election_timeout_max`) has run out, as "forward to an unknown leader". Its metrics say when
//! a quorum last acknowledged it (`last_quorum_acked`). When that is longer ago than the
//! longest election timeout, the followers of a live quorum would already have elected someone
//! else: whatever this node decides now cannot commit here, so it says so at once, naming the
//! lost quorum.
//!
//! # Rules
//! 1. A leader has a quorum when a quorum acknowledged it within `election_timeout_ms_max`.
//!    Just elected, before the first acknowledgement, the votes that elected it count as one:
//!    it has a quorum for `election_timeout_ms_max` after taking office.
//! 2. A follower has a quorum when it knows a leader (it heard from it within its election
//!    timeout, or it would have campaigned and forgotten it). A candidate has none.
//! 3. A single-member cluster's leader is its own quorum, always.
//! 4. A member that does not lead and knows no leader is *cut off* when fewer voters than a
//!    majority (itself counted when it votes) have talked with it, either way, within the
//!    longest election timeout plus two heartbeat intervals (400 ms by default). A follower
//!    hears its leader every heartbeat; during an ordinary election the first member to
//!    campaign does so within the longest election timeout of the last heartbeat, and the
//!    others hear it or answer it at once; only a member that hears from too few of them is cut
//!    off, and its requests are answered `unavailable` at once rather than after a leader wait
//!    (so the clients of a partitioned member move to another within a second).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::types::{NodeId, RaftMetrics};

/// What this node knows about its quorum now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// Whether this node leads (in its own view).
    pub leading: bool,
    /// Whether it is backed by a quorum (see the rules in the module doc).
    pub has_quorum: bool,
    /// On the leader: ms since a quorum last acknowledged it (since it took office, before
    /// the first acknowledgement). `None` elsewhere.
    pub ack_age_ms: Option<u64>,
    /// The voters of the current membership.
    pub voters: usize,
    /// On the leader: the names of the other voters that have not answered within the
    /// election timeout, in name order. Empty elsewhere.
    pub unreachable: Vec<String>,
    /// The bound on `ack_age_ms`: the longest election timeout.
    pub timeout_ms: u64,
}

/// When this node last took office, by term. Read and updated whenever the quorum is looked
/// at: the Raft metrics exporter looks at every metrics change (at least every tick), so the
/// time is right to a tick.
#[derive(Debug, Default)]
pub(crate) struct LeaderSince {
    /// The term this node leads in and when it was first seen leading in it.
    since: Mutex<Option<(u64, Instant)>>,
}

impl LeaderSince {
    /// How long this node has led, per `metrics`; `None` when it does not lead.
    pub(crate) fn leading_for(&self, metrics: &RaftMetrics) -> Option<Duration> {
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        if metrics.current_leader != Some(metrics.id) {
            *since = None;
            return None;
        }
        let term = metrics.current_term;
        match *since {
            Some((led, at)) if led == term => Some(at.elapsed()),
            _ => {
                *since = Some((term, Instant::now()));
                Some(Duration::ZERO)
            }
        }
    }
}

/// The quorum `metrics` describe for their node, led for `leading_for`, with `timeout` as the
/// bound and `silent_for` telling how long each peer has not answered.
pub(crate) fn quorum_of(
    metrics: &RaftMetrics,
    leading_for: Option<Duration>,
    timeout: Duration,
    silent_for: impl Fn(NodeId) -> Option<Duration>,
) -> Quorum {
    let membership = metrics.membership_config.membership();
    let voters: Vec<NodeId> = membership.voter_ids().collect();
    let timeout_ms = millis(timeout);
    let Some(leading_for) = leading_for else {
        return Quorum {
            leading: false,
            has_quorum: metrics.current_leader.is_some(),
            ack_age_ms: None,
            voters: voters.len(),
            unreachable: Vec::new(),
            timeout_ms,
        };
    };
    let ack_age_ms = quorum_ack_age_ms(metrics).unwrap_or_else(|| millis(leading_for));
    let mut unreachable: Vec<String> = voters
        .iter()
        .filter(|id| **id != metrics.id)
        .filter(|id| silent_for(**id).unwrap_or(leading_for) > timeout)
        .map(|id| {
            membership
                .get_node(id)
                .map_or_else(|| id.to_string(), |member| member.name.clone())
        })
        .collect();
    unreachable.sort();
    Quorum {
        leading: true,
        has_quorum: ack_age_ms <= timeout_ms,
        ack_age_ms: Some(ack_age_ms),
        voters: voters.len(),
        unreachable,
        timeout_ms,
    }
}

/// Rule 4 for the member `metrics` describe, which knows a leader or not (`leader_known`:
/// with Pre-Vote a member searching for a leader keeps its term, and openraft's metrics the
/// old leader's name, so the leadership watch says): `Some((in_touch, voters))` when it is cut
/// off, with `out_of_touch_for` telling how long each peer has not talked with it and
/// `timeout` the bound. `None` when it knows a leader or is in touch with a majority.
pub(crate) fn cut_off_of(
    metrics: &RaftMetrics,
    leader_known: bool,
    timeout: Duration,
    out_of_touch_for: impl Fn(NodeId) -> Duration,
) -> Option<(usize, usize)> {
    if leader_known {
        return None;
    }
    let membership = metrics.membership_config.membership();
    let voters: Vec<NodeId> = membership.voter_ids().collect();
    let in_touch = voters
        .iter()
        .filter(|id| **id == metrics.id || out_of_touch_for(**id) <= timeout)
        .count();
    (in_touch <= voters.len() / 2 && !voters.is_empty()).then_some((in_touch, voters.len()))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// How long ago a quorum last acknowledged this node as leader, ms; `None` when it does not
/// lead or has no acknowledgement yet. A sole voter is its own quorum, acknowledged now (rule
/// 3): openraft 0.10 records no acknowledgement it never receives.
pub(crate) fn quorum_ack_age_ms(metrics: &RaftMetrics) -> Option<u64> {
    use openraft::Instant as _;
    if metrics.current_leader == Some(metrics.id)
        && metrics
            .membership_config
            .membership()
            .voter_ids()
            .eq([metrics.id])
    {
        return Some(0);
    }
    let acked = metrics.last_quorum_acked.as_ref()?;
    Some(u64::try_from(acked.elapsed().as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use openraft::metrics::SerdeInstant;
    use openraft::{Membership, StoredMembership, TokioInstant};

    use super::*;
    use crate::raft::types::Member;

    const TIMEOUT: Duration = Duration::from_millis(300);

    /// The metrics of node 1 in a cluster of voters `n1..=n{voters}`, led by `leader`, with a
    /// quorum acknowledgement `ack_ms` ago.
    fn metrics(voters: u64, leader: Option<NodeId>, ack_ms: Option<u64>) -> RaftMetrics {
        let nodes: BTreeMap<NodeId, Member> = (1..=voters)
            .map(|id| {
                let member = Member {
                    name: format!("n{id}"),
                    addr: format!("127.0.0.1:{}", 7400 + id),
                };
                (id, member)
            })
            .collect();
        let membership = Membership::new(vec![nodes.keys().copied().collect()], nodes)
            .expect("a valid membership");
        let mut metrics = RaftMetrics::new_initial(1);
        metrics.current_term = 3;
        metrics.current_leader = leader;
        metrics.last_quorum_acked = ack_ms.map(|ack_ms| {
            SerdeInstant::new(
                <TokioInstant as openraft::Instant>::now() - Duration::from_millis(ack_ms),
            )
        });
        metrics.membership_config = Arc::new(StoredMembership::new(None, membership));
        metrics
    }

    #[test]
    fn a_leader_acknowledged_within_the_election_timeout_has_a_quorum() {
        let quorum = quorum_of(
            &metrics(3, Some(1), Some(120)),
            Some(Duration::from_secs(9)),
            TIMEOUT,
            |_| Some(Duration::from_millis(40)),
        );
        assert_eq!(
            quorum,
            Quorum {
                leading: true,
                has_quorum: true,
                ack_age_ms: Some(120),
                voters: 3,
                unreachable: Vec::new(),
                timeout_ms: 300,
            }
        );
    }

    #[test]
    fn a_leader_whose_followers_went_silent_has_none_and_names_them() {
        let silent = |id: NodeId| Some(Duration::from_millis(if id == 2 { 2_000 } else { 40 }));
        let quorum = quorum_of(
            &metrics(3, Some(1), Some(2_000)),
            Some(Duration::from_secs(9)),
            TIMEOUT,
            silent,
        );
        assert!(quorum.leading);
        assert!(!quorum.has_quorum);
        assert_eq!(quorum.ack_age_ms, Some(2_000));
        assert_eq!(quorum.unreachable, vec!["n2".to_string()]);
        // Never heard from at all, after an election timeout in office: unreachable too.
        let never = quorum_of(
            &metrics(3, Some(1), Some(2_000)),
            Some(Duration::from_secs(9)),
            TIMEOUT,
            |_| None,
        );
        assert_eq!(never.unreachable, vec!["n2".to_string(), "n3".to_string()]);
    }

    #[test]
    fn a_new_leader_counts_its_election_until_the_first_acknowledgement() {
        let just_elected = quorum_of(
            &metrics(3, Some(1), None),
            Some(Duration::from_millis(50)),
            TIMEOUT,
            |_| None,
        );
        assert!(just_elected.has_quorum);
        assert_eq!(just_elected.ack_age_ms, Some(50));
        assert!(just_elected.unreachable.is_empty());
        let never_acknowledged = quorum_of(
            &metrics(3, Some(1), None),
            Some(Duration::from_millis(301)),
            TIMEOUT,
            |_| None,
        );
        assert!(!never_acknowledged.has_quorum);
    }

    #[test]
    fn a_follower_has_a_quorum_while_it_knows_a_leader() {
        let following = quorum_of(&metrics(3, Some(2), None), None, TIMEOUT, |_| None);
        assert!(!following.leading);
        assert!(following.has_quorum);
        assert_eq!(following.ack_age_ms, None);
        let candidate = quorum_of(&metrics(3, None, None), None, TIMEOUT, |_| None);
        assert!(!candidate.has_quorum);
    }

    #[test]
    fn a_single_member_is_its_own_quorum() {
        let alone = quorum_of(
            &metrics(1, Some(1), Some(0)),
            Some(Duration::from_secs(60)),
            TIMEOUT,
            |_| None,
        );
        assert!(alone.has_quorum);
        assert_eq!(alone.voters, 1);
        assert!(alone.unreachable.is_empty());
    }

    #[test]
    fn a_member_without_a_leader_is_cut_off_only_when_a_majority_is_out_of_touch() {
        let (recent, old) = (Duration::from_millis(40), Duration::from_millis(2_000));
        // A follower that knows its leader is never cut off, whatever it heard.
        assert_eq!(
            cut_off_of(&metrics(3, Some(2), None), true, TIMEOUT, |_| old),
            None
        );
        // An election: no leader, but the others campaign or answer its campaign.
        assert_eq!(
            cut_off_of(&metrics(3, None, None), false, TIMEOUT, |_| recent),
            None
        );
        // One of two peers heard: itself and it make two of three, a majority.
        let one = |id: NodeId| if id == 2 { recent } else { old };
        assert_eq!(
            cut_off_of(&metrics(3, None, None), false, TIMEOUT, one),
            None
        );
        // Neither peer: cut off, in touch with itself alone.
        assert_eq!(
            cut_off_of(&metrics(3, None, None), false, TIMEOUT, |_| old),
            Some((1, 3))
        );
        // Five voters, a minority of two talking to each other: cut off.
        assert_eq!(
            cut_off_of(&metrics(5, None, None), false, TIMEOUT, one),
            Some((2, 5))
        );
        // Exactly at the bound still counts as in touch.
        assert_eq!(
            cut_off_of(&metrics(3, None, None), false, TIMEOUT, |_| TIMEOUT),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn office_is_timed_from_the_first_look_in_each_term() {
        let since = LeaderSince::default();
        let mut leading = metrics(3, Some(1), None);
        assert_eq!(since.leading_for(&leading), Some(Duration::ZERO));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(
            since.leading_for(&leading),
            Some(Duration::from_millis(200))
        );
        leading.current_term = 4;
        assert_eq!(since.leading_for(&leading), Some(Duration::ZERO));
        assert_eq!(since.leading_for(&metrics(3, Some(2), None)), None);
    }
}
