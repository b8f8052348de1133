//! Holds, waiters and fencing tokens: the bookkeeping every resource kind shares.
//!
//! A resource kind (lock, semaphore, waypoint) decides *whether* to grant; this file does the
//! granting, so a grant, a queue slot or a release is recorded the same way for every kind, in
//! the lease, in the pending-wait index, in the dedup memory and in the events.
//!
//! Invariants (checked by [`Core::check_invariants`] and [`Core::check_occupancy`]):
//! 1. Every hold and every waiter belongs to a live lease of the same agent (DESIGN.md §5.1: a
//!    grant is applied only if the waiter's lease is alive in that same entry).
//! 2. A lease's `holds` and `waits` list exactly the holds and waiters the resources have.
//! 3. `waiting` indexes exactly the queued waiters, by agent and request id: no waiter twice.
//! 4. Tokens strictly increase across all grants: every token is at most `token_last`, and a new
//!    token is `max(token_last + 1, position << 16)`, so it also says which command granted it.

use crate::InvariantViolation;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, HolderInfo, ResourceKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::dedup::{Dedup, Slot};
use super::lease::{Lease, LeaseId};
use super::quota::Usage;
use super::wait_deadline::WaitDeadlines;
use super::{Ctx, Event, NameMap, ReleaseReason, Reply, Text};

/// Tokens are `position << TOKEN_INDEX_SHIFT` (plus a count when one command grants several), so
/// `token >> 16` is the log position of the granting command ([`super::LogMeta::index`]). 2^48
/// positions is centuries at any rate a Raft log sustains.
pub const TOKEN_INDEX_SHIFT: u32 = 16;

/// A resource: its kind and name. Written `kind:name` where it must be a string (JSON map keys);
/// the kind never contains `:`, so names may.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// Lock, semaphore or waypoint.
    pub kind: ResourceKind,
    /// The resource's name.
    pub name: Text,
}

impl ResourceKey {
    /// A key.
    pub fn new(kind: ResourceKind, name: &Text) -> Self {
        ResourceKey {
            kind,
            name: name.clone(),
        }
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.name)
    }
}

impl Serialize for ResourceKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ResourceKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let (kind, name) = text
            .split_once(':')
            .ok_or_else(|| serde::de::Error::custom(format!("resource key {text:?} has no ':'")))?;
        let kind = ResourceKind::parse(kind)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown resource kind {kind:?}")))?;
        Ok(ResourceKey {
            kind,
            name: Arc::from(name),
        })
    }
}

/// One grant that is still held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    /// The lease it is bound to.
    pub lease: LeaseId,
    /// The lease's agent (kept here so inspection needs no lookup).
    pub agent: Text,
    /// The fencing token.
    pub token: u64,
    /// Permits held (1 for locks and waypoints).
    pub permits: u32,
    /// When it was granted (machine clock).
    pub since_ms: u64,
}

impl Hold {
    /// The hold as `inspect` shows it; `permits` only for semaphores.
    pub fn info(&self, permits: Option<u32>) -> HolderInfo {
        HolderInfo {
            agent: self.agent.to_string(),
            lease: self.lease.to_string(),
            token: self.token,
            permits,
            since_ms: self.since_ms,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: Vec::new(),
            priority: None,
            vacate_by_ms: None,
        }
    }
}

/// One queued request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    /// The lease it waits under.
    pub lease: LeaseId,
    /// The lease's agent.
    pub agent: Text,
    /// The request id to answer when it is granted or dropped.
    pub request_id: String,
    /// Permits asked for (1 for locks and waypoints).
    pub permits: u32,
    /// When it was queued (machine clock).
    pub since_ms: u64,
    /// Log index of the request that queued it: the order among waiters.
    pub seq: u64,
}

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

