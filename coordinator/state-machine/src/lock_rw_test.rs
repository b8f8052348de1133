//! Read-write locks: shared holders together, strict FIFO across modes (a writer is never
//! starved), runs of shared waiters granted in one entry, downgrade, no upgrade, and the
//! snapshot form that keeps an exclusive lock's bytes.

use hivekeeper_protocol::ErrorCode::{BadRequest, LeaseNotFound, NotHolder, Timeout, WouldBlock};
use hivekeeper_protocol::LockMode::{Exclusive, Shared};

use super::test_support::*;
use super::{Command, Event, LeaseEnd, LeaseId, Reply, StateMachine};

#[test]
fn shared_holders_coexist_each_with_its_own_token_and_leave_one_by_one() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let (reply, events) = h.send("a", lock_shared("db", &a, None));
    assert_eq!(reply, Reply::Granted { token: 3 << 16 });
    assert_eq!(events, vec![lock_granted("db", "a", 1, 3 << 16, None)]);
    h.now_ms += 5;
    let (reply, events) = h.send("b", lock_shared("db", &b, Some(0)));
    assert_eq!(reply, Reply::Granted { token: 4 << 16 });
    assert_eq!(events, vec![lock_granted("db", "b", 2, 4 << 16, None)]);
    let (holders, waiters) = h.lock_modes("db");
    assert_eq!(
        holders,
        vec![("a".into(), 3 << 16, Shared), ("b".into(), 4 << 16, Shared)]
    );
    assert_eq!(waiters, vec![]);
    // Each token is valid; `current` is the highest held.
    for token in [3 << 16, 4 << 16] {
        assert_eq!(
            h.fence_lock("db", token),
            Reply::Fence {
                current: 4 << 16,
                valid: true
            }
        );
    }
    assert_eq!(
        h.fence_lock("db", 2 << 16),
        Reply::Fence {
            current: 4 << 16,
            valid: false
        }
    );
    // A holder asking again in its mode gets its own token.
    assert_eq!(
        h.reply("a", lock_shared("db", &a, None)),
        Reply::Granted { token: 3 << 16 }
    );
    // A release frees its own hold only.
    h.now_ms += 10;
    let (reply, events) = h.send("a", lock_release("db", &a));
    assert_eq!(reply, Reply::Done);
    assert_eq!(events, vec![lock_released("db", "a", 1, 3 << 16, 15)]);
    assert_eq!(h.lock_modes("db").0, vec![("b".into(), 4 << 16, Shared)]);
    assert_eq!(
        h.fence_lock("db", 3 << 16),
        Reply::Fence {
            current: 4 << 16,
            valid: false
        }
    );
}

#[test]
fn a_queued_writer_blocks_later_readers_and_is_granted_when_the_last_reader_leaves() {
    let mut h = Harness::new();
    let [a, b, c, d, e] = h.leases(["a", "b", "c", "d", "e"], 5_000);
    h.reply("a", lock_shared("db", &a, None));
    h.reply("b", lock_shared("db", &b, None));
    assert_eq!(
        h.send("c", lock_acquire("db", &c, None)),
        (Reply::Queued, vec![lock_queued("db", "c", "r8")])
    );
    // The readers hold it, but a later reader queues behind the writer: it never starves.
    assert_eq!(
        h.reply("e", lock_shared("db", &e, Some(0))),
        Reply::refused(
            WouldBlock,
            "lock \"db\" has 1 requests waiting, and a later request never overtakes them"
        )
    );
    assert_eq!(
        h.send("d", lock_shared("db", &d, None)),
        (Reply::Queued, vec![lock_queued("db", "d", "r10")])
    );
    let (holders, waiters) = h.lock_modes("db");
    assert_eq!(
        holders,
        vec![("a".into(), 6 << 16, Shared), ("b".into(), 7 << 16, Shared)]
    );
    assert_eq!(waiters, vec![("c".into(), Exclusive), ("d".into(), Shared)]);
    h.now_ms += 20;
    // One reader leaves: the other still holds, nobody is granted.
    let (_, events) = h.send("a", lock_release("db", &a));
    assert_eq!(events, vec![lock_released("db", "a", 1, 6 << 16, 20)]);
    // The last reader leaves: the writer, and only it.
    let (_, events) = h.send("b", lock_release("db", &b));
    assert_eq!(
        events,
        vec![
            lock_released("db", "b", 2, 7 << 16, 20),
            lock_granted("db", "c", 3, 12 << 16, Some(20)),
            lock_respond("db", "c", "r8", Reply::Granted { token: 12 << 16 }),
        ]
    );
    h.now_ms += 5;
    let (_, events) = h.send("c", lock_release("db", &c));
    assert_eq!(
        events,
        vec![
            lock_released("db", "c", 3, 12 << 16, 5),
            lock_granted("db", "d", 4, 13 << 16, Some(25)),
            lock_respond("db", "d", "r10", Reply::Granted { token: 13 << 16 }),
        ]
    );
}

