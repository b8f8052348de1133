//! [`NodeError`]: why the node could not answer a request, or could not start or stop.
//!
//! On the wire every variant but [`NodeError::BadRequest`] and [`NodeError::RateLimited`] is
//! answered `unavailable` (the agent retries the same request id, which the dedup memory makes
//! safe); `BadRequest` is answered `bad_request` (retrying cannot help), `RateLimited` is
//! answered `rate_limited` (retry the same id after a backoff).

use std::sync::Arc;

use hivekeeper_protocol::ErrorCode;

use crate::ConfigError;
use crate::raft::RaftError;

/// Why the node could not answer a request, start or stop.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NodeError {
    /// Too many requests in flight: back off and retry.
    #[error("node overloaded: {in_flight} requests in flight; retry with backoff")]
    Overloaded {
        /// The configured bound (`ingress_max`).
        in_flight: usize,
    },
    /// The agent sent requests faster than its rate (`node/rate.rs`): nothing was done.
    #[error(
        "agent {agent} is over its request rate: rate_per_s_max is {rate_per_s_max} a second, \
         rate_burst_max {rate_burst_max}; retry with backoff"
    )]
    RateLimited {
        /// The agent.
        agent: String,
        /// The configured rate (`rate_per_s_max`).
        rate_per_s_max: u32,
        /// The configured burst (`rate_burst_max`).
        rate_burst_max: u32,
        /// How long until the agent's bucket has a token again: the agent endpoint reads
        /// nothing more from the connection for that long (backpressure, `Submitted`).
        retry_after: std::time::Duration,
    },
    /// This node does not lead, and the request is one only the leader may answer here
    /// (membership changes) or the leader refused it because it was deposed meanwhile.
    #[error("member {node} is not the leader (leader: {})", leader.as_deref().unwrap_or("none known"))]
    NotLeader {
        /// This node's member name.
        node: String,
        /// The member name of the leader it knows of, if any.
        leader: Option<String>,
    },
    /// No leader is known after waiting for an election.
    #[error(
        "no leader known after {waited_ms} ms: an election is under way, or this node is cut \
         off from the majority; retry"
    )]
    NoLeader {
        /// How long it waited.
        waited_ms: u64,
    },
    /// The request was handed to Raft but not committed in time.
    #[error("no commit within {timeout_ms} ms")]
    CommitTimeout {
        /// The bound (`propose_timeout_ms`).
        timeout_ms: u64,
    },
    /// The request waited on this member longer than the proposer's `WRITE_WAIT_MAX`
    /// without reaching the log (no leader, a stuck entry, a paused process), or was answered
    /// meanwhile: it is dropped, never proposed later, so nothing was done.
    #[error(
        "the request waited {waited_ms} ms on this member without reaching the log and was \
         dropped: nothing was done; resend it"
    )]
    Stale {
        /// How long it had waited.
        waited_ms: u64,
    },
    /// The leader could not be reached or could not answer a forwarded request.
    #[error("forwarding to the leader failed: {reason}")]
    Forward {
        /// What the transport or the leader said.
        reason: String,
    },
    /// The node is shutting down, or one of its components has stopped.
    #[error("the node is stopping")]
    Stopping,
    /// Raft refused or failed (not the leader, a storage failure, a fatal stop).
    #[error("{0}")]
    Raft(Arc<RaftError>),
    /// The request cannot succeed as asked (a membership op on a single node, an unknown
    /// member, a malformed address): answered `bad_request`.
    #[error("{reason}")]
    BadRequest {
        /// Why, for the operator.
        reason: String,
    },
    /// The node's configuration was refused.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The node could not start: its data directory, its peer port or its components.
    #[error("{reason}")]
    Start {
        /// What failed, naming the setting, path or address.
        reason: String,
    },
}

impl NodeError {
    /// The wire error code this error is answered with.
    pub fn code(&self) -> ErrorCode {
        match self {
            NodeError::BadRequest { .. } => ErrorCode::BadRequest,
            NodeError::RateLimited { .. } => ErrorCode::RateLimited,
            _ => ErrorCode::Unavailable,
        }
    }
}

impl From<RaftError> for NodeError {
    fn from(error: RaftError) -> Self {
        NodeError::Raft(Arc::new(error))
    }
}
