//! Waypoint time windows: conflicts need space and time, touching windows pass, bounds are
//! `bad_request` naming the bound, a future window is granted now, and a window ends by itself
//! in one `ExpireReservations` entry.

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Command, Event, LeaseId, Limits, ReleaseReason, Reply, ResourceKey};

/// The harness's clock at the start (`Harness::new`).
const T0: u64 = 1_000_000;

fn would_block(reply: &Reply) -> bool {
    matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    )
}

#[test]
fn same_place_conflicts_only_when_windows_overlap_and_touching_windows_do_not() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 60_000);
    let first = h.reply(
        "a",
        pad_in("p-a", &a, 0.0, None, (Some(T0 + 10_000), Some(T0 + 20_000))),
    );
    assert!(matches!(first, Reply::Granted { .. }), "{first:?}");
    // Same cylinder, [15 s, 25 s): overlaps [10 s, 20 s).
    let overlapping = pad_in(
        "p-b",
        &b,
        0.0,
        Some(0),
        (Some(T0 + 15_000), Some(T0 + 25_000)),
    );
    let reply = h.reply("b", overlapping);
    assert!(would_block(&reply), "{reply:?}");
    // [20 s, 30 s) touches at 20 s: half-open windows do not conflict.
    let touching = pad_in(
        "p-b",
        &b,
        0.0,
        Some(0),
        (Some(T0 + 20_000), Some(T0 + 30_000)),
    );
    assert!(matches!(h.reply("b", touching), Reply::Granted { .. }));
    // [0, 10 s) from now (start left out): ends where a's starts.
    let before = pad_in("p-c", &c, 0.0, Some(0), (None, Some(T0 + 10_000)));
    assert!(matches!(h.reply("c", before), Reply::Granted { .. }));
}

#[test]
fn far_apart_at_the_same_time_do_not_conflict_and_no_window_means_all_time() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 60_000);
    let window = (Some(T0 + 10_000), Some(T0 + 20_000));
    assert!(matches!(
        h.reply("a", pad_in("p-a", &a, 0.0, None, window)),
        Reply::Granted { .. }
    ));
    assert!(matches!(
        h.reply("b", pad_in("p-b", &b, 100.0, Some(0), window)),
        Reply::Granted { .. }
    ));
    // A reservation without a window covers every time: it conflicts with a's future one.
    let reply = h.reply("c", pad("p-c", &c, 0.0, 3.0, Some(0)));
    assert!(would_block(&reply), "{reply:?}");
}

