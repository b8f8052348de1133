//! A broken machine ([`Error`]) and a broken invariant ([`InvariantViolation`]): never a
//! refused request, which is a [`crate::Reply::Refused`].

use crate::LimitsError;

/// A broken machine: something that cannot happen when the log is well formed. A refusal of a
/// request is never an `Error`, it is a [`Reply::Refused`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Entries must be applied at strictly increasing indexes.
    #[error("entry index {got} is not after the last applied index {applied}")]
    IndexNotIncreasing {
        /// The last applied index.
        applied: u64,
        /// The index offered.
        got: u64,
    },
    /// A snapshot's bytes are not JSON of a machine's state.
    #[error("snapshot is unreadable: {0}")]
    Snapshot(serde_json::Error),
    /// A snapshot of another layout version.
    #[error("snapshot is unreadable: format {found} is not the supported format {supported}")]
    SnapshotFormat {
        /// The snapshot's format number.
        found: u32,
        /// The one this build reads and writes.
        supported: u32,
    },
    /// A snapshot whose limits break a rule.
    #[error("snapshot is unreadable: {0}")]
    SnapshotLimits(LimitsError),
    /// A snapshot whose state breaks an invariant.
    #[error("snapshot is unreadable: {0}")]
    SnapshotInvariant(InvariantViolation),
    /// The log raises the cluster version above what this build applies: the cluster was
    /// upgraded past this member's build (`cluster_version.rs`).
    #[error(
        "the log raises the cluster version to {version}, and this build applies at most \
         {supported}: run a build that supports it"
    )]
    ClusterVersionUnsupported {
        /// The version the entry raises to.
        version: u32,
        /// The highest this build applies.
        supported: u32,
    },
}

/// A broken invariant, found by [`StateMachine::check_invariants`]: a bug in the machine, or a
/// corrupt snapshot. The text says which invariant of which concept, with the values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvariantViolation(pub String);

impl From<String> for InvariantViolation {
    fn from(text: String) -> Self {
        InvariantViolation(text)
    }
}

impl From<&str> for InvariantViolation {
    fn from(text: &str) -> Self {
        InvariantViolation(text.to_string())
    }
}
