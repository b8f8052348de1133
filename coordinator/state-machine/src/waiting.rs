//! The pending-wait index: every queued request by agent and request id, with the resource it
//! waits on and its deadline. A retry finds its queue slot here (`Queued` again, never a
//! second slot), an expiry finds its waiter, and a lease that asks again under a new request
//! id takes its wait over.
//!
//! Invariants (1, 2 and 4 checked by [`Core::check_waiting`], 3 by
//! `WaitDeadlines::check_invariants`):
//! 1. `waiting` indexes exactly the queued waiters, by agent and request id: no waiter twice.
//!    An agent's waits are sorted by request id, and an agent that waits for nothing is not
//!    in the index. A multi-lock (`lock.acquire_all`) is one waiting request for several
//!    locks: indexed once, under its first lock, with the others beside it in name order.
//! 2. Every indexed wait names a live lease, and that lease's `waits` lists it under the same
//!    resources (each of a multi-lock's) and request id, and nothing else.
//! 3. `deadlines` lists exactly the indexed waits that have a deadline (`wait_deadline.rs`).
//! 4. `waiters_per_kind` counts exactly the indexed waits, by their resource's kind (a
//!    multi-lock once), so the count the node reads after every entry costs no scan.

use std::collections::BTreeMap;

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::fifo::{self, Queue};
use crate::grant::{Claim, Core, Waiter};
use crate::{
    Ctx, Decision, Event, InvariantViolation, LeaseId, Limits, NameMap, Reply, ResourceKey, Text,
};

/// Where a pending request waits, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    /// The lease it waits under.
    pub lease: LeaseId,
    /// The resource.
    pub key: ResourceKey,
    /// When its `wait_ms` runs out on the machine's clock (`since + wait_ms`), absent for a
    /// request that waits until granted or its lease ends. Absent too for a wait queued by a
    /// build before deadlines were replicated (data format 1 without this field): such a
    /// wait keeps waiting, as it did across a failover then. See `wait_deadline.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// The request's `max_hold_ms`, which bounds the hold once it is granted (`max_hold.rs`);
    /// absent for an unbounded one, and then absent from the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_ms: Option<u64>,
    /// A multi-lock's (`lock.acquire_all`) other lock names, in name order, all after `key`'s:
    /// the request waits in each of their queues too, under this one request id. Empty (and
    /// left out of the snapshot) for a request for one resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<Text>,
}

impl Wait {
    /// The wait of `claim`, queued for `key` (and a multi-lock's `others`) at `now_ms`: its
    /// deadline is `wait_ms` after that, on the machine's clock.
    pub fn of(claim: &Claim<'_>, key: &ResourceKey, others: Vec<Text>, now_ms: u64) -> Wait {
        Wait {
            lease: claim.lease,
            key: key.clone(),
            deadline_ms: claim.wait_ms.map(|wait_ms| now_ms.saturating_add(wait_ms)),
            max_hold_ms: claim.max_hold_ms,
            others,
        }
    }

    /// Every resource the request waits for: `key`, then the multi-lock's others.
    pub fn keys(&self) -> Vec<ResourceKey> {
        let others = self
            .others
            .iter()
            .map(|name| ResourceKey::new(self.key.kind, name));
        std::iter::once(self.key.clone()).chain(others).collect()
    }
}

/// One agent's pending waits by request id: a vector sorted by id, serialized as the map it
/// stands for. An agent rarely waits for more than a few things at once, and a handover
/// empties one agent's index and fills another's on every grant, so a small vector (one
/// modest allocation, binary search) replaces a B-tree (a node of eleven slots each time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingWaits(Vec<(String, Wait)>);

impl PendingWaits {
    fn position(&self, request_id: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|(id, _)| id.as_str().cmp(request_id))
    }

    /// The wait of `request_id`.
    pub fn get(&self, request_id: &str) -> Option<&Wait> {
        self.position(request_id).ok().map(|at| &self.0[at].1)
    }

    /// Whether `request_id` waits.
    pub fn contains_key(&self, request_id: &str) -> bool {
        self.position(request_id).is_ok()
    }

    /// Records (or replaces) the wait of `request_id`.
    pub fn insert(&mut self, request_id: String, wait: Wait) {
        match self.position(&request_id) {
            Ok(at) => self.0[at].1 = wait,
            Err(at) => self.0.insert(at, (request_id, wait)),
        }
    }

    /// Forgets the wait of `request_id`.
    pub fn remove(&mut self, request_id: &str) -> Option<Wait> {
        let at = self.position(request_id).ok()?;
        Some(self.0.remove(at).1)
    }

    /// How many requests wait.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a PendingWaits {
    type Item = (&'a String, &'a Wait);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, Wait)>,
        fn(&'a (String, Wait)) -> (&'a String, &'a Wait),
    >;

    /// In request id order.
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(id, wait)| (id, wait))
    }
}

impl Serialize for PendingWaits {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self)
    }
}

