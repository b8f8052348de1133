//! What agents ask of the machine: the wire's own [`Op`], declared once in
//! `hivekeeper_protocol::request`. A write travels through the log as an [`AgentRequest`] inside
//! [`Command::Request`](crate::Command::Request); a read is handed to
//! [`StateMachine::query`](crate::StateMachine::query), which changes nothing.
//!
//! Why the log carries the wire's op: its serde form (`{"id": "...", "op": "lock.acquire",
//! ...fields}`) is the shape of every Raft log entry since data format 1, which wrote the wire
//! `Request` into the log. `tests/format.rs` pins the shape against bytes written by that
//! build; changing it means a new data format and a migration.
//!
//! Invariants:
//! 1. An [`AgentRequest`]'s serde form is the wire form of its op, field for field, plus
//!    `secret_hash` for the account ops that set a secret (`admin.agent.add`,
//!    `admin.agent.rotate`): the node generates the secret and puts only its salted hash in the
//!    log, never the secret, and always a `role` for an add.
//! 2. A request is checked by [`AgentRequest::validate`] when it is applied, with the wire
//!    decoder's rules and messages ([`Op::validate`]), so a request read back from the log is
//!    exactly as valid as one read from the wire.

use hivekeeper_protocol::{Op, validate};
use serde::{Deserialize, Serialize};

/// A write request from an agent, as the log carries it: its id and what to change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRequest {
    /// Unique per agent: a retry reuses it and gets the first attempt's outcome.
    pub id: String,
    /// The operation, flattened beside `id` (the wire's layout, invariant 1).
    #[serde(flatten)]
    pub op: Op,
    /// For `admin.agent.add` and `admin.agent.rotate`: the new secret's salted hash, a PHC
    /// string made by the node. Absent for every other op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_hash: Option<String>,
}

impl AgentRequest {
    /// A request without a secret: every write but the account ops that set one.
    pub fn new(id: impl Into<String>, op: Op) -> Self {
        AgentRequest {
            id: id.into(),
            op,
            secret_hash: None,
        }
    }

    /// An account op that sets a secret (`admin.agent.add`, `admin.agent.rotate`) with the
    /// secret's hash, as the node logs it: an add always names its role (invariant 1). `None`
    /// for any other op.
    pub fn with_secret(id: impl Into<String>, mut op: Op, secret_hash: String) -> Option<Self> {
        match &mut op {
            Op::AdminAgentAdd { role, .. } => *role = Some(role.unwrap_or_default()),
            Op::AdminAgentRotate { .. } => {}
            _ => return None,
        }
        Some(AgentRequest {
            id: id.into(),
            op,
            secret_hash: Some(secret_hash),
        })
    }
}

/// A request that fails the wire's field checks, found when it is applied (answered
/// `bad_request` with this text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{op}: {reason}")]
pub struct InvalidRequest {
    /// The op's wire name.
    pub op: &'static str,
    /// Which field is wrong and why, as the wire decoder words it.
    pub reason: String,
}

impl AgentRequest {
    /// Checks the request id and every field of the op (invariant 2), and that a secret's hash
    /// comes with exactly the ops that set one.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        let invalid = |reason: String| InvalidRequest {
            op: self.op.name(),
            reason,
        };
        validate::request_id(&self.id)
            .and_then(|()| self.op.validate())
            .map_err(|reason| invalid(reason.into()))?;
        match (self.op.makes_secret(), &self.secret_hash) {
            (true, None) => Err(invalid("the log entry carries no `secret_hash`".into())),
            (false, Some(_)) => Err(invalid("only the account ops carry a `secret_hash`".into())),
            _ => Ok(()),
        }
    }
}
