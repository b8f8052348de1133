//! Max-hold: a lock or semaphore hold ends at its grant time plus the acquire's `max_hold_ms`,
//! whether or not its lease lives, and the next waiter is granted in the same entry.

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Command, Event, LeaseId, Limits, ReleaseReason, Reply, ResourceKey, StateMachine};

fn key(kind: ResourceKind, name: &str) -> ResourceKey {
    ResourceKey::new(kind, &Arc::from(name))
}

/// The events of `key`'s hold by `from` ending at its max-hold and `to`'s waiting request
/// `request_id` being granted at `index`.
fn handover(
    key: &ResourceKey,
    (from, from_lease, old_token, held_ms): (&str, u64, u64, u64),
    (to, to_lease, request_id, waited_ms): (&str, u64, &str, u64),
    index: u64,
) -> Vec<Event> {
    let token = index << 16;
    vec![
        Event::Released {
            key: key.clone(),
            agent: Arc::from(from),
            lease: LeaseId(from_lease),
            token: old_token,
            held_ms,
            reason: ReleaseReason::MaxHold,
        },
        Event::Granted {
            key: key.clone(),
            agent: Arc::from(to),
            lease: LeaseId(to_lease),
            token,
            waited_ms,
            queued: true,
        },
        Event::Respond {
            key: key.clone(),
            agent: Arc::from(to),
            request_id: request_id.into(),
            reply: Reply::Granted { token },
        },
    ]
}

const ONE_ENDED: Reply = hold_times_ended(1, 0);

#[test]
fn a_lock_hold_ends_at_its_max_hold_and_the_next_waiter_is_granted_in_that_entry() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 60_000);
    let (reply, events) = h.send("a", held_at_most(lock_acquire("gw", &a, None), 1_000));
    assert_eq!(reply, Reply::Granted { token: 3 << 16 });
    assert_eq!(events.len(), 1, "a plain grant: {events:?}");
    assert_eq!(h.reply("b", lock_acquire("gw", &b, None)), Reply::Queued);
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_001_000));
    assert_eq!(
        h.reply("a", held_at_most(lock_acquire("gw", &a, None), 5)),
        Reply::Granted { token: 3 << 16 },
        "the holder asking again keeps its hold and its bound"
    );
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_001_000));

    h.now_ms = 1_000_999;
    assert_eq!(h.expire_hold_times(), (NOTHING_ENDED, vec![]));
    h.now_ms = 1_001_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, ONE_ENDED);
    let gw = key(ResourceKind::Lock, "gw");
    assert_eq!(
        events,
        handover(&gw, ("a", 1, 3 << 16, 1_000), ("b", 2, "r4", 1_000), 7)
    );
    assert_eq!(h.sm.leases().count(), 2, "a's lease lives on");
    assert_eq!(
        refusal(&h.reply("a", lock_release("gw", &a))).0,
        ErrorCode::NotHolder
    );
    assert_eq!(h.sm.hold_time_next_ms(), None);
}

#[test]
fn a_semaphore_hold_ends_at_its_max_hold() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 60_000);
    let op = held_at_most(sem_acquire("pool", 2, &a, 2, None), 500);
    let token = Harness::token(&h.reply("a", op));
    assert_eq!(
        h.reply("b", sem_acquire("pool", 2, &b, 1, None)),
        Reply::Queued
    );
    h.now_ms += 500;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, ONE_ENDED);
    let pool = key(ResourceKind::Sem, "pool");
    assert_eq!(
        events,
        handover(&pool, ("a", 1, token, 500), ("b", 2, "r4", 500), 5)
    );
}

#[test]
fn a_queued_requests_bound_counts_from_its_grant_and_a_taken_over_wait_takes_the_new_bound() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 60_000);
    h.reply("a", lock_acquire("gw", &a, None));
    h.send_as("b", "b1", held_at_most(lock_acquire("gw", &b, None), 5_000));
    let (reply, _) = h.send_as("b", "b2", held_at_most(lock_acquire("gw", &b, None), 2_000));
    assert_eq!(reply, Reply::Queued);
    assert_eq!(
        h.sm.hold_time_next_ms(),
        None,
        "nothing held is bounded yet"
    );

    h.now_ms += 1_000;
    let (_, events) = h.send("a", lock_release("gw", &a));
    let token = Harness::token(&responses(&events)[0].2);
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_003_000));
    h.now_ms = 1_003_000;
    let (reply, events) = h.expire_hold_times();
    assert_eq!(reply, ONE_ENDED);
    assert_eq!(
        events,
        vec![Event::Released {
            key: key(ResourceKind::Lock, "gw"),
            agent: Arc::from("b"),
            lease: LeaseId(2),
            token,
            held_ms: 2_000,
            reason: ReleaseReason::MaxHold,
        }],
        "nobody waits: the lock is forgotten"
    );
    assert_eq!(h.sm.resource_count(), 0);
}

