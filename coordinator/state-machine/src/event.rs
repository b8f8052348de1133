//! What an applied entry did, for the node layer ([`Event`]), and why a lease or a hold ended.

use hivekeeper_protocol::Priority;
use serde::{Deserialize, Serialize};

use crate::{AccountChange, LeaseId, Reply, ResourceKey, Text};

/// Why a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseEnd {
    /// Its agent revoked it.
    Revoked,
    /// The leader found it past its deadline.
    Expired,
    /// An operator ended it (`admin.revoke`); its owner is told `lease.revoked`.
    AdminRevoked,
}

/// Why a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// The holder released it.
    Released,
    /// The holder's lease ended; the holder should be told it lost the resource.
    LeaseEnded,
    /// The reservation's time window ended (`end_ms` passed on the machine's clock).
    WindowEnded,
    /// The reservation was preempted by a request of a higher priority and its vacate deadline
    /// passed before it was released; the holder should be told it lost the reservation
    /// (`waypoint/preempt.rs`).
    Preempted,
    /// The hold's `max_hold_ms` ran out (its deadline passed on the machine's clock), whether or
    /// not its lease lived; the holder should be told it lost the resource (`max_hold.rs`).
    MaxHold,
}

/// What an applied entry did, for the node layer: deferred responses, notices to agents, the
/// lease keeper's bookkeeping and metrics. Emitted in the order things happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A lease was created; the leader's keeper starts its deadline.
    LeaseGranted {
        /// Owner.
        agent: Text,
        /// The lease.
        lease: LeaseId,
        /// Its TTL.
        ttl_ms: u64,
    },
    /// A lease ended; everything it held was released in the same entry.
    LeaseEnded {
        /// Owner.
        agent: Text,
        /// The lease.
        lease: LeaseId,
        /// Revoked or expired.
        reason: LeaseEnd,
    },
    /// A resource was granted, immediately or from its queue.
    Granted {
        /// The resource.
        key: ResourceKey,
        /// The new holder.
        agent: Text,
        /// The holder's lease.
        lease: LeaseId,
        /// The grant's token.
        token: u64,
        /// How long the grant waited in the queue, 0 when granted at once.
        waited_ms: u64,
        /// True when granted from the queue (a handover when the same entry released it).
        queued: bool,
    },
    /// A hold ended.
    Released {
        /// The resource.
        key: ResourceKey,
        /// The former holder.
        agent: Text,
        /// The former holder's lease.
        lease: LeaseId,
        /// The token of the hold that ended.
        token: u64,
        /// How long it was held.
        held_ms: u64,
        /// Released by its holder, or taken away with its lease.
        reason: ReleaseReason,
    },
    /// A request joined a resource's queue (its reply is [`Reply::Queued`]; a retry of a
    /// request that already waits emits nothing). Every `Queued` is followed, in this entry or
    /// a later one, by exactly one [`Event::Respond`] with the same key, agent and request id:
    /// the node keeps its waiters gauge from these two alone.
    Queued {
        /// The resource waited for.
        key: ResourceKey,
        /// The waiting agent.
        agent: Text,
        /// The id of the waiting request.
        request_id: String,
    },
    /// The final answer to a request that was [`Reply::Queued`]: it left the queue of `key`,
    /// granted, timed out or with its lease ended.
    Respond {
        /// The resource it waited for.
        key: ResourceKey,
        /// The waiting agent.
        agent: Text,
        /// The request id being answered.
        request_id: String,
        /// The answer: `Granted`, or `Refused` with `timeout` or `lease_not_found`.
        reply: Reply,
    },
    /// A held reservation was preempted: a request of a higher priority needs its airspace,
    /// and the machine ends it at `vacate_by_ms` unless it is released first
    /// (`waypoint/preempt.rs`). Emitted once per reservation; the node tells the holder
    /// `reservation.preempted`.
    Preempted {
        /// The reservation (kind `waypoint`, a route's too).
        key: ResourceKey,
        /// The holder.
        agent: Text,
        /// The holder's lease.
        lease: LeaseId,
        /// The preempted reservation's token.
        token: u64,
        /// When the machine ends it unless released: the entry's time plus
        /// `reservation_vacate_ms`.
        vacate_by_ms: u64,
        /// The highest priority among the requests that preempt it.
        priority: Priority,
        /// Whether the reservation is a route (for the notice's `kind`).
        route: bool,
    },
    /// A preempted reservation's vacate deadline was dropped, because no waiting request
    /// needs its airspace any more (`waypoint/preempt.rs`: the preemptor went away, or the
    /// reservation was amended out of its way): the holder keeps it, with its token. Emitted
    /// once per dropped deadline; the node tells the holder
    /// `reservation.preemption_withdrawn`. Not emitted when the reservation itself ends.
    PreemptionWithdrawn {
        /// The reservation (kind `waypoint`, a route's too).
        key: ResourceKey,
        /// The holder.
        agent: Text,
        /// The holder's lease.
        lease: LeaseId,
        /// The reservation's token, which it keeps.
        token: u64,
        /// Whether the reservation is a route (for the notice's `kind`).
        route: bool,
    },
    /// An account was added, rotated or removed; on a rotation or removal the node closes the
    /// agent's connections (a removal's lease ends come in the same entry).
    AccountChanged {
        /// The account's agent id.
        agent: Text,
        /// What happened.
        change: AccountChange,
    },
}
