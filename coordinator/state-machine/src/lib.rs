//! # hivekeeper-state-machine: the coordination state machine
//!
//! Every lease, lock, permit and reservation decision of Hivekeeper is made here, by one pure,
//! deterministic machine that every Raft replica applies in log order. The node
//! (`hivekeeper-coordinator`) carries bytes and time around it and never decides.
//!
//! Pure by construction, not by convention: this crate depends on data types (the protocol's
//! error codes, resource kinds and inspect rows), serde, a hasher, `libm` and `thiserror`,
//! nothing else, so Cargo refuses a tokio, openraft or metrics import here. No clock, no
//! randomness, no I/O: time enters only through [`LogMeta::now_ms`], stamped by the leader into
//! each entry; identity (lease ids, fencing tokens, queue order) comes from [`LogMeta::index`].
//! Two replicas fed the same log end in the same state, byte for byte
//! ([`StateMachine::snapshot`]).
//!
//! ```text
//!  node: wire Request ─▶ hivekeeper_coordinator::wire ─┬─▶ Command (writes, through the log)
//!                                                      └─▶ ReadOp  (reads, read-index first)
//!
//!  apply(meta, Command::Request { agent, request: AgentRequest })
//!    ├─ invalid fields ─▶ Reply::Refused { bad_request } (the wire decoder's checks, again)
//!    ├─ retry of a known request id ─▶ dedup: the first outcome, no second queue slot
//!    └─ AgentOp ─▶ lease / lock / semaphore / waypoint
//!                    ├─ grant now ─▶ Reply::Granted { token }          + Event::Granted
//!                    ├─ queue     ─▶ Reply::Queued                     + Event::Queued
//!                    │              later, from the entry that grants it, times it out or ends
//!                    │              its lease: Event::Respond { key, .. } (its queue exit)
//!                    └─ refuse    ─▶ Reply::Refused { code, message } (state unchanged)
//!  apply(meta, Command::ExpireLeases { term, leases })   leader only; stale terms ignored
//!  apply(meta, Command::ExpireWaits { term })             leader only; ends the waits whose
//!                                                         deadline_ms (queued at now + wait_ms)
//!                                                         has passed on the machine's clock
//!  apply(meta, Command::ExpireReservations { term })      leader only; ends the reservations
//!                                                         whose window (a route: its last
//!                                                         volume's) end or vacate deadline
//!                                                         (preempted) has passed
//!  apply(meta, Command::CancelWait { agent, request_id }) legacy (old logs), applied as before
//!  apply(meta, Command::Configure { limits })             replicated bounds
//!  query(agent, &ReadOp)   keepalive check, fence.check, inspect, admin.leases,
//!                          admin.resources, admin.agent.list, airspace.query: no change
//!  snapshot() / restore()  the whole state as JSON bytes (data format 1)
//!        │
//!        ▼
//!  node: (Reply, Vec<Event>) ─▶ the proposer's answer; deferred responses, lost/expired
//!        notices, the lease keeper, metrics (waiters: +1 Queued, -1 Respond)
//! ```
//!
//! # Layout (one file per concept; each opens with its invariants)
//! - `request.rs`: [`AgentRequest`]/[`AgentOp`] (writes) and [`ReadOp`] (reads), the machine's
//!   own request types, with the log's serde shape.
//! - `clock.rs`: the replicated clock, stepped by each entry's stamp (a jumping leader clock
//!   cannot freeze expiry).
//! - `grant.rs`: holds, waiters and fencing tokens, the bookkeeping every kind shares.
//! - `fifo.rs`: queues in arrival order, shared by locks, semaphores and waypoints.
//! - `lease.rs`: grant, keepalive check, revoke, expiry; a lease's end frees everything.
//! - `wait_deadline.rs`: a queued request's `wait_ms` as a replicated deadline, and its expiry.
//! - `lock.rs`, `semaphore.rs`, `waypoint/`: the three resource kinds. A waypoint reservation
//!   has a cylinder (`geo.rs`, indexed in space and time by `grid.rs`), a time window
//!   (`window.rs`, which also ends windows), or several 4D volumes when it is a route
//!   (`route.rs`), and a priority: a higher one preempts lower holders with a vacate deadline
//!   (`preempt.rs`); `query.rs` answers `airspace.query` from the same index.
//! - `account.rs`: accounts (agent id, role, secret hash) for authentication.
//! - `dedup.rs`: remembered outcomes for retries. `snapshot.rs`: bytes in and out.
//! - `limits.rs`: the replicated bounds. `quota.rs`: the per-agent ones (leases and holds per
//!   agent, waits per lease) and the per-agent counts they need.
//! - `*_test.rs` beside each concept (with `test_support.rs`); `tests/model.rs` (model-based
//!   property test), `tests/format.rs` (format-1 golden bytes), `benches/apply.rs`.
//! - `resources.rs`: `admin.resources`, the paged list of resources (discovery).

