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
//!
//! Then a lock held back by a lock-delay (`lock_delay.rs`) blocks the request like a held
//! one: it queues, or a try (`wait_ms: 0`) is refused `would_block` naming the delay and its
//! end, whichever of its locks is held back.

use std::fmt;

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
        let survey = self.survey(&names, claim.lease, mode);
        if let Some(token) = held_already(&survey, claim.lease, names.len(), mode)? {
            return Ok(Reply::Granted { token });
        }
        if let Some(Blocker::HeldBack(name)) = survey.blocker {
            self.lock_delays.try_refused(name, claim.wait_ms)?;
        }
        let keys: Vec<ResourceKey> = names
            .iter()
            .map(|name| ResourceKey::new(ResourceKind::Lock, name))
            .collect();
        if self.waiting_already(ctx, &claim, &keys, (mode, &survey.blocker))? {
            return Ok(Reply::Queued);
        }
        self.core
            .holds_quota_for(claim.agent, names.len(), &self.limits)?;
        let Some(blocked) = &survey.blocker else {
            self.resources_full_for(survey.unused)?;
            let hold = self.core.grant_claim_all(ctx, &keys, &claim, 1);
            let token = hold.token;
            for (name, hold) in names.into_iter().zip(std::iter::repeat_n(hold, keys.len())) {
                self.locks.entry(name).or_default().hold(hold, mode);
            }
            return Ok(Reply::Granted { token });
        };
        if claim.wait_ms == Some(0) {
            return Err(Reply::refused(ErrorCode::WouldBlock, blocked.to_string()));
        }
        self.core
            .waits_quota_for(claim.lease, names.len(), &self.limits)?;
        if let Some((name, waiting)) = survey.full {
            fifo::full("lock", name, waiting, &self.limits)?;
        }
        self.resources_full_for(survey.unused)?;
        let mut waiter = self.core.enqueue_all(ctx, &keys, &claim, 1);
        waiter.mode = mode;
        for (name, waiter) in names
            .into_iter()
            .zip(std::iter::repeat_n(waiter, keys.len()))
        {
            let lock = self.locks.entry(name).or_default();
            lock.waiters.push_back(waiter);
        }
        Ok(Reply::Queued)
    }

    /// One look at each of `names` for a request of `lease` in `mode` (one look-up each).
    fn survey<'n>(&self, names: &'n [Text], lease: LeaseId, mode: LockMode) -> Survey<'n> {
        let mut survey = Survey {
            held: Vec::new(),
            unused: 0,
            blocker: None,
            full: None,
        };
        let (mut held_back, mut queued) = (None, None);
        for name in names {
            let Some(lock) = self.locks.get(name) else {
                survey.unused += 1;
                continue;
            };
            if held_back.is_none() && lock.held_back {
                held_back = Some(Blocker::HeldBack(name));
            }
            if let Some((hold, held_mode)) = lock.hold_of(lease) {
                survey.held.push((name, hold.token, held_mode));
            } else if survey.blocker.is_none() && lock.holder.is_some() {
                survey.blocker = Some(Blocker::Held(name));
            } else if survey.blocker.is_none() && !lock.admits(mode) {
                survey.blocker = Some(Blocker::HeldShared(name));
            }
            let waiting = lock.waiters.len();
            if queued.is_none() && waiting > 0 {
                queued = Some(Blocker::Queue(name, waiting));
            }
            if survey.full.is_none() && waiting >= self.limits.waiters_per_resource_max as usize {
                survey.full = Some((name, waiting));
            }
        }
        survey.blocker = held_back.or(survey.blocker).or(queued);
        survey
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
        (mode, blocker): (LockMode, &Option<Blocker<'_>>),
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
            let blocked = blocker.as_ref().map_or_else(
                || format!("lock {:?} cannot be granted yet", keys[0].name),
                Blocker::to_string,
            );
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

/// What one look at each lock of a request found ([`StateMachine::survey`]).
struct Survey<'n> {
    /// What the asking lease holds of them: name, token and mode.
    held: Vec<(&'n Text, u64, LockMode)>,
    /// How many are not in use yet (what `resources_max` counts).
    unused: usize,
    /// Why they cannot all be granted now (nobody waiting, holders it may join, no
    /// lock-delay): a lock-delay first, then a lock's holders, else a queue; `None` when they
    /// can.
    blocker: Option<Blocker<'n>>,
    /// The first whose queue is at `waiters_per_resource_max`, with its length.
    full: Option<(&'n Text, usize)>,
}

/// The token of what `lease` already holds of a request's `asked` locks, when it is exactly
/// what is asked for; `Ok(None)` when it holds none of them; the refusal otherwise (module
/// docs).
fn held_already(
    survey: &Survey<'_>,
    lease: LeaseId,
    asked: usize,
    mode: LockMode,
) -> Result<Option<u64>, Reply> {
    let held = &survey.held;
    let Some(&(first, token, _)) = held.first() else {
        return Ok(None);
    };
    let refusal = |message: String| Err(Reply::refused(ErrorCode::BadRequest, message));
    match held.iter().find(|(_, _, held_mode)| *held_mode != mode) {
        Some((name, _, LockMode::Shared)) => refusal(format!(
            "lock {name:?}: lease {lease} holds it shared, and a shared hold is never upgraded \
             to exclusive (two shared holders upgrading at once would each wait for the other \
             forever); release it, then acquire it exclusive"
        )),
        Some((name, _, LockMode::Exclusive)) => refusal(format!(
            "lock {name:?}: lease {lease} holds it exclusive; lock.downgrade makes the hold \
             shared, keeping its token"
        )),
        None if held.len() == asked && held.iter().all(|(_, t, _)| *t == token) => Ok(Some(token)),
        None => refusal(format!(
            "lease {lease} already holds lock {first:?}, and a multi-lock takes all its locks \
             in one grant: release it, or leave it out"
        )),
    }
}

/// Why a request's locks cannot all be granted now: what a `would_block` says.
enum Blocker<'n> {
    /// This lock is held back by a lock-delay (whose refusal, `LockDelays::try_refused`, says
    /// until when).
    HeldBack(&'n Text),
    /// This lock has an exclusive holder.
    Held(&'n Text),
    /// This lock has shared holders, and the request is exclusive.
    HeldShared(&'n Text),
    /// This lock has this many requests waiting.
    Queue(&'n Text, usize),
}

impl fmt::Display for Blocker<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::HeldBack(name) => write!(f, "lock {name:?} is held back by a lock-delay"),
            Blocker::Held(name) => write!(f, "lock {name:?} is held by another lease"),
            Blocker::HeldShared(name) => write!(f, "lock {name:?} is held shared"),
            Blocker::Queue(name, waiting) => write!(
                f,
                "lock {name:?} has {waiting} requests waiting, and a later request never \
                 overtakes them"
            ),
        }
    }
}
