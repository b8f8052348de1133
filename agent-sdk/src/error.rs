//! [`AgentError`]: everything that can go wrong between the application and the service.
//!
//! The service's own refusals arrive as [`AgentError::Service`] with the protocol's
//! [`ErrorCode`], except the two an application branches on every day, which get variants of
//! their own: `would_block` ([`AgentError::WouldBlock`]) and `timeout`
//! ([`AgentError::WaitTimeout`]). `unavailable` and `rate_limited` never reach the application:
//! the SDK retries them with the same request id, after a jittered backoff, until the request's
//! deadline.

use hivekeeper_protocol::{ErrorBody, ErrorCode, Op, ResourceKind};

use crate::session::SessionState;

/// Why a call into the SDK failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The configuration (or an argument such as a TTL) is unusable; nothing was sent.
    #[error("invalid agent configuration: {0}")]
    Config(String),
    /// [`crate::Agent::connect`] reached no broker of the list in time.
    #[error("no broker of {brokers} accepted a connection within {waited_ms} ms")]
    Unreachable {
        /// The broker list, as configured.
        brokers: String,
        /// How long the agent tried.
        waited_ms: u64,
    },
    /// The request's deadline passed while the agent had no connection to any broker (or the
    /// agent's connection task has stopped).
    #[error("not connected to any broker")]
    Disconnected,
    /// The request's deadline passed while connected, with no final response: the service is
    /// slow, down behind a live broker, or the responses are lost.
    #[error("{op}: no response within {waited_ms} ms")]
    Timeout {
        /// The op that went unanswered.
        op: &'static str,
        /// How long the SDK kept resending it.
        waited_ms: u64,
    },
    /// `would_block`: an acquire with `wait_ms: 0` found the resource taken.
    #[error("the resource is taken (would_block)")]
    WouldBlock,
    /// `timeout`: an acquire's `wait_ms` ran out before it was granted. Nothing is held.
    #[error("the wait ran out before the resource was granted (timeout)")]
    WaitTimeout,
    /// The session can no longer prove its lease alive (jeopardy), or the lease is gone
    /// (expired, revoked). Whatever was done under its guards must stop.
    #[error("the session is lost ({0:?})")]
    Lost(SessionState),
    /// This session already holds `name` or is acquiring it. Refused locally: the service
    /// would answer with the existing token, and two guards sharing one hold would release it
    /// under each other.
    #[error("this session already holds or is acquiring {kind:?} {name:?}")]
    AlreadyHeld {
        /// Lock, semaphore or waypoint.
        kind: ResourceKind,
        /// The resource's name.
        name: String,
    },
    /// Any other refusal by the service, with its code and message.
    #[error("the service refused: {code}: {message}")]
    Service {
        /// The protocol's machine-readable reason.
        code: ErrorCode,
        /// The service's explanation, for a human.
        message: String,
    },
    /// A success response lacked a field its op promises (a grant without `token`): a service
    /// or protocol-version mismatch.
    #[error("malformed response: {0}")]
    Malformed(String),
}

impl AgentError {
    /// The protocol error code behind this error, when the service gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            AgentError::Service { code, .. } => Some(*code),
            AgentError::WouldBlock => Some(ErrorCode::WouldBlock),
            AgentError::WaitTimeout => Some(ErrorCode::Timeout),
            _ => None,
        }
    }

    /// Refuses locally what the service would refuse with `bad_request` (the op's own field
    /// checks, [`Op::validate`]), with the service's message, so that a caller sees the same
    /// error whether or not the request was sent.
    pub(crate) fn check_locally(op: &Op) -> Result<(), AgentError> {
        op.validate().map_err(|message| AgentError::Service {
            code: ErrorCode::BadRequest,
            message: format!("{}: {message}", op.name()),
        })
    }

    /// The error for a failure response. The one place that maps codes to variants, so an
    /// application sees the same variant whichever call it made.
    pub(crate) fn from_service(body: ErrorBody) -> AgentError {
        match body.code {
            ErrorCode::WouldBlock => AgentError::WouldBlock,
            ErrorCode::Timeout => AgentError::WaitTimeout,
            code => AgentError::Service {
                code,
                message: body.message,
            },
        }
    }
}
