//! Waypoint reservations: a named point and, with geometry, a vertical cylinder around it.
//!
//! Two reservations conflict if they share the name, or if both have a cylinder, the
//! cylinders conflict (`geo::areas_conflict`: axes closer than the sum of the radii and
//! altitude bands overlapping) and their time windows overlap (`window.rs`: half-open
//! `[start_ms, end_ms)`, absent meaning all time). A name is one reservation whatever its
//! window: successive slots of one pad take distinct names. A lease never conflicts with itself: a drone may hold its pad
//! and reserve the next waypoint beside it. A request is granted when nothing held conflicts
//! with it and no earlier conflicting request still waits (FIFO among conflicting requests;
//! independent requests do not block each other).
//!
//! After holds or waiters go away, only waiters that conflicted with something removed can have
//! become grantable (anything else is still blocked by what blocked it before), so the grant
//! pass looks at those candidates alone, in queue order. Granting one adds a hold, which can
//! only block, so one pass suffices. The queue order is by priority with aging, FIFO among
//! equals (invariant 8); a request that only lower priorities stand before (holders, and
//! waiters ahead with what stands before them) preempts the holders rather than waiting
//! behind them (`preempt.rs`, which runs after the grant pass).
//!
//! Invariants:
//! 1. No two held reservations of different leases conflict.
//! 2. After every entry, every waiter is blocked by a held reservation or an earlier waiter of
//!    another lease: whatever could be granted was granted.
//! 3. The spatial index and the by-name waiter index are exactly what the reservations and
//!    waiters imply (they are derived, rebuilt after a restore).
//! 4. A lease never waits for a name it holds.
//! 5. Every cylinder, held or waiting, is within the wire's ranges (`Area::from_fields`):
//!    latitude, longitude, radius and altitude band. Checked first, so a snapshot with a
//!    cylinder out of range (a corrupt one) is refused before the spatial index is searched
//!    with it (its search window assumes a longitude in [-180, 180]: found by fuzzing).
//! 6. Every window is non-empty (`end_ms > start_ms`), and the end index lists exactly the
//!    held and waiting reservations that have an end (part of invariant 3's rebuild check).
//! 7. A route (`route.rs`) has volumes and no cylinder or window of its own; invariants 1, 2,
//!    5 and 6 hold for each of its volumes (its shapes), and the spatial index files each
//!    volume under (name or seq, volume number).
//! 8. Waiters are in queue order (`Pending::place`): by `since_ms − head_start_ms`, then by
//!    arrival, where `head_start_ms` is its priority times `reservation_aging_ms` when it was
//!    queued (0, and only 0, for routine). "Earlier" in invariant 2 means ahead in this order.
//! 9. Preemption (`preempt.rs`): a held reservation has a vacate deadline exactly when a
//!    preempting waiter needs it, and the indexes list exactly the deadlines and the
//!    waiters above routine (part of invariant 3's rebuild check).
//! 10. The spatial index is also a time index (`grid.rs`): each cell keeps
//!     its shapes in (open, window start, key) order and bounds its ended windows' length
//!     exactly (`Grid::check`, grid invariants 1 to 3); with invariant 3's rebuild, the index
//!     is exactly what the reservations imply, so a check reads only the shapes whose cells
//!     and windows can overlap its own.

mod geo;
mod grid;
#[cfg(test)]
mod grid_test;
mod index;
mod preempt;
mod query;
mod reserve;
mod route;
mod window;

use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::{Area, HolderInfo, Priority, ResourceKind, Volume, WaiterInfo};
use serde::{Deserialize, Serialize};

use crate::ResourceKey;
use crate::fifo;
use crate::grant::{Core, Hold, Occupancy, Waiter};
use crate::resource::{Listed, Resource};
use crate::{Ctx, InvariantViolation, LeaseId, Limits, Reply, Text};
use index::Index;
pub(crate) use window::AskedWindow;
pub use window::{Window, WindowRefused};

pub use geo::{EARTH_RADIUS_M, M_PER_DEG, areas_conflict, bands_overlap, distance_m};
pub use preempt::PREEMPT_CHAIN_MAX;

