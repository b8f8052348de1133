//! Criterion benchmarks of the pure state machine: `StateMachine::apply` alone, then
//! `snapshot()` / `restore()` of a loaded machine.
//!
//! Every timed loop applies commands built before the timer starts (in chunks, so memory stays
//! bounded), so request construction and the allocation of the inputs are not timed; what is
//! timed is `apply` itself, including dropping its `(Reply, Vec<Event>)` result. Each iteration
//! is a pair of applies (acquire + release, release + re-acquire, reserve + release), so the
//! throughput is `Elements(2)` and criterion prints applies per second.
//!
//! Before timing, each benchmark applies a round of the same commands and checks every reply
//! (`Granted` / `Done` / `Queued` as expected), so the figures are real grants, never cheap
//! refusals; after timing it checks the machine's invariants.
//!
//! Run: `cargo bench -p hivekeeper-state-machine --bench apply -- --warm-up-time 1
//! --measurement-time 5`. Results: `docs/BENCHMARKS.md`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hivekeeper_protocol::Volume;
use hivekeeper_state_machine::M_PER_DEG;

mod city;
use hivekeeper_protocol::{LockMode, Op};
use hivekeeper_state_machine::{
    AgentRequest, Command, Event, Limits, LogMeta, Reply, StateMachine,
};

/// Agents (one lease each) in the loaded machine.
const AGENTS: usize = 10_000;
/// Lease TTL: the longest the default limits accept (nothing expires during a run anyway).
const TTL_MS: u64 = 3_600_000;
/// The leader's clock at index 0; entries are stamped one millisecond apart.
const NOW0_MS: u64 = 1_750_000_000_000;
/// Pairs of commands built per untimed chunk of an `iter_custom` routine. Small on purpose: the
/// 128 commands (about 40 KB with their strings) stay in cache, as a freshly decoded log entry
/// would be. With chunks of 4,096 pairs the inputs went cold before `apply` read them and the
/// profile charged about 10% of each apply to reading the request strings in validation.
const CHUNK_PAIRS: u64 = 64;
/// Agents on the hot lock of `lock_handover`: one holder and 999 waiters, just under the
/// default `waiters_per_resource_max` of 1,000.
const HOT_AGENTS: usize = 1_000;

/// Waypoint grid: pads 8 m apart with a 3 m radius, around lat 51.5, lon -0.1.
const PAD_SPACING_M: f64 = 8.0;
const PAD_RADIUS_M: f64 = 3.0;
const GRID_LAT0: f64 = 51.5;
const GRID_LON0: f64 = -0.1;
/// Grid columns. Every fifth row and column crossing is left empty: a hole whose nearest pads
/// are 8 m away (no conflict with 3 m + 3 m), yet close enough that the spatial index proposes
/// them and the haversine check runs.
const GRID_COLS: usize = 110;
const HOLE_EVERY: usize = 5;

/// A state machine plus the counters that keep log indexes strictly increasing and request ids
/// unique across setup and every timed chunk.
struct Harness {
    sm: StateMachine,
    index: u64,
    request_seq: u64,
}

/// One agent with its live lease, as the wire names it.
#[derive(Clone)]
struct Agent {
    name: String,
    lease: String,
}

impl Harness {
    fn new(limits: Limits) -> Self {
        Harness {
            sm: StateMachine::new(limits),
            index: 0,
            request_seq: 0,
        }
    }

    /// The next log position.
    fn meta(&mut self) -> LogMeta {
        self.index += 1;
        LogMeta {
            index: self.index,
            term: 1,
            now_ms: NOW0_MS + self.index,
        }
    }

    /// A request with a fresh id, stamped with the next log position (not applied yet).
    fn request(&mut self, agent: &str, op: Op) -> (LogMeta, Command) {
        self.request_seq += 1;
        let command = Command::Request {
            agent: agent.to_string(),
            request: AgentRequest {
                id: format!("r{}", self.request_seq),
                op,
                secret_hash: None,
            },
        };
        (self.meta(), command)
    }

    /// Builds and applies one request now (setup, untimed).
    fn apply(&mut self, agent: &str, op: Op) -> (Reply, Vec<Event>) {
        let (meta, command) = self.request(agent, op);
        self.sm
            .apply(meta, command)
            .expect("indexes are strictly increasing")
    }

