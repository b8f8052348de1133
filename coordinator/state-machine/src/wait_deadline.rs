//! Wait deadlines: a queued request's `wait_ms` kept in the replicated state, and its end.
//!
//! An acquire or reserve that queues with `wait_ms: n` gets the deadline `now_ms + n` on the
//! machine's clock, in the pending-wait index (`grant::Wait::deadline_ms`), so every replica
//! knows it and a new leader finds it in the state: nothing about a wait is lost at failover.
//! As for leases (etcd's lessor), only the leader *finds* waits past their deadline, from
//! [`StateMachine::wait_deadline_next_ms`], and *proposes* their end as
//! [`Command::ExpireWaits`] carrying its term; this file decides what the entry does. The
//! command names no waiter: the entry ends exactly the waits due on the machine's clock, so
//! what it does is a function of the log alone, whatever the proposer believed.
//!
//! Invariants (checked by [`WaitDeadlines::check_invariants`] after every apply in tests):
//! 1. `WaitDeadlines` indexes exactly the pending waits that have a deadline, each once, under
//!    the deadline its `Wait` records: no deadline without a queued waiter, none twice.
//! 2. A wait never ends by time before its deadline on the machine's clock: an
//!    `ExpireWaits` ends only waits with `deadline_ms <= now_ms` on the machine's clock
//!    (`clock.rs`). A leader whose clock lags proposes late (the wait lasts longer); an entry
//!    applied early — a forged or confused one — leaves every wait whose deadline is still
//!    ahead alone. A leader clock that jumps ahead moves the machine's clock by at most one
//!    step (`clock_step_ms_max`), so waits queued before the jump may end early by that much,
//!    once (DESIGN.md §2, time comes from the log).
//! 3. A deposed leader cannot end waits: an `ExpireWaits` whose term is older than a term
//!    already applied does nothing (the lease expiry's stale-term rule).
//! 4. A grant is never taken back by time: a granted request left the pending-wait index (and
//!    with it this one) in the entry that granted it, so a later expiry cannot find it.
//! 5. No grant goes to a wait that ends in the same entry: every due wait is removed first,
//!    then the touched resources grant what became grantable (as `lease.rs` does for leases).
//!
//! The legacy [`Command::CancelWait`] (one named waiter, no term: what nodes proposed before
//! deadlines were replicated) is still applied exactly as it was, so old logs replay the same;
//! no node proposes it any more.

use crate::InvariantViolation;
use std::collections::BTreeSet;

use hivekeeper_protocol::ErrorCode;

use super::{Ctx, NameMap, Reply, StateMachine, Text};
use crate::ResourceKey;
use crate::waiting::PendingWaits;

/// What a timed-out waiter is told (also by the legacy `CancelWait`: old logs replay the same).
const WAIT_ELAPSED: &str = "wait_ms elapsed before the resource was granted";

/// The pending waits that have a deadline, by `(deadline_ms, agent, request id)`: the earliest
/// is the first, and the due ones are a prefix. A derived index (invariant 1), never
/// serialized: [`WaitDeadlines::rebuild`] makes it from the pending-wait index on restore.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitDeadlines(BTreeSet<(u64, Text, String)>);

impl WaitDeadlines {
    /// Records the deadline of `agent`'s request `request_id`.
    pub fn insert(&mut self, deadline_ms: u64, agent: &Text, request_id: &str) {
        self.0
            .insert((deadline_ms, agent.clone(), request_id.to_string()));
    }

    /// Forgets the deadline of `agent`'s request `request_id` (it was granted, ended or
    /// expired).
    pub fn remove(&mut self, deadline_ms: u64, agent: &Text, request_id: &str) {
        self.0
            .remove(&(deadline_ms, agent.clone(), request_id.to_string()));
    }

    /// The earliest deadline, if any wait has one.
    pub fn next_ms(&self) -> Option<u64> {
        self.0.first().map(|(deadline_ms, _, _)| *deadline_ms)
    }

    /// The waits due at `now_ms` (deadline reached), earliest first.
    fn due(&self, now_ms: u64) -> Vec<(Text, String)> {
        self.0
            .iter()
            .take_while(|(deadline_ms, _, _)| *deadline_ms <= now_ms)
            .map(|(_, agent, request_id)| (agent.clone(), request_id.clone()))
            .collect()
    }

    /// The index of `waiting`'s deadlines.
    pub fn rebuild(waiting: &NameMap<PendingWaits>) -> WaitDeadlines {
        let mut deadlines = WaitDeadlines::default();
        for (agent, waits) in waiting {
            for (request_id, wait) in waits {
                if let Some(deadline_ms) = wait.deadline_ms {
                    deadlines.insert(deadline_ms, agent, request_id);
                }
            }
        }
        deadlines
    }

