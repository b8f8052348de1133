//! What checking one agent's secret costs with this build's Argon2id parameters, and so how
//! long 10,000 agents reconnecting at once keep the CPU busy (docs/BENCHMARKS.md, auth).
//!
//! `cargo run --release -p hivekeeper-coordinator --example auth_cost`

use std::time::Instant;

use hivekeeper_coordinator::node::{
    ARGON2_M_COST_KIB, ARGON2_P_COST, ARGON2_T_COST, hash_secret, new_secret, verify_secret,
};

/// Verifies timed; bounded so the run takes a few seconds at most.
const VERIFIES: u32 = 2_000;

fn main() {
    let secret = new_secret();
    let hash = hash_secret(&secret);
    // Warm up caches and the allocator.
    for _ in 0..100 {
        assert!(verify_secret(&secret, &hash));
    }
    let started = Instant::now();
    for _ in 0..VERIFIES {
        assert!(verify_secret(&secret, &hash));
    }
    let per_verify = started.elapsed() / VERIFIES;
    let agents = 10_000u32;
    println!(
        "argon2id m={ARGON2_M_COST_KIB} KiB t={ARGON2_T_COST} p={ARGON2_P_COST}: \
         {per_verify:?} per verify ({VERIFIES} verifies, one core); \
         {agents} agents: {:?} of CPU, {:?} on 2 cores",
        per_verify * agents,
        per_verify * agents / 2,
    );
}
