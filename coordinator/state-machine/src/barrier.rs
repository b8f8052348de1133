//! Double barriers, reusable at once: a round of `count` members passes in the one entry where
//! its last member arrives, and ends in the one entry where its last member leaves; the next
//! round fills meanwhile.
//!
//! ```text
//!  barrier.enter ─▶ the filling round: count fixed by its first arrival, arrivals queued
//!                   the count-th arrival ─▶ every member passes in this entry, each answered
//!                   {generation: G}, G = this entry's revision ─▶ passed round G
//!  barrier.leave ─▶ a member of round G leaves and waits for the others (queued)
//!                   the last member out ─▶ every leaver answered {generation: G} in this
//!                   entry; round G is over
//! ```
//!
//! A member waits as every waiter does (`grant.rs`, `wait_deadline.rs`): in arrival order,
//! under its request id, with a replicated `wait_ms` deadline. An arrival that times out or
//! whose lease ends is out of the round, which needs one more arrival: a dead or departed
//! member is never counted. A passed member holds the barrier (a hold in its lease, as a lock's
//! holder does), so a lease end finds it and counts it as left, and the others are not stuck;
//! a leave that times out leaves the member in its round, not left (it may leave again), so
//! no answer of a round's phase disagrees with another: every member that passes a phase is
//! answered in the entry that completes it.
//!
//! The generation is the revision the completing entry takes (`Core::next_token`): unique,
//! increasing from round to round also after an unused barrier was forgotten, and in the one
//! revision space of tokens and keys. Every member of a round holds it as its token, so
//! `fence.check` of a generation says whether that round is still under way.
//!
//! A lease is in one place of a barrier at a time. Entering again while a member of a passed
//! round answers that round's generation (as a second `lock.acquire` answers the token held:
//! a client that lost the answer gets it), and while leaving one is `bad_request`: a member
//! leaves its round before it enters the next. Entering again while an arrival of the filling
//! round takes the wait over, or is `would_block` with `wait_ms: 0` (docs/PROTOCOL.md §7).
//!
//! Invariants (checked by [`Resource::check_invariants`]):
//! 1. A barrier in the map has a filling round or a passed round: one with nobody is
//!    forgotten, in the entry that empties it.
//! 2. A filling round has 1 to `count - 1` arrivals (the `count`-th passes it in its own
//!    entry), a FIFO queue in arrival order with one slot per lease (`fifo.rs`, invariants 1
//!    and 2). `count` was at most `waiters_per_resource_max + 1` when the round began, so the
//!    round's waiters keep within the waiter bound (`fifo.rs`, invariant 3).
//! 3. Passed rounds are in strictly increasing generation, each with a member; every member
//!    holds its round's generation as its token.
//! 4. A round's leavers are members, in the order they left, and fewer than its members: the
//!    entry in which the last member leaves (or the last member not leaving goes with its
//!    lease) ends the round.
//! 5. A lease is in one place of a barrier: a member of one round (leaving or not), or an
//!    arrival of the filling round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Serialize};

use crate::fifo::Queue;
use crate::grant::{Acquire, Claim, Core, Hold, Occupancy, Waiter};
use crate::resource::{Listed, Resource, list_by_name};
use crate::{
    Ctx, Decision, InvariantViolation, LeaseId, Limits, NameMap, ReleaseReason, Reply, ResourceKey,
    StateMachine, Text,
};

/// One barrier in use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Barrier {
    /// The round filling now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filling: Option<Filling>,
    /// Rounds that passed and still have members, oldest first (invariant 3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed: Vec<Round>,
}

/// The round filling: who has arrived, waiting for the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Filling {
    /// How many members the round has, fixed by its first arrival.
    pub count: u32,
    /// The arrivals, first first (invariant 2).
    pub arrivals: Queue,
}

