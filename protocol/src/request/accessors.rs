//! What an op names (its lease, its wait), whether it writes through the log and which role it
//! needs. Its wire name and class are declared with it (`declare_ops!`).

use super::{Op, OpClass};
use crate::role::Role;

/// The cluster version before any raise, and of every op declared without `since`
/// ([`Op::cluster_version_needed`]).
pub const CLUSTER_VERSION_INITIAL: u32 = 1;

impl Op {
    /// The lease the op names, if any.
    pub fn lease(&self) -> Option<&str> {
        match self {
            Op::LeaseKeepalive { lease }
            | Op::LeaseRevoke { lease }
            | Op::LockAcquire { lease, .. }
            | Op::LockRelease { lease, .. }
            | Op::LockDowngrade { lease, .. }
            | Op::LockAcquireAll { lease, .. }
            | Op::LockReleaseAll { lease, .. }
            | Op::SemAcquire { lease, .. }
            | Op::SemRelease { lease, .. }
            | Op::WaypointReserve { lease, .. }
            | Op::WaypointRelease { lease, .. }
            | Op::RouteReserve { lease, .. }
            | Op::RouteRelease { lease, .. }
            | Op::RouteAmend { lease, .. }
            | Op::AdminRevoke { lease }
            | Op::ElectionCampaign { lease, .. }
            | Op::BarrierEnter { lease, .. }
            | Op::BarrierLeave { lease, .. } => Some(lease),
            Op::KvPut { lease, .. } => lease.as_deref(),
            _ => None,
        }
    }

    /// Whether the op is a command for the state machine (and so goes through the Raft log
    /// as one). Keepalives, fence checks, inspections, the admin reads and membership changes
    /// are not: the last change Raft's own configuration, through openraft, on the leader.
    /// `admin.agent.add` and `admin.agent.rotate` are writes the node completes first: it
    /// generates the secret and puts only its hash in the command ([`Op::makes_secret`]).
    pub fn is_write(&self) -> bool {
        self.class() == OpClass::Write
    }

    /// Whether the node answers the op with a new secret it generates (`admin.agent.add`,
    /// `admin.agent.rotate`): the log carries only the secret's hash.
    pub fn makes_secret(&self) -> bool {
        matches!(self, Op::AdminAgentAdd { .. } | Op::AdminAgentRotate { .. })
    }

    /// Whether the op is an operator's (`admin.*`): with authentication on it needs the
    /// `observer` or `admin` role ([`Role::needed_for`]).
    pub fn is_admin(&self) -> bool {
        Role::needed_for(self) > Role::Agent
    }

    /// Whether the op reads or writes keys (`kv.*`, `watch.poll`): with authentication on, the
    /// node checks it against the account's key permissions (`crate::kv_access`).
    pub fn is_key_op(&self) -> bool {
        matches!(
            self,
            Op::KvPut { .. }
                | Op::KvGet { .. }
                | Op::KvDelete { .. }
                | Op::KvTxn { .. }
                | Op::WatchPoll { .. }
        )
    }

    /// The `max_hold_ms` of a lock, multi-lock or semaphore acquire.
    pub fn max_hold_ms(&self) -> Option<u64> {
        match self {
            Op::LockAcquire { max_hold_ms, .. }
            | Op::LockAcquireAll { max_hold_ms, .. }
            | Op::SemAcquire { max_hold_ms, .. } => *max_hold_ms,
            _ => None,
        }
    }

    /// The `wait_ms` of an acquire, a reserve, a campaign, or a barrier's enter or leave.
    pub fn wait_ms(&self) -> Option<u64> {
        self.wait_field().copied().flatten()
    }

    /// Whether the op may wait in a resource's queue (it takes a `wait_ms`): without one it
    /// is answered only when granted or when its lease ends, so a client waits for it
    /// without a deadline.
    pub fn queues(&self) -> bool {
        self.wait_field().is_some()
    }

    /// The `wait_ms` field of an op that may wait in a queue, the one list of those ops.
    fn wait_field(&self) -> Option<&Option<u64>> {
        match self {
            Op::LockAcquire { wait_ms, .. }
            | Op::LockAcquireAll { wait_ms, .. }
            | Op::SemAcquire { wait_ms, .. }
            | Op::WaypointReserve { wait_ms, .. }
            | Op::RouteReserve { wait_ms, .. }
            | Op::ElectionCampaign { wait_ms, .. }
            | Op::BarrierEnter { wait_ms, .. }
            | Op::BarrierLeave { wait_ms, .. } => Some(wait_ms),
            _ => None,
        }
    }
}
