//! FIFO lock: immediate grant, queue, try, release, handover inside the releasing entry.

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Event, LeaseId, ReleaseReason, Reply, ResourceKey};

fn gw() -> ResourceKey {
    ResourceKey::new(ResourceKind::Lock, &Arc::from("gateway/config"))
}

#[test]
fn free_lock_is_granted_with_a_token_from_the_log_index() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let (reply, events) = h.send("a", lock_acquire("gateway/config", &a, None));
    assert_eq!(reply, Reply::Granted { token: 2 << 16 });
    assert_eq!(
        events,
        vec![Event::Granted {
            key: gw(),
            agent: Arc::from("a"),
            lease: LeaseId(1),
            token: 2 << 16,
            waited_ms: 0,
            queued: false,
        }]
    );
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gateway/config").0,
        vec!["a"]
    );
}

#[test]
fn handover_happens_inside_the_releasing_entry() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    let first = Harness::token(&h.reply("a", lock_acquire("gateway/config", &a, None)));
    h.now_ms += 10;
    let queued = |agent: &str, request_id: &str| Event::Queued {
        key: gw(),
        agent: Arc::from(agent),
        request_id: request_id.into(),
    };
    assert_eq!(
        h.send("b", lock_acquire("gateway/config", &b, None)),
        (Reply::Queued, vec![queued("b", "r5")])
    );
    assert_eq!(
        h.send("c", lock_acquire("gateway/config", &c, None)),
        (Reply::Queued, vec![queued("c", "r6")])
    );
    h.now_ms += 25;
    let (reply, events) = h.send("a", lock_release("gateway/config", &a));
    assert_eq!(reply, Reply::Done);
    let handover_token = 7 << 16;
    assert_eq!(
        events,
        vec![
            Event::Released {
                key: gw(),
                agent: Arc::from("a"),
                lease: LeaseId(1),
                token: first,
                held_ms: 35,
                reason: ReleaseReason::Released,
            },
            Event::Granted {
                key: gw(),
                agent: Arc::from("b"),
                lease: LeaseId(2),
                token: handover_token,
                waited_ms: 25,
                queued: true,
            },
            Event::Respond {
                key: gw(),
                agent: Arc::from("b"),
                request_id: "r5".into(),
                reply: Reply::Granted {
                    token: handover_token
                },
            },
        ],
        "no herd: only the new holder is answered"
    );
    assert!(handover_token > first);
    let (holders, waiters) = h.occupants(ResourceKind::Lock, "gateway/config");
    assert_eq!((holders, waiters), (vec!["b".into()], vec!["c".into()]));
}

#[test]
fn waiters_are_granted_in_arrival_order_with_increasing_tokens() {
    let mut h = Harness::new();
    let agents = ["w0", "w1", "w2", "w3", "w4", "w5"];
    let leases: Vec<String> = agents.iter().map(|a| h.lease(a, 5_000)).collect();
    let mut last = Harness::token(&h.reply("w0", lock_acquire("l", &leases[0], None)));
    for (agent, lease) in agents.iter().zip(&leases).skip(1) {
        assert_eq!(
            h.reply(agent, lock_acquire("l", lease, None)),
            Reply::Queued
        );
    }
    for i in 0..agents.len() - 1 {
        let (_, events) = h.send(agents[i], lock_release("l", &leases[i]));
        let granted = responses(&events);
        assert_eq!(granted.len(), 1);
        assert_eq!(granted[0].0, agents[i + 1]);
        let token = Harness::token(&granted[0].2);
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
}

#[test]
fn try_lock_answers_would_block_and_queues_nothing() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    h.reply("a", lock_acquire("l", &a, None));
    let reply = h.reply("b", lock_acquire("l", &b, Some(0)));
    assert!(matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
    assert_eq!(h.occupants(ResourceKind::Lock, "l").1, Vec::<String>::new());
}

#[test]
fn release_by_a_non_holder_is_not_holder_and_changes_nothing() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    h.reply("a", lock_acquire("l", &a, None));
    h.reply("b", lock_acquire("l", &b, None));
    let before = h.sm.snapshot();
    let (reply, events) = h.send("b", lock_release("l", &b));
    assert!(matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::NotHolder,
            ..
        }
    ));
    assert!(events.is_empty());
    // Only the dedup memory (the refusal is remembered for retries) and the index moved.
    assert_eq!(h.occupants(ResourceKind::Lock, "l").0, vec!["a"]);
    assert_ne!(before, h.sm.snapshot());
}

#[test]
fn reacquiring_a_held_lock_returns_the_same_token() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let token = Harness::token(&h.reply("a", lock_acquire("l", &a, None)));
    assert_eq!(
        h.reply("a", lock_acquire("l", &a, None)),
        Reply::Granted { token }
    );
    assert_eq!(h.reply("a", lock_release("l", &a)), Reply::Done);
    assert_eq!(h.occupants(ResourceKind::Lock, "l").0, Vec::<String>::new());
}