    /// Grants a lease to `name`.
    fn agent(&mut self, name: String) -> Agent {
        match self.apply(
            &name,
            Op::LeaseGrant {
                ttl_ms: TTL_MS,
                lock_delay_ms: 0,
            },
        ) {
            (Reply::Lease { lease, .. }, _) => Agent {
                name,
                lease: lease.to_string(),
            },
            (other, _) => panic!("lease.grant for {name} was not granted: {other:?}"),
        }
    }

    fn check_invariants(&self) {
        if let Err(broken) = self.sm.check_invariants() {
            panic!("invariant broken after the benchmark: {broken}");
        }
    }
}

fn acquire(agent: &Agent, name: String, wait_ms: Option<u64>) -> Op {
    Op::LockAcquire {
        name,
        lease: agent.lease.clone(),
        wait_ms,
        max_hold_ms: None,
        mode: LockMode::Exclusive,
    }
}

fn release(agent: &Agent, name: String) -> Op {
    Op::LockRelease {
        name,
        lease: agent.lease.clone(),
    }
}

fn assert_granted(reply: &Reply, what: &str) {
    assert!(
        matches!(reply, Reply::Granted { .. }),
        "{what}: expected Granted, got {reply:?}"
    );
}

fn assert_done(reply: &Reply, what: &str) {
    assert_eq!(reply, &Reply::Done, "{what}: expected Done");
}

/// The loaded machine: 10,000 agents, one lease each, each holding its own lock `held-<i>`.
fn loaded_machine() -> (Harness, Vec<Agent>) {
    let mut h = Harness::new(Limits::DEFAULTS);
    let agents: Vec<Agent> = (0..AGENTS)
        .map(|i| h.agent(format!("agent-{i:05}")))
        .collect();
    for (i, agent) in agents.iter().enumerate() {
        let (reply, _) = h.apply(&agent.name, acquire(agent, format!("held-{i}"), None));
        assert_granted(&reply, "setup: held lock");
    }
    (h, agents)
}

/// Applies a pre-built batch and returns the time it took; the commands are moved into
/// `apply`, and each result is dropped inside the timed loop (part of an apply's cost).
fn timed(sm: &mut StateMachine, batch: &mut Vec<(LogMeta, Command)>) -> Duration {
    let start = Instant::now();
    for (meta, command) in batch.drain(..) {
        black_box(
            sm.apply(meta, command)
                .expect("indexes are strictly increasing"),
        );
    }
    start.elapsed()
}

/// Times `pairs` iterations, building `CHUNK_PAIRS` pairs at a time with `build` (untimed).
fn run_pairs(
    h: &mut Harness,
    pairs: u64,
    mut build: impl FnMut(&mut Harness, &mut Vec<(LogMeta, Command)>),
) -> Duration {
    let mut batch = Vec::with_capacity(2 * CHUNK_PAIRS as usize);
    let mut total = Duration::ZERO;
    let mut left = pairs;
    while left > 0 {
        let n = left.min(CHUNK_PAIRS);
        for _ in 0..n {
            build(h, &mut batch);
        }
        total += timed(&mut h.sm, &mut batch);
        left -= n;
    }
    total
}

/// Applies `pairs` pairs built by `build` one by one, untimed, handing each reply and its events
/// to `check`.
fn check_pairs(
    h: &mut Harness,
    pairs: u64,
    mut build: impl FnMut(&mut Harness, &mut Vec<(LogMeta, Command)>),
    mut check: impl FnMut(usize, &Reply, &[Event]),
) {
    let mut batch = Vec::with_capacity(2);
    for _ in 0..pairs {
        build(h, &mut batch);
        for (position, (meta, command)) in batch.drain(..).enumerate() {
            let (reply, events) =
                h.sm.apply(meta, command)
                    .expect("indexes are strictly increasing");
            check(position, &reply, &events);
        }
    }
}