/// An [`InvariantViolation`] with a formatted text: `violation!("lease {id} is from the future")`.
macro_rules! violation {
    ($($text:tt)*) => {
        $crate::InvariantViolation(format!($($text)*))
    };
}

mod account;
mod clock;
mod dedup;
mod fifo;
mod grant;
mod lease;
mod limits;
mod lock;
mod quota;
mod request;
mod resources;
mod semaphore;
mod snapshot;
mod wait_deadline;
mod waypoint;

#[cfg(test)]
mod account_test;
#[cfg(test)]
mod clock_test;
#[cfg(test)]
mod dedup_test;
#[cfg(test)]
mod lease_test;
#[cfg(test)]
mod limits_test;
#[cfg(test)]
mod lock_test;
#[cfg(test)]
mod quota_test;
#[cfg(test)]
mod resources_test;
#[cfg(test)]
mod semaphore_test;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod wait_deadline_test;
#[cfg(test)]
mod waypoint_preempt_test;
#[cfg(test)]
mod waypoint_query_test;
#[cfg(test)]
mod waypoint_route_test;
#[cfg(test)]
mod waypoint_test;
#[cfg(test)]
mod waypoint_window_test;

use std::sync::Arc;

use hivekeeper_protocol::{
    AccountInfo, ConflictInfo, ErrorCode, HolderInfo, LeaseInfo, NodeStatus, Priority,
    ResourceInfo, ResourceKind, Role, SnapshotPage, WaiterInfo, validate,
};
use serde::{Deserialize, Serialize};

pub use account::{ACCOUNT_PAGE_MAX, ACCOUNTS_MAX, Account, AccountChange};
pub use grant::{ResourceKey, WaiterCounts};
pub use lease::{LEASE_PAGE_MAX, LeaseId};
pub use limits::{Limits, LimitsError};
pub use request::{AgentOp, AgentRequest, InvalidRequest, ReadOp};
pub use resources::ResourceQuery;
pub use waypoint::{
    EARTH_RADIUS_M, M_PER_DEG, PREEMPT_CHAIN_MAX, Window, areas_conflict, bands_overlap, distance_m,
};

use grant::Core;
use lock::Lock;
use semaphore::Semaphore;
use waypoint::Waypoints;

/// Shared, cheaply cloned text (agent ids and resource names): one allocation per request, then
/// reference counts for holds, events and indexes.
pub type Text = Arc<str>;

/// Name-keyed state (locks, semaphores, remembered outcomes): hash maps, because lookups by
/// name are most of an apply, with foldhash (several times cheaper than SipHash on short keys,
/// and seeded per process against collision floods). Nothing iterates one of these to make a
/// decision; the snapshot writes them in key order (`snapshot::sorted`), so replicas agree byte
/// for byte whatever their seeds.
pub type NameMap<V> = std::collections::HashMap<Text, V, foldhash::fast::RandomState>;

/// Where an entry sits in the Raft log and when the leader stamped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// The command's position in the log. Strictly increasing; the source of lease ids and
    /// tokens. With one command per entry it is the entry's log index; when one entry carries a
    /// batch, the raft layer numbers its commands `max(log index, last applied + 1)` onwards, a
    /// function of the log alone, so every replica numbers them alike.
    pub index: u64,
    /// The term of the leader that appended the entry.
    pub term: u64,
    /// The leader's wall clock when it proposed the entry, ms since the Unix epoch. The machine
    /// does not take it as the time: its clock moves by the stamp's advance over the previous
    /// entry's stamp, never backwards and at most `lease_ttl_ms_max` at once (`clock.rs`).
    pub now_ms: u64,
}

