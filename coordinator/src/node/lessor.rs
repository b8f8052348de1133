//! The lessor: lease deadlines on the leader, as plain data. Sans I/O: every method takes `now`
//! and returns what to do; the lease keeper actor (`lease_keeper.rs`) feeds it the clock, the
//! machine's answers and the leadership, and proposes the expiries it asks for.
//!
//! ```text
//!  took_office(now, leases)  ─▶ every lease: deadline = now + TTL (a failover never shortens one)
//!  granted(now, lease, ttl)  ─▶ deadline = now + TTL        (leader only)
//!  keepalive(now, lease)     ─▶ Live (ttl used so far) ─▶ the caller checks the machine,
//!                               then renew(now, lease, ttl) | Overdue | NotLeader
//!  overdue(now)              ─▶ leases past their deadline, not already being expired and
//!                               not backing off a refusal
//!  expiry_refused(now, leases) ─▶ the machine said "not yet" (its clock is behind the
//!                               leader's, `clock.rs`): retry each after a growing delay
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
//! 4. A lease whose expiry the machine refused (applied, but not due on the machine's clock)
//!    is not proposed again before its backoff ends: exponential from
//!    [`EXPIRY_RETRY_MS_MIN`] to [`EXPIRY_RETRY_MS_MAX`], so a clock disagreement costs a
//!    proposal every few seconds, not one every tick. Its deadline stays passed, so
//!    keepalives stay refused (invariant 3).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

use crate::state_machine::LeaseId;

/// The first wait before a refused expiry is proposed again: a few keeper ticks, since the
/// machine's clock usually trails the leader's by one entry's step at most.
pub(crate) const EXPIRY_RETRY_MS_MIN: u64 = 100;

/// The longest wait between proposals of a refused expiry: once the machine's clock reaches
/// the lease's end, the lease is reclaimed at most this late.
pub(crate) const EXPIRY_RETRY_MS_MAX: u64 = 5_000;

/// A refused expiry's backoff: when it may be proposed again, and the delays after that.
#[derive(Debug)]
struct Retry {
    /// Not proposed again before this.
    at: Instant,
    /// The next delays (exponential, capped, no jitter: one leader, no herd to spread).
    delays: ExponentialBackoff,
}

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
    /// Leases whose expiry the machine refused, backing off (invariant 4).
    refused: HashMap<LeaseId, Retry>,
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
            self.refused.clear();
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
        self.refused.clear();
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
        self.refused.remove(lease);
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

    /// Leases past their deadline at `now`, not already being expired and not backing off a
    /// refusal, sorted; they are marked as being expired (invariant 2). Empty unless ready.
    pub(crate) fn overdue(&mut self, now: Instant) -> Vec<LeaseId> {
        if !self.ready {
            return Vec::new();
        }
        let mut overdue: Vec<LeaseId> = self
            .deadlines
            .iter()
            .filter(|(lease, (deadline, _))| {
                *deadline <= now
                    && !self.expiring.contains(lease)
                    && self.refused.get(lease).is_none_or(|retry| retry.at <= now)
            })
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

    /// The machine applied an expiry of these leases at `now` and ended none of them (not due
    /// on its clock): each is proposed again only after its backoff (invariant 4), which grows
    /// with every refusal in a row. Leases that ended meanwhile, or that this node no longer
    /// keeps, are left alone. Returns how many were refused.
    pub(crate) fn expiry_refused(&mut self, now: Instant, leases: &[LeaseId]) -> usize {
        let mut refused = 0;
        for lease in leases {
            if !self.deadlines.contains_key(lease) {
                continue;
            }
            let retry = self.refused.entry(*lease).or_insert_with(|| Retry {
                at: now,
                delays: ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(EXPIRY_RETRY_MS_MIN))
                    .with_max_delay(Duration::from_millis(EXPIRY_RETRY_MS_MAX))
                    .without_max_times()
                    .build(),
            });
            let delay = retry
                .delays
                .next()
                .unwrap_or(Duration::from_millis(EXPIRY_RETRY_MS_MAX));
            retry.at = now + delay;
            refused += 1;
        }
        refused
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
    async fn a_refused_expiry_backs_off_exponentially_up_to_the_cap() {
        let mut lessor = Lessor::default();
        lessor.leadership(true, 1);
        let start = Instant::now();
        lessor.granted(start, lease(1), 1_000);
        lessor.granted(start, lease(2), 1_000);
        let mut now = start + ms(1_000);
        assert_eq!(lessor.overdue(now), vec![lease(1), lease(2)]);
        // The machine ended lease 2 and refused lease 1 (its clock is behind).
        lessor.expiry_done(&[lease(1), lease(2)]);
        lessor.ended(&lease(2));
        assert_eq!(lessor.expiry_refused(now, &[lease(1), lease(2)]), 1);
        // Proposed again after 100, 200, 400, ... ms, never more than 5 s apart; not before
        // (not at every 20 ms tick).
        let mut delays_ms = Vec::new();
        for _ in 0..9 {
            let at = lessor.refused[&lease(1)].at;
            delays_ms.push(at.duration_since(now).as_millis());
            // Still overdue for keepalives while it backs off, and not proposed.
            assert!(lessor.overdue(at - ms(1)).is_empty());
            assert!(matches!(
                lessor.keepalive(at - ms(1), Some(lease(1))),
                Keepalive::Overdue { .. }
            ));
            now = at;
            assert_eq!(lessor.overdue(now), vec![lease(1)]);
            lessor.expiry_done(&[lease(1)]);
            assert_eq!(lessor.expiry_refused(now, &[lease(1)]), 1);
        }
        assert_eq!(
            delays_ms,
            vec![100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000, 5_000]
        );
        // Ended at last: nothing left to retry. A new office starts afresh.
        lessor.ended(&lease(1));
        assert!(lessor.overdue(now + ms(60_000)).is_empty());
        assert!(lessor.refused.is_empty());
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
