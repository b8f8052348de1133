//! `lock.acquire` and `lock.acquire_all`: one request for one lock or several, in one mode,
//! granted at once, queued as a unit, or refused with nothing changed.
//!
//! What a lease already has decides first:
//! - it holds every lock asked for, in the mode asked for, under one token (for a multi-lock,
//!   the one grant it asks for again): that token, and nothing changes;
//! - it holds one of them shared and asks for it exclusive: `bad_request`, because a shared
//!   hold is never upgraded (two shared holders upgrading at once would each wait for the
//!   other to leave, forever); it holds one exclusive and asks for it shared: `bad_request`
//!   naming `lock.downgrade`; it holds some of the locks of a multi-lock, or them all but not
//!   as one grant: `bad_request`;
//! - it waits for the same locks in the same mode under another request id: that wait goes on
//!   under the new id (`waiting.rs`, `Core::take_over_wait`), or `would_block` for a try; it
//!   waits for some of them otherwise: `bad_request`.

use hivekeeper_protocol::{ErrorCode, LockMode, ResourceKind};

use super::Lock;
use crate::fifo;
use crate::grant::{Acquire, Claim};
use crate::{Ctx, Decision, LeaseId, Reply, ResourceKey, StateMachine, Text};

impl StateMachine {
    /// `lock.acquire`: granted at once, queued behind the lock's holders and waiters, or
    /// refused (`Err`, nothing changed).
    pub(crate) fn lock_acquire(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: String,
        mode: LockMode,
    ) -> Decision {
        self.acquire_locks(ctx, acquire, vec![Text::from(name)], mode)
    }

    /// `lock.acquire_all`: every lock granted at once under one token, queued as a unit, or
    /// refused (`Err`, nothing changed). The names are distinct (validated).
    pub(crate) fn lock_acquire_all(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        names: Vec<String>,
        mode: LockMode,
    ) -> Decision {
        let names = names.into_iter().map(Text::from).collect();
        self.acquire_locks(ctx, acquire, names, mode)
    }

    /// One request for `names` in `mode` (module docs).
    fn acquire_locks(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        mut names: Vec<Text>,
        mode: LockMode,
    ) -> Decision {
        let claim = self.core.claim(&acquire)?;
        names.sort_unstable();
        if let Some(token) = self.held_already(claim.lease, &names, mode)? {
            return Ok(Reply::Granted { token });
        }
        let keys: Vec<ResourceKey> = names
            .iter()
            .map(|name| ResourceKey::new(ResourceKind::Lock, name))
            .collect();
        if self.waiting_already(ctx, &claim, &keys, mode)? {
            return Ok(Reply::Queued);
        }
        self.core
            .holds_quota_for(claim.agent, names.len(), &self.limits)?;
        let unused = names
            .iter()
            .filter(|name| !self.locks.contains_key(*name))
            .count();
        let Some(blocked) = self.blocker(&names, mode) else {
            self.resources_full_for(unused)?;
            let hold = self
                .core
                .grant_now_all(ctx, &keys, claim.lease, claim.agent);
            let token = hold.token;
            for name in names {
                self.locks.entry(name).or_default().hold(hold.clone(), mode);
            }
            return Ok(Reply::Granted { token });
        };
        if claim.wait_ms == Some(0) {
            return Err(Reply::refused(ErrorCode::WouldBlock, blocked));
        }
        self.core
            .waits_quota_for(claim.lease, names.len(), &self.limits)?;
        for name in &names {
            if let Some(lock) = self.locks.get(name) {
                fifo::full("lock", name, lock.waiters.len(), &self.limits)?;
            }
        }
        self.resources_full_for(unused)?;
        let mut waiter = self.core.enqueue_all(ctx, &keys, &claim, 1);
        waiter.mode = mode;
        for name in names {
            let lock = self.locks.entry(name).or_default();
            lock.waiters.push_back(waiter.clone());
        }
        Ok(Reply::Queued)
    }