/// A round that passed, until its last member leaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// The revision of the entry that filled the round, its members' token.
    pub generation: u64,
    /// Members still in the round, leaving or not, by lease.
    pub members: BTreeMap<LeaseId, Hold>,
    /// Members that sent `barrier.leave` and wait for the others, in the order they left.
    #[serde(default, skip_serializing_if = "Queue::is_empty")]
    pub leaving: Queue,
}

impl Barrier {
    /// The passed round `lease` is a member of.
    fn round_of(&self, lease: LeaseId) -> Option<usize> {
        self.passed
            .iter()
            .position(|round| round.members.contains_key(&lease))
    }

    /// How many have arrived in the filling round.
    fn arrived(&self) -> usize {
        self.filling
            .as_ref()
            .map_or(0, |filling| filling.arrivals.len())
    }

    /// Whether nobody is in the barrier (invariant 1: it is forgotten).
    fn is_idle(&self) -> bool {
        self.filling.is_none() && self.passed.is_empty()
    }
}

impl Round {
    /// Whether every member still in the round has left: it is over (invariant 4).
    fn is_over(&self) -> bool {
        self.members.len() == self.leaving.len()
    }

    /// The members that have not left, for `inspect`.
    fn staying(&self) -> impl Iterator<Item = &Hold> {
        let leaving: BTreeSet<LeaseId> = self.leaving.iter().map(|w| w.lease).collect();
        self.members
            .values()
            .filter(move |hold| !leaving.contains(&hold.lease))
    }
}

