//! Holds, waiters and fencing tokens: the bookkeeping every resource kind shares.
//!
//! A resource kind (lock, semaphore, waypoint) decides *whether* to grant; this file does the
//! granting, so a grant, a queue slot or a release is recorded the same way for every kind, in
//! the lease, in the pending-wait index, in the dedup memory and in the events.
//!
//! [`Core`] gathers the state every kind shares; each concept keeps its part and its
//! invariants in its own file: leases (`lease.rs`), the pending-wait index (`waiting.rs`) and
//! its deadlines (`wait_deadline.rs`), remembered outcomes (`dedup.rs`), per-agent counts
//! (`quota.rs`). This file keeps the grants themselves and the token counter.
//!
//! Invariants (checked by [`Core::check_invariants`] and [`Core::check_occupancy`]):
//! 1. Every hold and every waiter belongs to a live lease of the same agent (DESIGN.md §5.1: a
//!    grant is applied only if the waiter's lease is alive in that same entry).
//! 2. A lease's `holds` and `waits` list exactly the holds and waiters the resources have, and
//!    the pending-wait index lists each waiting request once (a multi-lock once, with all its
//!    locks, though it waits in each of their queues: `waiting.rs`).
//! 3. Tokens strictly increase across all grants: every token is at most `token_last`, and a new
//!    token is `max(token_last + 1, position << 16)`, so it also says which command granted it.
//!    A multi-lock's grant is one grant: one token on every lock it takes.
//! 4. A hold granted with a `max_hold_ms` carries its deadline (grant time + `max_hold_ms`), and
//!    the max-hold index lists exactly those holds under it (`max_hold.rs`); a multi-lock's
//!    holds share one deadline, each lock's hold indexed under it.

use std::collections::{BTreeSet, HashMap};

use hivekeeper_protocol::{ErrorCode, HolderInfo, LockMode};
use serde::{Deserialize, Serialize};

use crate::dedup::Dedup;
use crate::lease::{Lease, LeaseId};
use crate::max_hold::HoldEnds;
use crate::quota::Usage;
use crate::wait_deadline::WaitDeadlines;
use crate::waiting::{PendingWaits, Wait, WaiterCounts};
use crate::{Ctx, Event, InvariantViolation, NameMap, ReleaseReason, Reply, ResourceKey, Text};

/// Tokens are `position << TOKEN_INDEX_SHIFT` (plus a count when one command grants several), so
/// `token >> 16` is the log position of the granting command ([`super::LogMeta::index`]). 2^48
/// positions is centuries at any rate a Raft log sustains.
pub const TOKEN_INDEX_SHIFT: u32 = 16;

/// A request for a resource: who asks, under which request id and lease, and how long it may
/// wait. The lease is `L`: the wire id as the request gave it ([`Acquire`]), then the live
/// [`LeaseId`] once [`Core::claim`] checked it, what a grant or a queue slot is recorded under.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a, L = LeaseId> {
    /// The asking agent.
    pub agent: &'a Text,
    /// The asking request's id.
    pub request_id: &'a str,
    /// The lease it asks under.
    pub lease: L,
    /// How long it may wait in a queue; `None`: until granted or its lease ends.
    pub wait_ms: Option<u64>,
    /// How long the hold lasts once granted (`max_hold.rs`); `None`: while its lease lives.
    pub max_hold_ms: Option<u64>,
}

/// A [`Claim`] as the request gave it, its lease not yet checked.
pub type Acquire<'a> = Claim<'a, &'a str>;

impl<'a> Acquire<'a> {
    /// `agent`'s request `request_id` under `lease`, waiting at most `wait_ms`.
    pub fn new(agent: &'a Text, request_id: &'a str, lease: &'a str, wait_ms: Option<u64>) -> Self {
        Claim {
            agent,
            request_id,
            lease,
            wait_ms,
            max_hold_ms: None,
        }
    }

    /// The same request, its hold bounded to `max_hold_ms` once granted (`None`: unbounded).
    pub fn max_hold(self, max_hold_ms: Option<u64>) -> Self {
        Claim {
            max_hold_ms,
            ..self
        }
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
    /// When its `max_hold_ms` ends it, whether or not its lease lives (machine clock,
    /// `max_hold.rs`); absent: while its lease lives. Absent from the snapshot when unset, so
    /// holds without a bound keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_deadline_ms: Option<u64>,
}

impl Hold {
    /// A hold of `permits` under `token` for `lease` of `agent`, granted by this entry.
    pub fn new(ctx: &Ctx, lease: LeaseId, agent: &Text, token: u64, permits: u32) -> Hold {
        Hold {
            lease,
            agent: agent.clone(),
            token,
            permits,
            since_ms: ctx.now_ms,
            max_hold_deadline_ms: None,
        }
    }

