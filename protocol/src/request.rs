//! Requests: `{"id": "...", "op": "...", ...fields}` on `hk/v1/req/{agent}`.
//!
//! The serde form of [`Op`] *is* the wire form (internally tagged by `op`), so the same JSON can
//! be stored in the Raft log and replayed. Decoding is stepwise so that every failure gets the
//! most precise code: size first (`too_large`), then JSON and the `id` (`bad_request`, with
//! `"id": null`), then the op name (`unknown_op`), then the op's fields and their ranges
//! (`bad_request`, echoing the id).
//!
//! # Layout
//! - this file: the request, the resource kinds and every op with its wire fields, declared once
//!   (`declare_ops!` derives its name, its class and the list of names);
//! - `accessors`: what an op names (its lease, its wait) and whether it writes;
//! - `validation`: the range checks of an op's fields and of a waypoint's geometry;
//! - `decode`: the stepwise decoder from bytes or JSON to a valid [`Request`];
//! - `geometry`: a route's [`Volume`]s and a reservation's validated [`Area`].

mod accessors;
mod decode;
mod geometry;
mod validation;

pub use accessors::CLUSTER_VERSION_INITIAL;
pub use geometry::{Area, Volume};

use serde::{Deserialize, Serialize};

use crate::airspace::QueryVolume;
use crate::kv::{Compare, TxnOp};
use crate::lock_mode::LockMode;
use crate::priority::Priority;
use crate::role::Role;

/// One request: the agent's id for it, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Request {
    /// Unique per agent. A retry reuses it, and the service answers a retry with the outcome
    /// of the first attempt instead of doing the work twice.
    pub id: String,
    /// The operation and its fields, flattened beside `id` on the wire.
    #[serde(flatten)]
    pub op: Op,
}

/// The kinds of resource an agent can hold. `inspect`, `fence.check` and `admin.resources`
/// name one.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A FIFO lock (`lock.*`).
    #[default]
    Lock,
    /// A counting semaphore (`sem.*`).
    Sem,
    /// A waypoint reservation (`waypoint.*`).
    Waypoint,
    /// A leader election (`election.*`): the leader holds it, the candidates wait.
    Election,
    /// A reusable double barrier (`barrier.*`).
    Barrier,
}

impl ResourceKind {
    /// Every kind, in the order `admin.resources` lists them.
    pub const ALL: [ResourceKind; 5] = [
        ResourceKind::Lock,
        ResourceKind::Sem,
        ResourceKind::Waypoint,
        ResourceKind::Election,
        ResourceKind::Barrier,
    ];

    /// The kind named `text` on the wire (`lock`, `sem`, `waypoint`, `election`, `barrier`).
    pub fn parse(text: &str) -> Option<ResourceKind> {
        ResourceKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }

    /// The kind as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Lock => "lock",
            ResourceKind::Sem => "sem",
            ResourceKind::Waypoint => "waypoint",
            ResourceKind::Election => "election",
            ResourceKind::Barrier => "barrier",
        }
    }
}

/// Who answers an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// A command for the state machine, applied through the Raft log.
    Write,
    /// A read the state machine answers from its state, after a read-index round.
    Read,
    /// Answered by the node from Raft itself (its status, a snapshot, its membership).
    Node,
}

