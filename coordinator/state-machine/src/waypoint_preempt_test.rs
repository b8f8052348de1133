//! Priority and preemption (`waypoint/preempt.rs`): who preempts whom, one event per
//! preempted holder, release before the deadline, the deadline reached, fencing of the late
//! holder, equal priorities FIFO, queue order and aging, a preemptor that goes away, and
//! replicas agreeing byte for byte.

use hivekeeper_protocol::{ErrorCode, HolderInfo, Priority, ResourceKind, Volume};

use super::lease::LeaseId;
use super::test_support::*;
use super::{Command, Event, PREEMPT_CHAIN_MAX, ReleaseReason, Reply, StateMachine};
use crate::ResourceKey;

/// The harness's clock at the start (`Harness::new`).
const T0: u64 = 1_000_000;
/// The default `reservation_vacate_ms`.
const VACATE_MS: u64 = 5_000;

fn key(name: &str) -> ResourceKey {
    ResourceKey::new(ResourceKind::Waypoint, &name.into())
}

fn lease_id(lease: &str) -> LeaseId {
    LeaseId::parse(lease).expect("a wire lease id")
}

fn level(level: u8) -> Priority {
    Priority::new(level).expect("0 to 3")
}

/// A 3 m pad `north_m` metres north of the origin, at priority `p`.
fn pad_at(name: &str, lease: &str, north_m: f64, p: u8, wait_ms: Option<u64>) -> Op {
    at_priority(pad(name, lease, north_m, 3.0, wait_ms), p)
}

/// The preempted event `h`'s machine should emit for `holder`'s reservation `name`.
fn preempted(name: &str, holder: &str, lease: &str, token: u64, at: (u64, u8)) -> Event {
    Event::Preempted {
        key: key(name),
        agent: holder.into(),
        lease: lease_id(lease),
        token,
        vacate_by_ms: at.0,
        priority: level(at.1),
        route: false,
    }
}

/// The withdrawn event `holder`'s reservation `name` gets when its deadline is dropped.
fn withdrawn(name: &str, holder: &str, lease: &str, token: u64) -> Event {
    Event::PreemptionWithdrawn {
        key: key(name),
        agent: holder.into(),
        lease: lease_id(lease),
        token,
        route: false,
    }
}

fn queued(name: &str, agent: &str, request_id: &str) -> Event {
    Event::Queued {
        key: key(name),
        agent: agent.into(),
        request_id: request_id.into(),
    }
}

/// The one holder of `name`, as `inspect` shows it.
fn holder(h: &Harness, name: &str) -> HolderInfo {
    let op = Op::Inspect {
        kind: ResourceKind::Waypoint,
        name: name.into(),
    };
    match h.sm.query("inspector", &op) {
        Reply::Inspect { mut holders, .. } if holders.len() == 1 => holders.remove(0),
        other => panic!("one holder expected: {other:?}"),
    }
}

fn expire_reservations(h: &mut Harness) -> (Reply, Vec<Event>) {
    let term = h.term;
    h.apply(Command::ExpireReservations { term })
}