/// 1. Uncontended `lock.acquire` + `lock.release` of fresh lock names by the 10,000 agents of
///    the loaded machine.
fn lock_acquire_release(c: &mut Criterion) {
    let (mut h, agents) = loaded_machine();
    let mut next = 0u64;
    let mut build = move |h: &mut Harness, batch: &mut Vec<(LogMeta, Command)>| {
        let agent = &agents[(next % AGENTS as u64) as usize];
        let name = format!("free-{next}");
        next += 1;
        batch.push(h.request(&agent.name, acquire(agent, name.clone(), None)));
        batch.push(h.request(&agent.name, release(agent, name)));
    };
    check_pairs(&mut h, AGENTS as u64, &mut build, |position, reply, _| {
        if position == 0 {
            assert_granted(reply, "lock.acquire");
        } else {
            assert_done(reply, "lock.release");
        }
    });

    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(2));
    group.bench_function("lock_acquire_release", |b| {
        b.iter_custom(|pairs| run_pairs(&mut h, pairs, &mut build));
    });
    group.finish();
    h.check_invariants();
}

/// 2. One hot lock with 999 waiters: the holder releases (the head is granted in the same
///    apply: a `Granted` and a `Respond` event) and re-acquires at the tail (`Queued`).
fn lock_handover(c: &mut Criterion) {
    let (mut h, agents) = loaded_machine();
    let hot: Vec<Agent> = agents[..HOT_AGENTS].to_vec();
    for (i, agent) in hot.iter().enumerate() {
        let (reply, _) = h.apply(&agent.name, acquire(agent, "hot".into(), None));
        if i == 0 {
            assert_granted(&reply, "setup: hot lock holder");
        } else {
            assert_eq!(reply, Reply::Queued, "setup: hot lock waiter {i}");
        }
    }
    let mut holder = 0usize;
    let mut build = move |h: &mut Harness, batch: &mut Vec<(LogMeta, Command)>| {
        let agent = &hot[holder % HOT_AGENTS];
        holder += 1;
        batch.push(h.request(&agent.name, release(agent, "hot".into())));
        batch.push(h.request(&agent.name, acquire(agent, "hot".into(), None)));
    };
    check_pairs(
        &mut h,
        2 * HOT_AGENTS as u64,
        &mut build,
        |position, reply, events| {
            if position == 0 {
                assert_done(reply, "hot lock.release");
                let handed_over = events
                    .iter()
                    .any(|event| matches!(event, Event::Granted { queued: true, .. }))
                    && events.iter().any(|event| {
                        matches!(
                            event,
                            Event::Respond {
                                reply: Reply::Granted { .. },
                                ..
                            }
                        )
                    });
                assert!(
                    handed_over,
                    "hot lock.release did not hand over: {events:?}"
                );
            } else {
                assert_eq!(reply, &Reply::Queued, "hot lock re-acquire");
            }
        },
    );

    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(2));
    group.bench_function("lock_handover", |b| {
        b.iter_custom(|pairs| run_pairs(&mut h, pairs, &mut build));
    });
    group.finish();
    h.check_invariants();
}

fn reserve(agent: &Agent, name: String, lat: f64, lon: f64) -> Op {
    Op::WaypointReserve {
        name,
        lease: agent.lease.clone(),
        lat: Some(lat),
        lon: Some(lon),
        alt_min_m: None,
        alt_max_m: None,
        radius_m: Some(PAD_RADIUS_M),
        // Try once: an unexpected conflict is refused (and caught by the check) rather than
        // silently queued.
        wait_ms: Some(0),
        start_ms: None,
        end_ms: None,
        priority: Default::default(),
    }
}

fn waypoint_release(agent: &Agent, name: String) -> Op {
    Op::WaypointRelease {
        name,
        lease: agent.lease.clone(),
    }
}

/// The axis of grid position (row, col).
fn grid_point(row: usize, col: usize) -> (f64, f64) {
    let dlat = PAD_SPACING_M / M_PER_DEG;
    let dlon = PAD_SPACING_M / (M_PER_DEG * GRID_LAT0.to_radians().cos());
    (GRID_LAT0 + row as f64 * dlat, GRID_LON0 + col as f64 * dlon)
}

fn is_hole(row: usize, col: usize) -> bool {
    row % HOLE_EVERY == 2 && col % HOLE_EVERY == 2
}

