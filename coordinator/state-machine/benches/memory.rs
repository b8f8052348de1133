//! Memory per held volume, against the target of at most 2 KB: the bytes the machine keeps for
//! the city's 10,000 held routes of 12 volumes (`city/mod.rs`), counted by a counting global
//! allocator (`stats_alloc`) around the entries that reserve them.
//!
//! What is counted: every allocation made while the 10,000 `route.reserve` commands are built
//! and applied, less every one freed by then, so what is left is what the machine keeps for
//! them: the reservations with their volumes, their spatial and time index entries, the end
//! index, the holds' bookkeeping and the remembered outcome of each request (dedup). Not
//! counted: the 10,000 leases, granted before. A separate bench binary, so the counting
//! allocator never runs under the timed `apply` benches.
//!
//! Run: `cargo bench -p hivekeeper-state-machine --bench memory`. Results: docs/BENCHMARKS.md.

use std::alloc::System;

use hivekeeper_protocol::Op;
use hivekeeper_state_machine::{AgentRequest, Command, Limits, LogMeta, Reply, StateMachine};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

mod city;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The leader's clock at index 0; entries are stamped one millisecond apart.
const NOW0_MS: u64 = 1_750_000_000_000;

/// Applies `op` from `agent` as the next entry.
fn apply(sm: &mut StateMachine, index: &mut u64, agent: &str, op: Op) -> Reply {
    *index += 1;
    let meta = LogMeta {
        index: *index,
        term: 1,
        now_ms: NOW0_MS + *index,
    };
    let command = Command::Request {
        agent: agent.to_string(),
        request: AgentRequest {
            id: format!("r{index}"),
            op,
            secret_hash: None,
        },
    };
    sm.apply(meta, command)
        .expect("indexes are strictly increasing")
        .0
}

fn main() {
    let mut sm = StateMachine::new(Limits::DEFAULTS);
    let mut index = 0u64;
    let agents = city::CELLS * city::CELLS;
    let leases: Vec<(String, String)> = (0..agents)
        .map(|i| {
            let agent = format!("flight-{i:05}");
            match apply(
                &mut sm,
                &mut index,
                &agent,
                Op::LeaseGrant {
                    ttl_ms: 3_600_000,
                    lock_delay_ms: 0,
                },
            ) {
                Reply::Lease { lease, .. } => (agent, lease.to_string()),
                other => panic!("lease.grant for {agent}: {other:?}"),
            }
        })
        .collect();
    let region = Region::new(GLOBAL);
    for (i, (agent, lease)) in leases.iter().enumerate() {
        let (row, col) = (i / city::CELLS, i % city::CELLS);
        let start_ms = NOW0_MS + city::HOUR_MS * (1 + city::hour(row, col));
        let op = Op::RouteReserve {
            name: format!("route-{i}"),
            lease: lease.clone(),
            volumes: city::route_volumes(row, col, start_ms),
            wait_ms: Some(0),
            priority: Default::default(),
        };
        let reply = apply(&mut sm, &mut index, agent, op);
        assert!(
            matches!(reply, Reply::Granted { .. }),
            "route {i}: {reply:?}"
        );
    }
    let change = region.change();
    let live_bytes = change.bytes_allocated as i64 - change.bytes_deallocated as i64
        + change.bytes_reallocated as i64;
    let volumes = (agents * city::LEGS) as i64;
    if let Err(broken) = sm.check_invariants() {
        panic!("invariant broken: {broken}");
    }
    println!(
        "memory: {agents} held routes of {} volumes: {live_bytes} bytes kept ({} allocations \
         live), {} bytes a held volume (target: at most 2048)",
        city::LEGS,
        change.allocations as i64 - change.deallocations as i64,
        live_bytes / volumes
    );
}
