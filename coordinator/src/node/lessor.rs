//! The lessor: lease deadlines on the leader, as plain data. Sans I/O: every method takes `now`
//! and returns what to do; the lease keeper actor (`lease_keeper.rs`) feeds it the clock, the
//! machine's answers and the leadership, and proposes the expiries it asks for.
//!
//! ```text
//!  took_office(now, leases)  ─▶ every lease: deadline = now + TTL (a failover never shortens one)
//!  granted(now, lease, ttl)  ─▶ deadline = now + TTL        (leader only)
//!  keepalive(now, lease)     ─▶ Live (ttl used so far) ─▶ the caller checks the machine,
//!                               then renew(now, lease, ttl) | Overdue | NotLeader
//!  overdue(now)              ─▶ leases past their deadline, not already being expired
//!  expiry_done(leases), ended(lease), step_down()
//! ```
//!
//! Invariants:
//! 1. Deadlines exist only while this node is a ready leader (`ready`); stepping down clears
//!    them, taking office rebuilds them all from the machine.
//! 2. A lease in `expiring` is never proposed again until its proposal completed.
//! 3. A lease past its deadline is never renewed: the agent is told it expired (the expiry is
//!    proposed, or will be at the next tick), so it never believes it holds while its
//!    resources go to someone else.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::state_machine::LeaseId;

/// What a keepalive finds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Keepalive {
    /// This node does not keep deadlines (not a ready leader).
    NotLeader,
    /// The lease is past its deadline or being expired. `deadline` is the one it had, if any
    /// (for the lateness histogram).
    Overdue {
        /// Its deadline and TTL, when it still had one here.
        previous: Option<(Instant, u64)>,
    },
    /// Not overdue here: check the machine (the lease exists and is the agent's), then
    /// [`Lessor::renew`]. `previous` is its deadline and TTL here, if any.
    Live {
        /// Its deadline and TTL, when this node knows the lease.
        previous: Option<(Instant, u64)>,
    },
}

/// Lease deadlines on a ready leader.
#[derive(Debug, Default)]
pub(crate) struct Lessor {
    /// Deadline and TTL of every live lease, on this node's monotonic clock; empty unless
    /// `ready`.
    deadlines: HashMap<LeaseId, (Instant, u64)>,
    /// Leases in an expiry proposal that has not completed yet (not proposed twice).
    expiring: HashSet<LeaseId>,
    /// Whether this node is a leader that has applied an entry of its own term.
    ready: bool,
    /// The term it leads in.
    term: u64,
}

