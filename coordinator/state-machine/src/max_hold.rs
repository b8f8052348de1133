//! Max-hold: a lock or semaphore hold that ends at its grant time plus the acquire's
//! `max_hold_ms`, on the machine's clock, whether or not its lease lives.
//!
//! A lease bounds how long a *dead* holder keeps a resource; `max_hold_ms` bounds how long a
//! *live* one does (a stuck job that keeps its session alive, a client that forgets to
//! release). The acquire gives the bound; the grant turns it into a deadline on the hold
//! itself (`Hold::max_hold_deadline_ms`, in the snapshot only when set), so it does not matter
//! whether the request was granted at once or from the queue (a queued request keeps its
//! `max_hold_ms` in the pending-wait index until then: `waiting.rs`). When the deadline passes
//! the leader proposes `Command::ExpireHoldTimes` (`hold_time.rs`); that entry ends the hold
//! (`Event::Released` with [`ReleaseReason::MaxHold`](crate::ReleaseReason::MaxHold), which the
//! node tells the holder as `lock.lost` or `sem.lost` with `reason: "max_hold"`) and grants
//! the next waiters in the same entry. A max-hold end is not a lease end, so no lock-delay
//! follows it.
//!
//! Every grant of a lock or a semaphore takes the bound through
//! [`Core::grant_claim`](crate::grant::Core::grant_claim) (or
//! [`Core::grant_waiter`](crate::grant::Core::grant_waiter) for a queued request). A
//! multi-lock's grant, [`Core::grant_claim_all`](crate::grant::Core::grant_claim_all) or
//! [`Core::grant_waiter_all`](crate::grant::Core::grant_waiter_all), gives every one of its
//! locks the same hold and so the same deadline: its holds end together, each indexed here
//! under its own lock. Each shared holder's hold has its own deadline, and a downgrade keeps
//! the hold, so its deadline too (`lock/`).
//!
//! Invariants (checked by [`HoldEnds::check_invariants`] after every apply in tests):
//! 1. `HoldEnds` indexes exactly the holds that have a max-hold deadline, each once, under that
//!    deadline (the grant adds it, `Core::release` removes it, whatever ends the hold).
//! 2. A hold never ends by its max-hold before its deadline on the machine's clock: an
//!    `ExpireHoldTimes` ends only holds with `deadline <= now`, and one of a stale term ends
//!    nothing, so a hold ends once even if two expiry entries arrive.
//! 3. A `max_hold_ms` is at least 1 (the wire's check) and at most the longest lease TTL of
//!    the limits in force when it was asked for ([`StateMachine::checked_max_hold`]).

use std::collections::BTreeSet;

use hivekeeper_protocol::{ErrorCode, Op};

use crate::{InvariantViolation, LeaseId, Reply, ResourceKey, StateMachine};

/// The holds that have a max-hold deadline, by `(deadline_ms, resource, lease)`: the earliest
/// is the first, and the due ones are a prefix. A derived index (invariant 1), never
/// serialized: [`HoldEnds::rebuild`] makes it from the holds on restore.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HoldEnds(BTreeSet<(u64, ResourceKey, LeaseId)>);

impl HoldEnds {
    /// Records that `lease`'s hold on `key` ends at `deadline_ms`.
    pub fn insert(&mut self, deadline_ms: u64, key: &ResourceKey, lease: LeaseId) {
        self.0.insert((deadline_ms, key.clone(), lease));
    }

    /// Forgets the deadline of `lease`'s hold on `key` (the hold ended).
    pub fn remove(&mut self, deadline_ms: u64, key: &ResourceKey, lease: LeaseId) {
        self.0.remove(&(deadline_ms, key.clone(), lease));
    }

    /// The earliest deadline, if any hold has one.
    pub fn next_ms(&self) -> Option<u64> {
        self.0.first().map(|(deadline_ms, _, _)| *deadline_ms)
    }

    /// The holds due at `now_ms` (deadline reached), earliest first.
    pub fn due(&self, now_ms: u64) -> Vec<(ResourceKey, LeaseId)> {
        self.0
            .iter()
            .take_while(|(deadline_ms, _, _)| *deadline_ms <= now_ms)
            .map(|(_, key, lease)| (key.clone(), *lease))
            .collect()
    }

    /// The index of the deadlines the resources report (`Occupancy::hold_ends`).
    pub fn rebuild(reported: &[(u64, ResourceKey, LeaseId)]) -> HoldEnds {
        HoldEnds(reported.iter().cloned().collect())
    }

    /// Invariant 1 against the deadlines the resources report.
    pub fn check_invariants(
        &self,
        reported: &[(u64, ResourceKey, LeaseId)],
    ) -> Result<(), InvariantViolation> {
        let expected = HoldEnds::rebuild(reported);
        if expected.0.len() != reported.len() {
            return Err(violation!("a hold's max-hold deadline is reported twice"));
        }
        if *self == expected {
            return Ok(());
        }
        let stray = self.0.difference(&expected.0).next();
        let missing = expected.0.difference(&self.0).next();
        Err(violation!(
            "max-hold index disagrees with the holds: indexed but not held {stray:?}, held but \
             not indexed {missing:?}"
        ))
    }
}

impl StateMachine {
    /// An op's `max_hold_ms`, if it has one, checked against invariant 3: at most the longest
    /// lease TTL of the limits in force (`bad_request` otherwise, naming the bound). A hold is
    /// meant to end no later than a lease would have to be renewed at the longest; the wire
    /// checked it is positive.
    pub(crate) fn checked_max_hold(&self, op: &Op) -> Result<Option<u64>, Reply> {
        let max_ms = self.limits.lease_ttl_ms_max;
        match op.max_hold_ms() {
            Some(max_hold_ms) if max_hold_ms > max_ms => Err(Reply::refused(
                ErrorCode::BadRequest,
                format!(
                    "{}: `max_hold_ms` is {max_hold_ms}, it must be in [1, {max_ms}] \
                     (lease_ttl_ms_max)",
                    op.name()
                ),
            )),
            max_hold_ms => Ok(max_hold_ms),
        }
    }
}