/// A writer holds `db`; s1 and s2 (shared), x2 (exclusive) and s3 (shared) wait, queued 30 ms
/// before the clock's time now. The writer's token is `6 << 16`.
fn writer_with_mixed_queue() -> (Harness, [String; 5]) {
    let mut h = Harness::new();
    let leases = h.leases(["x", "s1", "s2", "x2", "s3"], 5_000);
    let [x, s1, s2, x2, s3] = &leases;
    assert_eq!(
        h.reply("x", lock_acquire("db", x, None)),
        Reply::Granted { token: 6 << 16 }
    );
    h.reply("s1", lock_shared("db", s1, None));
    h.reply("s2", lock_shared("db", s2, None));
    h.reply("x2", lock_acquire("db", x2, None));
    h.reply("s3", lock_shared("db", s3, None));
    h.now_ms += 30;
    (h, leases)
}

#[test]
fn a_writer_leaving_grants_the_run_of_shared_waiters_up_to_the_next_writer_in_one_entry() {
    let (mut h, [x, ..]) = writer_with_mixed_queue();
    let (reply, events) = h.send("x", lock_release("db", &x));
    assert_eq!(reply, Reply::Done);
    let (t1, t2) = (11 << 16, (11 << 16) + 1);
    assert_eq!(
        events,
        vec![
            lock_released("db", "x", 1, 6 << 16, 30),
            lock_granted("db", "s1", 2, t1, Some(30)),
            lock_respond("db", "s1", "r7", Reply::Granted { token: t1 }),
            lock_granted("db", "s2", 3, t2, Some(30)),
            lock_respond("db", "s2", "r8", Reply::Granted { token: t2 }),
        ]
    );
    let (holders, waiters) = h.lock_modes("db");
    assert_eq!(
        holders,
        vec![("s1".into(), t1, Shared), ("s2".into(), t2, Shared)]
    );
    assert_eq!(
        waiters,
        vec![("x2".into(), Exclusive), ("s3".into(), Shared)]
    );
}

