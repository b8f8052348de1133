//! Model-based test of the coordinator's state machine (DESIGN.md §6, step 2).
//!
//! proptest draws random logs (up to 6 opening lease grants, then 1 to 120 steps) over a small
//! universe: 4 agents, 2 lock names (exclusive; and, drawn by a case generator of their own,
//! [`lock_case`], held shared, downgraded, and taken and released together as multi-locks:
//! the model's locks say no exclusive holder is ever beside anybody, queues are FIFO across
//! modes and across a multi-lock's locks, and a multi-lock has one token on every lock), 2
//! semaphore names with capacities 2 and 3 and
//! weighted requests, 2 election names whose candidates campaign with values (one of them too
//! long) and whose leaders proclaim and resign, or are sent deposed and never-granted tokens
//! (the naive election: at most one leader per name, candidates in arrival order, a new
//! leader's token larger than every earlier one, and its `$election/` key created at that
//! token, modified by each proclaim, deleted when it goes), 4 waypoint names with cylinders a
//! few metres apart (some with altitude bands, some
//! across a cell boundary of the machine's grid, a pair across the antimeridian and one across
//! the pole, and reservations without geometry), with time windows (overlapping, touching, in
//! the future, live, and refused ones: in the past, empty, too long, beyond the horizon), and
//! with priorities 0 to 3 (preemption with vacate deadlines, through the chain of waiters
//! ahead, the queue ordered by priority and aging; the model runs its naive preemption pass
//! after every entry and the test compares the `Event::Preempted`s and
//! `Event::PreemptionWithdrawn`s), and routes amended (trimmed to the legs not flown, kept
//! volumes narrowed, while another lease waits on a kept one), and 2 barrier names with rounds
//! of 1 to 4 members (drawn by a case generator of their own, [`barrier_case`], with locks and
//! semaphores among them; the model's barrier says nobody passes early, nobody is left behind,
//! generations increase). Hold times come in [`case`] and [`lock_case`] drawn with them
//! (`case(true)`, `lock_case(true)`: leases with lock-delays, acquires and multi-locks with max-holds, operators'
//! revokes of lock holders, `ExpireHoldTimes` stamped at a deadline and 1 ms before it): the
//! model holds back every lock an expired or operator-revoked lease held, in either mode and
//! through a multi-lock, until the latest delay on it ends, grants nobody a held-back lock
//! while leaving its other shared holders be, and ends each hold at its own max-hold deadline,
//! a multi-lock's on all its locks together. Each entry goes to the real
//! [`StateMachine`] and to [`Model`], a naive reference written from DESIGN.md §2 and the
//! module docs: plain `Vec`s, linear scans, one global "grant whatever is grantable" pass after
//! every change. Only the geometry (`areas_conflict`, `distance_m`) is shared with the machine.
//!
//! After every step the test compares the reply (the code of a refusal, the exact token of a
//! grant, the lease id), the deferred answers (`Event::Respond`, in order), the leases the entry
//! ended (`Event::LeaseEnded`), and the state as `query` shows it: `inspect` of every resource,
//! `fence.check` with held, stale and never-granted tokens, `lease.keepalive` of every lease by
//! every agent, `leases()`, the applied index and the clock. `check_invariants()` must hold
//! after every step. A retried request id must get exactly the first final reply, message
//! included. The log also moves the clock backwards and jumps it by more than a step (the model
//! steps its clock as `clock.rs` says), changes terms (a stale `ExpireLeases` is
//! ignored), stamps entries exactly at a lease's deadline and 1 ms before it (and at a wait's
//! deadline and a reservation window's end), ends windows (`ExpireReservations`), replaces the
//! machine by `restore(snapshot())`, and reconfigures the limits. At the end two more replicas
//! — one fed the whole log, one restored from a snapshot taken halfway — must give the same
//! replies, events and snapshot bytes.
//!
//! Reproducing a failure: proptest shrinks it and prints the minimal `Case` and the failure
//! with the resolved log that led to it (`#index term stamped: agent sends id: op`), which reads
//! as a unit test of `StateMachine::apply`. The seed is saved in
//! `coordinator/state-machine/tests/model.proptest-regressions` and replayed first on the next run
//! (commit it when it records a real bug).
//! `PROPTEST_CASES=20000` runs a longer hunt (256 cases by default, about 10 s in debug);
//! `PROPTEST_RNG_SEED=<u64>` fixes the generator.
//!
//! ```text
//! cargo test -p hivekeeper-state-machine --test model
//! PROPTEST_CASES=20000 cargo test -p hivekeeper-state-machine --test model --release
//! cargo test -p hivekeeper-state-machine --test model -- --nocapture generator   # coverage tally
//! ```

use std::collections::BTreeMap;

use hivekeeper_protocol::kv::{KeyValue, election_key};
use hivekeeper_protocol::{
    Area, ErrorCode, HolderInfo, KvPutDone, LeaderInfo, Priority, ResourceKind, Volume, WaiterInfo,
};
use hivekeeper_protocol::{LockMode, Op};
use hivekeeper_state_machine::{
    AgentRequest, Command, Event, IDLE_CLOCK_STEP_MS_MAX, KV_LIMITS_DEFAULT, LeaseEnd, LeaseId,
    Limits, LogMeta, ReleaseReason, Reply, ResourceKey, StateMachine,
};
use hivekeeper_state_machine::{PREEMPT_CHAIN_MAX, areas_conflict, distance_m};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{TestCaseError, TestRunner};

// ------------------------------------------------------------------------------------------
// The universe.
// ------------------------------------------------------------------------------------------

const AGENTS: [&str; 4] = ["a0", "a1", "a2", "a3"];
/// "alpha" is a lock, a semaphore, a waypoint and an election: the kinds must not share state.
const LOCK_NAMES: [&str; 2] = ["alpha", "beta"];
const SEM_NAMES: [&str; 2] = ["alpha", "pool"];
const SEM_LIMITS: [u32; 2] = [2, 3];
const WAYPOINT_NAMES: [&str; 4] = ["alpha", "pad1", "pad2", "pad3"];
const BARRIER_NAMES: [&str; 2] = ["alpha", "gate"];
/// Round sizes: small enough for four agents to fill often, and one past the tight preset's
/// bound (its `waiters_per_resource_max` + 1 is 3).
const BARRIER_COUNTS: [u32; 4] = [1, 2, 3, 4];
const ELECTION_NAMES: [&str; 2] = ["alpha", "chair"];
const ALL_NAMES: [&str; 8] = [
    "alpha", "beta", "pool", "pad1", "pad2", "pad3", "chair", "gate",
];
const KINDS: [ResourceKind; ResourceKind::ALL.len()] = ResourceKind::ALL;
/// Values a candidate campaigns with or a leader proclaims; [`value`] adds one too long.
const VALUES: [&str; 3] = ["", "node-1", "node-2"];

/// [`VALUES`]`[k]`, or past them a value one byte longer than the key space's default
/// `value_bytes_max` (refused `bad_request`).
fn value(k: usize) -> String {
    VALUES.get(k).map_or_else(
        || "v".repeat(KV_LIMITS_DEFAULT.value_bytes_max as usize + 1),
        |value| value.to_string(),
    )
}
/// TTLs that run out within a few steps, long ones, and ones outside the default range
/// 500..=3_600_000 (0 is refused by the protocol validation, before the machine's limits).
const TTLS_MS_SHORT: [u64; 4] = [500, 800, 1_500, 3_000];
const TTLS_MS_LONG: [u64; 2] = [60_000, 3_600_000];
const TTLS_MS_OUT_OF_RANGE: [u64; 3] = [499, 3_600_001, 0];
/// Lease strings that name no lease: never granted, not hex, too short.
const UNKNOWN_LEASES: [&str; 4] = [
    "0000000000000000",
    "00000000ffffffff",
    "not-a-lease",
    "0123",
];
/// Lock-delays: short ones that a few steps' clock moves pass, and one over the protocol's
/// minute (refused by the validation).
const LOCK_DELAYS_MS: [u64; 3] = [300, 2_000, 60_001];
/// Max-holds: short ones that a few steps' clock moves reach, the default longest lease TTL
/// (accepted) and one more (refused by the machine), and 0 (refused by the validation).
const MAX_HOLDS_MS: [u64; 5] = [200, 1_500, 3_600_000, 3_600_001, 0];
/// The leader's wall clock at the first entry.
const START_MS: u64 = 1_000_000;
/// `validate::WAIT_MS_MAX`.
const WAIT_MS_MAX: u64 = 86_400_000;
/// `validate::LOCK_DELAY_MS_MAX`.
const LOCK_DELAY_MS_MAX: u64 = 60_000;

/// The main cluster's origin. 47.0 and 8.0 are multiples of 2^-3 degrees, so the origin lies
/// on a cell boundary of the machine's spatial grid at every level: spots south or west of it
/// sit in other cells than spots north and east of it, and a grid that looks at too few cells
/// misses their conflicts.
const BASE: (f64, f64) = (47.0, 8.0);
/// Two spots either side of the antimeridian.
const ANTIMERIDIAN: (f64, f64) = (10.0, 180.0);
/// Two spots either side of the north pole.
const POLE_EAST: (f64, f64) = (90.0, 0.0);
const POLE_WEST: (f64, f64) = (90.0, 180.0);
/// Metres per degree of latitude on the machine's sphere (close enough: conflicts are decided
/// by `areas_conflict` on the resulting coordinates, never by these offsets).
const M_PER_DEG: f64 = 111_195.0;

/// A cylinder placed by metres north and east of an origin.
#[derive(Debug, Clone, Copy)]
struct Spot {
    origin: (f64, f64),
    north_m: f64,
    east_m: f64,
    radius_m: f64,
    alt_min_m: Option<f64>,
    alt_max_m: Option<f64>,
}

impl Spot {
    /// Latitude and longitude of the axis (longitude wrapped into -180..=180).
    fn lat_lon(&self) -> (f64, f64) {
        let (lat, lon) = self.origin;
        let lat = lat + self.north_m / M_PER_DEG;
        let mut lon = lon + self.east_m / (M_PER_DEG * lat.to_radians().cos());
        if lon > 180.0 {
            lon -= 360.0;
        }
        (lat, lon)
    }
}

const fn spot(north_m: f64, east_m: f64, radius_m: f64, band: (Option<f64>, Option<f64>)) -> Spot {
    at(BASE, north_m, east_m, radius_m, band)
}

const fn at(
    origin: (f64, f64),
    north_m: f64,
    east_m: f64,
    radius_m: f64,
    band: (Option<f64>, Option<f64>),
) -> Spot {
    Spot {
        origin,
        north_m,
        east_m,
        radius_m,
        alt_min_m: band.0,
        alt_max_m: band.1,
    }
}

const NO_BAND: (Option<f64>, Option<f64>) = (None, None);

/// Geometry of a reservation, chosen so that some pairs conflict and some do not.
const SPOTS: [Option<Spot>; 16] = [
    // 0: no geometry, conflicts by name only.
    None,
    // 1: a 3 m pad at the origin.
    Some(spot(0.0, 0.0, 3.0, NO_BAND)),
    // 2: 4 m north of 1: conflicts with 1 (4 < 6).
    Some(spot(4.0, 0.0, 3.0, NO_BAND)),
    // 3: 8 m north of 1: conflicts with 2, not with 1.
    Some(spot(8.0, 0.0, 3.0, NO_BAND)),
    // 4: the origin, band 0..10 m.
    Some(spot(0.0, 0.0, 3.0, (Some(0.0), Some(10.0)))),
    // 5: the origin, band 10..20 m: touches 4 at 10 m (closed bands conflict).
    Some(spot(0.0, 0.0, 3.0, (Some(10.0), Some(20.0)))),
    // 6: the origin, band 25..40 m: clear of 4 and 5, conflicts with 1 (no band).
    Some(spot(0.0, 0.0, 3.0, (Some(25.0), Some(40.0)))),
    // 7: a vertical line 2 m west of the origin, in the next grid cell: conflicts with 1, 4,
    // 5, 6, not with 2 (4.5 m away).
    Some(spot(0.0, -2.0, 0.0, NO_BAND)),
    // 8: far away (200 m north).
    Some(spot(200.0, 0.0, 3.0, NO_BAND)),
    // 9: a 120 m cylinder high up (50..150 m): filed at another grid level; conflicts with
    // the unbanded spots 1, 2, 3, 7, 8, 10 and 11 (no upper bound), not with 4, 5, 6.
    Some(spot(100.0, 0.0, 120.0, (Some(50.0), Some(150.0)))),
    // 10: 5.9 m south of the origin, in the next grid cell: just inside the reach of 1, 4,
    // 5 and 6; clear of 2 and 7.
    Some(spot(-5.9, 0.0, 3.0, NO_BAND)),
    // 11: 4 m north, from 15 m up: conflicts with 5 and 2, not with 4.
    Some(spot(4.0, 0.0, 3.0, (Some(15.0), None))),
    // 12, 13: 1.1 m either side of the antimeridian: they conflict (2.2 < 6).
    Some(at(ANTIMERIDIAN, 0.0, -1.1, 3.0, NO_BAND)),
    Some(at(ANTIMERIDIAN, 0.0, 1.1, 3.0, NO_BAND)),
    // 14, 15: 1.1 m from the north pole on opposite meridians: they conflict (2.2 < 6).
    Some(at(POLE_EAST, -1.1, 0.0, 3.0, NO_BAND)),
    Some(at(POLE_WEST, -1.1, 0.0, 3.0, NO_BAND)),
];

/// A resolved time window, `(start_ms, end_ms)`; `None`: all time.
type ModelWindow = Option<(u64, Option<u64>)>;

/// Time windows a reservation asks for, as offsets in ms from the machine's clock when the
/// request is built, rounded down to a whole second so that requests built a few steps apart
/// ask for the same instants (windows that touch exactly): none, live ones, overlapping and
/// touching future ones, and the refused ones (in the past, empty, longer than the default
/// 24 h, beyond the default 7-day horizon; the tight preset's bounds refuse more).
const WINDOWS: [(Option<i64>, Option<i64>); 11] = [
    (None, None),
    // Live now, ends within a few steps.
    (None, Some(600)),
    (Some(0), Some(1_000)),
    // Overlaps the previous one.
    (Some(500), Some(1_500)),
    // Touches [0, 1000) at its end: no conflict with it.
    (Some(1_000), Some(2_000)),
    // A future start without an end.
    (Some(3_000), None),
    // Started in the past, still live.
    (Some(-200), Some(300)),
    // In the past.
    (Some(-500), Some(-1)),
    // Empty: the wire's check.
    (Some(100), Some(100)),
    (None, Some(90_000_000)),
    (Some(700_000_000), Some(700_000_100)),
];

/// Whether two windows share an instant (half-open; `None` is all time): the naive reading.
fn windows_overlap(a: ModelWindow, b: ModelWindow) -> bool {
    match (a, b) {
        (Some((start_a, end_a)), Some((start_b, end_b))) => {
            end_b.is_none_or(|end_b| start_a < end_b) && end_a.is_none_or(|end_a| start_b < end_a)
        }
        _ => true,
    }
}

/// Whether a stored window is what a request with these fields asks for (PROTOCOL.md §8.8: a
/// request that leaves `start_ms` out matches any start).
fn window_asked(window: ModelWindow, start_ms: Option<u64>, end_ms: Option<u64>) -> bool {
    match window {
        None => start_ms.is_none() && end_ms.is_none(),
        Some((start, end)) => end == end_ms && start_ms.is_none_or(|asked| asked == start),
    }
}

/// A reservation's cylinders in their windows: its own, or its route's volumes.
fn model_shapes(
    area: Option<Area>,
    window: ModelWindow,
    volumes: &[Volume],
) -> Vec<(Area, ModelWindow)> {
    if volumes.is_empty() {
        return area.map(|area| (area, window)).into_iter().collect();
    }
    volumes
        .iter()
        .map(|v| (v.area(), Some((v.start_ms, Some(v.end_ms)))))
        .collect()
}

/// An `airspace.query` volume over `spot` (an unbanded side becomes the widest altitude the
/// wire takes, which conflicts alike), from the clock on or at offsets from it.
fn query_volume(
    spot: &Spot,
    now_ms: u64,
    (start, end): (Option<u64>, Option<u64>),
) -> hivekeeper_protocol::QueryVolume {
    let (lat, lon) = spot.lat_lon();
    hivekeeper_protocol::QueryVolume {
        lat,
        lon,
        radius_m: spot.radius_m,
        alt_min_m: spot.alt_min_m.unwrap_or(-1_000.0),
        alt_max_m: spot.alt_max_m.unwrap_or(100_000.0),
        start_ms: start.map(|offset| now_ms + offset),
        end_ms: end.map(|offset| now_ms + offset),
    }
}

/// An `airspace.query` page as `(name, conflicting volume indexes)` rows.
fn query_rows(reply: &Reply) -> Vec<(String, Vec<u32>)> {
    match reply {
        Reply::Conflicts {
            conflicts,
            next_after: None,
        } => conflicts
            .iter()
            .map(|row| (row.name.clone(), row.volume_indexes.clone()))
            .collect(),
        other => panic!("not one whole page of conflicts: {other:?}"),
    }
}

/// When a reservation ends by itself: its window's end, or its route's last volume's end.
fn model_end(window: ModelWindow, volumes: &[Volume]) -> Option<u64> {
    match volumes.iter().map(|v| v.end_ms).max() {
        Some(end_ms) => Some(end_ms),
        None => window.and_then(|(_, end_ms)| end_ms),
    }
}

/// The limits a case starts with or switches to.
fn preset_limits(preset: usize) -> Limits {
    match preset % 3 {
        // The defaults, but for a vacate deadline that a few steps' clock moves reach before
        // the short leases expire (the default 5 s rarely is).
        0 => Limits {
            reservation_vacate_ms: 1_000,
            ..Limits::DEFAULTS
        },
        // Tight bounds, so that every `resource_exhausted` path and the dedup eviction run.
        1 => Limits {
            leases_max: 8,
            resources_max: 7,
            waiters_per_resource_max: 2,
            waypoint_waiters_max: 3,
            dedup_per_agent_max: 4,
            dedup_agents_max: 3,
            leases_per_agent_max: 3,
            waits_per_lease_max: 2,
            holds_per_agent_max: 3,
            reservation_window_ms_max: 1_200,
            reservation_horizon_ms_max: 2_500,
            dedup_idle_ms: 1_500,
            // Deadlines and aging within a few steps' clock moves.
            reservation_vacate_ms: 900,
            reservation_aging_ms: 700,
            ..Limits::DEFAULTS
        },
        // Invalid: refused, nothing changes.
        _ => Limits {
            dedup_per_agent_max: 0,
            ..Limits::DEFAULTS
        },
    }
}

// ------------------------------------------------------------------------------------------
// What proptest generates: steps as data, resolved against the model's state when run.
// ------------------------------------------------------------------------------------------

