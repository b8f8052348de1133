//! Helpers shared by the `raft_*` integration tests: commands, timeouts, applied-entry waits.

#![allow(dead_code)] // each test file uses its own subset

use std::future::Future;
use std::time::Duration;

use hivekeeper_coordinator::Command;
use hivekeeper_coordinator::raft::{Applied, AppliedReceiver};
use hivekeeper_coordinator::state_machine::{AgentOp, AgentRequest};

/// Every wait in these tests is bounded by this; a hang is a failure, not a stuck CI job.
pub const WAIT: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test after [`WAIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

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

/// The next applied entry on the channel (skipping nothing), within [`WAIT`].
pub async fn next_applied(applied: &mut AppliedReceiver) -> Applied {
    within("an applied entry", applied.recv())
        .await
        .expect("the state-machine store keeps the channel open while the node runs")
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("the test machine has a writable temp dir")
}
