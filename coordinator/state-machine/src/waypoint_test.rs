//! Waypoints: conflicts by name and by cylinder, FIFO among conflicting requests only.

use hivekeeper_protocol::{Area, ErrorCode, ResourceKind};

use super::test_support::*;
use super::{M_PER_DEG, Reply, areas_conflict, distance_m};

fn area(north_m: f64, radius_m: f64, band: (Option<f64>, Option<f64>)) -> Area {
    Area {
        lat: 51.5 + north_m / super::M_PER_DEG,
        lon: -0.1,
        radius_m,
        alt_min_m: band.0,
        alt_max_m: band.1,
    }
}

#[test]
fn pads_10_m_apart_with_3_m_radii_do_not_conflict_4_m_apart_do() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    assert!(matches!(
        h.reply("a", pad("pad-1", &a, 0.0, 3.0, None)),
        Reply::Granted { .. }
    ));
    assert!(
        matches!(
            h.reply("b", pad("pad-2", &b, 10.0, 3.0, Some(0))),
            Reply::Granted { .. }
        ),
        "10 m apart, reach 6 m: independent"
    );
    let reply = h.reply("c", pad("pad-3", &c, 4.0, 3.0, Some(0)));
    assert!(
        matches!(
            reply,
            Reply::Refused {
                code: ErrorCode::WouldBlock,
                ..
            }
        ),
        "4 m apart, reach 6 m: conflict, got {reply:?}"
    );
}

#[test]
fn the_conflict_predicate_follows_distance_and_altitude() {
    let near = distance_m(51.5, -0.1, 51.5 + 10.0 / super::M_PER_DEG, -0.1);
    assert!((near - 10.0).abs() < 1e-6, "{near}");
    let unbounded = (None, None);
    assert!(
        !areas_conflict(&area(0.0, 3.0, unbounded), &area(6.01, 3.0, unbounded)),
        "apart"
    );
    assert!(areas_conflict(
        &area(0.0, 3.0, unbounded),
        &area(5.9, 3.0, unbounded)
    ));
    let low = (Some(0.0), Some(30.0));
    let high = (Some(40.0), Some(60.0));
    let touching = (Some(30.0), Some(50.0));
    assert!(
        !areas_conflict(&area(0.0, 3.0, low), &area(0.0, 3.0, high)),
        "stacked bands"
    );
    assert!(
        areas_conflict(&area(0.0, 3.0, low), &area(0.0, 3.0, touching)),
        "closed bands"
    );
    assert!(areas_conflict(
        &area(0.0, 3.0, low),
        &area(0.0, 3.0, unbounded)
    ));
}