/// 3. 10,000 held pads on an 8 m grid; timed: reserve + release of a pad in a grid hole (its
///    eight neighbours are held by other leases, 8 m and 11.3 m away: conflict candidates the
///    haversine check clears).
fn waypoint_reserve_release(c: &mut Criterion) {
    let mut h = Harness::new(Limits::DEFAULTS);
    let agents: Vec<Agent> = (0..AGENTS)
        .map(|i| h.agent(format!("pilot-{i:05}")))
        .collect();
    let mut held = 0usize;
    let mut row = 0usize;
    while held < AGENTS {
        for col in 0..GRID_COLS {
            if held == AGENTS || is_hole(row, col) {
                continue;
            }
            let (lat, lon) = grid_point(row, col);
            let agent = &agents[held];
            let (reply, _) = h.apply(
                &agent.name,
                reserve(agent, format!("pad-{row}-{col}"), lat, lon),
            );
            assert_granted(&reply, "setup: held pad");
            held += 1;
        }
        row += 1;
    }
    // Holes with a complete ring of neighbours: not in the first column or row, nor in the
    // last (partly filled) rows.
    let full_rows = row - 2;
    let holes: Vec<(String, f64, f64)> = (1..full_rows)
        .flat_map(|row| (1..GRID_COLS - 1).map(move |col| (row, col)))
        .filter(|&(row, col)| is_hole(row, col))
        .map(|(row, col)| {
            let (lat, lon) = grid_point(row, col);
            (format!("hole-{row}-{col}"), lat, lon)
        })
        .collect();
    eprintln!(
        "waypoint_reserve_release: {held} held pads in {row} rows, {} holes",
        holes.len()
    );

    let mut next = 0usize;
    let mut build = move |h: &mut Harness, batch: &mut Vec<(LogMeta, Command)>| {
        let agent = &agents[next % AGENTS];
        let (name, lat, lon) = &holes[next % holes.len()];
        next += 1;
        batch.push(h.request(&agent.name, reserve(agent, name.clone(), *lat, *lon)));
        batch.push(h.request(&agent.name, waypoint_release(agent, name.clone())));
    };
    check_pairs(
        &mut h,
        2 * AGENTS as u64,
        &mut build,
        |position, reply, _| {
            if position == 0 {
                assert_granted(reply, "waypoint.reserve in a hole");
            } else {
                assert_done(reply, "waypoint.release");
            }
        },
    );

    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(2));
    group.bench_function("waypoint_reserve_release", |b| {
        b.iter_custom(|pairs| run_pairs(&mut h, pairs, &mut build));
    });
    group.finish();
    h.check_invariants();
}

fn route_reserve(agent: &Agent, name: String, volumes: Vec<Volume>) -> Op {
    Op::RouteReserve {
        name,
        lease: agent.lease.clone(),
        volumes,
        // Try once, as for the pads.
        wait_ms: Some(0),
        priority: Default::default(),
    }
}

/// The 10,000 agents' routes, one each, held: `volumes(i)` is agent i's; checked granted.
fn hold_routes(h: &mut Harness, agents: &[Agent], volumes: impl Fn(usize) -> Vec<Volume>) {
    for (i, agent) in agents.iter().enumerate() {
        let (reply, _) = h.apply(
            &agent.name,
            route_reserve(agent, format!("route-{i}"), volumes(i)),
        );
        assert_granted(&reply, "setup: held route");
    }
}

/// Times `route.reserve` + `route.release` of `later(i)`'s routes (the i-th pair's) on a
/// machine holding `held(i)`'s, checking first that each reserve is a real grant.
fn bench_routes(
    c: &mut Criterion,
    bench: &str,
    held: impl Fn(usize) -> Vec<Volume>,
    later: impl Fn(usize) -> Vec<Volume> + 'static,
) {
    let mut h = Harness::new(Limits::DEFAULTS);
    let agents: Vec<Agent> = (0..AGENTS)
        .map(|i| h.agent(format!("flight-{i:05}")))
        .collect();
    hold_routes(&mut h, &agents, held);
    let bytes = h.sm.snapshot().len();
    eprintln!(
        "{bench}: {AGENTS} held routes of {} volumes; snapshot {bytes} bytes ({} a volume, with \
         its lease and dedup memory)",
        city::LEGS,
        bytes / (AGENTS * city::LEGS)
    );
    let mut next = 0usize;
    let mut build = move |h: &mut Harness, batch: &mut Vec<(LogMeta, Command)>| {
        let agent = &agents[next % AGENTS];
        let name = format!("later-{next}");
        let volumes = later(next);
        next += 1;
        batch.push(h.request(&agent.name, route_reserve(agent, name.clone(), volumes)));
        batch.push(h.request(
            &agent.name,
            Op::RouteRelease {
                name,
                lease: agent.lease.clone(),
            },
        ));
    };
    check_pairs(&mut h, 2_000, &mut build, |position, reply, _| {
        if position == 0 {
            assert_granted(reply, "route.reserve in a free hour");
        } else {
            assert_done(reply, "route.release");
        }
    });

    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(2));
    group.bench_function(bench, |b| {
        b.iter_custom(|pairs| run_pairs(&mut h, pairs, &mut build));
    });
    group.finish();
    h.check_invariants();
}

