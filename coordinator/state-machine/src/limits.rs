//! Limits: the bounds the state machine enforces (DESIGN.md §5.6, bounded everything).
//!
//! The limits are part of the replicated state, not of a node's local configuration: a bound
//! decides replies (`resource_exhausted`, `bad_request` for a TTL out of range), so two replicas
//! with different bounds would diverge. They change only through a `Command::Configure` entry
//! in the log, which every replica applies at the same position.

use serde::{Deserialize, Serialize};

/// Every bound the state machine enforces. Units are in the names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Shortest lease TTL accepted. It must cover a few heartbeat intervals, or leases would
    /// expire during an ordinary election; 500 ms (etcd's floor is about 2 s, ZooKeeper's 4 s).
    pub lease_ttl_ms_min: u64,
    /// Longest lease TTL accepted: one hour. A crashed agent's resources come back at most this
    /// long after its last keepalive.
    pub lease_ttl_ms_max: u64,
    /// Most leases alive at once, over all agents.
    pub leases_max: u32,
    /// Most resources (locks, semaphores and held waypoints) in use at once.
    pub resources_max: u32,
    /// Most waiters queued on one lock, one semaphore or one waypoint name.
    pub waiters_per_resource_max: u32,
    /// Most waypoint reservations waiting at once, over all names (the grant pass after a
    /// release looks only at waiters near what was released, but the total is still bounded).
    pub waypoint_waiters_max: u32,
    /// Completed request outcomes remembered per agent for retries.
    pub dedup_per_agent_max: u32,
    /// Agents whose outcomes are remembered; agents with no live lease and no wait are
    /// forgotten first, the least recently active first (`dedup.rs`). Agents with no live
    /// lease are also forgotten by time (`dedup_idle_ms`).
    pub dedup_agents_max: u32,
    /// Most leases one agent has alive at once: 1% of the default `leases_max`, so one agent
    /// cannot take the whole lease table from the others. An agent needs one lease per
    /// independent liveness (the SDK's session is one); a thousand is far above any real use.
    /// Absent from snapshots and logs written before it existed (serde default) and left out
    /// of the bytes while it has its default, so format-1 bytes stay as they were.
    #[serde(skip_serializing_if = "is_default_leases_per_agent_max")]
    pub leases_per_agent_max: u32,
    /// Most requests one lease has waiting at once, over all resources: a lease that queues
    /// for everything would hold a slot in every queue.
    #[serde(skip_serializing_if = "is_default_waits_per_lease_max")]
    pub waits_per_lease_max: u32,
    /// Most resources one agent holds or waits for at once, over all its leases (a waiter
    /// counts: it becomes a hold without asking again): 1% of the default `resources_max`.
    #[serde(skip_serializing_if = "is_default_holds_per_agent_max")]
    pub holds_per_agent_max: u32,
    /// Longest time window a waypoint reservation may ask for (`end_ms - start_ms`, the start
    /// being the entry's time when absent): one day. Bounds how long one request can take a
    /// slot of airspace from everyone else. Left out of the bytes at its default.
    #[serde(skip_serializing_if = "is_default_reservation_window_ms_max")]
    pub reservation_window_ms_max: u64,
    /// How far ahead of the entry's time a reservation's window may start: seven days. A
    /// planner books a flight hours or days ahead, not years; the bound keeps stale plans from
    /// piling up. Left out of the bytes at its default.
    #[serde(skip_serializing_if = "is_default_reservation_horizon_ms_max")]
    pub reservation_horizon_ms_max: u64,
    /// How long the outcomes of an agent with no live lease are remembered for retries: one
    /// minute. Such an agent can take nothing (every acquire names a live lease), but its key
    /// writes need no lease: a `kv.put` or `kv.txn` retried after it was forgotten is applied
    /// again. The SDK gives up retrying a request within seconds, so a minute covers every
    /// retry while an endless stream of new agent ids (one per short-lived process) no longer
    /// keeps memory for each (`dedup.rs`: an idle agent is forgotten between this and twice
    /// this after its last outcome, on a clock that a jump of a leader's wall clock moves by a
    /// second at most). Left out of the bytes at its default.
    #[serde(skip_serializing_if = "is_default_dedup_idle_ms")]
    pub dedup_idle_ms: u64,
    /// How long a preempted reservation's holder has to vacate and release it, from the entry that
    /// preempted it: five seconds, time for a drone to climb, descend or hold clear. At the
    /// deadline the machine ends the reservation (`waypoint/preempt.rs`). Left out of the bytes at
    /// its default.
    #[serde(skip_serializing_if = "is_default_reservation_vacate_ms")]
    pub reservation_vacate_ms: u64,
    /// The starvation bound of priorities among waiters. A waiter of priority `p` is queued as if
    /// it had arrived `p × reservation_aging_ms` earlier (its effective priority rises one level
    /// per `reservation_aging_ms` waited), so a request is overtaken only by higher priorities
    /// arriving less than `(3 − p) × reservation_aging_ms` after it: one minute per level. Aging
    /// orders the queue only: it never preempts. Left out of the bytes at its default.
    #[serde(skip_serializing_if = "is_default_reservation_aging_ms")]
    pub reservation_aging_ms: u64,
}

