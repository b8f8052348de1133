//! Multi-locks: several locks granted at once with one token or queued as a unit, never
//! overtaken, never deadlocked, leaving every queue at once, released together.

use hivekeeper_protocol::ErrorCode::{
    BadRequest, LeaseNotFound, NotHolder, ResourceExhausted, Timeout, WouldBlock,
};
use hivekeeper_protocol::LockMode::{Exclusive, Shared};
use hivekeeper_protocol::ResourceKind;

use super::test_support::*;
use super::{Command, Event, LeaseEnd, LeaseId, Limits, ReleaseReason, Reply};

#[test]
fn free_locks_are_granted_at_once_with_one_token_on_every_one() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let (reply, events) = h.send("a", lock_acquire_all(&["door", "bay"], &a, None, Exclusive));
    assert_eq!(reply, Reply::Granted { token: 3 << 16 });
    assert_eq!(
        events,
        vec![
            lock_granted("bay", "a", 1, 3 << 16, None),
            lock_granted("door", "a", 1, 3 << 16, None),
        ]
    );
    for name in ["bay", "door"] {
        assert_eq!(h.lock_modes(name).0, vec![("a".into(), 3 << 16, Exclusive)]);
        assert_eq!(
            h.fence_lock(name, 3 << 16),
            Reply::Fence {
                current: 3 << 16,
                valid: true
            }
        );
    }
    // Asked again, in any order, or one of its locks alone: the one token.
    assert_eq!(
        h.reply(
            "a",
            lock_acquire_all(&["bay", "door"], &a, Some(0), Exclusive)
        ),
        Reply::Granted { token: 3 << 16 }
    );
    assert_eq!(
        h.reply("a", lock_acquire("door", &a, None)),
        Reply::Granted { token: 3 << 16 }
    );
    // Some of them with another lock: the multi-lock would be two grants.
    assert_eq!(
        h.reply(
            "a",
            lock_acquire_all(&["door", "hall"], &a, None, Exclusive)
        ),
        Reply::refused(
            BadRequest,
            format!(
                "lease {a} already holds lock \"door\", and a multi-lock takes all its locks in \
                 one grant: release it, or leave it out"
            )
        )
    );
    assert_eq!(
        h.reply(
            "b",
            lock_acquire_all(&["hall", "door"], &b, Some(0), Shared)
        ),
        Reply::refused(WouldBlock, "lock \"door\" is held by another lease")
    );
    assert_eq!(h.occupants(ResourceKind::Lock, "hall"), (vec![], vec![]));
}

#[test]
fn a_multi_lock_waits_as_a_unit_and_is_granted_once_both_are_free_with_one_token() {
    let mut h = Harness::new();
    let [p, q, m] = h.leases(["p", "q", "m"], 5_000);
    h.reply("p", lock_acquire("a", &p, None));
    h.reply("q", lock_acquire("b", &q, None));
    assert_eq!(
        h.send("m", lock_acquire_all(&["b", "a"], &m, None, Exclusive)),
        (Reply::Queued, vec![lock_queued("a", "m", "r6")]),
        "one request, one Queued, under its first lock"
    );
    for name in ["a", "b"] {
        assert_eq!(h.lock_modes(name).1, vec![("m".into(), Exclusive)]);
    }
    h.now_ms += 10;
    let (_, events) = h.send("p", lock_release("a", &p));
    assert_eq!(events, vec![lock_released("a", "p", 1, 4 << 16, 10)]);
    assert_eq!(
        h.lock_modes("a"),
        (vec![], vec![("m".into(), Exclusive)]),
        "a is free, and kept for the multi-lock at its head, which still waits for b"
    );
    let (_, events) = h.send("q", lock_release("b", &q));
    assert_eq!(
        events,
        vec![
            lock_released("b", "q", 2, 5 << 16, 10),
            lock_granted("a", "m", 3, 8 << 16, Some(10)),
            lock_granted("b", "m", 3, 8 << 16, Some(10)),
            lock_respond("a", "m", "r6", Reply::Granted { token: 8 << 16 }),
        ]
    );
}