impl StateMachine {
    /// `barrier.enter`: passes the filling round when this arrival completes it, queues the
    /// arrival otherwise, or refuses (`Err`, nothing changed).
    pub(crate) fn barrier_enter(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: String,
        count: u32,
    ) -> Decision {
        let claim = self.core.claim(&acquire)?;
        let (agent, lease, wait_ms) = (claim.agent, claim.lease, claim.wait_ms);
        let name: Text = Arc::from(name);
        let key = ResourceKey::new(ResourceKind::Barrier, &name);
        let barrier = self.barriers.get(&name);
        if let Some(round) = barrier.and_then(|b| b.round_of(lease).map(|at| &b.passed[at])) {
            return self.entered_again(&key, lease, round);
        }
        let (exists, arrived) = (barrier.is_some(), barrier.map_or(0, Barrier::arrived));
        check_count(count, &self.limits)?;
        if let Some(filling) = barrier.and_then(|b| b.filling.as_ref())
            && filling.count != count
        {
            return Err(Reply::refused(
                ErrorCode::BadRequest,
                format!(
                    "barrier {name:?} is filling a round of {} members, the request says {count}",
                    filling.count
                ),
            ));
        }
        if self.core.is_waiting(lease, &key) {
            // Not a member (above), so an arrival of the filling round.
            return self.arrive_again(ctx, &key, &claim);
        }
        self.core.holds_quota(agent, &self.limits)?;
        if !exists {
            self.resources_full()?;
        }
        if arrived + 1 == count as usize {
            return Ok(self.pass_round(ctx, &key, &claim));
        }
        if wait_ms == Some(0) {
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!("barrier {name:?} has {arrived} of the {count} members of its round"),
            ));
        }
        self.core.waits_quota(lease, &self.limits)?;
        let waiter = self.core.enqueue(ctx, &key, &claim, 1);
        let barrier = self.barriers.entry(name).or_default();
        let filling = barrier.filling.get_or_insert_with(|| Filling {
            count,
            arrivals: Queue::default(),
        });
        filling.arrivals.push_back(waiter);
        Ok(Reply::Queued)
    }

    /// The answer to a member of passed `round` that enters again: the round's generation,
    /// or a refusal while its leave waits.
    fn entered_again(&self, key: &ResourceKey, lease: LeaseId, round: &Round) -> Decision {
        let generation = round.generation;
        if !round.leaving.has_lease(lease) {
            return Ok(Reply::BarrierPassed { generation });
        }
        let request_id = self.core.waiting_id(lease, key);
        Err(Reply::refused(
            ErrorCode::BadRequest,
            format!(
                "lease {lease} is leaving round {generation} of {key} (request id \
                 {request_id:?}): enter again once that leave is answered"
            ),
        ))
    }

    /// A second arrival in the filling round by a lease that waits in it, under a new request
    /// id: `would_block` with `wait_ms: 0`, else the wait taken over (docs/PROTOCOL.md §7).
    fn arrive_again(&mut self, ctx: &mut Ctx, key: &ResourceKey, claim: &Claim<'_>) -> Decision {
        if claim.wait_ms == Some(0) {
            let old_id = self.core.waiting_id(claim.lease, key);
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!(
                    "the round of {key} is not full (this lease already waits in it, request id \
                     {old_id:?})"
                ),
            ));
        }
        let old_id = self.core.take_over_wait(ctx, key, claim);
        let filling = self
            .barriers
            .get_mut(&key.name)
            .and_then(|barrier| barrier.filling.as_mut())
            .expect("invariant 5: a waiting non-member is an arrival of the filling round");
        filling
            .arrivals
            .rename(claim.agent, &old_id, claim.request_id);
        Ok(Reply::Queued)
    }

    /// The arrival that completes the filling round: every member passes in this entry, the
    /// queued ones answered in arrival order, all under one generation, this entry's revision.
    fn pass_round(&mut self, ctx: &mut Ctx, key: &ResourceKey, claim: &Claim<'_>) -> Reply {
        let StateMachine { barriers, core, .. } = self;
        let generation = core.next_token(ctx.index);
        let reply = Reply::BarrierPassed { generation };
        let barrier = barriers.entry(key.name.clone()).or_default();
        let mut arrivals = barrier
            .filling
            .take()
            .map(|filling| filling.arrivals)
            .unwrap_or_default();
        let mut members = BTreeMap::new();
        while let Some(waiter) = arrivals.pop_front() {
            let hold = core.admit_waiter(ctx, key, waiter, generation, reply.clone());
            members.insert(hold.lease, hold);
        }
        let hold = Hold::new(ctx, claim.lease, claim.agent, generation, 1);
        members.insert(claim.lease, core.grant(ctx, key, hold, None));
        barrier.passed.push(Round {
            generation,
            members,
            leaving: Queue::default(),
        });
        reply
    }

    /// `barrier.leave`: ends the lease's round when it is the last member to leave, queues
    /// the leave otherwise, or refuses (`Err`, nothing changed). Never refused for a quota: a
    /// member leaves at most once, so its round bounds the leaves.
    pub(crate) fn barrier_leave(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: String,
    ) -> Decision {
        let claim = self.core.claim(&acquire)?;
        let (agent, lease, wait_ms) = (claim.agent, claim.lease, claim.wait_ms);
        let StateMachine { barriers, core, .. } = self;
        let member = barriers
            .get_key_value(name.as_str())
            .and_then(|(held_name, barrier)| Some((held_name.clone(), barrier.round_of(lease)?)));
        let Some((held_name, at)) = member else {
            let message = format!("lease {lease} is in no passed round of barrier {name:?}");
            return Err(Reply::refused(ErrorCode::NotHolder, message));
        };
        let key = ResourceKey::new(ResourceKind::Barrier, &held_name);
        let barrier = barriers.get_mut(&held_name).expect("found above");
        let round = &mut barrier.passed[at];
        let generation = round.generation;
        if round.leaving.has_lease(lease) {
            if wait_ms == Some(0) {
                let old_id = core.waiting_id(lease, &key);
                return Err(Reply::refused(
                    ErrorCode::WouldBlock,
                    format!(
                        "round {generation} of {key} has members that have not left (this lease \
                         already leaves, request id {old_id:?})"
                    ),
                ));
            }
            let old_id = core.take_over_wait(ctx, &key, &claim);
            round.leaving.rename(agent, &old_id, claim.request_id);
            return Ok(Reply::Queued);
        }
        if round.members.len() == round.leaving.len() + 1 {
            end_round(ctx, core, &key, barrier.passed.remove(at));
            if barrier.is_idle() {
                barriers.remove(&held_name);
            }
            return Ok(Reply::BarrierPassed { generation });
        }
        if wait_ms == Some(0) {
            let staying = round.members.len() - round.leaving.len() - 1;
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!("{staying} other members of round {generation} of {key} have not left"),
            ));
        }
        let waiter = core.enqueue(ctx, &key, &claim, 1);
        round.leaving.push_back(waiter);
        Ok(Reply::Queued)
    }
}

