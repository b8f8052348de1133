//! Hold times meet lock modes and multi-locks: a lock-delay holds back every lock the ended
//! lease held, shared or through a multi-lock, without taking the other shared holders'
//! holds; a max-hold ends each shared hold at its own deadline and a multi-lock's holds
//! together; a downgrade keeps the deadline.

use hivekeeper_protocol::ErrorCode::WouldBlock;
use hivekeeper_protocol::LockMode::{Exclusive, Shared};

use super::test_support::*;
use super::{Event, LeaseEnd, LeaseId, ReleaseReason, Reply, StateMachine};

fn lease_ended(agent: &str, lease: u64, reason: LeaseEnd) -> Event {
    Event::LeaseEnded {
        agent: agent.into(),
        lease: LeaseId(lease),
        reason,
    }
}

/// The refusal of a try of lock `name`, held back until `until_ms`.
fn held_back(name: &str, until_ms: u64) -> Reply {
    Reply::refused(
        WouldBlock,
        format!(
            "lock {name:?} is held back by its last holder's lock-delay until {until_ms} (the \
             service's clock, UTC ms): that lease ended without releasing it"
        ),
    )
}

/// The events of a queued request's grant of lock `name` at `token`, after `waited_ms`.
fn granted_from_queue(
    name: &str,
    (agent, lease, request_id): (&str, u64, &str),
    token: u64,
    waited_ms: u64,
) -> [Event; 2] {
    [
        lock_granted(name, agent, lease, token, Some(waited_ms)),
        lock_respond(name, agent, request_id, Reply::Granted { token }),
    ]
}

#[test]
fn a_shared_holders_lock_delay_leaves_the_other_shared_holders_and_grants_nobody_until_it_ends() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 2_000);
    let [b, c, d] = h.leases(["b", "c", "d"], 60_000);
    let a_token = Harness::token(&h.reply("a", lock_shared("db", &a, None)));
    let b_token = Harness::token(&h.reply("b", lock_shared("db", &b, None)));

    h.now_ms += 5_000;
    let (_, events) = h.expire(&[&a]);
    assert_eq!(
        events,
        vec![
            lease_ended("a", 1, LeaseEnd::Expired),
            lock_ended("db", ("a", 1, a_token), 5_000, ReleaseReason::LeaseEnded),
        ],
        "a's hold ends; b's stays, and nobody is granted anything"
    );
    assert_eq!(h.lock_modes("db").0, vec![("b".into(), b_token, Shared)]);
    let valid = |valid| Reply::Fence {
        current: b_token,
        valid,
    };
    assert_eq!(h.fence_lock("db", b_token), valid(true));
    assert_eq!(h.fence_lock("db", a_token), valid(false));
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_007_000));

    // A reader could join b, but the delay bars every mode: a try is refused naming it, and
    // both a reader and a writer queue.
    assert_eq!(
        h.send("c", lock_shared("db", &c, Some(0))),
        (held_back("db", 1_007_000), vec![])
    );
    assert_eq!(
        h.send_as("c", "c1", lock_shared("db", &c, None)),
        (Reply::Queued, vec![lock_queued("db", "c", "c1")])
    );
    assert_eq!(
        h.reply("d", lock_acquire("db", &d, Some(60_000))),
        Reply::Queued
    );
    // b asking again still holds what it held; its release grants nobody and the lock stays.
    assert_eq!(
        h.reply("b", lock_shared("db", &b, Some(0))),
        Reply::Granted { token: b_token }
    );
    assert_eq!(
        h.send("b", lock_release("db", &b)),
        (
            Reply::Done,
            vec![lock_released("db", "b", 2, b_token, 5_000)]
        )
    );
    assert_eq!(
        h.lock_modes("db"),
        (vec![], vec![("c".into(), Shared), ("d".into(), Exclusive)])
    );

    h.now_ms = 1_006_999;
    assert_eq!(h.expire_hold_times(), (NOTHING_ENDED, vec![]));
    h.now_ms = 1_007_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, hold_times_ended(0, 1));
    assert_eq!(
        events,
        granted_from_queue("db", ("c", 3, "c1"), 14 << 16, 2_000),
        "the reader at the head, not the writer behind it"
    );
    assert_eq!(
        h.lock_modes("db"),
        (
            vec![("c".into(), 14 << 16, Shared)],
            vec![("d".into(), Exclusive)]
        )
    );
}

