//! Priority and preemption: a request of a higher priority does not wait behind lower-priority
//! holders; they get a vacate deadline instead.
//!
//! Every reservation has a priority, 0 (routine) to 3 (emergency). A waiter **preempts**
//! when everything that goes before it has a strictly lower priority: every held reservation
//! of another lease in its way (by name or by a shape, in space and time), every waiter of
//! another lease ahead of it in the queue order and in its way, and, through each such
//! waiter, the same again (its **chain**, `victims`). Each held reservation in the way of a
//! member of the chain gets a vacate deadline, the entry's time plus `reservation_vacate_ms`,
//! and its holder one `Event::Preempted` (the wire's `reservation.preempted`), however many
//! waiters preempt it. The waiters ahead keep their turn: when the holders release, or at the
//! deadline, when one `ExpireReservations` entry ends every reservation whose deadline has
//! passed (released with reason `preempted`: the holder is told `waypoint.lost`; a route ends
//! whole, being one intent with one token), the usual grant pass grants in queue order, with
//! new, higher tokens, so a late holder is fenced. A waiter ahead granted so is then a holder
//! in the preemptor's way, with a lower priority, and is preempted in its turn in the same
//! entry; the preemptor is granted when nothing is left in its way.
//!
//! **Queue order and starvation.** Waiters are ordered by `since_ms − head_start_ms`, then by
//! arrival, where the head start is the priority times `reservation_aging_ms` (`Pending::place`):
//! a higher priority goes first, equal priorities stay FIFO, and a waiter is overtaken only by
//! higher priorities that arrive less than `(3 − priority) × reservation_aging_ms` after it. It
//! is aging without a clock: a waiter's effective priority rises one level per
//! `reservation_aging_ms` waited, and since every waiter ages at the same rate the order never
//! changes while they wait. Aging orders the grants only; it never preempts (preemption
//! compares the priorities asked for). So a routine waiter that aging put ahead of a later
//! emergency is still granted first, but it does not shield the routine holders in the way
//! from the emergency (priority inheritance through the chain): without that, an emergency
//! could wait for as long as a routine holder kept its reservation.
//!
//! The chain is followed through at most [`PREEMPT_CHAIN_MAX`] waiters: a request with a
//! longer chain waits in the ordinary way, so that a long queue cannot make every entry's
//! preemption pass slow.
//!
//! **A preemptor that goes away.** When no waiter needs a deadline any more (the preemptor
//! timed out, its lease ended, a request of its priority or higher is now ahead of it or in
//! the way of its chain, or the reservation was amended out of its way), the deadline is
//! dropped, the holder keeps its reservation and is told once (`Event::PreemptionWithdrawn`,
//! the wire's `reservation.preemption_withdrawn`). In the deadline's own
//! `ExpireReservations` the windows due end first, so a preemptor whose window ends then
//! takes nothing (`Waypoints::vacate_due_needed`).
//!
//! Invariants (checked by [`Waypoints::check_preempt_invariants`], the waypoint invariant 9):
//! 1. A held reservation has a vacate deadline exactly when a preempting waiter needs it (it
//!    is in the way of that waiter's chain, with a lower priority).
//! 2. `vacate_ends` lists exactly the held reservations with a deadline, under it, and
//!    `prioritized` exactly the waiters above routine (checked with the index rebuild).
//!
//! A deadline is set to the entry's time plus a positive `reservation_vacate_ms`, so it is
//! never in the machine's past when set; one that has passed is due for the next
//! `ExpireReservations`, which the node proposes as it does at a window's end.

use crate::InvariantViolation;
use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::{Priority, ResourceKind};

use super::{Pending, Reservation, Waypoints};
use crate::ResourceKey;
use crate::{Ctx, Event, Text};

/// Most waiters ahead a preemption looks through (the chain, `Waypoints::victims`, without the
/// preemptor): a request with more waits in the ordinary way. Whether it preempts then
/// depends only on the set of waiters and holds, not on the order they are looked at in, and
/// the pass after each entry reads at most this many waiters' neighbourhoods per request
/// above routine.
pub const PREEMPT_CHAIN_MAX: usize = 64;

impl Waypoints {
    /// The held reservations the waiter at `seq` preempts: `Some(names)` when everything that
    /// goes before it has a lower priority than its own, `None` when it waits in the ordinary
    /// way. What goes before it is its **chain**: the held reservations of other leases in its
    /// way, the waiters of other leases ahead of it in its way, and, for each of those
    /// waiters, the same again. The waiters ahead keep their turn, but each of them lends
    /// the preemptor's priority to the holders in its own way (priority inheritance), so a
    /// routine waiter that aging put first cannot shield a routine holder from an emergency.
    /// A hold of the preemptor's own lease in the chain stops it too: it cannot be preempted,
    /// and nothing would be gained by ending the others first.
    fn victims(&self, seq: u64) -> Option<BTreeSet<Text>> {
        let preemptor = &self.waiters[&seq];
        let (priority, own_lease) = (preemptor.priority, preemptor.waiter.lease);
        let mut names = BTreeSet::new();
        let mut chain = vec![seq];
        let mut seen = BTreeSet::from([seq]);
        while let Some(at) = chain.pop() {
            let pending = &self.waiters[&at];
            let (shapes, lease) = (pending.shapes(), pending.waiter.lease);
            let name = Some(&*pending.name);
            let held_in_the_way = |(name, held): (&Text, &Reservation)| {
                if held.priority >= priority || held.hold.lease == own_lease {
                    return true;
                }
                names.insert(name.clone());
                false
            };
            if self.held_conflict(name, &shapes, lease, held_in_the_way) {
                return None;
            }
            let waiter_ahead = |ahead: u64, waiting: &Pending| {
                if waiting.priority >= priority {
                    return true;
                }
                if seen.insert(ahead) {
                    chain.push(ahead);
                }
                // Too long a chain: wait in the ordinary way (the bound keeps every entry's
                // preemption pass short however long the queues are).
                seen.len() > PREEMPT_CHAIN_MAX + 1
            };
            if self.waiters_ahead(name, &shapes, lease, pending.place(), waiter_ahead) {
                return None;
            }
        }
        Some(names)
    }

