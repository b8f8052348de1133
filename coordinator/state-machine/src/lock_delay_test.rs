//! Lock-delay: the locks of a lease with `lock_delay_ms` that expired or that an operator ended
//! are granted to nobody until the delay has passed, then to their head waiter in the
//! `ExpireHoldTimes` entry at its end; a release or the agent's own revoke skips it.

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind, Role};

use super::test_support::*;
use super::{Command, Event, LeaseEnd, LeaseId, ReleaseReason, Reply, ResourceKey, StateMachine};

fn lock(name: &str) -> ResourceKey {
    ResourceKey::new(ResourceKind::Lock, &Arc::from(name))
}

fn lease_ended(agent: &str, lease: u64, reason: LeaseEnd) -> Event {
    Event::LeaseEnded {
        agent: Arc::from(agent),
        lease: LeaseId(lease),
        reason,
    }
}

fn lost(name: &str, agent: &str, lease: u64, token: u64, held_ms: u64) -> Event {
    Event::Released {
        key: lock(name),
        agent: Arc::from(agent),
        lease: LeaseId(lease),
        token,
        held_ms,
        reason: ReleaseReason::LeaseEnded,
    }
}

/// The two events of a waiter's grant: the grant and the answer to its request.
fn granted(
    name: &str,
    agent: &str,
    lease: u64,
    request_id: &str,
    index: u64,
    waited_ms: u64,
) -> [Event; 2] {
    let token = index << 16;
    [
        Event::Granted {
            key: lock(name),
            agent: Arc::from(agent),
            lease: LeaseId(lease),
            token,
            waited_ms,
            queued: true,
        },
        Event::Respond {
            key: lock(name),
            agent: Arc::from(agent),
            request_id: request_id.into(),
            reply: Reply::Granted { token },
        },
    ]
}

#[test]
fn an_expired_lease_holds_its_lock_back_and_the_waiter_is_granted_in_the_entry_at_the_delays_end() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 2_000);
    let b = h.lease("b", 60_000);
    let token = Harness::token(&h.reply("a", lock_acquire("gw", &a, None)));
    assert_eq!(h.reply("b", lock_acquire("gw", &b, None)), Reply::Queued);

    h.now_ms += 5_000;
    let (reply, events) = h.expire(&[&a]);
    assert_eq!(
        reply,
        Reply::Expired {
            leases: vec![LeaseId(1)]
        }
    );
    assert_eq!(
        events,
        vec![
            lease_ended("a", 1, LeaseEnd::Expired),
            lost("gw", "a", 1, token, 5_000),
        ],
        "the lock is taken from a, and nobody is granted it"
    );
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gw"),
        (vec![], vec!["b".to_string()])
    );
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_007_000));

    h.now_ms = 1_006_999;
    assert_eq!(h.expire_hold_times(), (NOTHING_ENDED, vec![]));
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gw").0,
        Vec::<String>::new()
    );

    h.now_ms = 1_007_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(
        reply,
        Reply::HoldTimesEnded {
            max_holds: 0,
            lock_delays: 1
        }
    );
    assert_eq!(events, granted("gw", "b", 2, "r4", 7, 7_000));
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gw"),
        (vec!["b".to_string()], vec![])
    );
    assert_eq!(h.sm.hold_time_next_ms(), None);
    assert_eq!(h.expire_hold_times(), (NOTHING_ENDED, vec![]), "once");
}

#[test]
fn a_held_back_lock_nobody_waits_for_is_kept_a_try_names_the_delay_and_an_acquire_queues() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 2_000);
    let c = h.lease("c", 60_000);
    h.reply("a", lock_acquire("gw", &a, None));
    h.now_ms += 5_000;
    h.expire(&[&a]);
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gw"),
        (vec![], vec![]),
        "held back, not forgotten"
    );

    let (reply, events) = h.send("c", lock_acquire("gw", &c, Some(0)));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::WouldBlock,
            "lock \"gw\" is held back by its last holder's lock-delay until 1007000 (the \
             service's clock, UTC ms): that lease ended without releasing it"
        )
    );
    assert_eq!(events, vec![]);
    let (reply, events) = h.send("c", lock_acquire("gw", &c, None));
    assert_eq!(reply, Reply::Queued);
    assert_eq!(
        events,
        vec![Event::Queued {
            key: lock("gw"),
            agent: Arc::from("c"),
            request_id: "r5".into(),
        }]
    );

    h.now_ms = 1_007_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(events, granted("gw", "c", 2, "r5", 7, 2_000));
}