#[test]
fn a_request_in_the_way_only_of_lower_priorities_preempts_each_holder_once() {
    let mut h = Harness::new();
    let [a, b, c, e] = h.leases(["a", "b", "c", "e"], 600_000);
    // a (routine) and b (priority 1) hold pads 7 m apart: they do not conflict.
    let token_a = Harness::token(&h.reply("a", pad_at("p-a", &a, 0.0, 0, None)));
    let token_b = Harness::token(&h.reply("b", pad_at("p-b", &b, 7.0, 1, None)));
    // c (priority 2) between them conflicts with both, both lower: it preempts both, in name
    // order, and waits for them rather than queueing behind them.
    let (reply, events) = h.send_as("c", "c1", pad_at("p-c", &c, 3.5, 2, None));
    assert_eq!(reply, Reply::Queued);
    let vacate_by_ms = T0 + VACATE_MS;
    assert_eq!(
        events,
        vec![
            queued("p-c", "c", "c1"),
            preempted("p-a", "a", &a, token_a, (vacate_by_ms, 2)),
            preempted("p-b", "b", &b, token_b, (vacate_by_ms, 2)),
        ]
    );
    let shown = holder(&h, "p-b");
    assert_eq!(
        (shown.priority, shown.vacate_by_ms),
        (Some(level(1)), Some(vacate_by_ms))
    );
    assert_eq!(h.sm.reservation_end_next_ms(), Some(vacate_by_ms));
    // An emergency 7 m south of c preempts a too (it is not in c's way): a already has its
    // deadline, so it is told nothing more and the deadline stays.
    h.now_ms += 1_000;
    let (reply, events) = h.send_as("e", "e1", pad_at("p-e", &e, -3.5, 3, None));
    assert_eq!(reply, Reply::Queued);
    assert_eq!(events, vec![queued("p-e", "e", "e1")]);
    assert_eq!(holder(&h, "p-a").vacate_by_ms, Some(vacate_by_ms));
    // A preemptor that cannot wait is answered at once and preempts nothing.
    let reply = h.reply("e", pad_at("p-e2", &e, -3.5, 3, Some(0)));
    assert!(matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
}

#[test]
fn a_release_before_the_deadline_grants_the_preemptor_at_once_with_a_higher_token() {
    let mut h = Harness::new();
    let [a, c] = h.leases(["a", "c"], 600_000);
    let token_a = Harness::token(&h.reply("a", pad_at("p-a", &a, 0.0, 0, None)));
    h.send_as("c", "c1", pad_at("p-c", &c, 1.0, 3, None));
    h.now_ms += 2_000;
    let (reply, events) = h.send("a", waypoint_release("p-a", &a));
    assert_eq!(reply, Reply::Done);
    let answers = responses(&events);
    assert_eq!(answers.len(), 1, "{events:?}");
    assert_eq!((answers[0].0.as_str(), answers[0].1.as_str()), ("c", "c1"));
    let token_c = Harness::token(&answers[0].2);
    assert!(token_c > token_a, "{token_c} > {token_a}");
    assert!(matches!(
        events[0],
        Event::Released {
            reason: ReleaseReason::Released,
            ..
        }
    ));
    // Nothing is left to end: the deadline went with the reservation.
    assert_eq!(h.sm.reservation_end_next_ms(), None);
    assert_eq!(
        h.occupants(ResourceKind::Waypoint, "p-c"),
        (vec!["c".into()], vec![])
    );
}

/// A routine route of two legs, and an emergency route whose one leg crosses the first.
fn crossing_routes() -> (Vec<Volume>, Vec<Volume>) {
    let held = vec![
        leg(0.0, T0, T0 + 60_000),
        leg(100.0, T0 + 60_000, T0 + 120_000),
    ];
    let emergency = vec![leg(101.0, T0 + 30_000, T0 + 90_000)];
    (held, emergency)
}

#[test]
fn at_the_deadline_the_whole_route_ends_and_the_preemptor_is_granted_in_one_entry() {
    let mut h = Harness::new();
    let [a, c] = h.leases(["a", "c"], 600_000);
    let (held, emergency) = crossing_routes();
    let token_a = Harness::token(&h.reply("a", route_reserve("route-a", &a, held, None)));
    let (reply, events) = h.send_as(
        "c",
        "c1",
        at_priority(route_reserve("route-c", &c, emergency, None), 3),
    );
    assert_eq!(reply, Reply::Queued);
    let vacate_by_ms = T0 + VACATE_MS;
    assert_eq!(
        events[1],
        Event::Preempted {
            key: key("route-a"),
            agent: "a".into(),
            lease: lease_id(&a),
            token: token_a,
            vacate_by_ms,
            priority: Priority::EMERGENCY,
            route: true,
        }
    );
    // The holder does not release. Before the deadline nothing ends.
    h.now_ms = vacate_by_ms - 1;
    assert!(!h.sm.reservation_expiry_due(h.now_ms));
    assert_eq!(
        expire_reservations(&mut h),
        (Reply::ReservationsEnded { count: 0 }, vec![])
    );
    // At the deadline: the whole route ends (its first leg too, which c never needed), and c
    // is granted in the same entry.
    h.now_ms = vacate_by_ms;
    assert!(h.sm.reservation_expiry_due(h.now_ms));
    let (reply, events) = expire_reservations(&mut h);
    assert_eq!(reply, Reply::ReservationsEnded { count: 1 });
    assert_eq!(
        events[0],
        Event::Released {
            key: key("route-a"),
            agent: "a".into(),
            lease: lease_id(&a),
            token: token_a,
            held_ms: VACATE_MS,
            reason: ReleaseReason::Preempted,
        }
    );
    let answers = responses(&events);
    assert_eq!(answers.len(), 1, "{events:?}");
    let token_c = Harness::token(&answers[0].2);
    assert!(token_c > token_a, "{token_c} > {token_a}");
    assert_eq!(
        h.occupants(ResourceKind::Waypoint, "route-a"),
        (vec![], vec![])
    );
    // The late holder is fenced: its token is no longer valid, and it holds nothing to
    // release or amend.
    assert_eq!(
        h.fence_waypoint("route-a", token_a),
        Reply::Fence {
            current: 0,
            valid: false
        }
    );
    assert_eq!(
        h.fence_waypoint("route-c", token_c),
        Reply::Fence {
            current: token_c,
            valid: true
        }
    );
    let reply = h.reply("a", route_release("route-a", &a));
    assert_eq!(
        reply,
        Reply::Refused {
            code: ErrorCode::NotHolder,
            message: format!("lease {a} does not hold waypoint \"route-a\""),
        }
    );
}

#[test]
fn equal_priority_waits_fifo_and_does_not_preempt() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 600_000);
    h.reply("a", pad_at("p-a", &a, 0.0, 1, None));
    let (reply, events) = h.send_as("b", "b1", pad_at("p-b", &b, 1.0, 1, None));
    assert_eq!(reply, Reply::Queued);
    assert_eq!(events, vec![queued("p-b", "b", "b1")]);
    let (_, events) = h.send_as("c", "c1", pad_at("p-c", &c, 2.0, 1, None));
    assert_eq!(events, vec![queued("p-c", "c", "c1")]);
    assert_eq!(holder(&h, "p-a").vacate_by_ms, None);
    assert_eq!(h.sm.reservation_end_next_ms(), None);
    // Released: b, the first to ask, is granted; c waits for b.
    let (_, events) = h.send("a", waypoint_release("p-a", &a));
    let answers: Vec<String> = responses(&events).into_iter().map(|a| a.0).collect();
    assert_eq!(answers, vec!["b".to_string()]);
}

