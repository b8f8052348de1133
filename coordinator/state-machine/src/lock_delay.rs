//! Lock-delay (Chubby's and Consul's): the locks of a lease that ended without releasing them
//! are granted to nobody for a while.
//!
//! A holder whose lease expired, or that an operator cut off, may not know it yet: it may still
//! be writing under the lock when the next holder starts. Fencing tokens are the safety
//! mechanism; the delay is the courtesy for resources that cannot check a token: it gives the
//! old holder time to notice (the SDK's own deadline, a `lock.lost` event) and stop. A lease
//! asks for it at grant (`lease.grant`'s `lock_delay_ms`, kept on the lease). When the lease
//! ends by expiry or by an operator (`admin.revoke`, an account's removal), each lock it held
//! is held back until the entry's time plus the delay, on the machine's clock: its head waiter
//! is not granted, a new acquirer queues (or, with `wait_ms: 0`, is refused `would_block`
//! naming the delay and its end). A `lock.release` or the agent's own `lease.revoke` is the
//! holder saying it has stopped, so neither holds anything back.
//!
//! Whatever the lease held it in: every lock of a multi-lock it held is held back, and so is a
//! lock it held shared. The other shared holders of such a lock keep their holds (a delay
//! takes nothing from the holders still here), but nobody joins them, shared or exclusive,
//! until the delay ends. A reader joining a vanished reader would do no harm, but one rule for
//! every mode keeps the delay a property of the lock (one record per lock, whatever the ended
//! hold's mode), so that whoever holds the lock next, in either mode, starts after the old
//! holder had its time to stop. When a second lease that held the same lock shared ends with a
//! delay of its own, the lock is held back until the later of the two ends.
//!
//! Locks only, as in Consul (whose lock-delay applies to lock acquisitions, not to its
//! semaphore recipe's permits): a semaphore's permits are interchangeable, and a held-back
//! permit would shrink the capacity every other holder counts on; waypoint reservations have
//! their own vacate deadlines (`waypoint/preempt.rs`). Both are freed at once when a lease ends,
//! as before.
//!
//! A held-back lock stays in the lock map, with no holder but the shared ones that held it
//! beside the ended lease (its waiters queue there as usual), and its name is recorded here
//! with the delay's end, which survives the lock having nobody waiting; the snapshot carries
//! this record only while it is not empty. The lock itself carries a derived flag
//! (`Lock::held_back`, not in the snapshot) through which every grant path of the lock module
//! leaves it alone (`Lock::admits`). When the delay ends the leader proposes
//! `Command::ExpireHoldTimes` (`hold_time.rs`), whose entry forgets the record, clears the
//! flag and settles the lock: its head waiters are granted in that entry, in queue order, or
//! the lock is forgotten.
//!
//! Invariants (checked by [`StateMachine::check_lock_delays`] after every apply in tests):
//! 1. A held-back lock is in use and has no exclusive holder (only the ended lease could have
//!    held it exclusive), and it is flagged held back; a lock not held back is not flagged.
//!    So nobody is granted a lock while its delay runs (`lock/mod.rs`, invariant 5).
//! 2. The end index lists exactly the held-back locks, each under its delay's end.
//! 3. Only a lease that had a delay and ended by expiry or by an operator holds its locks back;
//!    a delay ends only in an `ExpireHoldTimes` entry of a current term whose time has reached
//!    its end (`hold_time.rs`).

use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::lease::Lease;
use crate::lock::Lock;
use crate::{Ctx, InvariantViolation, LeaseEnd, NameMap, Reply, ResourceKey, StateMachine, Text};

/// Whether a lease's `lock_delay_ms` is 0, no delay (left out of the snapshot).
pub fn no_lock_delay(lock_delay_ms: &u64) -> bool {
    *lock_delay_ms == 0
}

/// The locks held back by a lock-delay: the end of each one's delay by name (what the snapshot
/// carries, as a map), and the same by end (derived, invariant 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockDelays {
    /// When each held-back lock's delay ends, machine clock.
    until_ms: BTreeMap<Text, u64>,
    /// The same, earliest first: the due ones are a prefix.
    by_end: BTreeSet<(u64, Text)>,
}

impl LockDelays {
    /// Whether no lock is held back (the snapshot then leaves the record out).
    pub fn is_empty(&self) -> bool {
        self.until_ms.is_empty()
    }

    /// When the delay of lock `name` ends, if it is held back.
    pub fn until_ms(&self, name: &str) -> Option<u64> {
        self.until_ms.get(name).copied()
    }

    /// The earliest end of a delay, if any lock is held back.
    pub fn next_ms(&self) -> Option<u64> {
        self.by_end.first().map(|(until_ms, _)| *until_ms)
    }

