//! `airspace.query`: exactly the held reservations that overlap in space and time, with their
//! conflicting volumes; pages; bad input; nothing reserved.

use hivekeeper_protocol::{Area, ConflictInfo, ErrorCode, QueryVolume, ReservationKind, Volume};

use super::test_support::*;
use super::{M_PER_DEG, Reply};

/// The harness's clock at the start (`Harness::new`).
const T0: u64 = 1_000_000;

fn query(volume: Option<QueryVolume>, volumes: Option<Vec<Volume>>) -> Op {
    Op::AirspaceQuery {
        volume,
        volumes,
        after: None,
        limit: None,
    }
}

/// A cylinder `north_m` metres north of the pads' origin, 3 m wide, from the ground to 120 m.
fn cylinder(north_m: f64, window: (Option<u64>, Option<u64>)) -> QueryVolume {
    QueryVolume {
        lat: 51.5 + north_m / M_PER_DEG,
        lon: -0.1,
        radius_m: 3.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: window.0,
        end_ms: window.1,
    }
}

/// The row of a held waypoint as `pad_in` reserves it.
fn pad_row(
    name: &str,
    agent: &str,
    lease: &str,
    north_m: f64,
    window: Option<(u64, Option<u64>)>,
) -> ConflictInfo {
    ConflictInfo {
        name: name.into(),
        kind: ReservationKind::Waypoint,
        agent: agent.into(),
        lease: lease.into(),
        area: Some(Area {
            lat: 51.5 + north_m / M_PER_DEG,
            lon: -0.1,
            radius_m: 3.0,
            alt_min_m: None,
            alt_max_m: None,
        }),
        start_ms: window.map(|window| window.0),
        end_ms: window.and_then(|window| window.1),
        volumes: Vec::new(),
        volume_indexes: Vec::new(),
        priority: None,
    }
}

fn conflicts(reply: Reply) -> (Vec<ConflictInfo>, Option<String>) {
    match reply {
        Reply::Conflicts {
            conflicts,
            next_after,
        } => (conflicts, next_after),
        other => panic!("not a page of conflicts: {other:?}"),
    }
}

fn names(reply: Reply) -> (Vec<String>, Option<String>) {
    let (rows, next_after) = conflicts(reply);
    (rows.into_iter().map(|row| row.name).collect(), next_after)
}

fn bad_request(message: &str) -> Reply {
    Reply::Refused {
        code: ErrorCode::BadRequest,
        message: message.to_string(),
    }
}