#[test]
fn a_request_behind_an_equal_holder_preempts_the_lower_one_once_the_equal_one_releases() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 600_000);
    let token_a = Harness::token(&h.reply("a", pad_at("p-a", &a, 0.0, 0, None)));
    h.reply("b", pad_at("p-b", &b, 7.0, 2, None));
    // c (2) is in the way of a (0) and b (2): it waits as usual, preempting nobody.
    let (_, events) = h.send_as("c", "c1", pad_at("p-c", &c, 3.5, 2, None));
    assert_eq!(events, vec![queued("p-c", "c", "c1")]);
    // b releases: now only a, lower, is in c's way, so c preempts it from this entry's time.
    h.now_ms += 3_000;
    let (_, events) = h.send("b", waypoint_release("p-b", &b));
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[1],
        preempted("p-a", "a", &a, token_a, (T0 + 3_000 + VACATE_MS, 2))
    );
}

#[test]
fn among_waiters_a_higher_priority_goes_first_and_equal_priorities_stay_fifo() {
    let mut h = Harness::new();
    let [a, b, c, d] = h.leases(["a", "b", "c", "d"], 600_000);
    // An emergency holds the pad: nobody can preempt it.
    h.reply("a", pad_at("pad", &a, 0.0, 3, None));
    for (agent, lease, p) in [("b", &b, 0), ("c", &c, 1), ("d", &d, 1)] {
        assert_eq!(
            h.reply(agent, pad_at("pad", lease, 0.0, p, None)),
            Reply::Queued
        );
    }
    let order = |h: &Harness| h.occupants(ResourceKind::Waypoint, "pad").1;
    assert_eq!(order(&h), vec!["c", "d", "b"]);
    let mut granted = Vec::new();
    for (agent, lease) in [("a", &a), ("c", &c), ("d", &d)] {
        let (_, events) = h.send(agent, waypoint_release("pad", lease));
        granted.extend(responses(&events).into_iter().map(|answer| answer.0));
    }
    assert_eq!(granted, vec!["c", "d", "b"]);
}

