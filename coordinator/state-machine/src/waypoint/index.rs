//! The waypoints' derived indexes: held and waiting shapes in space and time (`grid.rs`),
//! waiters by name, and the ends and deadlines in time order. Never serialized: rebuilt from
//! the reservations after a restore.
//!
//! Invariants (the waypoint invariants 3, 6, 9 and 10, checked by `Waypoints::check_invariants`
//! against a rebuild):
//! 1. The indexes are exactly what the held and waiting reservations imply: each shape filed
//!    once under (name or seq, shape number), each end and vacate deadline once.
//! 2. `prioritized` lists exactly the waiters above routine.

use std::collections::{BTreeMap, BTreeSet};

use super::grid::{Entry, Grid};
use super::{Pending, Reservation, Shape, end_ms};
use crate::{LeaseId, Text};

/// The derived indexes of [`super::Waypoints`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Index {
    /// Held cylinders, keyed by name and shape number.
    pub(super) held: Grid<(Text, u32)>,
    /// Waiting cylinders, keyed by seq and shape number.
    pub(super) waiting: Grid<(u64, u32)>,
    /// Waiters' seqs by name.
    pub(super) waiting_by_name: BTreeMap<Text, BTreeSet<u64>>,
    /// Held reservations with an end, by `(end_ms, name)`: the due ones are a prefix.
    pub(super) held_ends: BTreeSet<(u64, Text)>,
    /// Waiting reservations with an end, by `(end_ms, seq)`.
    pub(super) waiting_ends: BTreeSet<(u64, u64)>,
    /// Preempted held reservations, by `(vacate_by_ms, name)`: the due ones are a prefix.
    pub(super) vacate_ends: BTreeSet<(u64, Text)>,
    /// Waiters above routine, the only ones that can preempt, by seq.
    pub(super) prioritized: BTreeSet<u64>,
}

/// Files each shape of a reservation in `grid`, under `(key, shape number)`.
fn file<K: Ord + Clone>(grid: &mut Grid<(K, u32)>, key: &K, shapes: Vec<Shape>, lease: LeaseId) {
    for (number, (area, window)) in (0u32..).zip(shapes) {
        let entry = Entry {
            area,
            lease,
            window,
        };
        grid.insert((key.clone(), number), entry);
    }
}

impl Index {
    pub(super) fn build(
        held: &BTreeMap<Text, Reservation>,
        waiters: &BTreeMap<u64, Pending>,
    ) -> Index {
        let mut index = Index::default();
        for (name, reservation) in held {
            index.add_held(name, reservation);
        }
        for (seq, pending) in waiters {
            index.add_waiter(*seq, pending);
        }
        index
    }

    pub(super) fn add_held(&mut self, name: &Text, reservation: &Reservation) {
        file(
            &mut self.held,
            name,
            reservation.shapes(),
            reservation.hold.lease,
        );
        if let Some(end_ms) = end_ms(reservation.window, &reservation.volumes) {
            self.held_ends.insert((end_ms, name.clone()));
        }
        if let Some(vacate_by_ms) = reservation.vacate_by_ms {
            self.vacate_ends.insert((vacate_by_ms, name.clone()));
        }
    }

    pub(super) fn remove_held(&mut self, name: &Text, reservation: &Reservation) {
        for (number, (area, window)) in (0u32..).zip(reservation.shapes()) {
            self.held
                .remove(&(name.clone(), number), &area, window.as_ref());
        }
        if let Some(end_ms) = end_ms(reservation.window, &reservation.volumes) {
            self.held_ends.remove(&(end_ms, name.clone()));
        }
        if let Some(vacate_by_ms) = reservation.vacate_by_ms {
            self.vacate_ends.remove(&(vacate_by_ms, name.clone()));
        }
    }

    pub(super) fn add_waiter(&mut self, seq: u64, pending: &Pending) {
        file(
            &mut self.waiting,
            &seq,
            pending.shapes(),
            pending.waiter.lease,
        );
        if let Some(end_ms) = end_ms(pending.window, &pending.volumes) {
            self.waiting_ends.insert((end_ms, seq));
        }
        if !pending.priority.is_routine() {
            self.prioritized.insert(seq);
        }
        self.waiting_by_name
            .entry(pending.name.clone())
            .or_default()
            .insert(seq);
    }

    pub(super) fn remove_waiter(&mut self, seq: u64, pending: &Pending) {
        for (number, (area, window)) in (0u32..).zip(pending.shapes()) {
            self.waiting.remove(&(seq, number), &area, window.as_ref());
        }
        if let Some(end_ms) = end_ms(pending.window, &pending.volumes) {
            self.waiting_ends.remove(&(end_ms, seq));
        }
        self.prioritized.remove(&seq);
        if let Some(seqs) = self.waiting_by_name.get_mut(&pending.name) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.waiting_by_name.remove(&pending.name);
            }
        }
    }
}
