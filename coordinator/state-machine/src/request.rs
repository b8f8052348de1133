//! What agents ask of the machine: [`AgentRequest`], a write that goes through the log as a
//! [`Command::Request`](crate::Command::Request), and [`ReadOp`], a read that
//! [`StateMachine::query`](crate::StateMachine::query) answers without changing anything.
//!
//! These are the machine's own types, not the wire's (`hivekeeper_protocol::Request`): the node
//! converts at its edge (`hivekeeper_coordinator::wire`), and ops the machine never sees
//! (`admin.status`, `admin.member.*`, answered by the node from Raft) have no variant here.
//!
//! Why the serde shape is the wire's (`{"id": "...", "op": "lock.acquire", ...fields}`, the
//! same op tags, field names, defaults and omitted optional fields): it is the shape of every
//! Raft log entry. Data format 1 wrote the wire `Request` into the log, so entries written
//! before the machine had types of its own decode unchanged. `tests/format.rs` pins the shape
//! against bytes written by that build; changing it means a new data format and a migration.
//!
//! Invariants:
//! 1. Every variant's serde form is the wire form of the op of the same name, field for field,
//!    except the account ops that set a secret (`admin.agent.add`, `admin.agent.rotate`): the
//!    node generates the secret, so their form carries `secret_hash` (the secret's salted
//!    hash, never the secret) and always a `role` for an add.
//! 2. A request is checked by [`AgentRequest::validate`] when it is applied, with the wire
//!    decoder's rules and messages (the same `hivekeeper_protocol::validate` helpers), so a
//!    request read back from the log is exactly as valid as one read from the wire.

use hivekeeper_protocol::{Area, Priority, QueryVolume, ResourceKind, Role, Volume, validate};
use serde::{Deserialize, Serialize};

/// A write request from an agent, as the log carries it: its id and what to change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRequest {
    /// Unique per agent: a retry reuses it and gets the first attempt's outcome.
    pub id: String,
    /// The operation, flattened beside `id` (the wire's layout, invariant 1).
    #[serde(flatten)]
    pub op: AgentOp,
}