/// A held reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// The hold (lease, token, since).
    pub hold: Hold,
    /// Its cylinder, if it has geometry.
    pub area: Option<Area>,
    /// Its time window; absent (and left out of the snapshot): all time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// A route's volumes (`route.rs`; `area` and `window` are then absent); empty, and left
    /// out of the snapshot, for a waypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Its priority, which decides who may preempt it; routine (and left out of the snapshot) by
    /// default.
    #[serde(default, skip_serializing_if = "Priority::is_routine")]
    pub priority: Priority,
    /// When the machine ends it unless it is released first, set while a request of a higher
    /// priority waits for its airspace (`preempt.rs`); absent (and left out of the snapshot)
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vacate_by_ms: Option<u64>,
}

/// A waiting reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The waypoint's name.
    pub name: Text,
    /// The waiter.
    pub waiter: Waiter,
    /// Its cylinder, if it has geometry.
    pub area: Option<Area>,
    /// The time window it asks for; absent: all time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// A route's volumes, as for [`Reservation::volumes`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// The priority it asks for; routine (and left out of the snapshot) by default.
    #[serde(default, skip_serializing_if = "Priority::is_routine")]
    pub priority: Priority,
    /// How far ahead of its arrival it is queued: its priority times `reservation_aging_ms`
    /// when it was queued (invariant 8). Kept rather than recomputed, so a later change of
    /// the limit cannot reorder a queue between entries. 0 (and left out) for routine.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub head_start_ms: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A waiter's place in the queue order (invariant 8): lower goes first.
pub type Place = (i128, u64);

impl Pending {
    /// Its place in the queue order: `since_ms − head_start_ms`, then its arrival.
    pub fn place(&self) -> Place {
        (
            i128::from(self.waiter.since_ms) - i128::from(self.head_start_ms),
            self.waiter.seq,
        )
    }
}

/// What a reservation request asks for, resolved: a waypoint's cylinder and window, or a
/// route's volumes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Ask {
    /// A waypoint's cylinder.
    pub area: Option<Area>,
    /// A waypoint's window, resolved against the entry's time.
    pub window: Option<Window>,
    /// A route's volumes (then `area` and `window` are `None`).
    pub volumes: Vec<Volume>,
    /// A waypoint's `start_ms` and `end_ms` as the request gave them, for a retry's match.
    pub asked: AskedWindow,
    /// The priority asked for.
    pub priority: Priority,
}

impl Ask {
    /// What the reservation is called in messages.
    fn noun(&self) -> &'static str {
        if self.volumes.is_empty() {
            "waypoint"
        } else {
            "route"
        }
    }

    /// Whether a held or waiting reservation is exactly what this asks for.
    fn matches(&self, area: Option<Area>, window: Option<Window>, volumes: &[Volume]) -> bool {
        area == self.area
            && volumes == self.volumes.as_slice()
            && (!self.volumes.is_empty() || Window::asked_by(window.as_ref(), self.asked))
    }
}

/// One cylinder of a reservation in its window: a waypoint has at most one, a route one per
/// volume.
pub type Shape = (Area, Option<Window>);

/// The shapes of a reservation: its cylinder in its window, or its route's volumes.
fn shapes(area: Option<Area>, window: Option<Window>, volumes: &[Volume]) -> Vec<Shape> {
    if volumes.is_empty() {
        return area.map(|area| (area, window)).into_iter().collect();
    }
    volumes
        .iter()
        .map(|volume| {
            let window = Window {
                start_ms: volume.start_ms,
                end_ms: Some(volume.end_ms),
            };
            (volume.area(), Some(window))
        })
        .collect()
}

/// When a reservation ends by itself: its window's end, or its route's last volume's end.
fn end_ms(window: Option<Window>, volumes: &[Volume]) -> Option<u64> {
    let route_end = volumes.iter().map(|volume| volume.end_ms).max();
    route_end.or(window.and_then(|window| window.end_ms))
}

impl Reservation {
    /// Its shapes (see [`shapes`]).
    pub fn shapes(&self) -> Vec<Shape> {
        shapes(self.area, self.window, &self.volumes)
    }
}

impl Pending {
    /// Its shapes (see [`shapes`]).
    pub fn shapes(&self) -> Vec<Shape> {
        shapes(self.area, self.window, &self.volumes)
    }
}

