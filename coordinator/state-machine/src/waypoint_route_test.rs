//! Routes: all or nothing in one entry with one token, FIFO as a unit, release of every
//! volume, amend at once or `would_block`, `inspect` of the volumes, bad volumes.

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Command, Event, Reply};

/// The harness's clock at the start (`Harness::new`).
const T0: u64 = 1_000_000;

fn refused(code: ErrorCode, message: &str) -> Reply {
    Reply::Refused {
        code,
        message: message.to_string(),
    }
}

/// Two legs 100 m apart, each for a minute, the second after the first.
fn two_legs(at_north_m: f64) -> Vec<hivekeeper_protocol::Volume> {
    vec![
        leg(at_north_m, T0, T0 + 60_000),
        leg(at_north_m + 100.0, T0 + 60_000, T0 + 120_000),
    ]
}

#[test]
fn a_route_is_granted_all_or_nothing_in_one_entry_with_one_token() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 600_000);
    // c holds a pad on b's second leg, during it.
    h.reply(
        "c",
        pad_in("pad", &c, 301.0, None, (None, Some(T0 + 90_000))),
    );
    let (reply, events) = h.send("a", route_reserve("route-a", &a, two_legs(0.0), None));
    let token = Harness::token(&reply);
    let grants = events
        .iter()
        .filter(|event| matches!(event, Event::Granted { .. }))
        .count();
    assert_eq!(grants, 1, "one grant, one token for the whole route");
    // b's route crosses c's pad on its second leg: nothing of it is granted.
    let reply = h.reply("b", route_reserve("route-b", &b, two_legs(200.0), Some(0)));
    assert_eq!(
        reply,
        refused(
            ErrorCode::WouldBlock,
            "route \"route-b\" conflicts with a held or earlier waiting reservation"
        )
    );
    assert_eq!(
        h.occupants(ResourceKind::Waypoint, "route-b"),
        (vec![], vec![])
    );
    // fence.check of the route's name: its one token.
    assert_eq!(
        h.fence_waypoint("route-a", token),
        Reply::Fence {
            current: token,
            valid: true
        }
    );
}

#[test]
fn crossing_routes_wait_as_a_unit_and_the_waiter_gets_a_higher_token_on_release() {
    let mut h = Harness::new();
    let [a, b, d] = h.leases(["a", "b", "d"], 600_000);
    // a flies north over 0 m then 100 m; b flies south over 100 m then 0 m, in the same
    // minutes: they cross (legs taken in opposite orders, which would deadlock one by one).
    let route_a = vec![leg(0.0, T0, T0 + 60_000), leg(100.0, T0, T0 + 60_000)];
    let route_b = vec![leg(100.0, T0, T0 + 60_000), leg(0.0, T0, T0 + 60_000)];
    let token_a = Harness::token(&h.reply("a", route_reserve("north", &a, route_a, None)));
    let (reply, _) = h.send_as("b", "b-route", route_reserve("south", &b, route_b, None));
    assert_eq!(reply, Reply::Queued);
    // d's pad conflicts with b's waiting route only: it queues behind it (FIFO as a unit).
    let (reply, _) = h.send_as(
        "d",
        "d-pad",
        pad_in("pad", &d, 1.0 + 100.0, None, (None, Some(T0 + 30_000))),
    );
    assert_eq!(
        reply,
        Reply::Queued,
        "behind b's route, which waits for the same airspace"
    );
    let (_, waiters) = h.occupants(ResourceKind::Waypoint, "south");
    assert_eq!(waiters, vec!["b"]);
    let (_, events) = h.send("a", waypoint_release("north", &a));
    let answers = responses(&events);
    assert_eq!(
        answers.len(),
        1,
        "b's route, granted; d still waits behind it: {answers:?}"
    );
    assert_eq!(answers[0].0, "b");
    assert_eq!(answers[0].1, "b-route");
    let token_b = Harness::token(&answers[0].2);
    assert!(token_b > token_a, "{token_b} > {token_a}");
    assert_eq!(h.occupants(ResourceKind::Waypoint, "pad").1, vec!["d"]);
    // route.release frees every volume: d's pad is granted.
    let (_, events) = h.send(
        "b",
        Op::RouteRelease {
            name: "south".into(),
            lease: b.clone(),
        },
    );
    let answers = responses(&events);
    assert_eq!(answers.len(), 1);
    assert_eq!(
        (answers[0].0.as_str(), answers[0].1.as_str()),
        ("d", "d-pad")
    );
    assert!(Harness::token(&answers[0].2) > token_b);
}