/// One generated test case.
#[derive(Debug, Clone)]
struct Case {
    /// Index into [`preset_limits`] for `StateMachine::new`.
    limits: usize,
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
struct Step {
    /// How the leader's clock moves before the step.
    clock: Clock,
    /// A new leader (term + 1) stamps this entry and the following ones.
    new_term: bool,
    action: Action,
}

#[derive(Debug, Clone)]
enum Clock {
    Forward(u64),
    /// Long enough to run out any TTL.
    Jump(u64),
    /// A leader whose clock is behind: the machine's clock stands still for this entry, then
    /// moves again with the stamps (`clock.rs`).
    Backward(u64),
}

#[derive(Debug, Clone)]
enum Action {
    /// A fresh request id.
    AgentRequest {
        agent: usize,
        op: OpSpec,
    },
    /// Reuse the id (and agent) of the `back`-th most recent write request, with its op or
    /// another one.
    Retry {
        back: usize,
        same_op: bool,
        op: OpSpec,
    },
    Expire {
        term: TermPick,
        leases: ExpirePick,
    },
    /// Stamp the entry exactly at a live lease's deadline (`early_ms` 0) or 1 ms before it
    /// (`early_ms` 1) and name that lease: it expires at `granted_ms + ttl_ms`, not before.
    ExpireAtDeadline {
        back: usize,
        early_ms: u64,
    },
    /// The leader's wait expiry: ends every wait whose deadline has passed.
    ExpireWaits {
        term: TermPick,
    },
    /// Stamp the entry exactly at a pending wait's deadline (`early_ms` 0) or 1 ms before it
    /// (`early_ms` 1): the wait ends at `queued_ms + wait_ms`, not before.
    ExpireWaitsAtDeadline {
        back: usize,
        early_ms: u64,
    },
    /// The holder of the `back`-th most recent held route amends it to `legs`.
    AmendHeldRoute {
        back: usize,
        legs: Vec<(usize, usize)>,
        priority: u8,
    },
    /// The holder of the `back`-th most recent held route amends it to its own volumes less
    /// the first `drop` (all but the last at most: the legs flown), each kept one narrowed
    /// to half its radius when `narrow` (inside the old one, not identical to it).
    /// With `queue`, `(agent, name)` first reserves waypoint `WAYPOINT_NAMES[name]` on
    /// exactly the route's last live volume (its cylinder and window), waiting: airspace the
    /// trim keeps while another lease may wait for it (an entry of its own, then the trim's).
    TrimHeldRoute {
        back: usize,
        drop: usize,
        narrow: bool,
        queue: Option<(usize, usize)>,
    },
    /// The lease of the `back`-th most recent lock hold releases every lock it holds with
    /// `lock.release_all` (several grants at once, often).
    ReleaseHeldLocks {
        back: usize,
    },
    /// The agent that leads election `ELECTION_NAMES[name]` (if any) proclaims
    /// [`value`]`(value)` with its token, or resigns.
    LeaderActs {
        name: usize,
        resign: bool,
        value: usize,
    },
    /// The leader's reservation expiry: ends every window whose end has passed.
    ExpireReservations {
        term: TermPick,
    },
    /// Stamp the entry exactly at a reservation's window end or vacate deadline (`early_ms` 0)
    /// or 1 ms before it (`early_ms` 1): the window ends at `end_ms`, a preempted reservation
    /// at `vacate_by_ms`, not before.
    ExpireReservationsAtEnd {
        back: usize,
        early_ms: u64,
    },
    /// An operator's `admin.revoke` of the lease of the `back`-th most recent lock holder: a
    /// lease with a lock-delay holds its locks back.
    RevokeLockHolder {
        back: usize,
    },
    /// The leader's hold-time expiry: ends every max-hold and lock-delay that has passed.
    ExpireHoldTimes {
        term: TermPick,
    },
    /// Stamp the entry exactly at a hold's max-hold deadline or a lock-delay's end
    /// (`early_ms` 0) or 1 ms before it (`early_ms` 1): neither ends before its time.
    ExpireHoldTimesAtDeadline {
        back: usize,
        early_ms: u64,
    },
    /// The legacy `CancelWait` of the `back`-th most recent request's wait (or an id never
    /// sent): old logs carry it and must replay the same.
    CancelWait {
        back: usize,
        unknown_id: bool,
    },
    Configure {
        preset: usize,
    },
    /// Replace the machine by `StateMachine::restore(&sm.snapshot())`.
    Restore,
}

#[derive(Debug, Clone)]
enum TermPick {
    Current,
    /// `term - 1 - k`: from a deposed leader, must be ignored.
    Stale(u64),
}

#[derive(Debug, Clone)]
enum ExpirePick {
    /// Every lease ever granted (live or not, due or not).
    EveryKnown,
    /// Leases ever granted, counted from the most recent.
    Some(Vec<usize>),
}

#[derive(Debug, Clone)]
enum OpSpec {
    LeaseGrant {
        ttl_ms: u64,
        lock_delay_ms: u64,
    },
    LeaseRevoke {
        lease: LeasePick,
    },
    /// An operator's `admin.revoke`: any agent's lease, no owner check.
    AdminRevoke {
        lease: LeasePick,
    },
    LockAcquire {
        name: usize,
        lease: LeasePick,
        wait: WaitSpec,
        shared: bool,
        max_hold_ms: Option<u64>,
    },
    LockRelease {
        name: usize,
        lease: LeasePick,
    },
    LockDowngrade {
        name: usize,
        lease: LeasePick,
    },
    /// A multi-lock of `names` (indexes into [`LOCK_NAMES`]; one named twice is refused).
    LockAcquireAll {
        names: Vec<usize>,
        lease: LeasePick,
        wait: WaitSpec,
        shared: bool,
        max_hold_ms: Option<u64>,
    },
    LockReleaseAll {
        names: Vec<usize>,
        lease: LeasePick,
    },
    SemAcquire {
        name: usize,
        limit: usize,
        permits: u32,
        lease: LeasePick,
        wait: WaitSpec,
        max_hold_ms: Option<u64>,
    },
    SemRelease {
        name: usize,
        lease: LeasePick,
    },
    WaypointReserve {
        name: usize,
        spot: usize,
        lease: LeasePick,
        wait: WaitSpec,
        /// Index into [`WINDOWS`].
        window: usize,
        priority: u8,
    },
    WaypointRelease {
        name: usize,
        lease: LeasePick,
    },
    /// A route of `legs` (spot, window) pairs, on a waypoint name.
    RouteReserve {
        name: usize,
        legs: Vec<(usize, usize)>,
        lease: LeasePick,
        wait: WaitSpec,
        priority: u8,
    },
    RouteRelease {
        name: usize,
        lease: LeasePick,
    },
    RouteAmend {
        name: usize,
        legs: Vec<(usize, usize)>,
        lease: LeasePick,
        priority: u8,
    },
    ElectionCampaign {
        name: usize,
        /// Index for [`value`].
        value: usize,
        lease: LeasePick,
        wait: WaitSpec,
    },
    ElectionProclaim {
        name: usize,
        token: TokenPick,
        value: usize,
    },
    ElectionResign {
        name: usize,
        token: TokenPick,
    },
    BarrierEnter {
        name: usize,
        /// Index into [`BARRIER_COUNTS`].
        count: usize,
        lease: LeasePick,
        wait: WaitSpec,
    },
    BarrierLeave {
        name: usize,
        lease: LeasePick,
        wait: WaitSpec,
    },
    /// A request the protocol validation refuses (`bad_request`, not remembered).
    Malformed {
        which: usize,
    },
}

/// The token a proclaim or resign names.
#[derive(Debug, Clone)]
enum TokenPick {
    /// The election's leadership now (one never granted when nobody leads).
    Leading,
    /// The `k`-th most recent earlier leadership of the election: a deposed leader's.
    Stale(usize),
    /// One never granted.
    Never,
}

#[derive(Debug, Clone)]
enum LeasePick {
    /// The agent's `k`-th most recent live lease (or ended one, if none is live).
    Own(usize),
    /// A lease of the agent that holds the named resource (else as `Own`): releases that
    /// succeed, acquires that find their own hold.
    Holding(usize),
    /// The same, spelled in uppercase hex (the same lease).
    OwnUppercase(usize),
    /// One of the agent's ended leases: `lease_not_found`.
    OwnEnded(usize),
    /// Another agent's lease: `forbidden` while it lives.
    Foreign(usize),
    Unknown(usize),
}

#[derive(Debug, Clone, Copy)]
enum WaitSpec {
    Forever,
    Try,
    For(u64),
}

impl WaitSpec {
    fn wait_ms(self) -> Option<u64> {
        match self {
            WaitSpec::Forever => None,
            WaitSpec::Try => Some(0),
            WaitSpec::For(ms) => Some(ms),
        }
    }
}

fn lease_pick() -> BoxedStrategy<LeasePick> {
    prop_oneof![
        75 => (0..3usize).prop_map(LeasePick::Own),
        10 => (0..3usize).prop_map(LeasePick::Holding),
        2 => (0..3usize).prop_map(LeasePick::OwnUppercase),
        4 => (0..3usize).prop_map(LeasePick::OwnEnded),
        6 => (0..6usize).prop_map(LeasePick::Foreign),
        3 => (0..UNKNOWN_LEASES.len()).prop_map(LeasePick::Unknown),
    ]
    .boxed()
}

fn ttl_ms() -> BoxedStrategy<u64> {
    prop_oneof![
        5 => prop::sample::select(&TTLS_MS_LONG[..]),
        2 => prop::sample::select(&TTLS_MS_SHORT[..]),
        1 => prop::sample::select(&TTLS_MS_OUT_OF_RANGE[..]),
    ]
    .boxed()
}

/// A lease's lock-delay: none without hold times (a `Just`, which draws nothing, so the
/// other draws are what they were before hold times existed); with them, mostly none.
fn lock_delay_ms(hold_times: bool) -> BoxedStrategy<u64> {
    if !hold_times {
        return Just(0).boxed();
    }
    prop_oneof![
        3 => Just(0u64),
        6 => prop::sample::select(&LOCK_DELAYS_MS[..2]),
        1 => prop::sample::select(&LOCK_DELAYS_MS[2..]),
    ]
    .boxed()
}

/// An acquire's max-hold: as for [`lock_delay_ms`], none without hold times, mostly none
/// with them.
fn max_hold_ms(hold_times: bool) -> BoxedStrategy<Option<u64>> {
    if !hold_times {
        return Just(None).boxed();
    }
    prop_oneof![
        6 => Just(None),
        3 => prop::sample::select(&MAX_HOLDS_MS[..2]).prop_map(Some),
        1 => prop::sample::select(&MAX_HOLDS_MS[2..]).prop_map(Some),
    ]
    .boxed()
}

/// Releases mostly name a lease that holds the resource.
fn release_lease_pick() -> BoxedStrategy<LeasePick> {
    prop_oneof![
        3 => (0..3usize).prop_map(LeasePick::Holding),
        1 => lease_pick(),
    ]
    .boxed()
}

fn wait_spec() -> BoxedStrategy<WaitSpec> {
    prop_oneof![
        4 => Just(WaitSpec::Forever),
        3 => Just(WaitSpec::Try),
        2 => prop::sample::select(&[100u64, 5_000][..]).prop_map(WaitSpec::For),
    ]
    .boxed()
}

/// Ops that change state (what a retry may carry), with hold times or not ([`case`]).
fn write_op_spec(hold_times: bool) -> BoxedStrategy<OpSpec> {
    prop_oneof![
        24 => (ttl_ms(), lock_delay_ms(hold_times))
            .prop_map(|(ttl_ms, lock_delay_ms)| OpSpec::LeaseGrant { ttl_ms, lock_delay_ms }),
        3 => lease_pick().prop_map(|lease| OpSpec::LeaseRevoke { lease }),
        2 => lease_pick().prop_map(|lease| OpSpec::AdminRevoke { lease }),
        12 => (0..LOCK_NAMES.len(), lease_pick(), wait_spec(), max_hold_ms(hold_times)).prop_map(
            |(name, lease, wait, max_hold_ms)| OpSpec::LockAcquire {
                name,
                lease,
                wait,
                shared: false,
                max_hold_ms
            }
        ),
        6 => (0..LOCK_NAMES.len(), release_lease_pick())
            .prop_map(|(name, lease)| OpSpec::LockRelease { name, lease }),
        12 => (
            (0..SEM_NAMES.len(), 0..SEM_LIMITS.len(), 1..=3u32),
            lease_pick(),
            wait_spec(),
            max_hold_ms(hold_times)
        )
            .prop_map(|((name, limit, permits), lease, wait, max_hold_ms)| {
                OpSpec::SemAcquire {
                    name,
                    limit,
                    permits,
                    lease,
                    wait,
                    max_hold_ms,
                }
            }),
        6 => (0..SEM_NAMES.len(), release_lease_pick())
            .prop_map(|(name, lease)| OpSpec::SemRelease { name, lease }),
        14 => (
            0..WAYPOINT_NAMES.len(),
            0..SPOTS.len(),
            lease_pick(),
            wait_spec(),
            prop_oneof![3 => Just(0usize), 4 => 1..WINDOWS.len()],
            priority_level(),
        )
            .prop_map(|(name, spot, lease, wait, window, priority)| OpSpec::WaypointReserve {
                name,
                spot,
                lease,
                wait,
                window,
                priority,
            }),
        7 => (0..WAYPOINT_NAMES.len(), release_lease_pick())
            .prop_map(|(name, lease)| OpSpec::WaypointRelease { name, lease }),
        10 => (0..WAYPOINT_NAMES.len(), legs(), lease_pick(), wait_spec(), priority_level())
            .prop_map(|(name, legs, lease, wait, priority)| OpSpec::RouteReserve {
                name,
                legs,
                lease,
                wait,
                priority,
            }),
        3 => (0..WAYPOINT_NAMES.len(), release_lease_pick())
            .prop_map(|(name, lease)| OpSpec::RouteRelease { name, lease }),
        3 => (0..WAYPOINT_NAMES.len(), legs(), release_lease_pick(), priority_level()).prop_map(
            |(name, legs, lease, priority)| OpSpec::RouteAmend {
                name,
                legs,
                lease,
                priority
            }
        ),
        5 => (0..ELECTION_NAMES.len(), value_pick(), lease_pick(), wait_spec()).prop_map(
            |(name, value, lease, wait)| OpSpec::ElectionCampaign {
                name,
                value,
                lease,
                wait
            }
        ),
        1 => (0..ELECTION_NAMES.len(), token_pick(), value_pick())
            .prop_map(|(name, token, value)| OpSpec::ElectionProclaim { name, token, value }),
        1 => (0..ELECTION_NAMES.len(), token_pick())
            .prop_map(|(name, token)| OpSpec::ElectionResign { name, token }),
    ]
    .boxed()
}

/// A multi-lock's names: 1 or 2 distinct lock names in any order, or now and then one named
/// twice (`bad_request`).
fn lock_name_set() -> BoxedStrategy<Vec<usize>> {
    prop_oneof![
        12 => prop::sample::subsequence((0..LOCK_NAMES.len()).collect::<Vec<_>>(), 1..=2)
            .prop_shuffle(),
        1 => (0..LOCK_NAMES.len()).prop_map(|name| vec![name, name]),
    ]
    .boxed()
}

/// A value's index for [`value`]: mostly a short one, sometimes one too long.
fn value_pick() -> BoxedStrategy<usize> {
    prop_oneof![20 => 0..VALUES.len(), 1 => Just(VALUES.len())].boxed()
}

fn token_pick() -> BoxedStrategy<TokenPick> {
    prop_oneof![
        3 => Just(TokenPick::Leading),
        3 => (0..3usize).prop_map(TokenPick::Stale),
        1 => Just(TokenPick::Never),
    ]
    .boxed()
}

/// A `barrier.enter`: rounds of 2 and 3 most often (four agents fill them), sometimes of 1
/// (passes at once) or 4 (past the tight preset's bound).
fn barrier_enter_spec() -> BoxedStrategy<OpSpec> {
    let count =
        prop_oneof![1 => Just(0usize), 4 => Just(1usize), 3 => Just(2usize), 1 => Just(3usize)];
    (0..BARRIER_NAMES.len(), count, lease_pick(), wait_spec())
        .prop_map(|(name, count, lease, wait)| OpSpec::BarrierEnter {
            name,
            count,
            lease,
            wait,
        })
        .boxed()
}

/// A `barrier.leave`, mostly by a member, often with a `wait_ms` that runs out.
fn barrier_leave_spec() -> BoxedStrategy<OpSpec> {
    let wait = prop_oneof![
        3 => Just(WaitSpec::Forever),
        2 => Just(WaitSpec::Try),
        3 => prop::sample::select(&[100u64, 5_000][..]).prop_map(WaitSpec::For),
    ];
    (0..BARRIER_NAMES.len(), release_lease_pick(), wait)
        .prop_map(|(name, lease, wait)| OpSpec::BarrierLeave { name, lease, wait })
        .boxed()
}

/// A route's legs: 1 to 4 `(spot, window)` picks (spots with geometry only; a window without
/// an end gets one 1 s after its start, one without a start starts at the clock).
fn legs() -> BoxedStrategy<Vec<(usize, usize)>> {
    prop::collection::vec((1..SPOTS.len(), 0..WINDOWS.len()), 1..=4).boxed()
}

/// A reservation's priority: routine more often than not, so that both preemption and
/// ordinary queueing are common.
fn priority_level() -> BoxedStrategy<u8> {
    prop_oneof![3 => Just(0u8), 2 => 1..=3u8].boxed()
}

fn op_spec(hold_times: bool) -> BoxedStrategy<OpSpec> {
    prop_oneof![
        70 => write_op_spec(hold_times),
        1 => (0..5usize).prop_map(|which| OpSpec::Malformed { which }),
    ]
    .boxed()
}

fn action(hold_times: bool) -> BoxedStrategy<Action> {
    let other = prop_oneof![
        70 => (0..AGENTS.len(), op_spec(hold_times))
            .prop_map(|(agent, op)| Action::AgentRequest { agent, op }),
        8 => (0..6usize, any::<bool>(), write_op_spec(hold_times))
            .prop_map(|(back, same_op, op)| Action::Retry { back, same_op, op }),
        7 => (
            prop_oneof![5 => Just(TermPick::Current), 1 => (0..2u64).prop_map(TermPick::Stale)],
            prop_oneof![
                1 => Just(ExpirePick::EveryKnown),
                2 => prop::collection::vec(0..6usize, 0..3).prop_map(ExpirePick::Some),
            ],
        )
            .prop_map(|(term, leases)| Action::Expire { term, leases }),
        3 => (0..4usize, 0..=1u64)
            .prop_map(|(back, early_ms)| Action::ExpireAtDeadline { back, early_ms }),
        3 => (0..6usize, prop::bool::weighted(0.1))
            .prop_map(|(back, unknown_id)| Action::CancelWait { back, unknown_id }),
        3 => prop_oneof![5 => Just(TermPick::Current), 1 => (0..2u64).prop_map(TermPick::Stale)]
            .prop_map(|term| Action::ExpireWaits { term }),
        3 => (0..4usize, 0..=1u64)
            .prop_map(|(back, early_ms)| Action::ExpireWaitsAtDeadline { back, early_ms }),
        3 => prop_oneof![5 => Just(TermPick::Current), 1 => (0..2u64).prop_map(TermPick::Stale)]
            .prop_map(|term| Action::ExpireReservations { term }),
        4 => (
            0..4usize,
            0..4usize,
            any::<bool>(),
            (prop::bool::weighted(0.7), 0..AGENTS.len(), 0..WAYPOINT_NAMES.len())
                .prop_map(|(queue, agent, name)| queue.then_some((agent, name)))
        )
            .prop_map(|(back, drop, narrow, queue)| Action::TrimHeldRoute {
                back,
                drop,
                narrow,
                queue
            }),
        8 => (0..4usize, legs(), priority_level())
            .prop_map(|(back, legs, priority)| Action::AmendHeldRoute { back, legs, priority }),
        6 => (0..4usize, 0..=1u64)
            .prop_map(|(back, early_ms)| Action::ExpireReservationsAtEnd { back, early_ms }),
        3 => (0..ELECTION_NAMES.len(), prop::bool::weighted(0.4), value_pick())
            .prop_map(|(name, resign, value)| Action::LeaderActs { name, resign, value }),
        3 => Just(Action::Restore),
        1 => (0..3usize).prop_map(|preset| Action::Configure { preset }),
    ]
    .boxed();
    if !hold_times {
        return other;
    }
    // The weights above sum to 122: the hold-time expiries come about as often as the
    // reservations' expiries.
    with_hold_time_actions(other, [122, 2, 6, 3])
}

/// `other` and the hold-time actions, weighted `[other, ExpireHoldTimes (current or stale
/// term), ExpireHoldTimesAtDeadline, RevokeLockHolder]`.
fn with_hold_time_actions(
    other: BoxedStrategy<Action>,
    weights: [u32; 4],
) -> BoxedStrategy<Action> {
    let [other_weight, expire, at_deadline, revoke] = weights;
    prop_oneof![
        other_weight => other,
        expire => prop_oneof![5 => Just(TermPick::Current), 1 => (0..2u64).prop_map(TermPick::Stale)]
            .prop_map(|term| Action::ExpireHoldTimes { term }),
        at_deadline => (0..4usize, 0..=1u64)
            .prop_map(|(back, early_ms)| Action::ExpireHoldTimesAtDeadline { back, early_ms }),
        revoke => (0..3usize).prop_map(|back| Action::RevokeLockHolder { back }),
    ]
    .boxed()
}

fn clock() -> BoxedStrategy<Clock> {
    prop_oneof![
        40 => (0..=400u64).prop_map(Clock::Forward),
        1 => (1_000..=4_000_000u64).prop_map(Clock::Jump),
        3 => (1..=3_000u64).prop_map(Clock::Backward),
    ]
    .boxed()
}

fn step(hold_times: bool) -> BoxedStrategy<Step> {
    (clock(), prop::bool::weighted(0.04), action(hold_times))
        .prop_map(|(clock, new_term, action)| Step {
            clock,
            new_term,
            action,
        })
        .boxed()
}

/// A lease grant at the start of a case, so that agents have leases from the first steps.
fn opening_grant(hold_times: bool) -> BoxedStrategy<Step> {
    (0..AGENTS.len(), ttl_ms(), lock_delay_ms(hold_times))
        .prop_map(|(agent, ttl_ms, lock_delay_ms)| Step {
            clock: Clock::Forward(0),
            new_term: false,
            action: Action::AgentRequest {
                agent,
                op: OpSpec::LeaseGrant {
                    ttl_ms,
                    lock_delay_ms,
                },
            },
        })
        .boxed()
}

/// A case. With `hold_times` its leases may have lock-delays, its acquires max-holds, and
/// its log hold-time expiries; without, it draws exactly what it drew before hold times
/// existed (the hold-time draws are `Just`s, which take nothing from the random source), so
/// the coverage of every other path stays where it was ([`generator_reaches_every_path`]).
fn case(hold_times: bool) -> impl Strategy<Value = Case> {
    (
        0..2usize,
        prop::collection::vec(opening_grant(hold_times), 0..=6),
        prop::collection::vec(step(hold_times), 1..=120),
    )
        .prop_map(|(limits, opening, steps)| Case {
            limits,
            steps: opening.into_iter().chain(steps).collect(),
        })
}

/// The actions of a case about barriers: members entering and leaving, with leases granted
/// and ending, waits expiring, retries and restores between, and a few locks and semaphores
/// (the bounds and the lease ends they share), so that rounds fill, pass, lose members in
/// both phases and end together. [`case`] draws no barrier op, so its cases, and the paths
/// they reach, are what they were before barriers.
fn barrier_action() -> BoxedStrategy<Action> {
    let current =
        || prop_oneof![5 => Just(TermPick::Current), 1 => (0..2u64).prop_map(TermPick::Stale)];
    let op = prop_oneof![
        16 => barrier_enter_spec(),
        12 => barrier_leave_spec(),
        5 => ttl_ms().prop_map(|ttl_ms| OpSpec::LeaseGrant {
            ttl_ms,
            lock_delay_ms: 0
        }),
        2 => lease_pick().prop_map(|lease| OpSpec::LeaseRevoke { lease }),
        1 => lease_pick().prop_map(|lease| OpSpec::AdminRevoke { lease }),
        1 => (0..LOCK_NAMES.len(), lease_pick(), wait_spec())
            .prop_map(|(name, lease, wait)| OpSpec::LockAcquire {
                name,
                lease,
                wait,
                shared: false,
                max_hold_ms: None
            }),
        1 => (0..SEM_NAMES.len(), 0..SEM_LIMITS.len(), lease_pick(), wait_spec()).prop_map(
            |(name, limit, lease, wait)| OpSpec::SemAcquire {
                name,
                limit,
                permits: 1,
                lease,
                wait,
                max_hold_ms: None,
            }
        ),
    ];
    prop_oneof![
        60 => (0..AGENTS.len(), op).prop_map(|(agent, op)| Action::AgentRequest { agent, op }),
        6 => (0..6usize, any::<bool>(), barrier_leave_spec())
            .prop_map(|(back, same_op, op)| Action::Retry { back, same_op, op }),
        6 => (
            current(),
            prop::collection::vec(0..6usize, 0..3).prop_map(ExpirePick::Some),
        )
            .prop_map(|(term, leases)| Action::Expire { term, leases }),
        6 => current().prop_map(|term| Action::ExpireWaits { term }),
        3 => (0..4usize, 0..=1u64)
            .prop_map(|(back, early_ms)| Action::ExpireWaitsAtDeadline { back, early_ms }),
        2 => Just(Action::Restore),
    ]
    .boxed()
}

/// An op of a case about read-write locks and multi-locks: shared and exclusive acquires,
/// downgrades, multi-locks (now and then naming a lock twice) and their releases, with leases
/// granted and ending between; with `hold_times`, leases with lock-delays and acquires with
/// max-holds, as in [`write_op_spec`].
fn lock_op_spec(hold_times: bool) -> BoxedStrategy<OpSpec> {
    prop_oneof![
        14 => (
            (0..LOCK_NAMES.len(), lease_pick(), wait_spec()),
            any::<bool>(),
            max_hold_ms(hold_times)
        )
            .prop_map(|((name, lease, wait), shared, max_hold_ms)| {
                OpSpec::LockAcquire {
                    name,
                    lease,
                    wait,
                    shared,
                    max_hold_ms,
                }
            }),
        6 => (0..LOCK_NAMES.len(), release_lease_pick())
            .prop_map(|(name, lease)| OpSpec::LockRelease { name, lease }),
        3 => (0..LOCK_NAMES.len(), release_lease_pick())
            .prop_map(|(name, lease)| OpSpec::LockDowngrade { name, lease }),
        8 => (
            (lock_name_set(), lease_pick(), wait_spec()),
            any::<bool>(),
            max_hold_ms(hold_times)
        )
            .prop_map(|((names, lease, wait), shared, max_hold_ms)| {
                OpSpec::LockAcquireAll {
                    names,
                    lease,
                    wait,
                    shared,
                    max_hold_ms,
                }
            }),
        3 => (lock_name_set(), release_lease_pick())
            .prop_map(|(names, lease)| OpSpec::LockReleaseAll { names, lease }),
        5 => (ttl_ms(), lock_delay_ms(hold_times))
            .prop_map(|(ttl_ms, lock_delay_ms)| OpSpec::LeaseGrant { ttl_ms, lock_delay_ms }),
        2 => lease_pick().prop_map(|lease| OpSpec::LeaseRevoke { lease }),
        1 => lease_pick().prop_map(|lease| OpSpec::AdminRevoke { lease }),
    ]
    .boxed()
}

/// The actions of a case about read-write locks and multi-locks ([`lock_op_spec`]), with
/// retries, expiries, releases of everything a lease holds and restores between; with
/// `hold_times`, hold-time expiries and operators' revokes of lock holders too, as in
/// [`action`]. [`case`] draws no shared or multi-lock op, so its cases, and the paths they
/// reach, are what they were before them; and without hold times this draws what it drew
/// before they were joined to modes and multi-locks.
fn lock_action(hold_times: bool) -> BoxedStrategy<Action> {
    let current =
        || prop_oneof![5 => Just(TermPick::Current), 1 => (0..2u64).prop_map(TermPick::Stale)];
    let other = prop_oneof![
        60 => (0..AGENTS.len(), lock_op_spec(hold_times))
            .prop_map(|(agent, op)| Action::AgentRequest { agent, op }),
        6 => (0..6usize, any::<bool>(), lock_op_spec(hold_times))
            .prop_map(|(back, same_op, op)| Action::Retry { back, same_op, op }),
        6 => (
            current(),
            prop::collection::vec(0..6usize, 0..3).prop_map(ExpirePick::Some),
        )
            .prop_map(|(term, leases)| Action::Expire { term, leases }),
        6 => current().prop_map(|term| Action::ExpireWaits { term }),
        3 => (0..4usize, 0..=1u64)
            .prop_map(|(back, early_ms)| Action::ExpireWaitsAtDeadline { back, early_ms }),
        4 => (0..4usize).prop_map(|back| Action::ReleaseHeldLocks { back }),
        2 => (0..6usize, prop::bool::weighted(0.1))
            .prop_map(|(back, unknown_id)| Action::CancelWait { back, unknown_id }),
        2 => Just(Action::Restore),
        1 => (0..3usize).prop_map(|preset| Action::Configure { preset }),
    ]
    .boxed();
    if !hold_times {
        return other;
    }
    // The weights above sum to 90.
    with_hold_time_actions(other, [90, 3, 6, 4])
}

/// A case about read-write locks and multi-locks ([`lock_action`]), with hold times or not.
fn lock_case(hold_times: bool) -> impl Strategy<Value = Case> {
    side_case(lock_action(hold_times), hold_times)
}

/// A case of a generator beside [`case`]: 2 to 6 opening lease grants (with lock-delays or
/// not, as `hold_times` says), then 1 to 80 steps of `action`.
fn side_case(action: BoxedStrategy<Action>, hold_times: bool) -> impl Strategy<Value = Case> {
    let step =
        (clock(), prop::bool::weighted(0.04), action).prop_map(|(clock, new_term, action)| Step {
            clock,
            new_term,
            action,
        });
    (
        0..2usize,
        prop::collection::vec(opening_grant(hold_times), 2..=6),
        prop::collection::vec(step, 1..=80),
    )
        .prop_map(|(limits, opening, steps)| Case {
            limits,
            steps: opening.into_iter().chain(steps).collect(),
        })
}

fn barrier_case() -> impl Strategy<Value = Case> {
    side_case(barrier_action(), false)
}

// ------------------------------------------------------------------------------------------
// The reference model.
// ------------------------------------------------------------------------------------------

/// A reply with the human text left out (refusals are compared by code; the exact text of a
/// replayed reply is checked separately against the first reply).
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Lease {
        lease: u64,
        ttl_ms: u64,
    },
    Ttl {
        ttl_ms: u64,
    },
    Granted {
        token: u64,
    },
    Done,
    Queued,
    Fence {
        current: u64,
        valid: bool,
    },
    Inspect {
        limit: Option<u32>,
        holders: Vec<HolderInfo>,
        waiters: Vec<WaiterInfo>,
        /// Barriers: the filling round's count and how many members leave.
        count: Option<u32>,
        leaving: Option<u32>,
    },
    Passed {
        generation: u64,
    },
    Expired {
        leases: Vec<u64>,
    },
    Cancelled {
        cancelled: bool,
    },
    WaitsExpired {
        count: u64,
    },
    ReservationsEnded {
        count: u64,
    },
    HoldTimesEnded {
        max_holds: u64,
        lock_delays: u64,
    },
    /// `election.proclaim`'s answer: the revision of its put.
    Proclaimed {
        revision: u64,
    },
    Leader(Option<LeaderInfo>),
    Refused {
        code: ErrorCode,
    },
}