/// Every reservation, held and waiting, with the indexes that keep checks local.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Waypoints {
    /// Held reservations by name.
    held: BTreeMap<Text, Reservation>,
    /// Waiting reservations by arrival (`seq`, the log index that queued them).
    waiters: BTreeMap<u64, Pending>,
    /// Derived indexes (invariant 3).
    #[serde(skip)]
    index: Index,
    /// Names and cylinders removed during the current entry, for the grant pass. Empty
    /// between entries.
    #[serde(skip)]
    removed: Vec<(Text, Vec<Shape>)>,
}

impl Waypoints {
    /// The waiting reservation of `lease` on `name`, if any.
    fn pending_mut(&mut self, name: &str, lease: LeaseId) -> Option<&mut Pending> {
        let seqs = self.index.waiting_by_name.get(name)?;
        let seq = *seqs
            .iter()
            .find(|seq| self.waiters[*seq].waiter.lease == lease)?;
        self.waiters.get_mut(&seq)
    }

    /// Rebuilds the derived indexes (after a restore).
    pub fn rebuild_index(&mut self) {
        self.index = Index::build(&self.held, &self.waiters);
        self.removed.clear();
    }

    /// Whether a request (a new one, or a waiter at `place`) is blocked by a held
    /// reservation or by a waiter of another lease ahead of it in the queue order: by its
    /// name (unless `name` is `None`) or by any of its shapes.
    fn blocked(&self, name: Option<&str>, shapes: &[Shape], lease: LeaseId, place: Place) -> bool {
        self.held_conflict(name, shapes, lease, |_| true)
            || self.waiter_ahead(name, shapes, lease, place)
    }

    /// Whether a held reservation of another lease that `visit` accepts conflicts with a
    /// request, by its name or any of its shapes. `visit` sees every conflicting one (with its
    /// name) until it answers true.
    fn held_conflict(
        &self,
        name: Option<&str>,
        shapes: &[Shape],
        lease: LeaseId,
        mut visit: impl FnMut((&Text, &Reservation)) -> bool,
    ) -> bool {
        if let Some(name) = name
            && let Some(held) = self.held.get_key_value(name)
            && held.1.hold.lease != lease
            && visit(held)
        {
            return true;
        }
        shapes.iter().any(|(area, window)| {
            self.index
                .held
                .find_conflict(area, window.as_ref(), |key, entry| {
                    entry.lease != lease
                        && visit(
                            self.held
                                .get_key_value(&key.0)
                                .expect("the held index lists held reservations"),
                        )
                })
        })
    }

    /// Whether a waiter of another lease ahead of `place` in the queue order conflicts with a
    /// request, by its name or any of its shapes.
    fn waiter_ahead(
        &self,
        name: Option<&str>,
        shapes: &[Shape],
        lease: LeaseId,
        place: Place,
    ) -> bool {
        self.waiters_ahead(name, shapes, lease, place, |_, _| true)
    }

    /// Whether a waiter of another lease ahead of `place` in the queue order that `visit`
    /// accepts conflicts with a request, by its name or any of its shapes. `visit` sees every
    /// conflicting one (with its seq; one with several conflicting shapes more than once)
    /// until it answers true.
    fn waiters_ahead(
        &self,
        name: Option<&str>,
        shapes: &[Shape],
        lease: LeaseId,
        place: Place,
        mut visit: impl FnMut(u64, &Pending) -> bool,
    ) -> bool {
        let mut ahead = |seq: &u64| {
            let pending = &self.waiters[seq];
            pending.waiter.lease != lease && pending.place() < place && visit(*seq, pending)
        };
        if let Some(name) = name
            && let Some(seqs) = self.index.waiting_by_name.get(name)
            && seqs.iter().any(&mut ahead)
        {
            return true;
        }
        shapes.iter().any(|(area, window)| {
            self.index
                .waiting
                .find_conflict(area, window.as_ref(), |key, _| ahead(&key.0))
        })
    }

    fn insert_held(&mut self, name: Text, reservation: Reservation) {
        self.index.add_held(&name, &reservation);
        self.held.insert(name, reservation);
    }