#[test]
fn waiters_are_granted_one_at_a_time_in_arrival_order_after_the_delay() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 1_000);
    let [b, c] = h.leases(["b", "c"], 60_000);
    h.reply("a", lock_acquire("gw", &a, None));
    h.reply("b", lock_acquire("gw", &b, None));
    h.reply("c", lock_acquire("gw", &c, None));
    h.now_ms += 5_000;
    h.expire(&[&a]);
    h.now_ms += 1_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(events, granted("gw", "b", 2, "r5", 8, 6_000));
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gw"),
        (vec!["b".to_string()], vec!["c".to_string()])
    );
}

#[test]
fn a_release_and_the_agents_own_revoke_skip_the_delay() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 60_000, 10_000);
    let [b, c] = h.leases(["b", "c"], 60_000);
    h.reply("a", lock_acquire("x", &a, None));
    h.reply("a", lock_acquire("y", &a, None));
    h.send_as("b", "b-x", lock_acquire("x", &b, None));
    h.send_as("c", "c-y", lock_acquire("y", &c, None));

    let (_, events) = h.send("a", lock_release("x", &a));
    assert_eq!(
        responses(&events)[0].0,
        "b",
        "handed over at once: {events:?}"
    );
    let (reply, events) = h.send("a", Op::LeaseRevoke { lease: a.clone() });
    assert_eq!(reply, Reply::Done);
    assert_eq!(events[0], lease_ended("a", 1, LeaseEnd::Revoked));
    assert_eq!(
        responses(&events)[0].0,
        "c",
        "handed over at once: {events:?}"
    );
    assert_eq!(h.sm.hold_time_next_ms(), None);
}

#[test]
fn an_operators_revoke_and_an_accounts_removal_apply_the_delay() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 60_000, 3_000);
    let b = h.lease("b", 60_000);
    h.reply("a", lock_acquire("x", &a, None));
    h.reply("b", lock_acquire("x", &b, None));
    let (reply, events) = h.send("operator", Op::AdminRevoke { lease: a.clone() });
    assert_eq!(reply, Reply::Done);
    assert_eq!(events[0], lease_ended("a", 1, LeaseEnd::AdminRevoked));
    assert_eq!(responses(&events), vec![], "nobody granted: {events:?}");
    assert_eq!(h.sm.hold_time_next_ms(), Some(h.now_ms + 3_000));

    let add = Op::AdminAgentAdd {
        name: "drone".into(),
        role: Some(Role::Agent),
        kv_read: Vec::new(),
        kv_write: Vec::new(),
    };
    h.send_account(
        "admin",
        (add, "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$aGFzaA".into()),
    );
    let drone = h.lease_with_delay("drone", 60_000, 4_000);
    h.reply("drone", lock_acquire("y", &drone, None));
    h.now_ms += 10;
    let (_, events) = h.send(
        "admin",
        Op::AdminAgentRemove {
            name: "drone".into(),
        },
    );
    assert_eq!(responses(&events), vec![]);
    assert_eq!(
        h.occupants(ResourceKind::Lock, "y"),
        (vec![], vec![]),
        "y is held back"
    );
    let until = h.now_ms + 4_000;
    h.now_ms = until - 1_000;
    let (reply, _) = h.expire_hold_times();
    assert_eq!(
        reply,
        Reply::HoldTimesEnded {
            max_holds: 0,
            lock_delays: 1
        },
        "x's delay ended, y's has not"
    );
    assert_eq!(
        h.occupants(ResourceKind::Lock, "x").0,
        vec!["b".to_string()]
    );
    h.now_ms = until;
    let (_, events) = h.expire_hold_times();
    assert_eq!(events, vec![], "nobody waited for y: it is forgotten");
    assert_eq!(h.sm.resource_count(), 1);
}

