//! The node's [`Answer`] as the wire [`Response`]: the one place where an answer of the state
//! machine, or of the node for `admin.status` and `admin.snapshot`, becomes the JSON an agent
//! reads.

use hivekeeper_protocol::{
    AccountIssued, AccountPage, BarrierPassed, ConflictPage, Done, FenceStatus, Granted,
    Inspection, LeaderReport, LeaseGranted, LeaseKept, LeasePage, ResourcePage, Response,
    StatusReport, Success,
};

use crate::answer::Answer;
use crate::state_machine::Reply;

/// The wire response to request `id` for `answer`, or `None` while the request is queued (its
/// final answer comes later, as an `Event::Respond`).
pub fn response(id: &str, answer: &Answer) -> Option<Response> {
    let success: Success = match answer {
        Answer::Status(status) => StatusReport {
            status: status.clone(),
        }
        .into(),
        Answer::Snapshot(page) => page.as_ref().clone().into(),
        Answer::Watch(page) => page.clone().into(),
        Answer::Compacted { compact_revision } => {
            return Some(Response::compacted(id, *compact_revision));
        }
        Answer::Machine(reply) => return reply_response(id, reply),
    };
    Some(Response::ok(id, success))
}

/// The wire response to request `id` for the machine's `reply`; `None` while it is queued.
pub fn reply_response(id: &str, reply: &Reply) -> Option<Response> {
    let success: Success = match reply {
        Reply::Lease { lease, ttl_ms } => LeaseGranted {
            lease: lease.to_string(),
            ttl_ms: *ttl_ms,
        }
        .into(),
        Reply::Ttl { ttl_ms } => LeaseKept { ttl_ms: *ttl_ms }.into(),
        Reply::Granted { token } => Granted { token: *token }.into(),
        Reply::Done
        | Reply::Expired { .. }
        | Reply::WaitsExpired { .. }
        | Reply::ReservationsEnded { .. }
        | Reply::HoldTimesEnded { .. }
        | Reply::Cancelled { .. } => Done {}.into(),
        Reply::Queued => return None,
        Reply::Fence { current, valid } => FenceStatus {
            current: *current,
            valid: *valid,
        }
        .into(),
        Reply::Inspect {
            limit,
            holders,
            waiters,
            count,
            leaving,
        } => Inspection {
            limit: *limit,
            count: *count,
            holders: holders.clone(),
            waiters: waiters.clone(),
            leaving: *leaving,
            holders_total: None,
            waiters_total: None,
        }
        .into(),
        Reply::Leases { leases, next_after } => LeasePage {
            leases: leases.clone(),
            next_after: next_after.clone(),
        }
        .into(),
        Reply::Resources {
            resources,
            next_after,
        } => ResourcePage {
            resources: resources.clone(),
            next_after: next_after.clone(),
        }
        .into(),
        // The hash stays in the node: the secret, when this answer may carry it, is added by
        // the node that made it (`NodeHandle::submit`).
        Reply::Account { agent, role, .. } => AccountIssued {
            agent: agent.to_string(),
            role: *role,
            secret: None,
        }
        .into(),
        Reply::Conflicts {
            conflicts,
            next_after,
        } => ConflictPage {
            conflicts: conflicts.clone(),
            next_after: next_after.clone(),
        }
        .into(),
        Reply::Accounts {
            accounts,
            next_after,
        } => AccountPage {
            accounts: accounts.clone(),
            next_after: next_after.clone(),
        }
        .into(),
        Reply::KvPut(done) => done.clone().into(),
        Reply::KvPage(page) => page.clone().into(),
        Reply::KvDeleted(done) => done.clone().into(),
        Reply::KvTxn(done) => done.clone().into(),
        Reply::Leader { leader } => LeaderReport {
            leader: leader.clone(),
        }
        .into(),
        Reply::BarrierPassed { generation } => BarrierPassed {
            generation: *generation,
        }
        .into(),
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
        assert_eq!(reply_response("r1", &Reply::Queued), None);
        let refused = Reply::refused(ErrorCode::NotHolder, "lease 2 does not hold lock \"gw\"");
        assert_eq!(
            reply_response("r1", &refused),
            Some(Response::error(
                Some("r1".into()),
                ErrorCode::NotHolder,
                "lease 2 does not hold lock \"gw\""
            ))
        );
        assert_eq!(
            reply_response("r2", &Reply::Granted { token: 7 << 16 }),
            Some(Response::ok("r2", Granted { token: 7 << 16 }))
        );
    }

    #[test]
    fn a_barrier_round_is_answered_its_generation_and_its_inspect_keeps_count_and_leaving() {
        assert_eq!(
            reply_response(
                "b1",
                &Reply::BarrierPassed {
                    generation: 9 << 16
                }
            ),
            Some(Response::ok(
                "b1",
                BarrierPassed {
                    generation: 9 << 16
                }
            ))
        );
        let inspect = Reply::Inspect {
            limit: None,
            holders: Vec::new(),
            waiters: Vec::new(),
            count: Some(3),
            leaving: Some(2),
        };
        let answer = reply_response("i1", &inspect).expect("an answer");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&answer.encode()).expect("JSON"),
            serde_json::json!({"id": "i1", "ok": true, "count": 3, "holders": [],
                               "waiters": [], "leaving": 2})
        );
    }

    #[test]
    fn each_kv_reply_becomes_its_own_answer_shape() {
        use hivekeeper_protocol::{KvDeleted, KvPage, KvPutDone, KvTxnDone};
        let put = KvPutDone {
            revision: 3 << 16,
            prev_kv: None,
        };
        let page = KvPage {
            revision: 3 << 16,
            kvs: vec![],
            next_after: None,
        };
        let deleted = KvDeleted {
            revision: 4 << 16,
            deleted: 2,
        };
        let txn = KvTxnDone {
            revision: 5 << 16,
            succeeded: false,
            results: vec![],
        };
        let cases: [(Reply, Success); 4] = [
            (Reply::KvPut(put.clone()), put.into()),
            (Reply::KvPage(page.clone()), page.into()),
            (Reply::KvDeleted(deleted.clone()), deleted.into()),
            (Reply::KvTxn(txn.clone()), txn.into()),
        ];
        for (reply, success) in cases {
            let answer = reply_response("k", &reply).expect("an answer");
            assert_eq!(answer, Response::ok("k", success.clone()));
            let back = Response::decode(&answer.encode()).expect("decodes");
            assert_eq!(back.outcome.expect("a success").shape(), success.shape());
        }
    }

    #[test]
    fn an_election_leader_becomes_its_answer_with_leader_sent_even_when_null() {
        use hivekeeper_protocol::{LeaderInfo, LeaderReport};
        let leader = LeaderInfo {
            agent: "drone-7".into(),
            value: "10.0.0.7:7000".into(),
            token: 9 << 16,
        };
        for leader in [Some(leader), None] {
            let reply = Reply::Leader {
                leader: leader.clone(),
            };
            let answer = reply_response("e", &reply).expect("an answer");
            assert_eq!(answer, Response::ok("e", LeaderReport { leader }));
            let back = Response::decode(&answer.encode()).expect("decodes");
            assert_eq!(back, answer);
        }
    }
}