#[test]
fn a_lock_held_shared_by_leases_with_delays_is_held_back_until_the_latest_end() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 5_000);
    let b = h.lease_with_delay("b", 5_000, 1_000);
    let c = h.lease_with_delay("c", 5_000, 20_000);
    let d = h.lease("d", 60_000);
    for (agent, lease) in [("a", &a), ("b", &b), ("c", &c)] {
        h.reply(agent, lock_shared("db", lease, None));
    }
    h.now_ms = 1_005_000;
    h.expire(&[&a]);
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_010_000));
    h.now_ms = 1_006_000;
    h.expire(&[&b]);
    assert_eq!(
        h.sm.hold_time_next_ms(),
        Some(1_010_000),
        "a shorter delay ending later does not cut the first short"
    );
    h.now_ms = 1_007_000;
    h.expire(&[&c]);
    assert_eq!(
        h.sm.hold_time_next_ms(),
        Some(1_027_000),
        "a longer one holds"
    );

    h.now_ms = 1_010_000;
    assert_eq!(h.expire_hold_times(), (NOTHING_ENDED, vec![]));
    assert_eq!(
        h.reply("d", lock_shared("db", &d, Some(0))),
        held_back("db", 1_027_000)
    );
}

#[test]
fn a_multi_locks_lease_end_holds_back_each_of_its_locks_and_a_multi_lock_naming_one_waits() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 2_000);
    let [b, c] = h.leases(["b", "c"], 60_000);
    let token = Harness::token(&h.reply("a", lock_acquire_all(&["y", "x"], &a, None, Exclusive)));

    h.now_ms += 5_000;
    let (_, events) = h.expire(&[&a]);
    assert_eq!(
        events,
        vec![
            lease_ended("a", 1, LeaseEnd::Expired),
            lock_ended("x", ("a", 1, token), 5_000, ReleaseReason::LeaseEnded),
            lock_ended("y", ("a", 1, token), 5_000, ReleaseReason::LeaseEnded),
        ],
        "one loss for each lock of the multi-lock"
    );
    // A multi-lock naming a held-back lock: a try is refused naming the delay, however the
    // names are ordered; without `wait_ms: 0` it queues in each of its locks, keeping the
    // free one for itself.
    assert_eq!(
        h.send("b", lock_acquire_all(&["z", "y"], &b, Some(0), Shared)),
        (held_back("y", 1_007_000), vec![])
    );
    assert_eq!(
        h.send_as("b", "b1", lock_acquire_all(&["z", "y"], &b, None, Shared)),
        (Reply::Queued, vec![lock_queued("y", "b", "b1")])
    );
    assert_eq!(
        h.reply("c", lock_shared("z", &c, Some(0))),
        Reply::refused(
            WouldBlock,
            "lock \"z\" has 1 requests waiting, and a later request never overtakes them"
        )
    );
    assert_eq!(h.lock_modes("z"), (vec![], vec![("b".into(), Shared)]));

    h.now_ms = 1_007_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, hold_times_ended(0, 2));
    let token = 9 << 16;
    assert_eq!(
        events,
        vec![
            lock_granted("y", "b", 2, token, Some(2_000)),
            lock_granted("z", "b", 2, token, Some(2_000)),
            lock_respond("y", "b", "b1", Reply::Granted { token }),
        ],
        "one grant of both, one answer"
    );
    assert_eq!(h.lock_modes("x"), (vec![], vec![]), "x is forgotten");
}

#[test]
fn a_multi_locks_max_hold_ends_every_one_of_its_locks_together_and_grants_their_waiters() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 60_000);
    let op = held_at_most(lock_acquire_all(&["y", "x"], &a, None, Exclusive), 1_000);
    let token = Harness::token(&h.reply("a", op));
    h.send_as("b", "b1", lock_acquire("x", &b, None));
    h.send_as("c", "c1", lock_shared("y", &c, None));
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_001_000));

    h.now_ms = 1_001_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, hold_times_ended(2, 0));
    let mut expected = vec![
        lock_ended("x", ("a", 1, token), 1_000, ReleaseReason::MaxHold),
        lock_ended("y", ("a", 1, token), 1_000, ReleaseReason::MaxHold),
    ];
    expected.extend(granted_from_queue("x", ("b", 2, "b1"), 7 << 16, 1_000));
    expected.extend(granted_from_queue(
        "y",
        ("c", 3, "c1"),
        (7 << 16) + 1,
        1_000,
    ));
    assert_eq!(events, expected);
    assert_eq!(h.sm.hold_time_next_ms(), None);
}

