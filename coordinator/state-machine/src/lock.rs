//! FIFO locks: one holder, waiters in strict arrival (log) order, handover inside the entry
//! that frees the lock.
//!
//! No herd: when the holder releases (or its lease ends), exactly one waiter — the head — is
//! granted, and only it is answered. Acquiring a lock the same lease already holds returns the
//! existing token (not counted: one release frees it).
//!
//! Invariants:
//! 1. After every entry a lock in the map has a holder, or is held back by a lock-delay
//!    (`lock_delay.rs`, which checks it); a lock with neither holder nor waiters nor delay is
//!    forgotten. (Otherwise a holder-less lock exists only inside an apply, between a lease's
//!    end and the handover.)
//! 2. The holder's lease never also waits in the lock's queue.
//! 3. The waiters are a FIFO queue (`fifo.rs`, its invariants 1 to 4): arrival order, one slot
//!    per lease, bounded at enqueue, and the lock goes to the head alone.

use crate::InvariantViolation;
use std::sync::Arc;

use hivekeeper_protocol::ResourceKind;
use serde::{Deserialize, Serialize};

use crate::ResourceKey;
use crate::fifo::Queue;
use crate::grant::{Acquire, Core, Hold, Occupancy, Waiter};
use crate::resource::{Listed, Resource};
use crate::{Ctx, Decision, LeaseId, Limits, NameMap, ReleaseReason, Reply, StateMachine, Text};

/// One lock in use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    /// The holder; `None` only transiently inside an apply.
    pub holder: Option<Hold>,
    /// Waiters, head first.
    pub waiters: Queue,
}

impl StateMachine {
    /// `lock.acquire`: granted at once when the lock is free, queued behind its holder, or
    /// refused (`Err`, nothing changed).
    pub(crate) fn lock_acquire(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: String,
    ) -> Decision {
        let claim = self.core.claim(&acquire)?;
        let (agent, lease) = (claim.agent, claim.lease);
        self.lock_delays.try_refused(&name, claim.wait_ms)?;
        let Some(lock) = self.locks.get_mut(name.as_str()) else {
            self.core.holds_quota(agent, &self.limits)?;
            self.resources_full()?;
            let name: Text = Arc::from(name);
            let key = ResourceKey::new(ResourceKind::Lock, &name);
            let hold = self.core.grant_claim(ctx, &key, &claim, 1);
            let token = hold.token;
            let waiters = Queue::default();
            self.locks.insert(
                name,
                Lock {
                    holder: Some(hold),
                    waiters,
                },
            );
            return Ok(Reply::Granted { token });
        };
        let key = ResourceKey::new(ResourceKind::Lock, &Arc::from(name.as_str()));
        // No holder: held back by a lock-delay (invariant 1), so the request queues.
        if let Some(holder) = lock.holder.as_ref().filter(|holder| holder.lease == lease) {
            return Ok(Reply::Granted {
                token: holder.token,
            });
        }
        let held = || format!("lock {name:?} is held by another lease");
        let waiters = &mut lock.waiters;
        self.core
            .wait_behind(ctx, &key, &claim, waiters, &held, &self.limits)
    }
}

impl Resource for NameMap<Lock> {
    fn held_tokens(&self, name: &str) -> Vec<u64> {
        let holder = self.get(name).and_then(|lock| lock.holder.as_ref());
        holder.map(|hold| vec![hold.token]).unwrap_or_default()
    }

    fn inspect(&self, name: &str) -> Reply {
        let lock = self.get(name);
        Reply::Inspect {
            limit: None,
            holders: lock
                .and_then(|lock| lock.holder.as_ref())
                .map(|hold| hold.info(None))
                .into_iter()
                .collect(),
            waiters: lock
                .map(|lock| lock.waiters.infos(false))
                .unwrap_or_default(),
            count: None,
            leaving: None,
        }
    }

    fn held_key(&self, name: &str) -> Option<ResourceKey> {
        let (name, _) = self.get_key_value(name)?;
        Some(ResourceKey::new(ResourceKind::Lock, name))
    }

    /// Leaves the lock holder-less until [`Resource::settle`].
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        let lock = self.get_mut(name)?;
        if lock.holder.as_ref()?.lease != lease {
            return None;
        }
        lock.holder.take()
    }

    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        self.get_mut(name)?.waiters.take(agent, request_id)
    }

    /// Hands each holder-less lock to its head waiter, or forgets it when nobody waits.
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, keys: &[ResourceKey], _: &Limits) {
        for key in keys {
            let Some(lock) = self.get_mut(&key.name) else {
                continue;
            };
            if lock.holder.is_some() {
                continue;
            }
            match lock.waiters.pop_front() {
                Some(head) => lock.holder = Some(core.grant_waiter(ctx, key, head)),
                None => {
                    self.remove(&key.name);
                }
            }
        }
    }

    /// What the default [`Resource::release`] does (take the hold, record its end, settle),
    /// but the lock is taken out of the map once and goes back only if someone still holds
    /// it: one look-up of the name for a free lock, two for a handover, where the three steps
    /// take four. Locks are the commonest release.
    fn release(
        &mut self,
        ctx: &mut Ctx,
        core: &mut Core,
        name: &str,
        lease: LeaseId,
        _: &Limits,
    ) -> bool {
        let Some((held_name, mut lock)) = self.remove_entry(name) else {
            return false;
        };
        let holds = lock.holder.as_ref().map(|hold| hold.lease) == Some(lease);
        if holds {
            let key = ResourceKey::new(ResourceKind::Lock, &held_name);
            let hold = lock.holder.take().expect("checked above");
            core.release(ctx, &key, &hold, ReleaseReason::Released);
            match lock.waiters.pop_front() {
                Some(head) => lock.holder = Some(core.grant_waiter(ctx, &key, head)),
                None => return true,
            }
        }
        self.insert(held_name, lock);
        holds
    }

    fn in_use(&self) -> usize {
        self.len()
    }

    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>> {
        self.iter()
            .filter(|(name, _)| keep(name))
            .map(|(name, lock)| {
                (
                    &**name,
                    usize::from(lock.holder.is_some()),
                    lock.waiters.len(),
                )
            })
            .collect()
    }

    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation> {
        for (name, lock) in self {
            let key = ResourceKey::new(ResourceKind::Lock, name);
            lock.waiters.check(&key)?;
            for waiter in lock.waiters.iter() {
                occupancy.wait(&key, waiter);
            }
            // Held back by a lock-delay: `lock_delay.rs` checks that it is.
            let Some(holder) = &lock.holder else {
                continue;
            };
            occupancy.hold(&key, holder);
            if lock.waiters.has_lease(holder.lease) {
                return Err(violation!("lock {name:?}: the holder's lease also waits"));
            }
        }
        Ok(())
    }
}