#[test]
fn no_later_request_overtakes_a_waiting_multi_lock_on_any_of_its_locks() {
    let mut h = Harness::new();
    let [q, m, z] = h.leases(["q", "m", "z"], 5_000);
    h.reply("q", lock_acquire("b", &q, None));
    h.reply("m", lock_acquire_all(&["a", "b"], &m, None, Exclusive));
    // a is free, but the multi-lock waits for it first.
    assert_eq!(
        h.reply("z", lock_acquire("a", &z, Some(0))),
        Reply::refused(
            WouldBlock,
            "lock \"a\" has 1 requests waiting, and a later request never overtakes them"
        )
    );
    assert_eq!(
        h.send("z", lock_acquire("a", &z, None)),
        (Reply::Queued, vec![lock_queued("a", "z", "r7")])
    );
    let (_, events) = h.send("q", lock_release("b", &q));
    assert_eq!(
        events,
        vec![
            lock_released("b", "q", 1, 4 << 16, 0),
            lock_granted("a", "m", 2, 8 << 16, Some(0)),
            lock_granted("b", "m", 2, 8 << 16, Some(0)),
            lock_respond("a", "m", "r5", Reply::Granted { token: 8 << 16 }),
        ]
    );
    assert_eq!(
        h.lock_modes("a"),
        (
            vec![("m".into(), 8 << 16, Exclusive)],
            vec![("z".into(), Exclusive)]
        )
    );
}

#[test]
fn multi_locks_over_the_same_locks_in_opposite_orders_do_not_deadlock() {
    let mut h = Harness::new();
    let [p, q, ma, mb] = h.leases(["p", "q", "ma", "mb"], 5_000);
    h.reply("p", lock_acquire("a", &p, None));
    h.reply("q", lock_acquire("b", &q, None));
    // Both wait while third parties hold both locks: A asked {a, b}, B {b, a}.
    assert_eq!(
        h.reply("ma", lock_acquire_all(&["a", "b"], &ma, None, Exclusive)),
        Reply::Queued
    );
    assert_eq!(
        h.reply("mb", lock_acquire_all(&["b", "a"], &mb, None, Exclusive)),
        Reply::Queued
    );
    let (_, events) = h.send("p", lock_release("a", &p));
    assert_eq!(
        responses(&events),
        vec![],
        "neither holds a lock while it waits"
    );
    let (_, events) = h.send("q", lock_release("b", &q));
    assert_eq!(
        events,
        vec![
            lock_released("b", "q", 2, 6 << 16, 0),
            lock_granted("a", "ma", 3, 10 << 16, Some(0)),
            lock_granted("b", "ma", 3, 10 << 16, Some(0)),
            lock_respond("a", "ma", "r7", Reply::Granted { token: 10 << 16 }),
        ],
        "the earlier one heads both queues: it gets both"
    );
    let (reply, events) = h.send("ma", lock_release_all(&["b", "a"], &ma));
    assert_eq!(reply, Reply::Done);
    assert_eq!(
        events,
        vec![
            lock_released("a", "ma", 3, 10 << 16, 0),
            lock_released("b", "ma", 3, 10 << 16, 0),
            lock_granted("a", "mb", 4, 11 << 16, Some(0)),
            lock_granted("b", "mb", 4, 11 << 16, Some(0)),
            lock_respond("a", "mb", "r8", Reply::Granted { token: 11 << 16 }),
        ]
    );
}

#[test]
fn a_multi_lock_that_stops_waiting_leaves_every_queue_at_once_with_one_answer() {
    let mut h = Harness::new();
    let [p, m, z] = h.leases(["p", "m", "z"], 5_000);
    h.reply("p", lock_acquire("b", &p, None));
    h.send_as(
        "m",
        "m-all",
        lock_acquire_all(&["a", "b"], &m, Some(100), Exclusive),
    );
    h.send_as("z", "z-b", lock_acquire("b", &z, None));
    h.now_ms += 100;
    let term = h.term;
    let (reply, events) = h.apply(Command::ExpireWaits { term });
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    let elapsed = Reply::refused(Timeout, "wait_ms elapsed before the resource was granted");
    assert_eq!(events, vec![lock_respond("a", "m", "m-all", elapsed)]);
    let snapshot: serde_json::Value =
        serde_json::from_slice(&h.sm.snapshot()).expect("a snapshot is JSON");
    assert_eq!(
        snapshot["state"]["locks"]
            .as_object()
            .map(|locks| locks.len()),
        Some(1),
        "a, which only the multi-lock waited for, is forgotten: {snapshot}"
    );
    assert_eq!(h.lock_modes("b").1, vec![("z".into(), Exclusive)]);
    // Its lease's end: the same, one answer.
    h.send_as("m", "m-2", lock_acquire_all(&["a", "b"], &m, None, Shared));
    let (_, events) = h.send("m", Op::LeaseRevoke { lease: m.clone() });
    let ended = Reply::refused(LeaseNotFound, "the lease ended while the request waited");
    assert_eq!(
        events,
        vec![
            Event::LeaseEnded {
                agent: "m".into(),
                lease: LeaseId(2),
                reason: LeaseEnd::Revoked,
            },
            lock_respond("a", "m", "m-2", ended),
        ]
    );
    assert_eq!(h.occupants(ResourceKind::Lock, "a"), (vec![], vec![]));
    assert_eq!(h.sm.waiter_counts().get(ResourceKind::Lock), 1, "z alone");
}

