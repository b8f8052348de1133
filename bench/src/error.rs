//! The one error type at the crate's boundary: what [`run`](crate::run) can fail with. The
//! scenarios inside keep `anyhow` for their many steps; their errors arrive whole, with every
//! context they gathered, as [`BenchError::Scenario`].

/// Why `hivekeeper bench` failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The async runtime the scenarios run on could not be started.
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The scenario could not run to its end: flags it refuses, a service it cannot reach, a
    /// cluster of its own that did not start or recover.
    #[error(transparent)]
    Scenario(anyhow::Error),
    /// The report could not be encoded as JSON (`--json`).
    #[error("encoding the report")]
    Encode(#[source] serde_json::Error),
    /// The run ended but the mutual-exclusion check found two holders at once.
    #[error("the mutual-exclusion check failed: {violations} violations")]
    MutualExclusion {
        /// How many violations the check found.
        violations: u64,
    },
}