/// What a log entry asks the machine to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// A write request from an agent (the node converts the wire request at its edge).
    Request {
        /// The agent, from the request topic.
        agent: String,
        /// The request.
        request: AgentRequest,
    },
    /// The leader found these leases past their deadline. Ignored when `term` is older than a
    /// term already applied: a deposed leader can never revoke.
    ExpireLeases {
        /// The proposing leader's term.
        term: u64,
        /// The leases to expire.
        leases: Vec<LeaseId>,
    },
    /// Legacy: what nodes proposed when a waiter's `wait_ms` ran out, before wait deadlines
    /// were replicated. No node proposes it now ([`Command::ExpireWaits`] replaced it); an
    /// old log's entry still applies as it did: the named waiter is cancelled unless it was
    /// granted first.
    CancelWait {
        /// The waiting agent.
        agent: String,
        /// The id of the waiting request.
        request_id: String,
    },
    /// The leader found waits past their deadline: ends every wait whose `deadline_ms` has
    /// passed on the machine's clock (none other, whatever the proposer believed), each
    /// answered `timeout` through [`Event::Respond`]. Ignored when `term` is older than a term
    /// already applied, like [`Command::ExpireLeases`] (`wait_deadline.rs`).
    ExpireWaits {
        /// The proposing leader's term.
        term: u64,
    },
    /// Addition (issue 18): the leader found a reservation's window end passed: ends every
    /// held reservation whose `end_ms` has passed on the machine's clock and answers `timeout`
    /// to every waiting one whose end passed first (none other, whatever the proposer
    /// believed). Ignored when `term` is older than a term already applied, like
    /// [`Command::ExpireWaits`] (`waypoint/window.rs`).
    ExpireReservations {
        /// The proposing leader's term.
        term: u64,
    },
    /// Replace the replicated limits.
    Configure {
        /// The new limits; they bound what comes after, nothing already granted is taken back.
        limits: Limits,
    },
}

impl Command {
    /// What the command is, for logs: the op's wire name for an agent's request
    /// (`"lock.acquire"`), the command's own for the node's (`"expire_leases"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Request { request, .. } => request.op.name(),
            Command::ExpireLeases { .. } => "expire_leases",
            Command::CancelWait { .. } => "cancel_wait",
            Command::ExpireWaits { .. } => "expire_waits",
            Command::ExpireReservations { .. } => "expire_reservations",
            Command::Configure { .. } => "configure",
        }
    }
}

