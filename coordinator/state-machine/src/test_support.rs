//! A small harness for the unit tests: applies commands at increasing indexes with a clock the
//! test moves, checks every invariant after every entry, and builds requests tersely.

use hivekeeper_protocol::{LockMode, Priority, ResourceKind};

use super::{AgentRequest, Command, Event, LeaseId, Limits, LogMeta, Reply, StateMachine};
pub use hivekeeper_protocol::Op;

/// A lock holder as `inspect` shows it: agent, token and mode.
pub type LockHolder = (String, u64, LockMode);

/// A machine plus the log position and clock the next entry gets.
pub struct Harness {
    pub sm: StateMachine,
    pub index: u64,
    pub term: u64,
    pub now_ms: u64,
    next_id: u64,
}

impl Harness {
    pub fn new() -> Self {
        Harness::with_limits(Limits::DEFAULTS)
    }

    pub fn with_limits(limits: Limits) -> Self {
        Harness {
            sm: StateMachine::new(limits),
            index: 0,
            term: 1,
            now_ms: 1_000_000,
            next_id: 0,
        }
    }

    /// Applies one command as the next entry, then checks every invariant.
    pub fn apply(&mut self, command: Command) -> (Reply, Vec<Event>) {
        self.index += 1;
        let meta = LogMeta {
            index: self.index,
            term: self.term,
            now_ms: self.now_ms,
        };
        let out = self.sm.apply(meta, command).expect("indexes increase");
        if let Err(broken) = self.sm.check_invariants() {
            panic!("invariant broken after entry {}: {broken}", self.index);
        }
        out
    }

    /// A request with a fresh id.
    pub fn send(&mut self, agent: &str, op: Op) -> (Reply, Vec<Event>) {
        self.next_id += 1;
        let id = format!("r{}", self.next_id);
        self.send_as(agent, &id, op)
    }

    /// A request with a given id (for retries).
    pub fn send_as(&mut self, agent: &str, id: &str, op: Op) -> (Reply, Vec<Event>) {
        self.apply(Command::Request {
            agent: agent.to_string(),
            request: AgentRequest::new(id, op),
        })
    }

    /// An account op that sets a secret, with its hash as the node would log it, under a fresh
    /// id.
    pub fn send_account(&mut self, agent: &str, op: (Op, String)) -> (Reply, Vec<Event>) {
        self.next_id += 1;
        let id = format!("r{}", self.next_id);
        self.send_account_as(agent, &id, op)
    }

    /// As [`Self::send_account`], with a given id.
    pub fn send_account_as(
        &mut self,
        agent: &str,
        id: &str,
        (op, secret_hash): (Op, String),
    ) -> (Reply, Vec<Event>) {
        let mut request = AgentRequest::new(id, op);
        request.secret_hash = Some(secret_hash);
        self.apply(Command::Request {
            agent: agent.to_string(),
            request,
        })
    }

    /// The reply alone.
    pub fn reply(&mut self, agent: &str, op: Op) -> Reply {
        self.send(agent, op).0
    }

    /// Grants a lease and returns its wire id.
    pub fn lease(&mut self, agent: &str, ttl_ms: u64) -> String {
        match self.reply(agent, lease_grant(ttl_ms)) {
            Reply::Lease { lease, .. } => lease.to_string(),
            other => panic!("lease.grant refused: {other:?}"),
        }
    }

    /// Grants a lease whose locks are held back `lock_delay_ms` when it expires or an operator
    /// ends it, and returns its wire id.
    pub fn lease_with_delay(&mut self, agent: &str, ttl_ms: u64, lock_delay_ms: u64) -> String {
        let op = Op::LeaseGrant {
            ttl_ms,
            lock_delay_ms,
        };
        match self.reply(agent, op) {
            Reply::Lease { lease, .. } => lease.to_string(),
            other => panic!("lease.grant refused: {other:?}"),
        }
    }

    /// An `ExpireHoldTimes` of the current term, as the next entry.
    pub fn expire_hold_times(&mut self) -> (Reply, Vec<Event>) {
        let term = self.term;
        self.apply(Command::ExpireHoldTimes { term })
    }

