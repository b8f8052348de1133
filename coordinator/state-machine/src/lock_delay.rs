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
//! Locks only, as in Consul (whose lock-delay applies to lock acquisitions, not to its
//! semaphore recipe's permits): a semaphore's permits are interchangeable, and a held-back
//! permit would shrink the capacity every other holder counts on; waypoint reservations have
//! their own vacate deadlines (`waypoint/preempt.rs`). Both are freed at once when a lease ends,
//! as before.
//!
//! A held-back lock stays in the lock map without a holder (its waiters queue there as usual)
//! and its name is recorded here with the delay's end, which survives the lock having nobody
//! waiting; the snapshot carries this record only while it is not empty. The settle pass
//! (`StateMachine::settle`) leaves a held-back lock alone. When the delay ends the leader
//! proposes `Command::ExpireHoldTimes` (`hold_time.rs`), whose entry forgets the record and
//! settles the lock: its head waiter is granted in that entry, in queue order, or the lock is
//! forgotten.
//!
//! Invariants (checked by [`StateMachine::check_lock_delays`] after every apply in tests):
//! 1. A held-back lock is in use and has no holder; a lock in use without a holder is held back.
//!    So nobody is granted a lock while its delay runs, and no lock is left holder-less.
//! 2. The end index lists exactly the held-back locks, each under its delay's end.
//! 3. Only a lease that had a delay and ended by expiry or by an operator holds its locks back;
//!    a delay ends only in an `ExpireHoldTimes` entry of a current term whose time has reached
//!    its end (`hold_time.rs`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::lease::Lease;
use crate::{Ctx, InvariantViolation, LeaseEnd, Reply, ResourceKey, StateMachine, Text};

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

    /// Holds back the locks `lease` held, if it has a delay and ended by expiry or by an
    /// operator (invariant 3). Called as the lease ends, before its holds are taken.
    pub fn hold_back(&mut self, ctx: &Ctx, lease: &Lease, reason: LeaseEnd) {
        if lease.lock_delay_ms == 0 || reason == LeaseEnd::Revoked {
            return;
        }
        let until_ms = ctx.now_ms.saturating_add(lease.lock_delay_ms);
        for key in lease.holds.iter() {
            if key.kind == ResourceKind::Lock {
                self.insert(key.name.clone(), until_ms);
            }
        }
    }

    fn insert(&mut self, name: Text, until_ms: u64) {
        if let Some(old_ms) = self.until_ms.insert(name.clone(), until_ms) {
            self.by_end.remove(&(old_ms, name.clone()));
        }
        self.by_end.insert((until_ms, name));
    }

    /// Forgets the delays that ended at `now_ms`: the locks to settle.
    pub fn end_due(&mut self, now_ms: u64) -> Vec<ResourceKey> {
        let mut ended = Vec::new();
        while let Some((until_ms, _)) = self.by_end.first()
            && *until_ms <= now_ms
        {
            let (_, name) = self.by_end.pop_first().expect("first() was Some");
            self.until_ms.remove(&name);
            ended.push(ResourceKey::new(ResourceKind::Lock, &name));
        }
        ended
    }

    /// `keys` without the held-back locks: what a settle pass may grant (invariant 1).
    pub fn not_held_back<'k>(&self, keys: &'k [ResourceKey]) -> Cow<'k, [ResourceKey]> {
        let held_back = |key: &ResourceKey| {
            key.kind == ResourceKind::Lock && self.until_ms.contains_key(&key.name)
        };
        if !keys.iter().any(held_back) {
            return Cow::Borrowed(keys);
        }
        Cow::Owned(keys.iter().filter(|key| !held_back(key)).cloned().collect())
    }

    /// The refusal of a `lock.acquire` with `wait_ms: 0` of a held-back lock: `would_block`,
    /// naming the delay and its end. Any other acquire of it queues.
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
        let holders_by_lock: BTreeMap<&str, usize> = self
            .resource(ResourceKind::Lock)
            .list(&|_| true)
            .into_iter()
            .map(|(name, holders, _)| (name, holders))
            .collect();
        for (name, holders) in &holders_by_lock {
            if *holders == 0 && !delays.until_ms.contains_key(*name) {
                return Err(violation!(
                    "lock {name:?} has no holder after the entry and no lock-delay"
                ));
            }
        }
        for name in delays.until_ms.keys() {
            match holders_by_lock.get(&**name) {
                None => {
                    return Err(violation!(
                        "lock {name:?} is held back by a lock-delay but not in use"
                    ));
                }
                Some(holders) if *holders > 0 => {
                    return Err(violation!(
                        "lock {name:?} is held back by a lock-delay but has a holder"
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