/// State shared by every resource kind: leases, the token counter, pending waits and the
/// remembered outcomes of recent requests.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Core {
    /// Live leases, by id. A hash map: every write request looks its lease up; nothing iterates
    /// it to decide, and the snapshot writes it in id order.
    #[serde(serialize_with = "super::snapshot::sorted")]
    pub leases: HashMap<LeaseId, Lease, foldhash::fast::RandomState>,
    /// The last token handed out (0 before the first grant).
    pub token_last: u64,
    /// Pending waits by agent, then request id: how a retry or an expiry finds its queue slot.
    #[serde(serialize_with = "super::snapshot::sorted")]
    pub waiting: NameMap<PendingWaits>,
    /// The waits of `waiting` that have a deadline, earliest first: derived from `waiting`,
    /// left out of the snapshot and rebuilt on restore.
    #[serde(skip)]
    pub deadlines: WaitDeadlines,
    /// Outcomes of recent completed requests, for retries.
    pub dedup: Dedup,
    /// Live leases and holds per agent, for the per-agent quotas (`quota.rs`). Derived from
    /// `leases`: not in the snapshot, rebuilt on restore.
    #[serde(skip)]
    pub usage: Usage,
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
}

/// What one lookup found out about a request's agent.
pub struct Known {
    /// The agent's dedup slot, if it has remembered outcomes.
    pub slot: Option<Slot>,
    /// The agent's shared name, if the machine knows the agent.
    pub name: Option<Text>,
}

/// Holds and waits as the resources record them, gathered for the cross-check against leases.
#[derive(Debug, Default)]
pub struct Occupancy {
    /// `(lease, resource, agent, token)` of every hold.
    pub holds: Vec<(LeaseId, ResourceKey, Text, u64)>,
    /// `(lease, resource, agent, request id)` of every waiter.
    pub waits: Vec<(LeaseId, ResourceKey, Text, String)>,
}

impl Occupancy {
    /// Records a hold.
    pub fn hold(&mut self, key: &ResourceKey, hold: &Hold) {
        self.holds
            .push((hold.lease, key.clone(), hold.agent.clone(), hold.token));
    }

    /// Records a waiter.
    pub fn wait(&mut self, key: &ResourceKey, waiter: &Waiter) {
        self.waits.push((
            waiter.lease,
            key.clone(),
            waiter.agent.clone(),
            waiter.request_id.clone(),
        ));
    }
}

impl Core {
    /// The lease named on the wire, if it is alive and belongs to `agent`.
    pub fn live_lease(&self, agent: &str, lease: &str) -> Result<LeaseId, Reply> {
        let not_found = || {
            Reply::refused(
                ErrorCode::LeaseNotFound,
                format!("lease {lease:?} does not exist (never granted, revoked or expired)"),
            )
        };
        let id = LeaseId::parse(lease).ok_or_else(not_found)?;
        let record = self.leases.get(&id).ok_or_else(not_found)?;
        // The request's agent is usually the very name the lease shares (both come from the
        // dedup memory), so the pointer comparison settles it without reading the bytes.
        if !std::ptr::eq(&*record.agent, agent) && &*record.agent != agent {
            return Err(Reply::refused(
                ErrorCode::Forbidden,
                format!("lease {lease} belongs to another agent"),
            ));
        }
        Ok(id)
    }

    /// The outcome to replay for a retried request (`Queued` while it still waits, the
    /// remembered reply once it completed), and what is known of the agent: its dedup slot
    /// (for [`Dedup::record`] of this request) and its shared name.
    pub fn recall(&self, agent: &str, request_id: &str) -> (Known, Option<Reply>) {
        let recall = self.dedup.recall(agent, request_id);
        let mut known = Known {
            slot: recall.slot,
            name: recall.agent.cloned(),
        };
        if let Some((name, waits)) = self.waiting.get_key_value(agent)
            && waits.contains_key(request_id)
        {
            known.name = Some(name.clone());
            return (known, Some(Reply::Queued));
        }
        (known, recall.reply.cloned())
    }

    /// Applies the dedup memory's agent bound: agents with a live lease are forgotten last.
    pub fn enforce_dedup(&mut self, limits: &super::Limits) {
        let Core { dedup, usage, .. } = self;
        dedup.enforce(limits, |agent| usage.has_lease(agent));
    }