    /// The grant pass after removals: grants every waiter that conflicted with something removed
    /// and is no longer blocked, in queue order.
    fn grant_pass(&mut self, ctx: &mut Ctx, core: &mut Core) {
        let removed = std::mem::take(&mut self.removed);
        if self.waiters.is_empty() {
            return;
        }
        let mut candidates = BTreeSet::new();
        for (name, shapes) in &removed {
            if let Some(seqs) = self.index.waiting_by_name.get(name) {
                candidates.extend(seqs.iter().copied());
            }
            for (area, window) in shapes {
                self.index
                    .waiting
                    .find_conflict(area, window.as_ref(), |key, _| {
                        candidates.insert(key.0);
                        false
                    });
            }
        }
        let mut candidates: Vec<(Place, u64)> = candidates
            .into_iter()
            .map(|seq| (self.waiters[&seq].place(), seq))
            .collect();
        candidates.sort_unstable();
        for (place, seq) in candidates {
            let pending = &self.waiters[&seq];
            let shapes = pending.shapes();
            if self.blocked(Some(&pending.name), &shapes, pending.waiter.lease, place) {
                continue;
            }
            let pending = self.waiters.remove(&seq).expect("looked up above");
            self.index.remove_waiter(seq, &pending);
            let key = ResourceKey::new(ResourceKind::Waypoint, &pending.name);
            let hold = core.grant_waiter(ctx, &key, pending.waiter);
            let reservation = Reservation {
                hold,
                area: pending.area,
                window: pending.window,
                volumes: pending.volumes,
                priority: pending.priority,
                vacate_by_ms: None,
            };
            self.insert_held(pending.name, reservation);
        }
    }
}

impl Waypoints {
    /// Invariants 5, 6 and 7: every shape in range, every window non-empty, a route without a
    /// cylinder or window of its own; and no removal left unsettled after the entry.
    fn check_shapes(&self) -> Result<(), InvariantViolation> {
        if !self.removed.is_empty() {
            return Err("waypoint removals were not settled in their entry".into());
        }
        let held = self.held.iter().map(|(name, held)| (name, held.shapes()));
        let waiting = self
            .waiters
            .values()
            .map(|pending| (&pending.name, pending.shapes()));
        for (name, shapes) in held.chain(waiting) {
            for (area, window) in shapes {
                if let Some(Window {
                    start_ms,
                    end_ms: Some(end_ms),
                }) = window
                    && end_ms <= start_ms
                {
                    return Err(violation!(
                        "waypoint {name:?} has an empty window [{start_ms}, {end_ms})"
                    ));
                }
                Area::from_fields(
                    Some(area.lat),
                    Some(area.lon),
                    area.alt_min_m,
                    area.alt_max_m,
                    Some(area.radius_m),
                )
                .map_err(|reason| {
                    format!("waypoint {name:?} has a cylinder out of range: {reason}")
                })?;
            }
        }
        if self
            .held
            .values()
            .any(|held| !held.volumes.is_empty() && (held.area.is_some() || held.window.is_some()))
            || self.waiters.values().any(|pending| {
                !pending.volumes.is_empty() && (pending.area.is_some() || pending.window.is_some())
            })
        {
            return Err("a route has an area or a window besides its volumes".into());
        }
        Ok(())
    }
}

impl Resource for Waypoints {
    fn held_tokens(&self, name: &str) -> Vec<u64> {
        let held = self.held.get(name);
        held.map(|reservation| reservation.hold.token)
            .into_iter()
            .collect()
    }

    fn inspect(&self, name: &str) -> Reply {
        let holders = self
            .held
            .get(name)
            .map(|reservation| HolderInfo {
                area: reservation.area,
                start_ms: reservation.window.map(|window| window.start_ms),
                end_ms: reservation.window.and_then(|window| window.end_ms),
                volumes: reservation.volumes.clone(),
                priority: (!reservation.priority.is_routine()).then_some(reservation.priority),
                vacate_by_ms: reservation.vacate_by_ms,
                ..reservation.hold.info(None)
            })
            .into_iter()
            .collect();
        let mut waiting: Vec<&Pending> = self
            .index
            .waiting_by_name
            .get(name)
            .into_iter()
            .flatten()
            .map(|seq| &self.waiters[seq])
            .collect();
        waiting.sort_unstable_by_key(|pending| pending.place());
        // Each waiter with the cylinder it asks for.
        let waiters = fifo::infos(waiting.iter().map(|pending| &pending.waiter), false)
            .into_iter()
            .zip(waiting)
            .map(|(info, pending)| WaiterInfo {
                area: pending.area,
                start_ms: pending.window.map(|window| window.start_ms),
                end_ms: pending.window.and_then(|window| window.end_ms),
                volumes: pending.volumes.clone(),
                priority: (!pending.priority.is_routine()).then_some(pending.priority),
                ..info
            })
            .collect();
        Reply::Inspect {
            limit: None,
            holders,
            waiters,
            count: None,
            leaving: None,
        }
    }

