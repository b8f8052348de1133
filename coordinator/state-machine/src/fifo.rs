//! FIFO queues of waiters: arrival (log) order, the head first, shared by every resource kind.
//!
//! Locks and semaphores keep one [`Queue`] per resource and grant from its head only; a barrier
//! keeps one for its filling round's arrivals and one per passed round's leaves. Waypoint
//! reservations are FIFO among *conflicting* requests, so they keep their waiters in one map by
//! arrival instead; they share the bound ([`full`]) and the way `inspect` shows a queue
//! ([`infos`]). Who joins a queue and who is granted is recorded by `grant.rs` (`Core::enqueue`,
//! `Core::grant_waiter`) for every kind alike.
//!
//! Invariants (checked by [`Queue::check`] for locks and semaphores; waypoints check theirs):
//! 1. Waiters are in strictly increasing `seq`, the log position that queued them: arrival
//!    order is log order, the same on every replica.
//! 2. No lease waits twice in one queue.
//! 3. A waiter joins only while its queue is shorter than `waiters_per_resource_max` ([`full`],
//!    checked at enqueue: a `Configure` that lowers the bound does not empty longer queues).
//! 4. Grants take the head ([`Queue::pop_front`]); a waiter behind it leaves only when it is
//!    cancelled or its lease ends ([`Queue::take`]). Nobody overtakes the head.
//! 5. `inspect` shows a queue head first, at position 1 ([`infos`]).

use crate::InvariantViolation;
use std::collections::VecDeque;

use hivekeeper_protocol::{ErrorCode, WaiterInfo};
use serde::{Deserialize, Serialize};

use super::lease::LeaseId;
use super::{Limits, Reply};
use crate::ResourceKey;
use crate::grant::Waiter;

/// One resource's waiters, head first. Serialized as the plain sequence it wraps, so snapshot
/// bytes are what they were before the queue had a type of its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Queue(VecDeque<Waiter>);

impl Queue {
    /// How many wait.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The head: the next to be granted.
    pub fn front(&self) -> Option<&Waiter> {
        self.0.front()
    }

    /// Appends a waiter queued by the current entry (invariant 1: its `seq` is the newest).
    pub fn push_back(&mut self, waiter: Waiter) {
        debug_assert!(
            self.0.back().is_none_or(|last| last.seq < waiter.seq),
            "invariant 1: a new waiter arrives after every queued one"
        );
        self.0.push_back(waiter);
    }

    /// Removes the head, to grant it (invariant 4).
    pub fn pop_front(&mut self) -> Option<Waiter> {
        self.0.pop_front()
    }

    /// Removes the waiter of this request wherever it stands (a cancelled wait, an ended lease).
    pub fn take(&mut self, agent: &str, request_id: &str) -> Option<Waiter> {
        let position = self
            .0
            .iter()
            .position(|w| &*w.agent == agent && w.request_id == request_id)?;
        self.0.remove(position)
    }

    /// The waiter of `agent`'s request `request_id`.
    pub fn get(&self, agent: &str, request_id: &str) -> Option<&Waiter> {
        self.0
            .iter()
            .find(|w| &*w.agent == agent && w.request_id == request_id)
    }

    /// Moves a waiter to another request id of the same agent, keeping its place (a wait taken
    /// over by a new request: `Core::take_over_wait`).
    pub fn rename(&mut self, agent: &str, old_id: &str, new_id: &str) {
        if let Some(waiter) = self
            .0
            .iter_mut()
            .find(|w| &*w.agent == agent && w.request_id == old_id)
        {
            waiter.request_id = new_id.to_string();
        }
    }

    /// Whether `lease` waits in this queue.
    pub fn has_lease(&self, lease: LeaseId) -> bool {
        self.0.iter().any(|w| w.lease == lease)
    }

    /// The waiters, head first.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.0.iter()
    }

    /// The queue as `inspect` shows it (invariant 5).
    pub fn infos(&self, with_permits: bool) -> Vec<WaiterInfo> {
        infos(&self.0, with_permits)
    }

    /// Invariants 1 and 2 of `key`'s queue.
    pub fn check(&self, key: &ResourceKey) -> Result<(), InvariantViolation> {
        if !self
            .0
            .iter()
            .zip(self.0.iter().skip(1))
            .all(|(earlier, later)| earlier.seq < later.seq)
        {
            return Err(violation!("{key} queue is out of order"));
        }
        let mut leases: Vec<LeaseId> = self.0.iter().map(|w| w.lease).collect();
        leases.sort_unstable();
        if leases.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(violation!("{key} has a lease waiting twice"));
        }
        Ok(())
    }
}

/// Waiters as `inspect` shows them, in the order given (head first), from position 1.
pub fn infos<'w>(
    waiters: impl IntoIterator<Item = &'w Waiter>,
    with_permits: bool,
) -> Vec<WaiterInfo> {
    waiters
        .into_iter()
        .zip(1u32..)
        .map(|(waiter, position)| WaiterInfo {
            agent: waiter.agent.to_string(),
            position,
            permits: with_permits.then_some(waiter.permits),
            since_ms: waiter.since_ms,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: Vec::new(),
            priority: None,
            mode: waiter.mode,
            value: None,
        })
        .collect()
}

/// Refuses to join a queue of `waiting` waiters on `name` (a `noun`: "lock") that is already at
/// the bound (invariant 3).
pub fn full(noun: &str, name: &str, waiting: usize, limits: &Limits) -> Result<(), Reply> {
    if waiting < limits.waiters_per_resource_max as usize {
        return Ok(());
    }
    Err(Reply::refused(
        ErrorCode::ResourceExhausted,
        format!("{noun} {name:?} already has {waiting} waiters, the limit"),
    ))
}
