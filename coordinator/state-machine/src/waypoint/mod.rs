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
//! pass looks at those candidates alone, in arrival order. Granting one adds a hold, which can
//! only block, so one pass suffices.
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

mod geo;
mod grid;
mod window;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hivekeeper_protocol::{Area, ErrorCode, HolderInfo, ResourceKind, WaiterInfo};
use serde::{Deserialize, Serialize};

use super::fifo;
use super::grant::{Core, Hold, Occupancy, ResourceKey, Waiter};
use super::lease::LeaseId;
use super::{Ctx, Limits, Reply, StateMachine, Text};
use grid::{Entry, Grid};
pub use window::Window;

pub use geo::{EARTH_RADIUS_M, M_PER_DEG, areas_conflict, bands_overlap, distance_m};

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
    removed: Vec<(Text, Option<Area>, Option<Window>)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Index {
    /// Held cylinders, keyed by name.
    held: Grid<Text>,
    /// Waiting cylinders, keyed by seq.
    waiting: Grid<u64>,
    /// Waiters' seqs by name.
    waiting_by_name: BTreeMap<Text, BTreeSet<u64>>,
    /// Held reservations with an end, by `(end_ms, name)`: the due ones are a prefix.
    held_ends: BTreeSet<(u64, Text)>,
    /// Waiting reservations with an end, by `(end_ms, seq)`.
    waiting_ends: BTreeSet<(u64, u64)>,
}

impl Index {
    fn build(held: &BTreeMap<Text, Reservation>, waiters: &BTreeMap<u64, Pending>) -> Index {
        let mut index = Index::default();
        for (name, reservation) in held {
            index.add_held(name, reservation);
        }
        for (seq, pending) in waiters {
            index.add_waiter(*seq, pending);
        }
        index
    }

    fn add_held(&mut self, name: &Text, reservation: &Reservation) {
        let window = reservation.window;
        if let Some(area) = reservation.area {
            let lease = reservation.hold.lease;
            let entry = Entry {
                area,
                lease,
                window,
            };
            self.held.insert(name.clone(), entry);
        }
        if let Some(end_ms) = window.and_then(|window| window.end_ms) {
            self.held_ends.insert((end_ms, name.clone()));
        }
    }

    fn remove_held(&mut self, name: &Text, reservation: &Reservation) {
        if let Some(area) = &reservation.area {
            self.held.remove(name, area);
        }
        if let Some(end_ms) = reservation.window.and_then(|window| window.end_ms) {
            self.held_ends.remove(&(end_ms, name.clone()));
        }
    }

    fn add_waiter(&mut self, seq: u64, pending: &Pending) {
        let window = pending.window;
        if let Some(area) = pending.area {
            let lease = pending.waiter.lease;
            let entry = Entry {
                area,
                lease,
                window,
            };
            self.waiting.insert(seq, entry);
        }
        if let Some(end_ms) = window.and_then(|window| window.end_ms) {
            self.waiting_ends.insert((end_ms, seq));
        }
        self.waiting_by_name
            .entry(pending.name.clone())
            .or_default()
            .insert(seq);
    }