    /// Invariant 1 against the pending-wait index.
    pub fn check_invariants(
        &self,
        waiting: &NameMap<PendingWaits>,
    ) -> Result<(), InvariantViolation> {
        let expected = WaitDeadlines::rebuild(waiting);
        if *self == expected {
            return Ok(());
        }
        let stray = self.0.difference(&expected.0).next();
        let missing = expected.0.difference(&self.0).next();
        Err(violation!(
            "wait deadline index disagrees with the pending waits: indexed but not waiting \
             {stray:?}, waiting but not indexed {missing:?}"
        ))
    }
}

impl StateMachine {
    /// The earliest wait deadline in the state, ms on the machine's clock: the leader proposes
    /// [`super::Command::ExpireWaits`] once its clock reaches it. `None` when no queued
    /// request has a `wait_ms`.
    pub fn wait_deadline_next_ms(&self) -> Option<u64> {
        self.core.deadlines.next_ms()
    }

    /// Whether an `ExpireWaits` stamped `stamp_ms` (the leader's clock now) is worth
    /// proposing while a wait has a deadline: it would end a wait; or its step would be a full
    /// `clock_step_ms_max` towards the deadline (a wait longer than a step with no other entry
    /// for as long: the clock moves one step per entry at most, so the keeper's proposals carry
    /// it there step by step); or the stamp is behind the previous entry's (the leader's clock
    /// went back): that entry moves the clock by nothing, but the next steps are measured from
    /// it, so without it the clock would not move towards the deadline until the leader's
    /// clock caught up with the old stamp.
    pub fn wait_expiry_due(&self, stamp_ms: u64) -> bool {
        self.expiry_due(self.wait_deadline_next_ms(), stamp_ms)
    }

    /// Whether an expiry entry stamped `stamp_ms` is worth proposing for the earliest
    /// `deadline_ms` of its kind (waits, reservation windows): see [`Self::wait_expiry_due`].
    pub(crate) fn expiry_due(&self, deadline_ms: Option<u64>, stamp_ms: u64) -> bool {
        let Some(deadline_ms) = deadline_ms else {
            return false;
        };
        let clock_ms = self.clock_at(stamp_ms);
        deadline_ms <= clock_ms
            || clock_ms.saturating_sub(self.now_ms()) >= self.clock_step_ms_max()
            || stamp_ms < self.stamp_last_ms()
    }

    /// `ExpireWaits { term }`: ends every wait whose deadline has passed on the machine's
    /// clock, answering each `timeout` (invariants 2 to 5).
    pub(super) fn expire_waits(&mut self, ctx: &mut Ctx, term: u64) -> Reply {
        if term < self.term_max {
            return Reply::WaitsExpired { count: 0 };
        }
        let due = self.core.deadlines.due(ctx.now_ms);
        let mut touched = BTreeSet::new();
        for (agent, request_id) in &due {
            let keys = self
                .time_out(ctx, agent, request_id)
                .expect("invariant 1: an indexed deadline belongs to a pending wait");
            touched.extend(keys);
        }
        let touched: Vec<ResourceKey> = touched.into_iter().collect();
        self.settle(ctx, &touched);
        Reply::WaitsExpired {
            count: u64::try_from(due.len()).expect("a count of waiters fits in u64"),
        }
    }

    /// The legacy `CancelWait`: cancels one named waiter, whatever its deadline. If the grant
    /// came first there is nothing to do: a grant is never taken back by a timeout.
    pub(super) fn cancel_wait(&mut self, ctx: &mut Ctx, agent: &str, request_id: &str) -> Reply {
        let Some(keys) = self.time_out(ctx, agent, request_id) else {
            return Reply::Cancelled { cancelled: false };
        };
        self.settle(ctx, &keys);
        Reply::Cancelled { cancelled: true }
    }

    /// Takes `agent`'s waiting request `request_id` out of its queue (every queue of a
    /// multi-lock) and answers it `timeout`; the resources it waited on, in (kind, name)
    /// order, for the caller to settle. `None` when it does not wait.
    fn time_out(
        &mut self,
        ctx: &mut Ctx,
        agent: &str,
        request_id: &str,
    ) -> Option<Vec<ResourceKey>> {
        let key = self.core.pending_wait(agent, request_id)?.key.clone();
        let (code, message) = (ErrorCode::Timeout, WAIT_ELAPSED);
        Some(self.remove_waiter(ctx, &key, agent, request_id, code, message))
    }
}