fn refused(code: ErrorCode) -> Outcome {
    Outcome::Refused { code }
}

fn outcome_of(reply: &Reply) -> Outcome {
    match reply {
        Reply::Lease { lease, ttl_ms } => Outcome::Lease {
            lease: lease.0,
            ttl_ms: *ttl_ms,
        },
        Reply::Ttl { ttl_ms } => Outcome::Ttl { ttl_ms: *ttl_ms },
        Reply::Granted { token } => Outcome::Granted { token: *token },
        Reply::Done => Outcome::Done,
        Reply::Queued => Outcome::Queued,
        Reply::Fence { current, valid } => Outcome::Fence {
            current: *current,
            valid: *valid,
        },
        Reply::Inspect {
            limit,
            holders,
            waiters,
            count,
            leaving,
        } => Outcome::Inspect {
            limit: *limit,
            holders: holders.clone(),
            waiters: waiters.clone(),
            count: *count,
            leaving: *leaving,
        },
        Reply::BarrierPassed { generation } => Outcome::Passed {
            generation: *generation,
        },
        Reply::Expired { leases } => Outcome::Expired {
            leases: leases.iter().map(|lease| lease.0).collect(),
        },
        Reply::WaitsExpired { count } => Outcome::WaitsExpired { count: *count },
        Reply::ReservationsEnded { count } => Outcome::ReservationsEnded { count: *count },
        Reply::HoldTimesEnded {
            max_holds,
            lock_delays,
        } => Outcome::HoldTimesEnded {
            max_holds: *max_holds,
            lock_delays: *lock_delays,
        },
        Reply::Cancelled { cancelled } => Outcome::Cancelled {
            cancelled: *cancelled,
        },
        Reply::Refused { code, .. } => refused(*code),
        // The admin reads are the node's; the model never sends them.
        Reply::Leases { .. }
        | Reply::Resources { .. }
        | Reply::Conflicts { .. }
        | Reply::Accounts { .. } => {
            panic!("an admin read in the model: {reply:?}")
        }
        // Accounts are covered by `account_test.rs`; the model sends no account ops.
        Reply::Account { .. } => panic!("an account op in the model: {reply:?}"),
        // A proclaim answers as a put does.
        Reply::KvPut(KvPutDone {
            revision,
            prev_kv: None,
        }) => Outcome::Proclaimed {
            revision: *revision,
        },
        Reply::Leader { leader } => Outcome::Leader(leader.clone()),
        // Keys have their own model (`kv/model_test.rs`); this one sends no kv ops.
        Reply::KvPut(_) | Reply::KvPage(_) | Reply::KvDeleted(_) | Reply::KvTxn(_) => {
            panic!("a kv op in the model: {reply:?}")
        }
    }
}

/// A preempted reservation, as `Event::Preempted` tells it: name, holder, token,
/// `vacate_by_ms`, the preemptor's priority and whether it is a route.
type Preempted = (String, String, u64, u64, u8, bool);

/// Whether route volume `inner` lies inside `outer`, naively: its window within the other's,
/// its altitude band within the other's, and its whole disc within the other's (the same
/// disc, or the axes' distance plus its radius, plus 1 mm, at most the other's radius).
fn volume_inside(inner: &Volume, outer: &Volume) -> bool {
    let window = outer.start_ms <= inner.start_ms && inner.end_ms <= outer.end_ms;
    let band = outer.alt_min_m <= inner.alt_min_m && inner.alt_max_m <= outer.alt_max_m;
    let same_disc =
        (inner.lat, inner.lon, inner.radius_m) == (outer.lat, outer.lon, outer.radius_m);
    let disc = same_disc
        || distance_m(inner.lat, inner.lon, outer.lat, outer.lon) + inner.radius_m + 0.001
            <= outer.radius_m;
    window && band && disc
}

/// A dropped vacate deadline, as `Event::PreemptionWithdrawn` tells it: name, holder, token
/// and whether it is a route.
type Withdrawn = (String, String, u64, bool);

fn withdrawn_of(events: &[Event]) -> Vec<Withdrawn> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::PreemptionWithdrawn {
                key,
                agent,
                token,
                route,
                ..
            } => Some((key.name.to_string(), agent.to_string(), *token, *route)),
            _ => None,
        })
        .collect()
}

fn preempted_of(events: &[Event]) -> Vec<Preempted> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Preempted {
                key,
                agent,
                token,
                vacate_by_ms,
                priority,
                route,
                ..
            } => Some((
                key.name.to_string(),
                agent.to_string(),
                *token,
                *vacate_by_ms,
                priority.level(),
                *route,
            )),
            _ => None,
        })
        .collect()
}

fn priority(level: u8) -> Priority {
    Priority::new(level).expect("the model's priorities are 0 to 3")
}

/// A deferred answer, as `Event::Respond` carries it.
#[derive(Debug, Clone, PartialEq)]
struct Respond {
    agent: String,
    request_id: String,
    outcome: Outcome,
}

fn responds_of(events: &[Event]) -> Vec<Respond> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Respond {
                agent,
                request_id,
                reply,
                ..
            } => Some(Respond {
                agent: agent.to_string(),
                request_id: request_id.clone(),
                outcome: outcome_of(reply),
            }),
            _ => None,
        })
        .collect()
}

#[derive(Debug, Clone)]
struct ModelLease {
    id: u64,
    agent: String,
    ttl_ms: u64,
    granted_ms: u64,
    /// How long its locks are held back when it expires or an operator ends it.
    lock_delay_ms: u64,
}

/// A grant still held: a lock, a semaphore's permits, a waypoint reservation, or a member of a
/// barrier's passed round (its token the round's generation).
#[derive(Debug, Clone)]
struct ModelHold {
    kind: ResourceKind,
    name: String,
    lease: u64,
    agent: String,
    token: u64,
    permits: u32,
    since_ms: u64,
    /// Semaphores: the capacity the semaphore had when this was granted.
    sem_limit: u32,
    area: Option<Area>,
    window: ModelWindow,
    /// A route's volumes (then `area` and `window` are `None`).
    volumes: Vec<Volume>,
    /// A reservation's priority, 0 to 3.
    priority: u8,
    /// When a preempted reservation is ended unless released.
    vacate_by_ms: Option<u64>,
    /// A lock hold's mode (exclusive for every other kind).
    mode: LockMode,
    /// Locks and semaphores: when its `max_hold_ms` ends it (grant time + `max_hold_ms`).
    max_hold_until_ms: Option<u64>,
    /// An election leader's value (empty for every other kind).
    value: String,
}

/// An election's `$election/{name}` key, naively: there while the election has a leader.
#[derive(Debug, Clone)]
struct ModelMirror {
    name: String,
    value: String,
    create_revision: u64,
    mod_revision: u64,
    version: u64,
}

/// A queued request. The model keeps every waiter of every kind in one `Vec`, in arrival
/// order, so a resource's queue is the waiters with its kind and name, in `Vec` order. A
/// barrier's waiters are its filling round's arrivals (`sem_limit`: the round's count) and its
/// members' leaves (their lease is a member's).
#[derive(Debug, Clone)]
struct ModelWaiter {
    kind: ResourceKind,
    name: String,
    lease: u64,
    agent: String,
    request_id: String,
    permits: u32,
    since_ms: u64,
    seq: u64,
    /// `since_ms + wait_ms` when the request had a `wait_ms`.
    deadline_ms: Option<u64>,
    sem_limit: u32,
    area: Option<Area>,
    window: ModelWindow,
    /// A route's volumes.
    volumes: Vec<Volume>,
    /// A reservation's priority, 0 to 3.
    priority: u8,
    /// Its priority times `reservation_aging_ms` when it was queued.
    head_start_ms: u64,
    /// A lock request's mode (exclusive for every other kind).
    mode: LockMode,
    /// A lock request's locks, in name order (`name` is the first); it waits in each one's
    /// queue. Empty for every other kind.
    lock_names: Vec<String>,
    /// Locks and semaphores: the request's `max_hold_ms`, for its hold once granted.
    max_hold_ms: Option<u64>,
    /// An election candidate's value (empty for every other kind).
    value: String,
}

impl ModelWaiter {
    /// The queue order of waypoint waiters: `since_ms − head_start_ms`, then arrival.
    fn place(&self) -> (i128, u64) {
        (self.since_ms as i128 - self.head_start_ms as i128, self.seq)
    }
}

/// One agent's remembered final replies, oldest first.
#[derive(Debug, Clone)]
struct Memory {
    agent: String,
    touched_index: u64,
    outcomes: Vec<(String, Outcome)>,
}

/// What the model says one entry does.
#[derive(Debug)]
struct ModelStep {
    outcome: Outcome,
    responds: Vec<Respond>,
    /// Leases ended by the entry, in order: `(agent, lease, reason)`.
    ended: Vec<(String, u64, LeaseEnd)>,
    /// Reservations preempted by the entry, in name order.
    preempted: Vec<Preempted>,
    /// Vacate deadlines the entry dropped (their preemptors went), in deadline order.
    withdrawn: Vec<Withdrawn>,
    /// Whether a preemption went through a waiter ahead (priority inheritance).
    inherited: bool,
    /// Whether a route amend was granted keeping a volume another lease's waiter waits for.
    kept_before_waiter: bool,
    /// The reply came from the memory of an earlier request with the same id.
    replayed: bool,
    /// The reply was remembered for retries.
    remembered: bool,
    /// Agents the entry's sweep of idle agents forgot (`dedup_idle_ms`).
    forgot_idle: usize,
    /// What the entry did to barriers, for the coverage tally.
    barrier_notes: Vec<&'static str>,
}

/// The naive reference: everything in flat `Vec`s, found by linear scans.
#[derive(Debug, Clone)]
struct Model {
    limits: Limits,
    index: u64,
    term_max: u64,
    now_ms: u64,
    /// The previous entry's stamp: the next entry's step is measured from it.
    stamp_last_ms: u64,
    token_last: u64,
    leases: Vec<ModelLease>,
    /// Every lease ever granted, `(id, agent)`, in grant order (for generating requests).
    leases_ever: Vec<(u64, String)>,
    holds: Vec<ModelHold>,
    waiters: Vec<ModelWaiter>,
    /// Locks held back by a lock-delay, `(name, until_ms)`: granted to nobody until then.
    lock_delays: Vec<(String, u64)>,
    /// The `$election/` keys, one per election with a leader.
    mirrors: Vec<ModelMirror>,
    memories: Vec<Memory>,
    /// The entry of the last sweep of idle agents' memories (0 before the first).
    swept_index: u64,
    /// The retry memory's idle clock: the machine clock's steps, each at most
    /// `IDLE_CLOCK_STEP_MS_MAX`.
    idle_clock_ms: u64,
    /// Every grant ever made, `(kind, name, token)`, for stale `fence.check`s.
    tokens_granted: Vec<(ResourceKind, String, u64)>,
    /// The current entry's deferred answers.
    responds: Vec<Respond>,
    /// The current entry's ended leases.
    ended: Vec<(String, u64, LeaseEnd)>,
    /// The current entry's preempted reservations.
    preempted: Vec<Preempted>,
    /// The current entry's dropped deadlines.
    withdrawn: Vec<Withdrawn>,
    /// Whether the current entry preempted through a waiter ahead.
    inherited: bool,
    /// Whether the current entry's amend kept a volume a waiter waits for.
    kept_before_waiter: bool,
    replayed: bool,
    remembered: bool,
    /// What the current entry did to barriers, for the coverage tally.
    barrier_notes: Vec<&'static str>,
}

impl Model {
    fn new(limits: Limits) -> Self {
        Model {
            limits,
            index: 0,
            term_max: 0,
            now_ms: 0,
            stamp_last_ms: 0,
            token_last: 0,
            leases: Vec::new(),
            leases_ever: Vec::new(),
            holds: Vec::new(),
            waiters: Vec::new(),
            lock_delays: Vec::new(),
            mirrors: Vec::new(),
            memories: Vec::new(),
            swept_index: 0,
            idle_clock_ms: 0,
            tokens_granted: Vec::new(),
            responds: Vec::new(),
            ended: Vec::new(),
            preempted: Vec::new(),
            withdrawn: Vec::new(),
            inherited: false,
            kept_before_waiter: false,
            replayed: false,
            remembered: false,
            barrier_notes: Vec::new(),
        }
    }

    /// The clock an entry stamped `stamp_ms` gets: the first entry's stamp, then the clock
    /// plus the stamp's advance over the previous stamp, between 0 and `lease_ttl_ms_max`.
    fn clock_at(&self, stamp_ms: u64) -> u64 {
        if self.index == 0 {
            return stamp_ms;
        }
        let step_ms = stamp_ms.saturating_sub(self.stamp_last_ms);
        self.now_ms + step_ms.min(self.limits.lease_ttl_ms_max)
    }

    fn apply(&mut self, meta: LogMeta, command: &Command) -> ModelStep {
        let clock_before_ms = (self.index != 0).then_some(self.now_ms);
        self.now_ms = self.clock_at(meta.now_ms);
        self.stamp_last_ms = meta.now_ms;
        self.index = meta.index;
        self.term_max = self.term_max.max(meta.term);
        self.responds.clear();
        self.ended.clear();
        self.preempted.clear();
        self.replayed = false;
        self.remembered = false;
        let outcome = match command {
            Command::Request { agent, request } => self.request(agent, request),
            Command::ExpireLeases { term, leases } => {
                if *term < self.term_max {
                    Outcome::Expired { leases: Vec::new() }
                } else {
                    self.expire(leases)
                }
            }
            Command::CancelWait { agent, request_id } => self.cancel_wait(agent, request_id),
            Command::ExpireWaits { term } => {
                if *term < self.term_max {
                    Outcome::WaitsExpired { count: 0 }
                } else {
                    self.expire_waits()
                }
            }
            Command::ExpireReservations { term } => {
                if *term < self.term_max {
                    Outcome::ReservationsEnded { count: 0 }
                } else {
                    self.expire_reservations()
                }
            }
            Command::ExpireHoldTimes { term } => {
                if *term < self.term_max {
                    Outcome::HoldTimesEnded {
                        max_holds: 0,
                        lock_delays: 0,
                    }
                } else {
                    self.expire_hold_times()
                }
            }
            Command::Configure { limits, .. } => {
                if limits_are_valid(limits) {
                    self.limits = limits.clone();
                    Outcome::Done
                } else {
                    refused(ErrorCode::BadRequest)
                }
            }
            // The cluster version gates ops before the log; nothing the model follows moves.
            Command::RaiseClusterVersion { .. } => Outcome::Done,
        };
        self.preempt();
        let forgot_idle = self.forget_idle_agents(clock_before_ms);
        self.forget_old_outcomes();
        ModelStep {
            outcome,
            responds: std::mem::take(&mut self.responds),
            ended: std::mem::take(&mut self.ended),
            preempted: std::mem::take(&mut self.preempted),
            withdrawn: std::mem::take(&mut self.withdrawn),
            inherited: std::mem::take(&mut self.inherited),
            kept_before_waiter: std::mem::take(&mut self.kept_before_waiter),
            replayed: self.replayed,
            remembered: self.remembered,
            forgot_idle,
            barrier_notes: std::mem::take(&mut self.barrier_notes),
        }
    }

    fn request(&mut self, agent: &str, request: &AgentRequest) -> Outcome {
        if !op_is_valid(&request.op) {
            return refused(ErrorCode::BadRequest);
        }
        let id = request.id.as_str();
        if self
            .waiters
            .iter()
            .any(|w| w.agent == agent && w.request_id == id)
        {
            self.replayed = true;
            return Outcome::Queued;
        }
        if let Some(outcome) = self.remembered_outcome(agent, id) {
            self.replayed = true;
            return outcome;
        }
        let too_long = request.op.max_hold_ms();
        let outcome = match &request.op {
            _ if too_long.is_some_and(|ms| ms > self.limits.lease_ttl_ms_max) => {
                refused(ErrorCode::BadRequest)
            }
            // Accounts are covered by `account_test.rs`; the model sends no account ops.
            op @ (Op::AdminAgentAdd { .. }
            | Op::AdminAgentRotate { .. }
            | Op::AdminAgentRemove { .. }) => panic!("an account op in the model: {op:?}"),
            Op::LeaseGrant {
                ttl_ms,
                lock_delay_ms,
            } => self.lease_grant(agent, *ttl_ms, *lock_delay_ms),
            Op::LeaseRevoke { lease } => self.lease_revoke(agent, lease),
            Op::AdminRevoke { lease } => self.admin_revoke(lease),
            Op::LockAcquire {
                name,
                lease,
                wait_ms,
                max_hold_ms,
                mode,
            } => self.lock_acquire(
                agent,
                id,
                std::slice::from_ref(name),
                lease,
                (*wait_ms, *max_hold_ms, *mode),
            ),
            Op::LockRelease { name, lease } => self.release(ResourceKind::Lock, agent, name, lease),
            Op::LockDowngrade { name, lease } => self.lock_downgrade(agent, name, lease),
            Op::LockAcquireAll {
                names,
                lease,
                wait_ms,
                max_hold_ms,
                mode,
            } => self.lock_acquire(agent, id, names, lease, (*wait_ms, *max_hold_ms, *mode)),
            Op::LockReleaseAll { names, lease } => self.lock_release_all(agent, names, lease),
            Op::SemAcquire {
                name,
                limit,
                lease,
                permits,
                wait_ms,
                max_hold_ms,
            } => {
                let times = (*wait_ms, *max_hold_ms);
                self.sem_acquire(agent, id, name, *limit, lease, *permits, times)
            }
            Op::SemRelease { name, lease } => self.release(ResourceKind::Sem, agent, name, lease),
            Op::WaypointReserve {
                name,
                lease,
                lat,
                lon,
                alt_min_m,
                alt_max_m,
                radius_m,
                wait_ms,
                start_ms,
                end_ms,
                priority,
            } => {
                let area = match (lat, lon) {
                    (Some(lat), Some(lon)) => Some(Area {
                        lat: *lat,
                        lon: *lon,
                        radius_m: radius_m.unwrap_or(0.0),
                        alt_min_m: *alt_min_m,
                        alt_max_m: *alt_max_m,
                    }),
                    _ => None,
                };
                let asked = (*start_ms, *end_ms);
                let ask = (area, asked, Vec::new(), priority.level());
                self.waypoint_reserve(agent, id, name, lease, ask, *wait_ms)
            }
            Op::RouteReserve {
                name,
                lease,
                volumes,
                wait_ms,
                priority,
            } => self.route_reserve(
                agent,
                id,
                name,
                lease,
                (volumes, priority.level()),
                *wait_ms,
            ),
            Op::RouteRelease { name, lease } => {
                self.release(ResourceKind::Waypoint, agent, name, lease)
            }
            Op::RouteAmend {
                name,
                lease,
                volumes,
                priority,
            } => self.route_amend(agent, name, lease, volumes, priority.level()),
            Op::WaypointRelease { name, lease } => {
                self.release(ResourceKind::Waypoint, agent, name, lease)
            }
            Op::ElectionCampaign {
                name,
                lease,
                value,
                wait_ms,
            } => self.campaign(agent, id, name, lease, value, *wait_ms),
            Op::ElectionProclaim { name, token, value } => {
                self.proclaim(agent, name, *token, value)
            }
            Op::ElectionResign { name, token } => self.resign(agent, name, *token),
            Op::BarrierEnter {
                name,
                count,
                lease,
                wait_ms,
            } => self.barrier_enter(agent, id, name, *count, lease, *wait_ms),
            Op::BarrierLeave {
                name,
                lease,
                wait_ms,
            } => self.barrier_leave(agent, id, name, lease, *wait_ms),
            op => panic!("the model logs writes only: {op:?}"),
        };
        if outcome != Outcome::Queued {
            self.remember(agent, id, outcome.clone());
            self.remembered = true;
        }
        outcome
    }

    // --- leases -------------------------------------------------------------------------

    /// The lease named on the wire, if it lives and belongs to `agent`.
    fn live_lease(&self, agent: &str, text: &str) -> Result<u64, Outcome> {
        let Some(id) = parse_lease(text) else {
            return Err(refused(ErrorCode::LeaseNotFound));
        };
        match self.leases.iter().find(|lease| lease.id == id) {
            None => Err(refused(ErrorCode::LeaseNotFound)),
            Some(lease) if lease.agent != agent => Err(refused(ErrorCode::Forbidden)),
            Some(_) => Ok(id),
        }
    }

    fn keepalive(&self, agent: &str, text: &str) -> Outcome {
        match self.live_lease(agent, text) {
            Ok(id) => Outcome::Ttl {
                ttl_ms: self.lease(id).ttl_ms,
            },
            Err(refusal) => refusal,
        }
    }

    fn lease(&self, id: u64) -> &ModelLease {
        self.leases
            .iter()
            .find(|lease| lease.id == id)
            .expect("the model only looks up live leases")
    }

    fn lease_grant(&mut self, agent: &str, ttl_ms: u64, lock_delay_ms: u64) -> Outcome {
        if ttl_ms < self.limits.lease_ttl_ms_min || ttl_ms > self.limits.lease_ttl_ms_max {
            return refused(ErrorCode::BadRequest);
        }
        let agent_leases = self.leases.iter().filter(|l| l.agent == agent).count();
        if agent_leases >= self.limits.leases_per_agent_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        if self.leases.len() >= self.limits.leases_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        self.leases.push(ModelLease {
            id: self.index,
            agent: agent.to_string(),
            ttl_ms,
            granted_ms: self.now_ms,
            lock_delay_ms,
        });
        self.leases_ever.push((self.index, agent.to_string()));
        Outcome::Lease {
            lease: self.index,
            ttl_ms,
        }
    }

    fn lease_revoke(&mut self, agent: &str, text: &str) -> Outcome {
        match self.live_lease(agent, text) {
            Ok(id) => {
                self.end_leases(&[id], LeaseEnd::Revoked);
                Outcome::Done
            }
            Err(refusal) => refusal,
        }
    }

    /// `admin.revoke`: any live lease ends as its owner's revoke would end it.
    fn admin_revoke(&mut self, text: &str) -> Outcome {
        match parse_lease(text).filter(|id| self.leases.iter().any(|lease| lease.id == *id)) {
            Some(id) => {
                self.end_leases(&[id], LeaseEnd::AdminRevoked);
                Outcome::Done
            }
            None => refused(ErrorCode::LeaseNotFound),
        }
    }

    /// Ends the named leases whose TTL has run on the machine clock; others are left alone.
    fn expire(&mut self, named: &[LeaseId]) -> Outcome {
        let mut due: Vec<u64> = named
            .iter()
            .map(|lease| lease.0)
            .filter(|id| {
                self.leases.iter().any(|lease| {
                    lease.id == *id && self.now_ms >= lease.granted_ms.saturating_add(lease.ttl_ms)
                })
            })
            .collect();
        due.sort_unstable();
        due.dedup();
        self.end_leases(&due, LeaseEnd::Expired);
        Outcome::Expired { leases: due }
    }

    /// Ends leases: their holds go, their waiters are answered `lease_not_found` (lease by
    /// lease, each lease's waits in resource order), then whatever became free is granted.
    fn end_leases(&mut self, ids: &[u64], reason: LeaseEnd) {
        for id in ids {
            let agent = self.lease(*id).agent.clone();
            let lock_delay_ms = self.lease(*id).lock_delay_ms;
            if lock_delay_ms > 0 && reason != LeaseEnd::Revoked {
                let until_ms = self.now_ms + lock_delay_ms;
                let held_locks = self
                    .holds
                    .iter()
                    .filter(|hold| hold.lease == *id && hold.kind == ResourceKind::Lock);
                let held_back: Vec<String> = held_locks.map(|hold| hold.name.clone()).collect();
                // A lock held shared by several leases with delays: the later end holds.
                for name in held_back {
                    match self.lock_delays.iter_mut().find(|(held, _)| *held == name) {
                        Some((_, until)) => *until = (*until).max(until_ms),
                        None => self.lock_delays.push((name, until_ms)),
                    }
                }
            }
            self.ended.push((agent, *id, reason));
            self.leases.retain(|lease| lease.id != *id);
            self.holds.retain(|hold| hold.lease != *id);
            let mut dropped: Vec<ModelWaiter> = self
                .waiters
                .iter()
                .filter(|w| w.lease == *id)
                .cloned()
                .collect();
            self.waiters.retain(|w| w.lease != *id);
            dropped.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
            for waiter in dropped {
                self.respond(&waiter, refused(ErrorCode::LeaseNotFound));
            }
        }
        self.grant_what_is_grantable();
    }

