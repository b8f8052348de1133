//! The machine: its replicated state, [`StateMachine::apply`] of one entry and
//! [`StateMachine::query`] of one read, each dispatched to the concept that decides.
//!
//! Invariants:
//! 1. Entries apply at strictly increasing indexes; the clock, the applied index and the
//!    highest term move only forward, before the command is decided.
//! 2. A request is answered from the dedup memory when its id is known, and its outcome is
//!    remembered unless it queued (its queue exit is remembered instead, `grant.rs`).
//! 3. Every concept's own invariants hold after every entry ([`StateMachine::check_invariants`]).

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, Op, ResourceKind, validate};
use serde::{Deserialize, Serialize};

use crate::barrier::Barrier;
use crate::election::Elections;
use crate::grant::{Acquire, Core};
use crate::kv::KeySpace;
use crate::lock::Lock;
use crate::lock_delay::LockDelays;
use crate::semaphore::Semaphore;
use crate::waypoint::{AskedWindow, Waypoints};
use crate::{
    AccountGrant, AgentRequest, ClusterVersion, Command, Decision, Error, Event,
    InvariantViolation, KvLimits, Limits, LogMeta, NameMap, Reply, ResourceQuery, Text,
    WaiterCounts, account, snapshot,
};

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
    pub(crate) limits: Limits,
    /// Last applied log index.
    pub(crate) index: u64,
    /// Highest term seen in an applied entry; an `ExpireLeases` from an older term is stale.
    pub(crate) term_max: u64,
    /// The machine's clock: the first entry's stamp plus every later entry's clamped step
    /// (`clock.rs`).
    pub(crate) now_ms: u64,
    /// The last applied entry's stamp, when it differs from `now_ms` (a stamp went back or
    /// jumped ahead by more than a step); the next step is measured from it. Absent from
    /// the snapshot otherwise, so an honest log's snapshot keeps data format 1's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stamp_last_ms: Option<u64>,
    /// Leases, tokens, pending waits and remembered outcomes.
    pub(crate) core: Core,
    /// Locks in use (held, or being handed over inside an apply), by name.
    #[serde(serialize_with = "snapshot::sorted")]
    pub(crate) locks: NameMap<Lock>,
    /// Semaphores in use, by name.
    #[serde(serialize_with = "snapshot::sorted")]
    pub(crate) sems: NameMap<Semaphore>,
    /// Waypoint reservations and their waiters.
    pub(crate) waypoints: Waypoints,
    /// Elections in use, their leaders and candidates. Absent from a snapshot while there are
    /// none, so a machine without elections keeps data format 1's bytes.
    #[serde(default, skip_serializing_if = "Elections::is_empty")]
    pub(crate) elections: Elections,
    /// Accounts, by agent id. Absent from a snapshot while there are none, so a snapshot of a
    /// cluster without authentication keeps data format 1's bytes, and one written before
    /// accounts existed still loads.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) accounts: account::Accounts,
    /// Keys, their revisions and the recent events (`kv.rs`). Absent from a snapshot until
    /// the first key change, so a machine without keys keeps data format 1's bytes.
    #[serde(default, skip_serializing_if = "KeySpace::is_unused")]
    pub(crate) kv: KeySpace,
    /// Barriers in use, by name (`barrier.rs`). Absent from a snapshot while there are none,
    /// so a machine that never had one keeps data format 1's bytes.
    #[serde(
        default,
        skip_serializing_if = "std::collections::HashMap::is_empty",
        serialize_with = "snapshot::sorted"
    )]
    pub(crate) barriers: NameMap<Barrier>,
    /// Locks held back by a lock-delay, until when (`lock_delay.rs`). Absent from a snapshot
    /// while none is, so a machine without lock-delays keeps data format 1's bytes.
    #[serde(default, skip_serializing_if = "LockDelays::is_empty")]
    pub(crate) lock_delays: LockDelays,
    /// The feature level every member's build applies (`cluster_version.rs`). Absent from a
    /// snapshot while at the initial version, so such a machine keeps data format 1's bytes.
    #[serde(default, skip_serializing_if = "ClusterVersion::is_initial")]
    pub(crate) cluster_version: ClusterVersion,
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
            elections: Elections::default(),
            accounts: account::Accounts::new(),
            kv: KeySpace::default(),
            barriers: NameMap::default(),
            lock_delays: LockDelays::default(),
            cluster_version: ClusterVersion::default(),
        }
    }

    /// The replicated limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The key space's replicated bounds in force.
    pub fn kv_limits(&self) -> &KvLimits {
        self.kv.limits()
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
        if let Command::RaiseClusterVersion { version } = &command {
            // Checked before anything moves: a member that cannot follow changes nothing.
            Self::check_raise(*version)?;
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
            Command::ExpireHoldTimes { term } => self.expire_hold_times(&mut ctx, term),
            Command::CancelWait { agent, request_id } => {
                self.cancel_wait(&mut ctx, &agent, &request_id)
            }
            Command::Configure { limits, kv } => self.configure(limits, kv),
            Command::RaiseClusterVersion { version } => self.raise_cluster_version(version),
        };
        self.core
            .sweep_idle_dedup(&self.limits, meta.index, clock_before_ms, self.now_ms);
        self.core.enforce_dedup(&self.limits);
        Ok((reply, ctx.events))
    }

    /// A `Configure` entry: both sets of bounds are checked before either is replaced, so a
    /// refused entry changes nothing.
    fn configure(&mut self, limits: Limits, kv: Option<KvLimits>) -> Reply {
        if let Err(error) = limits.validate() {
            return Reply::refused(ErrorCode::BadRequest, error.to_string());
        }
        if let Some(Err(error)) = kv.as_ref().map(KvLimits::validate) {
            return Reply::refused(ErrorCode::BadRequest, error.to_string());
        }
        self.limits = limits;
        self.core.dedup.set_limits(&self.limits);
        if let Some(kv) = kv {
            self.kv.configure(kv);
        }
        Reply::Done
    }

    /// Answers a read op (`lease.keepalive` check, `fence.check`, `inspect`, `admin.leases`,
    /// `admin.resources`, `admin.agent.list`, `airspace.query`, `kv.get`, `election.leader`)
    /// without changing anything. Any other op is refused `bad_request`: a write goes through
    /// the log, and the node answers `admin.status`, `admin.snapshot` and `admin.member.*` from
    /// Raft.
    pub fn query(&self, agent: &str, op: &Op) -> Reply {
        self.read(agent, op).unwrap_or_else(|refusal| refusal)
    }

    /// Hands a read op to the concept that answers it.
    fn read(&self, agent: &str, op: &Op) -> Decision {
        Ok(match op {
            Op::LeaseKeepalive { lease } => {
                let ttl_ms = self.core.leases[&self.core.live_lease(agent, lease)?].ttl_ms;
                Reply::Ttl { ttl_ms }
            }
            Op::FenceCheck { name, kind, token } => {
                let tokens = self.resource(*kind).held_tokens(name);
                Reply::Fence {
                    current: tokens.iter().copied().max().unwrap_or(0),
                    valid: tokens.contains(token),
                }
            }
            Op::Inspect { kind, name } => self.resource(*kind).inspect(name),
            Op::AdminLeases { after } => self.lease_page(after.as_deref())?,
            Op::AdminResources {
                kind,
                prefix,
                after,
                limit,
            } => self.resource_page(ResourceQuery {
                kind: *kind,
                prefix: prefix.as_deref(),
                after: after.as_deref(),
                limit: *limit,
            })?,
            Op::AdminAgentList { after } => self.account_page(after.as_deref()),
            Op::KvGet {
                key,
                prefix,
                after,
                limit,
                ..
            } => self.kv_get(key.as_deref(), prefix.as_deref(), after.as_deref(), *limit)?,
            Op::AirspaceQuery {
                volume,
                volumes,
                after,
                limit,
            } => self.airspace_query(
                volume.as_ref(),
                volumes.as_deref(),
                after.as_deref(),
                *limit,
            )?,
            Op::ElectionLeader { name } => self.election_leader(name),
            other => {
                let why = if other.is_write() {
                    "changes state and must be applied through the log"
                } else {
                    "is answered by the node (Raft), not the state machine"
                };
                return Err(Reply::refused(
                    ErrorCode::BadRequest,
                    format!("{} {why}", other.name()),
                ));
            }
        })
    }

    /// An agent's write request: checked as the wire decoder checks it, answered from the
    /// dedup memory when its id is known, otherwise decided and its outcome remembered.
    pub(crate) fn request(&mut self, ctx: &mut Ctx, agent: String, request: AgentRequest) -> Reply {
        if let Err(message) = validate::agent_id(&agent) {
            return Reply::refused(ErrorCode::BadRequest, message);
        }
        if let Err(invalid) = request.validate() {
            return Reply::refused(ErrorCode::BadRequest, invalid.to_string());
        }
        let known = self.core.recall(&agent, &request.id);
        if let Some(reply) = known.replay {
            return reply;
        }
        let agent = known.name.unwrap_or_else(|| Arc::from(agent));
        let AgentRequest {
            id,
            op,
            secret_hash,
        } = request;
        let reply = self
            .dispatch(ctx, &agent, &id, op, secret_hash)
            .unwrap_or_else(|refusal| refusal);
        if reply != Reply::Queued {
            self.core
                .dedup
                .record(known.slot, &agent, id, reply.clone(), ctx.index);
        }
        reply
    }

    /// Hands a valid, new request to the concept that decides it.
    fn dispatch(
        &mut self,
        ctx: &mut Ctx,
        agent: &Text,
        id: &str,
        op: Op,
        secret_hash: Option<String>,
    ) -> Decision {
        let secret_hash = || secret_hash.expect("validated by `request`: an account op has one");
        match op {
            Op::LeaseGrant {
                ttl_ms,
                lock_delay_ms,
            } => self.lease_grant(ctx, agent, ttl_ms, lock_delay_ms),
            Op::LeaseRevoke { lease } => self.lease_revoke(ctx, agent, &lease),
            // No owner check: with authentication on, the node checks the operator's role
            // before the log (`NodeHandle::submit`, docs/PROTOCOL.md, roles).
            Op::AdminRevoke { lease } => self.admin_revoke(ctx, &lease),
            op @ (Op::LockAcquire { .. } | Op::LockAcquireAll { .. } | Op::SemAcquire { .. }) => {
                self.bounded_acquire(ctx, agent, id, op)
            }
            Op::LockRelease { name, lease } => {
                self.release(ctx, ResourceKind::Lock, agent, &name, &lease)
            }
            Op::LockDowngrade { name, lease } => self.lock_downgrade(ctx, agent, &name, &lease),
            Op::LockReleaseAll { names, lease } => {
                self.lock_release_all(ctx, agent, &names, &lease)
            }
            Op::SemRelease { name, lease } => {
                self.release(ctx, ResourceKind::Sem, agent, &name, &lease)
            }
            op @ (Op::WaypointReserve { .. } | Op::RouteReserve { .. } | Op::RouteAmend { .. }) => {
                self.reservation_apply(ctx, agent, id, op)
            }
            Op::WaypointRelease { name, lease } | Op::RouteRelease { name, lease } => {
                self.release(ctx, ResourceKind::Waypoint, agent, &name, &lease)
            }
            // The operator's role is checked by the node before the log, like admin.revoke.
            Op::AdminAgentAdd {
                name,
                role,
                kv_read,
                kv_write,
            } => {
                let grant = AccountGrant {
                    role: role.unwrap_or_default(),
                    kv_read,
                    kv_write,
                };
                self.account_add(ctx, &name, grant, secret_hash())
            }
            Op::AdminAgentRotate { name } => self.account_rotate(ctx, &name, secret_hash()),
            Op::AdminAgentRemove { name } => self.account_remove(ctx, &name),
            op @ (Op::KvPut { .. } | Op::KvDelete { .. } | Op::KvTxn { .. }) => {
                self.kv_apply(ctx, agent, op)
            }
            op @ (Op::ElectionCampaign { .. }
            | Op::ElectionProclaim { .. }
            | Op::ElectionResign { .. }) => self.election_apply(ctx, agent, id, op),
            Op::BarrierEnter {
                name,
                count,
                lease,
                wait_ms,
            } => self.barrier_enter(ctx, Acquire::new(agent, id, &lease, wait_ms), name, count),
            Op::BarrierLeave {
                name,
                lease,
                wait_ms,
            } => self.barrier_leave(ctx, Acquire::new(agent, id, &lease, wait_ms), name),
            other => Err(Reply::refused(
                ErrorCode::BadRequest,
                format!("{} is not a write: the log never carries it", other.name()),
            )),
        }
    }

    /// `waypoint.reserve`, `route.reserve` and `route.amend`: the request, its geometry read
    /// and its window's ends as asked, to the waypoints.
    fn reservation_apply(&mut self, ctx: &mut Ctx, agent: &Text, id: &str, op: Op) -> Decision {
        match op {
            ref reserve @ Op::WaypointReserve {
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
                    .expect("validated by `request`: the geometry is well formed");
                let acquire = Acquire::new(agent, id, lease, wait_ms);
                let asked = AskedWindow { start_ms, end_ms };
                self.waypoint_reserve(ctx, acquire, name, area, asked, priority)
            }
            Op::RouteReserve {
                name,
                lease,
                volumes,
                wait_ms,
                priority,
            } => {
                let acquire = Acquire::new(agent, id, &lease, wait_ms);
                self.route_reserve(ctx, acquire, &name, volumes, priority)
            }
            Op::RouteAmend {
                name,
                lease,
                volumes,
                priority,
            } => self.route_amend(ctx, agent, &name, &lease, volumes, priority),
            other => Err(Reply::refused(
                ErrorCode::BadRequest,
                format!("{} is not a waypoint or route reservation", other.name()),
            )),
        }
    }

    /// `lock.acquire`, `lock.acquire_all` and `sem.acquire`: the request, its hold bounded by
    /// its `max_hold_ms` (checked against the limits first: `max_hold.rs`), to the locks or
    /// the semaphore.
    fn bounded_acquire(&mut self, ctx: &mut Ctx, agent: &Text, id: &str, op: Op) -> Decision {
        let max_hold_ms = self.checked_max_hold(&op)?;
        match op {
            Op::LockAcquire {
                name,
                lease,
                wait_ms,
                mode,
                ..
            } => {
                let acquire = Acquire::new(agent, id, &lease, wait_ms).max_hold(max_hold_ms);
                self.lock_acquire(ctx, acquire, name, mode)
            }
            Op::LockAcquireAll {
                names,
                lease,
                wait_ms,
                mode,
                ..
            } => {
                let acquire = Acquire::new(agent, id, &lease, wait_ms).max_hold(max_hold_ms);
                self.lock_acquire_all(ctx, acquire, names, mode)
            }
            Op::SemAcquire {
                name,
                limit,
                lease,
                permits,
                wait_ms,
                ..
            } => {
                let acquire = Acquire::new(agent, id, &lease, wait_ms).max_hold(max_hold_ms);
                self.sem_acquire(ctx, acquire, name, limit, permits)
            }
            other => Err(Reply::refused(
                ErrorCode::BadRequest,
                format!(
                    "{} is not a lock, multi-lock or semaphore acquire",
                    other.name()
                ),
            )),
        }
    }

    /// Checks every invariant of every concept. Tests call it after each apply; restore calls
    /// it on the state it read. The concepts' checks run in dependency order; each says what it
    /// found broken.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_clock_invariants()?;
        self.core.check_invariants(self.index)?;
        self.core.dedup.check_bounds(&self.limits)?;
        self.check_resources()?;
        self.check_lock_delays()?;
        self.check_account_invariants()?;
        self.check_kv_invariants()?;
        self.check_election_invariants()?;
        self.check_cluster_version()
    }
}
