//! Leases: TTL bounds, ownership, revoke, expiry and what a lease's end does in its entry.

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Command, Event, LeaseEnd, LeaseId, LogMeta, ReleaseReason, Reply, ResourceKey};

fn code(reply: &Reply) -> ErrorCode {
    match reply {
        Reply::Refused { code, .. } => *code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn ttl_outside_the_configured_range_is_bad_request_and_grants_nothing() {
    let mut h = Harness::new();
    for ttl_ms in [1, 499, 3_600_001] {
        let (reply, events) = h.send("a", lease_grant(ttl_ms));
        assert_eq!(code(&reply), ErrorCode::BadRequest, "ttl {ttl_ms}");
        assert!(events.is_empty());
    }
    assert_eq!(h.sm.leases().count(), 0);
    let (reply, events) = h.send("a", lease_grant(500));
    assert_eq!(
        reply,
        Reply::Lease {
            lease: LeaseId(4),
            ttl_ms: 500
        }
    );
    assert_eq!(
        events,
        vec![Event::LeaseGranted {
            agent: Arc::from("a"),
            lease: LeaseId(4),
            ttl_ms: 500
        }]
    );
}

#[test]
fn another_agents_lease_is_forbidden_and_an_unknown_one_not_found() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    assert_eq!(
        code(&h.reply("b", lock_acquire("l", &a, None))),
        ErrorCode::Forbidden
    );
    assert_eq!(
        code(&h.reply("b", Op::LeaseRevoke { lease: a.clone() })),
        ErrorCode::Forbidden
    );
    assert_eq!(
        code(&h.reply("a", lock_acquire("l", "00000000000000ff", None))),
        ErrorCode::LeaseNotFound
    );
    assert_eq!(
        code(&h.reply("a", lock_acquire("l", "not-a-lease", None))),
        ErrorCode::LeaseNotFound
    );
    let keepalive = Op::LeaseKeepalive { lease: a.clone() };
    assert_eq!(h.sm.query("a", &keepalive), Reply::Ttl { ttl_ms: 5_000 });
    assert_eq!(code(&h.sm.query("b", &keepalive)), ErrorCode::Forbidden);
}

#[test]
fn lease_expiry_releases_everything_and_grants_the_next_waiters_in_one_entry() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 1_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    h.reply("a", lock_acquire("l1", &a, None));
    h.reply("a", sem_acquire("s", 2, &a, 2, None));
    h.reply("a", pad("p", &a, 0.0, 3.0, None));
    h.reply("c", lock_acquire("l2", &c, None));
    h.send_as("a", "a-waits-l2", lock_acquire("l2", &a, None));
    h.send_as("b", "b-l1", lock_acquire("l1", &b, None));
    h.send_as("b", "b-s", sem_acquire("s", 2, &b, 1, None));
    h.send_as("b", "b-p", pad("p", &b, 0.0, 3.0, None));
    h.now_ms += 1_000;
    let (reply, events) = h.expire(&[&a]);
    assert_eq!(
        reply,
        Reply::Expired {
            leases: vec![LeaseId(1)]
        }
    );
    let kinds: Vec<String> = events
        .iter()
        .map(|event| match event {
            Event::LeaseEnded { reason, .. } => format!("ended {reason:?}"),
            Event::Released { key, reason, .. } => format!("released {key} {reason:?}"),
            Event::Preempted { key, .. } => format!("preempted {key}"),
            Event::PreemptionWithdrawn { key, .. } => format!("preemption withdrawn {key}"),
            Event::Granted {
                key, agent, queued, ..
            } => format!("granted {key} to {agent} {queued}"),
            Event::Respond {
                key,
                agent,
                request_id,
                reply,
            } => match reply {
                Reply::Refused { code, .. } => format!("answer {agent}/{request_id} {key} {code}"),
                Reply::Granted { .. } => format!("answer {agent}/{request_id} {key} granted"),
                other => format!("answer {agent}/{request_id} {key} {other:?}"),
            },
            Event::Queued { key, agent, .. } => format!("queued {agent} on {key}"),
            Event::LeaseGranted { .. } => "lease granted".into(),
            Event::AccountChanged { agent, change } => format!("account {agent} {change:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "ended Expired",
            "released lock:l1 LeaseEnded",
            "released sem:s LeaseEnded",
            "released waypoint:p LeaseEnded",
            "answer a/a-waits-l2 lock:l2 lease_not_found",
            "granted lock:l1 to b true",
            "answer b/b-l1 lock:l1 granted",
            "granted sem:s to b true",
            "answer b/b-s sem:s granted",
            "granted waypoint:p to b true",
            "answer b/b-p waypoint:p granted",
        ]
    );
    assert_eq!(h.occupants(ResourceKind::Lock, "l1").0, vec!["b"]);
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l2"),
        (vec!["c".into()], vec![])
    );
    assert_eq!(h.occupants(ResourceKind::Sem, "s").0, vec!["b"]);
    assert_eq!(h.occupants(ResourceKind::Waypoint, "p").0, vec!["b"]);
    assert_eq!(
        h.sm.leases().map(|(id, ..)| id).collect::<Vec<_>>(),
        vec![LeaseId(2), LeaseId(3)]
    );
}