impl<'de> Deserialize<'de> for PendingWaits {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let waits = BTreeMap::<String, Wait>::deserialize(deserializer)?;
        Ok(PendingWaits(waits.into_iter().collect()))
    }
}

/// Requests waiting right now, per resource kind ([`crate::StateMachine::waiter_counts`]),
/// indexed by the kind's place in [`ResourceKind::ALL`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaiterCounts([usize; ResourceKind::ALL.len()]);

impl WaiterCounts {
    /// The count for one kind.
    pub fn get(&self, kind: ResourceKind) -> usize {
        self.0[kind as usize]
    }

    /// One more waiting request of `kind`.
    pub(crate) fn add(&mut self, kind: ResourceKind) {
        self.0[kind as usize] += 1;
    }

    /// One fewer waiting request of `kind`.
    pub(crate) fn remove(&mut self, kind: ResourceKind) {
        self.0[kind as usize] -= 1;
    }

    /// The counts of the waits indexed in `waiting` (invariant 4), for a restore and the check.
    pub(crate) fn rebuild(waiting: &NameMap<PendingWaits>) -> WaiterCounts {
        let mut counts = WaiterCounts::default();
        for (_, wait) in waiting.values().flatten() {
            counts.add(wait.key.kind);
        }
        counts
    }
}

impl Core {
    /// Waiters per resource kind (invariant 4: kept as waits are indexed and forgotten).
    pub fn waiter_counts(&self) -> WaiterCounts {
        self.waiters_per_kind
    }

    /// The pending wait of `agent`'s request `request_id`, if it waits.
    pub fn pending_wait(&self, agent: &str, request_id: &str) -> Option<&Wait> {
        self.waiting.get(agent)?.get(request_id)
    }

    /// Every resource a pending request waits on: one, or a multi-lock's locks in name order.
    pub fn wait_keys(&self, agent: &str, request_id: &str) -> Option<Vec<ResourceKey>> {
        Some(self.pending_wait(agent, request_id)?.keys())
    }

    /// Whether `lease` already waits on `key` (under any request id).
    pub fn is_waiting(&self, lease: LeaseId, key: &ResourceKey) -> bool {
        self.leases
            .get(&lease)
            .is_some_and(|record| record.waits.contains_key(key))
    }

    /// The request id under which `lease` waits on `key` (the caller checked
    /// [`Core::is_waiting`]).
    pub fn waiting_id(&self, lease: LeaseId, key: &ResourceKey) -> &str {
        &self.leases[&lease].waits[key]
    }

    /// The refusal for a second wait by one lease on one resource that asks for something else
    /// (other permits, other geometry).
    pub fn already_waiting(&self, lease: LeaseId, key: &ResourceKey, what: &str) -> Reply {
        let request_id = self.waiting_id(lease, key);
        Reply::refused(
            ErrorCode::BadRequest,
            format!(
                "lease {lease} already waits for {key} (request id {request_id:?}) with {what}"
            ),
        )
    }

    /// A second acquire of `key` by a lease that already waits for it, under `request_id`:
    /// the wait moves to the new request (its place in the queue kept, its deadline now the
    /// new request's `wait_ms`, its hold's bound the new request's `max_hold_ms`), and the
    /// earlier request is answered `timeout` ("superseded").
    /// This is what a client that gave up on its request (a lost answer, a session in
    /// jeopardy) and asks again under a fresh id needs: its place, not a refusal. The caller
    /// renames the waiter in the resource's queue (`Queue::rename`) with the returned old id,
    /// in every queue of a multi-lock (whose `key` is its first lock).
    pub fn take_over_wait(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        claim: &Claim<'_>,
    ) -> String {
        let Claim {
            agent,
            lease,
            request_id,
            ..
        } = *claim;
        let record = self
            .leases
            .get_mut(&lease)
            .expect("the caller checked the lease is live");
        let old_id = record
            .waits
            .insert(key.clone(), request_id.to_string())
            .expect("the caller checked the lease waits on key");
        let waits = self.waiting.entry(agent.clone()).or_default();
        let old = waits
            .remove(&old_id)
            .expect("invariant 2: the lease's wait is indexed");
        if let Some(old_deadline_ms) = old.deadline_ms {
            self.deadlines.remove(old_deadline_ms, agent, &old_id);
        }
        // A multi-lock's wait moves whole: every one of its locks now waits under the new id.
        for other in &old.others {
            let other = ResourceKey::new(key.kind, other);
            record.waits.insert(other, request_id.to_string());
        }
        let wait = Wait::of(claim, key, old.others, ctx.now_ms);
        if let Some(deadline_ms) = wait.deadline_ms {
            self.deadlines.insert(deadline_ms, agent, request_id);
        }
        waits.insert(request_id.to_string(), wait);
        let reply = Reply::refused(
            ErrorCode::Timeout,
            format!("superseded by request id {request_id:?}: the wait for {key} goes on under it"),
        );
        self.respond(ctx, key, agent, old_id.clone(), reply);
        // The new request joins the queue (in the old one's place).
        ctx.events.push(Event::Queued {
            key: key.clone(),
            agent: agent.clone(),
            request_id: request_id.to_string(),
        });
        old_id
    }