#[test]
fn amend_keeps_the_token_when_granted_at_once_and_else_keeps_the_old_route() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    let token = Harness::token(&h.reply("a", route_reserve("r", &a, two_legs(0.0), None)));
    // b holds a pad at 300 m from T0 + 120 s.
    h.reply(
        "b",
        pad_in(
            "pad",
            &b,
            300.0,
            None,
            (Some(T0 + 120_000), Some(T0 + 180_000)),
        ),
    );
    // Extended by a third leg clear of b's pad in time: granted, same token.
    let mut longer = two_legs(0.0);
    longer.push(leg(300.0, T0 + 60_000, T0 + 120_000));
    assert_eq!(
        h.reply("a", route_amend("r", &a, longer.clone())),
        Reply::Granted { token }
    );
    // Delayed into b's slot: would_block, and the route stays as it was.
    let mut delayed = two_legs(0.0);
    delayed.push(leg(300.0, T0 + 60_000, T0 + 150_000));
    assert_eq!(
        h.reply("a", route_amend("r", &a, delayed)),
        refused(
            ErrorCode::WouldBlock,
            "route \"r\": the new volumes conflict with a held or earlier waiting reservation; \
             the old route is kept"
        )
    );
    let op = Op::Inspect {
        kind: ResourceKind::Waypoint,
        name: "r".into(),
    };
    match h.sm.query("a", &op) {
        Reply::Inspect { holders, .. } => {
            assert_eq!(holders.len(), 1);
            assert_eq!(holders[0].token, token);
            assert_eq!(
                holders[0].volumes, longer,
                "inspect shows the route's volumes"
            );
            assert_eq!(holders[0].area, None);
        }
        other => panic!("{other:?}"),
    }
    // Not b's to amend.
    assert_eq!(
        h.reply("b", route_amend("r", &b, two_legs(0.0))),
        refused(
            ErrorCode::NotHolder,
            &format!("lease {b} does not hold route \"r\"")
        )
    );
}

#[test]
fn amend_grants_what_the_old_volumes_blocked() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    h.reply("a", route_reserve("r", &a, two_legs(0.0), None));
    let (reply, _) = h.send_as("b", "b-pad", pad("pad", &b, 100.0, 3.0, None));
    assert_eq!(reply, Reply::Queued);
    // a drops its second leg: b's pad is granted in the same entry.
    let (reply, events) = h.send("a", route_amend("r", &a, vec![leg(0.0, T0, T0 + 60_000)]));
    assert!(matches!(reply, Reply::Granted { .. }));
    let answers = responses(&events);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1, "b-pad");
}