#[test]
fn aging_keeps_a_long_waiter_ahead_of_later_higher_priorities_which_still_preempt_through_it() {
    // One minute per level (the default `reservation_aging_ms`).
    let mut h = Harness::new();
    let [a, b, c, d] = h.leases(["a", "b", "c", "d"], 600_000);
    // a (priority 1) holds; b, routine, waits for it from T0.
    let token_a = Harness::token(&h.reply("a", pad_at("pad", &a, 0.0, 1, None)));
    assert_eq!(h.reply("b", pad_at("pad", &b, 0.0, 0, None)), Reply::Queued);
    // 1 ms short of two minutes later a priority 2 still goes ahead of b; 1 ms past them it
    // queues behind b, whose effective priority has risen to 2.
    let c_at = T0 + 119_999;
    h.now_ms = c_at;
    assert_eq!(h.reply("c", pad_at("pad", &c, 0.0, 2, None)), Reply::Queued);
    h.now_ms = T0 + 120_001;
    assert_eq!(h.reply("d", pad_at("pad", &d, 0.0, 2, None)), Reply::Queued);
    assert_eq!(
        h.occupants(ResourceKind::Waypoint, "pad").1,
        vec!["c", "b", "d"]
    );
    // c preempted a (priority 2 over 1) when it came.
    let deadline_a = c_at + VACATE_MS;
    assert_eq!(holder(&h, "pad").vacate_by_ms, Some(deadline_a));
    // c gives up. d waits behind b, which aging put first, but b is routine: it lends d's
    // priority to the holder in its way (priority inheritance), so a must still vacate, by
    // the same deadline, and is not told again.
    let (_, events) = h.send("c", Op::LeaseRevoke { lease: c.clone() });
    assert!(
        !events.iter().any(|e| matches!(
            e,
            Event::Preempted { .. } | Event::PreemptionWithdrawn { .. }
        )),
        "{events:?}"
    );
    assert_eq!(holder(&h, "pad").vacate_by_ms, Some(deadline_a));
    // At the deadline a ends; b, ahead, is granted its turn, and in the same entry d, in the
    // way only of b's routine reservation now, preempts it.
    h.now_ms = deadline_a;
    let (reply, events) = expire_reservations(&mut h);
    assert_eq!(reply, Reply::ReservationsEnded { count: 1 });
    let token_b = match &responses(&events)[..] {
        [(agent, _, Reply::Granted { token })] if agent == "b" => *token,
        other => panic!("b granted expected: {other:?}"),
    };
    assert!(token_b > token_a);
    assert_eq!(
        events.last(),
        Some(&preempted(
            "pad",
            "b",
            &b,
            token_b,
            (deadline_a + VACATE_MS, 2)
        ))
    );
    // b's deadline: d is granted, with a higher token still.
    h.now_ms = deadline_a + VACATE_MS;
    let (_, events) = expire_reservations(&mut h);
    match &responses(&events)[..] {
        [(agent, _, Reply::Granted { token })] if agent == "d" => assert!(*token > token_b),
        other => panic!("d granted expected: {other:?}"),
    }
}

#[test]
fn an_equal_priority_waiter_ahead_stops_a_preemption_through_the_chain() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 600_000);
    // a (routine) holds; b (priority 2) preempts it; c (priority 2) queues behind b.
    h.reply("a", pad_at("pad", &a, 0.0, 0, None));
    h.reply("b", pad_at("pad", &b, 0.0, 2, None));
    assert_eq!(holder(&h, "pad").vacate_by_ms, Some(T0 + VACATE_MS));
    let (_, events) = h.send_as("c", "c1", pad_at("pad", &c, 0.0, 2, None));
    assert_eq!(events, vec![queued("pad", "c", "c1")]);
    // b gives up: c is next, and preempts a in its own right; the deadline stands.
    let (_, events) = h.send("b", Op::LeaseRevoke { lease: b.clone() });
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::PreemptionWithdrawn { .. })),
        "{events:?}"
    );
    assert_eq!(holder(&h, "pad").vacate_by_ms, Some(T0 + VACATE_MS));
}