fn is_default_dedup_idle_ms(value: &u64) -> bool {
    *value == Limits::DEFAULTS.dedup_idle_ms
}

fn is_default_reservation_vacate_ms(value: &u64) -> bool {
    *value == Limits::DEFAULTS.reservation_vacate_ms
}

fn is_default_reservation_aging_ms(value: &u64) -> bool {
    *value == Limits::DEFAULTS.reservation_aging_ms
}

fn is_default_reservation_window_ms_max(value: &u64) -> bool {
    *value == Limits::DEFAULTS.reservation_window_ms_max
}

fn is_default_reservation_horizon_ms_max(value: &u64) -> bool {
    *value == Limits::DEFAULTS.reservation_horizon_ms_max
}

fn is_default_leases_per_agent_max(value: &u32) -> bool {
    *value == Limits::DEFAULTS.leases_per_agent_max
}

fn is_default_waits_per_lease_max(value: &u32) -> bool {
    *value == Limits::DEFAULTS.waits_per_lease_max
}

fn is_default_holds_per_agent_max(value: &u32) -> bool {
    *value == Limits::DEFAULTS.holds_per_agent_max
}

impl Limits {
    /// The defaults, in one place.
    pub const DEFAULTS: Limits = Limits {
        lease_ttl_ms_min: 500,
        lease_ttl_ms_max: 3_600_000,
        leases_max: 100_000,
        resources_max: 1_000_000,
        waiters_per_resource_max: 1_000,
        waypoint_waiters_max: 10_000,
        dedup_per_agent_max: 16,
        dedup_agents_max: 50_000,
        leases_per_agent_max: 1_000,
        waits_per_lease_max: 100,
        holds_per_agent_max: 10_000,
        reservation_window_ms_max: 86_400_000,
        reservation_horizon_ms_max: 604_800_000,
        dedup_idle_ms: 60_000,
        reservation_vacate_ms: 5_000,
        reservation_aging_ms: 60_000,
    };

    /// Cross-field rules. A limit of zero would make the service refuse everything, so every
    /// count must be at least one.
    pub fn validate(&self) -> Result<(), LimitsError> {
        if self.lease_ttl_ms_min == 0 {
            return Err(LimitsError::LeaseTtlMinZero);
        }
        if self.lease_ttl_ms_min > self.lease_ttl_ms_max {
            return Err(LimitsError::LeaseTtlRange {
                min_ms: self.lease_ttl_ms_min,
                max_ms: self.lease_ttl_ms_max,
            });
        }
        for (limit, value) in [
            ("reservation_window_ms_max", self.reservation_window_ms_max),
            (
                "reservation_horizon_ms_max",
                self.reservation_horizon_ms_max,
            ),
            ("dedup_idle_ms", self.dedup_idle_ms),
            ("reservation_vacate_ms", self.reservation_vacate_ms),
            ("reservation_aging_ms", self.reservation_aging_ms),
        ] {
            if value == 0 {
                return Err(LimitsError::Zero { limit });
            }
        }
        for (limit, value) in [
            ("leases_max", self.leases_max),
            ("resources_max", self.resources_max),
            ("waiters_per_resource_max", self.waiters_per_resource_max),
            ("waypoint_waiters_max", self.waypoint_waiters_max),
            ("dedup_per_agent_max", self.dedup_per_agent_max),
            ("dedup_agents_max", self.dedup_agents_max),
            ("leases_per_agent_max", self.leases_per_agent_max),
            ("waits_per_lease_max", self.waits_per_lease_max),
            ("holds_per_agent_max", self.holds_per_agent_max),
        ] {
            if value == 0 {
                return Err(LimitsError::Zero { limit });
            }
        }
        Ok(())
    }
}

/// Limits that break a rule of [`Limits::validate`]; the text names the field and the values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// `lease_ttl_ms_min` is 0: every lease could expire at once.
    #[error("lease_ttl_ms_min must be positive")]
    LeaseTtlMinZero,
    /// The TTL range is empty.
    #[error("lease_ttl_ms_min ({min_ms}) is above lease_ttl_ms_max ({max_ms})")]
    LeaseTtlRange {
        /// `lease_ttl_ms_min`.
        min_ms: u64,
        /// `lease_ttl_ms_max`.
        max_ms: u64,
    },
    /// A count limit is 0, so the service would refuse everything it bounds.
    #[error("{limit} must be at least 1")]
    Zero {
        /// The limit's field name, e.g. `leases_max`.
        limit: &'static str,
    },
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULTS
    }
}
