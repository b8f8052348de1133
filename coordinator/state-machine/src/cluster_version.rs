//! The cluster version: the feature level every member's build can apply, a replicated fact
//! (as etcd's cluster version). An op or a log format above it is refused before it reaches
//! the log ([`admit`]), because a member of an older build could not apply it.
//!
//! ```text
//!  leader: every voter and learner agreed on peer protocol version >= N in its hello
//!          (the node's `cluster_version.rs`)
//!    └─ Command::RaiseClusterVersion { version: N } ─▶ apply: version = max(version, N)
//!  a write whose op needs N > version ─▶ admit: `unavailable`, naming N and the version
//! ```
//!
//! A machine whose version was never raised is at [`CLUSTER_VERSION_INITIAL`], which its
//! snapshot leaves out, so such a snapshot keeps data format 1's bytes and one written before
//! cluster versions reads as version 1.
//!
//! Invariants:
//! 1. `CLUSTER_VERSION_INITIAL <= version <= CLUSTER_VERSION_SUPPORTED`: a build never holds
//!    (nor restores) a cluster whose commands it might not know.
//! 2. The version never decreases: a raise to a version at or below it changes nothing.

use hivekeeper_protocol::{CLUSTER_VERSION_INITIAL, ErrorCode, Op};
use serde::{Deserialize, Serialize};

use crate::{Error, InvariantViolation, Reply, StateMachine};

/// The highest cluster version this build applies; also its peer protocol version (the
/// node's `transport/version.rs`), so what a member agrees on in its hello tells the leader
/// what it can apply. Raised by every change an older build cannot apply (a new op declared
/// `since` it, a new log or snapshot form).
pub const CLUSTER_VERSION_SUPPORTED: u32 = 2;

/// The replicated cluster version (invariants in the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClusterVersion(u32);

impl Default for ClusterVersion {
    fn default() -> Self {
        ClusterVersion(CLUSTER_VERSION_INITIAL)
    }
}

impl ClusterVersion {
    /// Whether it was never raised (then the snapshot leaves it out).
    pub(crate) fn is_initial(&self) -> bool {
        self.0 == CLUSTER_VERSION_INITIAL
    }
}

/// Whether `op` may be proposed to a cluster at `version`: an op that needs a higher one is
/// refused `unavailable` (nothing was done; it succeeds once every member is upgraded), with
/// both versions named.
pub fn admit(op: &Op, version: u32) -> Result<(), Reply> {
    admit_needing(op.name(), op.cluster_version_needed(), version)
}

/// [`admit`] of what `needs` cluster version `needed`, named `what`.
pub(crate) fn admit_needing(what: &str, needed: u32, version: u32) -> Result<(), Reply> {
    if needed <= version {
        return Ok(());
    }
    Err(Reply::refused(
        ErrorCode::Unavailable,
        format!(
            "{what} needs cluster version {needed}, and the cluster is at version {version} \
             until every member runs a build that supports it"
        ),
    ))
}

impl StateMachine {
    /// The cluster version in force.
    pub fn cluster_version(&self) -> u32 {
        self.cluster_version.0
    }

    /// Whether this build can apply a `RaiseClusterVersion` to `version`. One it does not
    /// know is an error, not a reply: this member cannot follow the cluster and must stop
    /// rather than apply what comes next differently (invariant 1).
    pub(crate) fn check_raise(version: u32) -> Result<(), Error> {
        if version > CLUSTER_VERSION_SUPPORTED {
            return Err(Error::ClusterVersionUnsupported {
                version,
                supported: CLUSTER_VERSION_SUPPORTED,
            });
        }
        Ok(())
    }

    /// A `RaiseClusterVersion` entry ([`StateMachine::check_raise`] passed): raises, never
    /// lowers (invariant 2).
    pub(crate) fn raise_cluster_version(&mut self, version: u32) -> Reply {
        self.cluster_version.0 = self.cluster_version.0.max(version);
        Reply::Done
    }

    /// Invariant 1.
    pub(crate) fn check_cluster_version(&self) -> Result<(), InvariantViolation> {
        let version = self.cluster_version.0;
        if (CLUSTER_VERSION_INITIAL..=CLUSTER_VERSION_SUPPORTED).contains(&version) {
            Ok(())
        } else {
            Err(violation!(
                "cluster version {version} is outside {CLUSTER_VERSION_INITIAL}..={CLUSTER_VERSION_SUPPORTED}, \
                 what this build applies"
            ))
        }
    }
}
