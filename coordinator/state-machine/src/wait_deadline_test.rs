//! Wait deadlines: recorded when a request queues, ended by `ExpireWaits` only once due on the
//! machine's clock, never by a stale term, never after the grant (the legacy `CancelWait` is
//! tested in `lock_test.rs` and `semaphore_test.rs`).

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Command, Event, Reply, ResourceKey, StateMachine};

fn key(name: &str) -> ResourceKey {
    ResourceKey::new(ResourceKind::Lock, &Arc::from(name))
}

fn timeout() -> Reply {
    Reply::refused(
        ErrorCode::Timeout,
        "wait_ms elapsed before the resource was granted",
    )
}

fn expire_waits(h: &mut Harness) -> (Reply, Vec<Event>) {
    let term = h.term;
    h.apply(Command::ExpireWaits { term })
}

/// `a` holds lock `l`; `b` waits for it with `wait_ms: 100` queued at 1_000_000 (deadline
/// 1_000_100), `c` waits without `wait_ms`.
fn queued() -> (Harness, String, String, String) {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.reply("a", lock_acquire("l", &a, None));
    assert_eq!(
        h.send_as("b", "b-wait", lock_acquire("l", &b, Some(100))).0,
        Reply::Queued
    );
    assert_eq!(
        h.send_as("c", "c-wait", lock_acquire("l", &c, None)).0,
        Reply::Queued
    );
    (h, a, b, c)
}

#[test]
fn a_queued_wait_ms_becomes_a_deadline_on_the_machine_clock() {
    let (h, ..) = queued();
    // Queued at the harness clock 1_000_000 with wait_ms 100; c has none.
    assert_eq!(h.sm.wait_deadline_next_ms(), Some(1_000_100));
}

#[test]
fn expire_waits_answers_the_due_waiter_timeout_and_leaves_the_others() {
    let (mut h, ..) = queued();
    h.now_ms = 1_000_100;
    let (reply, events) = expire_waits(&mut h);
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    assert_eq!(
        events,
        vec![Event::Respond {
            key: key("l"),
            agent: Arc::from("b"),
            request_id: "b-wait".into(),
            reply: timeout(),
        }]
    );
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l"),
        (vec!["a".into()], vec!["c".into()])
    );
    assert_eq!(h.sm.wait_deadline_next_ms(), None);
    // A retry of the expired request gets the same answer from the dedup memory.
    assert_eq!(
        h.send_as(
            "b",
            "b-wait",
            lock_acquire("l", "0000000000000002", Some(100))
        )
        .0,
        timeout()
    );
}

#[test]
fn an_early_expire_waits_is_ignored() {
    let (mut h, ..) = queued();
    // One ms before the deadline: a leader with a slow-to-apply or forged entry ends nothing.
    h.now_ms = 1_000_099;
    let (reply, events) = expire_waits(&mut h);
    assert_eq!(reply, Reply::WaitsExpired { count: 0 });
    assert!(events.is_empty());
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l").1,
        vec!["b".to_string(), "c".to_string()]
    );
    assert_eq!(h.sm.wait_deadline_next_ms(), Some(1_000_100));
}

#[test]
fn an_expire_waits_of_a_stale_term_is_ignored() {
    let (mut h, ..) = queued();
    h.term = 3;
    h.reply("a", lock_acquire("other", "0000000000000001", Some(0)));
    h.now_ms = 1_000_500;
    let (reply, events) = h.apply(Command::ExpireWaits { term: 2 });
    assert_eq!(reply, Reply::WaitsExpired { count: 0 });
    assert!(events.is_empty());
    assert_eq!(h.sm.wait_deadline_next_ms(), Some(1_000_100));
    // The current term's does end it.
    assert_eq!(expire_waits(&mut h).0, Reply::WaitsExpired { count: 1 });
}

#[test]
fn a_granted_wait_loses_its_deadline_and_is_not_expired() {
    let (mut h, a, ..) = queued();
    let (_, events) = h.send("a", lock_release("l", &a));
    assert!(matches!(
        &responses(&events)[..],
        [(agent, id, Reply::Granted { .. })] if agent == "b" && id == "b-wait"
    ));
    assert_eq!(h.sm.wait_deadline_next_ms(), None);
    h.now_ms = 1_000_200;
    let (reply, events) = expire_waits(&mut h);
    assert_eq!(reply, Reply::WaitsExpired { count: 0 });
    assert!(events.is_empty());
    assert_eq!(
        h.occupants(ResourceKind::Lock, "l").0,
        vec!["b".to_string()]
    );
}

#[test]
fn an_expired_head_lets_the_next_waiter_in_within_the_entry() {
    let mut h = Harness::new();
    let [a, big, small] = h.leases(["a", "big", "small"], 5_000);
    h.reply("a", sem_acquire("gw", 4, &a, 2, None));
    h.send_as("big", "big-wait", sem_acquire("gw", 4, &big, 3, Some(50)));
    h.send_as(
        "small",
        "small-wait",
        sem_acquire("gw", 4, &small, 2, Some(60)),
    );
    h.now_ms += 50;
    let (reply, events) = expire_waits(&mut h);
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    let answers = responses(&events);
    assert_eq!(answers.len(), 2, "{events:?}");
    assert_eq!(answers[0], ("big".into(), "big-wait".into(), timeout()));
    assert!(
        matches!(&answers[1], (a, id, Reply::Granted { .. }) if a == "small" && id == "small-wait")
    );
}

#[test]
fn waits_due_together_all_end_before_anything_is_granted() {
    // b and c both time out in one entry: c is never granted between b's end and its own.
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.reply("a", sem_acquire("s", 2, &a, 1, None));
    h.send_as("b", "b-wait", sem_acquire("s", 2, &b, 2, Some(100)));
    h.send_as("c", "c-wait", sem_acquire("s", 2, &c, 1, Some(100)));
    h.now_ms += 100;
    let (reply, events) = expire_waits(&mut h);
    assert_eq!(reply, Reply::WaitsExpired { count: 2 });
    assert_eq!(
        responses(&events),
        vec![
            ("b".into(), "b-wait".into(), timeout()),
            ("c".into(), "c-wait".into(), timeout()),
        ]
    );
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, Event::Granted { .. }))
    );
}

#[test]
fn a_lease_end_drops_the_deadline_with_the_wait() {
    let (mut h, _, b, _) = queued();
    h.reply("b", Op::LeaseRevoke { lease: b });
    assert_eq!(h.sm.wait_deadline_next_ms(), None);
}

#[test]
fn deadlines_survive_a_snapshot_and_expire_after_restore() {
    let (h, ..) = queued();
    let bytes = h.sm.snapshot();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(r#""b-wait":{"lease":2,"key":"lock:l","deadline_ms":1000100}"#),
        "{text}"
    );
    assert!(
        text.contains(r#""c-wait":{"lease":3,"key":"lock:l"}"#),
        "{text}"
    );
    let mut restored = StateMachine::restore(&bytes).expect("restores");
    assert_eq!(restored.wait_deadline_next_ms(), Some(1_000_100));
    let meta = super::LogMeta {
        index: h.index + 1,
        term: h.term,
        now_ms: 1_000_100,
    };
    let (reply, _) = restored
        .apply(meta, Command::ExpireWaits { term: h.term })
        .expect("the index increases");
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    restored.check_invariants().expect("invariants hold");
}