    /// Every held reservation some waiter preempts, with the highest priority preempting it.
    fn needed(&self) -> BTreeMap<Text, Priority> {
        let mut needed: BTreeMap<Text, Priority> = BTreeMap::new();
        for seq in &self.index.prioritized {
            let priority = self.waiters[seq].priority;
            for name in self.victims(*seq).into_iter().flatten() {
                let entry = needed.entry(name).or_insert(priority);
                *entry = (*entry).max(priority);
            }
        }
        needed
    }

    /// The preemption pass, at the end of every entry that changed the reservations: drops
    /// the deadlines no waiter needs any more (its holder told by one
    /// [`Event::PreemptionWithdrawn`], in deadline order), and gives every newly preempted reservation
    /// its deadline (`now + vacate_ms`) and its holder one [`Event::Preempted`], in name
    /// order. Costs nothing while no waiter is above routine and no deadline stands.
    pub(super) fn preempt(&mut self, ctx: &mut Ctx, vacate_ms: u64) {
        if self.index.prioritized.is_empty() && self.index.vacate_ends.is_empty() {
            return;
        }
        let needed = self.needed();
        let withdrawn: Vec<(u64, Text)> = self
            .index
            .vacate_ends
            .iter()
            .filter(|(_, name)| !needed.contains_key(name))
            .cloned()
            .collect();
        for (vacate_by_ms, name) in withdrawn {
            self.index.vacate_ends.remove(&(vacate_by_ms, name.clone()));
            let held = self
                .held
                .get_mut(&name)
                .expect("the deadline index lists held reservations");
            held.vacate_by_ms = None;
            ctx.events.push(Event::PreemptionWithdrawn {
                key: ResourceKey::new(ResourceKind::Waypoint, &name),
                agent: held.hold.agent.clone(),
                lease: held.hold.lease,
                token: held.hold.token,
                route: !held.volumes.is_empty(),
            });
        }
        let vacate_by_ms = ctx.now_ms.saturating_add(vacate_ms);
        for (name, priority) in needed {
            let held = self
                .held
                .get_mut(&name)
                .expect("a waiter's victims are held");
            if held.vacate_by_ms.is_some() {
                continue;
            }
            held.vacate_by_ms = Some(vacate_by_ms);
            self.index.vacate_ends.insert((vacate_by_ms, name.clone()));
            ctx.events.push(Event::Preempted {
                key: ResourceKey::new(ResourceKind::Waypoint, &name),
                agent: held.hold.agent.clone(),
                lease: held.hold.lease,
                token: held.hold.token,
                vacate_by_ms,
                priority,
                route: !held.volumes.is_empty(),
            });
        }
    }

    /// The held reservations whose vacate deadline is at or before `now_ms` and that a waiter
    /// still needs, in deadline order: what `ExpireReservations` ends once it has ended the
    /// windows due (which may have taken the preemptor away).
    pub(super) fn vacate_due_needed(&self, now_ms: u64) -> Vec<Text> {
        let mut due = self
            .index
            .vacate_ends
            .iter()
            .take_while(|(vacate_by_ms, _)| *vacate_by_ms <= now_ms)
            .peekable();
        if due.peek().is_none() {
            return Vec::new();
        }
        let needed = self.needed();
        due.filter(|(_, name)| needed.contains_key(name))
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// The earliest vacate deadline, if any reservation is preempted.
    pub(super) fn vacate_next_ms(&self) -> Option<u64> {
        self.index
            .vacate_ends
            .first()
            .map(|(vacate_by_ms, _)| *vacate_by_ms)
    }

    /// Invariant 1 (invariant 2 is the index rebuild's check).
    pub(super) fn check_preempt_invariants(&self) -> Result<(), InvariantViolation> {
        let needed = self.needed();
        for (name, held) in &self.held {
            match (held.vacate_by_ms, needed.get(name)) {
                (Some(vacate_by_ms), None) => {
                    return Err(violation!(
                        "waypoint {name:?} must vacate by {vacate_by_ms} but no waiter preempts it"
                    ));
                }
                (None, Some(priority)) => {
                    return Err(violation!(
                        "waypoint {name:?} is preempted by priority {priority} but has no deadline"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}