/// The machine's answer to the entry's proposer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// `lease.grant` succeeded.
    Lease {
        /// The new lease.
        lease: LeaseId,
        /// Its TTL.
        ttl_ms: u64,
    },
    /// `lease.keepalive`: the lease exists and belongs to the agent.
    Ttl {
        /// The lease's TTL.
        ttl_ms: u64,
    },
    /// The resource is granted.
    Granted {
        /// The grant's fencing token.
        token: u64,
    },
    /// A release or revoke succeeded, or a command was carried out.
    Done,
    /// The request waits in a queue; its final answer will be an [`Event::Respond`].
    Queued,
    /// `fence.check`.
    Fence {
        /// Newest token held on the resource now, 0 when free.
        current: u64,
        /// Whether the checked token is held now.
        valid: bool,
    },
    /// `inspect`.
    Inspect {
        /// The semaphore's capacity (semaphores only).
        limit: Option<u32>,
        /// Holders, in token order.
        holders: Vec<HolderInfo>,
        /// Waiters, in queue order.
        waiters: Vec<WaiterInfo>,
    },
    /// `ExpireLeases`: the leases that ended (stale or unknown ones are skipped).
    Expired {
        /// Leases expired by this entry.
        leases: Vec<LeaseId>,
    },
    /// `ExpireWaits`: how many waits ended (0 for a stale term or when none was due).
    WaitsExpired {
        /// Waits answered `timeout` by this entry.
        count: u64,
    },
    /// `ExpireReservations`: how many reservations ended (held ones released, waiting ones
    /// answered `timeout`); 0 for a stale term or when none was due.
    ReservationsEnded {
        /// Reservations ended by this entry.
        count: u64,
    },
    /// `CancelWait` (legacy): whether a waiter was cancelled (false when the grant won).
    Cancelled {
        /// True if the waiter was still queued and is now answered `timeout`.
        cancelled: bool,
    },
    /// The request was refused; nothing changed.
    Refused {
        /// Why, as a wire error code.
        code: ErrorCode,
        /// Detail for a human.
        message: String,
    },
    /// `admin.status`, built by the node from Raft's metrics (the machine cannot see Raft).
    /// Boxed: large and rare.
    Status(Box<NodeStatus>),
    /// `admin.snapshot`: one page of a snapshot the leader keeps, built by the node (the
    /// machine's bytes at one applied index). Boxed: large and rare.
    Snapshot(Box<SnapshotPage>),
    /// `admin.leases`: one page of live leases.
    Leases {
        /// Leases in id order; the node adds `remaining_ms` from its keeper's deadlines.
        leases: Vec<LeaseInfo>,
        /// Present when more leases follow: the `after` of the next page.
        next_after: Option<String>,
    },
    /// `admin.resources`: one page of resources held or waited for.
    Resources {
        /// Resources in (kind, name) order, with their counts.
        resources: Vec<ResourceInfo>,
        /// Present when more follow: the `after` (`kind/name`) of the next page.
        next_after: Option<String>,
    },
    /// `airspace.query` (issue 18): one page of the held reservations that conflict.
    Conflicts {
        /// Reservations in name order, each with its conflicting shapes; the node leaves out
        /// other agents' `agent` and `lease` for the `agent` role.
        conflicts: Vec<ConflictInfo>,
        /// Present when more follow: the `after` (a name) of the next page.
        next_after: Option<String>,
    },
    /// `admin.agent.add`, `admin.agent.rotate`: the account as it now is. The node answers
    /// the secret only when `secret_hash` is the hash it made for this request, so a same-id
    /// retry (answered from the dedup memory) never gets a secret it cannot know.
    Account {
        /// The account's agent id.
        agent: Text,
        /// Its role.
        role: Role,
        /// The hash the entry stored (never sent on the wire).
        secret_hash: String,
    },
    /// `admin.agent.list`: one page of accounts.
    Accounts {
        /// Accounts in name order, without hashes.
        accounts: Vec<AccountInfo>,
        /// Present when more accounts follow: the `after` of the next page.
        next_after: Option<String>,
    },
}

impl Reply {
    /// A refusal with `code` and a message for a human.
    pub fn refused(code: ErrorCode, message: impl Into<String>) -> Reply {
        Reply::Refused {
            code,
            message: message.into(),
        }
    }
}

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
    /// Addition (issue 18, part 3): the reservation was preempted by a request of a higher
    /// priority and its vacate deadline passed before it was released; the holder should be
    /// told it lost the reservation (`waypoint/preempt.rs`).
    Preempted,
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
    /// Addition (issue 18, part 3): a held reservation was preempted: a request of a higher
    /// priority needs its airspace, and the machine ends it at `vacate_by_ms` unless it is
    /// released first (`waypoint/preempt.rs`). Emitted once per reservation; the node tells
    /// the holder `reservation.preempted`.
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

/// A broken machine: something that cannot happen when the log is well formed. A refusal of a
/// request is never an `Error`, it is a [`Reply::Refused`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Entries must be applied at strictly increasing indexes.
    #[error("entry index {got} is not after the last applied index {applied}")]
    IndexNotIncreasing {
        /// The last applied index.
        applied: u64,
        /// The index offered.
        got: u64,
    },
    /// A snapshot's bytes are not JSON of a machine's state.
    #[error("snapshot is unreadable: {0}")]
    Snapshot(serde_json::Error),
    /// A snapshot of another layout version.
    #[error("snapshot is unreadable: format {found} is not the supported format {supported}")]
    SnapshotFormat {
        /// The snapshot's format number.
        found: u32,
        /// The one this build reads and writes.
        supported: u32,
    },
    /// A snapshot whose limits break a rule.
    #[error("snapshot is unreadable: {0}")]
    SnapshotLimits(LimitsError),
    /// A snapshot whose state breaks an invariant.
    #[error("snapshot is unreadable: {0}")]
    SnapshotInvariant(InvariantViolation),
}