#[test]
fn a_query_lists_exactly_the_reservations_that_overlap_in_space_and_time() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 600_000);
    let route = vec![
        leg(0.0, T0, T0 + 60_000),
        leg(100.0, T0 + 60_000, T0 + 120_000),
        leg(200.0, T0 + 120_000, T0 + 180_000),
    ];
    h.reply("a", route_reserve("r-a", &a, route.clone(), Some(0)));
    // b's pad sits on the route's second leg from the minute it ends (touching windows).
    let window_b = (Some(T0 + 120_000), Some(T0 + 200_000));
    Harness::token(&h.reply("b", pad_in("pad-b", &b, 100.0, Some(0), window_b)));
    // c's pad, far away, for all time from now.
    Harness::token(&h.reply("c", pad_in("pad-c", &c, 1_000.0, Some(0), (None, None))));

    // Over the route's second leg from 100 s to 130 s: the leg, and b's pad from 120 s.
    let over_leg = leg(100.0, T0 + 100_000, T0 + 130_000);
    let reply = h.sm.query("z", &query(None, Some(vec![over_leg])));
    let mut route_row = ConflictInfo {
        name: "r-a".into(),
        kind: ReservationKind::Route,
        agent: "a".into(),
        lease: a.clone(),
        area: None,
        start_ms: None,
        end_ms: None,
        volumes: vec![route[1]],
        volume_indexes: vec![1],
        priority: None,
    };
    assert_eq!(
        conflicts(reply),
        (
            vec![
                pad_row(
                    "pad-b",
                    "b",
                    &b,
                    100.0,
                    Some((T0 + 120_000, Some(T0 + 200_000)))
                ),
                route_row.clone(),
            ],
            None
        )
    );
    // Ending when b's pad starts (touching, `end == start`): the leg only.
    let touching = cylinder(100.0, (Some(T0 + 100_000), Some(T0 + 120_000)));
    assert_eq!(
        conflicts(h.sm.query("z", &query(Some(touching), None))),
        (vec![route_row.clone()], None)
    );
    // Space only (the leg's place, after every window there): nothing.
    let later = cylinder(0.0, (Some(T0 + 60_000), Some(T0 + 600_000)));
    assert_eq!(
        names(h.sm.query("z", &query(Some(later), None))),
        (vec![], None)
    );
    // Time only (the legs' minutes, 500 m away from everything): nothing.
    let elsewhere = cylinder(500.0, (Some(T0), Some(T0 + 180_000)));
    assert_eq!(
        names(h.sm.query("z", &query(Some(elsewhere), None))),
        (vec![], None)
    );
    // Without a window: from the machine's time on, so c's pad (no window: all time) is
    // listed.
    let from_now = cylinder(1_000.0, (None, None));
    assert_eq!(
        conflicts(h.sm.query("c", &query(Some(from_now), None))),
        (vec![pad_row("pad-c", "c", &c, 1_000.0, None)], None)
    );
    // A route query over all three legs at once lists the route once, with every leg; b's
    // pad only touches the leg over it (it starts when the leg ends).
    route_row.volumes = route.clone();
    route_row.volume_indexes = vec![0, 1, 2];
    assert_eq!(
        conflicts(h.sm.query("z", &query(None, Some(route.clone())))),
        (vec![route_row], None)
    );
}

/// A reservation above routine shows its priority, so a planner knows whether it may preempt
/// it; a routine one leaves the field out.
#[test]
fn a_query_shows_a_priority_above_routine() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    let route = vec![leg(0.0, T0, T0 + 60_000)];
    h.reply(
        "a",
        at_priority(route_reserve("r-a", &a, route.clone(), Some(0)), 2),
    );
    // b's pad at the same spot right after the route's window.
    let later = (Some(T0 + 60_000), Some(T0 + 120_000));
    Harness::token(&h.reply("b", pad_in("pad-b", &b, 0.0, Some(0), later)));
    let over = cylinder(0.0, (None, None));
    let (rows, next_after) = conflicts(h.sm.query("z", &query(Some(over), None)));
    assert_eq!(next_after, None);
    let priorities: Vec<(String, Option<u8>)> = rows
        .iter()
        .map(|row| (row.name.clone(), row.priority.map(|p| p.level())))
        .collect();
    assert_eq!(
        priorities,
        vec![("pad-b".to_string(), None), ("r-a".to_string(), Some(2))]
    );
}

#[test]
fn a_query_reserves_nothing_and_does_not_list_waiting_requests() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    Harness::token(&h.reply("a", pad_in("pad-a", &a, 0.0, Some(0), (None, None))));
    // b waits for a pad over a's.
    let (reply, _) = h.send("b", pad_in("pad-b", &b, 1.0, None, (None, None)));
    assert_eq!(reply, Reply::Queued);
    let before = h.sm.snapshot();
    let over = cylinder(0.5, (None, Some(T0 + 60_000)));
    assert_eq!(
        names(h.sm.query("z", &query(Some(over), None))),
        (vec!["pad-a".to_string()], None)
    );
    assert_eq!(h.sm.snapshot(), before, "a query changes nothing");
    h.sm.check_invariants().expect("invariants hold");
}