#[test]
fn a_waiter_whose_lease_died_is_never_granted() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 1_000),
        h.lease("b", 1_000),
        h.lease("c", 5_000),
    );
    h.reply("a", lock_acquire("l", &a, None));
    h.send_as("b", "b-l", lock_acquire("l", &b, None));
    h.send_as("c", "c-l", lock_acquire("l", &c, None));
    h.now_ms += 1_000;
    // The holder and the head waiter expire in the same entry: the lock skips b.
    let (_, events) = h.expire(&[&a, &b]);
    let granted: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::Granted { agent, .. } => Some(&**agent),
            _ => None,
        })
        .collect();
    assert_eq!(granted, vec!["c"]);
    let answers = responses(&events);
    assert!(matches!(
        &answers[0],
        (agent, _, Reply::Refused { code: ErrorCode::LeaseNotFound, .. }) if agent == "b"
    ));
    assert!(matches!(&answers[1], (agent, _, Reply::Granted { .. }) if agent == "c"));
}

#[test]
fn a_lease_never_expires_before_its_ttl() {
    let mut h = Harness::new();
    let a = h.lease("a", 1_000);
    h.reply("a", lock_acquire("l", &a, None));
    h.now_ms += 999;
    let (reply, events) = h.expire(&[&a]);
    assert_eq!(reply, Reply::Expired { leases: vec![] });
    assert!(events.is_empty());
    assert_eq!(h.occupants(ResourceKind::Lock, "l").0, vec!["a"]);
}

#[test]
fn an_expiry_from_a_deposed_leaders_term_is_ignored() {
    let mut h = Harness::new();
    let a = h.lease("a", 1_000);
    h.now_ms += 5_000;
    h.term = 2;
    h.reply("b", lease_grant(1_000));
    let stale = Command::ExpireLeases {
        term: 1,
        leases: vec![LeaseId::parse(&a).unwrap()],
    };
    let (reply, events) = h.apply(stale);
    assert_eq!(reply, Reply::Expired { leases: vec![] });
    assert!(events.is_empty());
    assert_eq!(h.sm.leases().count(), 2);
}

#[test]
fn revoke_releases_and_hands_over() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    let first = Harness::token(&h.reply("a", lock_acquire("l", &a, None)));
    h.reply("b", lock_acquire("l", &b, None));
    let (reply, events) = h.send("a", Op::LeaseRevoke { lease: a.clone() });
    assert_eq!(reply, Reply::Done);
    assert_eq!(
        events[..2],
        [
            Event::LeaseEnded {
                agent: Arc::from("a"),
                lease: LeaseId(1),
                reason: LeaseEnd::Revoked
            },
            Event::Released {
                key: ResourceKey::new(ResourceKind::Lock, &Arc::from("l")),
                agent: Arc::from("a"),
                lease: LeaseId(1),
                token: first,
                held_ms: 0,
                reason: ReleaseReason::LeaseEnded,
            },
        ]
    );
    assert_eq!(h.occupants(ResourceKind::Lock, "l").0, vec!["b"]);
    assert_eq!(
        code(&h.reply("a", Op::LeaseRevoke { lease: a })),
        ErrorCode::LeaseNotFound
    );
}