    /// Holds back the locks `lease` held, in any mode, if it has a delay and ended by expiry
    /// or by an operator (invariant 3), flagging each in `locks`. Called as the lease ends,
    /// before its holds are taken.
    pub fn hold_back(
        &mut self,
        ctx: &Ctx,
        lease: &Lease,
        reason: LeaseEnd,
        locks: &mut NameMap<Lock>,
    ) {
        if lease.lock_delay_ms == 0 || reason == LeaseEnd::Revoked {
            return;
        }
        let until_ms = ctx.now_ms.saturating_add(lease.lock_delay_ms);
        for key in lease.holds.iter() {
            if key.kind == ResourceKind::Lock {
                let lock = locks
                    .get_mut(&key.name)
                    .expect("grant.rs invariant 2: a lease's holds are in use");
                lock.held_back = true;
                self.insert(key.name.clone(), until_ms);
            }
        }
    }

    /// Records that `name` is held back until `until_ms`, or later if it already is (another
    /// shared holder's delay).
    fn insert(&mut self, name: Text, until_ms: u64) {
        let until_ms = match self.until_ms.get(&name) {
            Some(&old_ms) if old_ms >= until_ms => return,
            Some(&old_ms) => {
                self.by_end.remove(&(old_ms, name.clone()));
                until_ms
            }
            None => until_ms,
        };
        self.until_ms.insert(name.clone(), until_ms);
        self.by_end.insert((until_ms, name));
    }

    /// Forgets the delays that ended at `now_ms` and clears their locks' flags in `locks`: the
    /// locks to settle.
    pub fn end_due(&mut self, now_ms: u64, locks: &mut NameMap<Lock>) -> Vec<ResourceKey> {
        let mut ended = Vec::new();
        while let Some((until_ms, _)) = self.by_end.first()
            && *until_ms <= now_ms
        {
            let (_, name) = self.by_end.pop_first().expect("first() was Some");
            self.until_ms.remove(&name);
            if let Some(lock) = locks.get_mut(&name) {
                lock.held_back = false;
            }
            ended.push(ResourceKey::new(ResourceKind::Lock, &name));
        }
        ended
    }

    /// Flags the held-back locks in `locks`, as restored from a snapshot (which carries the
    /// record, not the flags).
    pub fn flag(&self, locks: &mut NameMap<Lock>) {
        for name in self.until_ms.keys() {
            if let Some(lock) = locks.get_mut(name) {
                lock.held_back = true;
            }
        }
    }

    /// The refusal of a `lock.acquire` or `lock.acquire_all` with `wait_ms: 0` of a held-back
    /// lock: `would_block`, naming the delay and its end. Any other acquire of it queues.
    pub fn try_refused(&self, name: &str, wait_ms: Option<u64>) -> Result<(), Reply> {
        match self.until_ms(name) {
            Some(until_ms) if wait_ms == Some(0) => Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!(
                    "lock {name:?} is held back by its last holder's lock-delay until {until_ms} \
                     (the service's clock, UTC ms): that lease ended without releasing it"
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl Serialize for LockDelays {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.until_ms.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LockDelays {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let until_ms = BTreeMap::<Text, u64>::deserialize(deserializer)?;
        let by_end = until_ms
            .iter()
            .map(|(name, until_ms)| (*until_ms, name.clone()))
            .collect();
        Ok(LockDelays { until_ms, by_end })
    }
}

impl StateMachine {
    /// Invariants 1 and 2.
    pub(crate) fn check_lock_delays(&self) -> Result<(), InvariantViolation> {
        let delays = &self.lock_delays;
        let by_end: BTreeSet<(u64, Text)> = delays
            .until_ms
            .iter()
            .map(|(name, until_ms)| (*until_ms, name.clone()))
            .collect();
        if by_end != delays.by_end {
            return Err(violation!(
                "lock-delay end index disagrees with the delays: {:?} against {:?}",
                delays.by_end,
                delays.until_ms
            ));
        }
        for name in delays.until_ms.keys() {
            let Some(lock) = self.locks.get(name) else {
                return Err(violation!(
                    "lock {name:?} is held back by a lock-delay but not in use"
                ));
            };
            if lock.holder.is_some() {
                return Err(violation!(
                    "lock {name:?} is held back by a lock-delay but has an exclusive holder"
                ));
            }
        }
        for (name, lock) in &self.locks {
            match (lock.held_back, delays.until_ms.contains_key(name)) {
                (true, false) => {
                    return Err(violation!(
                        "lock {name:?} is flagged held back without a lock-delay"
                    ));
                }
                (false, true) => {
                    return Err(violation!(
                        "lock {name:?} is held back by a lock-delay but not flagged"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}
