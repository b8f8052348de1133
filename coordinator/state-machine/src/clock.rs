//! The replicated clock: how the stamps of entries become the machine's time.
//!
//! Time enters the machine only through [`LogMeta::now_ms`](crate::LogMeta::now_ms), the wall
//! clock of the leader that proposed the entry. Wall clocks jump (an NTP step, a VM resumed, an
//! operator's `date -s`) and members disagree (skew), so the machine does not take a stamp as
//! the time: it takes the *advance* of the stamp over the previous entry's stamp as how much
//! time passed, clamped to `[0, clock_step_ms_max]`.
//!
//! Why not the largest stamp so far: a leader whose clock ran an hour ahead would move the
//! machine's clock an hour ahead for good, and once the clock came back (or a member with a
//! correct clock led) no entry could move it until real time caught up, so no lease could
//! expire for an hour: reclaim would freeze. With steps, the same jump costs at most one step
//! ahead, and a clock that goes back holds the machine's clock still for one entry only: after
//! it, time passes again at the rate of the stamps.
//!
//! Why the step bound is `lease_ttl_ms_max` (a replicated limit, so every replica uses the
//! same): it is the smallest bound that never delays an honest expiry. A leader proposes an
//! expiry once a lease's TTL has run on its own monotonic clock since the lease's grant or last
//! keepalive, so between the granting entry and the expiry entry at least the TTL of stamp time
//! passed; if no step in between was clamped that is at least the TTL of machine time, and a
//! clamped step alone is `lease_ttl_ms_max`, at least any lease's TTL. A smaller bound would make
//! an idle cluster (keepalives are not log entries, so hours can pass between entries) lose the
//! idle time and extend every lease by it. What a forward jump can still do: move the machine's
//! clock up to `lease_ttl_ms_max` ahead once, which ends waits (`wait_ms`) early by as much.
//! Leases do not end early from it: the leader proposes an expiry only when its monotonic clock
//! says the TTL ran (`node/lessor.rs`), and the machine only checks that proposal.
//!
//! The decision is in the machine, not in the node, so it is deterministic: every replica
//! computes the same clock from the same log, and a new leader finds the clock in the state.
//!
//! Invariants (checked by [`StateMachine::check_clock_invariants`] after every apply in tests):
//! 1. The clock never goes backwards: each entry moves it forward by a step in
//!    `[0, clock_step_ms_max]`, where the step is the entry's stamp less the previous entry's
//!    stamp. The first entry of a fresh machine sets the clock to its stamp.
//! 2. A lease's grant time and a wait's queue time are the clock of the granting entry, so a
//!    lease granted after a jump expires once its TTL has passed on the clock: after the TTL
//!    of stamp time, whatever the stamps were before.
//! 3. `stamp_last_ms` is recorded only when it differs from the clock. While the stamps never
//!    go back nor jump by more than a step (every honest log) the clock is the last stamp, and
//!    the snapshot has no `stamp_last_ms`: its bytes are those of data format 1.

use super::StateMachine;
use crate::InvariantViolation;

impl StateMachine {
    /// The most one entry moves the machine's clock: `lease_ttl_ms_max` of the limits in force
    /// (see the module docs for why).
    pub fn clock_step_ms_max(&self) -> u64 {
        self.limits.lease_ttl_ms_max
    }

    /// The machine's clock for the next entry if it is stamped `stamp_ms`: the clock now plus
    /// the stamp's advance over the previous entry's stamp, clamped to
    /// `[0, clock_step_ms_max]` (invariant 1). The leader's lease keeper asks this to know
    /// whether a wait deadline would be due in an entry it stamps now.
    pub fn clock_at(&self, stamp_ms: u64) -> u64 {
        if self.index == 0 {
            return stamp_ms;
        }
        let stamp_last_ms = self.stamp_last_ms.unwrap_or(self.now_ms);
        let step_ms = stamp_ms
            .saturating_sub(stamp_last_ms)
            .min(self.clock_step_ms_max());
        self.now_ms.saturating_add(step_ms)
    }

    /// The previous entry's stamp (what the next entry's step is measured from).
    pub fn stamp_last_ms(&self) -> u64 {
        self.stamp_last_ms.unwrap_or(self.now_ms)
    }

    /// Moves the clock for an entry stamped `stamp_ms`, before the entry's index is recorded.
    pub(super) fn advance_clock(&mut self, stamp_ms: u64) {
        self.now_ms = self.clock_at(stamp_ms);
        self.stamp_last_ms = (stamp_ms != self.now_ms).then_some(stamp_ms);
    }

    /// Invariant 3 (1 and 2 are properties of [`Self::advance_clock`] and of the grants, checked
    /// by the tests that move the stamps).
    pub(super) fn check_clock_invariants(&self) -> Result<(), InvariantViolation> {
        match self.stamp_last_ms {
            Some(stamp_ms) if stamp_ms == self.now_ms => Err(violation!(
                "clock invariant 3: stamp_last_ms {stamp_ms} is recorded though it equals the clock"
            )),
            _ => Ok(()),
        }
    }
}