#[test]
fn the_clock_never_goes_backwards_and_indexes_must_increase() {
    let mut h = Harness::new();
    h.lease("a", 5_000);
    let before = h.sm.now_ms();
    h.now_ms -= 10_000;
    h.lease("a", 5_000);
    assert_eq!(h.sm.now_ms(), before);
    let meta = LogMeta {
        index: 1,
        term: 1,
        now_ms: 0,
    };
    let err = h.sm.apply(
        meta,
        Command::ExpireLeases {
            term: 1,
            leases: vec![],
        },
    );
    assert!(err.is_err(), "an index applied twice is a broken log");
}

#[test]
fn lease_count_is_bounded() {
    let mut h = Harness::with_limits(super::Limits {
        leases_max: 2,
        ..super::Limits::DEFAULTS
    });
    h.lease("a", 5_000);
    h.lease("b", 5_000);
    assert_eq!(
        code(&h.reply("c", lease_grant(5_000))),
        ErrorCode::ResourceExhausted
    );
}

#[test]
fn lease_ids_round_trip_through_their_wire_form_and_nothing_else_parses() {
    for id in [0, 1, 0xabc, u64::MAX] {
        assert_eq!(LeaseId::parse(&LeaseId(id).to_string()), Some(LeaseId(id)));
    }
    assert_eq!(LeaseId::parse("00000000000000FF"), Some(LeaseId(255)));
    for bad in [
        "",
        "ff",
        "+00000000000000f",
        "000000000000000g",
        "00000000000000000",
        "0000000000000 ff",
    ] {
        assert_eq!(LeaseId::parse(bad), None, "{bad:?}");
    }
}

fn admin_revoke(lease: &str) -> Op {
    Op::AdminRevoke {
        lease: lease.to_string(),
    }
}

#[test]
fn admin_revoke_ends_another_agents_lease_and_hands_its_lock_over_in_one_entry() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    let old_token = Harness::token(&h.reply("a", lock_acquire("l", &a, None)));
    h.reply("c", lock_acquire("l2", &c, None));
    h.send_as("a", "a-l2", lock_acquire("l2", &a, None));
    h.now_ms += 100;
    h.send_as("b", "b-l", lock_acquire("l", &b, None));
    h.now_ms += 250;
    // An operator, not the owner: no `forbidden`, the lease simply ends.
    let (reply, events) = h.send_as("operator", "op-1", admin_revoke(&a));
    assert_eq!(reply, Reply::Done);
    let new_token = match responses(&events).as_slice() {
        [_, (agent, id, Reply::Granted { token })] if agent == "b" && id == "b-l" => *token,
        other => panic!("expected a's wait dropped, then b granted: {other:?}"),
    };
    assert!(new_token > old_token, "{new_token} > {old_token}");
    // The token is the revoking command's log position (DESIGN.md §2).
    assert_eq!(new_token >> 16, h.index);
    let (lease_a, lease_b) = (LeaseId::parse(&a).unwrap(), LeaseId::parse(&b).unwrap());
    let lock = ResourceKey::new(ResourceKind::Lock, &Arc::from("l"));
    assert_eq!(
        events,
        vec![
            Event::LeaseEnded {
                agent: Arc::from("a"),
                lease: lease_a,
                reason: LeaseEnd::AdminRevoked,
            },
            Event::Released {
                key: lock.clone(),
                agent: Arc::from("a"),
                lease: lease_a,
                token: old_token,
                held_ms: 350,
                reason: ReleaseReason::LeaseEnded,
            },
            Event::Respond {
                key: ResourceKey::new(ResourceKind::Lock, &Arc::from("l2")),
                agent: Arc::from("a"),
                request_id: "a-l2".into(),
                reply: Reply::refused(
                    ErrorCode::LeaseNotFound,
                    "the lease ended while the request waited"
                ),
            },
            Event::Granted {
                key: lock,
                agent: Arc::from("b"),
                lease: lease_b,
                token: new_token,
                waited_ms: 250,
                queued: true,
            },
            Event::Respond {
                key: ResourceKey::new(ResourceKind::Lock, &Arc::from("l")),
                agent: Arc::from("b"),
                request_id: "b-l".into(),
                reply: Reply::Granted { token: new_token },
            },
        ]
    );
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l"),
        (vec!["b".into()], vec![])
    );
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l2"),
        (vec!["c".into()], vec![])
    );
    assert_eq!(
        h.sm.leases().map(|(id, ..)| id).collect::<Vec<_>>(),
        vec![lease_b, LeaseId::parse(&c).unwrap()]
    );
    // The owner finds its lease gone.
    assert_eq!(
        code(&h.reply("a", Op::LeaseRevoke { lease: a.clone() })),
        ErrorCode::LeaseNotFound
    );
}