/// A broken invariant, found by [`StateMachine::check_invariants`]: a bug in the machine, or a
/// corrupt snapshot. The text says which invariant of which concept, with the values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvariantViolation(pub String);

impl From<String> for InvariantViolation {
    fn from(text: String) -> Self {
        InvariantViolation(text)
    }
}

impl From<&str> for InvariantViolation {
    fn from(text: &str) -> Self {
        InvariantViolation(text.to_string())
    }
}

/// Per-apply context: where we are in the log and what has happened so far.
pub(crate) struct Ctx {
    /// The entry's index.
    pub index: u64,
    /// The machine's clock for this entry (monotonic).
    pub now_ms: u64,
    /// Events, in order.
    pub events: Vec<Event>,
}

/// The whole replicated state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateMachine {
    /// The replicated bounds.
    limits: Limits,
    /// Last applied log index.
    index: u64,
    /// Highest term seen in an applied entry; an `ExpireLeases` from an older term is stale.
    term_max: u64,
    /// The machine's clock: the first entry's stamp plus every later entry's clamped step
    /// (`clock.rs`).
    now_ms: u64,
    /// The last applied entry's stamp, when it differs from `now_ms` (a stamp went back or
    /// jumped ahead by more than a step); the next step is measured from it. Absent from
    /// the snapshot otherwise, so an honest log's snapshot keeps data format 1's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stamp_last_ms: Option<u64>,
    /// Leases, tokens, pending waits and remembered outcomes.
    core: Core,
    /// Locks in use (held, or being handed over inside an apply), by name.
    #[serde(serialize_with = "snapshot::sorted")]
    locks: NameMap<Lock>,
    /// Semaphores in use, by name.
    #[serde(serialize_with = "snapshot::sorted")]
    sems: NameMap<Semaphore>,
    /// Waypoint reservations and their waiters.
    waypoints: Waypoints,
    /// Accounts, by agent id. Absent from a snapshot while there are none, so a snapshot of a
    /// cluster without authentication keeps data format 1's bytes, and one written before
    /// accounts existed still loads.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    accounts: account::Accounts,
}

impl Default for StateMachine {
    fn default() -> Self {
        StateMachine::new(Limits::DEFAULTS)
    }
}

impl StateMachine {
    /// An empty machine with `limits` (a cluster's first leader proposes its configured limits
    /// with `Command::Configure`, so every replica agrees on them).
    pub fn new(limits: Limits) -> Self {
        let mut core = Core::default();
        core.dedup.set_limits(&limits);
        StateMachine {
            limits,
            index: 0,
            term_max: 0,
            now_ms: 0,
            stamp_last_ms: None,
            core,
            locks: NameMap::default(),
            sems: NameMap::default(),
            waypoints: Waypoints::default(),
            accounts: account::Accounts::new(),
        }
    }

    /// The replicated limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The last applied log index.
    pub fn applied_index(&self) -> u64 {
        self.index
    }

    /// The machine's clock (`clock.rs`).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// How many requests wait right now, per resource kind. The node's waiters gauge starts
    /// from this (at start, after a snapshot install) and then follows [`Event::Queued`] (+1)
    /// and [`Event::Respond`] (-1). Costs the number of waiters, not of resources.
    pub fn waiter_counts(&self) -> WaiterCounts {
        self.core.waiter_counts()
    }