    /// Why `names` cannot all be granted in `mode` now (nobody waiting, holders it may join),
    /// in words for a `would_block`: a lock's holders first, else a queue; `None` when they
    /// can.
    fn blocker(&self, names: &[Text], mode: LockMode) -> Option<String> {
        let locks = || {
            names
                .iter()
                .filter_map(|name| Some((name, self.locks.get(name)?)))
        };
        let held = locks().find_map(|(name, lock)| {
            let why = if lock.holder.is_some() {
                "is held by another lease"
            } else if !lock.admits(mode) {
                "is held shared"
            } else {
                return None;
            };
            Some(format!("lock {name:?} {why}"))
        });
        held.or_else(|| {
            let (name, lock) = locks().find(|(_, lock)| !lock.waiters.is_empty())?;
            Some(format!(
                "lock {name:?} has {} requests waiting, and a later request never overtakes them",
                lock.waiters.len()
            ))
        })
    }

    /// The token of what `lease` already holds of `names`, when it is exactly what is asked
    /// for; `Ok(None)` when it holds none of them; the refusal otherwise (module docs).
    fn held_already(
        &self,
        lease: LeaseId,
        names: &[Text],
        mode: LockMode,
    ) -> Result<Option<u64>, Reply> {
        let held: Vec<(&Text, u64, LockMode)> = names
            .iter()
            .filter_map(|name| {
                let (hold, held_mode) = self.locks.get(name)?.hold_of(lease)?;
                Some((name, hold.token, held_mode))
            })
            .collect();
        let Some(&(first, token, _)) = held.first() else {
            return Ok(None);
        };
        let refusal = |message: String| Err(Reply::refused(ErrorCode::BadRequest, message));
        match held.iter().find(|(_, _, held_mode)| *held_mode != mode) {
            Some((name, _, LockMode::Shared)) => refusal(format!(
                "lock {name:?}: lease {lease} holds it shared, and a shared hold is never \
                 upgraded to exclusive (two shared holders upgrading at once would each wait \
                 for the other forever); release it, then acquire it exclusive"
            )),
            Some((name, _, LockMode::Exclusive)) => refusal(format!(
                "lock {name:?}: lease {lease} holds it exclusive; lock.downgrade makes the hold \
                 shared, keeping its token"
            )),
            None if held.len() == names.len() && held.iter().all(|(_, t, _)| *t == token) => {
                Ok(Some(token))
            }
            None => refusal(format!(
                "lease {lease} already holds lock {first:?}, and a multi-lock takes all its \
                 locks in one grant: release it, or leave it out"
            )),
        }
    }

    /// A request by a lease that already waits for one of `keys`: `Ok(true)` when its wait
    /// for exactly these locks, in this mode, goes on under this request (`Core::
    /// take_over_wait`, in every queue); `Ok(false)` when it waits for none of them; the
    /// refusal otherwise (module docs).
    fn waiting_already(
        &mut self,
        ctx: &mut Ctx,
        claim: &Claim<'_>,
        keys: &[ResourceKey],
        mode: LockMode,
    ) -> Result<bool, Reply> {
        let Some(key) = keys
            .iter()
            .find(|key| self.core.is_waiting(claim.lease, key))
        else {
            return Ok(false);
        };
        let old_id = self.core.waiting_id(claim.lease, key);
        let wait = self
            .core
            .pending_wait(claim.agent, old_id)
            .expect("invariant 2 of waiting.rs: the lease's wait is indexed");
        if wait.keys() != keys {
            return Err(self.core.already_waiting(claim.lease, key, "other locks"));
        }
        let lock = &self.locks[&key.name];
        let waiter = lock
            .waiters
            .get(claim.agent, old_id)
            .expect("invariant 6: a waiting request is in each of its locks' queues");
        if waiter.mode != mode {
            let what = format!("mode {}", waiter.mode.as_str());
            return Err(self.core.already_waiting(claim.lease, key, &what));
        }
        if claim.wait_ms == Some(0) {
            let names: Vec<Text> = keys.iter().map(|key| key.name.clone()).collect();
            let blocked = self
                .blocker(&names, mode)
                .unwrap_or_else(|| format!("lock {:?} cannot be granted yet", keys[0].name));
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!("{blocked} (this lease already waits for it, request id {old_id:?})"),
            ));
        }
        let old_id = self.core.take_over_wait(ctx, &keys[0], claim);
        for key in keys {
            let lock: &mut Lock = self
                .locks
                .get_mut(&key.name)
                .expect("invariant 6: a waiting request is in each of its locks' queues");
            lock.waiters.rename(claim.agent, &old_id, claim.request_id);
        }
        Ok(true)
    }
}