#[test]
fn a_name_conflicts_with_itself_whatever_the_geometry() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    h.reply("a", pad("pad-1", &a, 0.0, 1.0, None));
    let far = pad("pad-1", &b, 1_000.0, 1.0, Some(0));
    assert!(matches!(
        h.reply("b", far),
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
    let bare = Op::WaypointReserve {
        name: "pad-1".into(),
        lease: b.clone(),
        lat: None,
        lon: None,
        alt_min_m: None,
        alt_max_m: None,
        radius_m: None,
        wait_ms: Some(0),
        start_ms: None,
        end_ms: None,
        priority: Default::default(),
    };
    assert!(matches!(
        h.reply("b", bare),
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
}

#[test]
fn fifo_among_conflicting_requests_independent_ones_pass() {
    let mut h = Harness::new();
    let leases: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|x| h.lease(x, 5_000))
        .collect();
    h.reply("a", pad("p0", &leases[0], 0.0, 3.0, None));
    // b waits on a (2 m away); c conflicts only with b's request (4 m beyond b), and must queue
    // behind it rather than overtake; d is far from everything and goes straight through.
    assert_eq!(
        h.reply("b", pad("p1", &leases[1], 2.0, 3.0, None)),
        Reply::Queued
    );
    assert_eq!(
        h.reply("c", pad("p2", &leases[2], 6.5, 3.0, None)),
        Reply::Queued
    );
    assert!(matches!(
        h.reply("d", pad("p3", &leases[3], 100.0, 3.0, None)),
        Reply::Granted { .. }
    ));
    let (_, events) = h.send("a", waypoint_release("p0", &leases[0]));
    let granted: Vec<String> = responses(&events)
        .into_iter()
        .map(|(agent, ..)| agent)
        .collect();
    assert_eq!(granted, vec!["b"], "c still conflicts with b, now holding");
    let (_, events) = h.send("b", waypoint_release("p1", &leases[1]));
    let granted: Vec<String> = responses(&events)
        .into_iter()
        .map(|(agent, ..)| agent)
        .collect();
    assert_eq!(granted, vec!["c"]);
}

#[test]
fn a_lease_does_not_conflict_with_its_own_reservations() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    h.reply("a", pad("pad", &a, 0.0, 3.0, None));
    let next = h.reply("a", pad("hover", &a, 2.0, 3.0, Some(0)));
    assert!(matches!(next, Reply::Granted { .. }), "{next:?}");
    let again = h.reply("a", pad("pad", &a, 0.0, 3.0, Some(0)));
    assert_eq!(
        again,
        Reply::Granted { token: 2 << 16 },
        "the existing reservation"
    );
}

#[test]
fn large_and_small_radii_find_each_other_across_grid_levels() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    // A 5 km exclusion zone, then a 1 m pad 4.9 km away (inside) and one 5.1 km away (outside).
    h.reply("a", pad("zone", &a, 0.0, 5_000.0, None));
    let inside = h.reply("b", pad("in", &b, 4_900.0, 1.0, Some(0)));
    assert!(matches!(
        inside,
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
    let outside = h.reply("c", pad("out", &c, 5_100.0, 1.0, Some(0)));
    assert!(matches!(outside, Reply::Granted { .. }));
}

#[test]
fn conflicts_are_found_across_the_antimeridian_and_near_a_pole() {
    let mut h = Harness::new();
    let (a, b, c, d) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
        h.lease("d", 5_000),
    );
    let at = |name: &str, lease: &str, lat: f64, lon: f64| Op::WaypointReserve {
        name: name.into(),
        lease: lease.into(),
        lat: Some(lat),
        lon: Some(lon),
        alt_min_m: None,
        alt_max_m: None,
        radius_m: Some(50.0),
        wait_ms: Some(0),
        start_ms: None,
        end_ms: None,
        priority: Default::default(),
    };
    h.reply("a", at("east", &a, 0.0, 179.9995));
    // 0.001 degrees of longitude at the equator is about 111 m: the 100 m reach straddles ±180.
    let west = h.reply("b", at("west", &b, 0.0, -179.9999));
    assert!(
        matches!(
            west,
            Reply::Refused {
                code: ErrorCode::WouldBlock,
                ..
            }
        ),
        "{west:?}"
    );
    h.reply("c", at("pole", &c, 89.9999, 0.0));
    let other_side = h.reply("d", at("pole-2", &d, 89.9999, 180.0));
    assert!(matches!(
        other_side,
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
}

#[test]
fn inspect_shows_holder_and_waiters_of_a_name_in_order() {
    let mut h = Harness::new();
    let leases: Vec<String> = ["a", "b", "c"].iter().map(|x| h.lease(x, 5_000)).collect();
    h.reply("a", pad("p", &leases[0], 0.0, 3.0, None));
    h.reply("b", pad("p", &leases[1], 0.0, 3.0, None));
    h.reply("c", pad("p", &leases[2], 0.0, 3.0, None));
    let (holders, waiters) = h.occupants(ResourceKind::Waypoint, "p");
    assert_eq!(holders, vec!["a"]);
    assert_eq!(waiters, vec!["b", "c"]);
}

#[test]
fn inspect_shows_the_cylinder_of_the_holder_and_of_each_waiter() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.reply("a", pad("p", &a, 0.0, 3.0, None));
    h.reply("b", pad("p", &b, 1.0, 2.0, None));
    let reply = h.sm.query(
        "inspector",
        &Op::Inspect {
            kind: ResourceKind::Waypoint,
            name: "p".into(),
        },
    );
    let Reply::Inspect {
        holders, waiters, ..
    } = reply
    else {
        panic!("inspect failed: {reply:?}");
    };
    let radius = |area: Option<Area>| area.map(|area| area.radius_m);
    assert_eq!(radius(holders[0].area), Some(3.0));
    assert_eq!(radius(waiters[0].area), Some(2.0));
    let lat = waiters[0].area.expect("geometry").lat;
    assert!((lat - (51.5 + 1.0 / M_PER_DEG)).abs() < 1e-12, "{lat}");
}

/// Found by `tests/fuzz.rs` (`fuzz_restore_a_snapshot_with_one_value_changed`): a snapshot
/// whose held cylinder has a longitude past 180 made `restore` panic in the spatial index's
/// search (a column range that starts after it ends). It is refused now, naming the waypoint.
#[test]
fn a_snapshot_with_a_cylinder_out_of_range_is_refused_not_a_panic() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.reply("a", pad("pad-1", &a, 0.0, 3.0, None));
    h.reply("b", pad("pad-2", &b, 100.0, 3.0, None));
    let mut snapshot: serde_json::Value =
        serde_json::from_slice(&h.sm.snapshot()).expect("a snapshot is JSON");
    let held = &mut snapshot["state"]["waypoints"]["held"]["pad-1"]["area"];
    assert!(held["lon"].is_number(), "the snapshot's layout: {snapshot}");
    held["lon"] = serde_json::json!(181.0);
    let bytes = serde_json::to_vec(&snapshot).expect("JSON encodes");
    match super::StateMachine::restore(&bytes) {
        Err(super::Error::SnapshotInvariant(broken)) => assert_eq!(
            broken.to_string(),
            "waypoint \"pad-1\" has a cylinder out of range: `lon` is 181, it must be in \
             [-180, 180]"
        ),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a cylinder at longitude 181 was restored"),
    }
}