#[test]
fn pages_follow_names_with_after_and_limit_and_stop_before_too_many_volumes() {
    let mut h = Harness::new();
    // Five pads 10 m apart, all under one wide query cylinder.
    for i in 0..5 {
        let agent = format!("p{i}");
        let lease = h.lease(&agent, 600_000);
        let north_m = f64::from(i) * 10.0;
        Harness::token(&h.reply(
            &agent,
            pad_in(&format!("pad-{i}"), &lease, north_m, Some(0), (None, None)),
        ));
    }
    let wide = QueryVolume {
        radius_m: 100.0,
        ..cylinder(20.0, (None, None))
    };
    let page = |after: Option<&str>, limit: Option<u32>| Op::AirspaceQuery {
        volume: Some(wide),
        volumes: None,
        after: after.map(str::to_string),
        limit,
    };
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (rows, next_after) = names(h.sm.query("z", &page(after.as_deref(), Some(2))));
        assert!(rows.len() <= 2);
        seen.extend(rows.clone());
        match next_after {
            Some(next) => {
                assert_eq!(
                    Some(&next),
                    rows.last(),
                    "next_after is the page's last name"
                );
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(seen, ["pad-0", "pad-1", "pad-2", "pad-3", "pad-4"]);
    assert_eq!(
        names(h.sm.query("z", &page(Some("pad-3"), None))),
        (vec!["pad-4".to_string()], None)
    );
    assert_eq!(
        names(h.sm.query("z", &page(Some("pad-4"), None))),
        (vec![], None)
    );

    // Three 64-volume routes over one place in successive hours: a page of all three would
    // list 192 volumes, more than 128, so the first page stops after two.
    let mut h = Harness::new();
    for r in 0..3u64 {
        let agent = format!("r{r}");
        let lease = h.lease(&agent, 600_000);
        let volumes = (0..64u64)
            .map(|i| {
                let start = T0 + (r * 64 + i) * 60_000;
                leg(0.0, start, start + 60_000)
            })
            .collect();
        Harness::token(&h.reply(
            &agent,
            route_reserve(&format!("route-{r}"), &lease, volumes, Some(0)),
        ));
    }
    let all = cylinder(0.0, (Some(T0), Some(T0 + 192 * 60_000)));
    let (rows, next_after) = conflicts(h.sm.query("z", &query(Some(all), None)));
    let listed: Vec<(String, usize)> = rows
        .iter()
        .map(|row| (row.name.clone(), row.volume_indexes.len()))
        .collect();
    assert_eq!(
        listed,
        [("route-0".to_string(), 64), ("route-1".to_string(), 64)]
    );
    assert_eq!(next_after.as_deref(), Some("route-1"));
    let next = Op::AirspaceQuery {
        volume: Some(all),
        volumes: None,
        after: next_after,
        limit: None,
    };
    assert_eq!(
        names(h.sm.query("z", &next)),
        (vec!["route-2".to_string()], None)
    );
}

#[test]
fn bad_queries_are_refused_naming_the_problem() {
    let mut h = Harness::new();
    h.now_ms = T0 + 10_000;
    h.lease("a", 600_000);
    let one = cylinder(0.0, (None, None));
    let cases = [
        (
            query(None, None),
            "airspace.query: give `volume` (one cylinder) or `volumes` (a route of 1 to 64 volumes)",
        ),
        (
            query(Some(one), Some(vec![leg(0.0, T0, T0 + 1)])),
            "airspace.query: give `volume` or `volumes`, not both",
        ),
        (
            query(None, Some(vec![leg(0.0, T0 + 20_000, T0 + 30_000); 65])),
            "airspace.query: `volumes` has 65 volumes, a route has 1 to 64",
        ),
        (
            query(None, Some(vec![])),
            "airspace.query: `volumes` has 0 volumes, a route has 1 to 64",
        ),
        (
            query(
                Some(cylinder(0.0, (Some(T0 + 20_000), Some(T0 + 20_000)))),
                None,
            ),
            "airspace.query: `volume`: the window is empty: `end_ms` (1020000) is not after \
             `start_ms` (1020000)",
        ),
        (
            query(Some(cylinder(0.0, (None, Some(T0 + 5_000)))), None),
            "airspace.query: `volume`: the window is in the past: `end_ms` (1005000) is not \
             after the entry's time (1010000)",
        ),
        (
            query(
                None,
                Some(vec![
                    leg(0.0, T0 + 20_000, T0 + 30_000),
                    leg(9.0, T0, T0 + 5_000),
                ]),
            ),
            "airspace.query: volume 1: the window is in the past: `end_ms` (1005000) is not \
             after the entry's time (1010000)",
        ),
        (
            query(
                Some(QueryVolume {
                    radius_m: 20_000.0,
                    ..one
                }),
                None,
            ),
            "airspace.query: `volume`: `radius_m` is 20000, it must be in [0, 10000]",
        ),
        (
            Op::AirspaceQuery {
                volume: Some(one),
                volumes: None,
                after: None,
                limit: Some(0),
            },
            "airspace.query: `limit` is 0, it must be from 1 to 100",
        ),
        (
            Op::AirspaceQuery {
                volume: Some(one),
                volumes: None,
                after: Some(String::new()),
                limit: None,
            },
            "airspace.query: `after` must not be empty",
        ),
    ];
    for (op, message) in cases {
        assert_eq!(h.sm.query("a", &op), bad_request(message), "{op:?}");
    }
}

/// The time index (grid invariants, checked after every entry by the harness): a pad taken
/// slot after slot, with one long window in the same cell; the long one's release shrinks the
/// cell's bound exactly, and a query or a reserve in a gap between slots sees only its
/// neighbours' edges (touching windows do not conflict).
#[test]
fn a_busy_pad_slot_after_slot_keeps_the_time_index_exact() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 600_000);
    let minute = 60_000;
    for slot in (0..40u64).filter(|slot| slot % 4 != 2) {
        let window = (Some(T0 + slot * minute), Some(T0 + (slot + 1) * minute));
        let name = format!("slot-{slot}");
        Harness::token(&h.reply("a", pad_in(&name, &a, 0.0, Some(0), window)));
    }
    // A long window 8 m north: in the same 13.6 m cell (the pads sit on its south edge), clear
    // of the slots in space (3 m + 3 m < 8 m).
    let long = (Some(T0), Some(T0 + 60 * minute));
    Harness::token(&h.reply("b", pad_in("long", &b, 8.0, Some(0), long)));
    assert_eq!(h.reply("b", waypoint_release("long", &b)), Reply::Done);
    // The gap of slot 10: free, its neighbours only touch it.
    let gap = cylinder(0.0, (Some(T0 + 10 * minute), Some(T0 + 11 * minute)));
    assert_eq!(
        names(h.sm.query("b", &query(Some(gap), None))),
        (vec![], None)
    );
    let gap_window = (Some(T0 + 10 * minute), Some(T0 + 11 * minute));
    Harness::token(&h.reply("b", pad_in("gap-10", &b, 0.0, Some(0), gap_window)));
    // A minute and a half across slots 12 and 13: both listed, in name order.
    let across = cylinder(
        0.0,
        (Some(T0 + 12 * minute + 30_000), Some(T0 + 14 * minute)),
    );
    assert_eq!(
        names(h.sm.query("b", &query(Some(across), None))),
        (vec!["slot-12".to_string(), "slot-13".to_string()], None)
    );
}

/// A machine that has applied nothing holds nothing and has no time yet: a well-formed query
/// an hour ahead is answered with no conflicts, not refused as beyond the horizon of time 0;
/// a malformed one is still refused.
#[test]
fn a_machine_that_applied_nothing_answers_no_conflicts() {
    let sm = super::StateMachine::new(super::Limits::DEFAULTS);
    let hour_ahead = (Some(1_764_503_600_000), Some(1_764_503_660_000));
    assert_eq!(
        sm.query("planner", &query(Some(cylinder(0.0, hour_ahead)), None)),
        Reply::Conflicts {
            conflicts: Vec::new(),
            next_after: None
        }
    );
    let reply = sm.query("planner", &query(None, None));
    assert!(
        matches!(
            reply,
            Reply::Refused {
                code: ErrorCode::BadRequest,
                ..
            }
        ),
        "{reply:?}"
    );
}