#[test]
fn a_hold_ends_once_whatever_the_expiry_entries_that_arrive() {
    let mut h = Harness::new();
    let a = h.lease("a", 60_000);
    h.reply("a", held_at_most(lock_acquire("gw", &a, None), 100));
    h.term = 2;
    h.lease("b", 60_000);
    h.now_ms += 100;
    let stale = h.apply(Command::ExpireHoldTimes { term: 1 });
    assert_eq!(
        stale,
        (NOTHING_ENDED, vec![]),
        "a deposed leader ends nothing"
    );
    assert_eq!(h.expire_hold_times().0, ONE_ENDED);
    assert_eq!(
        h.expire_hold_times(),
        (NOTHING_ENDED, vec![]),
        "a duplicate"
    );
    assert_eq!(h.sm.resource_count(), 0);
}

#[test]
fn a_max_hold_outside_one_ms_to_the_longest_lease_ttl_is_refused() {
    let limits = Limits {
        lease_ttl_ms_max: 10_000,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let a = h.lease("a", 5_000);
    let (reply, events) = h.send("a", held_at_most(lock_acquire("gw", &a, None), 0));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "lock.acquire: `max_hold_ms` must be positive; omit it for no bound"
        )
    );
    assert_eq!(events, vec![]);
    let (reply, events) = h.send("a", held_at_most(sem_acquire("s", 1, &a, 1, None), 10_001));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "sem.acquire: `max_hold_ms` is 10001, it must be in [1, 10000] (lease_ttl_ms_max)"
        )
    );
    assert_eq!(events, vec![]);
    let op = held_at_most(sem_acquire("s", 1, &a, 1, None), 10_000);
    assert_eq!(h.reply("a", op), Reply::Granted { token: 4 << 16 });
}

#[test]
fn a_release_forgets_the_deadline_and_no_lock_delay_follows_a_max_hold() {
    let mut h = Harness::new();
    let a = h.lease_with_delay("a", 60_000, 10_000);
    let b = h.lease("b", 60_000);
    h.reply("a", held_at_most(lock_acquire("y", &a, None), 50));
    h.reply("a", lock_release("y", &a));
    assert_eq!(h.sm.hold_time_next_ms(), None);

    h.reply("a", held_at_most(lock_acquire("x", &a, None), 1_000));
    h.reply("b", lock_acquire("x", &b, None));
    h.now_ms += 1_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(
        responses(&events)[0].0,
        "b",
        "handed over at once: {events:?}"
    );
    assert_eq!(h.sm.hold_time_next_ms(), None);
}

#[test]
fn a_lease_end_before_the_deadline_forgets_it() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    h.reply("a", held_at_most(lock_acquire("x", &a, None), 60_000));
    h.now_ms += 5_000;
    h.expire(&[&a]);
    assert_eq!(h.sm.hold_time_next_ms(), None);
}

#[test]
fn deadlines_are_in_the_snapshot_only_when_set_and_survive_a_restore() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 60_000);
    h.reply("a", lock_acquire("plain", &a, None));
    let plain = String::from_utf8(h.sm.snapshot()).expect("UTF-8");
    assert!(!plain.contains("max_hold"), "{plain}");

    h.reply("b", held_at_most(lock_acquire("gw", &b, None), 3_000));
    h.reply("c", held_at_most(lock_acquire("gw", &c, None), 700));
    let bytes = h.sm.snapshot();
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(
        text.contains(r#""since_ms":1000000,"max_hold_deadline_ms":1003000}"#),
        "{text}"
    );
    assert!(
        text.contains(r#""key":"lock:gw","max_hold_ms":700}"#),
        "{text}"
    );
    h.sm = StateMachine::restore(&bytes).expect("restores");
    assert_eq!(h.sm.snapshot(), bytes);
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_003_000));
    h.now_ms = 1_003_000;
    let (_, events) = h.expire_hold_times();
    assert_eq!(responses(&events)[0].0, "c");
    assert_eq!(h.sm.hold_time_next_ms(), Some(1_003_700));
}