/// Every op that changes the machine's state, with the wire's field names and units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum AgentOp {
    /// Create a lease for the sending agent.
    #[serde(rename = "lease.grant")]
    LeaseGrant {
        /// Time to live past the last keepalive; the replicated limits bound it.
        ttl_ms: u64,
    },
    /// End the agent's own lease, releasing everything it holds and dropping its waits.
    #[serde(rename = "lease.revoke")]
    LeaseRevoke {
        /// The lease, in its wire form.
        lease: String,
    },
    /// Take a FIFO lock, or queue for it.
    #[serde(rename = "lock.acquire")]
    LockAcquire {
        /// The lock's name.
        name: String,
        /// The lease the lock will be bound to.
        lease: String,
        /// Absent: wait while the lease lives. `0`: try once. `n`: wait at most n ms (a queued
        /// request's deadline is replicated; the leader proposes `ExpireWaits`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Release a held lock; the head waiter is granted in the same entry.
    #[serde(rename = "lock.release")]
    LockRelease {
        /// The lock's name.
        name: String,
        /// The lease holding it.
        lease: String,
    },
    /// Take `permits` of a semaphore of capacity `limit`, or queue for them.
    #[serde(rename = "sem.acquire")]
    SemAcquire {
        /// The semaphore's name.
        name: String,
        /// Its capacity, fixed by the first acquirer while it is in use.
        limit: u32,
        /// The lease the permits will be bound to.
        lease: String,
        /// How many permits; 1 when the wire left it out.
        #[serde(default = "one")]
        permits: u32,
        /// As for `lock.acquire`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Give back the permits a lease holds.
    #[serde(rename = "sem.release")]
    SemRelease {
        /// The semaphore's name.
        name: String,
        /// The lease holding the permits.
        lease: String,
    },
    /// Reserve a named waypoint and, with `lat`/`lon`, a vertical cylinder around it.
    #[serde(rename = "waypoint.reserve")]
    WaypointReserve {
        /// The waypoint's name.
        name: String,
        /// The lease the reservation will be bound to.
        lease: String,
        /// Latitude of the cylinder's axis, degrees.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lat: Option<f64>,
        /// Longitude of the cylinder's axis, degrees.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lon: Option<f64>,
        /// Bottom of the altitude band, metres; absent: unbounded below.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        alt_min_m: Option<f64>,
        /// Top of the altitude band, metres; absent: unbounded above.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        alt_max_m: Option<f64>,
        /// Radius of the cylinder, metres; absent: 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        radius_m: Option<f64>,
        /// As for `lock.acquire`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        /// Start of the time window, ms since the Unix epoch on the machine's clock; absent:
        /// the entry's time (`waypoint/window.rs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_ms: Option<u64>,
        /// End of the window, exclusive; the reservation ends by itself then. Absent: until
        /// released.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end_ms: Option<u64>,
        /// 0 (routine, absent on the wire) to 3 (emergency): a request that conflicts only
        /// with lower priorities preempts them (`waypoint/preempt.rs`).
        #[serde(default, skip_serializing_if = "Priority::is_routine")]
        priority: Priority,
    },
    /// Release a waypoint reservation.
    #[serde(rename = "waypoint.release")]
    WaypointRelease {
        /// The waypoint's name.
        name: String,
        /// The lease holding it.
        lease: String,
    },
    /// Reserve a whole route as one waypoint reservation of several volumes
    /// (`waypoint/route.rs`).
    #[serde(rename = "route.reserve")]
    RouteReserve {
        /// The route's name (a waypoint name).
        name: String,
        /// The lease the route will be bound to.
        lease: String,
        /// Its 4D volumes, 1 to 64.
        volumes: Vec<Volume>,
        /// As for `lock.acquire`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        /// As for `waypoint.reserve`.
        #[serde(default, skip_serializing_if = "Priority::is_routine")]
        priority: Priority,
    },
    /// Release a route (the same as `waypoint.release` of its name).
    #[serde(rename = "route.release")]
    RouteRelease {
        /// The route's name.
        name: String,
        /// The lease holding it.
        lease: String,
    },
    /// Replace a held route's volumes at once, or `would_block`.
    #[serde(rename = "route.amend")]
    RouteAmend {
        /// The route's name.
        name: String,
        /// The lease holding it.
        lease: String,
        /// The new volumes, 1 to 64.
        volumes: Vec<Volume>,
        /// The route's priority from now on; absent: routine.
        #[serde(default, skip_serializing_if = "Priority::is_routine")]
        priority: Priority,
    },
    /// End any agent's lease as its own `lease.revoke` would, without the owner check (an
    /// operator freeing a stuck resource).
    #[serde(rename = "admin.revoke")]
    AdminRevoke {
        /// The lease to end.
        lease: String,
    },
    /// Create agent `name`'s account (`account.rs`).
    #[serde(rename = "admin.agent.add")]
    AdminAgentAdd {
        /// The agent id the account authenticates.
        name: String,
        /// Its role.
        role: Role,
        /// The secret's salted hash, a PHC string made by the node.
        secret_hash: String,
    },
    /// Replace agent `name`'s secret.
    #[serde(rename = "admin.agent.rotate")]
    AdminAgentRotate {
        /// The agent id.
        name: String,
        /// The new secret's salted hash, a PHC string made by the node.
        secret_hash: String,
    },
    /// Delete agent `name`'s account and revoke its leases.
    #[serde(rename = "admin.agent.remove")]
    AdminAgentRemove {
        /// The agent id.
        name: String,
    },
}

fn one() -> u32 {
    1
}

/// A read the machine answers from its state ([`crate::StateMachine::query`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ReadOp {
    /// Whether the lease is alive and the agent's, and its TTL (the node's lease keeper moves
    /// the deadline; the machine only checks).
    LeaseKeepalive {
        /// The lease, in its wire form.
        lease: String,
    },
    /// Whether `token` is held right now on a resource.
    FenceCheck {
        /// The resource's name.
        resource: String,
        /// The resource's kind.
        kind: ResourceKind,
        /// The token to check.
        token: u64,
    },
    /// Holders and waiters of one resource.
    Inspect {
        /// The resource's kind.
        kind: ResourceKind,
        /// Its name.
        name: String,
    },
    /// One page of live leases, in id order.
    AdminLeases {
        /// Only leases after this lease id; absent: from the first.
        after: Option<String>,
    },
    /// One page of resources held or waited for, in (kind, name) order.
    AdminResources {
        /// Only this kind; absent: every kind.
        kind: Option<ResourceKind>,
        /// Only names starting with this.
        prefix: Option<String>,
        /// Only resources after this cursor (`kind/name`).
        after: Option<String>,
        /// Most resources in the page.
        limit: Option<u32>,
    },
    /// One page of the held reservations that conflict with a cylinder or a route
    /// (`waypoint/query.rs`).
    AirspaceQuery {
        /// One cylinder, its window optional; exactly one of `volume` and `volumes`.
        volume: Option<QueryVolume>,
        /// A route's volumes.
        volumes: Option<Vec<Volume>>,
        /// Only reservations named after this.
        after: Option<String>,
        /// Most reservations in the page.
        limit: Option<u32>,
    },
    /// One page of accounts, in name order, without their hashes.
    AdminAgentList {
        /// Only accounts after this name; absent: from the first.
        after: Option<String>,
    },
}

