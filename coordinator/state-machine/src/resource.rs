//! The resource kinds behind one trait, and the one place that maps a kind to its state.
//!
//! A kind (lock, semaphore, waypoint, barrier) decides *whether* to grant, in its own acquire,
//! reserve or enter; `grant.rs` records the grant. Everything else the machine does to a resource,
//! whatever its kind — fence it, inspect it, release it, take a hold or a waiter out when a
//! lease or a wait ends, grant what became grantable, count and list it, check it — goes
//! through [`Resource`]. [`StateMachine::resource`] and [`StateMachine::resource_mut`] are the
//! only places that match a [`ResourceKind`] to its state: a new kind is one file that
//! implements [`Resource`], and one line in each of the two.
//!
//! Invariants:
//! 1. Resources settle in (kind, name) order ([`StateMachine::settle`]), so an entry that
//!    touches several emits its grants in the same order on every replica.
//! 2. A kind's holds and waiters are exactly what the leases record (each kind reports them to
//!    [`Occupancy`] in [`Resource::check_invariants`], checked by `Core::check_occupancy`).

use std::fmt;
use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::grant::{Core, Hold, Occupancy, Waiter};
use crate::{
    Ctx, Decision, InvariantViolation, LeaseId, Limits, NameMap, ReleaseReason, Reply,
    StateMachine, Text,
};

/// A resource: its kind and name. Written `kind:name` where it must be a string (JSON map keys);
/// the kind never contains `:`, so names may.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// Lock, semaphore, waypoint or barrier.
    pub kind: ResourceKind,
    /// The resource's name.
    pub name: Text,
}

impl ResourceKey {
    /// A key.
    pub fn new(kind: ResourceKind, name: &Text) -> Self {
        ResourceKey {
            kind,
            name: name.clone(),
        }
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.name)
    }
}

impl Serialize for ResourceKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ResourceKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let (kind, name) = text
            .split_once(':')
            .ok_or_else(|| serde::de::Error::custom(format!("resource key {text:?} has no ':'")))?;
        let kind = ResourceKind::parse(kind)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown resource kind {kind:?}")))?;
        Ok(ResourceKey {
            kind,
            name: Arc::from(name),
        })
    }
}

/// One resource in a listing: its name, how many hold it and how many wait for it.
pub type Listed<'a> = (&'a str, usize, usize);

/// [`Resource::list`] of a kind kept by name: every resource whose name `keep` accepts, with
/// the holder and waiter counts `counts` reads off its state.
pub(crate) fn list_by_name<'a, V>(
    resources: &'a NameMap<V>,
    keep: &dyn Fn(&str) -> bool,
    counts: impl Fn(&V) -> (usize, usize),
) -> Vec<Listed<'a>> {
    resources
        .iter()
        .filter(|(name, _)| keep(name))
        .map(|(name, resource)| {
            let (holders, waiters) = counts(resource);
            (&**name, holders, waiters)
        })
        .collect()
}

/// What the machine does to the resources of one kind, whatever the kind.
pub trait Resource {
    /// The tokens held on `name` now, in any order (`fence.check`).
    fn held_tokens(&self, name: &str) -> Vec<u64>;

    /// `inspect` of `name`: holders in token order, waiters in queue order.
    fn inspect(&self, name: &str) -> Reply;

    /// The key of `name` when it is in use, with the state's own name: shared, not copied,
    /// for the events.
    fn held_key(&self, name: &str) -> Option<ResourceKey>;

    /// Removes and returns `lease`'s hold on `name`, leaving the resource to [`Self::settle`].
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold>;

    /// Removes and returns the waiter of `agent`'s request `request_id` on `name`, leaving the
    /// resource to [`Self::settle`].
    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter>;

    /// Grants what became grantable on `keys` (this kind's, in name order) after holds or
    /// waiters went away, and forgets the resources left with neither.
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, keys: &[ResourceKey], limits: &Limits);

    /// `lease`'s release of `name` (the lease already checked live and the agent's): ends its
    /// hold and grants what became grantable, in this entry; false when `lease` does not hold
    /// `name` (nothing changed).
    fn release(
        &mut self,
        ctx: &mut Ctx,
        core: &mut Core,
        name: &str,
        lease: LeaseId,
        limits: &Limits,
    ) -> bool {
        let Some(key) = self.held_key(name) else {
            return false;
        };
        let Some(hold) = self.take_hold(&key.name, lease) else {
            return false;
        };
        core.release(ctx, &key, &hold, ReleaseReason::Released);
        self.settle(ctx, core, std::slice::from_ref(&key), limits);
        true
    }

    /// How many resources of this kind are in use: what counts against `resources_max`.
    fn in_use(&self) -> usize;

    /// Every resource whose name `keep` accepts, in any order, with its holder and waiter
    /// counts (`admin.resources`).
    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>>;

    /// The kind's own invariants; reports every hold and waiter to `occupancy` for the
    /// cross-check with the leases.
    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation>;
}