#[test]
fn a_downgrade_keeps_the_token_and_grants_the_shared_waiters_at_the_head_in_one_entry() {
    let (mut h, [x, s1, s2, x2, _]) = writer_with_mixed_queue();
    let (reply, events) = h.send("x", lock_downgrade("db", &x));
    assert_eq!(reply, Reply::Granted { token: 6 << 16 });
    let (t1, t2) = (11 << 16, (11 << 16) + 1);
    assert_eq!(
        events,
        vec![
            lock_granted("db", "s1", 2, t1, Some(30)),
            lock_respond("db", "s1", "r7", Reply::Granted { token: t1 }),
            lock_granted("db", "s2", 3, t2, Some(30)),
            lock_respond("db", "s2", "r8", Reply::Granted { token: t2 }),
        ],
        "the downgraded hold goes on: no release, no new grant"
    );
    let (holders, waiters) = h.lock_modes("db");
    assert_eq!(
        holders,
        vec![
            ("x".into(), 6 << 16, Shared),
            ("s1".into(), t1, Shared),
            ("s2".into(), t2, Shared)
        ]
    );
    assert_eq!(
        waiters,
        vec![("x2".into(), Exclusive), ("s3".into(), Shared)]
    );
    assert_eq!(
        h.fence_lock("db", 6 << 16),
        Reply::Fence {
            current: t2,
            valid: true
        }
    );
    // A shared hold asked to downgrade again: its token, nothing changes.
    assert_eq!(
        h.send("x", lock_downgrade("db", &x)),
        (Reply::Granted { token: 6 << 16 }, vec![])
    );
    // Not a holder: a waiter, and a lock nobody holds.
    assert_eq!(
        h.reply("x2", lock_downgrade("db", &x2)),
        Reply::refused(NotHolder, format!("lease {x2} does not hold lock \"db\""))
    );
    assert_eq!(
        h.reply("x2", lock_downgrade("idle", &x2)),
        Reply::refused(NotHolder, format!("lease {x2} does not hold lock \"idle\""))
    );
    // The downgraded hold leaves like any shared one; the writer waits for the last.
    h.reply("x", lock_release("db", &x));
    h.reply("s1", lock_release("db", &s1));
    let (_, events) = h.send("s2", lock_release("db", &s2));
    assert_eq!(responses(&events)[0].0, "x2");
}

#[test]
fn a_shared_hold_is_never_upgraded_and_an_exclusive_one_asked_shared_points_to_downgrade() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let shared = Harness::token(&h.reply("a", lock_shared("db", &a, None)));
    assert_eq!(
        h.send("a", lock_acquire("db", &a, None)),
        (
            Reply::refused(
                BadRequest,
                format!(
                    "lock \"db\": lease {a} holds it shared, and a shared hold is never upgraded \
                     to exclusive (two shared holders upgrading at once would each wait for the \
                     other forever); release it, then acquire it exclusive"
                )
            ),
            vec![]
        )
    );
    assert_eq!(
        h.reply("a", lock_shared("db", &a, Some(0))),
        Reply::Granted { token: shared }
    );
    let exclusive = Harness::token(&h.reply("b", lock_acquire("wal", &b, None)));
    assert_eq!(
        h.reply("b", lock_shared("wal", &b, None)),
        Reply::refused(
            BadRequest,
            format!(
                "lock \"wal\": lease {b} holds it exclusive; lock.downgrade makes the hold \
                 shared, keeping its token"
            )
        )
    );
    assert_eq!(
        h.reply("b", lock_acquire("wal", &b, None)),
        Reply::Granted { token: exclusive }
    );
    assert_eq!(
        h.lock_modes("db").0,
        vec![("a".into(), shared, Shared)],
        "the refusals changed nothing"
    );
    assert_eq!(
        h.lock_modes("wal").0,
        vec![("b".into(), exclusive, Exclusive)]
    );
}

#[test]
fn a_writer_that_stops_waiting_lets_the_readers_behind_it_join_the_readers() {
    let mut h = Harness::new();
    let [r1, x, r2, r3] = h.leases(["r1", "x", "r2", "r3"], 5_000);
    h.reply("r1", lock_shared("db", &r1, None));
    h.send_as("x", "x-wait", lock_acquire("db", &x, Some(100)));
    h.send_as("r2", "r2-wait", lock_shared("db", &r2, None));
    // Its wait_ms ends: the reader behind it joins the reader holding the lock.
    h.now_ms += 100;
    let term = h.term;
    let (reply, events) = h.apply(Command::ExpireWaits { term });
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    let elapsed = Reply::refused(Timeout, "wait_ms elapsed before the resource was granted");
    assert_eq!(
        events,
        vec![
            lock_respond("db", "x", "x-wait", elapsed),
            lock_granted("db", "r2", 3, 8 << 16, Some(100)),
            lock_respond("db", "r2", "r2-wait", Reply::Granted { token: 8 << 16 }),
        ]
    );
    // Its lease ends: the same.
    h.send_as("x", "x-again", lock_acquire("db", &x, None));
    h.send_as("r3", "r3-wait", lock_shared("db", &r3, None));
    let (_, events) = h.send("x", Op::LeaseRevoke { lease: x.clone() });
    let ended = Reply::refused(LeaseNotFound, "the lease ended while the request waited");
    assert_eq!(
        events,
        vec![
            Event::LeaseEnded {
                agent: "x".into(),
                lease: LeaseId(2),
                reason: LeaseEnd::Revoked,
            },
            lock_respond("db", "x", "x-again", ended),
            lock_granted("db", "r3", 4, 11 << 16, Some(0)),
            lock_respond("db", "r3", "r3-wait", Reply::Granted { token: 11 << 16 }),
        ]
    );
    assert_eq!(h.lock_modes("db").0.len(), 3);
}

