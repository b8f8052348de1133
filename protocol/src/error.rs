//! Error codes of protocol v1 and the error a decoder or validator returns.
//!
//! The list of codes is closed and documented in `docs/PROTOCOL.md`: an independent client
//! switches on them, so a code is never renamed and a new one is only ever added.

use serde::{Deserialize, Serialize};

/// The machine-readable reason a request failed, sent as `error.code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The message is not JSON, not an object, misses a field, has a field of the wrong type or
    /// out of range, or has a field the op does not take.
    BadRequest,
    /// The `op` names no operation of this protocol version.
    UnknownOp,
    /// The payload is larger than [`crate::validate::REQUEST_BYTES_MAX`].
    TooLarge,
    /// The named lease does not exist (never granted, revoked or expired).
    LeaseNotFound,
    /// A release named a resource the lease does not hold.
    NotHolder,
    /// `wait_ms: 0` was given and the resource is not free.
    WouldBlock,
    /// `wait_ms` elapsed before the resource was granted.
    Timeout,
    /// A semaphore was asked for with a `limit` other than the one it was created with.
    LimitMismatch,
    /// No leader can be reached, or this node is in a minority; retry with backoff.
    Unavailable,
    /// The lease belongs to another agent.
    Forbidden,
    /// A configured bound is reached (leases, waiters on one resource, resources). Retrying
    /// later may succeed; retrying at once will not.
    ResourceExhausted,
    /// The agent sent requests faster than its configured rate (`rate_per_s_max` per agent, a
    /// token bucket). Nothing was done; retry the same request with backoff, as for
    /// `unavailable`.
    RateLimited,
    /// A `watch.poll`'s `after` is below the oldest revision the service still keeps events
    /// for; the error carries `compact_revision`. Re-read with `kv.get` and watch from its
    /// `revision`.
    Compacted,
}

impl ErrorCode {
    /// Every code, in documentation order.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::BadRequest,
        ErrorCode::UnknownOp,
        ErrorCode::TooLarge,
        ErrorCode::LeaseNotFound,
        ErrorCode::NotHolder,
        ErrorCode::WouldBlock,
        ErrorCode::Timeout,
        ErrorCode::LimitMismatch,
        ErrorCode::Unavailable,
        ErrorCode::Forbidden,
        ErrorCode::ResourceExhausted,
        ErrorCode::RateLimited,
        ErrorCode::Compacted,
    ];

    /// The code as it appears on the wire, e.g. `"bad_request"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::LeaseNotFound => "lease_not_found",
            ErrorCode::NotHolder => "not_holder",
            ErrorCode::WouldBlock => "would_block",
            ErrorCode::Timeout => "timeout",
            ErrorCode::LimitMismatch => "limit_mismatch",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::ResourceExhausted => "resource_exhausted",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Compacted => "compacted",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a message could not be turned into a [`crate::Request`] (or a topic into an agent id).
///
/// It carries everything the failure response needs: the request id when the message could be
/// read far enough to find one (`None` becomes `"id": null` on the wire), the code and a message
/// for a human.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ProtocolError {
    /// The request id, if the message was parsed far enough to read a valid one.
    pub id: Option<String>,
    /// The machine-readable reason.
    pub code: ErrorCode,
    /// What was wrong, precise enough to fix the request without reading the server's code.
    pub message: String,
}

impl ProtocolError {
    /// A `bad_request` error, with or without the request id.
    pub fn bad_request(id: Option<String>, message: impl Into<String>) -> Self {
        ProtocolError {
            id,
            code: ErrorCode::BadRequest,
            message: message.into(),
        }
    }

    /// The failure response to send back for this error.
    pub fn to_response(&self) -> crate::Response {
        crate::Response::error(self.id.clone(), self.code, self.message.clone())
    }
}
