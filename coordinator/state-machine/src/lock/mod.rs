//! Locks: FIFO locks, exclusive or shared (read-write), taken one at a time or several at once
//! (multi-locks), handed over inside the entry that frees them.
//!
//! A lock has one exclusive holder, or any number of shared holders together, each with its
//! own token. Queueing is strict FIFO by log order whatever the mode (`acquire.rs`): a request
//! is granted at once only when none of its locks has anybody waiting and each has holders it
//! may join (none; or only shared ones, for a shared request); otherwise it joins the back of
//! each lock's queue. So a queued exclusive request blocks every later shared one, and a
//! writer is never starved by a stream of readers.
//!
//! A multi-lock (`lock.acquire_all`) asks for 1 to 64 locks in one mode as one request: it is
//! granted all of them in one entry with one token, or it waits as a unit, in the queue of every
//! one of its locks from its arrival, and nobody behind it overtakes it on any of them. As a
//! route is one waypoint reservation of several volumes (`waypoint/route.rs`), a multi-lock is
//! one waiting request (one pending wait, `waiting.rs`; one answer; one deadline) and one grant
//! (`grant.rs`); it never holds part of what it waits for. Every queue is in the same log
//! order, so the earliest of all waiting requests heads each queue it is in and waits for
//! holders only: multi-locks over overlapping locks, asked in any order, cannot deadlock.
//!
//! When holders or waiters go (a release, a downgrade, a lease's end, a wait's expiry), the
//! heads are granted in the same entry (`handover.rs`): a head is granted when it heads the
//! queue of each of its locks and may join each one's holders. Granting a shared head makes
//! the next waiter the head, so a run of shared waiters is granted in one entry, up to the next
//! exclusive one. No herd: only the new holders are answered. Acquiring what the lease already
//! holds, in the same mode (and a multi-lock's all under one token), returns the existing token
//! (not counted: one release frees it); a shared hold is never upgraded (`acquire.rs`).
//!
//! Hold times (`lock_delay.rs`, `max_hold.rs`) apply to every hold whatever its mode. A
//! hold's max-hold deadline is its own: each shared holder's ends at its own grant plus its own
//! `max_hold_ms`, a multi-lock's holds end together (one deadline, one `Event::Released` for
//! each of its locks, as at its lease's end), and a downgrade keeps the deadline with the
//! token. A lock-delay holds back every lock the ended lease held, in either mode and through
//! a multi-lock: the lock grants nobody until the delay ends ([`Lock::admits`] says no), so a
//! request for it queues, and a multi-lock that names it waits for it as for a held lock. The
//! shared holders beside the ended lease keep their holds: the delay protects the next holder
//! from the one that vanished, it takes nothing from those still here.
//!
//! Invariants (checked by [`Resource::check_invariants`] for locks):
//! 1. After every entry a lock in the map has holders or waiters or is held back by a
//!    lock-delay; a lock with none of them is forgotten. One without holders is held back, or
//!    has at its head a multi-lock that waits for another of its locks (invariant 5).
//! 2. A lock has one exclusive holder and no shared ones, or shared holders only, in token
//!    order, each lease once: never an exclusive holder beside anybody.
//! 3. A holder's lease never also waits in the lock's queue.
//! 4. The waiters are a FIFO queue (`fifo.rs`, its invariants 1 to 4): arrival order, one
//!    slot per lease, bounded at enqueue, granted from the head.
//! 5. Whatever can be granted is granted: after every entry no head could be granted, that
//!    is, each head is behind another waiter in the queue of one of its locks, or may not join
//!    the holders of one of them (an exclusive head beside any holder, a shared one beside an
//!    exclusive holder, any head while a lock-delay holds the lock back).
//! 6. A multi-lock waits as one request: its places in its locks' queues have one lease, one
//!    request id, one mode and one arrival, and the pending-wait index names exactly those
//!    locks (checked against the leases by `Core::check_occupancy`).
//! 7. Lock holds that share a token are one multi-lock's grant: one lease, granted together
//!    (the same `since_ms`), ending together (the same max-hold deadline, if any).

mod acquire;
mod handover;

use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::{HolderInfo, LockMode, ResourceKind};
use serde::{Deserialize, Serialize};

use crate::fifo::Queue;
use crate::grant::{Core, Hold, Occupancy, Waiter};
use crate::resource::{Listed, Resource, list_by_name};
use crate::{
    Ctx, InvariantViolation, LeaseId, Limits, NameMap, ReleaseReason, Reply, ResourceKey, Text,
};