    /// Applies one committed entry.
    pub fn apply(&mut self, meta: LogMeta, command: Command) -> Result<(Reply, Vec<Event>), Error> {
        if meta.index <= self.index {
            return Err(Error::IndexNotIncreasing {
                applied: self.index,
                got: meta.index,
            });
        }
        let clock_before_ms = (self.index != 0).then_some(self.now_ms);
        self.advance_clock(meta.now_ms);
        self.index = meta.index;
        self.term_max = self.term_max.max(meta.term);
        let mut ctx = Ctx {
            index: meta.index,
            now_ms: self.now_ms,
            events: Vec::new(),
        };
        let reply = match command {
            Command::Request { agent, request } => self.request(&mut ctx, agent, request),
            Command::ExpireLeases { term, leases } => {
                if term < self.term_max {
                    Reply::Expired { leases: Vec::new() }
                } else {
                    self.expire_leases(&mut ctx, &leases)
                }
            }
            Command::ExpireWaits { term } => self.expire_waits(&mut ctx, term),
            Command::ExpireReservations { term } => self.expire_reservations(&mut ctx, term),
            Command::CancelWait { agent, request_id } => {
                self.cancel_wait(&mut ctx, &agent, &request_id)
            }
            Command::Configure { limits } => match limits.validate() {
                Ok(()) => {
                    self.limits = limits;
                    self.core.dedup.set_limits(&self.limits);
                    Reply::Done
                }
                Err(error) => Reply::refused(ErrorCode::BadRequest, error.to_string()),
            },
        };
        self.core
            .sweep_idle_dedup(&self.limits, meta.index, clock_before_ms, self.now_ms);
        self.core.enforce_dedup(&self.limits);
        Ok((reply, ctx.events))
    }

    /// Answers a read op (`lease.keepalive` check, `fence.check`, `inspect`, `admin.leases`)
    /// without changing anything.
    pub fn query(&self, agent: &str, op: &ReadOp) -> Reply {
        match op {
            ReadOp::LeaseKeepalive { lease } => match self.core.live_lease(agent, lease) {
                Ok(id) => Reply::Ttl {
                    ttl_ms: self.core.leases[&id].ttl_ms,
                },
                Err(refusal) => refusal,
            },
            ReadOp::FenceCheck {
                resource,
                kind,
                token,
            } => {
                let tokens = self.held_tokens(*kind, resource);
                Reply::Fence {
                    current: tokens.iter().copied().max().unwrap_or(0),
                    valid: tokens.contains(token),
                }
            }
            ReadOp::Inspect { kind, name } => self.inspect(*kind, name),
            ReadOp::AdminLeases { after } => self.lease_page(after.as_deref()),
            ReadOp::AdminResources {
                kind,
                prefix,
                after,
                limit,
            } => self.resource_page(ResourceQuery {
                kind: *kind,
                prefix: prefix.as_deref(),
                after: after.as_deref(),
                limit: *limit,
            }),
            ReadOp::AdminAgentList { after } => self.account_page(after.as_deref()),
            ReadOp::AirspaceQuery {
                volume,
                volumes,
                after,
                limit,
            } => self.airspace_query(
                volume.as_ref(),
                volumes.as_deref(),
                after.as_deref(),
                *limit,
            ),
        }
    }