/// Refuses a `count` above what the waiter bound allows: a round's other members all wait at
/// once, in one queue (and leave together, in another).
fn check_count(count: u32, limits: &Limits) -> Result<(), Reply> {
    let waiters_max = limits.waiters_per_resource_max;
    if u64::from(count) <= u64::from(waiters_max) + 1 {
        return Ok(());
    }
    Err(Reply::refused(
        ErrorCode::BadRequest,
        format!(
            "`count` is {count}: a round has at most {} members, as its other members all wait \
             at once and waiters_per_resource_max is {waiters_max}",
            u64::from(waiters_max) + 1
        ),
    ))
}

/// Ends a round whose members have all left but at most one (whose own leave ends it, or who
/// is gone with its lease): each leaver, in the order they left, is released and answered the
/// round's generation, then the member whose leave ends it is released.
fn end_round(ctx: &mut Ctx, core: &mut Core, key: &ResourceKey, mut round: Round) {
    let reply = Reply::BarrierPassed {
        generation: round.generation,
    };
    while let Some(leaver) = round.leaving.pop_front() {
        let hold = round
            .members
            .remove(&leaver.lease)
            .expect("invariant 4: a leaver is a member");
        core.release(ctx, key, &hold, ReleaseReason::Released);
        core.answer(ctx, key, leaver, reply.clone());
    }
    for hold in round.members.into_values() {
        core.release(ctx, key, &hold, ReleaseReason::Released);
    }
}

impl Resource for NameMap<Barrier> {
    /// The generations of the rounds still under way: `fence.check` of a generation is valid
    /// while a member of that round has not left.
    fn held_tokens(&self, name: &str) -> Vec<u64> {
        let rounds = self.get(name).into_iter().flat_map(|b| &b.passed);
        rounds.map(|round| round.generation).collect()
    }

    /// Holders: the members of passed rounds that have not left, oldest round first; waiters:
    /// the filling round's arrivals; with the filling round's `count` and how many members
    /// leave.
    fn inspect(&self, name: &str) -> Reply {
        let barrier = self.get(name);
        let rounds = barrier.into_iter().flat_map(|b| &b.passed);
        let holders = rounds.clone().flat_map(Round::staying);
        let leaving: usize = rounds.map(|round| round.leaving.len()).sum();
        let filling = barrier.and_then(|b| b.filling.as_ref());
        Reply::Inspect {
            limit: None,
            holders: holders.map(|hold| hold.info(None)).collect(),
            waiters: filling
                .map(|filling| filling.arrivals.infos(false))
                .unwrap_or_default(),
            count: filling.map(|filling| filling.count),
            leaving: (leaving > 0)
                .then(|| u32::try_from(leaving).expect("members are bounded by u32")),
        }
    }

    fn held_key(&self, name: &str) -> Option<ResourceKey> {
        let (name, _) = self.get_key_value(name)?;
        Some(ResourceKey::new(ResourceKind::Barrier, name))
    }