    fn held_key(&self, name: &str) -> Option<ResourceKey> {
        let (name, _) = self.held.get_key_value(name)?;
        Some(ResourceKey::new(ResourceKind::Waypoint, name))
    }

    /// Notes the reservation's name and shapes for the grant pass.
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        if self.held.get(name)?.hold.lease != lease {
            return None;
        }
        let (name, reservation) = self.held.remove_entry(name)?;
        self.index.remove_held(&name, &reservation);
        self.removed.push((name, reservation.shapes()));
        Some(reservation.hold)
    }

    /// Notes the waiter's name and shapes for the grant pass.
    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        let seq = *self.index.waiting_by_name.get(name)?.iter().find(|seq| {
            let waiter = &self.waiters[*seq].waiter;
            &*waiter.agent == agent && waiter.request_id == request_id
        })?;
        let pending = self.waiters.remove(&seq)?;
        self.index.remove_waiter(seq, &pending);
        let shapes = pending.shapes();
        self.removed.push((pending.name, shapes));
        Some(pending.waiter)
    }

    /// The grant pass over what was removed in this entry (noted as it was removed, so `keys`
    /// adds nothing; none is needed after a route's amendment), then the preemption pass
    /// (`preempt.rs`).
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, _: &[ResourceKey], limits: &Limits) {
        self.grant_pass(ctx, core);
        self.preempt(ctx, limits.reservation_vacate_ms);
    }

    /// Names held plus reservations waiting.
    fn in_use(&self) -> usize {
        self.held.len() + self.waiters.len()
    }

    /// Each name held or waited for once, with its holder count (0 or 1) and waiter count.
    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>> {
        let mut names: BTreeMap<&'a str, (usize, usize)> = BTreeMap::new();
        for name in self.held.keys().filter(|name| keep(name)) {
            names.entry(name).or_default().0 = 1;
        }
        for (name, seqs) in self
            .index
            .waiting_by_name
            .iter()
            .filter(|(name, _)| keep(name))
        {
            names.entry(name).or_default().1 = seqs.len();
        }
        names
            .into_iter()
            .map(|(name, (holders, waiters))| (name, holders, waiters))
            .collect()
    }

    /// Invariants 1 to 10.
    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation> {
        self.check_shapes()?;
        self.index.held.check()?;
        self.index.waiting.check()?;
        if self.index != Index::build(&self.held, &self.waiters) {
            return Err("the waypoint indexes disagree with the reservations".into());
        }
        for (name, reservation) in &self.held {
            let key = ResourceKey::new(ResourceKind::Waypoint, name);
            occupancy.hold(&key, &reservation.hold);
            let lease = reservation.hold.lease;
            let conflict = reservation.shapes().iter().any(|(area, window)| {
                self.index
                    .held
                    .find_conflict(area, window.as_ref(), |_, entry| entry.lease != lease)
            });
            if conflict {
                return Err(violation!(
                    "held waypoint {name:?} conflicts with another lease's"
                ));
            }
        }
        for (seq, pending) in &self.waiters {
            let key = ResourceKey::new(ResourceKind::Waypoint, &pending.name);
            occupancy.wait(&key, &pending.waiter);
            if pending.waiter.seq != *seq {
                return Err(violation!(
                    "waypoint waiter filed at {seq} has seq {}",
                    pending.waiter.seq
                ));
            }
            let lease = pending.waiter.lease;
            if self
                .held
                .get(&pending.name)
                .is_some_and(|held| held.hold.lease == lease)
            {
                return Err(violation!(
                    "lease {lease} waits for {:?}, which it holds",
                    pending.name
                ));
            }
            if !self.blocked(
                Some(&pending.name),
                &pending.shapes(),
                lease,
                pending.place(),
            ) {
                return Err(violation!(
                    "waypoint waiter {seq} for {:?} could be granted but waits",
                    pending.name
                ));
            }
            if pending.priority.is_routine() != (pending.head_start_ms == 0) {
                return Err(violation!(
                    "waypoint waiter {seq} of priority {} has a head start of {} ms",
                    pending.priority,
                    pending.head_start_ms
                ));
            }
        }
        self.check_preempt_invariants()
    }
}
