//! Hold-time deadlines: the ends of max-holds (`max_hold.rs`) and of lock-delays
//! (`lock_delay.rs`), and the one command that applies them.
//!
//! Both are replicated deadlines on the machine's clock, watched as wait deadlines are
//! (`wait_deadline.rs`): at each tick the leader's keeper asks [`StateMachine::hold_time_expiry_due`]
//! with the stamp it would put on an entry now and, once the earliest of the two kinds is due,
//! proposes `Command::ExpireHoldTimes { term }` (one in flight at a time). The command names
//! nothing: the entry ends exactly what is due on its own clock, so what it does is a function
//! of the log alone, and a new leader finds every deadline in the state it took over.
//!
//! Invariants (besides those of the two concepts):
//! 1. An `ExpireHoldTimes` of a term older than one already applied does nothing, and one that
//!    finds nothing due does nothing: a hold or a delay ends once, however many entries arrive.
//! 2. Every hold past its max-hold ends before any grant in the entry, then the resources they
//!    freed and the locks whose delay ended settle together, in (kind, name) order: the next
//!    waiters are granted in this entry, in their queues' order, and nothing is granted to a
//!    hold ending in it.

use std::collections::BTreeSet;

use crate::{Ctx, ReleaseReason, Reply, ResourceKey, StateMachine};

impl StateMachine {
    /// The earliest hold-time deadline in the state, ms on the machine's clock: a max-hold's or
    /// a lock-delay's end. `None` when there is neither.
    pub fn hold_time_next_ms(&self) -> Option<u64> {
        let max_hold = self.core.hold_ends.next_ms();
        let lock_delay = self.lock_delays.next_ms();
        max_hold.into_iter().chain(lock_delay).min()
    }

    /// Whether an `ExpireHoldTimes` stamped `stamp_ms` is worth proposing: as for
    /// [`StateMachine::wait_expiry_due`], with the earliest hold-time deadline.
    pub fn hold_time_expiry_due(&self, stamp_ms: u64) -> bool {
        self.expiry_due(self.hold_time_next_ms(), stamp_ms)
    }

    /// `ExpireHoldTimes { term }`: ends every hold whose max-hold deadline has passed on the
    /// machine's clock (released, reason `max_hold`) and every lock-delay that has passed, then
    /// grants what became grantable, all in this entry (invariants 1 and 2).
    pub(crate) fn expire_hold_times(&mut self, ctx: &mut Ctx, term: u64) -> Reply {
        if term < self.term_max {
            return Reply::HoldTimesEnded {
                max_holds: 0,
                lock_delays: 0,
            };
        }
        let due = self.core.hold_ends.due(ctx.now_ms);
        let mut touched = BTreeSet::new();
        for (key, lease) in &due {
            let (resource, core, _) = self.resource_mut(key.kind);
            let hold = resource
                .take_hold(&key.name, *lease)
                .expect("max-hold invariant 1: an indexed deadline belongs to a hold");
            core.release(ctx, key, &hold, ReleaseReason::MaxHold);
            touched.insert(key.clone());
        }
        let delays_ended = self.lock_delays.end_due(ctx.now_ms, &mut self.locks);
        let lock_delays = delays_ended.len();
        touched.extend(delays_ended);
        let touched: Vec<ResourceKey> = touched.into_iter().collect();
        self.settle(ctx, &touched);
        let count = |n: usize| u64::try_from(n).expect("a count of holds fits in u64");
        Reply::HoldTimesEnded {
            max_holds: count(due.len()),
            lock_delays: count(lock_delays),
        }
    }
}
