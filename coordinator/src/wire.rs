//! The edge between the wire protocol and the state machine: a wire [`Request`] becomes the
//! machine's [`Command`] (a write) or [`ReadOp`] (a read), and the machine's [`Reply`] becomes
//! the wire [`Response`].
//!
//! The machine has types of its own (`hivekeeper_state_machine::request`), so the log and the
//! snapshots are not the protocol crate's types, and the machine never builds a response.
//! Conversions happen here, once, where a request enters the node and where its answer leaves.
//!
//! ```text
//!  Request (decoded and validated by a front door)
//!    ├─ write(request) ── Ok(AgentRequest) ─▶ proposer ─▶ log (Command::Request) ─▶ apply
//!    │                          └─ Err(request): not a write, handed back untouched
//!    └─ read(&op) ── Ok(ReadOp) ─▶ read-index or lease keeper ─▶ StateMachine::query
//!                 └─ Err(NotARead): a write, or an op only the node answers (admin.status,
//!                    admin.member.*: Raft's view and configuration)
//!  Reply ── response(id, &reply) ─▶ Some(Response); None while the request is queued
//! ```

use hivekeeper_protocol::{ErrorCode, Op, Request, Response, Success};

use crate::state_machine::{AgentOp, AgentRequest, ReadOp, Reply};

/// The state machine's request for a write request (the log's `Command::Request` carries it
/// with its agent). `Err` hands the request back untouched when its op is not a write (a read,
/// or an op the node answers itself): the caller answers it another way.
// The `Err` is the request itself, handed back by value: as large as the `Ok`, and boxing it
// would allocate for every read that passes through here.
#[allow(clippy::result_large_err)]
pub fn write(request: Request) -> Result<AgentRequest, Request> {
    let Request { id, op } = request;
    let op = match op {
        Op::LeaseGrant { ttl_ms } => AgentOp::LeaseGrant { ttl_ms },
        Op::LeaseRevoke { lease } => AgentOp::LeaseRevoke { lease },
        Op::LockAcquire {
            name,
            lease,
            wait_ms,
        } => AgentOp::LockAcquire {
            name,
            lease,
            wait_ms,
        },
        Op::LockRelease { name, lease } => AgentOp::LockRelease { name, lease },
        Op::SemAcquire {
            name,
            limit,
            lease,
            permits,
            wait_ms,
        } => AgentOp::SemAcquire {
            name,
            limit,
            lease,
            permits,
            wait_ms,
        },
        Op::SemRelease { name, lease } => AgentOp::SemRelease { name, lease },
        Op::WaypointReserve {
            name,
            lease,
            lat,
            lon,
            alt_min_m,
            alt_max_m,
            radius_m,
            wait_ms,
            start_ms,
            end_ms,
            priority,
        } => AgentOp::WaypointReserve {
            name,
            lease,
            lat,
            lon,
            alt_min_m,
            alt_max_m,
            radius_m,
            wait_ms,
            start_ms,
            end_ms,
            priority,
        },
        Op::WaypointRelease { name, lease } => AgentOp::WaypointRelease { name, lease },
        Op::RouteReserve {
            name,
            lease,
            volumes,
            wait_ms,
            priority,
        } => AgentOp::RouteReserve {
            name,
            lease,
            volumes,
            wait_ms,
            priority,
        },
        Op::RouteRelease { name, lease } => AgentOp::RouteRelease { name, lease },
        Op::RouteAmend {
            name,
            lease,
            volumes,
            priority,
        } => AgentOp::RouteAmend {
            name,
            lease,
            volumes,
            priority,
        },
        Op::AdminRevoke { lease } => AgentOp::AdminRevoke { lease },
        Op::AdminAgentRemove { name } => AgentOp::AdminAgentRemove { name },
        // Writes the node completes first: it makes the secret ([`account_request`]).
        op @ (Op::AdminAgentAdd { .. }
        | Op::AdminAgentRotate { .. }
        | Op::AdminAgentList { .. }
        | Op::LeaseKeepalive { .. }
        | Op::AirspaceQuery { .. }
        | Op::FenceCheck { .. }
        | Op::Inspect { .. }
        | Op::AdminStatus {}
        | Op::AdminLeases { .. }
        | Op::AdminResources { .. }
        | Op::AdminSnapshot { .. }
        | Op::AdminMemberAdd { .. }
        | Op::AdminMemberRemove { .. }) => return Err(Request { id, op }),
    };
    Ok(AgentRequest { id, op })
}