    /// The same hold, ended by its max-hold `max_hold_ms` after this entry (`None`: while its
    /// lease lives).
    pub fn bounded(self, ctx: &Ctx, max_hold_ms: Option<u64>) -> Hold {
        Hold {
            max_hold_deadline_ms: max_hold_ms.map(|ms| ctx.now_ms.saturating_add(ms)),
            ..self
        }
    }

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
            value: None,
            mode: LockMode::Exclusive,
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
    /// The mode a lock waiter asks for; exclusive (and left out of the snapshot) for every
    /// other kind.
    #[serde(default, skip_serializing_if = "LockMode::is_exclusive")]
    pub mode: LockMode,
}

/// State shared by every resource kind, each part kept by its concept's file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Core {
    /// Live leases, by id (`lease.rs`). A hash map: every write request looks its lease up;
    /// nothing iterates it to decide, and the snapshot writes it in id order.
    #[serde(serialize_with = "super::snapshot::sorted")]
    pub leases: HashMap<LeaseId, Lease, foldhash::fast::RandomState>,
    /// The last token handed out (0 before the first grant; invariant 3).
    pub token_last: u64,
    /// Pending waits by agent, then request id: how a retry or an expiry finds its queue slot
    /// (`waiting.rs`).
    #[serde(serialize_with = "super::snapshot::sorted")]
    pub waiting: NameMap<PendingWaits>,
    /// The waits of `waiting` that have a deadline, earliest first (`wait_deadline.rs`):
    /// derived from `waiting`, left out of the snapshot and rebuilt on restore.
    #[serde(skip)]
    pub deadlines: WaitDeadlines,
    /// How many requests of `waiting` wait, per kind (`waiting.rs`, invariant 4): derived,
    /// left out of the snapshot and rebuilt on restore.
    #[serde(skip)]
    pub waiters_per_kind: WaiterCounts,
    /// Outcomes of recent completed requests, for retries (`dedup.rs`).
    pub dedup: Dedup,
    /// Live leases and holds per agent, for the per-agent quotas (`quota.rs`). Derived from
    /// `leases`: not in the snapshot, rebuilt on restore.
    #[serde(skip)]
    pub usage: Usage,
    /// The holds that have a max-hold deadline, earliest first (`max_hold.rs`): derived from
    /// the holds, left out of the snapshot and rebuilt on restore.
    #[serde(skip)]
    pub hold_ends: HoldEnds,
}

/// Holds and waits as the resources record them, gathered for the cross-check against leases.
#[derive(Debug, Default)]
pub struct Occupancy {
    /// `(lease, resource, agent, token)` of every hold.
    pub holds: Vec<(LeaseId, ResourceKey, Text, u64)>,
    /// `(lease, resource, agent, request id)` of every waiter.
    pub waits: Vec<(LeaseId, ResourceKey, Text, String)>,
    /// `(max-hold deadline, resource, lease)` of every hold that has one (`max_hold.rs`).
    pub hold_ends: Vec<(u64, ResourceKey, LeaseId)>,
}