#[test]
fn admin_revoke_of_a_lease_that_does_not_exist_is_lease_not_found_and_changes_nothing() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    h.reply("a", lock_acquire("l", &a, None));
    h.reply("a", Op::LeaseRevoke { lease: a.clone() });
    let b = h.lease("b", 5_000);
    h.reply("b", lock_acquire("l", &b, None));
    for lease in [a.as_str(), "00000000000000ff", "not-a-lease"] {
        let (reply, events) = h.send("operator", admin_revoke(lease));
        assert_eq!(code(&reply), ErrorCode::LeaseNotFound, "{lease}");
        assert!(events.is_empty(), "{lease}: {events:?}");
    }
    // b's lease and its hold are untouched.
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l"),
        (vec!["b".into()], vec![])
    );
    assert_eq!(
        h.sm.leases()
            .map(|(id, ..)| id.to_string())
            .collect::<Vec<_>>(),
        vec![b]
    );
}

#[test]
fn a_retried_admin_revoke_gets_the_first_outcome_and_ends_nothing_more() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let (first, events) = h.send_as("operator", "op-7", admin_revoke(&a));
    assert_eq!(first, Reply::Done);
    assert_eq!(events.len(), 1, "{events:?}");
    let (retry, events) = h.send_as("operator", "op-7", admin_revoke(&a));
    assert_eq!(retry, Reply::Done);
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn admin_leases_pages_every_live_lease_in_id_order() {
    let mut h = Harness::new();
    let count = super::LEASE_PAGE_MAX + 3;
    let leases: Vec<String> = (0..count)
        .map(|n| h.lease(&format!("agent-{n}"), 5_000))
        .collect();
    let page = |after: Option<String>| match h.sm.query("operator", &Op::AdminLeases { after }) {
        Reply::Leases { leases, next_after } => (leases, next_after),
        other => panic!("admin.leases failed: {other:?}"),
    };
    let (first, next) = page(None);
    assert_eq!(first.len(), super::LEASE_PAGE_MAX);
    assert_eq!(
        next.as_deref(),
        Some(leases[super::LEASE_PAGE_MAX - 1].as_str())
    );
    let (second, last) = page(next);
    assert_eq!(last, None);
    let listed: Vec<(String, String, u64)> = first
        .iter()
        .chain(&second)
        .map(|info| (info.lease.clone(), info.agent.clone(), info.ttl_ms))
        .collect();
    let expected: Vec<(String, String, u64)> = leases
        .iter()
        .enumerate()
        .map(|(n, lease)| (lease.clone(), format!("agent-{n}"), 5_000))
        .collect();
    assert_eq!(listed, expected);
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|info| info.remaining_ms.is_none())
    );
    let garbage = Op::AdminLeases {
        after: Some("not-a-lease".into()),
    };
    assert_eq!(
        code(&h.sm.query("operator", &garbage)),
        ErrorCode::BadRequest
    );
}