/// The state machine's request for an `admin.agent.add` or `admin.agent.rotate`, with the
/// hash of the secret the node made for it (the log never carries a secret). `None` for any
/// other op.
pub fn account_request(request: Request, secret_hash: String) -> Option<AgentRequest> {
    let Request { id, op } = request;
    let op = match op {
        Op::AdminAgentAdd { name, role } => AgentOp::AdminAgentAdd {
            name,
            role: role.unwrap_or_default(),
            secret_hash,
        },
        Op::AdminAgentRotate { name } => AgentOp::AdminAgentRotate { name, secret_hash },
        _ => return None,
    };
    Some(AgentRequest { id, op })
}

/// Why a wire op is not a read the state machine answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotARead {
    /// The op changes state: it goes through the log ([`write`]).
    #[error("{op} changes state and must be applied through the log")]
    Write {
        /// The op's wire name.
        op: &'static str,
    },
    /// The op is about Raft (`admin.status`, `admin.member.*`, `admin.snapshot`): the node
    /// answers it.
    #[error("{op} is answered by the node (Raft), not the state machine")]
    NodeOnly {
        /// The op's wire name.
        op: &'static str,
    },
}

impl NotARead {
    /// The refusal a caller that cannot route the op elsewhere answers (`bad_request`).
    pub fn refusal(&self) -> Reply {
        Reply::refused(ErrorCode::BadRequest, self.to_string())
    }
}

/// The machine's read for a wire op that changes nothing and that the machine can answer.
pub fn read(op: &Op) -> Result<ReadOp, NotARead> {
    match op {
        Op::LeaseKeepalive { lease } => Ok(ReadOp::LeaseKeepalive {
            lease: lease.clone(),
        }),
        Op::FenceCheck { name, kind, token } => Ok(ReadOp::FenceCheck {
            resource: name.clone(),
            kind: *kind,
            token: *token,
        }),
        Op::Inspect { kind, name } => Ok(ReadOp::Inspect {
            kind: *kind,
            name: name.clone(),
        }),
        Op::AdminLeases { after } => Ok(ReadOp::AdminLeases {
            after: after.clone(),
        }),
        Op::AdminResources {
            kind,
            prefix,
            after,
            limit,
        } => Ok(ReadOp::AdminResources {
            kind: *kind,
            prefix: prefix.clone(),
            after: after.clone(),
            limit: *limit,
        }),
        Op::AdminAgentList { after } => Ok(ReadOp::AdminAgentList {
            after: after.clone(),
        }),
        Op::AirspaceQuery {
            volume,
            volumes,
            after,
            limit,
        } => Ok(ReadOp::AirspaceQuery {
            volume: *volume,
            volumes: volumes.clone(),
            after: after.clone(),
            limit: *limit,
        }),
        Op::AdminStatus {}
        | Op::AdminSnapshot { .. }
        | Op::AdminMemberAdd { .. }
        | Op::AdminMemberRemove { .. } => Err(NotARead::NodeOnly { op: op.name() }),
        Op::LeaseGrant { .. }
        | Op::LeaseRevoke { .. }
        | Op::LockAcquire { .. }
        | Op::LockRelease { .. }
        | Op::SemAcquire { .. }
        | Op::SemRelease { .. }
        | Op::WaypointReserve { .. }
        | Op::WaypointRelease { .. }
        | Op::RouteReserve { .. }
        | Op::RouteRelease { .. }
        | Op::RouteAmend { .. }
        | Op::AdminRevoke { .. }
        | Op::AdminAgentAdd { .. }
        | Op::AdminAgentRemove { .. }
        | Op::AdminAgentRotate { .. } => Err(NotARead::Write { op: op.name() }),
    }
}