#[test]
fn a_preemptor_that_goes_away_drops_the_deadline_and_the_holder_keeps_its_reservation() {
    let mut h = Harness::new();
    let [a, c, d] = h.leases(["a", "c", "d"], 600_000);
    let token_a = Harness::token(&h.reply("a", pad_at("p-a", &a, 0.0, 0, None)));
    // c preempts a but waits at most a second.
    h.send_as("c", "c1", pad_at("p-c", &c, 1.0, 3, Some(1_000)));
    assert_eq!(holder(&h, "p-a").vacate_by_ms, Some(T0 + VACATE_MS));
    h.now_ms = T0 + 1_000;
    let term = h.term;
    let (reply, events) = h.apply(Command::ExpireWaits { term });
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    assert_eq!(responses(&events).len(), 1);
    // a is told it may keep its pad.
    assert_eq!(events.last(), Some(&withdrawn("p-a", "a", &a, token_a)));
    assert_eq!(holder(&h, "p-a").vacate_by_ms, None);
    assert_eq!(h.sm.reservation_end_next_ms(), None);
    // d preempts a afresh (a new event, a new deadline), then d's lease ends: dropped again.
    h.now_ms = T0 + 2_000;
    let (_, events) = h.send_as("d", "d1", pad_at("p-d", &d, 1.0, 2, None));
    assert_eq!(
        events[1],
        preempted("p-a", "a", &a, token_a, (T0 + 2_000 + VACATE_MS, 2))
    );
    let (_, events) = h.send("d", Op::LeaseRevoke { lease: d.clone() });
    assert!(!events.iter().any(|e| matches!(e, Event::Released { .. })));
    assert_eq!(events.last(), Some(&withdrawn("p-a", "a", &a, token_a)));
    assert_eq!(holder(&h, "p-a").vacate_by_ms, None);
    // Past both deadlines a still holds its pad with its token.
    h.now_ms = T0 + 60_000;
    assert_eq!(
        expire_reservations(&mut h),
        (Reply::ReservationsEnded { count: 0 }, vec![])
    );
    assert_eq!(holder(&h, "p-a").token, token_a);
}

#[test]
fn replicas_agree_byte_for_byte_on_priorities_and_deadlines() {
    let mut h = Harness::new();
    let [a, b, c, d] = h.leases(["a", "b", "c", "d"], 600_000);
    let (held, emergency) = crossing_routes();
    h.reply("a", route_reserve("route-a", &a, held, None));
    h.reply("b", pad_at("p-b", &b, 500.0, 2, None));
    h.reply(
        "c",
        at_priority(route_reserve("route-c", &c, emergency, None), 3),
    );
    h.reply("d", pad_at("p-b", &d, 500.0, 1, None));
    let bytes = h.sm.snapshot();
    let mut restored = StateMachine::restore(&bytes).expect("restores");
    restored.check_invariants().expect("invariants hold");
    assert_eq!(restored.snapshot(), bytes);
    assert_eq!(
        restored.reservation_end_next_ms(),
        h.sm.reservation_end_next_ms()
    );
    // Both replicas apply the deadline's entry alike.
    h.now_ms = T0 + VACATE_MS;
    let meta = super::LogMeta {
        index: h.index + 1,
        term: h.term,
        now_ms: h.now_ms,
    };
    let command = Command::ExpireReservations { term: h.term };
    let on_restored = restored
        .apply(meta, command.clone())
        .expect("indexes increase");
    let on_original = h.apply(command);
    assert_eq!(on_restored, on_original);
    assert_eq!(restored.snapshot(), h.sm.snapshot());
}

