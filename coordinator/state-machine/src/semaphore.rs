//! Counting semaphores: `limit` permits, weighted requests, strict FIFO.
//!
//! The capacity is fixed by the first acquirer and kept while the semaphore is in use (held or
//! waited for); asking with another `limit` is `limit_mismatch`. An idle semaphore is forgotten,
//! so the next first acquirer may choose a new capacity. Strict FIFO: a request that does not
//! fit waits, and nobody behind it is granted before it (no starvation of large requests).
//!
//! Invariants:
//! 1. `used` is the sum of the holders' permits and never exceeds `limit`.
//! 2. After every entry the head waiter, if any, does not fit (`used + head.permits > limit`):
//!    whatever could be granted was granted.
//! 3. A semaphore in the map has a holder or a waiter.
//! 4. One hold per lease; a holding lease does not also wait.
//! 5. The waiters are a FIFO queue (`fifo.rs`, its invariants 1 to 4): arrival order, one slot
//!    per lease, bounded at enqueue, granted from the head only (strict FIFO, invariant 2).

use crate::InvariantViolation;
use std::collections::BTreeMap;
use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Serialize};

use crate::ResourceKey;
use crate::fifo::{self, Queue};
use crate::grant::{Acquire, Claim, Core, Hold, Occupancy, Waiter};
use crate::resource::{Listed, Resource, list_by_name};
use crate::{Ctx, Decision, LeaseId, Limits, NameMap, Reply, StateMachine, Text};

/// One semaphore in use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Semaphore {
    /// Capacity, fixed by the first acquirer.
    pub limit: u32,
    /// Permits held, the sum over `holders`.
    pub used: u32,
    /// Holds by lease.
    pub holders: BTreeMap<LeaseId, Hold>,
    /// Waiters, head first.
    pub waiters: Queue,
}

impl StateMachine {
    /// `sem.acquire` of `permits` of a semaphore of capacity `limit`: granted at once when they
    /// fit and nobody waits, queued, or refused (`Err`, nothing changed).
    pub(crate) fn sem_acquire(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: String,
        limit: u32,
        permits: u32,
    ) -> Decision {
        let claim = self.core.claim(&acquire)?;
        let (agent, lease, wait_ms) = (claim.agent, claim.lease, claim.wait_ms);
        let full = self.resources_full();
        let name: Text = Arc::from(name);
        let key = ResourceKey::new(ResourceKind::Sem, &name);
        // Checked before an idle semaphore is made, and returned after the checks that answer
        // a lease that already holds or waits (those take nothing new).
        let over_quota = self.core.holds_quota(agent, &self.limits);
        if !self.sems.contains_key(&name) {
            if let Err(refusal) = over_quota {
                return Err(refusal);
            }
            full?;
            let idle = Semaphore {
                limit,
                used: 0,
                holders: BTreeMap::new(),
                waiters: Queue::default(),
            };
            self.sems.insert(name.clone(), idle);
        }
        let sem = self
            .sems
            .get_mut(&name)
            .expect("inserted above if it was missing");
        if sem.limit != limit {
            return Err(Reply::refused(
                ErrorCode::LimitMismatch,
                format!(
                    "semaphore {name:?} has limit {}, the request says {limit}",
                    sem.limit
                ),
            ));
        }
        if let Some(answer) = sem.asked_again(ctx, &mut self.core, &key, &claim, permits) {
            return answer;
        }
        over_quota?;
        if sem.waiters.is_empty() && sem.used + permits <= sem.limit {
            let hold = self.core.grant_claim(ctx, &key, &claim, permits);
            let token = hold.token;
            sem.used += permits;
            sem.holders.insert(lease, hold);
            return Ok(Reply::Granted { token });
        }
        // A semaphore created by this request was free and granted above (permits <= limit
        // is validated), so a refusal below never leaves an idle semaphore behind.
        if wait_ms == Some(0) {
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!(
                    "semaphore {name:?} has {} of {} permits free and {} waiters",
                    sem.limit - sem.used,
                    sem.limit,
                    sem.waiters.len()
                ),
            ));
        }
        self.core.waits_quota(lease, &self.limits)?;
        fifo::full("semaphore", &name, sem.waiters.len(), &self.limits)?;
        let waiter = self.core.enqueue(ctx, &key, &claim, permits);
        sem.waiters.push_back(waiter);
        Ok(Reply::Queued)
    }
}