/// One lock in use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    /// The exclusive holder; `None` when the lock is held shared, when a multi-lock waiting
    /// for another of its locks heads its queue, or transiently inside an apply.
    pub holder: Option<Hold>,
    /// The shared holders, in token order; empty (and left out of the snapshot) when there are
    /// none, so a lock only ever held exclusively keeps its bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<Hold>,
    /// Waiters, head first.
    pub waiters: Queue,
    /// Whether a lock-delay holds it back: it grants nobody until the delay ends. Derived from
    /// the machine's record of the delays (`lock_delay.rs`, which sets and clears it and checks
    /// that the two agree), so left out of the snapshot and set again on restore.
    #[serde(skip)]
    pub held_back: bool,
}

impl Lock {
    /// Whether a request in `mode` may join the holders: exclusive only when nobody holds the
    /// lock, shared when no exclusive holder does; neither while a lock-delay holds it back.
    pub fn admits(&self, mode: LockMode) -> bool {
        !self.held_back
            && self.holder.is_none()
            && (mode == LockMode::Shared || self.shared.is_empty())
    }

    /// The holds, each with its mode, in token order.
    pub fn holds(&self) -> impl Iterator<Item = (&Hold, LockMode)> {
        let exclusive = self.holder.iter().map(|hold| (hold, LockMode::Exclusive));
        exclusive.chain(self.shared.iter().map(|hold| (hold, LockMode::Shared)))
    }

    /// `lease`'s hold and its mode, if it holds the lock.
    pub fn hold_of(&self, lease: LeaseId) -> Option<(&Hold, LockMode)> {
        self.holds().find(|(hold, _)| hold.lease == lease)
    }

    /// Adds a hold in `mode` (a new grant: its token is the newest).
    fn hold(&mut self, hold: Hold, mode: LockMode) {
        debug_assert!(
            self.admits(mode),
            "invariant 2: a grant joins holders it admits"
        );
        match mode {
            LockMode::Exclusive => self.holder = Some(hold),
            LockMode::Shared => self.shared.push(hold),
        }
    }

    /// Removes and returns `lease`'s hold, whatever its mode.
    fn take_hold(&mut self, lease: LeaseId) -> Option<Hold> {
        if self.holder.as_ref().is_some_and(|hold| hold.lease == lease) {
            return self.holder.take();
        }
        let at = self.shared.iter().position(|hold| hold.lease == lease)?;
        Some(self.shared.remove(at))
    }

    /// Whether nobody holds or waits for it and no lock-delay holds it back: then it is
    /// forgotten (invariant 1).
    fn is_unused(&self) -> bool {
        !self.held_back
            && self.holder.is_none()
            && self.shared.is_empty()
            && self.waiters.is_empty()
    }

    /// How many hold it.
    fn holder_count(&self) -> usize {
        usize::from(self.holder.is_some()) + self.shared.len()
    }
}

impl Resource for NameMap<Lock> {
    fn held_tokens(&self, name: &str) -> Vec<u64> {
        let holds = self.get(name).into_iter().flat_map(Lock::holds);
        holds.map(|(hold, _)| hold.token).collect()
    }

    /// Each holder and waiter with its mode: `shared` shown, exclusive left out, as in the
    /// request.
    fn inspect(&self, name: &str) -> Reply {
        let lock = self.get(name);
        let holders = lock.into_iter().flat_map(Lock::holds);
        Reply::Inspect {
            limit: None,
            holders: holders
                .map(|(hold, mode)| HolderInfo {
                    mode,
                    ..hold.info(None)
                })
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

    /// Leaves the lock to [`Resource::settle`], which hands it over or forgets it.
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        self.get_mut(name)?.take_hold(lease)
    }

    /// One place of a request; a multi-lock's other places are taken by the caller
    /// (`StateMachine::remove_waiter`).
    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        self.get_mut(name)?.waiters.take(agent, request_id)
    }