#[test]
fn a_retried_wait_is_queued_once_and_waiter_counts_follow_the_events() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    h.reply("a", lock_acquire("l", &a, None));
    let (reply, events) = h.send_as("b", "b-l", lock_acquire("l", &b, None));
    assert_eq!(reply, Reply::Queued);
    assert_eq!(
        events,
        vec![Event::Queued {
            key: ResourceKey::new(ResourceKind::Lock, &Arc::from("l")),
            agent: Arc::from("b"),
            request_id: "b-l".into(),
        }]
    );
    // A retry finds its queue slot: the same answer, no second slot, no second event.
    assert_eq!(
        h.send_as("b", "b-l", lock_acquire("l", &b, None)),
        (Reply::Queued, vec![])
    );
    let counts = h.sm.waiter_counts();
    let per_kind = ResourceKind::ALL.map(|kind| counts.get(kind));
    assert_eq!(per_kind, [1, 0, 0, 0, 0]);
    assert_eq!(counts.get(ResourceKind::Lock), 1);
    // The queue exit: one `Respond` on the same key, and the count is back to zero.
    let (_, events) = h.send("a", lock_release("l", &a));
    assert!(events.iter().any(|event| matches!(
        event,
        Event::Respond { key, request_id, .. } if key.name.as_ref() == "l" && request_id == "b-l"
    )));
    assert_eq!(h.sm.waiter_counts(), super::WaiterCounts::default());
}

#[test]
fn a_second_acquire_by_a_waiting_lease_takes_over_its_wait_in_place() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    h.reply("a", lock_acquire("l", &a, None));
    assert_eq!(
        h.send_as("b", "b-1", lock_acquire("l", &b, Some(60_000))).0,
        Reply::Queued
    );
    assert_eq!(h.reply("c", lock_acquire("l", &c, None)), Reply::Queued);
    // A try while waiting: would_block, and the wait is untouched.
    let (reply, events) = h.send_as("b", "b-try", lock_acquire("l", &b, Some(0)));
    assert_eq!(
        reply,
        Reply::refused(
            ErrorCode::WouldBlock,
            "lock \"l\" is held by another lease (this lease already waits for it, request id \"b-1\")"
        )
    );
    assert_eq!(events, vec![]);
    // Under a new id (the client gave up on b-1): b-1 is answered, b keeps its place ahead of c.
    let (reply, events) = h.send_as("b", "b-2", lock_acquire("l", &b, None));
    assert_eq!(reply, Reply::Queued);
    assert!(matches!(
        &events[..],
        [Event::Respond { .. }, Event::Queued { request_id, .. }] if request_id == "b-2"
    ));
    assert_eq!(
        responses(&events),
        vec![(
            "b".to_string(),
            "b-1".to_string(),
            Reply::refused(
                ErrorCode::Timeout,
                "superseded by request id \"b-2\": the wait for lock:l goes on under it"
            )
        )]
    );
    assert_eq!(h.occupants(ResourceKind::Lock, "l").1, vec!["b", "c"]);
    // A retry of b-1 gets its answer again; one of b-2 is still queued.
    assert!(matches!(
        h.send_as("b", "b-1", lock_acquire("l", &b, None)).0,
        Reply::Refused {
            code: ErrorCode::Timeout,
            ..
        }
    ));
    assert_eq!(
        h.send_as("b", "b-2", lock_acquire("l", &b, None)).0,
        Reply::Queued
    );
    // b-1's deadline went with it: b-2 (no wait_ms) is granted at the release, not timed out.
    let (_, events) = h.send("a", lock_release("l", &a));
    let answered: Vec<(String, String)> = responses(&events)
        .into_iter()
        .map(|(agent, id, _)| (agent, id))
        .collect();
    assert_eq!(answered, vec![("b".to_string(), "b-2".to_string())]);
}

#[test]
fn wait_timeout_cancels_the_waiter_unless_the_grant_won() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    h.reply("a", lock_acquire("l", &a, None));
    h.send_as("b", "b-wait", lock_acquire("l", &b, Some(100)));
    h.send_as("c", "c-wait", lock_acquire("l", &c, Some(100)));
    // b's timer fires first: b is answered `timeout`, c moves up.
    let (reply, events) = h.apply(super::Command::CancelWait {
        agent: "b".into(),
        request_id: "b-wait".into(),
    });
    assert_eq!(reply, Reply::Cancelled { cancelled: true });
    let answered = responses(&events);
    assert_eq!(answered.len(), 1);
    assert!(matches!(
        &answered[0],
        (agent, id, Reply::Refused { code: ErrorCode::Timeout, .. }) if agent == "b" && id == "b-wait"
    ));
    assert_eq!(h.occupants(ResourceKind::Lock, "l").1, vec!["c"]);
    // c is granted before its timer's cancel is applied: the grant wins.
    let (_, events) = h.send("a", lock_release("l", &a));
    assert_eq!(responses(&events)[0].0, "c");
    let (reply, events) = h.apply(super::Command::CancelWait {
        agent: "c".into(),
        request_id: "c-wait".into(),
    });
    assert_eq!(reply, Reply::Cancelled { cancelled: false });
    assert!(events.is_empty());
    assert_eq!(h.occupants(ResourceKind::Lock, "l").0, vec!["c"]);
}

#[test]
fn a_full_queue_answers_resource_exhausted() {
    let mut h = Harness::with_limits(super::Limits {
        waiters_per_resource_max: 2,
        ..super::Limits::DEFAULTS
    });
    let leases: Vec<String> = (0..4).map(|i| h.lease(&format!("a{i}"), 5_000)).collect();
    h.reply("a0", lock_acquire("l", &leases[0], None));
    assert_eq!(
        h.reply("a1", lock_acquire("l", &leases[1], None)),
        Reply::Queued
    );
    assert_eq!(
        h.reply("a2", lock_acquire("l", &leases[2], None)),
        Reply::Queued
    );
    let reply = h.reply("a3", lock_acquire("l", &leases[3], None));
    assert!(matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::ResourceExhausted,
            ..
        }
    ));
}