    fn request(&mut self, ctx: &mut Ctx, agent: String, request: AgentRequest) -> Reply {
        if let Err(message) = validate::agent_id(&agent) {
            return Reply::refused(ErrorCode::BadRequest, message);
        }
        if let Err(invalid) = request.validate() {
            return Reply::refused(ErrorCode::BadRequest, invalid.to_string());
        }
        let (known, agent) = match self.core.recall(&agent, &request.id) {
            (_, Some(reply)) => return reply,
            (known, None) => {
                let shared = known.name.clone().unwrap_or_else(|| Arc::from(agent));
                (known, shared)
            }
        };
        let id = request.id;
        let reply = match request.op {
            AgentOp::LeaseGrant { ttl_ms } => self.lease_grant(ctx, &agent, ttl_ms),
            AgentOp::LeaseRevoke { lease } => self.lease_revoke(ctx, &agent, &lease),
            // No owner check: with authentication on, the node checks the operator's role
            // before the log (`NodeHandle::submit`, docs/PROTOCOL.md, roles).
            AgentOp::AdminRevoke { lease } => self.admin_revoke(ctx, &lease),
            AgentOp::LockAcquire {
                name,
                lease,
                wait_ms,
            } => self.lock_acquire(ctx, &agent, &id, name, &lease, wait_ms),
            AgentOp::LockRelease { name, lease } => {
                self.release(ctx, ResourceKind::Lock, &agent, &name, &lease)
            }
            AgentOp::SemAcquire {
                name,
                limit,
                lease,
                permits,
                wait_ms,
            } => self.sem_acquire(ctx, &agent, &id, name, limit, &lease, permits, wait_ms),
            AgentOp::SemRelease { name, lease } => {
                self.release(ctx, ResourceKind::Sem, &agent, &name, &lease)
            }
            ref reserve @ AgentOp::WaypointReserve {
                ref name,
                ref lease,
                wait_ms,
                start_ms,
                end_ms,
                priority,
                ..
            } => {
                let area = reserve
                    .area()
                    .expect("validated above: the geometry is well formed");
                let asked = (start_ms, end_ms);
                let ask = (area, asked, priority);
                self.waypoint_reserve(ctx, &agent, &id, name, lease, ask, wait_ms)
            }
            AgentOp::WaypointRelease { name, lease } | AgentOp::RouteRelease { name, lease } => {
                self.release(ctx, ResourceKind::Waypoint, &agent, &name, &lease)
            }
            AgentOp::RouteReserve {
                name,
                lease,
                volumes,
                wait_ms,
                priority,
            } => {
                let ask = (volumes, priority);
                self.route_reserve(ctx, &agent, &id, &name, &lease, ask, wait_ms)
            }
            AgentOp::RouteAmend {
                name,
                lease,
                volumes,
                priority,
            } => self.route_amend(ctx, &agent, &name, &lease, (volumes, priority)),
            // The operator's role is checked by the node before the log, like admin.revoke.
            AgentOp::AdminAgentAdd {
                name,
                role,
                secret_hash,
            } => self.account_add(ctx, &name, role, secret_hash),
            AgentOp::AdminAgentRotate { name, secret_hash } => {
                self.account_rotate(ctx, &name, secret_hash)
            }
            AgentOp::AdminAgentRemove { name } => self.account_remove(ctx, &name),
        };
        if reply != Reply::Queued {
            self.core
                .dedup
                .record(known.slot, &agent, id, reply.clone(), ctx.index);
        }
        reply
    }

    /// Tokens held right now on one resource.
    fn held_tokens(&self, kind: ResourceKind, name: &str) -> Vec<u64> {
        match kind {
            ResourceKind::Lock => self
                .locks
                .get(name)
                .and_then(|lock| lock.holder.as_ref())
                .map(|hold| vec![hold.token])
                .unwrap_or_default(),
            ResourceKind::Sem => self
                .sems
                .get(name)
                .map(|sem| sem.holders.values().map(|hold| hold.token).collect())
                .unwrap_or_default(),
            ResourceKind::Waypoint => self.waypoints.held_token(name).into_iter().collect(),
        }
    }

    fn inspect(&self, kind: ResourceKind, name: &str) -> Reply {
        match kind {
            ResourceKind::Lock => self.lock_inspect(name),
            ResourceKind::Sem => self.sem_inspect(name),
            ResourceKind::Waypoint => self.waypoint_inspect(name),
        }
    }

    /// `lock.release`, `sem.release`, `waypoint.release`: ends the lease's hold and grants what
    /// became grantable, in this entry.
    fn release(
        &mut self,
        ctx: &mut Ctx,
        kind: ResourceKind,
        agent: &str,
        name: &str,
        lease: &str,
    ) -> Reply {
        let lease = match self.core.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let not_holder = || {
            Reply::refused(
                ErrorCode::NotHolder,
                format!("lease {lease} does not hold {} {name:?}", kind.as_str()),
            )
        };
        // Locks, the commonest release, take and settle in one pass over the map entry.
        if kind == ResourceKind::Lock {
            return match self.lock_release(ctx, name, lease) {
                Some(()) => Reply::Done,
                None => not_holder(),
            };
        }
        // The map's own name, shared, rather than a fresh copy for the key and the events.
        let held_name = match kind {
            ResourceKind::Lock => self.locks.get_key_value(name).map(|(name, _)| name.clone()),
            ResourceKind::Sem => self.sems.get_key_value(name).map(|(name, _)| name.clone()),
            ResourceKind::Waypoint => self.waypoints.held_name(name),
        };
        let Some(key) = held_name.map(|name| ResourceKey::new(kind, &name)) else {
            return not_holder();
        };
        let Some(hold) = self.take_hold(&key, lease) else {
            return not_holder();
        };
        self.core.release(ctx, &key, &hold, ReleaseReason::Released);
        self.settle(ctx, std::slice::from_ref(&key));
        Reply::Done
    }