    /// Grants every head that became grantable, through the locks of the multi-locks it
    /// grants, and forgets the locks left unused (`handover.rs`).
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, keys: &[ResourceKey], _: &Limits) {
        let names = keys.iter().map(|key| key.name.clone()).collect();
        handover::hand_over(self, ctx, core, names);
    }

    /// What the default [`Resource::release`] does (take the hold, record its end, settle),
    /// but the lock is taken out of the map once and goes back only if someone still holds or
    /// waits for it, and the heads that ask for this lock alone are granted on the spot
    /// (`handover::grant_own_heads`): one look-up of the name for a free lock, two for a
    /// handover. Locks are the commonest release.
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
        let Some(hold) = lock.take_hold(lease) else {
            self.insert(held_name, lock);
            return false;
        };
        let key = ResourceKey::new(ResourceKind::Lock, &held_name);
        core.release(ctx, &key, &hold, ReleaseReason::Released);
        let multi_lock_ahead = handover::grant_own_heads(&mut lock, ctx, core, &key);
        if !lock.is_unused() {
            self.insert(held_name.clone(), lock);
        }
        if multi_lock_ahead {
            handover::hand_over(self, ctx, core, BTreeSet::from([held_name]));
        }
        true
    }

    fn in_use(&self) -> usize {
        self.len()
    }

    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>> {
        list_by_name(self, keep, |lock| (lock.holder_count(), lock.waiters.len()))
    }

    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation> {
        let mut units = BTreeMap::new();
        let mut grants = BTreeMap::new();
        for (name, lock) in self {
            let key = ResourceKey::new(ResourceKind::Lock, name);
            check_holders(&key, lock)?;
            for (hold, _) in lock.holds() {
                occupancy.hold(&key, hold);
                check_grant(&mut grants, &key, hold)?;
            }
            lock.waiters.check(&key)?;
            for waiter in lock.waiters.iter() {
                occupancy.wait(&key, waiter);
                check_unit(&mut units, name, waiter)?;
            }
        }
        for (name, lock) in self {
            let Some(head) = lock.waiters.front() else {
                continue;
            };
            let (_, names) = &units[&(&*head.agent, head.request_id.as_str())];
            let grantable = names.iter().all(|name| {
                let lock = &self[*name];
                lock.admits(head.mode) && lock.waiters.front().map(|w| w.seq) == Some(head.seq)
            });
            if grantable {
                return Err(violation!(
                    "lock {name:?}: its head {}/{} could be granted but waits",
                    head.agent,
                    head.request_id
                ));
            }
        }
        Ok(())
    }
}

/// Invariants 1 to 3 of one lock's holders.
fn check_holders(key: &ResourceKey, lock: &Lock) -> Result<(), InvariantViolation> {
    if lock.is_unused() {
        return Err(violation!(
            "{key} is in the map with nobody holding or waiting and no lock-delay"
        ));
    }
    if lock.holder.is_some() && !lock.shared.is_empty() {
        return Err(violation!(
            "{key} has an exclusive holder beside shared ones"
        ));
    }
    if !lock
        .shared
        .windows(2)
        .all(|pair| pair[0].token < pair[1].token)
    {
        return Err(violation!(
            "{key}: the shared holders are not in token order"
        ));
    }
    let leases: BTreeSet<LeaseId> = lock.shared.iter().map(|hold| hold.lease).collect();
    if leases.len() != lock.shared.len() {
        return Err(violation!("{key}: a lease holds it shared twice"));
    }
    if let Some((hold, _)) = lock
        .holds()
        .find(|(hold, _)| lock.waiters.has_lease(hold.lease))
    {
        return Err(violation!("{key}: holder lease {} also waits", hold.lease));
    }
    Ok(())
}

/// Invariant 7: holds with one token are one grant (lease, time, max-hold deadline), whatever
/// lock they are on.
fn check_grant(
    grants: &mut BTreeMap<u64, Grant>,
    key: &ResourceKey,
    hold: &Hold,
) -> Result<(), InvariantViolation> {
    let grant = (hold.lease, hold.since_ms, hold.max_hold_deadline_ms);
    if *grants.entry(hold.token).or_insert(grant) != grant {
        return Err(violation!(
            "{key}: token {} is also another grant's, on another lock",
            hold.token
        ));
    }
    Ok(())
}

/// One grant as each of its holds shows it: lease, grant time and max-hold deadline.
type Grant = (LeaseId, u64, Option<u64>);

/// A waiting request as its places in the queues show it: (lease, mode, arrival), and the
/// locks it waits in.
type Unit<'a> = ((LeaseId, LockMode, u64), Vec<&'a Text>);

/// Invariant 6: every place of one request in the queues has one lease, mode and arrival.
fn check_unit<'a>(
    units: &mut BTreeMap<(&'a str, &'a str), Unit<'a>>,
    name: &'a Text,
    waiter: &'a Waiter,
) -> Result<(), InvariantViolation> {
    let identity = (waiter.lease, waiter.mode, waiter.seq);
    let (seen, names) = units
        .entry((&*waiter.agent, waiter.request_id.as_str()))
        .or_insert((identity, Vec::new()));
    if *seen != identity {
        return Err(violation!(
            "waiter {}/{} waits in lock {name:?} as another request than in lock {:?}",
            waiter.agent,
            waiter.request_id,
            names[0]
        ));
    }
    names.push(name);
    Ok(())
}