impl Lessor {
    /// Whether this node keeps deadlines now.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready
    }

    /// The term this node leads in (meaningful while ready).
    pub(crate) fn term(&self) -> u64 {
        self.term
    }

    /// Leadership changed. Returns true when this node just took office (a new term): the
    /// caller then rebuilds the deadlines with [`Lessor::took_office`].
    pub(crate) fn leadership(&mut self, ready: bool, term: u64) -> bool {
        let took_office = ready && (!self.ready || term != self.term);
        self.ready = ready;
        self.term = term;
        if !ready {
            self.deadlines.clear();
            self.expiring.clear();
        }
        took_office
    }

    /// Fresh deadlines for every lease (`(lease, ttl_ms)`): what a new leader owes its leases,
    /// and what a snapshot install resets.
    pub(crate) fn took_office(
        &mut self,
        now: Instant,
        leases: impl IntoIterator<Item = (LeaseId, u64)>,
    ) {
        self.deadlines = leases
            .into_iter()
            .map(|(lease, ttl_ms)| (lease, (now + Duration::from_millis(ttl_ms), ttl_ms)))
            .collect();
        self.expiring.clear();
    }

    /// A lease was granted (an applied entry).
    pub(crate) fn granted(&mut self, now: Instant, lease: LeaseId, ttl_ms: u64) {
        if self.ready {
            self.deadlines
                .insert(lease, (now + Duration::from_millis(ttl_ms), ttl_ms));
        }
    }

    /// A lease ended (an applied entry).
    pub(crate) fn ended(&mut self, lease: &LeaseId) {
        self.deadlines.remove(lease);
        self.expiring.remove(lease);
    }

    /// What a keepalive of `lease` finds at `now` (`None`: not a lease id at all).
    pub(crate) fn keepalive(&self, now: Instant, lease: Option<LeaseId>) -> Keepalive {
        if !self.ready {
            return Keepalive::NotLeader;
        }
        let previous = lease.and_then(|id| self.deadlines.get(&id).copied());
        let overdue = lease.is_some_and(|id| {
            self.expiring.contains(&id) || previous.is_some_and(|(deadline, _)| deadline <= now)
        });
        if overdue {
            Keepalive::Overdue { previous }
        } else {
            Keepalive::Live { previous }
        }
    }

    /// The machine confirmed the lease is live and the agent's: its deadline moves to
    /// `now + ttl_ms`.
    pub(crate) fn renew(&mut self, now: Instant, lease: LeaseId, ttl_ms: u64) {
        self.deadlines
            .insert(lease, (now + Duration::from_millis(ttl_ms), ttl_ms));
    }

    /// Leases past their deadline at `now` and not already being expired, sorted; they are
    /// marked as being expired (invariant 2). Empty unless ready.
    pub(crate) fn overdue(&mut self, now: Instant) -> Vec<LeaseId> {
        if !self.ready {
            return Vec::new();
        }
        let mut overdue: Vec<LeaseId> = self
            .deadlines
            .iter()
            .filter(|(lease, (deadline, _))| *deadline <= now && !self.expiring.contains(lease))
            .map(|(lease, _)| *lease)
            .collect();
        overdue.sort_unstable();
        self.expiring.extend(overdue.iter().copied());
        overdue
    }

    /// An expiry proposal completed: these leases may be proposed again if still overdue.
    pub(crate) fn expiry_done(&mut self, leases: &[LeaseId]) {
        for lease in leases {
            self.expiring.remove(lease);
        }
    }

    /// Time left before each lease's deadline at `now`, ms: `None` for a lease without a
    /// deadline here.
    pub(crate) fn remaining(&self, now: Instant, leases: &[LeaseId]) -> Vec<Option<u64>> {
        leases
            .iter()
            .map(|lease| {
                let (deadline, _) = self.deadlines.get(lease)?;
                let left = deadline.saturating_duration_since(now).as_millis();
                Some(u64::try_from(left).unwrap_or(u64::MAX))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u64) -> LeaseId {
        LeaseId(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_overdue_exactly_at_its_deadline_and_proposed_once() {
        let mut lessor = Lessor::default();
        assert!(lessor.leadership(true, 3));
        let start = Instant::now();
        lessor.granted(start, lease(1), 1_000);
        assert!(lessor.overdue(start + ms(999)).is_empty());
        assert_eq!(lessor.overdue(start + ms(1_000)), vec![lease(1)]);
        // Being expired: not proposed again, and a keepalive is told it is overdue.
        assert!(lessor.overdue(start + ms(1_100)).is_empty());
        assert_eq!(
            lessor.keepalive(start + ms(1_100), Some(lease(1))),
            Keepalive::Overdue {
                previous: Some((start + ms(1_000), 1_000))
            }
        );
        // The proposal failed (deposed mid-way, say): proposed again at the next look.
        lessor.expiry_done(&[lease(1)]);
        assert_eq!(lessor.overdue(start + ms(1_200)), vec![lease(1)]);
        lessor.ended(&lease(1));
        assert!(lessor.overdue(start + ms(5_000)).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_lease_gets_a_full_ttl_from_the_renewal() {
        let mut lessor = Lessor::default();
        lessor.leadership(true, 1);
        let start = Instant::now();
        lessor.granted(start, lease(1), 1_000);
        let at = start + ms(600);
        assert_eq!(
            lessor.keepalive(at, Some(lease(1))),
            Keepalive::Live {
                previous: Some((start + ms(1_000), 1_000))
            }
        );
        lessor.renew(at, lease(1), 1_000);
        assert!(lessor.overdue(start + ms(1_599)).is_empty());
        assert_eq!(
            lessor.remaining(start + ms(1_100), &[lease(1), lease(2)]),
            vec![Some(500), None]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_leader_gives_every_lease_a_fresh_deadline_and_a_follower_keeps_none() {
        let mut lessor = Lessor::default();
        let start = Instant::now();
        // Not leading: nothing is kept, keepalives are refused.
        lessor.granted(start, lease(1), 1_000);
        assert_eq!(
            lessor.keepalive(start, Some(lease(1))),
            Keepalive::NotLeader
        );
        assert!(lessor.overdue(start + ms(10_000)).is_empty());
        // Taking office at 5 s: the lease lives until 5 s + TTL, never less.
        let office = start + ms(5_000);
        assert!(lessor.leadership(true, 2));
        lessor.took_office(office, [(lease(1), 1_000), (lease(2), 2_000)]);
        assert!(lessor.overdue(office + ms(999)).is_empty());
        assert_eq!(lessor.overdue(office + ms(2_000)), vec![lease(1), lease(2)]);
        // The same term again is not a new office; another term is.
        assert!(!lessor.leadership(true, 2));
        assert!(lessor.leadership(true, 3));
        // Stepping down forgets everything.
        assert!(!lessor.leadership(false, 4));
        assert_eq!(lessor.remaining(office, &[lease(1)]), vec![None]);
        assert!(!lessor.is_ready());
    }
}
