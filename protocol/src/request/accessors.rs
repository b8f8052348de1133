//! What an op is: its wire name, the lease it names, whether it writes through the log and
//! which role it needs.

use super::Op;
use crate::role::Role;

impl Op {
    /// Every op name, in documentation order.
    pub const NAMES: [&'static str; 26] = [
        "lease.grant",
        "lease.keepalive",
        "lease.revoke",
        "lock.acquire",
        "lock.release",
        "sem.acquire",
        "sem.release",
        "waypoint.reserve",
        "waypoint.release",
        "route.reserve",
        "route.release",
        "route.amend",
        "airspace.query",
        "fence.check",
        "inspect",
        "admin.status",
        "admin.leases",
        "admin.resources",
        "admin.snapshot",
        "admin.revoke",
        "admin.member.add",
        "admin.member.remove",
        "admin.agent.add",
        "admin.agent.list",
        "admin.agent.remove",
        "admin.agent.rotate",
    ];

    /// The op's wire name, e.g. `"lock.acquire"`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::LeaseGrant { .. } => "lease.grant",
            Op::LeaseKeepalive { .. } => "lease.keepalive",
            Op::LeaseRevoke { .. } => "lease.revoke",
            Op::LockAcquire { .. } => "lock.acquire",
            Op::LockRelease { .. } => "lock.release",
            Op::SemAcquire { .. } => "sem.acquire",
            Op::SemRelease { .. } => "sem.release",
            Op::WaypointReserve { .. } => "waypoint.reserve",
            Op::WaypointRelease { .. } => "waypoint.release",
            Op::RouteReserve { .. } => "route.reserve",
            Op::RouteRelease { .. } => "route.release",
            Op::RouteAmend { .. } => "route.amend",
            Op::AirspaceQuery { .. } => "airspace.query",
            Op::FenceCheck { .. } => "fence.check",
            Op::Inspect { .. } => "inspect",
            Op::AdminStatus {} => "admin.status",
            Op::AdminLeases { .. } => "admin.leases",
            Op::AdminResources { .. } => "admin.resources",
            Op::AdminSnapshot { .. } => "admin.snapshot",
            Op::AdminRevoke { .. } => "admin.revoke",
            Op::AdminMemberAdd { .. } => "admin.member.add",
            Op::AdminMemberRemove { .. } => "admin.member.remove",
            Op::AdminAgentAdd { .. } => "admin.agent.add",
            Op::AdminAgentList { .. } => "admin.agent.list",
            Op::AdminAgentRemove { .. } => "admin.agent.remove",
            Op::AdminAgentRotate { .. } => "admin.agent.rotate",
        }
    }

    /// The lease the op names, if any.
    pub fn lease(&self) -> Option<&str> {
        match self {
            Op::LeaseKeepalive { lease }
            | Op::LeaseRevoke { lease }
            | Op::LockAcquire { lease, .. }
            | Op::LockRelease { lease, .. }
            | Op::SemAcquire { lease, .. }
            | Op::SemRelease { lease, .. }
            | Op::WaypointReserve { lease, .. }
            | Op::WaypointRelease { lease, .. }
            | Op::RouteReserve { lease, .. }
            | Op::RouteRelease { lease, .. }
            | Op::RouteAmend { lease, .. }
            | Op::AdminRevoke { lease } => Some(lease),
            Op::LeaseGrant { .. }
            | Op::AirspaceQuery { .. }
            | Op::FenceCheck { .. }
            | Op::Inspect { .. }
            | Op::AdminStatus {}
            | Op::AdminLeases { .. }
            | Op::AdminResources { .. }
            | Op::AdminSnapshot { .. }
            | Op::AdminMemberAdd { .. }
            | Op::AdminMemberRemove { .. }
            | Op::AdminAgentAdd { .. }
            | Op::AdminAgentList { .. }
            | Op::AdminAgentRemove { .. }
            | Op::AdminAgentRotate { .. } => None,
        }
    }

    /// Whether the op is a command for the state machine (and so goes through the Raft log
    /// as one). Keepalives, fence checks, inspections, the admin reads and membership changes
    /// are not: the last change Raft's own configuration, through openraft, on the leader.
    /// `admin.agent.add` and `admin.agent.rotate` are writes the node completes first: it
    /// generates the secret and puts only its hash in the command ([`Op::makes_secret`]).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Op::LeaseKeepalive { .. }
                | Op::AirspaceQuery { .. }
                | Op::FenceCheck { .. }
                | Op::Inspect { .. }
                | Op::AdminStatus {}
                | Op::AdminLeases { .. }
                | Op::AdminResources { .. }
                | Op::AdminSnapshot { .. }
                | Op::AdminMemberAdd { .. }
                | Op::AdminMemberRemove { .. }
                | Op::AdminAgentList { .. }
        )
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

    /// The `wait_ms` of an acquire or reserve.
    pub fn wait_ms(&self) -> Option<u64> {
        match self {
            Op::LockAcquire { wait_ms, .. }
            | Op::SemAcquire { wait_ms, .. }
            | Op::WaypointReserve { wait_ms, .. }
            | Op::RouteReserve { wait_ms, .. } => *wait_ms,
            _ => None,
        }
    }
}
