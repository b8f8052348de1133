//! Error codes of protocol v1 and the error a decoder or validator returns.
//!
//! The list of codes is closed and documented in `docs/PROTOCOL.md`: an independent client
//! switches on them, so a code is never renamed and a new one is only ever added.

use serde::{Deserialize, Serialize};

/// Declares [`ErrorCode`] from one list: each code with its doc and its wire name, in
/// documentation order; derives its serde form, [`ErrorCode::ALL`] and [`ErrorCode::as_str`].
macro_rules! error_codes {
    ($($(#[$doc:meta])* $code:ident = $wire:literal,)*) => {
        /// The machine-readable reason a request failed, sent as `error.code`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum ErrorCode {
            $($(#[$doc])* #[serde(rename = $wire)] $code,)*
        }

        impl ErrorCode {
            /// Every code, in documentation order.
            pub const ALL: [ErrorCode; [$(stringify!($code),)*].len()] = [$(ErrorCode::$code,)*];

            /// The code as it appears on the wire, e.g. `"bad_request"`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$code => $wire,)*
                }
            }
        }
    };
}

error_codes! {
    /// The message is not JSON, not an object, misses a field, has a field of the wrong type or
    /// out of range, or has a field the op does not take.
    BadRequest = "bad_request",
    /// The `op` names no operation of this protocol version.
    UnknownOp = "unknown_op",
    /// The payload is larger than [`crate::validate::REQUEST_BYTES_MAX`].
    TooLarge = "too_large",
    /// The named lease does not exist (never granted, revoked or expired).
    LeaseNotFound = "lease_not_found",
    /// A release named a resource the lease does not hold.
    NotHolder = "not_holder",
    /// `wait_ms: 0` was given and the resource is not free.
    WouldBlock = "would_block",
    /// `wait_ms` elapsed before the resource was granted.
    Timeout = "timeout",
    /// A semaphore was asked for with a `limit` other than the one it was created with.
    LimitMismatch = "limit_mismatch",
    /// No leader can be reached, or this node is in a minority; retry with backoff.
    Unavailable = "unavailable",
    /// The lease belongs to another agent.
    Forbidden = "forbidden",
    /// A configured bound is reached (leases, waiters on one resource, resources). Retrying
    /// later may succeed; retrying at once will not.
    ResourceExhausted = "resource_exhausted",
    /// The agent sent requests faster than its configured rate (`rate_per_s_max` per agent, a
    /// token bucket). Nothing was done; retry the same request with backoff, as for
    /// `unavailable`.
    RateLimited = "rate_limited",
    /// A `watch.poll`'s `after` is below the oldest revision the service still keeps events
    /// for; the error carries `compact_revision`. Re-read with `kv.get` and watch from its
    /// `revision`.
    Compacted = "compacted",
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