/// A request that fails the wire's field checks, found when it is applied (answered
/// `bad_request` with this text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{op}: {reason}")]
pub struct InvalidRequest {
    /// The op's wire name.
    pub op: &'static str,
    /// Which field is wrong and why, as the wire decoder words it.
    pub reason: String,
}

impl AgentOp {
    /// The op's wire name, e.g. `"lock.acquire"`.
    pub fn name(&self) -> &'static str {
        match self {
            AgentOp::LeaseGrant { .. } => "lease.grant",
            AgentOp::LeaseRevoke { .. } => "lease.revoke",
            AgentOp::LockAcquire { .. } => "lock.acquire",
            AgentOp::LockRelease { .. } => "lock.release",
            AgentOp::SemAcquire { .. } => "sem.acquire",
            AgentOp::SemRelease { .. } => "sem.release",
            AgentOp::WaypointReserve { .. } => "waypoint.reserve",
            AgentOp::WaypointRelease { .. } => "waypoint.release",
            AgentOp::RouteReserve { .. } => "route.reserve",
            AgentOp::RouteRelease { .. } => "route.release",
            AgentOp::RouteAmend { .. } => "route.amend",
            AgentOp::AdminRevoke { .. } => "admin.revoke",
            AgentOp::AdminAgentAdd { .. } => "admin.agent.add",
            AgentOp::AdminAgentRotate { .. } => "admin.agent.rotate",
            AgentOp::AdminAgentRemove { .. } => "admin.agent.remove",
        }
    }

    /// The lease the op names (every op but `lease.grant`).
    pub fn lease(&self) -> Option<&str> {
        match self {
            AgentOp::LeaseRevoke { lease }
            | AgentOp::LockAcquire { lease, .. }
            | AgentOp::LockRelease { lease, .. }
            | AgentOp::SemAcquire { lease, .. }
            | AgentOp::SemRelease { lease, .. }
            | AgentOp::WaypointReserve { lease, .. }
            | AgentOp::WaypointRelease { lease, .. }
            | AgentOp::RouteReserve { lease, .. }
            | AgentOp::RouteRelease { lease, .. }
            | AgentOp::RouteAmend { lease, .. }
            | AgentOp::AdminRevoke { lease } => Some(lease),
            AgentOp::LeaseGrant { .. }
            | AgentOp::AdminAgentAdd { .. }
            | AgentOp::AdminAgentRotate { .. }
            | AgentOp::AdminAgentRemove { .. } => None,
        }
    }

    /// The `wait_ms` of an acquire or reserve: how long the node lets it wait.
    pub fn wait_ms(&self) -> Option<u64> {
        match self {
            AgentOp::LockAcquire { wait_ms, .. }
            | AgentOp::SemAcquire { wait_ms, .. }
            | AgentOp::WaypointReserve { wait_ms, .. }
            | AgentOp::RouteReserve { wait_ms, .. } => *wait_ms,
            _ => None,
        }
    }

    /// The reservation's cylinder for a `waypoint.reserve` with geometry; `Ok(None)` without
    /// geometry or for another op. The error is the wire decoder's text ([`Self::check_fields`]
    /// wraps it in an [`InvalidRequest`]).
    pub(crate) fn area(&self) -> Result<Option<Area>, validate::InvalidField> {
        match self {
            AgentOp::WaypointReserve {
                lat,
                lon,
                alt_min_m,
                alt_max_m,
                radius_m,
                ..
            } => Area::from_fields(*lat, *lon, *alt_min_m, *alt_max_m, *radius_m),
            _ => Ok(None),
        }
    }

    /// The wire's range checks, in the wire decoder's order, with its words.
    fn check_fields(&self) -> Result<(), validate::InvalidField> {
        if let Some(lease) = self.lease() {
            validate::name("lease", lease)?;
        }
        validate::wait_ms(self.wait_ms())?;
        match self {
            AgentOp::LeaseGrant { ttl_ms } => validate::ttl_ms(*ttl_ms),
            AgentOp::LeaseRevoke { .. } | AgentOp::AdminRevoke { .. } => Ok(()),
            AgentOp::LockAcquire { name, .. }
            | AgentOp::LockRelease { name, .. }
            | AgentOp::SemRelease { name, .. }
            | AgentOp::WaypointRelease { name, .. }
            | AgentOp::RouteRelease { name, .. } => validate::name("name", name),
            AgentOp::RouteReserve { name, volumes, .. }
            | AgentOp::RouteAmend { name, volumes, .. } => {
                validate::name("name", name).and(validate::volumes(volumes))
            }
            AgentOp::SemAcquire {
                name,
                limit,
                permits,
                ..
            } => validate::name("name", name).and(validate::sem_acquire(*limit, *permits)),
            AgentOp::WaypointReserve {
                name,
                start_ms,
                end_ms,
                ..
            } => validate::name("name", name)
                .and(self.area().map(drop))
                .and(validate::window(*start_ms, *end_ms)),
            AgentOp::AdminAgentAdd { name, .. }
            | AgentOp::AdminAgentRotate { name, .. }
            | AgentOp::AdminAgentRemove { name } => validate::account_name(name),
        }
    }
}

impl AgentRequest {
    /// Checks the request id and every field of the op (invariant 2).
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        validate::request_id(&self.id)
            .and_then(|()| self.op.check_fields())
            .map_err(|reason| InvalidRequest {
                op: self.op.name(),
                reason: reason.into(),
            })
    }
}

impl ReadOp {
    /// The op's wire name, e.g. `"inspect"`.
    pub fn name(&self) -> &'static str {
        match self {
            ReadOp::LeaseKeepalive { .. } => "lease.keepalive",
            ReadOp::FenceCheck { .. } => "fence.check",
            ReadOp::Inspect { .. } => "inspect",
            ReadOp::AdminLeases { .. } => "admin.leases",
            ReadOp::AdminResources { .. } => "admin.resources",
            ReadOp::AdminAgentList { .. } => "admin.agent.list",
            ReadOp::AirspaceQuery { .. } => "airspace.query",
        }
    }
}
