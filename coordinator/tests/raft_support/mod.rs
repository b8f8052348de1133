//! Helpers shared by the `raft_*` integration tests: commands, timeouts, applied-entry waits.
//! The time bound on every wait ([`within`]) comes from `hivekeeper-test-support`.

#![allow(dead_code)] // each test file uses its own subset

pub use hivekeeper_test_support::within;

use std::time::Duration;

use hivekeeper_coordinator::Command;
use hivekeeper_coordinator::raft::{Applied, AppliedReceiver};
use hivekeeper_coordinator::state_machine::{AgentOp, AgentRequest};

/// Every wait in these tests is bounded by this, in seconds; a hang is a failure, not a stuck
/// CI job.
pub const WAIT_S: u64 = 20;

/// [`WAIT_S`] as a duration, for the node's own bounded waits (`wait_for_leader`).
pub const WAIT: Duration = Duration::from_secs(WAIT_S);

/// `agent` sends request `id` with `op`.
pub fn request(agent: &str, id: &str, op: AgentOp) -> Command {
    Command::Request {
        agent: agent.to_string(),
        request: AgentRequest {
            id: id.to_string(),
            op,
        },
    }
}

/// `lease.grant` with a TTL of `ttl_ms`.
pub fn lease_grant(ttl_ms: u64) -> AgentOp {
    AgentOp::LeaseGrant { ttl_ms }
}

/// `lock.acquire` that does not wait.
pub fn lock_try(name: &str, lease: &str) -> AgentOp {
    AgentOp::LockAcquire {
        name: name.to_string(),
        lease: lease.to_string(),
        wait_ms: Some(0),
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
