//! The machine's [`Reply`] as the wire [`Response`]: the one place where an answer of the state
//! machine (or of the node, for `admin.status` and `admin.snapshot`) becomes the JSON an agent
//! reads.

use hivekeeper_protocol::{Response, Success};

use crate::state_machine::Reply;

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
    use hivekeeper_protocol::ErrorCode;

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