#[test]
fn a_lease_waiting_in_one_mode_may_not_ask_for_the_other_and_takes_its_wait_over_in_its_own() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.reply("a", lock_acquire("db", &a, None));
    assert_eq!(
        h.send_as("b", "b-1", lock_shared("db", &b, None)).0,
        Reply::Queued
    );
    assert_eq!(
        h.send_as("b", "b-2", lock_acquire("db", &b, None)),
        (
            Reply::refused(
                BadRequest,
                format!(
                    "lease {b} already waits for lock:db (request id \"b-1\") with mode shared"
                )
            ),
            vec![]
        )
    );
    assert_eq!(
        h.send_as("b", "b-3", lock_shared("db", &b, Some(0))).0,
        Reply::refused(
            WouldBlock,
            "lock \"db\" is held by another lease (this lease already waits for it, request id \
             \"b-1\")"
        )
    );
    let superseded = Reply::refused(
        Timeout,
        "superseded by request id \"b-4\": the wait for lock:db goes on under it",
    );
    assert_eq!(
        h.send_as("b", "b-4", lock_shared("db", &b, None)),
        (
            Reply::Queued,
            vec![
                lock_respond("db", "b", "b-1", superseded),
                lock_queued("db", "b", "b-4"),
            ]
        )
    );
    assert_eq!(h.lock_modes("db").1, vec![("b".into(), Shared)]);
}

#[test]
fn a_lock_never_held_shared_keeps_its_snapshot_bytes_and_a_shared_one_adds_its_members() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.reply("a", lock_acquire("x", &a, None));
    h.reply("b", lock_acquire("x", &b, None));
    let snapshot = |h: &Harness| -> serde_json::Value {
        serde_json::from_slice(&h.sm.snapshot()).expect("a snapshot is JSON")
    };
    assert_eq!(
        snapshot(&h)["state"]["locks"]["x"],
        serde_json::json!({
            "holder": {"lease": 1, "agent": "a", "token": 4 << 16, "permits": 1,
                       "since_ms": 1_000_000},
            "waiters": [{"lease": 2, "agent": "b", "request_id": "r5", "permits": 1,
                         "since_ms": 1_000_000, "seq": 5}]
        })
    );
    h.reply("c", lock_shared("y", &c, None));
    h.reply("a", lock_acquire("y", &a, None));
    h.reply("b", lock_shared("y", &b, None));
    assert_eq!(
        snapshot(&h)["state"]["locks"]["y"],
        serde_json::json!({
            "holder": null,
            "shared": [{"lease": 3, "agent": "c", "token": 6 << 16, "permits": 1,
                        "since_ms": 1_000_000}],
            "waiters": [
                {"lease": 1, "agent": "a", "request_id": "r7", "permits": 1,
                 "since_ms": 1_000_000, "seq": 7},
                {"lease": 2, "agent": "b", "request_id": "r8", "permits": 1,
                 "since_ms": 1_000_000, "seq": 8, "mode": "shared"}
            ]
        })
    );
    let bytes = h.sm.snapshot();
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
}