#[test]
fn semaphore_permits_are_not_held_back() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 10_000);
    let b = h.lease("b", 60_000);
    h.reply("a", sem_acquire("pool", 1, &a, 1, None));
    h.reply("b", sem_acquire("pool", 1, &b, 1, None));
    h.now_ms += 5_000;
    let (_, events) = h.expire(&[&a]);
    assert_eq!(responses(&events)[0].0, "b", "{events:?}");
    assert_eq!(h.sm.hold_time_next_ms(), None);
}

#[test]
fn a_waiter_that_times_out_during_the_delay_leaves_the_lock_held_back() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 5_000);
    let b = h.lease("b", 60_000);
    h.reply("a", lock_acquire("gw", &a, None));
    h.now_ms += 5_000;
    h.expire(&[&a]);
    h.reply("b", lock_acquire("gw", &b, Some(100)));
    h.now_ms += 100;
    let term = h.term;
    let (_, events) = h.apply(Command::ExpireWaits { term });
    assert_eq!(refusal(&responses(&events)[0].2).0, ErrorCode::Timeout);
    assert_eq!(h.occupants(ResourceKind::Lock, "gw"), (vec![], vec![]));
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_010_000));
}

#[test]
fn a_stale_term_ends_no_delay() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 1_000);
    let b = h.lease("b", 60_000);
    h.reply("a", lock_acquire("gw", &a, None));
    h.reply("b", lock_acquire("gw", &b, None));
    h.term = 2;
    h.now_ms += 6_000;
    h.expire(&[&a]);
    h.now_ms += 1_000;
    let (reply, events) = h.apply(Command::ExpireHoldTimes { term: 1 });
    assert_eq!((reply, events), (NOTHING_ENDED, vec![]));
    assert_eq!(
        h.occupants(ResourceKind::Lock, "gw").0,
        Vec::<String>::new()
    );
}

#[test]
fn a_snapshot_taken_during_a_delay_restores_it_and_one_without_has_no_member() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 2_000);
    let b = h.lease("b", 60_000);
    h.reply("a", lock_acquire("gw", &a, None));
    h.reply("b", lock_acquire("gw", &b, None));
    let before = String::from_utf8(h.sm.snapshot()).expect("UTF-8");
    assert!(!before.contains("lock_delays"), "{before}");
    assert!(before.contains(r#""lock_delay_ms":2000"#), "{before}");
    assert_eq!(
        before.matches("lock_delay_ms").count(),
        1,
        "b has none: {before}"
    );

    h.now_ms += 5_000;
    h.expire(&[&a]);
    let bytes = h.sm.snapshot();
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(text.contains(r#""lock_delays":{"gw":1007000}"#), "{text}");
    h.sm = StateMachine::restore(&bytes).expect("restores");
    assert_eq!(h.sm.snapshot(), bytes);
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_007_000));
    h.now_ms = 1_006_999;
    assert_eq!(h.expire_hold_times().1, vec![], "still held back");
    h.now_ms = 1_007_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(events, granted("gw", "b", 2, "r4", 7, 7_000));
    let after = String::from_utf8(h.sm.snapshot()).expect("UTF-8");
    assert!(!after.contains("lock_delays"), "{after}");
}

#[test]
fn a_lock_delay_over_a_minute_is_refused() {
    let mut h = Harness::new();
    let (reply, _) = h.send(
        "a",
        Op::LeaseGrant {
            ttl_ms: 5_000,
            lock_delay_ms: 60_001,
        },
    );
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "lease.grant: `lock_delay_ms` is 60001, the maximum is 60000 (one minute)"
        )
    );
}