    /// One lease of `ttl_ms` for each agent, granted in order; their wire ids.
    pub fn leases<const N: usize>(&mut self, agents: [&str; N], ttl_ms: u64) -> [String; N] {
        agents.map(|agent| self.lease(agent, ttl_ms))
    }

    /// The token of a grant reply.
    pub fn token(reply: &Reply) -> u64 {
        match reply {
            Reply::Granted { token } => *token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    pub fn expire(&mut self, leases: &[&str]) -> (Reply, Vec<Event>) {
        let leases = leases
            .iter()
            .map(|lease| LeaseId::parse(lease).expect("a wire lease id"))
            .collect();
        let term = self.term;
        self.apply(Command::ExpireLeases { term, leases })
    }

    /// `fence.check` of `token` on the waypoint (or route) `name`.
    pub fn fence_waypoint(&self, name: &str, token: u64) -> Reply {
        let op = Op::FenceCheck {
            name: name.to_string(),
            kind: ResourceKind::Waypoint,
            token,
        };
        self.sm.query("inspector", &op)
    }

    /// `fence.check` of `token` on lock `name`.
    pub fn fence_lock(&self, name: &str, token: u64) -> Reply {
        let op = Op::FenceCheck {
            name: name.to_string(),
            kind: ResourceKind::Lock,
            token,
        };
        self.sm.query("inspector", &op)
    }

    /// Holders of lock `name` as `(agent, token, mode)` and its waiters as `(agent, mode)`, as
    /// `inspect` shows them.
    pub fn lock_modes(&self, name: &str) -> (Vec<LockHolder>, Vec<(String, LockMode)>) {
        let op = Op::Inspect {
            kind: ResourceKind::Lock,
            name: name.to_string(),
        };
        match self.sm.query("inspector", &op) {
            Reply::Inspect {
                holders, waiters, ..
            } => (
                holders
                    .into_iter()
                    .map(|h| (h.agent, h.token, h.mode))
                    .collect(),
                waiters.into_iter().map(|w| (w.agent, w.mode)).collect(),
            ),
            other => panic!("inspect failed: {other:?}"),
        }
    }

    /// Holder agents and waiter agents of a resource, as `inspect` shows them.
    pub fn occupants(&self, kind: ResourceKind, name: &str) -> (Vec<String>, Vec<String>) {
        let op = Op::Inspect {
            kind,
            name: name.to_string(),
        };
        match self.sm.query("inspector", &op) {
            Reply::Inspect {
                holders, waiters, ..
            } => (
                holders.into_iter().map(|h| h.agent).collect(),
                waiters.into_iter().map(|w| w.agent).collect(),
            ),
            other => panic!("inspect failed: {other:?}"),
        }
    }
}

/// A `lease.grant` of `ttl_ms` without a lock-delay.
pub fn lease_grant(ttl_ms: u64) -> Op {
    Op::LeaseGrant {
        ttl_ms,
        lock_delay_ms: 0,
    }
}

/// A `kv.put` of `key` without a lease.
pub fn kv_put(key: &str, value: &str) -> Op {
    Op::KvPut {
        key: key.into(),
        value: value.into(),
        lease: None,
        prev_kv: None,
    }
}

/// A `kv.delete` of one key.
pub fn kv_delete(key: &str) -> Op {
    Op::KvDelete {
        key: Some(key.into()),
        prefix: None,
    }
}

/// A refusal's code and message; panics on any other reply.
pub fn refusal(reply: &Reply) -> (hivekeeper_protocol::ErrorCode, &str) {
    match reply {
        Reply::Refused { code, message } => (*code, message.as_str()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub fn lock_acquire(name: &str, lease: &str, wait_ms: Option<u64>) -> Op {
    lock_acquire_in(name, lease, wait_ms, LockMode::Exclusive)
}

/// A `lock.acquire` of `name` in `mode`.
pub fn lock_acquire_in(name: &str, lease: &str, wait_ms: Option<u64>, mode: LockMode) -> Op {
    Op::LockAcquire {
        name: name.to_string(),
        lease: lease.to_string(),
        wait_ms,
        max_hold_ms: None,
        mode,
    }
}

/// A shared `lock.acquire` of `name`.
pub fn lock_shared(name: &str, lease: &str, wait_ms: Option<u64>) -> Op {
    lock_acquire_in(name, lease, wait_ms, LockMode::Shared)
}

pub fn lock_downgrade(name: &str, lease: &str) -> Op {
    Op::LockDowngrade {
        name: name.to_string(),
        lease: lease.to_string(),
    }
}

/// A `lock.acquire_all` of `names` in `mode`.
pub fn lock_acquire_all(names: &[&str], lease: &str, wait_ms: Option<u64>, mode: LockMode) -> Op {
    Op::LockAcquireAll {
        names: names.iter().map(|name| name.to_string()).collect(),
        lease: lease.to_string(),
        wait_ms,
        max_hold_ms: None,
        mode,
    }
}

pub fn lock_release_all(names: &[&str], lease: &str) -> Op {
    Op::LockReleaseAll {
        names: names.iter().map(|name| name.to_string()).collect(),
        lease: lease.to_string(),
    }
}

pub fn lock_release(name: &str, lease: &str) -> Op {
    Op::LockRelease {
        name: name.to_string(),
        lease: lease.to_string(),
    }
}

pub fn sem_acquire(name: &str, limit: u32, lease: &str, permits: u32, wait_ms: Option<u64>) -> Op {
    Op::SemAcquire {
        name: name.to_string(),
        limit,
        lease: lease.to_string(),
        permits,
        wait_ms,
        max_hold_ms: None,
    }
}

pub fn sem_release(name: &str, lease: &str) -> Op {
    Op::SemRelease {
        name: name.to_string(),
        lease: lease.to_string(),
    }
}

/// A pad `north_m` metres north of a fixed origin, with a radius and no altitude band.
pub fn pad(name: &str, lease: &str, north_m: f64, radius_m: f64, wait_ms: Option<u64>) -> Op {
    pad_with(name, lease, north_m, radius_m, wait_ms, (None, None))
}

/// A 3 m pad as [`pad`] places it, reserved for the time window `[start_ms, end_ms)` (either
/// end optional).
pub fn pad_in(
    name: &str,
    lease: &str,
    north_m: f64,
    wait_ms: Option<u64>,
    window: (Option<u64>, Option<u64>),
) -> Op {
    pad_with(name, lease, north_m, 3.0, wait_ms, window)
}

fn pad_with(
    name: &str,
    lease: &str,
    north_m: f64,
    radius_m: f64,
    wait_ms: Option<u64>,
    (start_ms, end_ms): (Option<u64>, Option<u64>),
) -> Op {
    Op::WaypointReserve {
        name: name.to_string(),
        lease: lease.to_string(),
        lat: Some(51.5 + north_m / super::M_PER_DEG),
        lon: Some(-0.1),
        alt_min_m: None,
        alt_max_m: None,
        radius_m: Some(radius_m),
        wait_ms,
        start_ms,
        end_ms,
        priority: Priority::ROUTINE,
    }
}

/// A route volume: a 3 m cylinder `north_m` metres north of [`pad`]'s origin, from the ground
/// to 120 m, in `[start_ms, end_ms)`.
pub fn leg(north_m: f64, start_ms: u64, end_ms: u64) -> hivekeeper_protocol::Volume {
    hivekeeper_protocol::Volume {
        lat: 51.5 + north_m / super::M_PER_DEG,
        lon: -0.1,
        radius_m: 3.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms,
        end_ms,
    }
}

pub fn route_reserve(
    name: &str,
    lease: &str,
    volumes: Vec<hivekeeper_protocol::Volume>,
    wait_ms: Option<u64>,
) -> Op {
    Op::RouteReserve {
        name: name.to_string(),
        lease: lease.to_string(),
        volumes,
        wait_ms,
        priority: Priority::ROUTINE,
    }
}

pub fn route_amend(name: &str, lease: &str, volumes: Vec<hivekeeper_protocol::Volume>) -> Op {
    Op::RouteAmend {
        name: name.to_string(),
        lease: lease.to_string(),
        volumes,
        priority: Priority::ROUTINE,
    }
}

/// `op` (a `waypoint.reserve`, `route.reserve` or `route.amend`) at priority `level`.
pub fn at_priority(mut op: Op, level: u8) -> Op {
    let level = Priority::new(level).expect("a test priority is 0 to 3");
    match &mut op {
        Op::WaypointReserve { priority, .. }
        | Op::RouteReserve { priority, .. }
        | Op::RouteAmend { priority, .. } => *priority = level,
        other => panic!("{} has no priority", other.name()),
    }
    op
}

/// `op` (a `lock.acquire`, `lock.acquire_all` or `sem.acquire`) with its hold bounded to
/// `max_hold_ms`.
pub fn held_at_most(mut op: Op, ms: u64) -> Op {
    match &mut op {
        Op::LockAcquire { max_hold_ms, .. }
        | Op::LockAcquireAll { max_hold_ms, .. }
        | Op::SemAcquire { max_hold_ms, .. } => *max_hold_ms = Some(ms),
        other => panic!("{} has no max_hold_ms", other.name()),
    }
    op
}

pub fn waypoint_release(name: &str, lease: &str) -> Op {
    Op::WaypointRelease {
        name: name.to_string(),
        lease: lease.to_string(),
    }
}

/// The `Respond` events of an entry as `(agent, request id, reply)`.
pub fn responses(events: &[Event]) -> Vec<(String, String, Reply)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Respond {
                agent,
                request_id,
                reply,
                ..
            } => Some((agent.to_string(), request_id.clone(), reply.clone())),
            _ => None,
        })
        .collect()
}

pub fn route_release(name: &str, lease: &str) -> Op {
    Op::RouteRelease {
        name: name.to_string(),
        lease: lease.to_string(),
    }
}

/// The key of lock `name`.
pub fn lock_key(name: &str) -> super::ResourceKey {
    super::ResourceKey::new(ResourceKind::Lock, &std::sync::Arc::from(name))
}

/// `Event::Granted` of lock `name` to `agent`'s lease `lease` (its log position): at once
/// (`queued: None`) or from the queue after `Some(waited_ms)`.
pub fn lock_granted(name: &str, agent: &str, lease: u64, token: u64, queued: Option<u64>) -> Event {
    Event::Granted {
        key: lock_key(name),
        agent: agent.into(),
        lease: LeaseId(lease),
        token,
        waited_ms: queued.unwrap_or(0),
        queued: queued.is_some(),
    }
}

/// `Event::Released` of lock `name` by its holder, held `held_ms`.
pub fn lock_released(name: &str, agent: &str, lease: u64, token: u64, held_ms: u64) -> Event {
    let released = super::ReleaseReason::Released;
    lock_ended(name, (agent, lease, token), held_ms, released)
}

/// `Event::Released` of the hold `(agent, lease, token)` of lock `name`, held `held_ms`, for
/// `reason`.
pub fn lock_ended(
    name: &str,
    (agent, lease, token): (&str, u64, u64),
    held_ms: u64,
    reason: super::ReleaseReason,
) -> Event {
    Event::Released {
        key: lock_key(name),
        agent: agent.into(),
        lease: LeaseId(lease),
        token,
        held_ms,
        reason,
    }
}

/// `ExpireHoldTimes`'s reply when it ended nothing.
pub const NOTHING_ENDED: Reply = hold_times_ended(0, 0);

/// `ExpireHoldTimes`'s reply: how many holds its max-hold ended and how many lock-delays.
pub const fn hold_times_ended(max_holds: u64, lock_delays: u64) -> Reply {
    Reply::HoldTimesEnded {
        max_holds,
        lock_delays,
    }
}

/// `Event::Queued` of `agent`'s request `request_id` on lock `name`.
pub fn lock_queued(name: &str, agent: &str, request_id: &str) -> Event {
    Event::Queued {
        key: lock_key(name),
        agent: agent.into(),
        request_id: request_id.into(),
    }
}

/// `Event::Respond` to `agent`'s request `request_id` that waited on lock `name`.
pub fn lock_respond(name: &str, agent: &str, request_id: &str, reply: Reply) -> Event {
    Event::Respond {
        key: lock_key(name),
        agent: agent.into(),
        request_id: request_id.into(),
        reply,
    }
}