#[test]
fn amend_frees_flown_legs_and_shrinks_kept_ones_while_others_wait_but_extends_only_behind_them() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    let token = Harness::token(&h.reply("a", route_reserve("r", &a, two_legs(0.0), None)));
    // b waits for a pad on a's second leg, in its window.
    let window = (Some(T0 + 60_000), Some(T0 + 120_000));
    let (reply, _) = h.send_as("b", "b-pad", pad_in("pad", &b, 100.0, None, window));
    assert_eq!(reply, Reply::Queued);
    let second = two_legs(0.0)[1];
    // a has flown its first leg and keeps its second, narrower and shorter: every new volume
    // is inside an old one, so b (which waits for the route anyway) is not overtaken.
    let mut inside = second;
    inside.radius_m = 2.0;
    inside.alt_max_m = 100.0;
    inside.end_ms = T0 + 110_000;
    let (reply, events) = h.send("a", route_amend("r", &a, vec![inside]));
    assert_eq!(reply, Reply::Granted { token });
    assert!(responses(&events).is_empty(), "b still waits: {events:?}");
    // Stretching that leg past its old end is new airspace-time, which b asked for first.
    let mut later = inside;
    later.end_ms = T0 + 130_000;
    assert_eq!(
        h.reply("a", route_amend("r", &a, vec![later])),
        refused(
            ErrorCode::WouldBlock,
            "route \"r\": the new volumes conflict with a held or earlier waiting reservation; \
             the old route is kept"
        )
    );
    // So is moving the leg 1.5 m, its edge past the old cylinder's.
    let mut moved = inside;
    moved.lat = leg(101.5, 0, 1).lat;
    let reply = h.reply("a", route_amend("r", &a, vec![moved]));
    assert!(
        matches!(
            reply,
            Reply::Refused {
                code: ErrorCode::WouldBlock,
                ..
            }
        ),
        "{reply:?}"
    );
    // Dropping the leg grants b in the same entry.
    let (reply, events) = h.send("a", route_amend("r", &a, vec![leg(0.0, T0, T0 + 60_000)]));
    assert_eq!(reply, Reply::Granted { token });
    let answers = responses(&events);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1, "b-pad");
}

#[test]
fn a_route_ends_by_itself_at_its_last_volume_end() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    h.reply("a", route_reserve("r", &a, two_legs(0.0), None));
    assert_eq!(h.sm.reservation_end_next_ms(), Some(T0 + 120_000));
    let (reply, _) = h.send_as("b", "b-pad", pad("pad", &b, 0.0, 3.0, None));
    assert_eq!(
        reply,
        Reply::Queued,
        "the first leg's volume is held until the route ends"
    );
    h.now_ms = T0 + 120_000;
    let term = h.term;
    let (reply, events) = h.apply(Command::ExpireReservations { term });
    assert_eq!(reply, Reply::ReservationsEnded { count: 1 });
    assert_eq!(responses(&events)[0].1, "b-pad");
}

#[test]
fn bad_volumes_are_refused_naming_the_volume() {
    let mut h = Harness::new();
    let a = h.lease("a", 600_000);
    assert_eq!(
        h.reply("a", route_reserve("r", &a, vec![], None)),
        refused(
            ErrorCode::BadRequest,
            "route.reserve: `volumes` has 0 volumes, a route has 1 to 64"
        )
    );
    assert_eq!(
        h.reply(
            "a",
            route_reserve("r", &a, vec![leg(0.0, T0, T0 + 1); 65], None)
        ),
        refused(
            ErrorCode::BadRequest,
            "route.reserve: `volumes` has 65 volumes, a route has 1 to 64"
        )
    );
    let past = vec![leg(0.0, T0, T0 + 1_000), leg(10.0, T0 - 2_000, T0 - 1_000)];
    assert_eq!(
        h.reply("a", route_reserve("r", &a, past, None)),
        refused(
            ErrorCode::BadRequest,
            "route.reserve: volume 1: the window is in the past: `end_ms` (999000) is not after \
             the entry's time (1000000)"
        )
    );
    let mut wide = leg(0.0, T0, T0 + 1_000);
    wide.radius_m = 10_001.0;
    let reply = h.reply("a", route_reserve("r", &a, vec![wide], None));
    assert!(
        matches!(&reply, Reply::Refused { code: ErrorCode::BadRequest, message }
            if message.starts_with("route.reserve: volume 0: `radius_m`")),
        "{reply:?}"
    );
    // A waypoint is not a route to amend.
    h.reply("a", pad("wp", &a, 500.0, 3.0, None));
    assert_eq!(
        h.reply("a", route_amend("wp", &a, two_legs(0.0))),
        refused(
            ErrorCode::BadRequest,
            "waypoint \"wp\" is not a route; release it and reserve a route instead"
        )
    );
}
