//! Helpers shared by the `raft_*` integration tests: commands, timeouts, applied-entry waits.
//! The time bound on every wait ([`within`]) comes from `hivekeeper-test-support`.

#![allow(dead_code)] // each test file uses its own subset

pub use hivekeeper_test_support::within;

use std::time::Duration;

use hivekeeper_coordinator::raft::{self, Applied, AppliedReceiver, RaftConfig, RaftHandle};
use hivekeeper_coordinator::state_machine::{AgentRequest, LeaseId};
use hivekeeper_coordinator::{Command, Reply};
use hivekeeper_protocol::{LockMode, Op};

/// Every wait in these tests is bounded by this, in seconds; a hang is a failure, not a stuck
/// CI job.
pub const WAIT_S: u64 = 20;

/// [`WAIT_S`] as a duration, for the node's own bounded waits (`wait_for_leader`).
pub const WAIT: Duration = Duration::from_secs(WAIT_S);

/// `agent` sends request `id` with `op`.
pub fn request(agent: &str, id: &str, op: Op) -> Command {
    Command::Request {
        agent: agent.to_string(),
        request: AgentRequest {
            id: id.to_string(),
            op,
            secret_hash: None,
        },
    }
}

/// `lease.grant` with a TTL of `ttl_ms`.
pub fn lease_grant(ttl_ms: u64) -> Op {
    Op::LeaseGrant {
        ttl_ms,
        lock_delay_ms: 0,
    }
}

/// `lock.acquire` that does not wait.
pub fn lock_try(name: &str, lease: &str) -> Op {
    Op::LockAcquire {
        name: name.to_string(),
        lease: lease.to_string(),
        wait_ms: Some(0),
        max_hold_ms: None,
        mode: LockMode::Exclusive,
    }
}

/// The next applied entry on the channel (skipping nothing), within [`WAIT_S`].
pub async fn next_applied(applied: &mut AppliedReceiver) -> Applied {
    within(WAIT_S, "an applied entry", applied.recv())
        .await
        .expect("the state-machine store keeps the channel open while the node runs")
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("the test machine has a writable temp dir")
}

/// Opens a single node (id 1) in `dir`, initializes it if its log is empty, and waits until it
/// leads.
pub async fn start_single(dir: &std::path::Path, config: &RaftConfig) -> RaftHandle {
    let (node, _applied) = within(WAIT_S, "open", raft::open(dir, 1, config))
        .await
        .expect("the data directory opens");
    within(WAIT_S, "initialize", node.initialize_single_node())
        .await
        .expect("initialize");
    within(WAIT_S, "leader", node.wait_for_leader(WAIT))
        .await
        .expect("a leader");
    node
}

/// Shuts `node` down within [`WAIT_S`].
pub async fn stop(node: RaftHandle) {
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
}

/// `agent` takes a lease of `ttl_ms` and the lock `name` (two entries); returns both.
pub async fn lease_and_lock(
    node: &RaftHandle,
    agent: &str,
    name: &str,
    ttl_ms: u64,
) -> (LeaseId, u64) {
    let granted = within(
        WAIT_S,
        "lease.grant",
        node.propose(request(agent, "grant", lease_grant(ttl_ms))),
    )
    .await
    .expect("grant committed");
    let Reply::Lease { lease, .. } = granted.reply else {
        panic!("lease.grant answered {:?}", granted.reply);
    };
    let acquired = within(
        WAIT_S,
        "lock.acquire",
        node.propose(request(
            agent,
            "acquire",
            lock_try(name, &lease.to_string()),
        )),
    )
    .await
    .expect("acquire committed");
    let Reply::Granted { token } = acquired.reply else {
        panic!("lock.acquire answered {:?}", acquired.reply);
    };
    (lease, token)
}
