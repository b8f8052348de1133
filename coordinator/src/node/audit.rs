//! The audit line: one INFO line per operator action, saying who did what to what and how it
//! ended, on the node the operator's request came in through.
//!
//! ```text
//!  submit(agent, request: admin.revoke / admin.member.* / admin.agent.*, respond)
//!    └▶ audited(agent, op, respond) ─▶ the request's final answer ─▶ INFO hivekeeper::audit
//!                                       who=<agent> action=<op> on=<subject> outcome=<ok|code>
//! ```
//!
//! The line is written where the request entered (never again on the leader a follower
//! forwards to), so each action is one line in the cluster. Reads (`admin.status`,
//! `admin.leases`, `admin.resources`, `admin.agent.list`) change nothing and are not audited,
//! except the first page of `admin.snapshot` (a backup: it copies the whole state).
//! `who` is the authenticated agent id when authentication is on (the connection's username),
//! else the client id the operator's CLI chose (`hk-admin-{pid}`, or its certificate's CN).

use hivekeeper_protocol::{Op, Response};

use super::waits::Respond;

/// The target of audit lines, so that a log shipper can route them (`RUST_LOG` can also keep
/// them alone: `RUST_LOG=warn,hivekeeper::audit=info`).
pub const AUDIT_TARGET: &str = "hivekeeper::audit";

/// What an operator action acts on, for the audit line; `None` for an op that is not an
/// operator's action.
pub(super) fn subject(op: &Op) -> Option<String> {
    match op {
        Op::AdminRevoke { lease } => Some(format!("lease {lease}")),
        Op::AdminMemberAdd { name, addr, .. } => Some(format!("member {name}={addr}")),
        Op::AdminMemberRemove { name } => Some(format!("member {name}")),
        Op::AdminAgentAdd { name, role, .. } => Some(format!(
            "account {name} (role {})",
            role.unwrap_or_default().as_str()
        )),
        Op::AdminAgentRemove { name } | Op::AdminAgentRotate { name } => {
            Some(format!("account {name}"))
        }
        // A backup copies everything, account hashes too: its first page (the one that takes
        // the snapshot) is audited; the pages after it only read what that one took.
        Op::AdminSnapshot { index: None, .. } => Some("the whole replicated state".into()),
        _ => None,
    }
}

/// `respond`, writing the audit line of `agent`'s `op` when its final answer comes; `respond`
/// itself for an op that is not an operator's action.
pub(super) fn audited(agent: &str, op: &Op, respond: Respond) -> Respond {
    let Some(on) = subject(op) else {
        return respond;
    };
    let (who, action) = (agent.to_string(), op.name());
    Box::new(move |response: Response| {
        let outcome = outcome(&response);
        tracing::info!(target: AUDIT_TARGET, %who, action, %on, %outcome, "admin action");
        respond(response);
    })
}

/// `ok`, or the refusal's code and message.
fn outcome(response: &Response) -> String {
    match &response.outcome {
        Ok(_) => "ok".into(),
        Err(error) => format!("{}: {}", error.code.as_str(), error.message),
    }
}

#[cfg(test)]
mod tests {
    use hivekeeper_protocol::{ErrorCode, Op, Response, Role, Success};

    use super::{outcome, subject};

    #[test]
    fn each_operator_action_names_what_it_acts_on_and_reads_are_not_actions() {
        let cases = [
            (
                Op::AdminRevoke {
                    lease: "l-7".into(),
                },
                Some("lease l-7"),
            ),
            (
                Op::AdminMemberAdd {
                    name: "n4".into(),
                    addr: "10.0.0.4:7401".into(),
                    catch_up_timeout_ms: None,
                    catch_up_lag_entries_max: None,
                },
                Some("member n4=10.0.0.4:7401"),
            ),
            (
                Op::AdminMemberRemove { name: "n2".into() },
                Some("member n2"),
            ),
            (
                Op::AdminAgentAdd {
                    name: "ops".into(),
                    role: Some(Role::Observer),
                    kv_read: Vec::new(),
                    kv_write: Vec::new(),
                },
                Some("account ops (role observer)"),
            ),
            (
                Op::AdminAgentRotate {
                    name: "drone-1".into(),
                },
                Some("account drone-1"),
            ),
            (
                Op::AdminSnapshot {
                    index: None,
                    offset: None,
                    page_bytes_max: None,
                },
                Some("the whole replicated state"),
            ),
            (
                Op::AdminSnapshot {
                    index: Some(120),
                    offset: Some(32_768),
                    page_bytes_max: None,
                },
                None,
            ),
            (Op::AdminStatus {}, None),
            (Op::AdminLeases { after: None }, None),
        ];
        for (op, expected) in cases {
            assert_eq!(subject(&op).as_deref(), expected, "{op:?}");
        }
    }

    #[test]
    fn the_outcome_is_ok_or_the_refusal() {
        let ok = Response {
            id: Some("1".into()),
            outcome: Ok(Success::default()),
        };
        assert_eq!(outcome(&ok), "ok");
        let refused = Response::error(
            Some("1".into()),
            ErrorCode::LeaseNotFound,
            "lease l-9 is not live",
        );
        assert_eq!(outcome(&refused), "lease_not_found: lease l-9 is not live");
    }
}