impl Occupancy {
    /// Records a hold.
    pub fn hold(&mut self, key: &ResourceKey, hold: &Hold) {
        self.holds
            .push((hold.lease, key.clone(), hold.agent.clone(), hold.token));
        if let Some(deadline_ms) = hold.max_hold_deadline_ms {
            self.hold_ends.push((deadline_ms, key.clone(), hold.lease));
        }
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
    /// The [`Claim`] of `acquire`, or the refusal when its lease is not live or not the
    /// agent's.
    pub fn claim<'a>(&self, acquire: &Acquire<'a>) -> Result<Claim<'a>, Reply> {
        Ok(Claim {
            agent: acquire.agent,
            lease: self.live_lease(acquire.agent, acquire.lease)?,
            request_id: acquire.request_id,
            wait_ms: acquire.wait_ms,
            max_hold_ms: acquire.max_hold_ms,
        })
    }

    /// The next token, also a key change's revision (one space, invariant 3).
    pub(crate) fn next_token(&mut self, index: u64) -> u64 {
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
        self.grant(ctx, key, Hold::new(ctx, lease, agent, token, permits), None)
    }

    /// Grants `key` at once to `claim`'s request, bounded by its `max_hold_ms`: the caller
    /// stores the returned hold.
    pub fn grant_claim(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        claim: &Claim<'_>,
        permits: u32,
    ) -> Hold {
        self.grant_claim_all(ctx, std::slice::from_ref(key), claim, permits)
    }

    /// [`Core::grant_claim`] of every one of `keys` (a multi-lock's names, in name order) at
    /// once, under one token and one max-hold deadline: the caller stores the returned hold
    /// on each.
    pub fn grant_claim_all(
        &mut self,
        ctx: &mut Ctx,
        keys: &[ResourceKey],
        claim: &Claim<'_>,
        permits: u32,
    ) -> Hold {
        let token = self.next_token(ctx.index);
        let hold = Hold::new(ctx, claim.lease, claim.agent, token, permits);
        let hold = hold.bounded(ctx, claim.max_hold_ms);
        let (last, others) = keys
            .split_last()
            .expect("a request asks for at least one resource");
        for key in others {
            self.grant(ctx, key, hold.clone(), None);
        }
        self.grant(ctx, last, hold, None)
    }

    /// Records `hold`, a grant of `key` made by this entry under a token the caller took, in
    /// its lease, the per-agent counts and [`Event::Granted`] (with how long it waited when it
    /// comes from a queue, queued at `queued_ms`), and its max-hold deadline if it has one in
    /// the max-hold index (`max_hold.rs`): the hold, for the caller to store. Every grant
    /// takes a token of its own ([`Self::next_token`]), except the members of a barrier's
    /// round, who share the round's generation (`barrier.rs`).
    pub fn grant(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        hold: Hold,
        queued_ms: Option<u64>,
    ) -> Hold {
        self.leases
            .get_mut(&hold.lease)
            .expect("the lease is alive: checked by the caller, or kept by its queued waiter")
            .holds
            .insert(key.clone());
        self.usage.held(&hold.agent);
        ctx.events.push(Event::Granted {
            key: key.clone(),
            agent: hold.agent.clone(),
            lease: hold.lease,
            token: hold.token,
            waited_ms: queued_ms.map_or(0, |since_ms| ctx.now_ms.saturating_sub(since_ms)),
            queued: queued_ms.is_some(),
        });
        if let Some(deadline_ms) = hold.max_hold_deadline_ms {
            self.hold_ends.insert(deadline_ms, key, hold.lease);
        }
        hold
    }

    /// Records a new waiter for `key` and emits [`Event::Queued`]: the caller appends the
    /// waiter to the resource's queue. A `wait_ms` gives the wait its deadline, `now + wait_ms`
    /// on the machine's clock (`wait_deadline.rs`).
    pub fn enqueue(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        claim: &Claim<'_>,
        permits: u32,
    ) -> Waiter {
        self.enqueue_all(ctx, std::slice::from_ref(key), claim, permits)
    }

    /// [`Core::enqueue`] of one request for every one of `keys` (a multi-lock's names, in name
    /// order) as a unit: one request id waiting in each key's queue, one pending wait (under
    /// the first key, the others beside it) and one [`Event::Queued`], for the first key. The
    /// caller appends the waiter to every key's queue.
    pub fn enqueue_all(
        &mut self,
        ctx: &mut Ctx,
        keys: &[ResourceKey],
        claim: &Claim<'_>,
        permits: u32,
    ) -> Waiter {
        let Claim {
            agent,
            lease,
            request_id,
            ..
        } = *claim;
        let (key, others) = keys
            .split_first()
            .expect("a request waits for at least one resource");
        let others = others.iter().map(|other| other.name.clone()).collect();
        let wait = Wait::of(claim, key, others, ctx.now_ms);
        if let Some(deadline_ms) = wait.deadline_ms {
            self.deadlines.insert(deadline_ms, agent, request_id);
        }
        let record = self
            .leases
            .get_mut(&lease)
            .expect("the caller checked the lease is live");
        for key in keys {
            record.waits.insert(key.clone(), request_id.to_string());
        }
        self.waiters_per_kind.add(key.kind);
        self.waiting
            .entry(agent.clone())
            .or_default()
            .insert(request_id.to_string(), wait);
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
            mode: LockMode::Exclusive,
        }
    }

    /// Grants `key` to a waiter taken from the head of its queue, and answers its request. The
    /// waiter's lease must be alive: leases are ended (and their waiters removed) before any
    /// grant pass runs.
    pub fn grant_waiter(&mut self, ctx: &mut Ctx, key: &ResourceKey, waiter: Waiter) -> Hold {
        let token = self.next_token(ctx.index);
        self.admit_waiter(ctx, key, waiter, token, Reply::Granted { token })
    }

    /// Grants `key` under `token` to a waiter taken out of its queue, and answers its request
    /// `reply`: [`Self::grant_waiter`] with a token the caller took (the members of a barrier's
    /// round share one). The waiter's lease must be alive, as there.
    pub fn admit_waiter(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        waiter: Waiter,
        token: u64,
        reply: Reply,
    ) -> Hold {
        let hold = Hold::new(ctx, waiter.lease, &waiter.agent, token, waiter.permits);
        let hold = hold.bounded(ctx, self.waiting_max_hold(&waiter));
        let hold = self.grant(ctx, key, hold, Some(waiter.since_ms));
        self.answer(ctx, key, waiter, reply);
        hold
    }

    /// [`Core::grant_waiter`] of a request that waited for every one of `keys` (its pending
    /// wait's keys, [`Core::wait_keys`]), taken from the head of each of their queues: one
    /// token and one max-hold deadline for all of them, one answer.
    pub fn grant_waiter_all(
        &mut self,
        ctx: &mut Ctx,
        keys: &[ResourceKey],
        waiter: Waiter,
    ) -> Hold {
        let token = self.next_token(ctx.index);
        let hold = Hold::new(ctx, waiter.lease, &waiter.agent, token, waiter.permits);
        let hold = hold.bounded(ctx, self.waiting_max_hold(&waiter));
        for key in keys {
            self.grant(ctx, key, hold.clone(), Some(waiter.since_ms));
        }
        self.answer_all(ctx, keys, waiter, Reply::Granted { token });
        hold
    }

    /// Answers a waiter taken out of the queues of `keys` (its pending wait's keys) without a
    /// grant (timeout, lease ended).
    pub fn answer_waiter(
        &mut self,
        ctx: &mut Ctx,
        keys: &[ResourceKey],
        waiter: Waiter,
        code: ErrorCode,
        message: &str,
    ) {
        self.answer_all(ctx, keys, waiter, Reply::refused(code, message));
    }

    /// Answers a waiter taken out of its queue with `reply`: its wait leaves its lease (if the
    /// lease is still there) and the pending-wait index.
    pub fn answer(&mut self, ctx: &mut Ctx, key: &ResourceKey, waiter: Waiter, reply: Reply) {
        self.answer_all(ctx, std::slice::from_ref(key), waiter, reply);
    }

    /// [`Core::answer`] of a request taken out of the queue of every one of `keys` (a
    /// multi-lock's): answered once, under the first.
    fn answer_all(&mut self, ctx: &mut Ctx, keys: &[ResourceKey], waiter: Waiter, reply: Reply) {
        if let Some(record) = self.leases.get_mut(&waiter.lease) {
            for key in keys {
                record.waits.remove(key);
            }
        }
        self.forget_wait(&waiter);
        self.respond(ctx, &keys[0], &waiter.agent, waiter.request_id, reply);
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
        if let Some(deadline_ms) = hold.max_hold_deadline_ms {
            self.hold_ends.remove(deadline_ms, key, hold.lease);
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

    /// Answers a request that waited on `key`: remembers the reply for retries and emits it.
    /// The request id is moved into the event, so answering copies it once (for the dedup
    /// memory).
    pub(crate) fn respond(
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

    /// Invariant 3's bound, leases not from the future, and the concepts' own checks of their
    /// parts.
    pub fn check_invariants(&self, index: u64) -> Result<(), InvariantViolation> {
        if self.token_last > 0 && (self.token_last >> TOKEN_INDEX_SHIFT) > index {
            return Err(violation!(
                "token_last {} is ahead of the applied index {index}",
                self.token_last
            ));
        }
        for id in self.leases.keys() {
            if id.0 > index {
                return Err(violation!("lease {id} is from the future (index {index})"));
            }
        }
        self.check_waiting()?;
        self.deadlines.check_invariants(&self.waiting)?;
        self.usage.check(&self.leases)?;
        self.dedup.check_invariants()
    }

    /// Invariants 1, 2, 3 and 4 against what the resources record.
    pub fn check_occupancy(&self, occupancy: &Occupancy) -> Result<(), InvariantViolation> {
        self.hold_ends.check_invariants(&occupancy.hold_ends)?;
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
            if !waits_seen.insert((agent.clone(), request_id.clone(), key.clone())) {
                return Err(violation!(
                    "waiter {agent}/{request_id} is queued twice on {key}"
                ));
            }
        }
        let listed_waits: usize = self.leases.values().map(|lease| lease.waits.len()).sum();
        let indexed_waits: usize = self
            .waiting
            .values()
            .flatten()
            .map(|(_, wait)| 1 + wait.others.len())
            .sum();
        if listed_waits != waits_seen.len() || indexed_waits != waits_seen.len() {
            return Err(violation!(
                "leases list {listed_waits} waits, the index {indexed_waits}, the queues {}",
                waits_seen.len()
            ));
        }
        Ok(())
    }
}