    /// Takes the member out of its round, leaving the round (and its leave, if it waits in
    /// one) to [`Resource::settle`] and [`Resource::take_waiter`].
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        let barrier = self.get_mut(name)?;
        let at = barrier.round_of(lease)?;
        barrier.passed[at].members.remove(&lease)
    }

    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        let barrier = self.get_mut(name)?;
        let arrivals = barrier.filling.iter_mut().map(|f| &mut f.arrivals);
        let leaving = barrier.passed.iter_mut().map(|round| &mut round.leaving);
        arrivals
            .chain(leaving)
            .find_map(|queue| queue.take(agent, request_id))
    }

    /// Ends the rounds every member still in has left (one gone with its lease counts as
    /// left), drops an emptied filling round, and forgets a barrier left with nobody. Nothing
    /// else can become due: members going away never fill a round.
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, keys: &[ResourceKey], _: &Limits) {
        for key in keys {
            let Some(barrier) = self.get_mut(&key.name) else {
                continue;
            };
            if barrier.arrived() == 0 {
                barrier.filling = None;
            }
            let (over, under_way) = std::mem::take(&mut barrier.passed)
                .into_iter()
                .partition::<Vec<_>, _>(Round::is_over);
            barrier.passed = under_way;
            for round in over {
                end_round(ctx, core, key, round);
            }
            if barrier.is_idle() {
                self.remove(&key.name);
            }
        }
    }

    fn in_use(&self) -> usize {
        self.len()
    }

    /// Holders: members that have not left; waiters: arrivals and leaves, every request that
    /// waits.
    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>> {
        list_by_name(self, keep, |barrier| {
            let rounds = barrier.passed.iter();
            let staying = rounds
                .clone()
                .map(|round| round.members.len() - round.leaving.len());
            let leaving: usize = rounds.map(|round| round.leaving.len()).sum();
            (staying.sum(), barrier.arrived() + leaving)
        })
    }

    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation> {
        for (name, barrier) in self {
            let key = ResourceKey::new(ResourceKind::Barrier, name);
            if barrier.is_idle() {
                return Err(violation!("barrier {name:?} is idle but remembered"));
            }
            let mut leases = BTreeSet::new();
            let mut in_one_place = |lease: LeaseId| {
                if leases.insert(lease) {
                    Ok(())
                } else {
                    Err(violation!(
                        "barrier {name:?}: lease {lease} is in two places"
                    ))
                }
            };
            if let Some(filling) = &barrier.filling {
                let arrived = filling.arrivals.len();
                if arrived == 0 || arrived >= filling.count as usize {
                    return Err(violation!(
                        "barrier {name:?}: {arrived} arrivals in a filling round of {}",
                        filling.count
                    ));
                }
                filling.arrivals.check(&key)?;
                for waiter in filling.arrivals.iter() {
                    in_one_place(waiter.lease)?;
                    occupancy.wait(&key, waiter);
                }
            }
            check_rounds(name, &key, &barrier.passed, occupancy, &mut in_one_place)?;
        }
        Ok(())
    }
}

/// Invariants 3 to 5 of the passed rounds of barrier `name`.
fn check_rounds(
    name: &str,
    key: &ResourceKey,
    rounds: &[Round],
    occupancy: &mut Occupancy,
    in_one_place: &mut dyn FnMut(LeaseId) -> Result<(), InvariantViolation>,
) -> Result<(), InvariantViolation> {
    if !rounds.is_sorted_by(|older, newer| older.generation < newer.generation) {
        return Err(violation!(
            "barrier {name:?}: rounds out of generation order"
        ));
    }
    for round in rounds {
        let generation = round.generation;
        if round.is_over() {
            return Err(violation!(
                "barrier {name:?}: round {generation} has {} members, all left",
                round.members.len()
            ));
        }
        round.leaving.check(key)?;
        for (lease, hold) in &round.members {
            if hold.lease != *lease || hold.token != generation {
                return Err(violation!(
                    "barrier {name:?}: round {generation} files a hold of lease {} with token \
                     {} under lease {lease}",
                    hold.lease,
                    hold.token
                ));
            }
            in_one_place(*lease)?;
            occupancy.hold(key, hold);
        }
        for leaver in round.leaving.iter() {
            if !round.members.contains_key(&leaver.lease) {
                return Err(violation!(
                    "barrier {name:?}: lease {} leaves round {generation} without being in it",
                    leaver.lease
                ));
            }
            occupancy.wait(key, leaver);
        }
    }
    Ok(())
}