    /// A request for `key`, held by another lease, that waits in `queue` (how elections queue;
    /// locks, with their modes and multi-locks, queue in `lock/acquire.rs`): a lease that
    /// waits already takes its wait over ([`Core::take_over_wait`]); otherwise, within the
    /// holds, waits and queue bounds, the request joins the back of the queue. `wait_ms: 0` is
    /// `would_block` either way, nothing changed; `held` says why it cannot be granted now
    /// (`election "chair" has a leader`).
    pub fn wait_behind(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        claim: &Claim<'_>,
        queue: &mut Queue,
        held: &dyn Fn() -> String,
        limits: &Limits,
    ) -> Decision {
        let would_block = |why: String| Err(Reply::refused(ErrorCode::WouldBlock, why));
        if self.is_waiting(claim.lease, key) {
            if claim.wait_ms == Some(0) {
                let old_id = self.waiting_id(claim.lease, key);
                let why = format!(
                    "{} (this lease already waits for it, request id {old_id:?})",
                    held()
                );
                return would_block(why);
            }
            let old_id = self.take_over_wait(ctx, key, claim);
            queue.rename(claim.agent, &old_id, claim.request_id);
            return Ok(Reply::Queued);
        }
        self.holds_quota(claim.agent, limits)?;
        if claim.wait_ms == Some(0) {
            return would_block(held());
        }
        self.waits_quota(claim.lease, limits)?;
        fifo::full(key.kind.as_str(), &key.name, queue.len(), limits)?;
        let waiter = self.enqueue(ctx, key, claim, 1);
        queue.push_back(waiter);
        Ok(Reply::Queued)
    }

    /// The `max_hold_ms` a waiter's request asked for (`max_hold.rs`), for its hold when it is
    /// granted.
    pub(crate) fn waiting_max_hold(&self, waiter: &Waiter) -> Option<u64> {
        let waits = self.waiting.get(&waiter.agent)?;
        waits.get(&waiter.request_id)?.max_hold_ms
    }

    /// Forgets a waiter's pending wait and its deadline (it was granted or answered).
    pub(crate) fn forget_wait(&mut self, waiter: &Waiter) {
        if let Some(waits) = self.waiting.get_mut(&waiter.agent) {
            if let Some(wait) = waits.remove(&waiter.request_id) {
                self.waiters_per_kind.remove(wait.key.kind);
                if let Some(deadline_ms) = wait.deadline_ms {
                    self.deadlines
                        .remove(deadline_ms, &waiter.agent, &waiter.request_id);
                }
            }
            if waits.is_empty() {
                self.waiting.remove(&waiter.agent);
            }
        }
    }

    /// Invariants 1, 2 and 4.
    pub(crate) fn check_waiting(&self) -> Result<(), InvariantViolation> {
        let counted = WaiterCounts::rebuild(&self.waiting);
        if counted != self.waiters_per_kind {
            return Err(violation!(
                "waiters per kind kept as {:?}, indexed {counted:?}",
                self.waiters_per_kind
            ));
        }
        for (agent, waits) in &self.waiting {
            if waits.is_empty() {
                return Err(violation!("agent {agent} has an empty pending-wait map"));
            }
            if !waits.0.windows(2).all(|pair| pair[0].0 < pair[1].0) {
                return Err(violation!(
                    "agent {agent}'s pending waits are not sorted by id"
                ));
            }
            for (request_id, wait) in waits {
                let Some(lease) = self.leases.get(&wait.lease) else {
                    return Err(violation!(
                        "pending wait {agent}/{request_id} names dead lease {}",
                        wait.lease
                    ));
                };
                let names = std::iter::once(&wait.key.name).chain(&wait.others);
                if !names.clone().zip(names.skip(1)).all(|(a, b)| a < b) {
                    return Err(violation!(
                        "pending wait {agent}/{request_id}: its locks are not in name order"
                    ));
                }
                for key in wait.keys() {
                    if lease.waits.get(&key) != Some(request_id) {
                        return Err(violation!(
                            "pending wait {agent}/{request_id} on {key} is not in lease {}",
                            wait.lease
                        ));
                    }
                }
            }
        }
        for (id, lease) in &self.leases {
            for (key, request_id) in &lease.waits {
                let indexed = self
                    .waiting
                    .get(&lease.agent)
                    .and_then(|waits| waits.get(request_id));
                if indexed.is_none_or(|wait| wait.lease != *id || !wait.keys().contains(key)) {
                    return Err(violation!(
                        "lease {id} waits for {key} as {request_id:?}, but the index disagrees"
                    ));
                }
            }
        }
        Ok(())
    }
}