/// The wire response to request `id` for `reply`, or `None` while the request is queued (its
/// final answer comes later, as an `Event::Respond`).
pub fn response(id: &str, reply: &Reply) -> Option<Response> {
    let success = match reply {
        Reply::Lease { lease, ttl_ms } => Success::lease(lease.to_string(), *ttl_ms),
        Reply::Ttl { ttl_ms } => Success::ttl(*ttl_ms),
        Reply::Granted { token } => Success::token(*token),
        Reply::Done
        | Reply::Expired { .. }
        | Reply::WaitsExpired { .. }
        | Reply::ReservationsEnded { .. }
        | Reply::Cancelled { .. } => Success::default(),
        Reply::Queued => return None,
        Reply::Fence { current, valid } => Success::fence(*current, *valid),
        Reply::Inspect {
            limit,
            holders,
            waiters,
        } => Success {
            limit: *limit,
            holders: Some(holders.clone()),
            waiters: Some(waiters.clone()),
            ..Success::default()
        },
        Reply::Status(status) => Success {
            status: Some(status.clone()),
            ..Success::default()
        },
        Reply::Snapshot(page) => Success::snapshot(page.as_ref().clone()),
        Reply::Leases { leases, next_after } => Success {
            leases: Some(leases.clone()),
            next_after: next_after.clone(),
            ..Success::default()
        },
        Reply::Resources {
            resources,
            next_after,
        } => Success {
            resources: Some(resources.clone()),
            next_after: next_after.clone(),
            ..Success::default()
        },
        // The hash stays in the node: the secret, when this answer may carry it, is added by
        // the node that made it (`NodeHandle::submit`).
        Reply::Account { agent, role, .. } => Success {
            agent: Some(agent.to_string()),
            role: Some(*role),
            ..Success::default()
        },
        Reply::Conflicts {
            conflicts,
            next_after,
        } => Success {
            conflicts: Some(conflicts.clone()),
            next_after: next_after.clone(),
            ..Success::default()
        },
        Reply::Accounts {
            accounts,
            next_after,
        } => Success {
            accounts: Some(accounts.clone()),
            next_after: next_after.clone(),
            ..Success::default()
        },
        Reply::Refused { code, message } => {
            return Some(Response::error(
                Some(id.to_string()),
                *code,
                message.clone(),
            ));
        }
    };
    Some(Response::ok(id, success))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hivekeeper_protocol::{Priority, ResourceKind};

    /// One op of every kind, as the wire decodes it.
    fn every_op() -> Vec<Op> {
        let lease = || "0000000000000002".to_string();
        let name = || "gw".to_string();
        let volume = || hivekeeper_protocol::Volume {
            lat: 51.5,
            lon: -0.1,
            radius_m: 20.0,
            alt_min_m: 0.0,
            alt_max_m: 120.0,
            start_ms: 1_764_503_600_000,
            end_ms: 1_764_503_660_000,
        };
        vec![
            Op::LeaseGrant { ttl_ms: 5_000 },
            Op::LeaseKeepalive { lease: lease() },
            Op::LeaseRevoke { lease: lease() },
            Op::LockAcquire {
                name: name(),
                lease: lease(),
                wait_ms: Some(10),
            },
            Op::LockRelease {
                name: name(),
                lease: lease(),
            },
            Op::SemAcquire {
                name: name(),
                limit: 3,
                lease: lease(),
                permits: 2,
                wait_ms: None,
            },
            Op::SemRelease {
                name: name(),
                lease: lease(),
            },
            Op::WaypointReserve {
                name: name(),
                lease: lease(),
                lat: Some(51.5),
                lon: Some(-0.1),
                alt_min_m: None,
                alt_max_m: Some(120.0),
                radius_m: Some(3.0),
                wait_ms: Some(0),
                start_ms: None,
                end_ms: None,
                priority: Priority::EMERGENCY,
            },
            Op::WaypointRelease {
                name: name(),
                lease: lease(),
            },
            Op::RouteReserve {
                name: name(),
                lease: lease(),
                volumes: vec![volume()],
                wait_ms: Some(0),
                priority: Priority::new(2).expect("a level"),
            },
            Op::RouteRelease {
                name: name(),
                lease: lease(),
            },
            Op::RouteAmend {
                name: name(),
                lease: lease(),
                volumes: vec![volume(), volume()],
                priority: Priority::new(1).expect("a level"),
            },
            Op::AirspaceQuery {
                volume: None,
                volumes: Some(vec![volume()]),
                after: None,
                limit: Some(5),
            },
            Op::FenceCheck {
                name: name(),
                kind: ResourceKind::Sem,
                token: 7,
            },
            Op::Inspect {
                kind: ResourceKind::Waypoint,
                name: name(),
            },
            Op::AdminStatus {},
            Op::AdminLeases { after: None },
            Op::AdminResources {
                kind: Some(ResourceKind::Lock),
                prefix: Some("door/".into()),
                after: None,
                limit: Some(10),
            },
            Op::AdminSnapshot {
                index: Some(120),
                offset: Some(0),
                page_bytes_max: None,
            },
            Op::AdminRevoke { lease: lease() },
            Op::AdminMemberAdd {
                name: "n4".into(),
                addr: "10.0.0.4:7000".into(),
                catch_up_timeout_ms: None,
                catch_up_lag_entries_max: None,
            },
            Op::AdminMemberRemove { name: "n4".into() },
            Op::AdminAgentAdd {
                name: "drone-1".into(),
                role: None,
            },
            Op::AdminAgentList { after: None },
            Op::AdminAgentRemove {
                name: "drone-1".into(),
            },
            Op::AdminAgentRotate {
                name: "drone-1".into(),
            },
        ]
    }

    /// Every op goes exactly one way, the way `Op::is_write` says, and a write's command has
    /// the wire request's JSON (the log keeps the wire's shape).
    #[test]
    fn every_op_is_a_command_or_a_read_or_the_nodes() {
        let ops = every_op();
        assert_eq!(ops.len(), Op::NAMES.len());
        for op in ops {
            let request = Request {
                id: "r1".into(),
                op: op.clone(),
            };
            let wire_json = serde_json::to_value(&request).expect("encodes");
            match write(request) {
                Ok(request) => {
                    assert!(op.is_write(), "{} became a command", op.name());
                    assert_eq!(request.op.name(), op.name());
                    let json = serde_json::to_value(&request).expect("encodes");
                    assert_eq!(json, wire_json, "{} changed shape", op.name());
                    assert_eq!(read(&op), Err(NotARead::Write { op: op.name() }));
                }
                Err(back) if op.makes_secret() => {
                    assert!(op.is_write(), "{} makes a secret for the log", op.name());
                    assert_eq!(back.op, op, "the request comes back untouched");
                    assert_eq!(read(&op), Err(NotARead::Write { op: op.name() }));
                    let request = account_request(back, "$argon2id$x".into())
                        .unwrap_or_else(|| panic!("{} has an account request", op.name()));
                    assert_eq!(request.op.name(), op.name());
                }
                Err(back) => {
                    assert!(!op.is_write(), "{} was refused as a command", op.name());
                    assert_eq!(back.op, op, "the request comes back untouched");
                    match read(&op) {
                        Ok(read) => assert_eq!(read.name(), op.name()),
                        Err(not_read) => {
                            assert_eq!(not_read, NotARead::NodeOnly { op: op.name() });
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_queued_reply_has_no_response_yet_and_a_refusal_keeps_its_code_and_text() {
        assert_eq!(response("r1", &Reply::Queued), None);
        let refused = Reply::refused(ErrorCode::NotHolder, "lease 2 does not hold lock \"gw\"");
        assert_eq!(
            response("r1", &refused),
            Some(Response::error(
                Some("r1".into()),
                ErrorCode::NotHolder,
                "lease 2 does not hold lock \"gw\""
            ))
        );
        assert_eq!(
            response("r2", &Reply::Granted { token: 7 << 16 }),
            Some(Response::ok("r2", Success::token(7 << 16)))
        );
    }
}