    fn remove_waiter(&mut self, seq: u64, pending: &Pending) {
        if let Some(area) = &pending.area {
            self.waiting.remove(&seq, area);
        }
        if let Some(end_ms) = pending.window.and_then(|window| window.end_ms) {
            self.waiting_ends.remove(&(end_ms, seq));
        }
        if let Some(seqs) = self.waiting_by_name.get_mut(&pending.name) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.waiting_by_name.remove(&pending.name);
            }
        }
    }
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

    /// Names held plus reservations waiting: what counts against `resources_max`.
    pub fn in_use(&self) -> usize {
        self.held.len() + self.waiters.len()
    }

    /// The map's own name for a held waypoint (shared, not copied).
    pub fn held_name(&self, name: &str) -> Option<Text> {
        self.held.get_key_value(name).map(|(name, _)| name.clone())
    }

    /// Every waypoint name held or waited for that `keep` accepts, in name order, with its
    /// holder count (0 or 1) and waiter count (`admin.resources`).
    pub fn occupancy<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<(&'a str, usize, usize)> {
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

    /// The token held on waypoint `name`.
    pub fn held_token(&self, name: &str) -> Option<u64> {
        self.held
            .get(name)
            .map(|reservation| reservation.hold.token)
    }

    /// Whether a request (a new one, or the waiter at `before_seq`) is blocked by a held
    /// reservation or by an earlier waiter of another lease.
    fn blocked(
        &self,
        name: &str,
        area: Option<&Area>,
        window: Option<&Window>,
        lease: LeaseId,
        before_seq: u64,
    ) -> bool {
        let other = |entry_lease: LeaseId| entry_lease != lease;
        if self
            .held
            .get(name)
            .is_some_and(|held| other(held.hold.lease))
        {
            return true;
        }
        if let Some(seqs) = self.index.waiting_by_name.get(name)
            && seqs
                .range(..before_seq)
                .any(|seq| other(self.waiters[seq].waiter.lease))
        {
            return true;
        }
        let Some(area) = area else {
            return false;
        };
        self.index
            .held
            .find_conflict(area, window, |_, entry| other(entry.lease))
            || self
                .index
                .waiting
                .find_conflict(area, window, |seq, entry| {
                    *seq < before_seq && other(entry.lease)
                })
    }

    fn insert_held(&mut self, name: Text, reservation: Reservation) {
        self.index.add_held(&name, &reservation);
        self.held.insert(name, reservation);
    }

    /// Removes and returns `lease`'s reservation of `name`, noting it for the grant pass.
    pub fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        if self.held.get(name)?.hold.lease != lease {
            return None;
        }
        let (name, reservation) = self.held.remove_entry(name)?;
        self.index.remove_held(&name, &reservation);
        self.removed
            .push((name, reservation.area, reservation.window));
        Some(reservation.hold)
    }

    /// Removes and returns a waiter of `name`, noting it for the grant pass.
    pub fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        let seq = *self.index.waiting_by_name.get(name)?.iter().find(|seq| {
            let waiter = &self.waiters[*seq].waiter;
            &*waiter.agent == agent && waiter.request_id == request_id
        })?;
        let pending = self.waiters.remove(&seq)?;
        self.index.remove_waiter(seq, &pending);
        self.removed
            .push((pending.name, pending.area, pending.window));
        Some(pending.waiter)
    }

    /// The grant pass after removals: grants every waiter that conflicted with something removed
    /// and is no longer blocked, in arrival order.
    pub fn settle(&mut self, ctx: &mut Ctx, core: &mut Core) {
        let removed = std::mem::take(&mut self.removed);
        if self.waiters.is_empty() {
            return;
        }
        let mut candidates = BTreeSet::new();
        for (name, area, window) in &removed {
            if let Some(seqs) = self.index.waiting_by_name.get(name) {
                candidates.extend(seqs.iter().copied());
            }
            if let Some(area) = area {
                self.index
                    .waiting
                    .find_conflict(area, window.as_ref(), |seq, _| {
                        candidates.insert(*seq);
                        false
                    });
            }
        }
        for seq in candidates {
            let pending = &self.waiters[&seq];
            if self.blocked(
                &pending.name,
                pending.area.as_ref(),
                pending.window.as_ref(),
                pending.waiter.lease,
                seq,
            ) {
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
            };
            self.insert_held(pending.name, reservation);
        }
    }

    /// Invariants 1 to 5, and the holds and waits for the cross-check with leases.
    pub fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), String> {
        if !self.removed.is_empty() {
            return Err("waypoint removals were not settled in their entry".into());
        }
        let held = self
            .held
            .iter()
            .map(|(name, held)| (name, &held.area, &held.window));
        let waiting = self
            .waiters
            .values()
            .map(|pending| (&pending.name, &pending.area, &pending.window));
        for (name, area, window) in held.chain(waiting) {
            if let Some(Window {
                start_ms,
                end_ms: Some(end_ms),
            }) = window
                && end_ms <= start_ms
            {
                return Err(format!(
                    "waypoint {name:?} has an empty window [{start_ms}, {end_ms})"
                ));
            }
            if let Some(area) = area {
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
        if self.index != Index::build(&self.held, &self.waiters) {
            return Err("the waypoint indexes disagree with the reservations".into());
        }
        for (name, reservation) in &self.held {
            let key = ResourceKey::new(ResourceKind::Waypoint, name);
            occupancy.hold(&key, &reservation.hold);
            let lease = reservation.hold.lease;
            if let Some(area) = &reservation.area
                && self
                    .index
                    .held
                    .find_conflict(area, reservation.window.as_ref(), |_, entry| {
                        entry.lease != lease
                    })
            {
                return Err(format!(
                    "held waypoint {name:?} conflicts with another lease's"
                ));
            }
        }
        for (seq, pending) in &self.waiters {
            let key = ResourceKey::new(ResourceKind::Waypoint, &pending.name);
            occupancy.wait(&key, &pending.waiter);
            if pending.waiter.seq != *seq {
                return Err(format!(
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
                return Err(format!(
                    "lease {lease} waits for {:?}, which it holds",
                    pending.name
                ));
            }
            if !self.blocked(
                &pending.name,
                pending.area.as_ref(),
                pending.window.as_ref(),
                lease,
                *seq,
            ) {
                return Err(format!(
                    "waypoint waiter {seq} for {:?} could be granted but waits",
                    pending.name
                ));
            }
        }
        Ok(())
    }
}

impl StateMachine {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn waypoint_reserve(
        &mut self,
        ctx: &mut Ctx,
        agent: &Text,
        request_id: &str,
        name: &str,
        lease: &str,
        area: Option<Area>,
        wait_ms: Option<u64>,
        asked: (Option<u64>, Option<u64>),
    ) -> Reply {
        let window = match Window::resolve(asked.0, asked.1, ctx.now_ms, &self.limits) {
            Ok(window) => window,
            Err(message) => {
                return Reply::refused(
                    ErrorCode::BadRequest,
                    format!("waypoint.reserve: {message}"),
                );
            }
        };
        let lease = match self.core.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        if let Some(held) = self.waypoints.held.get(name)
            && held.hold.lease == lease
        {
            // Same geometry and window: the reservation it already has. Other geometry would
            // tell the agent it holds airspace it does not, so it must release first (as a
            // semaphore re-acquire with other permits must).
            return if held.area == area && Window::asked_by(held.window.as_ref(), asked.0, asked.1)
            {
                Reply::Granted {
                    token: held.hold.token,
                }
            } else {
                Reply::refused(
                    ErrorCode::BadRequest,
                    format!(
                        "lease {lease} already holds waypoint {name:?} with other geometry or \
                         another window; release it before reserving it again elsewhere"
                    ),
                )
            };
        }
        let name: Text = Arc::from(name);
        let key = ResourceKey::new(ResourceKind::Waypoint, &name);
        if self.core.is_waiting(lease, &key) {
            let old_id = self.core.waiting_id(lease, &key).to_string();
            let Some(pending) = self.waypoints.pending_mut(&name, lease) else {
                return self
                    .core
                    .already_waiting(lease, &key, "a reservation not found");
            };
            if pending.area != area || !Window::asked_by(pending.window.as_ref(), asked.0, asked.1)
            {
                return self
                    .core
                    .already_waiting(lease, &key, "other geometry or another window");
            }
            if wait_ms == Some(0) {
                return Reply::refused(
                    ErrorCode::WouldBlock,
                    format!(
                        "waypoint {name:?} conflicts with a held or earlier waiting reservation \
                         (this lease already waits for it, request id {old_id:?})"
                    ),
                );
            }
            pending.waiter.request_id = request_id.to_string();
            self.core
                .take_over_wait(ctx, &key, lease, agent, request_id, wait_ms);
            return Reply::Queued;
        }
        if let Some(refusal) = self.core.holds_quota(agent, &self.limits) {
            return refusal;
        }
        if self.resources_in_use() >= self.limits.resources_max as usize {
            return self.resources_exhausted();
        }
        if !self
            .waypoints
            .blocked(&name, area.as_ref(), window.as_ref(), lease, u64::MAX)
        {
            let hold = self.core.grant_now(ctx, &key, lease, agent, 1);
            let token = hold.token;
            let reservation = Reservation { hold, area, window };
            self.waypoints.insert_held(name, reservation);
            return Reply::Granted { token };
        }
        if wait_ms == Some(0) {
            return Reply::refused(
                ErrorCode::WouldBlock,
                format!("waypoint {name:?} conflicts with a held or earlier waiting reservation"),
            );
        }
        if let Some(refusal) = self.core.waits_quota(lease, &self.limits) {
            return refusal;
        }
        if let Some(refusal) = self.waypoint_queue_full(&name) {
            return refusal;
        }
        let waiter = self
            .core
            .enqueue(ctx, &key, lease, agent, request_id, 1, wait_ms);
        let pending = Pending {
            name,
            waiter,
            area,
            window,
        };
        self.waypoints.index.add_waiter(ctx.index, &pending);
        self.waypoints.waiters.insert(ctx.index, pending);
        Reply::Queued
    }

    fn waypoint_queue_full(&self, name: &str) -> Option<Reply> {
        let limits: &Limits = &self.limits;
        let on_name = self
            .waypoints
            .index
            .waiting_by_name
            .get(name)
            .map_or(0, BTreeSet::len);
        if let Some(refusal) = fifo::full(ResourceKind::Waypoint, name, on_name, limits) {
            return Some(refusal);
        }
        if self.waypoints.waiters.len() >= limits.waypoint_waiters_max as usize {
            return Some(Reply::refused(
                ErrorCode::ResourceExhausted,
                format!(
                    "{} waypoint reservations are waiting, the limit",
                    self.waypoints.waiters.len()
                ),
            ));
        }
        None
    }

    pub(super) fn waypoint_inspect(&self, name: &str) -> Reply {
        let holders = self
            .waypoints
            .held
            .get(name)
            .map(|reservation| HolderInfo {
                area: reservation.area,
                start_ms: reservation.window.map(|window| window.start_ms),
                end_ms: reservation.window.and_then(|window| window.end_ms),
                ..reservation.hold.info(None)
            })
            .into_iter()
            .collect();
        let waiting = self
            .waypoints
            .index
            .waiting_by_name
            .get(name)
            .into_iter()
            .flatten()
            .map(|seq| &self.waypoints.waiters[seq]);
        // Each waiter with the cylinder it asks for.
        let waiters = fifo::infos(waiting.clone().map(|pending| &pending.waiter), false)
            .into_iter()
            .zip(waiting)
            .map(|(info, pending)| WaiterInfo {
                area: pending.area,
                start_ms: pending.window.map(|window| window.start_ms),
                end_ms: pending.window.and_then(|window| window.end_ms),
                ..info
            })
            .collect();
        Reply::Inspect {
            limit: None,
            holders,
            waiters,
        }
    }
}