    fn cancel_wait(&mut self, agent: &str, request_id: &str) -> Outcome {
        let Some(position) = self
            .waiters
            .iter()
            .position(|w| w.agent == agent && w.request_id == request_id)
        else {
            return Outcome::Cancelled { cancelled: false };
        };
        let waiter = self.waiters.remove(position);
        self.respond(&waiter, refused(ErrorCode::Timeout));
        self.grant_what_is_grantable();
        Outcome::Cancelled { cancelled: true }
    }

    /// Ends every wait whose deadline has passed on the machine clock: all of them leave
    /// their queues first (answered `timeout` in deadline, agent, request id order), then
    /// whatever became free is granted.
    fn expire_waits(&mut self) -> Outcome {
        let now_ms = self.now_ms;
        let mut due: Vec<ModelWaiter> = self
            .waiters
            .iter()
            .filter(|w| {
                w.deadline_ms
                    .is_some_and(|deadline_ms| deadline_ms <= now_ms)
            })
            .cloned()
            .collect();
        self.waiters
            .retain(|w| w.deadline_ms.is_none_or(|deadline_ms| deadline_ms > now_ms));
        due.sort_by(|a, b| {
            (a.deadline_ms, &a.agent, &a.request_id).cmp(&(b.deadline_ms, &b.agent, &b.request_id))
        });
        for waiter in &due {
            if waiter.kind == ResourceKind::Barrier {
                self.barrier_notes
                    .push(match self.round_of(&waiter.name, waiter.lease) {
                        Some(_) => "barrier leave timed out: the member has not left",
                        None => "barrier arrival timed out: out of the round",
                    });
            }
            self.respond(waiter, refused(ErrorCode::Timeout));
        }
        self.grant_what_is_grantable();
        Outcome::WaitsExpired {
            count: due.len() as u64,
        }
    }

    /// The earliest deadline of a pending wait.
    fn wait_deadline_next_ms(&self) -> Option<u64> {
        self.waiters.iter().filter_map(|w| w.deadline_ms).min()
    }

    /// Ends every window whose end has passed on the machine clock: held ones go, waiting
    /// ones are answered `timeout` (by end, then arrival), then whatever became free is
    /// granted.
    fn expire_reservations(&mut self) -> Outcome {
        let now_ms = self.now_ms;
        let due = |window: &ModelWindow, volumes: &[Volume]| {
            model_end(*window, volumes).is_some_and(|end_ms| end_ms <= now_ms)
        };
        let holds_before = self.holds.len();
        self.holds.retain(|hold| !due(&hold.window, &hold.volumes));
        let mut waiters_due: Vec<ModelWaiter> = self
            .waiters
            .iter()
            .filter(|w| due(&w.window, &w.volumes))
            .cloned()
            .collect();
        self.waiters.retain(|w| !due(&w.window, &w.volumes));
        waiters_due.sort_by_key(|w| (model_end(w.window, &w.volumes), w.seq));
        for waiter in &waiters_due {
            self.respond(waiter, refused(ErrorCode::Timeout));
        }
        // Then the preempted holds whose deadline passed, if a waiter still needs them.
        let (needed, _) = self.needed();
        self.holds.retain(|hold| {
            hold.vacate_by_ms
                .is_none_or(|vacate_by_ms| vacate_by_ms > now_ms)
                || !needed.iter().any(|(name, _)| *name == hold.name)
        });
        let holds_ended = holds_before - self.holds.len();
        self.grant_what_is_grantable();
        Outcome::ReservationsEnded {
            count: (holds_ended + waiters_due.len()) as u64,
        }
    }

    /// The earliest end of a held or waiting reservation's window.
    fn reservation_end_next_ms(&self) -> Option<u64> {
        let holds = self
            .holds
            .iter()
            .map(|hold| model_end(hold.window, &hold.volumes));
        let waiters = self.waiters.iter().map(|w| model_end(w.window, &w.volumes));
        let vacates = self.holds.iter().map(|hold| hold.vacate_by_ms);
        holds.chain(waiters).chain(vacates).flatten().min()
    }

    /// Ends every hold whose max-hold has run out and every lock-delay that has passed on the
    /// machine clock, then grants whatever became free.
    fn expire_hold_times(&mut self) -> Outcome {
        let now_ms = self.now_ms;
        let holds_before = self.holds.len();
        self.holds.retain(|hold| {
            hold.max_hold_until_ms
                .is_none_or(|until_ms| until_ms > now_ms)
        });
        let delays_before = self.lock_delays.len();
        self.lock_delays.retain(|(_, until_ms)| *until_ms > now_ms);
        let outcome = Outcome::HoldTimesEnded {
            max_holds: (holds_before - self.holds.len()) as u64,
            lock_delays: (delays_before - self.lock_delays.len()) as u64,
        };
        self.grant_what_is_grantable();
        outcome
    }

    /// The earliest max-hold deadline or lock-delay end.
    fn hold_time_next_ms(&self) -> Option<u64> {
        let holds = self.holds.iter().filter_map(|hold| hold.max_hold_until_ms);
        let delays = self.lock_delays.iter().map(|(_, until_ms)| *until_ms);
        holds.chain(delays).min()
    }

    /// Whether lock `name` is held back by a lock-delay.
    fn held_back(&self, name: &str) -> bool {
        self.lock_delays
            .iter()
            .any(|(held_back, _)| held_back == name)
    }

    /// Bounds the hold just granted (the last one) by `max_hold_ms`, if the outcome is a new
    /// grant.
    fn bound_new_hold(&mut self, outcome: &Outcome, max_hold_ms: Option<u64>) {
        let now_ms = self.now_ms;
        // A new grant's token is from this entry (one of a hold asked for again is older).
        if let (Outcome::Granted { token }, Some(hold)) = (outcome, self.holds.last_mut())
            && hold.token == *token
            && *token >> 16 == self.index
        {
            hold.max_hold_until_ms = max_hold_ms.map(|ms| now_ms + ms);
        }
    }

    /// Gives the waiter just queued (the last one) its request's `max_hold_ms`.
    fn bound_new_waiter(&mut self, max_hold_ms: Option<u64>) {
        if let Some(waiter) = self.waiters.last_mut() {
            waiter.max_hold_ms = max_hold_ms;
        }
    }

    /// The window a reservation asks for, checked against the clock and the limits.
    fn resolve_window(
        &self,
        start_ms: Option<u64>,
        end_ms: Option<u64>,
    ) -> Result<ModelWindow, Outcome> {
        if start_ms.is_none() && end_ms.is_none() {
            return Ok(None);
        }
        let start = start_ms.unwrap_or(self.now_ms);
        if let Some(end) = end_ms
            && (end <= self.now_ms || end - start > self.limits.reservation_window_ms_max)
        {
            return Err(refused(ErrorCode::BadRequest));
        }
        if start > self.now_ms + self.limits.reservation_horizon_ms_max {
            return Err(refused(ErrorCode::BadRequest));
        }
        Ok(Some((start, end_ms)))
    }

    // --- resources ----------------------------------------------------------------------

    fn holds_of(&self, kind: ResourceKind, name: &str) -> impl Iterator<Item = &ModelHold> {
        self.holds
            .iter()
            .filter(move |hold| hold.kind == kind && hold.name == name)
    }

    /// A resource's waiters, in arrival order: a multi-lock is a waiter of each of its locks.
    fn waiters_of(&self, kind: ResourceKind, name: &str) -> impl Iterator<Item = &ModelWaiter> {
        self.waiters.iter().filter(move |w| {
            w.kind == kind && (w.name == name || w.lock_names.iter().any(|lock| lock == name))
        })
    }

    /// A resource's queue, head first: arrival order, except that waypoint waiters go by
    /// their place (priority and aging).
    fn queue_of(&self, kind: ResourceKind, name: &str) -> Vec<&ModelWaiter> {
        let mut queue: Vec<&ModelWaiter> = self.waiters_of(kind, name).collect();
        if kind == ResourceKind::Waypoint {
            queue.sort_by_key(|w| w.place());
        }
        queue
    }

    /// The holds some waiter preempts, naively, `(name, highest priority)`, and whether any
    /// of them is preempted through a waiter ahead (priority inheritance). A waypoint waiter
    /// above routine preempts when its chain (itself, then every other lease's waiter ahead
    /// of a member of the chain that conflicts with it) meets only holds and waiters of a
    /// lower priority, and no hold of its own lease: then every other lease's hold that
    /// conflicts with a member of the chain must be vacated.
    fn needed(&self) -> (Vec<(String, u8)>, bool) {
        let waypoint = ResourceKind::Waypoint;
        let shapes_of = |w: &ModelWaiter| model_shapes(w.area, w.window, &w.volumes);
        let mut needed: Vec<(String, u8)> = Vec::new();
        let mut inherited = false;
        for w in self
            .waiters
            .iter()
            .filter(|w| w.kind == waypoint && w.priority > 0)
        {
            let mut chain: Vec<&ModelWaiter> = vec![w];
            let mut victims: Vec<&ModelHold> = Vec::new();
            let mut stopped = false;
            let mut at = 0;
            while at < chain.len() && !stopped {
                let member = chain[at];
                at += 1;
                let member_shapes = shapes_of(member);
                let candidate = (Some(member.name.as_str()), member_shapes.as_slice());
                for hold in self.holds.iter().filter(|hold| {
                    hold.kind == waypoint
                        && hold.lease != member.lease
                        && Self::reservations_conflict(
                            candidate,
                            (
                                &hold.name,
                                &model_shapes(hold.area, hold.window, &hold.volumes),
                            ),
                        )
                }) {
                    if hold.priority >= w.priority || hold.lease == w.lease {
                        stopped = true;
                    } else if !victims.iter().any(|v| v.name == hold.name) {
                        victims.push(hold);
                    }
                }
                for other in self.waiters.iter().filter(|other| {
                    other.kind == waypoint
                        && other.lease != member.lease
                        && other.place() < member.place()
                        && Self::reservations_conflict(candidate, (&other.name, &shapes_of(other)))
                }) {
                    if other.priority >= w.priority {
                        stopped = true;
                    } else if !chain.iter().any(|c| c.seq == other.seq) {
                        chain.push(other);
                    }
                }
            }
            // Past the chain bound a request waits in the ordinary way.
            if stopped || chain.len() > PREEMPT_CHAIN_MAX + 1 {
                continue;
            }
            inherited |= chain.len() > 1 && !victims.is_empty();
            for hold in victims {
                match needed.iter_mut().find(|(name, _)| *name == hold.name) {
                    Some(entry) => entry.1 = entry.1.max(w.priority),
                    None => needed.push((hold.name.clone(), w.priority)),
                }
            }
        }
        (needed, inherited)
    }

    /// The preemption pass, naively after every entry: a hold that [`Model::needed`] lists
    /// without a deadline gets one (`now + reservation_vacate_ms`) and an event; a deadline
    /// that no waiter needs is dropped.
    fn preempt(&mut self) {
        let waypoint = ResourceKind::Waypoint;
        let (needed, inherited) = self.needed();
        self.inherited |= inherited;
        let vacate_by_ms = self.now_ms + self.limits.reservation_vacate_ms;
        let mut preempted = Vec::new();
        let mut withdrawn = Vec::new();
        for hold in self.holds.iter_mut().filter(|hold| hold.kind == waypoint) {
            match needed.iter().find(|(name, _)| *name == hold.name) {
                None => {
                    if let Some(deadline_ms) = hold.vacate_by_ms.take() {
                        let told = (hold.name.clone(), hold.agent.clone(), hold.token);
                        withdrawn.push((deadline_ms, told, !hold.volumes.is_empty()));
                    }
                }
                Some(_) if hold.vacate_by_ms.is_some() => {}
                Some((_, level)) => {
                    hold.vacate_by_ms = Some(vacate_by_ms);
                    preempted.push((
                        hold.name.clone(),
                        hold.agent.clone(),
                        hold.token,
                        vacate_by_ms,
                        *level,
                        !hold.volumes.is_empty(),
                    ));
                }
            }
        }
        preempted.sort();
        self.preempted.extend(preempted);
        // The machine tells them in deadline order, then by name.
        withdrawn.sort();
        self.withdrawn.extend(
            withdrawn
                .into_iter()
                .map(|(_, (name, agent, token), route)| (name, agent, token, route)),
        );
    }

    fn is_waiting(&self, lease: u64, kind: ResourceKind, name: &str) -> bool {
        self.waiters_of(kind, name).any(|w| w.lease == lease)
    }

    /// A second acquire by a lease that already waits: a try is `would_block` and changes
    /// nothing; a request that asks for something else (permits, geometry) is `bad_request`;
    /// otherwise the wait moves to the new request id, in place, with the new request's
    /// deadline, and the earlier request is answered `timeout`.
    #[allow(clippy::too_many_arguments)]
    fn take_over(
        &mut self,
        kind: ResourceKind,
        name: &str,
        lease: u64,
        request_id: &str,
        permits: u32,
        area: Option<&Area>,
        (wait_ms, max_hold_ms): (Option<u64>, Option<u64>),
        asked: (Option<u64>, Option<u64>),
    ) -> Outcome {
        let position = self
            .waiters
            .iter()
            .position(|w| w.kind == kind && w.name == name && w.lease == lease)
            .expect("the caller checked the lease waits");
        let waiter = self.waiters[position].clone();
        if waiter.permits != permits
            || (kind == ResourceKind::Waypoint
                && (waiter.area.as_ref() != area || !window_asked(waiter.window, asked.0, asked.1)))
        {
            return refused(ErrorCode::BadRequest);
        }
        self.move_wait(position, request_id, (wait_ms, max_hold_ms))
    }

    /// The wait of the waiter at `position` asked for again under `request_id`: a try is
    /// `would_block`; otherwise it goes on in place under the new id, deadline and max-hold,
    /// and the earlier request is answered `timeout`.
    fn move_wait(
        &mut self,
        position: usize,
        request_id: &str,
        (wait_ms, max_hold_ms): (Option<u64>, Option<u64>),
    ) -> Outcome {
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        let waiter = self.waiters[position].clone();
        self.respond(&waiter, refused(ErrorCode::Timeout));
        let now_ms = self.now_ms;
        let moved = &mut self.waiters[position];
        moved.request_id = request_id.to_string();
        moved.deadline_ms = wait_ms.map(|wait_ms| now_ms + wait_ms);
        moved.max_hold_ms = max_hold_ms;
        Outcome::Queued
    }

    /// Locks held, waited for or held back, semaphores held or waited for, waypoint
    /// reservations held or waiting.
    fn resources_in_use(&self) -> usize {
        let mut names: Vec<(ResourceKind, &str)> = Vec::new();
        let mut waypoints = 0;
        let lock_and_sem_users = self
            .holds
            .iter()
            .map(|hold| (hold.kind, hold.name.as_str()))
            .chain(self.waiters.iter().flat_map(|w| {
                let locks = w.lock_names.iter().map(move |name| (w.kind, name.as_str()));
                std::iter::once((w.kind, w.name.as_str())).chain(locks)
            }));
        // A lock held back by a lock-delay is in use even when nobody waits for it.
        let held_back = self
            .lock_delays
            .iter()
            .map(|(name, _)| (ResourceKind::Lock, name.as_str()));
        for (kind, name) in lock_and_sem_users.chain(held_back) {
            if kind == ResourceKind::Waypoint {
                waypoints += 1;
            } else if !names.contains(&(kind, name)) {
                names.push((kind, name));
            }
        }
        names.len() + waypoints
    }

    fn next_token(&mut self) -> u64 {
        let token = (self.token_last + 1).max(self.index << 16);
        self.token_last = token;
        token
    }

    #[allow(clippy::too_many_arguments)]
    fn grant_now(
        &mut self,
        kind: ResourceKind,
        name: &str,
        lease: u64,
        agent: &str,
        permits: u32,
        sem_limit: u32,
        area: Option<Area>,
        window: ModelWindow,
    ) -> Outcome {
        let token = self.next_token();
        self.holds.push(ModelHold {
            kind,
            name: name.to_string(),
            lease,
            agent: agent.to_string(),
            token,
            permits,
            since_ms: self.now_ms,
            sem_limit,
            area,
            window,
            volumes: Vec::new(),
            priority: 0,
            vacate_by_ms: None,
            mode: LockMode::Exclusive,
            max_hold_until_ms: None,
            value: String::new(),
        });
        self.tokens_granted.push((kind, name.to_string(), token));
        Outcome::Granted { token }
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        kind: ResourceKind,
        name: &str,
        lease: u64,
        agent: &str,
        request_id: &str,
        permits: u32,
        sem_limit: u32,
        area: Option<Area>,
        window: ModelWindow,
        wait_ms: Option<u64>,
    ) -> Outcome {
        self.waiters.push(ModelWaiter {
            deadline_ms: wait_ms.map(|wait_ms| self.now_ms + wait_ms),
            kind,
            name: name.to_string(),
            lease,
            agent: agent.to_string(),
            request_id: request_id.to_string(),
            permits,
            since_ms: self.now_ms,
            seq: self.index,
            sem_limit,
            area,
            window,
            volumes: Vec::new(),
            priority: 0,
            head_start_ms: 0,
            mode: LockMode::Exclusive,
            lock_names: Vec::new(),
            max_hold_ms: None,
            value: String::new(),
        });
        Outcome::Queued
    }

    /// `lock.acquire` (one name) and `lock.acquire_all`, naively: what the lease holds or
    /// waits for first, then granted at once when no lock has a waiter and every lock's
    /// holders admit the mode, else queued as one waiter of every lock.
    fn lock_acquire(
        &mut self,
        agent: &str,
        request_id: &str,
        names: &[String],
        lease: &str,
        (wait_ms, max_hold_ms, mode): (Option<u64>, Option<u64>, LockMode),
    ) -> Outcome {
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let kind = ResourceKind::Lock;
        let mut names = names.to_vec();
        names.sort();
        let held: Vec<&ModelHold> = names
            .iter()
            .filter_map(|name| self.holds_of(kind, name).find(|hold| hold.lease == lease))
            .collect();
        if let Some(first) = held.first() {
            let one_grant = held.len() == names.len()
                && held
                    .iter()
                    .all(|hold| hold.token == first.token && hold.mode == mode);
            return if one_grant {
                Outcome::Granted { token: first.token }
            } else {
                refused(ErrorCode::BadRequest)
            };
        }
        // A lock held back by a lock-delay grants nobody: a try is refused, others queue.
        let held_back = names.iter().any(|name| self.held_back(name));
        if held_back && wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        let waiting = self.waiters.iter().position(|w| {
            w.kind == kind && w.lease == lease && w.lock_names.iter().any(|n| names.contains(n))
        });
        if let Some(position) = waiting {
            let waiter = &self.waiters[position];
            if waiter.lock_names != names || waiter.mode != mode {
                return refused(ErrorCode::BadRequest);
            }
            return self.move_wait(position, request_id, (wait_ms, max_hold_ms));
        }
        if self.over_holds_quota(agent, names.len()) {
            return refused(ErrorCode::ResourceExhausted);
        }
        let unused = names
            .iter()
            .filter(|name| {
                self.holds_of(kind, name).next().is_none()
                    && self.waiters_of(kind, name).next().is_none()
                    && !self.held_back(name)
            })
            .count();
        let resources_full =
            unused > 0 && self.resources_in_use() + unused > self.limits.resources_max as usize;
        let free = !held_back
            && names.iter().all(|name| {
                self.waiters_of(kind, name).next().is_none()
                    && self.holds_of(kind, name).all(|hold| mode.admits(hold.mode))
            });
        if free {
            if resources_full {
                return refused(ErrorCode::ResourceExhausted);
            }
            let token = self.next_token();
            for name in &names {
                self.holds.push(ModelHold {
                    kind,
                    name: name.clone(),
                    lease,
                    agent: agent.to_string(),
                    token,
                    permits: 1,
                    since_ms: self.now_ms,
                    sem_limit: 0,
                    area: None,
                    window: None,
                    volumes: Vec::new(),
                    priority: 0,
                    vacate_by_ms: None,
                    mode,
                    max_hold_until_ms: max_hold_ms.map(|ms| self.now_ms + ms),
                    value: String::new(),
                });
                self.tokens_granted.push((kind, name.clone(), token));
            }
            return Outcome::Granted { token };
        }
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        if self.over_waits_quota(lease, names.len()) {
            return refused(ErrorCode::ResourceExhausted);
        }
        let queue_max = self.limits.waiters_per_resource_max as usize;
        if names
            .iter()
            .any(|name| self.waiters_of(kind, name).count() >= queue_max)
            || resources_full
        {
            return refused(ErrorCode::ResourceExhausted);
        }
        self.enqueue(
            kind, &names[0], lease, agent, request_id, 1, 0, None, None, wait_ms,
        );
        let queued = self.waiters.last_mut().expect("just queued");
        queued.mode = mode;
        queued.lock_names = names;
        queued.max_hold_ms = max_hold_ms;
        Outcome::Queued
    }