/// Declares [`Op`] once: each variant's `#[op(name, class)]` becomes its serde tag, its entry
/// in [`Op::NAMES`] and its arms of [`Op::name`] and [`Op::class`].
macro_rules! declare_ops {
    (
        $(#[$meta:meta])*
        pub enum Op {
            $(
                $(#[doc = $doc:expr])*
                #[op($wire:literal, $class:ident $(, since = $since:literal)?)]
                $variant:ident { $($fields:tt)* }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub enum Op {
            $(
                $(#[doc = $doc])*
                #[serde(rename = $wire)]
                $variant { $($fields)* },
            )*
        }

        impl Op {
            /// Every op name, in documentation order.
            pub const NAMES: [&'static str; [$($wire),*].len()] = [$($wire),*];

            /// The op's wire name, e.g. `"lock.acquire"`.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$variant { .. } => $wire,)*
                }
            }

            /// Who answers the op.
            pub fn class(&self) -> OpClass {
                match self {
                    $(Op::$variant { .. } => OpClass::$class,)*
                }
            }

            /// The cluster version the op needs (its `since`, else [`CLUSTER_VERSION_INITIAL`]):
            /// below it a node refuses the op before the log, as an older member could not
            /// apply it (docs/OPERATIONS.md, "Upgrading one member at a time").
            pub fn cluster_version_needed(&self) -> u32 {
                match self {
                    $(Op::$variant { .. } => declare_ops!(@since $($since)?),)*
                }
            }
        }
    };
    (@since) => { CLUSTER_VERSION_INITIAL };
    (@since $since:literal) => { $since };
}

declare_ops! {
/// Every operation of protocol v1 with its fields: the one declaration of an op. Field names
/// and units are the wire's; `#[op(name, class)]` gives its wire name and who answers it
/// ([`OpClass`]), `since = N` the cluster version it needs if above 1. [`Op::NAMES`],
/// [`Op::name`], [`Op::class`], [`Op::cluster_version_needed`] and the serde tag derive from it.
/// An `Option` field is optional on the wire and left out when `None` (`skip_serializing_none`,
/// as on every wire type whose optional fields are all left out when absent).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub enum Op {
    /// Create a lease for the sending agent, living `ttl_ms` past its last keepalive.
    #[op("lease.grant", Write)]
    LeaseGrant {
        /// Time to live in milliseconds; the service's configured range applies.
        ttl_ms: u64,
        /// When the lease ends by expiry or by an operator, nobody is granted the locks it held
        /// for this long (ms, 0 to [`crate::validate::LOCK_DELAY_MS_MAX`]); 0, the default,
        /// for none. Absent from the serialized form when 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        lock_delay_ms: u64,
    },
    /// Restart the lease's countdown. Not a Raft write: the leader keeps deadlines in memory.
    #[op("lease.keepalive", Read)]
    LeaseKeepalive {
        /// The lease to keep alive.
        lease: String,
    },
    /// End the lease now, releasing everything it holds and dropping everything it waits for.
    #[op("lease.revoke", Write)]
    LeaseRevoke {
        /// The lease to revoke.
        lease: String,
    },
    /// Take a FIFO lock, exclusive or shared, or queue for it.
    #[op("lock.acquire", Write)]
    LockAcquire {
        /// The lock's name.
        name: String,
        /// The lease the lock will be bound to.
        lease: String,
        /// Absent: wait while the lease lives. `0`: try once. `n`: wait at most n ms.
        wait_ms: Option<u64>,
        /// The hold ends this long after its grant (ms, at least 1, at most the service's
        /// longest lease TTL), whether or not the lease lives; absent: no bound.
        max_hold_ms: Option<u64>,
        /// Exclusive (absent, the default) or shared with other shared holders
        /// ([`crate::LockMode`]).
        #[serde(default, skip_serializing_if = "LockMode::is_exclusive")]
        mode: LockMode,
    },
    /// Release a held lock; the head waiter is granted in the same log entry.
    #[op("lock.release", Write)]
    LockRelease {
        /// The lock's name.
        name: String,
        /// The lease holding it.
        lease: String,
    },
    /// Make an exclusive hold shared, keeping its token; the shared waiters at the head of the
    /// queue are granted in the same log entry.
    #[op("lock.downgrade", Write)]
    LockDowngrade {
        /// The lock's name.
        name: String,
        /// The lease holding it exclusively.
        lease: String,
    },
    /// Take 1 to [`crate::validate::LOCK_NAMES_MAX`] locks at once, in one mode, with one
    /// token, or queue for them as a unit: it waits in every name's queue and is granted in
    /// the entry where it can have all of them.
    #[op("lock.acquire_all", Write)]
    LockAcquireAll {
        /// The locks' names, distinct.
        names: Vec<String>,
        /// The lease the locks will be bound to.
        lease: String,
        /// As for `lock.acquire`.
        wait_ms: Option<u64>,
        /// As for `lock.acquire`: at the end the hold of every name ends together.
        max_hold_ms: Option<u64>,
        /// As for `lock.acquire`: every name in this mode.
        #[serde(default, skip_serializing_if = "LockMode::is_exclusive")]
        mode: LockMode,
    },
    /// Release several held locks together, in one log entry, or none of them.
    #[op("lock.release_all", Write)]
    LockReleaseAll {
        /// The locks' names, distinct.
        names: Vec<String>,
        /// The lease holding every one of them.
        lease: String,
    },
    /// Take `permits` of a counting semaphore of capacity `limit`, or queue for them.
    #[op("sem.acquire", Write)]
    SemAcquire {
        /// The semaphore's name.
        name: String,
        /// Its capacity; fixed by the first acquirer while the semaphore is in use.
        limit: u32,
        /// The lease the permits will be bound to.
        lease: String,
        /// How many permits (weight), 1 by default.
        #[serde(default = "one")]
        permits: u32,
        /// As for `lock.acquire`.
        wait_ms: Option<u64>,
        /// As for `lock.acquire`.
        max_hold_ms: Option<u64>,
    },
    /// Give back the permits a lease holds on a semaphore.
    #[op("sem.release", Write)]
    SemRelease {
        /// The semaphore's name.
        name: String,
        /// The lease holding the permits.
        lease: String,
    },
    /// Reserve a named waypoint, and with `lat`/`lon` a vertical cylinder around it.
    #[op("waypoint.reserve", Write)]
    WaypointReserve {
        /// The waypoint's name; two reservations of one name always conflict.
        name: String,
        /// The lease the reservation will be bound to.
        lease: String,
        /// Latitude of the cylinder's axis, degrees (WGS84).
        lat: Option<f64>,
        /// Longitude of the cylinder's axis, degrees (WGS84).
        lon: Option<f64>,
        /// Bottom of the altitude band, metres; absent means no lower bound.
        alt_min_m: Option<f64>,
        /// Top of the altitude band, metres; absent means no upper bound.
        alt_max_m: Option<f64>,
        /// Radius of the cylinder, metres; 0 by default (a vertical line).
        radius_m: Option<f64>,
        /// As for `lock.acquire`.
        wait_ms: Option<u64>,
        /// Start of the reservation's time window, UTC milliseconds since the Unix epoch,
        /// compared with the log entry's time; absent: from the entry's time.
        start_ms: Option<u64>,
        /// End of the window, exclusive (`[start_ms, end_ms)`); the reservation ends by itself
        /// then. Absent: until released.
        end_ms: Option<u64>,
        /// The priority, 0 (routine, the default) to 3 (emergency); a request that conflicts
        /// only with lower priorities preempts them (`priority.rs`).
        #[serde(default, skip_serializing_if = "Priority::is_routine")]
        priority: Priority,
    },
    /// Release a waypoint reservation.
    #[op("waypoint.release", Write)]
    WaypointRelease {
        /// The waypoint's name.
        name: String,
        /// The lease holding it.
        lease: String,
    },
    /// Reserve a whole route, 1 to [`crate::validate::ROUTE_VOLUMES_MAX`] 4D volumes, as one
    /// intent: granted all or nothing with one token, or queued as a unit. A route is a
    /// waypoint reservation with several volumes: it shares the waypoint names, `inspect` and
    /// `fence.check` with kind `waypoint`.
    #[op("route.reserve", Write)]
    RouteReserve {
        /// The route's name (a waypoint name).
        name: String,
        /// The lease the route will be bound to.
        lease: String,
        /// Its volumes, in flight order.
        volumes: Vec<Volume>,
        /// As for `lock.acquire`.
        wait_ms: Option<u64>,
        /// The priority, as for `waypoint.reserve`.
        #[serde(default, skip_serializing_if = "Priority::is_routine")]
        priority: Priority,
    },
    /// Release every volume of a route (the same as `waypoint.release` of its name).
    #[op("route.release", Write)]
    RouteRelease {
        /// The route's name.
        name: String,
        /// The lease holding it.
        lease: String,
    },
    /// Replace a held route's volumes atomically. Granted at once (the token kept) or
    /// `would_block` (the old route kept); it never waits.
    #[op("route.amend", Write)]
    RouteAmend {
        /// The route's name.
        name: String,
        /// The lease holding it.
        lease: String,
        /// The new volumes.
        volumes: Vec<Volume>,
        /// The route's priority from now on, as for `waypoint.reserve`; absent: routine (an
        /// amend restates it, as it restates the volumes).
        #[serde(default, skip_serializing_if = "Priority::is_routine")]
        priority: Priority,
    },
    /// The held reservations that conflict, in space and time, with one cylinder or a route, a
    /// page at a time in name order; reserves nothing (`airspace.rs`).
    #[op("airspace.query", Read)]
    AirspaceQuery {
        /// One cylinder, its window optional (absent: from the machine's time on); exactly one
        /// of `volume` and `volumes`.
        volume: Option<QueryVolume>,
        /// A route's volumes, 1 to [`crate::validate::ROUTE_VOLUMES_MAX`].
        volumes: Option<Vec<Volume>>,
        /// Only reservations whose name is after this (the previous page's `next_after`).
        after: Option<String>,
        /// Most reservations in the page, 1 to [`crate::airspace::CONFLICT_PAGE_MAX`]; absent:
        /// the maximum.
        limit: Option<u32>,
    },
    /// Ask whether `token` is held right now on a resource.
    #[op("fence.check", Read)]
    FenceCheck {
        /// The resource's name. `resource` is accepted as an alias (the field's first name,
        /// DESIGN.md §3); `name` is what every other op calls it.
        #[serde(alias = "resource")]
        name: String,
        /// The resource's kind, `lock` by default: a lock, a semaphore and a waypoint may share
        /// a name.
        #[serde(default)]
        kind: ResourceKind,
        /// The token to check.
        token: u64,
    },
    /// Holders and waiters of one resource.
    #[op("inspect", Read)]
    Inspect {
        /// Which kind of resource.
        kind: ResourceKind,
        /// Its name.
        name: String,
    },
    /// The answering node's own view of Raft (term, leader, indexes, members). Answered by the
    /// node that receives it, never forwarded, and not linearizable.
    #[op("admin.status", Node)]
    AdminStatus {},
    /// Every live lease, a page at a time, in lease id order. A linearizable read.
    #[op("admin.leases", Read)]
    AdminLeases {
        /// Only leases after this lease id (the previous page's `next_after`); absent: from
        /// the first.
        after: Option<String>,
    },
    /// The resources held or waited for now, a page at a time, in (kind, name) order, each with
    /// its holder and waiter counts. A linearizable read, for operators who do not know a
    /// resource's exact name.
    #[op("admin.resources", Read)]
    AdminResources {
        /// Only this kind; absent: every kind (locks, then semaphores, then waypoints).
        kind: Option<ResourceKind>,
        /// Only names that start with this.
        prefix: Option<String>,
        /// Only resources after this cursor (the previous page's `next_after`, `kind/name`);
        /// absent: from the first.
        after: Option<String>,
        /// Most resources in the page, 1 to 100; absent: 100.
        limit: Option<u32>,
    },
    /// One page of a consistent snapshot of the replicated state, for an online backup
    /// (`hivekeeper snapshot save`). Without `index` the leader takes a new snapshot after a
    /// read-index round, keeps it, and answers its first page; with `index` (the first page's)
    /// it answers the page at `offset` of that same snapshot, so the pages together are the
    /// state at one log index. Answered by the leader; needs `admin`.
    #[op("admin.snapshot", Node)]
    AdminSnapshot {
        /// The log index of the snapshot being read (every page after the first); absent: take
        /// a new snapshot and answer its first page.
        index: Option<u64>,
        /// Where the page starts in the snapshot's bytes; absent: 0. Needs `index`.
        offset: Option<u64>,
        /// Most snapshot bytes in the page (before base64), from
        /// [`crate::validate::SNAPSHOT_PAGE_BYTES_MIN`] to
        /// [`crate::validate::SNAPSHOT_PAGE_BYTES_MAX`]; absent:
        /// [`crate::validate::SNAPSHOT_PAGE_BYTES_DEFAULT`].
        page_bytes_max: Option<u32>,
    },
    /// End any agent's lease, as its own `lease.revoke` would, without the owner check. For
    /// operators freeing a stuck resource.
    #[op("admin.revoke", Write)]
    AdminRevoke {
        /// The lease to end.
        lease: String,
    },
    /// Add a member to a running cluster. The leader dials it first (refused `bad_request` when
    /// nothing answers there), adds it as a learner, and makes it a voter once it has caught up
    /// (refused `timeout` when it does not in time: it stays a learner). Answered by the leader
    /// (forwarded there) once it votes.
    #[op("admin.member.add", Node)]
    AdminMemberAdd {
        /// The new member's `--name` (its id is derived from it).
        name: String,
        /// Where the members reach it, `host:port` (its inter-node address).
        addr: String,
        /// How long the leader waits for the learner to catch up, ms; absent: 10,000. At most
        /// [`crate::validate::CATCH_UP_TIMEOUT_MS_MAX`].
        catch_up_timeout_ms: Option<u64>,
        /// How many entries behind the leader's log the learner may be and count as caught up;
        /// absent: 100.
        catch_up_lag_entries_max: Option<u64>,
    },
    /// Remove a member from a running cluster. Answered by the leader.
    #[op("admin.member.remove", Node)]
    AdminMemberRemove {
        /// The member's `--name`.
        name: String,
    },
    /// Create the account of agent `name` with a new secret, answered once with the secret
    /// (only its hash is kept). Needs `admin`.
    #[op("admin.agent.add", Write)]
    AdminAgentAdd {
        /// The agent id the account is for (the MQTT username and client id).
        name: String,
        /// Its role; absent: `agent`.
        role: Option<Role>,
        /// Key prefixes it may read under, at most [`crate::kv_access::KV_PREFIXES_MAX`];
        /// absent or empty: the role's default, every key (`crate::kv_access`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kv_read: Vec<String>,
        /// Key prefixes it may write under; absent or empty: the role's default (every key
        /// for an agent; an observer writes none and may not be given any).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kv_write: Vec<String>,
    },
    /// One page of accounts (name and role, never a secret or its hash), in name order. Needs
    /// `admin`.
    #[op("admin.agent.list", Read)]
    AdminAgentList {
        /// Only accounts after this name (the previous page's `next_after`); absent: from the
        /// first.
        after: Option<String>,
    },
    /// Delete the account of agent `name`: its connections are closed and its leases revoked.
    /// Needs `admin`.
    #[op("admin.agent.remove", Write)]
    AdminAgentRemove {
        /// The agent id.
        name: String,
    },
    /// Give agent `name` a new secret, answered once; the old secret stops working and its
    /// connections are closed. Needs `admin`.
    #[op("admin.agent.rotate", Write)]
    AdminAgentRotate {
        /// The agent id.
        name: String,
    },
    /// Put one key: create it or replace its value, bound to a lease or to none
    /// (`crate::kv`).
    #[op("kv.put", Write)]
    KvPut {
        /// The key, 1 to 512 bytes; not one of the service's (`$...`).
        key: String,
        /// The new value.
        value: String,
        /// The sending agent's live lease the key is deleted with; absent: none (a put
        /// without a lease unbinds the key).
        lease: Option<String>,
        /// Answer the key as it was before the put.
        prev_kv: Option<bool>,
    },
    /// Read one key, or a page of the keys with a prefix in byte order. Linearizable unless
    /// `serializable`.
    #[op("kv.get", Read)]
    KvGet {
        /// One key; exactly one of `key` and `prefix`.
        key: Option<String>,
        /// Every key starting with it (empty: every key), a page at a time.
        prefix: Option<String>,
        /// With `prefix`: only keys after this one (the previous page's `next_after`).
        after: Option<String>,
        /// With `prefix`: most keys in the page, 1 to [`crate::kv::KV_PAGE_MAX`]; absent: the
        /// maximum.
        limit: Option<u32>,
        /// Answer from the receiving member's replica without a read-index round: faster,
        /// possibly stale.
        serializable: Option<bool>,
    },
    /// Delete one key, or every key with a prefix.
    #[op("kv.delete", Write)]
    KvDelete {
        /// One key; exactly one of `key` and `prefix`.
        key: Option<String>,
        /// Every key starting with it (the service's `$` keys excepted).
        prefix: Option<String>,
    },
    /// Compares, then one branch of puts, deletes and gets, all in one entry and one revision.
    #[op("kv.txn", Write)]
    KvTxn {
        /// Conditions, at most 64; all must hold for `success` to run (none: it runs).
        #[serde(default)]
        compare: Vec<Compare>,
        /// Ops run when every compare holds, at most 64.
        #[serde(default)]
        success: Vec<TxnOp>,
        /// Ops run otherwise, at most 64.
        #[serde(default)]
        failure: Vec<TxnOp>,
    },
    /// The changes of one key or a prefix after a revision, as a long poll: answered by the
    /// member that receives it from its own replica (never forwarded), at once when it has
    /// events after `after`, else when one comes or `wait_ms` ends. The cursor is the
    /// client's; the service keeps nothing of a watcher but its pending poll.
    #[op("watch.poll", Node)]
    WatchPoll {
        /// One key; exactly one of `key` and `prefix`.
        key: Option<String>,
        /// Every key with this prefix (the empty prefix: every key).
        prefix: Option<String>,
        /// The cursor: only events with a revision above it. The previous answer's `next`, or
        /// the `revision` of a `kv.get`.
        after: u64,
        /// The previous answer's `next_key`, when that answer was a fragment of a revision too
        /// large for one answer: the events of revision `after + 1` up to this key came
        /// already. Absent otherwise.
        after_key: Option<String>,
        /// Most events in the answer, 1 to [`crate::kv::WATCH_EVENTS_MAX`] (one revision's
        /// events always come whole, even past it); absent: 100.
        max_events: Option<u32>,
        /// How long to wait for an event, ms, 0 to [`crate::kv::WATCH_WAIT_MS_MAX`]; absent:
        /// 30,000.
        wait_ms: Option<u64>,
    },
    /// Queue the lease as a candidate of an election, in arrival order; answered when it
    /// leads, with the leadership's fencing token.
    #[op("election.campaign", Write)]
    ElectionCampaign {
        /// The election's name.
        name: String,
        /// The lease the leadership will be bound to.
        lease: String,
        /// The value the candidate proclaims when it leads, at most the key space's
        /// `value_bytes_max` bytes: `$election/{name}` holds it.
        value: String,
        /// As for `lock.acquire`.
        wait_ms: Option<u64>,
    },
    /// Change the leader's value; refused `not_holder` unless `token` leads now and the
    /// sender is the agent whose lease leads.
    #[op("election.proclaim", Write)]
    ElectionProclaim {
        /// The election's name.
        name: String,
        /// The leadership's token, as `election.campaign` answered it.
        token: u64,
        /// The new value, at most `value_bytes_max` bytes.
        value: String,
    },
    /// Step down: the next candidate leads in the same log entry. Refused `not_holder` as
    /// `election.proclaim` is.
    #[op("election.resign", Write)]
    ElectionResign {
        /// The election's name.
        name: String,
        /// The leadership's token.
        token: u64,
    },
    /// The leader of an election (agent, value, token), or none.
    #[op("election.leader", Read)]
    ElectionLeader {
        /// The election's name.
        name: String,
    },
    /// Enter the round of a double barrier that is filling: answered, with the round's
    /// generation, in the one entry where the `count`-th member arrives (`barrier.rs`).
    #[op("barrier.enter", Write)]
    BarrierEnter {
        /// The barrier's name.
        name: String,
        /// How many members a round has; fixed by the round's first arrival while it fills.
        count: u32,
        /// The lease the membership is bound to.
        lease: String,
        /// As for `lock.acquire`: how long to wait for the round to fill.
        wait_ms: Option<u64>,
    },
    /// Leave the round the lease passed: answered, with the round's generation, in the one
    /// entry where the last member of that round leaves.
    #[op("barrier.leave", Write)]
    BarrierLeave {
        /// The barrier's name.
        name: String,
        /// The lease that passed the round.
        lease: String,
        /// As for `lock.acquire`: how long to wait for the others to leave.
        wait_ms: Option<u64>,
    },
}
}

fn one() -> u32 {
    1
}

/// Whether a defaulted integer field is at its default, 0 (left out of the serialized form).
fn is_zero(value: &u64) -> bool {
    *value == 0
}