impl StateMachine {
    /// The resources of `kind`: the one place a kind is matched to its state, with
    /// [`Self::resource_mut`].
    pub(crate) fn resource(&self, kind: ResourceKind) -> &dyn Resource {
        match kind {
            ResourceKind::Lock => &self.locks,
            ResourceKind::Sem => &self.sems,
            ResourceKind::Waypoint => &self.waypoints,
            ResourceKind::Election => &self.elections,
            ResourceKind::Barrier => &self.barriers,
        }
    }

    /// The resources of `kind`, to change, with the bookkeeping every kind shares and the
    /// limits beside them.
    pub(crate) fn resource_mut(
        &mut self,
        kind: ResourceKind,
    ) -> (&mut dyn Resource, &mut Core, &Limits) {
        let StateMachine {
            locks,
            sems,
            waypoints,
            elections,
            barriers,
            core,
            limits,
            ..
        } = self;
        let resource: &mut dyn Resource = match kind {
            ResourceKind::Lock => locks,
            ResourceKind::Sem => sems,
            ResourceKind::Waypoint => waypoints,
            ResourceKind::Election => elections,
            ResourceKind::Barrier => barriers,
        };
        (resource, core, limits)
    }

    /// `lock.release`, `sem.release`, `waypoint.release`: ends the lease's hold and grants what
    /// became grantable, in this entry.
    pub(crate) fn release(
        &mut self,
        ctx: &mut Ctx,
        kind: ResourceKind,
        agent: &str,
        name: &str,
        lease: &str,
    ) -> Decision {
        let lease = self.core.live_lease(agent, lease)?;
        let (resource, core, limits) = self.resource_mut(kind);
        if resource.release(ctx, core, name, lease, limits) {
            return Ok(Reply::Done);
        }
        let message = format!("lease {lease} does not hold {} {name:?}", kind.as_str());
        Err(Reply::refused(ErrorCode::NotHolder, message))
    }

    /// Takes one waiting request on `key` out of its queue — out of every queue of a
    /// multi-lock — and answers it with an error, once; the resources it waited on, for the
    /// caller to settle. Nothing when it waits no more: a multi-lock answered already, through
    /// another of its locks.
    pub(crate) fn remove_waiter(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        agent: &str,
        request_id: &str,
        code: ErrorCode,
        message: &str,
    ) -> Vec<ResourceKey> {
        let Some(keys) = self.core.wait_keys(agent, request_id) else {
            return Vec::new();
        };
        debug_assert!(
            keys.contains(key),
            "{key} is one of the request's resources"
        );
        let (resource, core, _) = self.resource_mut(key.kind);
        let mut waiters = keys.iter().map(|key| {
            resource
                .take_waiter(&key.name, agent, request_id)
                .expect("the pending-wait index points at a queued waiter")
        });
        let waiter = waiters
            .next()
            .expect("a request waits on at least one resource");
        waiters.for_each(drop);
        core.answer_waiter(ctx, &keys, waiter, code, message);
        keys
    }

    /// Grants whatever became grantable on these resources, given in (kind, name) order, after
    /// holds or waiters went away, and forgets resources left with neither (invariant 1); a
    /// new leader of an election is in the key space when it returns (`election.rs`). A lock
    /// held back by a lock-delay grants nobody and stays until the delay ends (`Lock::admits`,
    /// `lock_delay.rs`).
    pub(crate) fn settle(&mut self, ctx: &mut Ctx, keys: &[ResourceKey]) {
        debug_assert!(
            keys.is_sorted(),
            "invariant 1: keys settle in (kind, name) order"
        );
        for same_kind in keys.chunk_by(|a, b| a.kind == b.kind) {
            let (resource, core, limits) = self.resource_mut(same_kind[0].kind);
            resource.settle(ctx, core, same_kind, limits);
        }
        self.write_election_mirror();
    }

    /// How many resources are in use: locks and semaphores held (or waited for), waypoint
    /// names held or waited for; what `resources_max` bounds (a backup's summary says it).
    pub fn resource_count(&self) -> usize {
        ResourceKind::ALL
            .into_iter()
            .map(|kind| self.resource(kind).in_use())
            .sum()
    }

    /// Refuses a request that would put one resource more in use than `resources_max`.
    pub(crate) fn resources_full(&self) -> Result<(), Reply> {
        self.resources_full_for(1)
    }

    /// [`Self::resources_full`] of a request that puts `count` resources more in use (a
    /// multi-lock's locks not yet in use); none is always fine, even past a lowered bound.
    pub(crate) fn resources_full_for(&self, count: usize) -> Result<(), Reply> {
        let max = self.limits.resources_max;
        if count == 0 || self.resource_count() + count <= max as usize {
            return Ok(());
        }
        let message = format!("{max} resources are in use, the limit");
        Err(Reply::refused(ErrorCode::ResourceExhausted, message))
    }

    /// Every kind's invariants, then the holds and waiters they report against the leases.
    pub(crate) fn check_resources(&self) -> Result<(), InvariantViolation> {
        self.core.check_occupancy(&self.occupancy()?)
    }

    /// Every kind's invariants, and the holds and waiters they report.
    pub(crate) fn occupancy(&self) -> Result<Occupancy, InvariantViolation> {
        let mut occupancy = Occupancy::default();
        for kind in ResourceKind::ALL {
            self.resource(kind).check_invariants(&mut occupancy)?;
        }
        Ok(occupancy)
    }
}