impl Semaphore {
    /// The answer to a lease that asks again for permits it holds or waits for (under a new
    /// request id): its hold, or its wait taken over, when it asks for as many; a refusal
    /// otherwise. `None` when the lease neither holds nor waits here.
    fn asked_again(
        &mut self,
        ctx: &mut Ctx,
        core: &mut Core,
        key: &ResourceKey,
        claim: &Claim<'_>,
        permits: u32,
    ) -> Option<Decision> {
        let (agent, lease, name) = (claim.agent, claim.lease, &key.name);
        if let Some(hold) = self.holders.get(&lease) {
            return Some(if hold.permits == permits {
                Ok(Reply::Granted { token: hold.token })
            } else {
                Err(Reply::refused(
                    ErrorCode::BadRequest,
                    format!(
                        "lease {lease} already holds {} permits of semaphore {name:?}; release \
                         them before asking for {permits}",
                        hold.permits
                    ),
                ))
            });
        }
        if !core.is_waiting(lease, key) {
            return None;
        }
        let old_id = core.waiting_id(lease, key).to_string();
        let waited = self.waiters.get(agent, &old_id).map_or(0, |w| w.permits);
        if waited != permits {
            return Some(Err(core.already_waiting(
                lease,
                key,
                &format!("{waited} permits"),
            )));
        }
        if claim.wait_ms == Some(0) {
            return Some(Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!(
                    "semaphore {name:?} has no {permits} permits free (this lease already waits \
                     for them, request id {old_id:?})"
                ),
            )));
        }
        core.take_over_wait(ctx, key, claim);
        self.waiters.rename(agent, &old_id, claim.request_id);
        Some(Ok(Reply::Queued))
    }
}

impl Resource for NameMap<Semaphore> {
    fn held_tokens(&self, name: &str) -> Vec<u64> {
        let holders = self.get(name).map(|sem| sem.holders.values());
        holders
            .into_iter()
            .flatten()
            .map(|hold| hold.token)
            .collect()
    }

    fn inspect(&self, name: &str) -> Reply {
        let sem = self.get(name);
        let holds = sem.into_iter().flat_map(|sem| sem.holders.values());
        let mut holders: Vec<_> = holds.map(|hold| hold.info(Some(hold.permits))).collect();
        holders.sort_by_key(|holder| holder.token);
        Reply::Inspect {
            limit: sem.map(|sem| sem.limit),
            holders,
            waiters: sem.map(|sem| sem.waiters.infos(true)).unwrap_or_default(),
            count: None,
            leaving: None,
        }
    }

    fn held_key(&self, name: &str) -> Option<ResourceKey> {
        let (name, _) = self.get_key_value(name)?;
        Some(ResourceKey::new(ResourceKind::Sem, name))
    }

    /// Gives the hold's permits back.
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        let sem = self.get_mut(name)?;
        let hold = sem.holders.remove(&lease)?;
        sem.used -= hold.permits;
        Some(hold)
    }

    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        self.get_mut(name)?.waiters.take(agent, request_id)
    }

    /// Grants head waiters while they fit; forgets a semaphore left idle.
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, keys: &[ResourceKey], _: &Limits) {
        for key in keys {
            let Some(sem) = self.get_mut(&key.name) else {
                continue;
            };
            while sem
                .waiters
                .front()
                .is_some_and(|head| sem.used + head.permits <= sem.limit)
            {
                let head = sem.waiters.pop_front().expect("front() was Some");
                let hold = core.grant_waiter(ctx, key, head);
                sem.used += hold.permits;
                sem.holders.insert(hold.lease, hold);
            }
            if sem.holders.is_empty() && sem.waiters.is_empty() {
                self.remove(&key.name);
            }
        }
    }

    fn in_use(&self) -> usize {
        self.len()
    }

    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>> {
        list_by_name(self, keep, |sem| (sem.holders.len(), sem.waiters.len()))
    }

    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation> {
        for (name, sem) in self {
            let key = ResourceKey::new(ResourceKind::Sem, name);
            let used: u32 = sem.holders.values().map(|hold| hold.permits).sum();
            if used != sem.used || used > sem.limit {
                return Err(violation!(
                    "semaphore {name:?}: used {} (holders sum to {used}), limit {}",
                    sem.used,
                    sem.limit
                ));
            }
            if let Some(head) = sem.waiters.front()
                && sem.used + head.permits <= sem.limit
            {
                return Err(violation!(
                    "semaphore {name:?}: the head waiter fits but waits"
                ));
            }
            if sem.holders.is_empty() && sem.waiters.is_empty() {
                return Err(violation!("semaphore {name:?} is idle but remembered"));
            }
            sem.waiters.check(&key)?;
            for (lease, hold) in &sem.holders {
                if *lease != hold.lease {
                    return Err(violation!(
                        "semaphore {name:?}: hold filed under the wrong lease"
                    ));
                }
                if sem.waiters.has_lease(*lease) {
                    return Err(violation!(
                        "semaphore {name:?}: lease {lease} holds and waits"
                    ));
                }
                occupancy.hold(&key, hold);
            }
            for waiter in sem.waiters.iter() {
                occupancy.wait(&key, waiter);
            }
        }
        Ok(())
    }
}