#[test]
fn a_future_window_is_granted_now_with_its_token_and_inspect_shows_it() {
    let mut h = Harness::new();
    let a = h.lease("a", 60_000);
    let (reply, events) = h.send(
        "a",
        pad_in(
            "p",
            &a,
            0.0,
            None,
            (Some(T0 + 3_600_000), Some(T0 + 7_200_000)),
        ),
    );
    let token = Harness::token(&reply);
    assert_eq!(token, 2 << 16, "issued by entry 2, at grant time");
    assert!(
        events
            .iter()
            .any(|event| matches!(event, Event::Granted { token: t, .. } if *t == token))
    );
    let op = Op::Inspect {
        kind: ResourceKind::Waypoint,
        name: "p".into(),
    };
    match h.sm.query("a", &op) {
        Reply::Inspect { holders, .. } => {
            assert_eq!(holders.len(), 1);
            assert_eq!(holders[0].start_ms, Some(T0 + 3_600_000));
            assert_eq!(holders[0].end_ms, Some(T0 + 7_200_000));
            assert_eq!(holders[0].since_ms, T0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_windows_are_refused_saying_which_bound() {
    let limits = Limits {
        reservation_window_ms_max: 60_000,
        reservation_horizon_ms_max: 3_600_000,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let a = h.lease("a", 60_000);
    let refused = |message: &str| Reply::Refused {
        code: ErrorCode::BadRequest,
        message: message.to_string(),
    };
    assert_eq!(
        h.reply(
            "a",
            pad_in("p", &a, 0.0, None, (Some(T0 - 5_000), Some(T0)))
        ),
        refused(
            "waypoint.reserve: the window is in the past: `end_ms` (1000000) is not after the \
             entry's time (1000000)"
        )
    );
    assert_eq!(
        h.reply(
            "a",
            pad_in("p", &a, 0.0, None, (Some(T0 + 5_000), Some(T0 + 5_000)))
        ),
        refused(
            "waypoint.reserve: the window is empty: `end_ms` (1005000) is not after `start_ms` \
             (1005000)"
        )
    );
    assert_eq!(
        h.reply("a", pad_in("p", &a, 0.0, None, (None, Some(T0 + 60_001)))),
        refused(
            "waypoint.reserve: the window is 60001 ms long, more than reservation_window_ms_max \
             (60000)"
        )
    );
    assert_eq!(
        h.reply(
            "a",
            pad_in("p", &a, 0.0, None, (Some(T0 + 3_600_001), None))
        ),
        refused(
            "waypoint.reserve: `start_ms` (4600001) is 3600001 ms ahead of the entry's time \
             (1000000), beyond reservation_horizon_ms_max (3600000)"
        )
    );
    // At the bounds exactly: accepted.
    let at_bounds = pad_in(
        "p",
        &a,
        0.0,
        None,
        (Some(T0 + 3_600_000), Some(T0 + 3_660_000)),
    );
    assert!(matches!(h.reply("a", at_bounds), Reply::Granted { .. }));
}

#[test]
fn a_window_ends_by_itself_at_end_ms_and_its_waiter_gets_a_higher_token() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    let held = h.reply("a", pad_in("p-a", &a, 0.0, None, (None, Some(T0 + 10_000))));
    let held_token = Harness::token(&held);
    assert_eq!(h.reply("b", pad("p-b", &b, 1.0, 3.0, None)), Reply::Queued);
    assert_eq!(h.sm.reservation_end_next_ms(), Some(T0 + 10_000));
    // 1 ms before the end: nothing is due.
    h.now_ms = T0 + 9_999;
    assert!(!h.sm.reservation_expiry_due(h.now_ms));
    let term = h.term;
    let (reply, events) = h.apply(Command::ExpireReservations { term });
    assert_eq!(reply, Reply::ReservationsEnded { count: 0 });
    assert!(events.is_empty(), "{events:?}");
    // At the end: a's reservation ends and b's is granted in the same entry.
    h.now_ms = T0 + 10_000;
    assert!(h.sm.reservation_expiry_due(h.now_ms));
    let (reply, events) = h.apply(Command::ExpireReservations { term });
    assert_eq!(reply, Reply::ReservationsEnded { count: 1 });
    let lease_a = LeaseId::parse(&a).expect("a wire lease id");
    assert_eq!(
        events[0],
        Event::Released {
            key: ResourceKey::new(ResourceKind::Waypoint, &"p-a".into()),
            agent: "a".into(),
            lease: lease_a,
            token: held_token,
            held_ms: 10_000,
            reason: ReleaseReason::WindowEnded,
        }
    );
    let answers = responses(&events);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, "b");
    let granted = Harness::token(&answers[0].2);
    assert!(granted > held_token, "{granted} > {held_token}");
    assert_eq!(h.sm.reservation_end_next_ms(), None);
    assert_eq!(h.occupants(ResourceKind::Waypoint, "p-a"), (vec![], vec![]));
}

#[test]
fn a_waiting_window_that_ends_before_its_grant_is_answered_timeout() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    h.reply("a", pad("p-a", &a, 0.0, 3.0, None));
    let (reply, _) = h.send_as(
        "b",
        "wants",
        pad_in("p-b", &b, 0.0, None, (None, Some(T0 + 5_000))),
    );
    assert_eq!(reply, Reply::Queued);
    h.now_ms = T0 + 5_000;
    let term = h.term;
    let (reply, events) = h.apply(Command::ExpireReservations { term });
    assert_eq!(reply, Reply::ReservationsEnded { count: 1 });
    assert_eq!(
        responses(&events),
        vec![(
            "b".to_string(),
            "wants".to_string(),
            Reply::Refused {
                code: ErrorCode::Timeout,
                message: "the reservation's window ended at 1005000 before it could be granted"
                    .into(),
            }
        )]
    );
}

#[test]
fn a_stale_term_ends_nothing() {
    let mut h = Harness::new();
    let a = h.lease("a", 600_000);
    h.reply("a", pad_in("p", &a, 0.0, None, (None, Some(T0 + 1_000))));
    h.term = 3;
    h.lease("b", 600_000);
    h.now_ms = T0 + 2_000;
    let (reply, events) = h.apply(Command::ExpireReservations { term: 2 });
    assert_eq!(reply, Reply::ReservationsEnded { count: 0 });
    assert!(events.is_empty());
    assert_eq!(h.occupants(ResourceKind::Waypoint, "p").0, vec!["a"]);
}

#[test]
fn a_same_lease_retry_keeps_its_window_and_another_window_is_refused() {
    let mut h = Harness::new();
    let a = h.lease("a", 600_000);
    let window = (Some(T0 + 1_000), Some(T0 + 2_000));
    let token = Harness::token(&h.reply("a", pad_in("p", &a, 0.0, None, window)));
    assert_eq!(
        h.reply("a", pad_in("p", &a, 0.0, None, window)),
        Reply::Granted { token }
    );
    let reply = h.reply(
        "a",
        pad_in("p", &a, 0.0, None, (Some(T0 + 1_000), Some(T0 + 3_000))),
    );
    assert!(
        matches!(&reply, Reply::Refused { code: ErrorCode::BadRequest, message } if message.contains("another window")),
        "{reply:?}"
    );
}

#[test]
fn windows_survive_a_snapshot_and_restore() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    h.reply(
        "a",
        pad_in("p-a", &a, 0.0, None, (Some(T0 + 1_000), Some(T0 + 9_000))),
    );
    h.reply(
        "b",
        pad_in("p-b", &b, 0.0, None, (Some(T0 + 5_000), Some(T0 + 15_000))),
    );
    let bytes = h.sm.snapshot();
    let restored = super::StateMachine::restore(&bytes).expect("restores");
    restored.check_invariants().expect("invariants hold");
    assert_eq!(restored.snapshot(), bytes);
    assert_eq!(restored.reservation_end_next_ms(), Some(T0 + 9_000));
}