/// 4. The routes' target scenario: 10,000 held 12-volume routes over a 20 km square (one per
///    200 m cell, each in one of four 1-hour windows, `city.rs`); timed: `route.reserve` +
///    `route.release` of a 12-volume route over an existing route's cell two hours later. The
///    spatial index proposes the held route's volumes (the same cylinders) and the time windows
///    clear them: a real grant.
fn route_reserve_release(c: &mut Criterion) {
    let start_ms = |hour: u64| NOW0_MS + city::HOUR_MS * (1 + hour);
    let cell = |i: usize| (i / city::CELLS, i % city::CELLS);
    bench_routes(
        c,
        "route_reserve_release",
        move |i| {
            let (row, col) = cell(i);
            city::route_volumes(row, col, start_ms(city::hour(row, col)))
        },
        move |next| {
            let (row, col) = cell((next * 7_919) % (city::CELLS * city::CELLS));
            city::route_volumes(row, col, start_ms(city::hour(row, col) + 2))
        },
    );
}

/// Cells per side of the busy variant's square (10 x 10 cells, 100 routes each).
const BUSY_CELLS: usize = 10;
/// Routes stacked on one cell of the busy variant, one an hour.
const BUSY_HOURS: u64 = 100;

/// 4b. A busy sky: the same 10,000 routes stacked 100 deep on 100 cells (one route an hour
///    on each cell for 100 hours); timed: reserve + release of a route on one of those cells
///    in the 101st hour. Every held route of the cell is a spatial candidate; only a time
///    index keeps the check to the few whose windows can overlap.
fn route_reserve_release_busy(c: &mut Criterion) {
    let start_ms = |hour: u64| NOW0_MS + city::HOUR_MS * (1 + hour);
    let cells = BUSY_CELLS * BUSY_CELLS;
    let cell = move |i: usize| (i % cells / BUSY_CELLS, i % BUSY_CELLS);
    bench_routes(
        c,
        "route_reserve_release_busy",
        move |i| {
            let (row, col) = cell(i);
            city::route_volumes(row, col, start_ms((i / cells) as u64))
        },
        move |next| {
            let (row, col) = cell(next * 7);
            city::route_volumes(row, col, start_ms(BUSY_HOURS))
        },
    );
}

/// 5. `snapshot()` and `StateMachine::restore` of the loaded machine (10,000 leases, 10,000
///    held locks, the dedup memory of the setup requests).
fn snapshot(c: &mut Criterion) {
    let (h, _) = loaded_machine();
    let bytes = h.sm.snapshot();
    eprintln!(
        "snapshot: {} bytes ({:.2} MiB) for 10,000 leases and 10,000 held locks",
        bytes.len(),
        bytes.len() as f64 / (1024.0 * 1024.0)
    );
    let restored = StateMachine::restore(&bytes).expect("the snapshot restores");
    assert_eq!(restored.snapshot(), bytes, "restore(snapshot) round-trips");

    let mut group = c.benchmark_group("snapshot");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("snapshot", |b| b.iter(|| black_box(h.sm.snapshot())));
    group.bench_function("restore", |b| {
        b.iter_with_large_drop(|| {
            StateMachine::restore(black_box(&bytes)).expect("the snapshot restores")
        });
    });
    group.finish();
}

criterion_group!(
    benches,
    lock_acquire_release,
    lock_handover,
    waypoint_reserve_release,
    route_reserve_release,
    route_reserve_release_busy,
    snapshot
);
criterion_main!(benches);