    /// The sweep of idle agents from the dedup memory, at the end of entry `index`, when the
    /// entry moved the clock from `clock_before_ms` across a multiple of `dedup_idle_ms`.
    /// Agents with a live lease are never swept. The first entry of a machine
    /// (`clock_before_ms` is `None`) never sweeps: its clock jumps from 0 to the first stamp.
    pub fn sweep_idle_dedup(
        &mut self,
        limits: &super::Limits,
        index: u64,
        clock_before_ms: Option<u64>,
        clock_after_ms: u64,
    ) {
        let period_ms = limits.dedup_idle_ms.max(1);
        if clock_before_ms
            .is_some_and(|before_ms| before_ms / period_ms < clock_after_ms / period_ms)
        {
            let Core { dedup, usage, .. } = self;
            dedup.forget_idle(index, |agent| usage.has_lease(agent));
        }
    }

    /// Waiters per resource kind, from the pending-wait index (invariant 3: it indexes exactly
    /// the queued waiters), so the cost is the number of waiters, not of resources.
    pub fn waiter_counts(&self) -> WaiterCounts {
        let mut counts = WaiterCounts::default();
        for (_, wait) in self.waiting.values().flatten() {
            counts.0[wait.key.kind as usize] += 1;
        }
        counts
    }

    /// The resource a pending request waits on.
    pub fn waiting_key(&self, agent: &str, request_id: &str) -> Option<ResourceKey> {
        Some(self.waiting.get(agent)?.get(request_id)?.key.clone())
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
    /// new request's `wait_ms`), and the earlier request is answered `timeout` ("superseded").
    /// This is what a client that gave up on its request (a lost answer, a session in
    /// jeopardy) and asks again under a fresh id needs: its place, not a refusal. The caller
    /// renames the waiter in the resource's queue (`Queue::rename`) with the returned old id.
    pub fn take_over_wait(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        lease: LeaseId,
        agent: &Text,
        request_id: &str,
        wait_ms: Option<u64>,
    ) -> String {
        let record = self
            .leases
            .get_mut(&lease)
            .expect("the caller checked the lease is live");
        let old_id = record
            .waits
            .insert(key.clone(), request_id.to_string())
            .expect("the caller checked the lease waits on key");
        let deadline_ms = wait_ms.map(|wait_ms| ctx.now_ms.saturating_add(wait_ms));
        let waits = self.waiting.entry(agent.clone()).or_default();
        if let Some(old_deadline_ms) = waits.remove(&old_id).and_then(|wait| wait.deadline_ms) {
            self.deadlines.remove(old_deadline_ms, agent, &old_id);
        }
        waits.insert(
            request_id.to_string(),
            Wait {
                lease,
                key: key.clone(),
                deadline_ms,
            },
        );
        if let Some(deadline_ms) = deadline_ms {
            self.deadlines.insert(deadline_ms, agent, request_id);
        }
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

    fn next_token(&mut self, index: u64) -> u64 {
        let token = (self.token_last + 1).max(index << TOKEN_INDEX_SHIFT);
        self.token_last = token;
        token
    }

    /// Grants `key` at once to the requester: the caller stores the returned hold.
    pub fn grant_now(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        lease: LeaseId,
        agent: &Text,
        permits: u32,
    ) -> Hold {
        let token = self.next_token(ctx.index);
        self.leases
            .get_mut(&lease)
            .expect("the caller checked the lease is live")
            .holds
            .insert(key.clone());
        self.usage.held(agent);
        ctx.events.push(Event::Granted {
            key: key.clone(),
            agent: agent.clone(),
            lease,
            token,
            waited_ms: 0,
            queued: false,
        });
        Hold {
            lease,
            agent: agent.clone(),
            token,
            permits,
            since_ms: ctx.now_ms,
        }
    }

    /// Records a new waiter for `key` and emits [`Event::Queued`]: the caller appends the
    /// waiter to the resource's queue. A `wait_ms` gives the wait its deadline, `now + wait_ms`
    /// on the machine's clock (`wait_deadline.rs`).
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        lease: LeaseId,
        agent: &Text,
        request_id: &str,
        permits: u32,
        wait_ms: Option<u64>,
    ) -> Waiter {
        let deadline_ms = wait_ms.map(|wait_ms| ctx.now_ms.saturating_add(wait_ms));
        if let Some(deadline_ms) = deadline_ms {
            self.deadlines.insert(deadline_ms, agent, request_id);
        }
        self.leases
            .get_mut(&lease)
            .expect("the caller checked the lease is live")
            .waits
            .insert(key.clone(), request_id.to_string());
        self.waiting.entry(agent.clone()).or_default().insert(
            request_id.to_string(),
            Wait {
                lease,
                key: key.clone(),
                deadline_ms,
            },
        );
        ctx.events.push(Event::Queued {
            key: key.clone(),
            agent: agent.clone(),
            request_id: request_id.to_string(),
        });
        Waiter {
            lease,
            agent: agent.clone(),
            request_id: request_id.to_string(),
            permits,
            since_ms: ctx.now_ms,
            seq: ctx.index,
        }
    }

    /// Grants `key` to a waiter taken from the head of its queue, and answers its request. The
    /// waiter's lease must be alive: leases are ended (and their waiters removed) before any
    /// grant pass runs.
    pub fn grant_waiter(&mut self, ctx: &mut Ctx, key: &ResourceKey, waiter: Waiter) -> Hold {
        let token = self.next_token(ctx.index);
        let record = self
            .leases
            .get_mut(&waiter.lease)
            .expect("a queued waiter's lease is alive: lease ends remove their waiters first");
        record.waits.remove(key);
        record.holds.insert(key.clone());
        self.usage.held(&waiter.agent);
        self.forget_wait(&waiter);
        ctx.events.push(Event::Granted {
            key: key.clone(),
            agent: waiter.agent.clone(),
            lease: waiter.lease,
            token,
            waited_ms: ctx.now_ms.saturating_sub(waiter.since_ms),
            queued: true,
        });
        self.respond(
            ctx,
            key,
            &waiter.agent,
            waiter.request_id,
            Reply::Granted { token },
        );
        Hold {
            lease: waiter.lease,
            agent: waiter.agent,
            token,
            permits: waiter.permits,
            since_ms: ctx.now_ms,
        }
    }

    /// Answers a waiter taken out of its queue without a grant (timeout, lease ended).
    pub fn answer_waiter(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        waiter: Waiter,
        code: ErrorCode,
        message: &str,
    ) {
        if let Some(record) = self.leases.get_mut(&waiter.lease) {
            record.waits.remove(key);
        }
        self.forget_wait(&waiter);
        let reply = Reply::refused(code, message);
        self.respond(ctx, key, &waiter.agent, waiter.request_id, reply);
    }

    /// Records the end of a hold in its lease (if the lease is still there) and in the events.
    pub fn release(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        hold: &Hold,
        reason: ReleaseReason,
    ) {
        if let Some(record) = self.leases.get_mut(&hold.lease) {
            record.holds.remove(key);
        }
        self.usage.released(&hold.agent);
        ctx.events.push(Event::Released {
            key: key.clone(),
            agent: hold.agent.clone(),
            lease: hold.lease,
            token: hold.token,
            held_ms: ctx.now_ms.saturating_sub(hold.since_ms),
            reason,
        });
    }

    fn forget_wait(&mut self, waiter: &Waiter) {
        if let Some(waits) = self.waiting.get_mut(&waiter.agent) {
            if let Some(deadline_ms) = waits
                .remove(&waiter.request_id)
                .and_then(|wait| wait.deadline_ms)
            {
                self.deadlines
                    .remove(deadline_ms, &waiter.agent, &waiter.request_id);
            }
            if waits.is_empty() {
                self.waiting.remove(&waiter.agent);
            }
        }
    }

    /// Answers a request that waited on `key`: remembers the reply for retries and emits it.
    /// The request id is moved into the event, so answering copies it once (for the dedup
    /// memory).
    fn respond(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        agent: &Text,
        request_id: String,
        reply: Reply,
    ) {
        self.dedup
            .record(None, agent, request_id.clone(), reply.clone(), ctx.index);
        ctx.events.push(Event::Respond {
            key: key.clone(),
            agent: agent.clone(),
            request_id,
            reply,
        });
    }

    /// Invariants 3 and 4 (internal consistency) and the dedup bounds.
    pub fn check_invariants(&self, index: u64) -> Result<(), InvariantViolation> {
        if self.token_last > 0 && (self.token_last >> TOKEN_INDEX_SHIFT) > index {
            return Err(violation!(
                "token_last {} is ahead of the applied index {index}",
                self.token_last
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
                if lease.waits.get(&wait.key) != Some(request_id) {
                    return Err(violation!(
                        "pending wait {agent}/{request_id} on {} is not in lease {}",
                        wait.key,
                        wait.lease
                    ));
                }
            }
        }
        for (id, lease) in &self.leases {
            if id.0 > index {
                return Err(violation!("lease {id} is from the future (index {index})"));
            }
            for (key, request_id) in &lease.waits {
                let indexed = self
                    .waiting
                    .get(&lease.agent)
                    .and_then(|waits| waits.get(request_id));
                if indexed.is_none_or(|wait| wait.lease != *id || wait.key != *key) {
                    return Err(violation!(
                        "lease {id} waits for {key} as {request_id:?}, but the index disagrees"
                    ));
                }
            }
        }
        self.deadlines.check_invariants(&self.waiting)?;
        self.usage.check(&self.leases)?;
        self.dedup.check_invariants()
    }

    /// Invariants 1, 2 and 4 against what the resources record.
    pub fn check_occupancy(&self, occupancy: &Occupancy) -> Result<(), InvariantViolation> {
        let mut holds_seen = BTreeSet::new();
        for (lease, key, agent, token) in &occupancy.holds {
            let Some(record) = self.leases.get(lease) else {
                return Err(violation!(
                    "{key} is held (token {token}) by dead lease {lease}"
                ));
            };
            if record.agent != *agent {
                return Err(violation!(
                    "{key} hold names agent {agent}, lease {lease} is {}",
                    record.agent
                ));
            }
            if !record.holds.contains(key) {
                return Err(violation!(
                    "{key} is held by lease {lease}, which does not list it"
                ));
            }
            if *token > self.token_last {
                return Err(violation!(
                    "{key} token {token} is above token_last {}",
                    self.token_last
                ));
            }
            if !holds_seen.insert((*lease, key.clone())) {
                return Err(violation!("lease {lease} holds {key} twice"));
            }
        }
        let listed_holds: usize = self.leases.values().map(|lease| lease.holds.len()).sum();
        if listed_holds != holds_seen.len() {
            return Err(violation!(
                "leases list {listed_holds} holds, resources have {}",
                holds_seen.len()
            ));
        }
        let mut waits_seen = BTreeSet::new();
        for (lease, key, agent, request_id) in &occupancy.waits {
            let Some(record) = self.leases.get(lease) else {
                return Err(violation!("{key} has a waiter under dead lease {lease}"));
            };
            if record.agent != *agent || record.waits.get(key) != Some(request_id) {
                return Err(violation!(
                    "{key} waiter {agent}/{request_id} is not what lease {lease} records"
                ));
            }
            if !waits_seen.insert((agent.clone(), request_id.clone())) {
                return Err(violation!("waiter {agent}/{request_id} is queued twice"));
            }
        }
        let listed_waits: usize = self.leases.values().map(|lease| lease.waits.len()).sum();
        let indexed_waits: usize = self.waiting.values().map(PendingWaits::len).sum();
        if listed_waits != waits_seen.len() || indexed_waits != waits_seen.len() {
            return Err(violation!(
                "leases list {listed_waits} waits, the index {indexed_waits}, the queues {}",
                waits_seen.len()
            ));
        }
        Ok(())
    }
}