#[test]
fn a_queued_multi_locks_max_hold_counts_from_its_grant_on_every_lock() {
    let mut h = Harness::new();
    let [a, m] = h.leases(["a", "m"], 60_000);
    h.reply("a", lock_acquire("x", &a, None));
    let op = held_at_most(lock_acquire_all(&["x", "y"], &m, None, Exclusive), 500);
    assert_eq!(h.send_as("m", "m1", op).0, Reply::Queued);
    assert_eq!(
        h.sm.hold_time_next_ms(),
        None,
        "no deadline before the grant"
    );

    h.now_ms += 300;
    let (_, events) = h.send("a", lock_release("x", &a));
    assert_eq!(responses(&events)[0].1, "m1");
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_000_800));
    h.now_ms = 1_000_800;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, hold_times_ended(2, 0));
    assert_eq!(events.len(), 2, "x and y, nobody to grant: {events:?}");
    assert_eq!(h.lock_modes("x"), (vec![], vec![]));
    assert_eq!(h.lock_modes("y"), (vec![], vec![]));
}

#[test]
fn each_shared_hold_ends_at_its_own_max_hold() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 60_000);
    let a_token = Harness::token(&h.reply("a", held_at_most(lock_shared("db", &a, None), 1_000)));
    h.now_ms += 300;
    let b_token = Harness::token(&h.reply("b", held_at_most(lock_shared("db", &b, None), 1_000)));
    h.send_as("c", "c1", lock_acquire("db", &c, None));
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_001_000));

    h.now_ms = 1_001_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, hold_times_ended(1, 0));
    assert_eq!(
        events,
        vec![lock_ended(
            "db",
            ("a", 1, a_token),
            1_000,
            ReleaseReason::MaxHold
        )],
        "b holds on, so the writer waits"
    );
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_001_300));

    h.now_ms = 1_001_300;
    let (_, events) = h.expire_hold_times();
    let mut expected = vec![lock_ended(
        "db",
        ("b", 2, b_token),
        1_000,
        ReleaseReason::MaxHold,
    )];
    expected.extend(granted_from_queue("db", ("c", 3, "c1"), 8 << 16, 1_000));
    assert_eq!(events, expected);
}

#[test]
fn a_downgrade_keeps_the_holds_max_hold_deadline() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 60_000);
    let token = Harness::token(&h.reply("a", held_at_most(lock_acquire("db", &a, None), 1_000)));
    h.send_as("b", "b1", lock_shared("db", &b, None));
    h.now_ms += 400;
    let (reply, events) = h.send("a", lock_downgrade("db", &a));
    assert_eq!(reply, Reply::Granted { token });
    assert_eq!(
        events,
        granted_from_queue("db", ("b", 2, "b1"), 5 << 16, 400).to_vec()
    );
    assert_eq!(
        h.sm.hold_time_next_ms(),
        Some(1_001_000),
        "the deadline of the grant, not of the downgrade"
    );

    h.now_ms = 1_001_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(
        events,
        vec![lock_ended(
            "db",
            ("a", 1, token),
            1_000,
            ReleaseReason::MaxHold
        )]
    );
    assert_eq!(h.lock_modes("db").0, vec![("b".into(), 5 << 16, Shared)]);
}

#[test]
fn a_held_back_lock_beside_a_shared_holder_stays_held_back_across_a_restore() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 5_000, 2_000);
    let [b, c] = h.leases(["b", "c"], 60_000);
    h.reply("a", lock_shared("db", &a, None));
    h.reply("b", lock_shared("db", &b, None));
    h.now_ms += 5_000;
    h.expire(&[&a]);

    let bytes = h.sm.snapshot();
    h.sm = StateMachine::restore(&bytes).expect("restores");
    assert!(h.sm.snapshot() == bytes, "to its own bytes");
    assert_eq!(
        h.reply("c", lock_shared("db", &c, Some(0))),
        held_back("db", 1_007_000)
    );
    h.send_as("c", "c1", lock_shared("db", &c, None));
    h.now_ms = 1_007_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(
        events,
        granted_from_queue("db", ("c", 3, "c1"), 9 << 16, 2_000)
    );
}