#[test]
fn a_held_multi_lock_whose_lease_ends_is_lost_on_every_lock_and_handed_over_in_the_entry() {
    let mut h = Harness::new();
    let [m, w] = h.leases(["m", "w"], 5_000);
    h.reply("m", lock_acquire_all(&["a", "b"], &m, None, Exclusive));
    h.send_as("w", "w-b", lock_acquire("b", &w, None));
    h.now_ms += 10;
    let (_, events) = h.send("m", Op::LeaseRevoke { lease: m.clone() });
    let lost = |name: &str| Event::Released {
        key: lock_key(name),
        agent: "m".into(),
        lease: LeaseId(1),
        token: 3 << 16,
        held_ms: 10,
        reason: ReleaseReason::LeaseEnded,
    };
    assert_eq!(
        events,
        vec![
            Event::LeaseEnded {
                agent: "m".into(),
                lease: LeaseId(1),
                reason: LeaseEnd::Revoked,
            },
            lost("a"),
            lost("b"),
            lock_granted("b", "w", 2, 5 << 16, Some(10)),
            lock_respond("b", "w", "w-b", Reply::Granted { token: 5 << 16 }),
        ]
    );
}

#[test]
fn release_all_releases_every_lock_together_or_none_and_release_frees_one() {
    let mut h = Harness::new();
    let [m, w] = h.leases(["m", "w"], 5_000);
    h.reply("m", lock_acquire_all(&["a", "b"], &m, None, Exclusive));
    h.reply("m", lock_acquire("c", &m, None));
    h.send_as(
        "w",
        "w-all",
        lock_acquire_all(&["a", "c"], &w, None, Shared),
    );
    assert_eq!(
        h.send("m", lock_release_all(&["a", "d"], &m)),
        (
            Reply::refused(
                NotHolder,
                format!(
                    "lease {m} does not hold lock \"d\"; lock.release_all releases nothing \
                     unless the lease holds every lock it names"
                )
            ),
            vec![]
        )
    );
    assert_eq!(
        h.reply("w", lock_release_all(&["a"], &w)).clone(),
        Reply::refused(
            NotHolder,
            format!(
                "lease {w} does not hold lock \"a\"; lock.release_all releases nothing unless \
                 the lease holds every lock it names"
            )
        ),
        "a waiter holds nothing"
    );
    assert_eq!(h.lock_modes("a").0, vec![("m".into(), 3 << 16, Exclusive)]);
    // Two grants (two tokens) released together: the waiter gets both in the same entry.
    h.now_ms += 5;
    let (reply, events) = h.send("m", lock_release_all(&["c", "a"], &m));
    assert_eq!(reply, Reply::Done);
    assert_eq!(
        events,
        vec![
            lock_released("a", "m", 1, 3 << 16, 5),
            lock_released("c", "m", 1, 4 << 16, 5),
            lock_granted("a", "w", 2, 8 << 16, Some(5)),
            lock_granted("c", "w", 2, 8 << 16, Some(5)),
            lock_respond("a", "w", "w-all", Reply::Granted { token: 8 << 16 }),
        ]
    );
    // b is still held under the multi-lock's token; `lock.release` frees one lock of it.
    assert_eq!(
        h.fence_lock("b", 3 << 16),
        Reply::Fence {
            current: 3 << 16,
            valid: true
        }
    );
    assert_eq!(h.reply("m", lock_release("b", &m)), Reply::Done);
    assert_eq!(h.occupants(ResourceKind::Lock, "b"), (vec![], vec![]));
}

