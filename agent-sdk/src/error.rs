//! [`AgentError`]: everything that can go wrong between the application and the service.
//!
//! The service's own refusals arrive as [`AgentError::Service`] with the protocol's
//! [`ErrorCode`], except the two an application branches on every day, which get variants of
//! their own: `would_block` ([`AgentError::WouldBlock`]) and `timeout`
//! ([`AgentError::WaitTimeout`]). `unavailable` and `rate_limited` never reach the application:
//! the SDK retries them with the same request id, after a jittered backoff, until the request's
//! deadline.
//!
//! A connection that cannot succeed as configured ends [`crate::Agent::connect`] at once:
//! [`AgentError::CredentialsRefused`] (the broker's CONNACK refused the credentials) and
//! [`AgentError::Tls`] (the broker expects TLS, requires a client certificate, or is not
//! trusted). A broker that does not answer at all is [`AgentError::Unreachable`], after the
//! connect deadline.

use hivekeeper_protocol::{ErrorBody, ErrorCode, Op, ResourceKind, UnexpectedReply};

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
    /// A broker refused the agent's CONNECT for its credentials (CONNACK: bad username or
    /// password, or not authorized). Final: [`crate::Agent::connect`] returns it at once, as
    /// the same credentials would be refused again.
    #[error("credentials refused by {broker}: {refusal}")]
    CredentialsRefused {
        /// The broker that refused, `host:port`.
        broker: String,
        /// The refusal code's meaning.
        refusal: CredentialsRefusal,
    },
    /// The connection to a broker failed in a way only another TLS configuration can fix
    /// (the broker expects TLS, requires a client certificate, or is not trusted). Final:
    /// [`crate::Agent::connect`] returns it at once.
    #[error("TLS with {broker} failed: {failure}")]
    Tls {
        /// The broker, `host:port`.
        broker: String,
        /// What the handshake showed.
        failure: TlsFailure,
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
        /// The resource's kind.
        kind: ResourceKind,
        /// The resource's name.
        name: String,
    },
    /// [`crate::Guard::downgrade`] of a guard that is not one lock held exclusive (a shared
    /// lock, a multi-lock, permits or a reservation). Refused locally; nothing was sent.
    #[error("only one lock held exclusive can be downgraded; this guard holds {held}")]
    NotDowngradable {
        /// What the guard holds, e.g. `lock "fleet/db" (shared)`.
        held: String,
    },
    /// A leased key was asked of a key handle that has no session ([`crate::Agent::kv`]):
    /// take the handle from [`crate::Session::kv`].
    #[error("this key handle has no session, so no lease to bind a key to")]
    NoSession,
    /// `compacted`: a watch's cursor is older than the oldest event the service keeps. The
    /// changes in between are lost to the watch: read the keys again (`kv.get`) and watch on
    /// from that read's revision.
    #[error("the watch cursor is compacted: events up to revision {compact_revision} are gone")]
    Compacted {
        /// The revision up to which the service dropped the events.
        compact_revision: u64,
    },
    /// Any other refusal by the service, with its code and message.
    #[error("the service refused: {code}: {message}")]
    Service {
        /// The protocol's machine-readable reason.
        code: ErrorCode,
        /// The service's explanation, for a human.
        message: String,
    },
    /// A success response was not of the shape its op promises (a grant without `token`): a
    /// service or protocol-version mismatch.
    #[error("malformed response: {0}")]
    Malformed(#[from] UnexpectedReply),
}

/// Why a broker refused the CONNECT, from its CONNACK's code (MQTT 3.1.1 0x04 / 0x05, 5.0
/// 0x86 / 0x87).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsRefusal {
    /// Bad username or password: no account of that name, the wrong secret, or none given to
    /// a service with authentication on.
    #[error("bad username or password")]
    BadUsernamePassword,
    /// Not authorized: the account may not connect as this client id (with mutual TLS, a
    /// client id other than the certificate's CN).
    #[error("not authorized")]
    NotAuthorized,
}

/// What a failed TLS connection showed, when trying again with the same configuration cannot
/// succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsFailure {
    /// The agent connected without TLS and the broker answered with a TLS alert: the port
    /// speaks TLS only ([`crate::AgentConfig::tls`] is missing).
    #[error("the broker expects TLS, and the agent connected without (no CA configured)")]
    ExpectsTls,
    /// The agent connected with TLS and the broker closed the handshake, then answered a
    /// plaintext CONNECT with a CONNACK: the port speaks MQTT without TLS.
    #[error("the broker does not speak TLS on this port (it answers plaintext MQTT)")]
    NotTls,
    /// The broker requires a client certificate (mutual TLS) and the agent presented none
    /// ([`crate::AgentConfig::client_certificate`] is missing).
    #[error("the broker requires a client certificate (mutual TLS), and the agent has none")]
    CertificateRequired,
    /// The broker refused the agent's client certificate (not signed by its client CA, or
    /// otherwise unacceptable to it).
    #[error("the broker refused the client certificate ({reason})")]
    CertificateRefused {
        /// The TLS alert the broker sent.
        reason: String,
    },
    /// The broker's certificate does not chain to the configured CA.
    #[error("the broker's certificate is not signed by the configured CA ({reason})")]
    UnknownCa {
        /// rustls' verdict on the certificate.
        reason: String,
    },
    /// The broker's certificate was refused for another reason: it does not name the host
    /// as given in the broker list, or it has expired.
    #[error("the broker's certificate is refused ({reason})")]
    BadCertificate {
        /// rustls' verdict on the certificate.
        reason: String,
    },
}

impl AgentError {
    /// The protocol error code behind this error, when the service gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            AgentError::Service { code, .. } => Some(*code),
            AgentError::WouldBlock => Some(ErrorCode::WouldBlock),
            AgentError::WaitTimeout => Some(ErrorCode::Timeout),
            AgentError::Compacted { .. } => Some(ErrorCode::Compacted),
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
            // A `compacted` without its revision is a service fault; 0 still tells the
            // client to read again, which is the one right answer.
            ErrorCode::Compacted => AgentError::Compacted {
                compact_revision: body.compact_revision.unwrap_or(0),
            },
            code => AgentError::Service {
                code,
                message: body.message,
            },
        }
    }
}