#[test]
fn a_preemptor_whose_window_ends_with_the_deadline_takes_nothing() {
    let mut h = Harness::new();
    let [a, c] = h.leases(["a", "c"], 600_000);
    let token_a = Harness::token(&h.reply("a", pad_at("p-a", &a, 0.0, 0, None)));
    // c asks for the airspace only until the very instant a's deadline falls.
    let window = (None, Some(T0 + VACATE_MS));
    h.send_as(
        "c",
        "c1",
        at_priority(pad_in("p-c", &c, 1.0, None, window), 3),
    );
    assert_eq!(holder(&h, "p-a").vacate_by_ms, Some(T0 + VACATE_MS));
    // One entry past both: c's wait ends first (its window is over), so nobody needs a's
    // airspace any more and a keeps it.
    h.now_ms = T0 + VACATE_MS;
    let (reply, events) = expire_reservations(&mut h);
    assert_eq!(reply, Reply::ReservationsEnded { count: 1 });
    assert!(
        !events.iter().any(|e| matches!(e, Event::Released { .. })),
        "{events:?}"
    );
    assert_eq!(responses(&events).len(), 1);
    let kept = holder(&h, "p-a");
    assert_eq!((kept.token, kept.vacate_by_ms), (token_a, None));
}

/// Found by the model test: a hold granted at once, of a priority as high as a preemptor's
/// and in its way, ends that preemption in the same entry.
#[test]
fn a_higher_hold_granted_at_once_in_the_preemptors_way_ends_the_preemption() {
    let mut h = Harness::new();
    let [a, c] = h.leases(["a", "c"], 600_000);
    let token_a = Harness::token(&h.reply("a", pad_at("p-a", &a, 0.0, 0, None)));
    // c (1) preempts a's pad.
    h.send_as("c", "c1", pad_at("p-c", &c, 3.0, 1, None));
    assert_eq!(holder(&h, "p-a").vacate_by_ms, Some(T0 + VACATE_MS));
    // a's own lease takes, at priority 2, a pad in c's way but not in a's pad's (6 m north of
    // it, 3 m from c's): granted at once (a lease never conflicts with itself, and c waits
    // behind it), and now c is in the way of a priority above its own.
    let (reply, events) = h.send("a", pad_at("p-a2", &a, 6.0, 2, None));
    assert!(matches!(reply, Reply::Granted { .. }), "{reply:?}");
    assert!(!events.iter().any(|e| matches!(e, Event::Preempted { .. })));
    assert_eq!(events.last(), Some(&withdrawn("p-a", "a", &a, token_a)));
    let kept = holder(&h, "p-a");
    assert_eq!((kept.token, kept.vacate_by_ms), (token_a, None));
    assert_eq!(h.sm.reservation_end_next_ms(), None);
}

/// The chain is followed through at most `PREEMPT_CHAIN_MAX` waiters: with that many routine
/// waiters ahead (aged past the emergency's head start) the emergency still preempts the
/// holder; with one more it waits in the ordinary way.
#[test]
fn a_chain_longer_than_its_bound_waits_in_the_ordinary_way() {
    for (ahead, preempts) in [(PREEMPT_CHAIN_MAX, true), (PREEMPT_CHAIN_MAX + 1, false)] {
        let mut h = Harness::new();
        let holder_lease = h.lease("holder", 3_600_000);
        h.reply("holder", pad_at("pad", &holder_lease, 0.0, 0, None));
        for n in 0..ahead {
            let agent = format!("w{n}");
            let lease = h.lease(&agent, 3_600_000);
            assert_eq!(
                h.reply(&agent, pad_at("pad", &lease, 0.0, 0, None)),
                Reply::Queued
            );
        }
        // Four minutes later the routine waiters are ahead of any new emergency.
        h.now_ms = T0 + 240_000;
        let lease = h.lease("e", 3_600_000);
        assert_eq!(
            h.reply("e", pad_at("pad", &lease, 0.0, 3, None)),
            Reply::Queued
        );
        assert_eq!(
            holder(&h, "pad").vacate_by_ms.is_some(),
            preempts,
            "{ahead} waiters ahead"
        );
    }
}
