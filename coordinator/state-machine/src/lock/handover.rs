//! Handover: what holders and waiters leaving a lock make grantable is granted in the same
//! entry; and the two ops that leave without acquiring, `lock.downgrade` and
//! `lock.release_all`.
//!
//! The grant pass ([`hand_over`]) starts from the locks whose holders or waiters went. A head
//! of one of their queues is granted when it heads the queue of each of its locks and may join
//! each one's holders; granting it changes the heads of all its locks, which are looked at in
//! turn, so a run of shared heads is granted whole and a multi-lock granted on one lock can
//! make another lock's next head grantable. Among the heads grantable at once, the one whose
//! first lock comes first by name goes first (one lock's requests are granted in arrival
//! order; requests that share no lock get their tokens in name order, as when a lease's end
//! frees several locks). A grant only adds holders and removes its request from the heads, so
//! a head that could not be granted cannot become grantable but through a lock whose head
//! changed: the pass looks at no other, and ends with nothing left grantable (invariant 5).

use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::{ErrorCode, LockMode, ResourceKind};

use super::Lock;
use crate::grant::Core;
use crate::{Ctx, Decision, NameMap, ReleaseReason, Reply, ResourceKey, StateMachine, Text};

impl StateMachine {
    /// `lock.downgrade`: the lease's exclusive hold becomes shared, with the same token, and
    /// the shared waiters at the head of the queue are granted beside it in this entry. A
    /// shared hold is answered its token and stays as it is (a downgrade asked again under a
    /// new request id after a lost answer finds what it asked for). `not_holder` when the
    /// lease does not hold the lock.
    pub(crate) fn lock_downgrade(
        &mut self,
        ctx: &mut Ctx,
        agent: &str,
        name: &str,
        lease: &str,
    ) -> Decision {
        let lease = self.core.live_lease(agent, lease)?;
        let not_holder = || {
            let message = format!("lease {lease} does not hold lock {name:?}");
            Reply::refused(ErrorCode::NotHolder, message)
        };
        let (name, lock) = self.locks.get_key_value(name).ok_or_else(not_holder)?;
        let (hold, mode) = lock.hold_of(lease).ok_or_else(not_holder)?;
        let token = hold.token;
        if mode == LockMode::Exclusive {
            let name = name.clone();
            let lock = self.locks.get_mut(&name).expect("looked up above");
            let hold = lock.holder.take().expect("the lease holds it exclusive");
            lock.hold(hold, LockMode::Shared);
            hand_over(&mut self.locks, ctx, &mut self.core, BTreeSet::from([name]));
        }
        Ok(Reply::Granted { token })
    }

    /// `lock.release_all`: the lease's holds on every one of `names` end together, and what
    /// they blocked is granted, in this entry; `not_holder`, and nothing released, unless the
    /// lease holds every one. The names are distinct (validated).
    pub(crate) fn lock_release_all(
        &mut self,
        ctx: &mut Ctx,
        agent: &str,
        names: &[String],
        lease: &str,
    ) -> Decision {
        let lease = self.core.live_lease(agent, lease)?;
        let mut held = BTreeSet::new();
        for name in names {
            let Some((name, lock)) = self.locks.get_key_value(name.as_str()) else {
                return Err(not_all_held(lease, name));
            };
            if lock.hold_of(lease).is_none() {
                return Err(not_all_held(lease, name));
            }
            held.insert(name.clone());
        }
        for name in &held {
            let lock = self.locks.get_mut(name).expect("checked above");
            let hold = lock.take_hold(lease).expect("checked above");
            let key = ResourceKey::new(ResourceKind::Lock, name);
            self.core.release(ctx, &key, &hold, ReleaseReason::Released);
        }
        hand_over(&mut self.locks, ctx, &mut self.core, held);
        Ok(Reply::Done)
    }
}

/// The refusal of a `lock.release_all` naming a lock `lease` does not hold.
fn not_all_held(lease: crate::LeaseId, name: &str) -> Reply {
    Reply::refused(
        ErrorCode::NotHolder,
        format!(
            "lease {lease} does not hold lock {name:?}; lock.release_all releases nothing \
             unless the lease holds every lock it names"
        ),
    )
}

/// The grant pass over `touched`, the locks whose holders or waiters went in this entry
/// (module docs); the locks among them left with nobody are forgotten (invariant 1).
pub(super) fn hand_over(
    locks: &mut NameMap<Lock>,
    ctx: &mut Ctx,
    core: &mut Core,
    touched: BTreeSet<Text>,
) {
    let mut look = touched.clone();
    // Grantable requests by their first lock's name, with every lock they wait for.
    let mut ready: BTreeMap<Text, Vec<ResourceKey>> = BTreeMap::new();
    loop {
        for name in std::mem::take(&mut look) {
            if let Some(keys) = grantable_head(locks, core, &name) {
                ready.insert(keys[0].name.clone(), keys);
            }
        }
        let Some((_, keys)) = ready.pop_first() else {
            break;
        };
        let mut heads = keys.iter().map(|key| {
            locks
                .get_mut(&key.name)
                .and_then(|lock| lock.waiters.pop_front())
                .expect("a grantable request heads each of its locks' queues")
        });
        let waiter = heads.next().expect("a request waits for at least one lock");
        heads.for_each(drop);
        let mode = waiter.mode;
        let hold = core.grant_waiter_all(ctx, &keys, waiter);
        for key in keys {
            let lock = locks.get_mut(&key.name).expect("it was just granted");
            lock.hold(hold.clone(), mode);
            look.insert(key.name);
        }
    }
    for name in touched {
        if locks.get(&name).is_some_and(Lock::is_unused) {
            locks.remove(&name);
        }
    }
}

/// Grants, from `lock`'s own queue (the lock `key`, out of the map), the heads that ask for
/// this lock alone and may join its holders, in order, as [`hand_over`] would; whether it
/// stopped at a multi-lock that may join them, which [`hand_over`] must then look at with its
/// other locks.
pub(super) fn grant_own_heads(
    lock: &mut Lock,
    ctx: &mut Ctx,
    core: &mut Core,
    key: &ResourceKey,
) -> bool {
    while let Some(head) = lock.waiters.front() {
        if !lock.admits(head.mode) {
            return false;
        }
        let wait = core
            .pending_wait(&head.agent, &head.request_id)
            .expect("invariant 1 of waiting.rs: a queued request is indexed");
        if !wait.others.is_empty() {
            return true;
        }
        let head = lock.waiters.pop_front().expect("looked at above");
        let mode = head.mode;
        let hold = core.grant_waiter(ctx, key, head);
        lock.hold(hold, mode);
    }
    false
}

/// The locks of the request at the head of `name`'s queue, in name order, when it can be
/// granted now: it heads each one's queue and may join each one's holders.
fn grantable_head(locks: &NameMap<Lock>, core: &Core, name: &str) -> Option<Vec<ResourceKey>> {
    let lock = locks.get(name)?;
    let head = lock.waiters.front()?;
    if !lock.admits(head.mode) {
        return None;
    }
    let keys = core
        .wait_keys(&head.agent, &head.request_id)
        .expect("invariant 1 of waiting.rs: a queued request is indexed");
    let heads_all = keys.iter().all(|key| {
        let lock = &locks[&key.name];
        lock.admits(head.mode) && lock.waiters.front().map(|w| w.seq) == Some(head.seq)
    });
    heads_all.then_some(keys)
}