#[test]
fn a_waiting_multi_lock_asked_again_takes_its_wait_over_only_for_the_same_locks_and_mode() {
    let mut h = Harness::new();
    let [p, m] = h.leases(["p", "m"], 5_000);
    h.reply("p", lock_acquire("b", &p, None));
    h.send_as(
        "m",
        "m-1",
        lock_acquire_all(&["a", "b"], &m, None, Exclusive),
    );
    let already = |key: &str, what: &str| {
        Reply::refused(
            BadRequest,
            format!("lease {m} already waits for lock:{key} (request id \"m-1\") with {what}"),
        )
    };
    assert_eq!(
        h.send_as(
            "m",
            "m-2",
            lock_acquire_all(&["b", "c"], &m, None, Exclusive)
        ),
        (already("b", "other locks"), vec![])
    );
    assert_eq!(
        h.reply("m", lock_acquire("a", &m, None)),
        already("a", "other locks")
    );
    assert_eq!(
        h.reply("m", lock_acquire_all(&["a", "b"], &m, None, Shared)),
        already("a", "mode exclusive")
    );
    assert_eq!(
        h.send_as(
            "m",
            "m-5",
            lock_acquire_all(&["b", "a"], &m, Some(0), Exclusive)
        ),
        (
            Reply::refused(
                WouldBlock,
                "lock \"b\" is held by another lease (this lease already waits for it, request \
                 id \"m-1\")"
            ),
            vec![]
        )
    );
    let superseded = Reply::refused(
        Timeout,
        "superseded by request id \"m-6\": the wait for lock:a goes on under it",
    );
    let now_ms = h.now_ms;
    assert_eq!(
        h.send_as(
            "m",
            "m-6",
            lock_acquire_all(&["b", "a"], &m, Some(60_000), Exclusive)
        ),
        (
            Reply::Queued,
            vec![
                lock_respond("a", "m", "m-1", superseded),
                lock_queued("a", "m", "m-6"),
            ]
        )
    );
    assert_eq!(h.sm.wait_deadline_next_ms(), Some(now_ms + 60_000));
    let (_, events) = h.send("p", lock_release("b", &p));
    assert_eq!(
        responses(&events),
        vec![(
            "m".into(),
            "m-6".into(),
            Reply::Granted {
                token: (h.index) << 16
            }
        )]
    );
}

#[test]
fn a_shared_multi_lock_joins_shared_holders_and_counts_each_lock_against_the_quotas() {
    let mut h = Harness::with_limits(Limits {
        holds_per_agent_max: 3,
        ..Limits::DEFAULTS
    });
    let [a, b] = h.leases(["a", "b"], 5_000);
    let first = Harness::token(&h.reply("a", lock_shared("r1", &a, None)));
    let (reply, events) = h.send("b", lock_acquire_all(&["r2", "r1"], &b, None, Shared));
    assert_eq!(reply, Reply::Granted { token: 4 << 16 });
    assert_eq!(
        events,
        vec![
            lock_granted("r1", "b", 2, 4 << 16, None),
            lock_granted("r2", "b", 2, 4 << 16, None),
        ]
    );
    assert_eq!(
        h.lock_modes("r1").0,
        vec![("a".into(), first, Shared), ("b".into(), 4 << 16, Shared)]
    );
    assert_eq!(
        h.reply("b", lock_acquire_all(&["x", "y"], &b, None, Exclusive)),
        Reply::refused(
            ResourceExhausted,
            "agent b holds 2 resources and waits for 0: holds_per_agent_max is 3"
        )
    );
    // The names are checked as the wire decoder checks them.
    assert_eq!(
        h.reply("b", lock_acquire_all(&["x", "x"], &b, None, Exclusive)),
        Reply::refused(
            BadRequest,
            "lock.acquire_all: `names` has \"x\" twice; name each lock once"
        )
    );
    assert_eq!(
        h.reply("b", lock_release_all(&[], &b)),
        Reply::refused(
            BadRequest,
            "lock.release_all: `names` has 0 names, a multi-lock takes 1 to 64"
        )
    );
}