    /// Removes and returns `lease`'s hold on `key`, leaving the resource to [`Self::settle`].
    fn take_hold(&mut self, key: &ResourceKey, lease: LeaseId) -> Option<grant::Hold> {
        match key.kind {
            ResourceKind::Lock => self.lock_take_hold(&key.name, lease),
            ResourceKind::Sem => self.sem_take_hold(&key.name, lease),
            ResourceKind::Waypoint => self.waypoints.take_hold(&key.name, lease),
        }
    }

    /// Takes one waiter out of its resource's queue and answers it with an error.
    fn remove_waiter(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        agent: &str,
        request_id: &str,
        code: ErrorCode,
        message: &str,
    ) {
        let waiter = match key.kind {
            ResourceKind::Lock => self
                .locks
                .get_mut(&key.name)
                .and_then(|lock| lock.waiters.take(agent, request_id)),
            ResourceKind::Sem => self
                .sems
                .get_mut(&key.name)
                .and_then(|sem| sem.waiters.take(agent, request_id)),
            ResourceKind::Waypoint => self.waypoints.take_waiter(&key.name, agent, request_id),
        };
        let waiter = waiter.expect("the pending-wait index points at a queued waiter");
        self.core.answer_waiter(ctx, key, waiter, code, message);
    }

    /// Grants whatever became grantable on these resources after holds or waiters went away,
    /// and forgets resources left with neither.
    fn settle(&mut self, ctx: &mut Ctx, keys: &[ResourceKey]) {
        let mut waypoints_touched = false;
        for key in keys {
            match key.kind {
                ResourceKind::Lock => self.lock_settle(ctx, &key.name),
                ResourceKind::Sem => self.sem_settle(ctx, &key.name),
                ResourceKind::Waypoint => waypoints_touched = true,
            }
        }
        if waypoints_touched {
            let vacate_ms = self.limits.reservation_vacate_ms;
            self.waypoints.settle(ctx, &mut self.core, vacate_ms);
        }
    }

    /// How many resources are in use: locks and semaphores held (or waited for), waypoint
    /// names held or waited for; what `resources_max` bounds (a backup's summary says it).
    pub fn resource_count(&self) -> usize {
        self.resources_in_use()
    }

    /// How many resources are in use (locks and semaphores held or waited for, waypoint
    /// reservations held or waiting), for `resources_max`.
    fn resources_in_use(&self) -> usize {
        self.locks.len() + self.sems.len() + self.waypoints.in_use()
    }

    /// The refusal for a request that would put one resource more in use than `resources_max`.
    fn resources_exhausted(&self) -> Reply {
        Reply::refused(
            ErrorCode::ResourceExhausted,
            format!(
                "{} resources are in use, the limit",
                self.limits.resources_max
            ),
        )
    }

    /// Checks every invariant of every concept. Tests call it after each apply; restore calls
    /// it on the state it read.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_concepts()
    }

    /// The concepts' own checks, in dependency order; each says what it found broken.
    fn check_concepts(&self) -> Result<(), InvariantViolation> {
        self.check_clock_invariants()?;
        self.core.check_invariants(self.index)?;
        self.core.dedup.check_bounds(&self.limits)?;
        let mut occupancy = grant::Occupancy::default();
        self.check_lock_invariants(&mut occupancy)?;
        self.check_sem_invariants(&mut occupancy)?;
        self.waypoints.check_invariants(&mut occupancy)?;
        self.core.check_occupancy(&occupancy)?;
        self.check_account_invariants()
    }
}