    /// An acquire of a resource with one holder (an election's leadership) by a live lease:
    /// granted at once when nobody holds it, its token again for its holder, the wait taken
    /// over for a lease that waits already, or queued within the bounds.
    fn exclusive_acquire(
        &mut self,
        kind: ResourceKind,
        (agent, lease, request_id): (&str, u64, &str),
        name: &str,
        wait_ms: Option<u64>,
    ) -> Outcome {
        let Some(holder) = self.holds_of(kind, name).next() else {
            if self.over_holds_quota(agent, 1) {
                return refused(ErrorCode::ResourceExhausted);
            }
            if self.resources_in_use() >= self.limits.resources_max as usize {
                return refused(ErrorCode::ResourceExhausted);
            }
            return self.grant_now(kind, name, lease, agent, 1, 0, None, None);
        };
        if holder.lease == lease {
            return Outcome::Granted {
                token: holder.token,
            };
        }
        if self.is_waiting(lease, kind, name) {
            let times = (wait_ms, None);
            return self.take_over(kind, name, lease, request_id, 1, None, times, (None, None));
        }
        if self.over_holds_quota(agent, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        if self.over_waits_quota(lease, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        if self.waiters_of(kind, name).count() >= self.limits.waiters_per_resource_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        self.enqueue(
            kind, name, lease, agent, request_id, 1, 0, None, None, wait_ms,
        )
    }

    /// `lock.downgrade`: an exclusive hold becomes shared, its token kept; a shared one is
    /// answered its token.
    fn lock_downgrade(&mut self, agent: &str, name: &str, lease: &str) -> Outcome {
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let Some(hold) = self
            .holds
            .iter_mut()
            .find(|h| h.kind == ResourceKind::Lock && h.name == name && h.lease == lease)
        else {
            return refused(ErrorCode::NotHolder);
        };
        hold.mode = LockMode::Shared;
        let token = hold.token;
        self.grant_what_is_grantable();
        Outcome::Granted { token }
    }

    /// `lock.release_all`: every named lock released, or none when the lease does not hold
    /// them all.
    fn lock_release_all(&mut self, agent: &str, names: &[String], lease: &str) -> Outcome {
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let held = |hold: &ModelHold, name: &String| {
            hold.kind == ResourceKind::Lock && hold.name == *name && hold.lease == lease
        };
        if !names
            .iter()
            .all(|name| self.holds.iter().any(|hold| held(hold, name)))
        {
            return refused(ErrorCode::NotHolder);
        }
        self.holds
            .retain(|hold| !names.iter().any(|name| held(hold, name)));
        self.grant_what_is_grantable();
        Outcome::Done
    }

    #[allow(clippy::too_many_arguments)]
    fn sem_acquire(
        &mut self,
        agent: &str,
        request_id: &str,
        name: &str,
        limit: u32,
        lease: &str,
        permits: u32,
        (wait_ms, max_hold_ms): (Option<u64>, Option<u64>),
    ) -> Outcome {
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let kind = ResourceKind::Sem;
        let capacity = match self.sem_capacity(name) {
            Some(capacity) => capacity,
            None => {
                if self.over_holds_quota(agent, 1) {
                    return refused(ErrorCode::ResourceExhausted);
                }
                if self.resources_in_use() >= self.limits.resources_max as usize {
                    return refused(ErrorCode::ResourceExhausted);
                }
                limit
            }
        };
        if capacity != limit {
            return refused(ErrorCode::LimitMismatch);
        }
        if let Some(hold) = self.holds_of(kind, name).find(|hold| hold.lease == lease) {
            return if hold.permits == permits {
                Outcome::Granted { token: hold.token }
            } else {
                refused(ErrorCode::BadRequest)
            };
        }
        if self.is_waiting(lease, kind, name) {
            let times = (wait_ms, max_hold_ms);
            return self.take_over(
                kind,
                name,
                lease,
                request_id,
                permits,
                None,
                times,
                (None, None),
            );
        }
        if self.over_holds_quota(agent, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        let nobody_waits = self.waiters_of(kind, name).next().is_none();
        if nobody_waits && self.sem_used(name) + permits <= capacity {
            let outcome = self.grant_now(kind, name, lease, agent, permits, capacity, None, None);
            self.bound_new_hold(&outcome, max_hold_ms);
            return outcome;
        }
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        if self.over_waits_quota(lease, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        if self.waiters_of(kind, name).count() >= self.limits.waiters_per_resource_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        let outcome = self.enqueue(
            kind, name, lease, agent, request_id, permits, capacity, None, None, wait_ms,
        );
        self.bound_new_waiter(max_hold_ms);
        outcome
    }

    /// Whether `agent` would hold and wait for more than `holds_per_agent_max` resources with
    /// `count` more (a waiting multi-lock counts each of its locks).
    fn over_holds_quota(&self, agent: &str, count: usize) -> bool {
        let holds = self.holds.iter().filter(|hold| hold.agent == agent).count();
        let waits: usize = self
            .waiters
            .iter()
            .filter(|w| w.agent == agent)
            .map(|w| w.lock_names.len().max(1))
            .sum();
        holds + waits + count > self.limits.holds_per_agent_max as usize
    }

    /// Whether `lease` would wait for more than `waits_per_lease_max` resources with `count`
    /// more.
    fn over_waits_quota(&self, lease: u64, count: usize) -> bool {
        let waits: usize = self
            .waiters
            .iter()
            .filter(|w| w.lease == lease)
            .map(|w| w.lock_names.len().max(1))
            .sum();
        waits + count > self.limits.waits_per_lease_max as usize
    }

    /// The capacity of a semaphore in use (held or waited for); an idle one has none.
    fn sem_capacity(&self, name: &str) -> Option<u32> {
        let from_holds = self
            .holds_of(ResourceKind::Sem, name)
            .map(|hold| hold.sem_limit);
        let from_waiters = self
            .waiters_of(ResourceKind::Sem, name)
            .map(|w| w.sem_limit);
        from_holds.chain(from_waiters).next()
    }

    fn sem_used(&self, name: &str) -> u32 {
        self.holds_of(ResourceKind::Sem, name)
            .map(|hold| hold.permits)
            .sum()
    }

    /// `airspace.query` the naive way: every held waypoint reservation with a shape that
    /// conflicts with the query's cylinder in its window (from `now_ms` on without one), in
    /// name order, with a route's conflicting volume indexes.
    fn airspace_query(
        &self,
        volume: &hivekeeper_protocol::QueryVolume,
        now_ms: u64,
    ) -> Vec<(String, Vec<u32>)> {
        let window = Some((volume.start_ms.unwrap_or(now_ms), volume.end_ms));
        let mut rows: Vec<(String, Vec<u32>)> = self
            .holds
            .iter()
            .filter(|hold| hold.kind == ResourceKind::Waypoint)
            .filter_map(|hold| {
                let shapes = model_shapes(hold.area, hold.window, &hold.volumes);
                let hits: Vec<u32> = (0u32..)
                    .zip(&shapes)
                    .filter(|(_, (area, shape_window))| {
                        areas_conflict(&volume.area(), area)
                            && windows_overlap(window, *shape_window)
                    })
                    .map(|(number, _)| number)
                    .collect();
                let indexes = if hold.volumes.is_empty() {
                    Vec::new()
                } else {
                    hits.clone()
                };
                (!hits.is_empty()).then(|| (hold.name.clone(), indexes))
            })
            .collect();
        rows.sort();
        rows
    }

    /// DESIGN.md §2: two reservations conflict if they share the name, or their cylinders
    /// conflict. `candidate` is the one that wants to be granted.
    /// Same name, or any cylinder of one that conflicts with any of the other's in windows
    /// that overlap: every pair checked.
    fn reservations_conflict(
        candidate: (Option<&str>, &[(Area, ModelWindow)]),
        other: (&str, &[(Area, ModelWindow)]),
    ) -> bool {
        candidate.0 == Some(other.0)
            || candidate.1.iter().any(|(a, window_a)| {
                other.1.iter().any(|(b, window_b)| {
                    areas_conflict(a, b) && windows_overlap(*window_a, *window_b)
                })
            })
    }

    /// Whether a reservation of `lease` is blocked by another lease's held reservation or by
    /// another lease's waiter ahead of `place` in the queue order (every waiter when `None`);
    /// by name only when `name` is given (a route's amend keeps its name).
    fn waypoint_blocked(
        &self,
        name: Option<&str>,
        shapes: &[(Area, ModelWindow)],
        lease: u64,
        place: Option<(i128, u64)>,
    ) -> bool {
        let candidate = (name, shapes);
        let held_conflict = self.holds.iter().any(|hold| {
            hold.kind == ResourceKind::Waypoint
                && hold.lease != lease
                && Self::reservations_conflict(
                    candidate,
                    (
                        &hold.name,
                        &model_shapes(hold.area, hold.window, &hold.volumes),
                    ),
                )
        });
        let earlier_conflict = self.waiters.iter().any(|w| {
            w.kind == ResourceKind::Waypoint
                && place.is_none_or(|place| w.place() < place)
                && w.lease != lease
                && Self::reservations_conflict(
                    candidate,
                    (&w.name, &model_shapes(w.area, w.window, &w.volumes)),
                )
        });
        held_conflict || earlier_conflict
    }

    /// `ask`: the cylinder, the window as asked, a route's volumes and the priority.
    #[allow(clippy::type_complexity)]
    fn waypoint_reserve(
        &mut self,
        agent: &str,
        request_id: &str,
        name: &str,
        lease: &str,
        ask: (Option<Area>, (Option<u64>, Option<u64>), Vec<Volume>, u8),
        wait_ms: Option<u64>,
    ) -> Outcome {
        let (area, asked, volumes, priority) = ask;
        let window = match self.resolve_window(asked.0, asked.1) {
            Ok(window) => window,
            Err(refusal) => return refusal,
        };
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let kind = ResourceKind::Waypoint;
        let same = |held_area: Option<Area>, held_window: ModelWindow, held_volumes: &[Volume]| {
            held_area == area
                && held_volumes == volumes.as_slice()
                && (!volumes.is_empty() || window_asked(held_window, asked.0, asked.1))
        };
        // Re-reserving a held name: the same request gets the held token back; another
        // (geometry, window, volumes) is refused (the agent must release first), as a
        // semaphore re-acquire with other permits is.
        if let Some(hold) = self.holds_of(kind, name).find(|hold| hold.lease == lease) {
            return if same(hold.area, hold.window, &hold.volumes) {
                Outcome::Granted { token: hold.token }
            } else {
                refused(ErrorCode::BadRequest)
            };
        }
        let waiting = self.waiters_of(kind, name).find(|w| w.lease == lease);
        if let Some(asks_the_same) = waiting.map(|w| same(w.area, w.window, &w.volumes)) {
            if !asks_the_same {
                return refused(ErrorCode::BadRequest);
            }
            let area = area.as_ref();
            let times = (wait_ms, None);
            return self.take_over(kind, name, lease, request_id, 1, area, times, asked);
        }
        if self.over_holds_quota(agent, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        if self.resources_in_use() >= self.limits.resources_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        let shapes = model_shapes(area, window, &volumes);
        let head_start_ms = u64::from(priority) * self.limits.reservation_aging_ms;
        let place = (self.now_ms as i128 - head_start_ms as i128, self.index);
        if !self.waypoint_blocked(Some(name), &shapes, lease, Some(place)) {
            let outcome = self.grant_now(kind, name, lease, agent, 1, 0, area, window);
            let hold = self.holds.last_mut().expect("just granted");
            hold.volumes = volumes;
            hold.priority = priority;
            return outcome;
        }
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        if self.over_waits_quota(lease, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        if self.waiters_of(kind, name).count() >= self.limits.waiters_per_resource_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        let waypoint_waiters = self.waiters.iter().filter(|w| w.kind == kind).count();
        if waypoint_waiters >= self.limits.waypoint_waiters_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        let outcome = self.enqueue(
            kind, name, lease, agent, request_id, 1, 0, area, window, wait_ms,
        );
        let waiter = self.waiters.last_mut().expect("just queued");
        waiter.volumes = volumes;
        waiter.priority = priority;
        waiter.head_start_ms = head_start_ms;
        outcome
    }

    /// Each volume's window checked as a waypoint's window is.
    fn check_volumes(&self, volumes: &[Volume]) -> Option<Outcome> {
        volumes
            .iter()
            .find_map(|v| self.resolve_window(Some(v.start_ms), Some(v.end_ms)).err())
    }

    fn route_reserve(
        &mut self,
        agent: &str,
        request_id: &str,
        name: &str,
        lease: &str,
        (volumes, priority): (&[Volume], u8),
        wait_ms: Option<u64>,
    ) -> Outcome {
        if let Some(refusal) = self.check_volumes(volumes) {
            return refusal;
        }
        let ask = (None, (None, None), volumes.to_vec(), priority);
        self.waypoint_reserve(agent, request_id, name, lease, ask, wait_ms)
    }

    /// The held route's volumes replaced when nothing of another lease (held, or waiting,
    /// whenever it came) conflicts with the new ones; else `would_block`, nothing changed.
    fn route_amend(
        &mut self,
        agent: &str,
        name: &str,
        lease: &str,
        volumes: &[Volume],
        priority: u8,
    ) -> Outcome {
        if let Some(refusal) = self.check_volumes(volumes) {
            return refusal;
        }
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let Some(position) = self.holds.iter().position(|hold| {
            hold.kind == ResourceKind::Waypoint && hold.name == name && hold.lease == lease
        }) else {
            return refused(ErrorCode::NotHolder);
        };
        if self.holds[position].volumes.is_empty() {
            return refused(ErrorCode::BadRequest);
        }
        // Held conflicts count for every new volume; waiters only for the new volumes that
        // are not kept (inside an old one: they wait for the route already).
        let shapes = model_shapes(None, None, volumes);
        let old_volumes = &self.holds[position].volumes;
        let (kept, fresh): (Vec<Volume>, Vec<Volume>) = volumes
            .iter()
            .partition(|new| old_volumes.iter().any(|old| volume_inside(new, old)));
        let fresh = model_shapes(None, None, &fresh);
        let held_in_the_way = self.holds.iter().any(|hold| {
            hold.kind == ResourceKind::Waypoint
                && hold.lease != lease
                && Self::reservations_conflict(
                    (None, &shapes),
                    (
                        &hold.name,
                        &model_shapes(hold.area, hold.window, &hold.volumes),
                    ),
                )
        });
        if held_in_the_way || self.waypoint_blocked(None, &fresh, lease, None) {
            return refused(ErrorCode::WouldBlock);
        }
        let kept = model_shapes(None, None, &kept);
        self.kept_before_waiter |= self.waypoint_blocked(None, &kept, lease, None);
        self.holds[position].volumes = volumes.to_vec();
        self.holds[position].priority = priority;
        let token = self.holds[position].token;
        self.grant_what_is_grantable();
        Outcome::Granted { token }
    }

    fn release(&mut self, kind: ResourceKind, agent: &str, name: &str, lease: &str) -> Outcome {
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let Some(position) = self
            .holds
            .iter()
            .position(|hold| hold.kind == kind && hold.name == name && hold.lease == lease)
        else {
            return refused(ErrorCode::NotHolder);
        };
        self.holds.remove(position);
        self.grant_what_is_grantable();
        Outcome::Done
    }

    /// The one grant pass: every free lock goes to its head waiter (locks by name), every
    /// semaphore grants heads while they fit (by name), then waypoint waiters are granted
    /// earliest first until none is left that nothing blocks.
    fn grant_what_is_grantable(&mut self) {
        // Locks: a request heading the queue of each of its locks, whose mode every holder of
        // each admits and none of which a lock-delay holds back, is granted; among several,
        // the one whose first lock comes first.
        loop {
            let grantable = (0..self.waiters.len())
                .filter(|&i| self.lock_grantable(&self.waiters[i]))
                .min_by_key(|&i| self.waiters[i].name.clone());
            let Some(position) = grantable else {
                break;
            };
            self.grant_waiter(position);
        }
        for name in self.names_with_waiters(ResourceKind::Sem) {
            loop {
                let Some(head) = self.waiters_of(ResourceKind::Sem, &name).next() else {
                    break;
                };
                if self.sem_used(&name) + head.permits > head.sem_limit {
                    break;
                }
                self.grant_head(ResourceKind::Sem, &name);
            }
        }
        loop {
            let grantable = (0..self.waiters.len())
                .filter(|&i| {
                    let w = &self.waiters[i];
                    w.kind == ResourceKind::Waypoint
                        && !self.waypoint_blocked(
                            Some(&w.name),
                            &model_shapes(w.area, w.window, &w.volumes),
                            w.lease,
                            Some(w.place()),
                        )
                })
                .min_by_key(|&i| self.waiters[i].place());
            let Some(position) = grantable else {
                break;
            };
            self.grant_waiter(position);
        }
        self.elect();
        self.end_left_rounds();
    }

    /// The election pass, last: every election whose leader went loses its key at a fresh
    /// revision, then its first candidate (if any) leads and its key is created at its token.
    fn elect(&mut self) {
        let kind = ResourceKind::Election;
        let mut leaderless: Vec<String> = self
            .mirrors
            .iter()
            .map(|mirror| mirror.name.clone())
            .filter(|name| self.holds_of(kind, name).next().is_none())
            .collect();
        leaderless.sort();
        for name in leaderless {
            self.next_token();
            self.mirrors.retain(|mirror| mirror.name != name);
            if self.waiters_of(kind, &name).next().is_some() {
                self.grant_head(kind, &name);
                let leader = self.holds.last().expect("just granted");
                let (value, token) = (leader.value.clone(), leader.token);
                self.mirror_created(&name, value, token);
            }
        }
    }

    fn mirror_created(&mut self, name: &str, value: String, token: u64) {
        self.mirrors.push(ModelMirror {
            name: name.to_string(),
            value,
            create_revision: token,
            mod_revision: token,
            version: 1,
        });
    }

    /// The leadership of `name` when `token` leads it for `agent`.
    fn leading(&self, agent: &str, name: &str, token: u64) -> Option<usize> {
        self.holds.iter().position(|hold| {
            hold.kind == ResourceKind::Election
                && hold.name == name
                && hold.token == token
                && hold.agent == agent
        })
    }

    fn value_too_long(value: &str) -> bool {
        value.len() > KV_LIMITS_DEFAULT.value_bytes_max as usize
    }

    /// `election.campaign`: a lock acquire whose holder and waiters carry a value.
    fn campaign(
        &mut self,
        agent: &str,
        request_id: &str,
        name: &str,
        lease: &str,
        value: &str,
        wait_ms: Option<u64>,
    ) -> Outcome {
        if Self::value_too_long(value) {
            return refused(ErrorCode::BadRequest);
        }
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let kind = ResourceKind::Election;
        // Leading or waiting already, it must ask with the same value.
        let held = self
            .holds_of(kind, name)
            .map(|hold| (hold.lease, &hold.value));
        let waiting = self.waiters_of(kind, name).map(|w| (w.lease, &w.value));
        if held
            .chain(waiting)
            .any(|(of, asked)| of == lease && asked != value)
        {
            return refused(ErrorCode::BadRequest);
        }
        let led = self.holds_of(kind, name).next().is_some();
        let waited = self.is_waiting(lease, kind, name);
        let outcome = self.exclusive_acquire(kind, (agent, lease, request_id), name, wait_ms);
        match outcome {
            Outcome::Granted { token } if !led => {
                self.holds.last_mut().expect("just granted").value = value.to_string();
                self.mirror_created(name, value.to_string(), token);
            }
            Outcome::Queued if !waited => {
                self.waiters.last_mut().expect("just queued").value = value.to_string();
            }
            _ => {}
        }
        outcome
    }

    /// `election.proclaim`: the leader's new value at a fresh revision.
    fn proclaim(&mut self, agent: &str, name: &str, token: u64, value: &str) -> Outcome {
        if Self::value_too_long(value) {
            return refused(ErrorCode::BadRequest);
        }
        let Some(position) = self.leading(agent, name, token) else {
            return refused(ErrorCode::NotHolder);
        };
        let revision = self.next_token();
        self.holds[position].value = value.to_string();
        let mirror = self
            .mirrors
            .iter_mut()
            .find(|mirror| mirror.name == name)
            .expect("a leader's key exists");
        mirror.value = value.to_string();
        mirror.mod_revision = revision;
        mirror.version += 1;
        Outcome::Proclaimed { revision }
    }

    /// `election.resign`: the leadership ends, the next candidate leads.
    fn resign(&mut self, agent: &str, name: &str, token: u64) -> Outcome {
        let Some(position) = self.leading(agent, name, token) else {
            return refused(ErrorCode::NotHolder);
        };
        self.holds.remove(position);
        self.grant_what_is_grantable();
        Outcome::Done
    }

    /// `election.leader`.
    fn leader(&self, name: &str) -> Outcome {
        let leader = self.holds_of(ResourceKind::Election, name).next();
        Outcome::Leader(leader.map(|hold| LeaderInfo {
            agent: hold.agent.clone(),
            value: hold.value.clone(),
            token: hold.token,
        }))
    }

    /// The `$election/` keys, in key order.
    fn mirror_keys(&self) -> Vec<KeyValue> {
        let mut keys: Vec<KeyValue> = self
            .mirrors
            .iter()
            .map(|mirror| KeyValue {
                key: election_key(&mirror.name),
                value: mirror.value.clone(),
                create_revision: mirror.create_revision,
                mod_revision: mirror.mod_revision,
                version: mirror.version,
                lease: None,
            })
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        keys
    }

    /// Whether a lock request could be granted now.
    fn lock_grantable(&self, w: &ModelWaiter) -> bool {
        let kind = ResourceKind::Lock;
        w.kind == kind
            && w.lock_names.iter().all(|name| {
                let head = self.waiters_of(kind, name).next();
                head.is_some_and(|head| head.seq == w.seq)
                    && !self.held_back(name)
                    && self
                        .holds_of(kind, name)
                        .all(|hold| w.mode.admits(hold.mode))
            })
    }

    fn names_with_waiters(&self, kind: ResourceKind) -> Vec<String> {
        let mut names: Vec<String> = self
            .waiters
            .iter()
            .filter(|w| w.kind == kind)
            .map(|w| w.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn grant_head(&mut self, kind: ResourceKind, name: &str) {
        let position = self
            .waiters
            .iter()
            .position(|w| w.kind == kind && w.name == name)
            .expect("called for a resource with waiters");
        self.grant_waiter(position);
    }

    /// Grants a waiter: one token, on each of a lock request's locks.
    fn grant_waiter(&mut self, position: usize) {
        let waiter = self.waiters.remove(position);
        let token = self.next_token();
        let names = if waiter.lock_names.is_empty() {
            vec![waiter.name.clone()]
        } else {
            waiter.lock_names.clone()
        };
        for name in names {
            self.holds.push(ModelHold {
                kind: waiter.kind,
                name: name.clone(),
                lease: waiter.lease,
                agent: waiter.agent.clone(),
                token,
                permits: waiter.permits,
                since_ms: self.now_ms,
                sem_limit: waiter.sem_limit,
                area: waiter.area,
                window: waiter.window,
                volumes: waiter.volumes.clone(),
                priority: waiter.priority,
                vacate_by_ms: None,
                mode: waiter.mode,
                max_hold_until_ms: waiter.max_hold_ms.map(|ms| self.now_ms + ms),
                value: waiter.value.clone(),
            });
            self.tokens_granted.push((waiter.kind, name, token));
        }
        self.respond(&waiter, Outcome::Granted { token });
    }

    // --- barriers -------------------------------------------------------------------------
    //
    // The naive double barrier, from docs/PROTOCOL.md §8.24: a member of a passed round is a
    // hold of kind `Barrier` whose token is the round's generation; the filling round's
    // arrivals and the members' leaves are waiters of that kind. A round passes only in the
    // entry where `count` live arrivals are in, answering every one of them (nobody passes
    // early, nobody is left behind); it ends only when every member still in has left,
    // answering every leaver; a generation is the token counter's next value (they increase).

    /// The generation of the passed round `lease` is a member of on barrier `name`.
    fn round_of(&self, name: &str, lease: u64) -> Option<u64> {
        self.holds_of(ResourceKind::Barrier, name)
            .find(|hold| hold.lease == lease)
            .map(|hold| hold.token)
    }

    /// The filling round's arrivals, first first.
    fn arrivals(&self, name: &str) -> Vec<ModelWaiter> {
        self.waiters_of(ResourceKind::Barrier, name)
            .filter(|w| self.round_of(name, w.lease).is_none())
            .cloned()
            .collect()
    }

    /// The leaves of round `generation`, in the order they were sent.
    fn leavers(&self, name: &str, generation: u64) -> Vec<ModelWaiter> {
        self.waiters_of(ResourceKind::Barrier, name)
            .filter(|w| self.round_of(name, w.lease) == Some(generation))
            .cloned()
            .collect()
    }

    fn members(&self, name: &str, generation: u64) -> usize {
        self.holds_of(ResourceKind::Barrier, name)
            .filter(|hold| hold.token == generation)
            .count()
    }

    fn take_waiter(&mut self, waiter: &ModelWaiter) {
        self.waiters
            .retain(|w| !(w.agent == waiter.agent && w.request_id == waiter.request_id));
    }

    fn admit(&mut self, name: &str, lease: u64, agent: &str, generation: u64) {
        self.holds.push(ModelHold {
            kind: ResourceKind::Barrier,
            name: name.to_string(),
            lease,
            agent: agent.to_string(),
            token: generation,
            permits: 1,
            since_ms: self.now_ms,
            sem_limit: 0,
            area: None,
            window: None,
            volumes: Vec::new(),
            priority: 0,
            vacate_by_ms: None,
            value: String::new(),
            mode: LockMode::Exclusive,
            max_hold_until_ms: None,
        });
    }

    fn barrier_enter(
        &mut self,
        agent: &str,
        request_id: &str,
        name: &str,
        count: u32,
        lease: &str,
        wait_ms: Option<u64>,
    ) -> Outcome {
        let kind = ResourceKind::Barrier;
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        if let Some(generation) = self.round_of(name, lease) {
            if self.is_waiting(lease, kind, name) {
                return refused(ErrorCode::BadRequest);
            }
            self.barrier_notes.push("barrier entered again by a member");
            return Outcome::Passed { generation };
        }
        if u64::from(count) > u64::from(self.limits.waiters_per_resource_max) + 1 {
            return refused(ErrorCode::BadRequest);
        }
        let arrivals = self.arrivals(name);
        if arrivals.first().is_some_and(|w| w.sem_limit != count) {
            return refused(ErrorCode::BadRequest);
        }
        if self.is_waiting(lease, kind, name) {
            return self.take_over(
                kind,
                name,
                lease,
                request_id,
                1,
                None,
                (wait_ms, None),
                (None, None),
            );
        }
        if self.over_holds_quota(agent, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        let in_use = self.holds_of(kind, name).next().is_some() || !arrivals.is_empty();
        if !in_use && self.resources_in_use() >= self.limits.resources_max as usize {
            return refused(ErrorCode::ResourceExhausted);
        }
        if arrivals.len() + 1 == count as usize {
            let generation = self.next_token();
            self.barrier_notes.push("barrier round passed");
            if self.holds_of(kind, name).next().is_some() {
                self.barrier_notes
                    .push("barrier round passed while an earlier one leaves");
            }
            for waiter in arrivals {
                self.take_waiter(&waiter);
                self.admit(name, waiter.lease, &waiter.agent, generation);
                self.respond(&waiter, Outcome::Passed { generation });
            }
            self.admit(name, lease, agent, generation);
            self.tokens_granted
                .push((kind, name.to_string(), generation));
            return Outcome::Passed { generation };
        }
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        if self.over_waits_quota(lease, 1) {
            return refused(ErrorCode::ResourceExhausted);
        }
        self.enqueue(
            kind, name, lease, agent, request_id, 1, count, None, None, wait_ms,
        )
    }

    fn barrier_leave(
        &mut self,
        agent: &str,
        request_id: &str,
        name: &str,
        lease: &str,
        wait_ms: Option<u64>,
    ) -> Outcome {
        let kind = ResourceKind::Barrier;
        let lease = match self.live_lease(agent, lease) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let Some(generation) = self.round_of(name, lease) else {
            return refused(ErrorCode::NotHolder);
        };
        if self.is_waiting(lease, kind, name) {
            return self.take_over(
                kind,
                name,
                lease,
                request_id,
                1,
                None,
                (wait_ms, None),
                (None, None),
            );
        }
        if self.members(name, generation) == self.leavers(name, generation).len() + 1 {
            self.barrier_notes
                .push("barrier round ended by its last leave");
            self.end_round(name, generation);
            return Outcome::Passed { generation };
        }
        if wait_ms == Some(0) {
            return refused(ErrorCode::WouldBlock);
        }
        self.enqueue(
            kind, name, lease, agent, request_id, 1, 0, None, None, wait_ms,
        )
    }

    /// Answers every leaver of round `generation`, in the order they left, and ends it.
    fn end_round(&mut self, name: &str, generation: u64) {
        for waiter in self.leavers(name, generation) {
            self.take_waiter(&waiter);
            self.respond(&waiter, Outcome::Passed { generation });
        }
        self.holds.retain(|hold| {
            !(hold.kind == ResourceKind::Barrier && hold.name == name && hold.token == generation)
        });
    }

    /// After members went (their lease ended): every round whose members still in have all
    /// left ends, barriers by name, rounds oldest first.
    fn end_left_rounds(&mut self) {
        let mut rounds: Vec<(String, u64)> = self
            .holds
            .iter()
            .filter(|hold| hold.kind == ResourceKind::Barrier)
            .map(|hold| (hold.name.clone(), hold.token))
            .collect();
        rounds.sort();
        rounds.dedup();
        for (name, generation) in rounds {
            if self.members(&name, generation) == self.leavers(&name, generation).len() {
                self.barrier_notes
                    .push("barrier round ended by a lease end");
                self.end_round(&name, generation);
            }
        }
    }

    /// `inspect` of a barrier: the members that have not left by (round, lease), the filling
    /// round's arrivals, its count, and how many leave.
    fn inspect_barrier(&self, name: &str) -> Outcome {
        let kind = ResourceKind::Barrier;
        let mut staying: Vec<&ModelHold> = self
            .holds_of(kind, name)
            .filter(|hold| !self.is_waiting(hold.lease, kind, name))
            .collect();
        staying.sort_by_key(|hold| (hold.token, hold.lease));
        let arrivals = self.arrivals(name);
        let leaving = self.waiters_of(kind, name).count() - arrivals.len();
        Outcome::Inspect {
            limit: None,
            holders: staying
                .iter()
                .map(|hold| HolderInfo {
                    agent: hold.agent.clone(),
                    lease: format!("{:016x}", hold.lease),
                    token: hold.token,
                    permits: None,
                    since_ms: hold.since_ms,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    vacate_by_ms: None,
                    value: None,
                    mode: LockMode::Exclusive,
                })
                .collect(),
            waiters: arrivals
                .iter()
                .enumerate()
                .map(|(i, w)| WaiterInfo {
                    agent: w.agent.clone(),
                    position: i as u32 + 1,
                    permits: None,
                    since_ms: w.since_ms,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    value: None,
                    mode: LockMode::Exclusive,
                })
                .collect(),
            count: arrivals.first().map(|w| w.sem_limit),
            leaving: (leaving > 0).then_some(leaving as u32),
        }
    }

    /// Answers a waiter: the deferred response, remembered for retries.
    fn respond(&mut self, waiter: &ModelWaiter, outcome: Outcome) {
        self.remember(&waiter.agent, &waiter.request_id, outcome.clone());
        self.responds.push(Respond {
            agent: waiter.agent.clone(),
            request_id: waiter.request_id.clone(),
            outcome,
        });
    }

    // --- remembered outcomes ------------------------------------------------------------

    fn remembered_outcome(&self, agent: &str, request_id: &str) -> Option<Outcome> {
        let memory = self.memories.iter().find(|memory| memory.agent == agent)?;
        memory
            .outcomes
            .iter()
            .rev()
            .find(|(id, _)| id == request_id)
            .map(|(_, outcome)| outcome.clone())
    }

    fn remember(&mut self, agent: &str, request_id: &str, outcome: Outcome) {
        let index = self.index;
        match self
            .memories
            .iter_mut()
            .find(|memory| memory.agent == agent)
        {
            Some(memory) => {
                memory.touched_index = index;
                memory.outcomes.push((request_id.to_string(), outcome));
            }
            None => self.memories.push(Memory {
                agent: agent.to_string(),
                touched_index: index,
                outcomes: vec![(request_id.to_string(), outcome)],
            }),
        }
    }

    /// At the end of an entry whose idle clock (the clock's step, at most
    /// `IDLE_CLOCK_STEP_MS_MAX` per entry, not moved by the first entry) passed a multiple of
    /// `dedup_idle_ms`: the agents without a live lease that recorded nothing since the
    /// previous such entry are forgotten. Returns how many.
    fn forget_idle_agents(&mut self, clock_before_ms: Option<u64>) -> usize {
        let period_ms = self.limits.dedup_idle_ms;
        let Some(before_ms) = clock_before_ms else {
            return 0;
        };
        let idle_before_ms = self.idle_clock_ms;
        self.idle_clock_ms += (self.now_ms - before_ms).min(IDLE_CLOCK_STEP_MS_MAX);
        if idle_before_ms / period_ms == self.idle_clock_ms / period_ms {
            return 0;
        }
        let before = self.memories.len();
        let swept_index = std::mem::replace(&mut self.swept_index, self.index);
        let leases = &self.leases;
        self.memories.retain(|memory| {
            memory.touched_index > swept_index
                || leases.iter().any(|lease| lease.agent == memory.agent)
        });
        before - self.memories.len()
    }

    /// At the end of every entry: each agent keeps its newest `dedup_per_agent_max` outcomes,
    /// and beyond `dedup_agents_max` agents are forgotten whole: agents without a live lease
    /// first, then the least recently touched (ties: smallest agent id).
    fn forget_old_outcomes(&mut self) {
        let per_agent_max = self.limits.dedup_per_agent_max as usize;
        for memory in &mut self.memories {
            while memory.outcomes.len() > per_agent_max {
                memory.outcomes.remove(0);
            }
        }
        while self.memories.len() > self.limits.dedup_agents_max as usize {
            let oldest = (0..self.memories.len())
                .min_by(|a, b| {
                    let key = |i: &usize| {
                        let agent = &self.memories[*i].agent;
                        (
                            self.leases.iter().any(|lease| &lease.agent == agent),
                            self.memories[*i].touched_index,
                            agent.clone(),
                        )
                    };
                    key(a).cmp(&key(b))
                })
                .expect("more memories than a positive bound");
            self.memories.remove(oldest);
        }
    }

    // --- reads --------------------------------------------------------------------------

    fn inspect(&self, kind: ResourceKind, name: &str) -> Outcome {
        if kind == ResourceKind::Barrier {
            return self.inspect_barrier(name);
        }
        let mut holds: Vec<&ModelHold> = self.holds_of(kind, name).collect();
        holds.sort_by_key(|hold| hold.token);
        let is_sem = kind == ResourceKind::Sem;
        let is_election = kind == ResourceKind::Election;
        Outcome::Inspect {
            limit: if is_sem {
                self.sem_capacity(name)
            } else {
                None
            },
            holders: holds
                .iter()
                .map(|hold| HolderInfo {
                    agent: hold.agent.clone(),
                    lease: format!("{:016x}", hold.lease),
                    token: hold.token,
                    permits: is_sem.then_some(hold.permits),
                    since_ms: hold.since_ms,
                    area: hold.area,
                    start_ms: hold.window.map(|(start_ms, _)| start_ms),
                    end_ms: hold.window.and_then(|(_, end_ms)| end_ms),
                    volumes: hold.volumes.clone(),
                    priority: (hold.priority > 0).then(|| priority(hold.priority)),
                    vacate_by_ms: hold.vacate_by_ms,
                    mode: hold.mode,
                    value: is_election.then(|| hold.value.clone()),
                })
                .collect(),
            waiters: self
                .queue_of(kind, name)
                .into_iter()
                .enumerate()
                .map(|(i, w)| WaiterInfo {
                    agent: w.agent.clone(),
                    position: i as u32 + 1,
                    permits: is_sem.then_some(w.permits),
                    since_ms: w.since_ms,
                    area: w.area,
                    start_ms: w.window.map(|(start_ms, _)| start_ms),
                    end_ms: w.window.and_then(|(_, end_ms)| end_ms),
                    volumes: w.volumes.clone(),
                    priority: (w.priority > 0).then(|| priority(w.priority)),
                    mode: w.mode,
                    value: is_election.then(|| w.value.clone()),
                })
                .collect(),
            count: None,
            leaving: None,
        }
    }

    fn fence(&self, kind: ResourceKind, name: &str, token: u64) -> Outcome {
        let held: Vec<u64> = self.holds_of(kind, name).map(|hold| hold.token).collect();
        Outcome::Fence {
            current: held.iter().copied().max().unwrap_or(0),
            valid: held.contains(&token),
        }
    }

    /// Tokens worth checking on one resource: none, the held ones, recent stale ones, and one
    /// never granted.
    fn fence_tokens(&self, kind: ResourceKind, name: &str) -> Vec<u64> {
        let mut tokens = vec![0, self.token_last + 1];
        tokens.extend(self.holds_of(kind, name).map(|hold| hold.token));
        let history = self
            .tokens_granted
            .iter()
            .filter(|(k, n, _)| *k == kind && n == name)
            .map(|(_, _, token)| *token)
            .collect::<Vec<_>>();
        tokens.extend(history.iter().rev().take(3));
        tokens.extend(self.tokens_granted.last().map(|(_, _, token)| *token));
        tokens
    }
}

/// The wire form of a lease: exactly 16 hex digits (either case).
fn parse_lease(text: &str) -> Option<u64> {
    if text.len() != 16 {
        return None;
    }
    let mut id: u64 = 0;
    for c in text.chars() {
        id = id * 16 + u64::from(c.to_digit(16)?);
    }
    Some(id)
}

fn limits_are_valid(limits: &Limits) -> bool {
    limits.lease_ttl_ms_min > 0
        && limits.lease_ttl_ms_min <= limits.lease_ttl_ms_max
        && [
            limits.leases_max,
            limits.resources_max,
            limits.waiters_per_resource_max,
            limits.waypoint_waiters_max,
            limits.dedup_per_agent_max,
            limits.dedup_agents_max,
            limits.leases_per_agent_max,
            limits.waits_per_lease_max,
            limits.holds_per_agent_max,
        ]
        .iter()
        .all(|value| *value >= 1)
        && limits.reservation_window_ms_max >= 1
        && limits.reservation_horizon_ms_max >= 1
        && limits.dedup_idle_ms >= 1
        && limits.reservation_vacate_ms >= 1
        && limits.reservation_aging_ms >= 1
}

/// The protocol's field checks, for the requests this test can generate.
fn op_is_valid(op: &Op) -> bool {
    if op.wait_ms().is_some_and(|ms| ms > WAIT_MS_MAX) || op.max_hold_ms() == Some(0) {
        return false;
    }
    match op {
        Op::LeaseGrant {
            ttl_ms,
            lock_delay_ms,
        } => *ttl_ms > 0 && *lock_delay_ms <= LOCK_DELAY_MS_MAX,
        Op::LockAcquireAll { names, .. } | Op::LockReleaseAll { names, .. } => {
            (1..=64).contains(&names.len())
                && names
                    .iter()
                    .enumerate()
                    .all(|(i, name)| !names[..i].contains(name))
        }
        Op::SemAcquire { limit, permits, .. } => {
            (1..=1_000_000).contains(limit) && (1..=*limit).contains(permits)
        }
        Op::WaypointReserve {
            start_ms: Some(start_ms),
            end_ms: Some(end_ms),
            ..
        } if end_ms <= start_ms => false,
        Op::RouteReserve { volumes, .. } | Op::RouteAmend { volumes, .. } => {
            (1..=64).contains(&volumes.len()) && volumes.iter().all(|v| v.end_ms > v.start_ms)
        }
        Op::BarrierEnter { count, .. } => *count >= 1,
        Op::WaypointReserve {
            lat,
            lon,
            alt_min_m,
            alt_max_m,
            radius_m,
            ..
        } => match (lat, lon) {
            (Some(_), Some(_)) => {
                !matches!((alt_min_m, alt_max_m), (Some(low), Some(high)) if low > high)
            }
            (None, None) => radius_m.is_none() && alt_min_m.is_none() && alt_max_m.is_none(),
            _ => false,
        },
        _ => true,
    }
}

// ------------------------------------------------------------------------------------------
// The harness: resolves steps into log entries, applies them to both, compares.
// ------------------------------------------------------------------------------------------

/// How often each kind of outcome happened, to show the generator reaches every path.
type Tally = BTreeMap<String, u64>;

struct Harness {
    /// The limits the machine and the replicas start with.
    limits: Limits,
    sm: StateMachine,
    model: Model,
    /// The leader's wall clock: what the next entry is stamped with.
    wall_ms: u64,
    term: u64,
    index: u64,
    next_request: u64,
    /// Write requests sent so far, `(agent, id, op)`, for retries and cancellations.
    sent: Vec<(usize, String, Op)>,
    /// The final reply to each `(agent, id)`, as the machine first gave it (message included).
    final_replies: BTreeMap<(String, String), Reply>,
    /// The requests the machine reported `Event::Queued` for and has not answered with an
    /// `Event::Respond` yet, with the resource: what a node's waiters gauge would count.
    queued: BTreeMap<(String, String), ResourceKey>,
    /// The generation of each barrier's newest round so far.
    generations: BTreeMap<String, u64>,
    /// The log, and what the machine answered to each entry, for the replicas.
    log: Vec<(LogMeta, Command)>,
    outputs: Vec<(Reply, Vec<Event>)>,
    /// One line per step, printed when a comparison fails.
    trace: Vec<String>,
    tally: Tally,
}

impl Harness {
    fn new(limits: Limits) -> Self {
        Harness {
            sm: StateMachine::new(limits.clone()),
            model: Model::new(limits.clone()),
            limits,
            wall_ms: START_MS,
            term: 1,
            index: 0,
            next_request: 0,
            sent: Vec::new(),
            final_replies: BTreeMap::new(),
            queued: BTreeMap::new(),
            generations: BTreeMap::new(),
            log: Vec::new(),
            outputs: Vec::new(),
            trace: Vec::new(),
            tally: Tally::new(),
        }
    }

    fn count(&mut self, label: impl Into<String>) {
        *self.tally.entry(label.into()).or_default() += 1;
    }

    /// The last steps, for a failure message.
    fn recent_trace(&self) -> String {
        let start = self.trace.len().saturating_sub(60);
        self.trace[start..].join("\n")
    }

    fn run_step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match step.clock {
            Clock::Forward(ms) | Clock::Jump(ms) => self.wall_ms += ms,
            Clock::Backward(ms) => {
                self.wall_ms = self.wall_ms.saturating_sub(ms);
                self.count("clock went backwards");
            }
        }
        if step.new_term {
            self.term += 1;
        }
        let command = match &step.action {
            Action::Restore => return self.restore(),
            Action::AgentRequest { agent, op } => {
                let op = self.build_op(*agent, op);
                self.new_request(*agent, op)
            }
            Action::Retry { back, same_op, op } => {
                let Some((agent, id, first_op)) = pick_recent(&self.sent, *back).cloned() else {
                    return Ok(());
                };
                let op = if *same_op {
                    first_op
                } else {
                    self.build_op(agent, op)
                };
                self.count("retry");
                self.request_command(agent, id, op)
            }
            Action::Expire { term, leases } => {
                let term = match term {
                    TermPick::Current => self.term,
                    TermPick::Stale(k) => self.term.saturating_sub(1 + k),
                };
                let leases = match leases {
                    ExpirePick::EveryKnown => self
                        .model
                        .leases_ever
                        .iter()
                        .map(|(id, _)| LeaseId(*id))
                        .collect(),
                    ExpirePick::Some(picks) => picks
                        .iter()
                        .filter_map(|k| pick_recent(&self.model.leases_ever, *k))
                        .map(|(id, _)| LeaseId(*id))
                        .collect(),
                };
                Command::ExpireLeases { term, leases }
            }
            Action::ExpireAtDeadline { back, early_ms } => {
                let deadlines: Vec<(u64, u64)> = self
                    .model
                    .leases
                    .iter()
                    .map(|lease| (lease.id, lease.granted_ms + lease.ttl_ms))
                    .collect();
                let labels = ["expire at the deadline", "expire 1 ms before the deadline"];
                let Some(lease) = self.stamp_at_deadline(deadlines, *back, *early_ms, labels)
                else {
                    return Ok(());
                };
                Command::ExpireLeases {
                    term: self.term,
                    leases: vec![LeaseId(lease)],
                }
            }
            Action::ExpireWaits { term } => {
                let term = match term {
                    TermPick::Current => self.term,
                    TermPick::Stale(k) => self.term.saturating_sub(1 + k),
                };
                Command::ExpireWaits { term }
            }
            Action::ExpireWaitsAtDeadline { back, early_ms } => {
                let deadlines: Vec<((), u64)> = self
                    .model
                    .waiters
                    .iter()
                    .filter_map(|w| w.deadline_ms)
                    .map(|deadline_ms| ((), deadline_ms))
                    .collect();
                let labels = [
                    "expire waits at the deadline",
                    "expire waits 1 ms before the deadline",
                ];
                if self
                    .stamp_at_deadline(deadlines, *back, *early_ms, labels)
                    .is_none()
                {
                    return Ok(());
                }
                Command::ExpireWaits { term: self.term }
            }
            Action::AmendHeldRoute {
                back,
                legs,
                priority: level,
            } => {
                let routes: Vec<(String, String, u64)> = self
                    .model
                    .holds
                    .iter()
                    .filter(|hold| !hold.volumes.is_empty())
                    .map(|hold| (hold.agent.clone(), hold.name.clone(), hold.lease))
                    .collect();
                let Some((agent, name, lease)) = pick_recent(&routes, *back).cloned() else {
                    return Ok(());
                };
                let volumes = self.volumes(legs);
                self.amend_command((&agent, &name, lease), volumes, *level)
            }
            Action::ReleaseHeldLocks { back } => {
                let lock = ResourceKind::Lock;
                let holders: Vec<(String, u64)> = self
                    .model
                    .holds
                    .iter()
                    .filter(|hold| hold.kind == lock)
                    .map(|hold| (hold.agent.clone(), hold.lease))
                    .collect();
                let Some((agent, lease)) = pick_recent(&holders, *back).cloned() else {
                    return Ok(());
                };
                let names = self.model.holds.iter().filter(|hold| hold.lease == lease);
                let names = names
                    .filter(|hold| hold.kind == lock)
                    .map(|h| h.name.clone());
                let op = Op::LockReleaseAll {
                    names: names.collect(),
                    lease: format!("{lease:016x}"),
                };
                let agent = AGENTS
                    .iter()
                    .position(|known| *known == agent)
                    .expect("holders are known agents");
                self.new_request(agent, op)
            }
            Action::TrimHeldRoute {
                back,
                drop,
                narrow,
                queue,
            } => {
                let live_route = |model: &Model| -> Option<ModelHold> {
                    let now_ms = model.now_ms;
                    let routes: Vec<&ModelHold> = model
                        .holds
                        .iter()
                        .filter(|hold| hold.volumes.iter().any(|v| v.end_ms > now_ms))
                        .collect();
                    pick_recent(&routes, *back).map(|hold| (*hold).clone())
                };
                let Some(hold) = live_route(&self.model) else {
                    return Ok(());
                };
                // Not under the tight bounds: the extra waiter would take the few waiter slots
                // that aging and preemption need there.
                let roomy = self.model.limits.waypoint_waiters_max > 3;
                if let Some((agent, name)) = queue.filter(|_| roomy).as_ref() {
                    let now_ms = self.model.now_ms;
                    let last_live = hold.volumes.iter().rev().find(|v| v.end_ms > now_ms);
                    let v = *last_live.expect("a live route has a live volume");
                    let op = Op::WaypointReserve {
                        name: WAYPOINT_NAMES[*name].to_string(),
                        lease: self.lease_text(*agent, &LeasePick::Own(0), None),
                        lat: Some(v.lat),
                        lon: Some(v.lon),
                        alt_min_m: Some(v.alt_min_m),
                        alt_max_m: Some(v.alt_max_m),
                        radius_m: Some(v.radius_m),
                        wait_ms: Some(1_500),
                        start_ms: Some(v.start_ms),
                        end_ms: Some(v.end_ms),
                        priority: Priority::ROUTINE,
                    };
                    let command = self.new_request(*agent, op);
                    self.apply(command)?;
                }
                // The route again, as the model has it after the reserve.
                let Some(hold) = live_route(&self.model).filter(|now| now.name == hold.name) else {
                    return Ok(());
                };
                let drop = (*drop).min(hold.volumes.len() - 1);
                let mut volumes = hold.volumes[drop..].to_vec();
                if *narrow {
                    for volume in &mut volumes {
                        volume.radius_m /= 2.0;
                    }
                }
                self.amend_command(
                    (&hold.agent, &hold.name, hold.lease),
                    volumes,
                    hold.priority,
                )
            }
            Action::LeaderActs {
                name,
                resign,
                value: pick,
            } => {
                let name = ELECTION_NAMES[*name];
                let leader = self.model.holds_of(ResourceKind::Election, name).next();
                let Some((agent, token)) = leader.map(|hold| (hold.agent.clone(), hold.token))
                else {
                    return Ok(());
                };
                let agent = AGENTS
                    .iter()
                    .position(|known| *known == agent)
                    .expect("leaders are known agents");
                let op = if *resign {
                    Op::ElectionResign {
                        name: name.to_string(),
                        token,
                    }
                } else {
                    Op::ElectionProclaim {
                        name: name.to_string(),
                        token,
                        value: value(*pick),
                    }
                };
                self.new_request(agent, op)
            }
            Action::ExpireReservations { term } => {
                let term = match term {
                    TermPick::Current => self.term,
                    TermPick::Stale(k) => self.term.saturating_sub(1 + k),
                };
                Command::ExpireReservations { term }
            }
            Action::ExpireReservationsAtEnd { back, early_ms } => {
                let holds = self.model.holds.iter();
                let holds = holds.map(|hold| model_end(hold.window, &hold.volumes));
                let waiters = self.model.waiters.iter();
                let waiters = waiters.map(|w| model_end(w.window, &w.volumes));
                // Vacate deadlines of preempted holds are ends too.
                let vacates = self.model.holds.iter().map(|hold| hold.vacate_by_ms);
                let ends: Vec<((), u64)> = holds
                    .chain(waiters)
                    .chain(vacates)
                    .flatten()
                    .map(|end_ms| ((), end_ms))
                    .collect();
                let labels = [
                    "expire reservations at the end",
                    "expire reservations 1 ms before the end",
                ];
                if self
                    .stamp_at_deadline(ends, *back, *early_ms, labels)
                    .is_none()
                {
                    return Ok(());
                }
                Command::ExpireReservations { term: self.term }
            }
            Action::RevokeLockHolder { back } => {
                let holders: Vec<u64> = self
                    .model
                    .holds
                    .iter()
                    .filter(|hold| hold.kind == ResourceKind::Lock)
                    .map(|hold| hold.lease)
                    .collect();
                let Some(lease) = pick_recent(&holders, *back) else {
                    return Ok(());
                };
                let op = Op::AdminRevoke {
                    lease: format!("{lease:016x}"),
                };
                self.new_request(0, op)
            }
            Action::ExpireHoldTimes { term } => {
                let term = match term {
                    TermPick::Current => self.term,
                    TermPick::Stale(k) => self.term.saturating_sub(1 + k),
                };
                Command::ExpireHoldTimes { term }
            }
            Action::ExpireHoldTimesAtDeadline { back, early_ms } => {
                let holds = self.model.holds.iter();
                let holds = holds.filter_map(|hold| hold.max_hold_until_ms);
                let delays = self.model.lock_delays.iter().map(|(_, until_ms)| *until_ms);
                let ends: Vec<((), u64)> = holds.chain(delays).map(|end_ms| ((), end_ms)).collect();
                let labels = [
                    "expire hold times at the deadline",
                    "expire hold times 1 ms before the deadline",
                ];
                if self
                    .stamp_at_deadline(ends, *back, *early_ms, labels)
                    .is_none()
                {
                    return Ok(());
                }
                Command::ExpireHoldTimes { term: self.term }
            }
            Action::CancelWait { back, unknown_id } => {
                let Some((agent, id, _)) = pick_recent(&self.sent, *back).cloned() else {
                    return Ok(());
                };
                let request_id = if *unknown_id {
                    "never-sent".to_string()
                } else {
                    id
                };
                Command::CancelWait {
                    agent: AGENTS[agent].to_string(),
                    request_id,
                }
            }
            Action::Configure { preset } => Command::Configure {
                limits: preset_limits(*preset),
                kv: None,
            },
        };
        self.apply(command)
    }

    /// Picks the `back`-th nearest of `deadlines` (`(what, deadline_ms)`) still ahead of the
    /// machine clock (and within one step of it), less `early_ms`, and stamps the next entry so
    /// that the machine's clock lands there: a small step of the clock, not an hour's. Counts
    /// `labels[0]` at the deadline, `labels[1]` 1 ms before.
    fn stamp_at_deadline<T: Copy>(
        &mut self,
        deadlines: Vec<(T, u64)>,
        back: usize,
        early_ms: u64,
        labels: [&'static str; 2],
    ) -> Option<T> {
        let now_ms = self.model.now_ms;
        let step_ms_max = self.model.limits.lease_ttl_ms_max;
        let mut targets: Vec<(T, u64)> = deadlines
            .into_iter()
            .map(|(what, deadline_ms)| (what, deadline_ms - early_ms))
            .filter(|(_, target_ms)| (now_ms..=now_ms + step_ms_max).contains(target_ms))
            .collect();
        targets.sort_by_key(|(_, target_ms)| std::cmp::Reverse(*target_ms));
        let (what, target_ms) = pick_recent(&targets, back).copied()?;
        self.wall_ms = self.model.stamp_last_ms + (target_ms - now_ms);
        self.count(labels[usize::from(early_ms != 0)]);
        Some(what)
    }

    /// `op` from `agent` under a request id not used before.
    fn new_request(&mut self, agent: usize, op: Op) -> Command {
        self.next_request += 1;
        let id = format!("r{}", self.next_request);
        self.request_command(agent, id, op)
    }

    /// The holder of route `hold` amends it to `volumes` at priority `level`.
    fn amend_command(
        &mut self,
        hold: (&str, &str, u64),
        volumes: Vec<Volume>,
        level: u8,
    ) -> Command {
        let (agent, name, lease) = hold;
        let agent = AGENTS
            .iter()
            .position(|known| *known == agent)
            .expect("holders are known agents");
        let op = Op::RouteAmend {
            name: name.to_string(),
            lease: format!("{lease:016x}"),
            volumes,
            priority: priority(level),
        };
        self.new_request(agent, op)
    }

    fn request_command(&mut self, agent: usize, id: String, op: Op) -> Command {
        self.sent.push((agent, id.clone(), op.clone()));
        Command::Request {
            agent: AGENTS[agent].to_string(),
            request: AgentRequest {
                id,
                op,
                secret_hash: None,
            },
        }
    }

    /// Applies one entry to the machine and the model and compares everything.
    fn apply(&mut self, command: Command) -> Result<(), TestCaseError> {
        self.index += 1;
        let meta = LogMeta {
            index: self.index,
            term: self.term,
            now_ms: self.wall_ms,
        };
        self.trace.push(format!(
            "  #{} term {} stamped {} ms: {}",
            meta.index,
            meta.term,
            meta.now_ms,
            describe(&command)
        ));
        let (reply, events) = self.sm.apply(meta, command.clone()).map_err(|e| {
            TestCaseError::fail(format!("apply failed: {e}\n{}", self.recent_trace()))
        })?;

        let expected = self.model.apply(meta, &command);
        if expected.forgot_idle > 0 {
            self.count("idle agents forgotten by the sweep");
        }
        self.log.push((meta, command.clone()));
        self.outputs.push((reply.clone(), events.clone()));

        prop_assert_eq!(
            outcome_of(&reply),
            expected.outcome.clone(),
            "reply to the last entry (left: machine, right: model), full reply {:?}\n{}",
            reply,
            self.recent_trace()
        );
        let responds = responds_of(&events);
        prop_assert_eq!(
            &responds,
            &expected.responds,
            "deferred answers of the last entry (left: machine, right: model), events {:?}\n{}",
            events,
            self.recent_trace()
        );
        let ended: Vec<(String, u64, LeaseEnd)> = events
            .iter()
            .filter_map(|event| match event {
                Event::LeaseEnded {
                    agent,
                    lease,
                    reason,
                } => Some((agent.to_string(), lease.0, *reason)),
                _ => None,
            })
            .collect();
        prop_assert_eq!(
            &ended,
            &expected.ended,
            "leases ended by the last entry (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        prop_assert_eq!(
            &preempted_of(&events),
            &expected.preempted,
            "reservations preempted by the last entry (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        prop_assert_eq!(
            &withdrawn_of(&events),
            &expected.withdrawn,
            "preemptions withdrawn by the last entry (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        if let Command::Request { agent, request } = &command {
            let key = (agent.clone(), request.id.clone());
            if !expected.replayed && self.final_replies.contains_key(&key) {
                self.count("retry ran again: its outcome was forgotten");
            }
            if expected.replayed && reply != Reply::Queued {
                prop_assert_eq!(
                    Some(&reply),
                    self.final_replies.get(&key),
                    "a retry must get exactly the first final reply\n{}",
                    self.recent_trace()
                );
            }
            if expected.remembered {
                self.final_replies.insert(key, reply.clone());
            }
        }
        // A new queue slot, and only that, is an `Event::Queued`; every `Event::Respond`
        // answers one, on the same resource: the node's waiters gauge follows these alone.
        let queued_events = events
            .iter()
            .filter(|event| matches!(event, Event::Queued { .. }))
            .count();
        prop_assert_eq!(
            queued_events,
            usize::from(reply == Reply::Queued && !expected.replayed),
            "Event::Queued exactly when a request joins a queue, events {:?}\n{}",
            events,
            self.recent_trace()
        );
        if events.iter().any(|event| {
            matches!(
                event,
                Event::Released {
                    reason: ReleaseReason::Preempted,
                    ..
                }
            )
        }) {
            self.count("a preempted reservation ended at its deadline");
        }
        self.check_hold_times(&command, &events, &expected)?;
        for event in events.iter() {
            match event {
                Event::Queued {
                    key,
                    agent,
                    request_id,
                } => {
                    let waiter = (agent.to_string(), request_id.clone());
                    let before = self.queued.insert(waiter, key.clone());
                    prop_assert!(before.is_none(), "queued twice\n{}", self.recent_trace());
                }
                Event::Respond {
                    key,
                    agent,
                    request_id,
                    reply,
                } => {
                    let waiter = (agent.to_string(), request_id.clone());
                    let was_queued_on = self.queued.remove(&waiter);
                    prop_assert_eq!(
                        was_queued_on.as_ref(),
                        Some(key),
                        "a Respond answers a Queued on the same resource\n{}",
                        self.recent_trace()
                    );
                    self.final_replies.insert(waiter, reply.clone());
                }
                _ => {}
            }
        }
        self.check_generations(&events)?;
        self.tally_step(&command, &expected);
        self.check_machine()
    }

    /// No lock is granted while the model holds it back by a lock-delay, and the holds the
    /// entry ended by max-hold are the ones whose deadline the model says passed, no sooner.
    fn check_hold_times(
        &mut self,
        command: &Command,
        events: &[Event],
        expected: &ModelStep,
    ) -> Result<(), TestCaseError> {
        if let Command::Request { request, .. } = command
            && let Op::LockAcquire { wait_ms, .. } | Op::LockAcquireAll { wait_ms, .. } =
                &request.op
            && lock_names(&request.op)
                .iter()
                .any(|name| self.model.held_back(name))
        {
            let multi = matches!(request.op, Op::LockAcquireAll { .. });
            let label = match (wait_ms, &expected.outcome, multi) {
                (Some(0), Outcome::Refused { .. }, false) => "a try of a held-back lock refused",
                (_, Outcome::Queued, false) => "an acquire of a held-back lock queued",
                (Some(0), Outcome::Refused { .. }, true) => {
                    "a multi-lock try of a held-back lock refused"
                }
                (_, Outcome::Queued, true) => "a multi-lock of a held-back lock queued",
                _ => "an acquire of a held-back lock",
            };
            self.count(label);
        }
        self.tally_joined_hold_times(events);
        for event in events {
            match event {
                Event::Granted { key, .. } if key.kind == ResourceKind::Lock => {
                    prop_assert!(
                        !self.model.held_back(&key.name),
                        "{} granted inside its lock-delay\n{}",
                        key,
                        self.recent_trace()
                    );
                    if matches!(
                        expected.outcome,
                        Outcome::HoldTimesEnded {
                            lock_delays: 1..,
                            ..
                        }
                    ) {
                        self.count("a lock granted at the end of its lock-delay");
                    }
                }
                Event::Released {
                    key,
                    token,
                    reason: ReleaseReason::MaxHold,
                    ..
                } => {
                    prop_assert!(
                        !self.model.holds.iter().any(|hold| hold.token == *token),
                        "{} token {} ended by max-hold, the model still holds it\n{}",
                        key,
                        token,
                        self.recent_trace()
                    );
                    self.count(format!("{} ended at its max-hold", key.kind.as_str()));
                }
                _ => {}
            }
        }
        if !self.model.lock_delays.is_empty() {
            self.count("a lock held back");
        }
        Ok(())
    }

    /// The paths where hold times meet lock modes and multi-locks.
    fn tally_joined_hold_times(&mut self, events: &[Event]) {
        let lock = ResourceKind::Lock;
        let mut labels = Vec::new();
        let mut max_hold_tokens: Vec<u64> = Vec::new();
        for event in events {
            if let Event::Released {
                key,
                token,
                reason: ReleaseReason::MaxHold,
                ..
            } = event
                && key.kind == lock
            {
                if max_hold_tokens.contains(token) {
                    labels.push("a multi-lock's holds ended together at its max-hold");
                }
                max_hold_tokens.push(*token);
                if self
                    .model
                    .holds_of(lock, &key.name)
                    .any(|h| !h.mode.is_exclusive())
                {
                    labels.push("a shared hold ended at its max-hold, others still held");
                }
            }
        }
        for (name, _) in &self.model.lock_delays {
            if self.model.holds_of(lock, name).next().is_some() {
                labels.push("a lock held back beside its shared holders");
            }
            let multi_waits = self.model.waiters_of(lock, name);
            if multi_waits.into_iter().any(|w| w.lock_names.len() > 1) {
                labels.push("a multi-lock waits for a held-back lock");
            }
        }
        for label in labels {
            self.count(label);
        }
    }

    /// The members a barrier's round admits in one entry share one generation, above every
    /// earlier round's of that barrier (forgotten in between or not).
    fn check_generations(&mut self, events: &[Event]) -> Result<(), TestCaseError> {
        let mut passed: BTreeMap<String, u64> = BTreeMap::new();
        for event in events {
            if let Event::Granted { key, token, .. } = event
                && key.kind == ResourceKind::Barrier
            {
                let generation = *passed.entry(key.name.to_string()).or_insert(*token);
                prop_assert_eq!(
                    generation,
                    *token,
                    "one generation per round\n{}",
                    self.recent_trace()
                );
            }
        }
        for (name, generation) in passed {
            let before = self.generations.insert(name, generation);
            prop_assert!(
                before.is_none_or(|before| before < generation),
                "generations increase: {:?} then {}\n{}",
                before,
                generation,
                self.recent_trace()
            );
        }
        Ok(())
    }

    fn tally_step(&mut self, command: &Command, expected: &ModelStep) {
        let label = match (&expected.outcome, command) {
            (Outcome::Refused { code }, _) => format!("refused: {code}"),
            (Outcome::Expired { leases }, _) if leases.is_empty() => "expired none".into(),
            (Outcome::Expired { .. }, _) => "expired some".into(),
            (Outcome::Cancelled { cancelled }, _) => format!("cancelled: {cancelled}"),
            (Outcome::WaitsExpired { count: 0 }, _) => "waits expired: none".into(),
            (Outcome::WaitsExpired { .. }, _) => "waits expired: some".into(),
            (Outcome::ReservationsEnded { count: 0 }, _) => "reservations ended: none".into(),
            (Outcome::ReservationsEnded { .. }, _) => "reservations ended: some".into(),
            (
                Outcome::HoldTimesEnded {
                    max_holds,
                    lock_delays,
                },
                _,
            ) => format!(
                "hold times ended: {} max-hold, {} lock-delay",
                if *max_holds > 0 { "some" } else { "no" },
                if *lock_delays > 0 { "some" } else { "no" }
            ),
            (
                Outcome::Granted { .. },
                Command::Request {
                    request:
                        AgentRequest {
                            op:
                                Op::WaypointReserve {
                                    start_ms: Some(start_ms),
                                    ..
                                },
                            ..
                        },
                    ..
                },
            ) if *start_ms > self.model.now_ms => "granted a future window at once".into(),
            (Outcome::Granted { .. }, _) => "granted at once".into(),
            (outcome, _) => format!("{outcome:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        self.count(label);
        if let Command::ExpireWaits { term } = command {
            if *term < self.term {
                self.count("stale wait expiry");
            } else if self.model.wait_deadline_next_ms().is_some() {
                self.count("wait expiry left a wait alone");
            }
        }
        if let Command::ExpireLeases { term, .. } = command
            && *term < self.term
        {
            self.count("stale expire");
        }
        if let Command::ExpireHoldTimes { term } = command {
            if *term < self.term {
                self.count("stale hold-time expiry");
            } else if self.model.hold_time_next_ms().is_some() {
                self.count("hold-time expiry left a deadline alone");
            }
        }
        if let Command::Request { request, .. } = command
            && !expected.replayed
        {
            let election = match (&request.op, &expected.outcome) {
                (Op::ElectionCampaign { .. }, Outcome::Granted { .. }) => {
                    Some("election: led at once")
                }
                (Op::ElectionCampaign { .. }, Outcome::Queued) => Some("election: campaign queued"),
                (Op::ElectionProclaim { .. }, Outcome::Proclaimed { .. }) => {
                    Some("election: proclaimed")
                }
                (Op::ElectionProclaim { .. }, Outcome::Refused { code }) => match code {
                    ErrorCode::NotHolder => Some("election: proclaim refused not_holder"),
                    ErrorCode::BadRequest => Some("election: value too long"),
                    _ => None,
                },
                (Op::ElectionResign { .. }, Outcome::Done) => Some("election: resigned"),
                (Op::ElectionResign { .. }, Outcome::Refused { .. }) => {
                    Some("election: resign refused not_holder")
                }
                _ => None,
            };
            if let Some(label) = election {
                self.count(label);
            }
        }
        let handed_over = expected
            .responds
            .iter()
            .any(|respond| match respond.outcome {
                Outcome::Granted { token } => self
                    .model
                    .holds
                    .iter()
                    .any(|hold| hold.kind == ResourceKind::Election && hold.token == token),
                _ => false,
            });
        if handed_over {
            self.count("election: a candidate leads");
        }
        if let Command::Request { request, .. } = command {
            let route = match (&request.op, &expected.outcome) {
                (Op::RouteReserve { .. }, Outcome::Granted { .. }) if !expected.replayed => {
                    Some("route granted at once")
                }
                (Op::RouteReserve { .. }, Outcome::Queued) => Some("route queued"),
                (Op::RouteAmend { .. }, Outcome::Granted { .. }) => Some("route amended"),
                (Op::RouteAmend { .. }, Outcome::Refused { code }) => match code {
                    ErrorCode::WouldBlock => Some("route amend would block"),
                    ErrorCode::NotHolder => Some("route amend of a route not held"),
                    _ => None,
                },
                _ => None,
            };
            if let Some(label) = route {
                self.count(label);
            }
        }
        let route_grants_from_queues = expected
            .responds
            .iter()
            .filter(|respond| matches!(respond.outcome, Outcome::Granted { .. }))
            .filter(|respond| {
                self.model
                    .holds
                    .iter()
                    .any(|hold| !hold.volumes.is_empty() && hold.agent == respond.agent)
            })
            .count();
        if route_grants_from_queues > 0 {
            self.count("a queued route granted");
        }
        if let Command::ExpireReservations { term } = command {
            if *term < self.term {
                self.count("stale reservation expiry");
            } else if self.model.reservation_end_next_ms().is_some() {
                self.count("reservation expiry left a window alone");
            }
        }
        if let Command::ExpireLeases { term, leases } = command
            && *term >= self.term
            && leases
                .iter()
                .any(|named| self.model.leases.iter().any(|lease| lease.id == named.0))
        {
            self.count("expire left a young lease alone");
        }
        let grants_from_queues = expected
            .responds
            .iter()
            .filter(|respond| matches!(respond.outcome, Outcome::Granted { .. }))
            .count();
        if grants_from_queues >= 2 {
            self.count("several queued grants in one entry");
        }
        if expected.replayed {
            let label = match expected.outcome {
                Outcome::Queued => "replayed: queued",
                _ => "replayed: final",
            };
            self.count(label);
        }
        for note in &expected.barrier_notes {
            self.count(*note);
        }
        for respond in &expected.responds {
            let label = match &respond.outcome {
                Outcome::Granted { .. } => "respond: granted".to_string(),
                Outcome::Passed { .. } => "respond: passed".to_string(),
                Outcome::Refused { code } => format!("respond: {code}"),
                other => format!("respond: {other:?}"),
            };
            self.count(label);
        }
        let waypoint_waiters = self
            .model
            .waiters
            .iter()
            .filter(|w| w.kind == ResourceKind::Waypoint)
            .count();
        if waypoint_waiters >= 2 {
            self.count("two waypoint waiters");
        }
        if !expected.preempted.is_empty() {
            self.count("preempted");
        }
        if !expected.withdrawn.is_empty() {
            self.count("preemption withdrawn");
        }
        if expected.inherited {
            self.count("a preemption through a waiter ahead");
        }
        if expected.kept_before_waiter {
            self.count("route amend kept a volume a waiter waits for");
        }
        self.tally_locks(command, expected);
        let overtaken = WAYPOINT_NAMES.iter().any(|name| {
            let queue = self.model.queue_of(ResourceKind::Waypoint, name);
            queue.windows(2).any(|pair| pair[0].seq > pair[1].seq)
        });
        if overtaken {
            self.count("a waiter overtaken by a higher priority");
        }
    }

    /// The read-write and multi-lock paths an entry took.
    fn tally_locks(&mut self, command: &Command, expected: &ModelStep) {
        let granted = matches!(expected.outcome, Outcome::Granted { .. }) && !expected.replayed;
        if let Command::Request { request, .. } = command {
            let label = match (&request.op, &expected.outcome) {
                (Op::LockAcquire { mode, .. }, _) if granted && !mode.is_exclusive() => {
                    Some("shared lock granted at once")
                }
                (Op::LockAcquireAll { names, .. }, _) if granted && names.len() > 1 => {
                    Some("multi-lock granted at once")
                }
                (Op::LockAcquireAll { names, .. }, Outcome::Queued)
                    if names.len() > 1 && !expected.replayed =>
                {
                    Some("multi-lock queued")
                }
                (Op::LockDowngrade { .. }, _) if granted => Some("lock downgraded"),
                (Op::LockReleaseAll { names, .. }, Outcome::Done) if names.len() > 1 => {
                    Some("locks released together")
                }
                _ => None,
            };
            if let Some(label) = label {
                self.count(label);
            }
        }
        let lock = ResourceKind::Lock;
        let holds_of_token = |token: u64| {
            let holds = self.model.holds.iter();
            holds.filter(move |hold| hold.kind == lock && hold.token == token)
        };
        let granted_tokens: Vec<u64> = expected
            .responds
            .iter()
            .filter_map(|respond| match respond.outcome {
                Outcome::Granted { token } => Some(token),
                _ => None,
            })
            .collect();
        let mut labels = Vec::new();
        if granted_tokens
            .iter()
            .any(|token| holds_of_token(*token).count() > 1)
        {
            labels.push("a queued multi-lock granted");
        }
        let shared_grants = granted_tokens
            .iter()
            .filter(|token| holds_of_token(**token).any(|hold| !hold.mode.is_exclusive()))
            .count();
        if shared_grants > 1 {
            labels.push("several shared waiters granted in one entry");
        }
        for name in LOCK_NAMES {
            let holds: Vec<&ModelHold> = self.model.holds_of(lock, name).collect();
            let queue = self.model.queue_of(lock, name);
            let shared_held = !holds.is_empty() && holds.iter().all(|h| !h.mode.is_exclusive());
            if holds.len() > 1 {
                labels.push("shared holders together");
            }
            if shared_held && queue.first().is_some_and(|w| w.mode.is_exclusive()) {
                labels.push("a writer waits for readers");
                if queue.iter().any(|w| !w.mode.is_exclusive()) {
                    labels.push("a reader waits behind a writer");
                }
            }
            if holds.is_empty() && !queue.is_empty() {
                labels.push("a multi-lock waits on a free lock");
            }
        }
        for label in labels {
            self.count(label);
        }
    }

    fn restore(&mut self) -> Result<(), TestCaseError> {
        let bytes = self.sm.snapshot();
        let restored = StateMachine::restore(&bytes).map_err(|e| {
            TestCaseError::fail(format!("restore failed: {e}\n{}", self.recent_trace()))
        })?;
        prop_assert!(
            restored.snapshot() == bytes,
            "restore(snapshot) must give the same snapshot"
        );
        self.sm = restored;
        self.trace.push(format!(
            "  (restored from a snapshot after #{})",
            self.index
        ));
        self.count("restore");
        self.check_machine()
    }

    /// Invariants, then the whole visible state against the model.
    fn check_machine(&mut self) -> Result<(), TestCaseError> {
        if let Err(broken) = self.sm.check_invariants() {
            return Err(TestCaseError::fail(format!(
                "check_invariants: {broken}\n{}",
                self.recent_trace()
            )));
        }
        prop_assert_eq!(self.sm.applied_index(), self.model.index);
        let counts = self.sm.waiter_counts();
        for kind in KINDS {
            let in_model = self.model.waiters.iter().filter(|w| w.kind == kind).count();
            let from_events = self.queued.values().filter(|key| key.kind == kind).count();
            prop_assert_eq!(
                (counts.get(kind), counts.get(kind)),
                (in_model, from_events),
                "{} waiters (left: waiter_counts, right: model and Queued - Respond)\n{}",
                kind.as_str(),
                self.recent_trace()
            );
        }
        prop_assert_eq!(
            self.sm.now_ms(),
            self.model.now_ms,
            "the machine's clock: the first stamp plus every clamped step"
        );
        prop_assert_eq!(
            self.sm.wait_deadline_next_ms(),
            self.model.wait_deadline_next_ms(),
            "the earliest wait deadline (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        prop_assert_eq!(
            self.sm.reservation_end_next_ms(),
            self.model.reservation_end_next_ms(),
            "the earliest window end (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        prop_assert_eq!(
            self.sm.hold_time_next_ms(),
            self.model.hold_time_next_ms(),
            "the earliest max-hold or lock-delay end (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        let leases: Vec<(u64, String, u64)> = self
            .sm
            .leases()
            .map(|(id, agent, ttl_ms)| (id.0, agent.to_string(), ttl_ms))
            .collect();
        let expected: Vec<(u64, String, u64)> = self
            .model
            .leases
            .iter()
            .map(|lease| (lease.id, lease.agent.clone(), lease.ttl_ms))
            .collect();
        prop_assert_eq!(leases, expected, "live leases\n{}", self.recent_trace());
        for kind in KINDS {
            for name in ALL_NAMES {
                let op = Op::Inspect {
                    kind,
                    name: name.to_string(),
                };
                prop_assert_eq!(
                    outcome_of(&self.sm.query("a0", &op)),
                    self.model.inspect(kind, name),
                    "inspect {} {:?} (left: machine, right: model)\n{}",
                    kind.as_str(),
                    name,
                    self.recent_trace()
                );
                for token in self.model.fence_tokens(kind, name) {
                    let op = Op::FenceCheck {
                        name: name.to_string(),
                        kind,
                        token,
                    };
                    prop_assert_eq!(
                        outcome_of(&self.sm.query("a0", &op)),
                        self.model.fence(kind, name, token),
                        "fence.check {} {:?} token {}\n{}",
                        kind.as_str(),
                        name,
                        token,
                        self.recent_trace()
                    );
                }
            }
        }
        // Elections: the leader as `election.leader` reads it, and its `$election/` key.
        for name in ELECTION_NAMES {
            let op = Op::ElectionLeader {
                name: name.to_string(),
            };
            prop_assert_eq!(
                outcome_of(&self.sm.query("a0", &op)),
                self.model.leader(name),
                "election.leader {:?} (left: machine, right: model)\n{}",
                name,
                self.recent_trace()
            );
        }
        prop_assert_eq!(
            self.sm
                .key_space()
                .range(hivekeeper_protocol::kv::ELECTION_KEY_PREFIX, None, 100)
                .kvs,
            self.model.mirror_keys(),
            "the $election/ keys (left: machine, right: model)\n{}",
            self.recent_trace()
        );
        // airspace.query: the machine's answer from its space-and-time index, against every
        // held reservation checked pair by pair.
        for spot in SPOTS.iter().flatten() {
            for offsets in [(None, None), (Some(1_000), Some(2_000))] {
                let volume = query_volume(spot, self.model.now_ms, offsets);
                let op = Op::AirspaceQuery {
                    volume: Some(volume),
                    volumes: None,
                    after: None,
                    limit: None,
                };
                prop_assert_eq!(
                    query_rows(&self.sm.query("a0", &op)),
                    self.model.airspace_query(&volume, self.model.now_ms),
                    "airspace.query over {:?} (left: machine, right: model)\n{}",
                    volume,
                    self.recent_trace()
                );
            }
        }
        let lease_texts = self
            .model
            .leases_ever
            .iter()
            .map(|(id, _)| format!("{id:016x}"))
            .chain(UNKNOWN_LEASES.iter().map(|text| text.to_string()));
        for lease in lease_texts {
            for agent in AGENTS {
                let op = Op::LeaseKeepalive {
                    lease: lease.clone(),
                };
                prop_assert_eq!(
                    outcome_of(&self.sm.query(agent, &op)),
                    self.model.keepalive(agent, &lease),
                    "keepalive of {} by {}\n{}",
                    lease,
                    agent,
                    self.recent_trace()
                );
            }
        }
        Ok(())
    }

    /// Two more replicas: one fed the whole log, one restored from a snapshot taken halfway.
    /// Both must answer every entry as the machine did and end with the same snapshot bytes.
    fn check_replicas(&self) -> Result<(), TestCaseError> {
        let final_bytes = self.sm.snapshot();
        let mut replica = StateMachine::new(self.limits.clone());
        self.replay_into(&mut replica, 0, "replica")?;
        prop_assert!(
            replica.snapshot() == final_bytes,
            "a replica fed the same log must end with the same snapshot"
        );
        let half = self.log.len() / 2;
        let mut early = StateMachine::new(self.limits.clone());
        for (meta, command) in &self.log[..half] {
            early
                .apply(*meta, command.clone())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let mut late = StateMachine::restore(&early.snapshot())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.replay_into(&mut late, half, "restored replica")?;
        prop_assert!(
            late.snapshot() == final_bytes,
            "a replica restored at entry {} and fed the rest must end with the same snapshot",
            half
        );
        Ok(())
    }

    fn replay_into(
        &self,
        replica: &mut StateMachine,
        from: usize,
        what: &str,
    ) -> Result<(), TestCaseError> {
        for ((meta, command), output) in self.log[from..].iter().zip(&self.outputs[from..]) {
            let got = replica
                .apply(*meta, command.clone())
                .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
            prop_assert_eq!(
                &got,
                output,
                "{} answered entry {} differently",
                what,
                meta.index
            );
        }
        Ok(())
    }

    // --- resolving generated steps --------------------------------------------------------

    fn build_op(&self, agent: usize, spec: &OpSpec) -> Op {
        use ResourceKind::{Barrier, Election, Lock, Sem, Waypoint};
        let lease = |pick: &LeasePick, resource: Option<(ResourceKind, &str)>| {
            self.lease_text(agent, pick, resource)
        };
        match spec {
            OpSpec::LeaseGrant {
                ttl_ms,
                lock_delay_ms,
            } => Op::LeaseGrant {
                ttl_ms: *ttl_ms,
                lock_delay_ms: *lock_delay_ms,
            },
            OpSpec::LeaseRevoke { lease: pick } => Op::LeaseRevoke {
                lease: lease(pick, None),
            },
            OpSpec::AdminRevoke { lease: pick } => Op::AdminRevoke {
                lease: lease(pick, None),
            },
            OpSpec::LockAcquire {
                name,
                lease: pick,
                wait,
                shared,
                max_hold_ms,
            } => Op::LockAcquire {
                name: LOCK_NAMES[*name].to_string(),
                lease: lease(pick, Some((Lock, LOCK_NAMES[*name]))),
                wait_ms: wait.wait_ms(),
                max_hold_ms: *max_hold_ms,
                mode: lock_mode(*shared),
            },
            OpSpec::LockRelease { name, lease: pick } => Op::LockRelease {
                name: LOCK_NAMES[*name].to_string(),
                lease: lease(pick, Some((Lock, LOCK_NAMES[*name]))),
            },
            OpSpec::LockDowngrade { name, lease: pick } => Op::LockDowngrade {
                name: LOCK_NAMES[*name].to_string(),
                lease: lease(pick, Some((Lock, LOCK_NAMES[*name]))),
            },
            OpSpec::LockAcquireAll {
                names,
                lease: pick,
                wait,
                shared,
                max_hold_ms,
            } => Op::LockAcquireAll {
                names: names.iter().map(|i| LOCK_NAMES[*i].to_string()).collect(),
                lease: lease(pick, Some((Lock, LOCK_NAMES[names[0]]))),
                wait_ms: wait.wait_ms(),
                max_hold_ms: *max_hold_ms,
                mode: lock_mode(*shared),
            },
            OpSpec::LockReleaseAll { names, lease: pick } => Op::LockReleaseAll {
                names: names.iter().map(|i| LOCK_NAMES[*i].to_string()).collect(),
                lease: lease(pick, Some((Lock, LOCK_NAMES[names[0]]))),
            },
            OpSpec::SemAcquire {
                name,
                limit,
                permits,
                lease: pick,
                wait,
                max_hold_ms,
            } => Op::SemAcquire {
                name: SEM_NAMES[*name].to_string(),
                limit: SEM_LIMITS[*limit],
                lease: lease(pick, Some((Sem, SEM_NAMES[*name]))),
                permits: *permits,
                wait_ms: wait.wait_ms(),
                max_hold_ms: *max_hold_ms,
            },
            OpSpec::SemRelease { name, lease: pick } => Op::SemRelease {
                name: SEM_NAMES[*name].to_string(),
                lease: lease(pick, Some((Sem, SEM_NAMES[*name]))),
            },
            OpSpec::WaypointReserve {
                name,
                spot,
                lease: pick,
                wait,
                window,
                priority: level,
            } => at_priority(
                reserve_op(
                    WAYPOINT_NAMES[*name],
                    SPOTS[*spot],
                    lease(pick, Some((Waypoint, WAYPOINT_NAMES[*name]))),
                    wait.wait_ms(),
                    self.window_at(*window),
                ),
                *level,
            ),
            OpSpec::WaypointRelease { name, lease: pick } => Op::WaypointRelease {
                name: WAYPOINT_NAMES[*name].to_string(),
                lease: lease(pick, Some((Waypoint, WAYPOINT_NAMES[*name]))),
            },
            OpSpec::RouteReserve {
                name,
                legs,
                lease: pick,
                wait,
                priority: level,
            } => Op::RouteReserve {
                name: WAYPOINT_NAMES[*name].to_string(),
                lease: lease(pick, Some((Waypoint, WAYPOINT_NAMES[*name]))),
                volumes: self.volumes(legs),
                wait_ms: wait.wait_ms(),
                priority: priority(*level),
            },
            OpSpec::RouteRelease { name, lease: pick } => Op::RouteRelease {
                name: WAYPOINT_NAMES[*name].to_string(),
                lease: lease(pick, Some((Waypoint, WAYPOINT_NAMES[*name]))),
            },
            OpSpec::RouteAmend {
                name,
                legs,
                lease: pick,
                priority: level,
            } => Op::RouteAmend {
                name: WAYPOINT_NAMES[*name].to_string(),
                lease: lease(pick, Some((Waypoint, WAYPOINT_NAMES[*name]))),
                volumes: self.volumes(legs),
                priority: priority(*level),
            },
            OpSpec::ElectionCampaign {
                name,
                value: pick,
                lease: lease_pick,
                wait,
            } => Op::ElectionCampaign {
                name: ELECTION_NAMES[*name].to_string(),
                lease: lease(lease_pick, Some((Election, ELECTION_NAMES[*name]))),
                value: value(*pick),
                wait_ms: wait.wait_ms(),
            },
            OpSpec::ElectionProclaim {
                name,
                token,
                value: pick,
            } => Op::ElectionProclaim {
                name: ELECTION_NAMES[*name].to_string(),
                token: self.election_token(ELECTION_NAMES[*name], token),
                value: value(*pick),
            },
            OpSpec::ElectionResign { name, token } => Op::ElectionResign {
                name: ELECTION_NAMES[*name].to_string(),
                token: self.election_token(ELECTION_NAMES[*name], token),
            },
            OpSpec::BarrierEnter {
                name,
                count,
                lease: pick,
                wait,
            } => Op::BarrierEnter {
                name: BARRIER_NAMES[*name].to_string(),
                count: BARRIER_COUNTS[*count],
                lease: lease(pick, Some((Barrier, BARRIER_NAMES[*name]))),
                wait_ms: wait.wait_ms(),
            },
            OpSpec::BarrierLeave {
                name,
                lease: pick,
                wait,
            } => Op::BarrierLeave {
                name: BARRIER_NAMES[*name].to_string(),
                lease: lease(pick, Some((Barrier, BARRIER_NAMES[*name]))),
                wait_ms: wait.wait_ms(),
            },
            OpSpec::Malformed { which } => malformed_op(*which, lease(&LeasePick::Own(0), None)),
        }
    }

    /// The token a proclaim or resign of election `name` names.
    fn election_token(&self, name: &str, pick: &TokenPick) -> u64 {
        let kind = ResourceKind::Election;
        let never = self.model.token_last + 1;
        let leading = self
            .model
            .holds_of(kind, name)
            .next()
            .map(|hold| hold.token);
        match pick {
            TokenPick::Leading => leading.unwrap_or(never),
            TokenPick::Stale(k) => {
                let deposed: Vec<u64> = self
                    .model
                    .tokens_granted
                    .iter()
                    .filter(|(k, n, token)| *k == kind && n == name && Some(*token) != leading)
                    .map(|(_, _, token)| *token)
                    .collect();
                pick_recent(&deposed, *k).copied().unwrap_or(never)
            }
            TokenPick::Never => never,
        }
    }

    /// A route's volumes from its legs, placed in time as [`WINDOWS`] says.
    fn volumes(&self, legs: &[(usize, usize)]) -> Vec<Volume> {
        legs.iter()
            .map(|&(spot, window)| {
                let spot = SPOTS[spot].expect("legs pick spots with geometry");
                let (lat, lon) = spot.lat_lon();
                let (start_ms, end_ms) = self.window_at(window);
                let start_ms = start_ms.unwrap_or(self.model.now_ms);
                Volume {
                    lat,
                    lon,
                    radius_m: spot.radius_m,
                    alt_min_m: spot.alt_min_m.unwrap_or(-1_000.0),
                    alt_max_m: spot.alt_max_m.unwrap_or(100_000.0),
                    start_ms,
                    end_ms: end_ms.unwrap_or(start_ms + 1_000),
                }
            })
            .collect()
    }

    /// [`WINDOWS`]`[window]` placed at the model's clock, rounded down to a whole second.
    fn window_at(&self, window: usize) -> (Option<u64>, Option<u64>) {
        let now_ms = (self.model.now_ms / 1_000 * 1_000) as i64;
        let at = |offset_ms: Option<i64>| offset_ms.map(|ms| (now_ms + ms).max(0) as u64);
        let (start_ms, end_ms) = WINDOWS[window];
        (at(start_ms), at(end_ms))
    }

    /// The lease string a request names; `resource` is the resource it names, if any.
    fn lease_text(
        &self,
        agent: usize,
        pick: &LeasePick,
        resource: Option<(ResourceKind, &str)>,
    ) -> String {
        let agent_id = AGENTS[agent];
        let live: Vec<u64> = self
            .model
            .leases
            .iter()
            .filter(|lease| lease.agent == agent_id)
            .map(|lease| lease.id)
            .collect();
        let is_live = |id: &u64| self.model.leases.iter().any(|lease| lease.id == *id);
        let own: Vec<u64> = self
            .model
            .leases_ever
            .iter()
            .filter(|(_, owner)| owner == agent_id)
            .map(|(id, _)| *id)
            .collect();
        let own_ended: Vec<u64> = own.iter().copied().filter(|id| !is_live(id)).collect();
        let own_pick = |k: usize| {
            pick_recent(&live, k)
                .or_else(|| pick_recent(&own, k))
                .copied()
        };
        let unknown = || UNKNOWN_LEASES[0].to_string();
        match pick {
            LeasePick::Own(k) => own_pick(*k).map_or_else(unknown, |id| format!("{id:016x}")),
            LeasePick::Holding(k) => {
                let holding: Vec<u64> = match resource {
                    Some((kind, name)) => self
                        .model
                        .holds_of(kind, name)
                        .filter(|hold| hold.agent == agent_id)
                        .map(|hold| hold.lease)
                        .collect(),
                    None => Vec::new(),
                };
                pick_recent(&holding, *k)
                    .copied()
                    .or_else(|| own_pick(*k))
                    .map_or_else(unknown, |id| format!("{id:016x}"))
            }
            LeasePick::OwnUppercase(k) => {
                own_pick(*k).map_or_else(unknown, |id| format!("{id:016X}"))
            }
            LeasePick::OwnEnded(k) => pick_recent(&own_ended, *k)
                .copied()
                .or_else(|| own_pick(*k))
                .map_or_else(unknown, |id| format!("{id:016x}")),
            LeasePick::Foreign(k) => {
                let (mut foreign_live, foreign_ended): (Vec<u64>, Vec<u64>) = self
                    .model
                    .leases_ever
                    .iter()
                    .filter(|(_, owner)| owner != agent_id)
                    .map(|(id, _)| *id)
                    .partition(is_live);
                foreign_live.extend(foreign_ended);
                foreign_live
                    .get(*k % foreign_live.len().max(1))
                    .map_or_else(unknown, |id| format!("{id:016x}"))
            }
            LeasePick::Unknown(k) => UNKNOWN_LEASES[*k].to_string(),
        }
    }
}

/// The locks a lock or multi-lock acquire names.
fn lock_names(op: &Op) -> Vec<String> {
    match op {
        Op::LockAcquire { name, .. } => vec![name.clone()],
        Op::LockAcquireAll { names, .. } => names.clone(),
        _ => Vec::new(),
    }
}

/// The lock mode a generated request asks for.
fn lock_mode(shared: bool) -> LockMode {
    if shared {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    }
}

/// The `back`-th most recent element.
fn pick_recent<T>(items: &[T], back: usize) -> Option<&T> {
    if items.is_empty() {
        return None;
    }
    items.get(items.len() - 1 - back % items.len())
}

fn reserve_op(
    name: &str,
    spot: Option<Spot>,
    lease: String,
    wait_ms: Option<u64>,
    (start_ms, end_ms): (Option<u64>, Option<u64>),
) -> Op {
    let lat_lon = spot.map(|spot| spot.lat_lon());
    Op::WaypointReserve {
        name: name.to_string(),
        lease,
        lat: lat_lon.map(|(lat, _)| lat),
        lon: lat_lon.map(|(_, lon)| lon),
        alt_min_m: spot.and_then(|spot| spot.alt_min_m),
        alt_max_m: spot.and_then(|spot| spot.alt_max_m),
        radius_m: spot.map(|spot| spot.radius_m),
        wait_ms,
        start_ms,
        end_ms,
        priority: Priority::ROUTINE,
    }
}

/// A waypoint reservation at priority `level`.
fn at_priority(mut op: Op, level: u8) -> Op {
    if let Op::WaypointReserve { priority: p, .. } = &mut op {
        *p = priority(level);
    }
    op
}

/// Requests the protocol validation refuses.
fn malformed_op(which: usize, lease: String) -> Op {
    match which {
        0 => Op::LeaseGrant {
            ttl_ms: 0,
            lock_delay_ms: 0,
        },
        1 => Op::WaypointReserve {
            name: "pad1".into(),
            lease,
            lat: Some(BASE.0),
            lon: None,
            alt_min_m: None,
            alt_max_m: None,
            radius_m: None,
            wait_ms: None,
            start_ms: None,
            end_ms: None,
            priority: Priority::ROUTINE,
        },
        2 => Op::WaypointReserve {
            name: "pad1".into(),
            lease,
            lat: Some(BASE.0),
            lon: Some(BASE.1),
            alt_min_m: Some(30.0),
            alt_max_m: Some(10.0),
            radius_m: Some(3.0),
            wait_ms: None,
            start_ms: None,
            end_ms: None,
            priority: Priority::ROUTINE,
        },
        3 => Op::LockAcquire {
            name: "alpha".into(),
            lease,
            wait_ms: Some(WAIT_MS_MAX + 1),
            max_hold_ms: None,
            mode: LockMode::Exclusive,
        },
        _ => Op::SemAcquire {
            name: "pool".into(),
            limit: 0,
            lease,
            permits: 1,
            wait_ms: None,
            max_hold_ms: None,
        },
    }
}

/// One log entry on one line.
fn describe(command: &Command) -> String {
    match command {
        Command::Request { agent, request } => {
            format!("{agent} sends {:?}: {:?}", request.id, request.op)
        }
        other => format!("{other:?}"),
    }
}

/// Runs one case: every step compared against the model, then the replica checks.
fn run_case(case: &Case) -> Result<Tally, TestCaseError> {
    let mut harness = Harness::new(preset_limits(case.limits));
    for step in &case.steps {
        harness.run_step(step)?;
    }
    harness.check_replicas()?;
    Ok(harness.tally)
}

// ------------------------------------------------------------------------------------------
// Tests.
// ------------------------------------------------------------------------------------------

proptest! {
    // Cases come from PROPTEST_CASES (256 by default).
    #![proptest_config(ProptestConfig {
        max_shrink_iters: 20_000,
        ..ProptestConfig::default()
    })]

    /// Random logs: the machine answers and looks exactly like the naive model after every
    /// entry, keeps its invariants, and replicas agree byte for byte.
    #[test]
    fn state_machine_matches_the_naive_model(case in case(true)) {
        run_case(&case)?;
    }

    /// The same, for logs about barriers: rounds fill and pass with nobody early and nobody
    /// left behind, end when every member has left (a member gone with its lease counts as
    /// left, an arrival gone is not counted), and generations increase.
    #[test]
    fn barriers_match_the_naive_model(case in barrier_case()) {
        run_case(&case)?;
    }

    /// The same, for logs about read-write locks and multi-locks with hold times: never an
    /// exclusive holder beside anybody, strict FIFO across modes and across a multi-lock's
    /// queues, one token on every lock of a multi-lock; a lock-delay holds back every lock
    /// the ended lease held, in either mode, without taking other shared holders' holds; a
    /// max-hold ends each shared hold at its own deadline and a multi-lock's holds together.
    #[test]
    fn read_write_and_multi_locks_match_the_naive_model(case in lock_case(true)) {
        run_case(&case)?;
    }
}

/// Deterministic cases the coverage check runs. 256 since the clock steps (`clock.rs`): a
/// clock that moves again right after going back lets fewer leases pile up holds and waiters,
/// so "several queued grants in one entry" came 3 times in 256 cases, none in the first 64.
/// 512 since priority inheritance and kept route volumes: "a preemption through a waiter
/// ahead" and "route amend would block" come a few times in 512 cases, and some 256-case
/// draws miss one of them (about 14 s in debug).
const COVERAGE_CASES: usize = 512;

/// Deterministic barrier cases ([`barrier_case`]) the coverage check runs besides.
const BARRIER_COVERAGE_CASES: usize = 256;

/// Deterministic read-write and multi-lock cases ([`lock_case`]) the coverage check runs
/// besides, without hold times and with them (as for [`case`]).
const LOCK_COVERAGE_CASES: usize = 256;

/// Deterministic cases with hold times ([`case`]) the coverage check runs besides: the
/// hold-time paths, which the cases above never take, so their draws stay as they were (a few
/// paths come in only one or two of those cases, and a change to what they draw can lose one).
const HOLD_TIME_COVERAGE_CASES: usize = 256;

/// The generator reaches every interesting path (each label below happened at least once in
/// [`COVERAGE_CASES`] deterministic cases without hold times and
/// [`HOLD_TIME_COVERAGE_CASES`] with them). Run with `--nocapture` to see the tally.
#[test]
fn generator_reaches_every_path() {
    let mut total = Tally::new();
    let mut steps = 0;
    let mut cases = Vec::new();
    for (strategy, count) in [
        (case(false).boxed(), COVERAGE_CASES),
        (barrier_case().boxed(), BARRIER_COVERAGE_CASES),
        (lock_case(false).boxed(), LOCK_COVERAGE_CASES),
        (case(true).boxed(), HOLD_TIME_COVERAGE_CASES),
        (lock_case(true).boxed(), LOCK_COVERAGE_CASES),
    ] {
        // A runner of its own for each generator: what one draws never moves the other's.
        let mut runner = TestRunner::deterministic();
        for _ in 0..count {
            let tree = strategy.new_tree(&mut runner);
            cases.push(tree.expect("the case strategy never rejects").current());
        }
    }
    for case in cases {
        steps += case.steps.len();
        let tally = run_case(&case).unwrap_or_else(|failure| panic!("{failure}\n{case:#?}"));
        for (label, count) in tally {
            *total.entry(label).or_default() += count;
        }
    }
    let cases = COVERAGE_CASES
        + BARRIER_COVERAGE_CASES
        + 2 * LOCK_COVERAGE_CASES
        + HOLD_TIME_COVERAGE_CASES;
    println!("{steps} steps in {cases} cases:");
    for (label, count) in &total {
        println!("  {count:6}  {label}");
    }
    let required = [
        // No "Ttl": a keepalive is a read (`Op`), never a log entry; `check_machine`
        // queries every lease by every agent after each step instead.
        "Lease",
        "Done",
        "Queued",
        "granted at once",
        "respond: granted",
        "respond: timeout",
        "respond: lease_not_found",
        "expired some",
        "expired none",
        "stale expire",
        "cancelled: true",
        "cancelled: false",
        "replayed: queued",
        "replayed: final",
        "restore",
        "clock went backwards",
        "two waypoint waiters",
        "expire left a young lease alone",
        "several queued grants in one entry",
        "expire at the deadline",
        "expire 1 ms before the deadline",
        "waits expired: some",
        "waits expired: none",
        "stale wait expiry",
        "wait expiry left a wait alone",
        "expire waits at the deadline",
        "expire waits 1 ms before the deadline",
        "reservations ended: some",
        "reservations ended: none",
        "stale reservation expiry",
        "reservation expiry left a window alone",
        "expire reservations at the end",
        "expire reservations 1 ms before the end",
        "granted a future window at once",
        "route granted at once",
        "route queued",
        "route amended",
        "route amend would block",
        "preempted",
        "preemption withdrawn",
        "a preemption through a waiter ahead",
        "route amend kept a volume a waiter waits for",
        "a preempted reservation ended at its deadline",
        "a waiter overtaken by a higher priority",
        "route amend of a route not held",
        "election: led at once",
        "election: campaign queued",
        "election: proclaimed",
        "election: proclaim refused not_holder",
        "election: value too long",
        "election: resigned",
        "election: resign refused not_holder",
        "election: a candidate leads",
        "a queued route granted",
        "retry ran again: its outcome was forgotten",
        "idle agents forgotten by the sweep",
        "refused: bad_request",
        "refused: lease_not_found",
        "refused: forbidden",
        "refused: not_holder",
        "refused: would_block",
        "refused: limit_mismatch",
        "refused: resource_exhausted",
        "shared lock granted at once",
        "multi-lock granted at once",
        "multi-lock queued",
        "lock downgraded",
        "locks released together",
        "a queued multi-lock granted",
        "several shared waiters granted in one entry",
        "shared holders together",
        "a writer waits for readers",
        "a reader waits behind a writer",
        "a multi-lock waits on a free lock",
        "hold times ended: some max-hold, no lock-delay",
        "hold times ended: no max-hold, some lock-delay",
        "hold times ended: no max-hold, no lock-delay",
        "stale hold-time expiry",
        "hold-time expiry left a deadline alone",
        "expire hold times at the deadline",
        "expire hold times 1 ms before the deadline",
        "a lock held back",
        "a lock granted at the end of its lock-delay",
        "a try of a held-back lock refused",
        "an acquire of a held-back lock queued",
        "lock ended at its max-hold",
        "sem ended at its max-hold",
        "a multi-lock try of a held-back lock refused",
        "a multi-lock of a held-back lock queued",
        "a multi-lock's holds ended together at its max-hold",
        "a shared hold ended at its max-hold, others still held",
        "a lock held back beside its shared holders",
        "a multi-lock waits for a held-back lock",
        "Passed",
        "respond: passed",
        "barrier round passed",
        "barrier round passed while an earlier one leaves",
        "barrier round ended by its last leave",
        "barrier round ended by a lease end",
        "barrier entered again by a member",
        "barrier arrival timed out: out of the round",
        "barrier leave timed out: the member has not left",
    ];
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|label| !total.contains_key(*label))
        .collect();
    assert!(missing.is_empty(), "never reached: {missing:?}");
}
