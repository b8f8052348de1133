//! End to end over MQTT, one `hivekeeper serve` per test: 4D airspace. Waypoint reservations
//! with time windows: windows that do not overlap are granted at once, a future one included;
//! an overlapping one would block; a window ends by itself (the leader's `ExpireReservations`)
//! and its waiter is granted with a higher token; bad windows are `bad_request` with the
//! message that says which. Routes: two drones reserve crossing routes at overlapping times,
//! one waits and is granted with a higher token when the other releases, a route at another
//! time is granted at once; amend and release in raw JSON. Priority and preemption, with a 500
//! ms vacate deadline: a routine route held, an emergency route crossing it, the holder told
//! `reservation.preempted` with `vacate_by_ms` (raw JSON, and the SDK's `Guard::preempted`),
//! the holder not releasing, the emergency granted at the deadline with a higher token and the
//! holder told `waypoint.lost`.

mod common;

use common::airspace::{
    AuthNode, account, hub_area, line, node_with_limits, now_ms, pilot, try_route, volume,
};
use common::{Node, Raw, agent, agent_session, code, inspect, release, wait_metric, within};
use hivekeeper_agent::protocol::{ResourceKind, Volume};
use hivekeeper_agent::{AgentError, Guard, Priority, Session, TimeWindow, Wait};
use serde_json::json;

/// Reserves `name` over [`hub_area`] for `window`, within 20 s.
async fn slot(
    session: &Session,
    name: &str,
    window: TimeWindow,
    wait: Wait,
) -> Result<Guard, AgentError> {
    let reserve = session.reserve_waypoint_in(name, Some(hub_area()), window, wait);
    within(20, name, reserve).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_that_do_not_overlap_share_a_corridor_and_an_overlapping_one_would_block() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;
    let (_a, a) = agent_session("drone-a", port, 60_000).await;
    let (_b, b) = agent_session("drone-b", port, 60_000).await;
    let (_c, c) = agent_session("drone-c", port, 60_000).await;
    let t = now_ms();
    let first = TimeWindow::between(t + 600_000, t + 1_200_000);
    let second = TimeWindow::between(t + 1_200_000, t + 1_800_000);
    let inside = TimeWindow::between(t + 900_000, t + 1_000_000);

    // A future window: granted now, with its token.
    let slot_a = slot(&a, "corridor@a", first, Wait::Try)
        .await
        .expect("the corridor is free in 10-20 min");
    // The same corridor right after it (the windows touch): granted at once.
    let slot_b = slot(&b, "corridor@b", second, Wait::Try)
        .await
        .expect("20-30 min does not overlap 10-20 min");
    assert!(slot_b.token() > slot_a.token());
    // Inside drone-a's window: would block, nothing queued.
    let refused = slot(&c, "corridor@c", inside, Wait::Try).await;
    assert!(
        matches!(refused, Err(AgentError::WouldBlock)),
        "{refused:?}"
    );
    let (holders, waiters) = inspect(&observer, ResourceKind::Waypoint, "corridor@a").await;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(
        (holders[0].start_ms, holders[0].end_ms),
        (Some(t + 600_000), Some(t + 1_200_000))
    );
    assert!(waiters.is_empty());
    release(slot_a, "drone-a releases").await;
    release(slot_b, "drone-b releases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_ends_by_itself_and_its_waiter_gets_a_higher_token() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;
    let (_a, a) = agent_session("drone-a", port, 60_000).await;
    let (_b, b) = agent_session("drone-b", port, 60_000).await;
    let short = TimeWindow::until(now_ms() + 1_500);
    let held = slot(&a, "pad-1@now", short, Wait::Try)
        .await
        .expect("the pad is free");
    // drone-b wants the pad with no window: it waits until drone-a's window ends, which the
    // service does by itself (drone-a never releases).
    let waited = slot(&b, "pad-1@later", TimeWindow::default(), Wait::UntilGranted)
        .await
        .expect("granted after the window's end");
    assert!(waited.token() > held.token());
    let (holders, _) = inspect(&observer, ResourceKind::Waypoint, "pad-1@now").await;
    assert!(holders.is_empty(), "the window ended: {holders:?}");
    drop(held);
    release(waited, "drone-b releases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_windows_are_bad_request_saying_which_in_raw_json() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let mut raw = Raw::connect(node.mqtt_port(), "raw-drone").await;
    let lease = raw.grant("g", 60_000).await;
    let reserve = |id: &str, start_ms: u64, end_ms: u64| {
        json!({"id": id, "op": "waypoint.reserve", "name": "pad", "lease": lease,
               "lat": 47.0, "lon": 8.0, "radius_m": 5, "start_ms": start_ms, "end_ms": end_ms})
    };
    let empty = raw.call(reserve("empty", 5_000, 5_000)).await;
    assert_eq!(
        empty,
        json!({"id": "empty", "ok": false, "error": {"code": "bad_request", "message":
            "waypoint.reserve: the window is empty: `end_ms` (5000) is not after `start_ms` (5000)"}})
    );
    let past = raw.call(reserve("past", 1_000, 2_000)).await;
    assert_eq!(code(&past), Some("bad_request"), "{past}");
    let message = past["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "waypoint.reserve: the window is in the past: `end_ms` (2000) is not after the \
             entry's time ("
        ),
        "{message}"
    );
    let t = now_ms();
    let long = raw.call(reserve("long", t, t + 86_400_001)).await;
    assert_eq!(
        long,
        json!({"id": "long", "ok": false, "error": {"code": "bad_request", "message":
            "waypoint.reserve: the window is 86400001 ms long, more than \
             reservation_window_ms_max (86400000)"}})
    );
    let far = raw
        .call(reserve(
            "far",
            t + 30 * 86_400_000,
            t + 30 * 86_400_000 + 1_000,
        ))
        .await;
    assert_eq!(code(&far), Some("bad_request"), "{far}");
    let message = far["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.ends_with("beyond reservation_horizon_ms_max (604800000)"),
        "{message}"
    );
    // A good window, granted at once, with the window in `inspect`.
    let good = raw.call(reserve("good", t + 60_000, t + 120_000)).await;
    assert_eq!(good["ok"], true, "{good}");
    let shown = raw.inspect("i", "waypoint", "pad").await;
    assert_eq!(shown["holders"][0]["start_ms"], t + 60_000, "{shown}");
    assert_eq!(shown["holders"][0]["end_ms"], t + 120_000, "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_routes_one_waits_then_is_granted_with_a_higher_token_and_another_time_passes() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;
    let (_a, a) = agent_session("drone-a", port, 60_000).await;
    let (_b, b) = agent_session("drone-b", port, 60_000).await;
    let (_c, c) = agent_session("drone-c", port, 60_000).await;
    let t = now_ms() + 60_000;
    // drone-a flies west to east over the hub, drone-b south to north, in the same minutes:
    // their middle legs cross at the hub.
    let east = line(true, 200.0, t, 60_000);
    let north = line(false, 200.0, t, 60_000);
    let route_a = within(
        10,
        "drone-a's route",
        a.reserve_route("east", east, Wait::Try),
    )
    .await
    .expect("the sky is empty");
    assert_eq!(route_a.kind(), ResourceKind::Waypoint);
    let waiting = {
        let b = b.clone();
        let north = north.clone();
        tokio::spawn(async move { b.reserve_route("north", north, Wait::UntilGranted).await })
    };
    common::eventually(10, "drone-b's route waits as a unit", || async {
        let (holders, waiters) = inspect(&observer, ResourceKind::Waypoint, "north").await;
        (holders.is_empty() && waiters.len() == 1 && waiters[0].agent == "drone-b").then_some(())
    })
    .await;
    // The same crossing three hours later: no overlap in time, granted at once.
    let later = line(false, 200.0, t + 3 * 3_600_000, 60_000);
    let route_c = within(
        10,
        "drone-c's route",
        c.reserve_route("north-later", later, Wait::Try),
    )
    .await
    .expect("three hours later the crossing is free");
    let (holders, _) = inspect(&observer, ResourceKind::Waypoint, "east").await;
    assert_eq!(holders.len(), 1);
    assert_eq!(
        holders[0].volumes.len(),
        3,
        "inspect shows the route's volumes"
    );
    let token_a = route_a.token();
    release(route_a, "drone-a lands").await;
    let route_b = within(10, "drone-b is granted", waiting)
        .await
        .expect("the task ran")
        .expect("granted once drone-a released");
    assert!(route_b.token() > token_a, "{} > {token_a}", route_b.token());
    release(route_b, "drone-b lands").await;
    release(route_c, "drone-c lands").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_reserve_amend_and_release_in_raw_json() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut a = Raw::connect(port, "raw-a").await;
    let mut b = Raw::connect(port, "raw-b").await;
    let lease_a = a.grant("ga", 60_000).await;
    let lease_b = b.grant("gb", 60_000).await;
    let t = now_ms() + 60_000;
    let legs = line(true, 200.0, t, 60_000);
    let token = try_route(&mut a, "east", &lease_a, &legs).await;
    // b holds the slot right after a's route, at the east end.
    let slot = volume(0.0, 200.0, t + 180_000, t + 240_000);
    let held = b
        .call(
            json!({"id": "s1", "op": "route.reserve", "name": "slot", "lease": lease_b,
                     "volumes": [slot], "wait_ms": 0}),
        )
        .await;
    assert_eq!(held["ok"], true, "{held}");
    // Delaying a's last leg into b's slot: would_block, the old route kept.
    let mut delayed = legs.clone();
    delayed[2] = volume(0.0, 200.0, t + 120_000, t + 200_000);
    let refused = a
        .call(
            json!({"id": "r2", "op": "route.amend", "name": "east", "lease": lease_a,
                     "volumes": delayed}),
        )
        .await;
    assert_eq!(
        refused,
        json!({"id": "r2", "ok": false, "error": {"code": "would_block", "message":
            "route \"east\": the new volumes conflict with a held or earlier waiting \
             reservation; the old route is kept"}})
    );
    // Delayed by less, clear of b's slot: granted, the same token.
    let mut shorter = legs.clone();
    shorter[2] = volume(0.0, 200.0, t + 120_000, t + 180_000 - 1);
    let amended = a
        .call(
            json!({"id": "r3", "op": "route.amend", "name": "east", "lease": lease_a,
                     "volumes": shorter}),
        )
        .await;
    assert_eq!(amended, json!({"id": "r3", "ok": true, "token": token}));
    let shown = a.inspect("i", "waypoint", "east").await;
    assert_eq!(shown["holders"][0]["volumes"], json!(shorter), "{shown}");
    let released = a
        .call(json!({"id": "r4", "op": "route.release", "name": "east", "lease": lease_a}))
        .await;
    assert_eq!(released, json!({"id": "r4", "ok": true}));
    let empty = a
        .call(
            json!({"id": "r5", "op": "route.reserve", "name": "x", "lease": lease_a,
                     "volumes": []}),
        )
        .await;
    assert_eq!(
        empty,
        json!({"id": "r5", "ok": false, "error": {"code": "bad_request", "message":
            "route.reserve: `volumes` has 0 volumes, a route has 1 to 64"}})
    );
}

/// An `airspace.query` row of a route with one conflicting volume at `index`, with its
/// holder's agent and lease when the asker may see them.
fn conflict_row(
    name: &str,
    volumes: &[Volume],
    index: u32,
    holder: Option<(&str, &str)>,
) -> serde_json::Value {
    let mut row = json!({"name": name, "kind": "route", "volumes": volumes,
                         "volume_indexes": [index]});
    if let Some((agent, lease)) = holder {
        row["agent"] = json!(agent);
        row["lease"] = json!(lease);
    }
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airspace_query_lists_conflicts_in_pages_and_shows_holders_to_observers_only() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let AuthNode {
        node,
        mut admin,
        mut a,
        lease_a,
        mut b,
        lease_b,
    } = AuthNode::start(dir.path()).await;
    let mut watcher = account(&mut admin, node.mqtt_port(), "watcher", "observer").await;
    let t = now_ms() + 60_000;
    // drone-a flies west to east over the hub; drone-b holds a pad at the hub an hour later.
    let legs = line(true, 200.0, t, 60_000);
    try_route(&mut a, "east", &lease_a, &legs).await;
    let pad = volume(0.0, 0.0, t + 3_600_000, t + 7_200_000);
    try_route(&mut b, "pad", &lease_b, &[pad]).await;

    // Over the hub from the middle leg's minute on, no end: the route's middle leg and the pad.
    let over_hub = json!({"lat": 47.3769, "lon": 8.5417, "radius_m": 20, "alt_min_m": 0,
                          "alt_max_m": 120, "start_ms": t + 60_000});
    let query = |id: &str| json!({"id": id, "op": "airspace.query", "volume": over_hub});
    let route_row = |holder| conflict_row("east", &legs[1..2], 1, holder);
    let pad_row = |holder| conflict_row("pad", &[pad], 0, holder);
    // drone-b (role agent): its own pad in full, drone-a's route without agent and lease.
    assert_eq!(
        b.call(query("q1")).await,
        json!({"id": "q1", "ok": true,
               "conflicts": [route_row(None), pad_row(Some(("drone-b", &lease_b)))]})
    );
    // An observer sees who holds the airspace.
    assert_eq!(
        watcher.call(query("q2")).await,
        json!({"id": "q2", "ok": true, "conflicts": [
            route_row(Some(("drone-a", &lease_a))), pad_row(Some(("drone-b", &lease_b)))]})
    );
    // Pages of one, in name order.
    let mut first = query("q3");
    first["limit"] = json!(1);
    assert_eq!(
        watcher.call(first).await,
        json!({"id": "q3", "ok": true, "conflicts": [route_row(Some(("drone-a", &lease_a)))],
               "next_after": "east"})
    );
    let mut second = query("q4");
    second["limit"] = json!(1);
    second["after"] = json!("east");
    assert_eq!(
        watcher.call(second).await,
        json!({"id": "q4", "ok": true, "conflicts": [pad_row(Some(("drone-b", &lease_b)))]})
    );
    // A route two hours after the pad's: nothing conflicts, and nothing was reserved.
    let free = line(true, 200.0, t + 4 * 3_600_000, 60_000);
    assert_eq!(
        a.call(json!({"id": "q5", "op": "airspace.query", "volumes": free}))
            .await,
        json!({"id": "q5", "ok": true, "conflicts": []})
    );
    let shown = a.inspect("i1", "waypoint", "east").await;
    assert_eq!(shown["holders"][0]["volumes"], json!(legs), "{shown}");
    // Bad input: no volume, both, an empty window.
    assert_eq!(
        a.call(json!({"id": "q6", "op": "airspace.query"})).await,
        json!({"id": "q6", "ok": false, "error": {"code": "bad_request", "message":
            "airspace.query: give `volume` (one cylinder) or `volumes` (a route of 1 to 64 \
             volumes)"}})
    );
    assert_eq!(
        a.call(
            json!({"id": "q7", "op": "airspace.query", "volume": over_hub,
                      "volumes": free})
        )
        .await,
        json!({"id": "q7", "ok": false, "error": {"code": "bad_request", "message":
            "airspace.query: give `volume` or `volumes`, not both"}})
    );
    let mut empty = over_hub.clone();
    empty["end_ms"] = json!(t + 60_000);
    let refused = a
        .call(json!({"id": "q8", "op": "airspace.query", "volume": empty}))
        .await;
    assert_eq!(
        refused,
        json!({"id": "q8", "ok": false, "error": {"code": "bad_request", "message": format!(
            "airspace.query: `volume`: the window is empty: `end_ms` ({}) is not after \
             `start_ms` ({})", t + 60_000, t + 60_000)}})
    );
}

/// How long a preempted holder has to vacate in the preemption tests: short, so the deadline
/// passes within the test.
const VACATE_MS: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emergency_route_preempts_a_routine_one_that_does_not_vacate_and_gets_a_higher_token() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = node_with_limits(dir.path(), &[("reservation_vacate_ms", VACATE_MS)]).await;
    let port = node.mqtt_port();
    let mut holder = Raw::connect(port, "survey-3").await;
    holder.subscribe("hk/v1/evt/survey-3").await;
    let lease = holder.grant("g", 60_000).await;
    let t = now_ms() + 60_000;
    // A routine survey flight over the hub, east to west, one minute a leg.
    let survey = line(true, 200.0, t, 60_000);
    let token = try_route(&mut holder, "survey", &lease, &survey).await;

    // An emergency flight crossing it, south to north through the hub, at the same minutes.
    let (_m, medevac) = agent_session("medevac-1", port, 60_000).await;
    let crossing = line(false, 200.0, t, 60_000);
    let emergency = tokio::spawn(async move {
        let reserve =
            medevac.reserve_route_at("medevac", crossing, Wait::UntilGranted, Priority::EMERGENCY);
        within(20, "the emergency route", reserve).await
    });

    // The holder is told to vacate, once, by the entry's time + 500 ms.
    let (topic, event) = holder.next_event(10).await;
    assert_eq!(topic, "hk/v1/evt/survey-3");
    let vacate_by_ms = event["vacate_by_ms"].as_u64().expect("a deadline");
    assert_eq!(
        event,
        json!({"event": "reservation.preempted", "name": "survey", "token": token,
               "kind": "route", "vacate_by_ms": vacate_by_ms, "priority": 3})
    );
    let stamped_ms = vacate_by_ms - VACATE_MS;
    assert!(
        stamped_ms + 30_000 > now_ms() && stamped_ms < now_ms() + 1_000,
        "the deadline is the preempting entry's time + 500 ms: {vacate_by_ms}"
    );

    // The holder does not release. At the deadline its whole route ends, it is told
    // `waypoint.lost`, and the emergency route is granted with a higher token.
    let granted = within(20, "the emergency route task", emergency)
        .await
        .expect("the task ran")
        .expect("granted at the deadline");
    assert!(granted.token() > token, "{} > {token}", granted.token());
    assert_eq!(granted.priority(), Priority::EMERGENCY);
    assert!(
        now_ms() + 1_000 >= vacate_by_ms,
        "not granted before the deadline"
    );
    let (topic, event) = holder.next_event(10).await;
    assert_eq!(topic, "hk/v1/evt/survey-3");
    assert_eq!(
        event,
        json!({"event": "waypoint.lost", "name": "survey", "token": token})
    );
    // The late holder is fenced.
    let fence = holder
        .call(
            json!({"id": "f1", "op": "fence.check", "name": "survey", "kind": "waypoint",
                     "token": token}),
        )
        .await;
    assert_eq!(
        fence,
        json!({"id": "f1", "ok": true, "current": 0, "valid": false})
    );
    let late = holder
        .call(json!({"id": "r2", "op": "route.release", "name": "survey", "lease": lease}))
        .await;
    assert_eq!(code(&late), Some("not_holder"), "{late}");
    let shown = holder.inspect("i", "waypoint", "medevac").await;
    assert_eq!(shown["holders"][0]["priority"], 3, "{shown}");
    release(granted, "the emergency lands").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_guard_resolves_preempted_and_a_release_in_time_grants_the_preemptor() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = node_with_limits(dir.path(), &[("reservation_vacate_ms", VACATE_MS)]).await;
    let port = node.mqtt_port();
    let (_h, holder) = agent_session("survey-4", port, 60_000).await;
    let t = now_ms() + 60_000;
    let guard = within(
        10,
        "the routine route",
        holder.reserve_route("survey", line(true, 200.0, t, 60_000), Wait::Try),
    )
    .await
    .expect("the sky is empty");
    assert_eq!(guard.priority(), Priority::ROUTINE);
    let mut medevac = Raw::connect(port, "medevac-2").await;
    let lease = medevac.grant("g", 60_000).await;
    medevac
        .send(
            json!({"id": "e1", "op": "route.reserve", "name": "medevac", "lease": lease,
                   "priority": 2, "volumes": line(false, 200.0, t, 60_000)})
            .to_string(),
        )
        .await;
    let preempted = within(10, "Guard::preempted", guard.preempted()).await;
    assert_eq!(preempted.priority, Priority::new(2).expect("a level"));
    let shown = medevac.inspect("i", "waypoint", "survey").await;
    assert_eq!(
        shown["holders"][0]["vacate_by_ms"], preempted.vacate_by_ms,
        "{shown}"
    );
    // Released in time: the preemptor is granted in the release's entry.
    let token = guard.token();
    release(guard, "the survey vacates").await;
    let granted = medevac.next(10).await;
    assert_eq!(granted["id"], "e1", "{granted}");
    assert!(
        granted["token"].as_u64().expect("a token") > token,
        "{granted}"
    );
}

/// A node whose `reservation_vacate_ms` is 20 s (no deadline passes within the test) and
/// whose `reservation_aging_ms` is 100 ms (a routine waiter is ahead of any emergency that
/// comes 300 ms after it), with its config in `dir`.
async fn node_with_fast_aging(dir: &std::path::Path) -> Node {
    let limits = [
        ("reservation_vacate_ms", 20_000),
        ("reservation_aging_ms", 100),
    ];
    node_with_limits(dir, &limits).await
}

/// The pad every request of the next test asks for, at `priority`, waiting `wait_ms`.
fn pad_request(id: &str, lease: &str, priority: u8, wait_ms: u64) -> serde_json::Value {
    json!({"id": id, "op": "waypoint.reserve", "name": "pad-9", "lease": lease,
           "lat": 47.3769, "lon": 8.5417, "radius_m": 5, "priority": priority,
           "wait_ms": wait_ms})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_preemption_is_told_and_a_routine_waiter_ahead_does_not_shield_the_holder() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = node_with_fast_aging(dir.path()).await;
    let port = node.mqtt_port();
    let (mut holder, holder_lease) = pilot(port, "survey-5").await;
    let granted = holder.call(pad_request("h1", &holder_lease, 0, 0)).await;
    let token_h = granted["token"].as_u64().expect("granted at once");

    // An emergency that waits 300 ms at most preempts the holder, then gives up: the holder
    // is told it may stay, with its token.
    let (mut quitter, quitter_lease) = pilot(port, "medevac-3").await;
    quitter
        .send(pad_request("q1", &quitter_lease, 3, 300).to_string())
        .await;
    let preempted = holder.next_event(10).await.1;
    let vacate_by_ms = preempted["vacate_by_ms"].as_u64().expect("a deadline");
    assert_eq!(
        preempted,
        json!({"event": "reservation.preempted", "name": "pad-9", "token": token_h,
               "kind": "waypoint", "vacate_by_ms": vacate_by_ms, "priority": 3})
    );
    let gave_up = quitter.next(10).await;
    assert_eq!(code(&gave_up), Some("timeout"), "{gave_up}");
    assert_eq!(
        holder.next_event(10).await.1,
        json!({"event": "reservation.preemption_withdrawn", "name": "pad-9",
               "token": token_h, "kind": "waypoint"})
    );
    let shown = holder.inspect("i1", "waypoint", "pad-9").await;
    assert_eq!(shown["holders"][0]["token"], token_h, "{shown}");
    assert!(shown["holders"][0].get("vacate_by_ms").is_none(), "{shown}");
    wait_metric(
        node.metrics_port,
        "hivekeeper_reservation_preemptions_withdrawn_total",
        10,
        |withdrawn| withdrawn == 1.0,
    )
    .await;

    // A routine request queues; an emergency 500 ms later is behind it (aging: 3 × 100 ms).
    let (mut routine, routine_lease) = pilot(port, "survey-6").await;
    routine
        .send(pad_request("r1", &routine_lease, 0, 60_000).to_string())
        .await;
    let queued = async {
        loop {
            let shown = holder.inspect("i2", "waypoint", "pad-9").await;
            if shown["waiters"].as_array().is_some_and(|w| !w.is_empty()) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    within(10, "the routine request queued", queued).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (mut emergency, emergency_lease) = pilot(port, "medevac-4").await;
    emergency
        .send(pad_request("e1", &emergency_lease, 3, 60_000).to_string())
        .await;
    // Still the holder is preempted: the routine waiter ahead lends its turn, not a shield.
    let preempted = holder.next_event(10).await.1;
    assert_eq!(preempted["event"], "reservation.preempted", "{preempted}");
    assert_eq!(preempted["token"], token_h, "{preempted}");
    let shown = holder.inspect("i3", "waypoint", "pad-9").await;
    let order: Vec<&str> = shown["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| w["agent"].as_str().expect("an agent"))
        .collect();
    assert_eq!(order, ["survey-6", "medevac-4"], "{shown}");

    // The holder vacates: the routine request, first in the queue, is granted, and in the
    // same entry preempted in its turn; when it vacates, the emergency is granted.
    let released = holder
        .call(
            json!({"id": "h2", "op": "waypoint.release", "name": "pad-9",
                     "lease": holder_lease}),
        )
        .await;
    assert_eq!(released, json!({"id": "h2", "ok": true}));
    let granted = routine.next(10).await;
    let token_r = granted["token"].as_u64().expect("granted");
    assert!(token_r > token_h, "{token_r} > {token_h}");
    let preempted = routine.next_event(10).await.1;
    let vacate_by_ms = preempted["vacate_by_ms"].as_u64().expect("a deadline");
    assert_eq!(
        preempted,
        json!({"event": "reservation.preempted", "name": "pad-9", "token": token_r,
               "kind": "waypoint", "vacate_by_ms": vacate_by_ms, "priority": 3})
    );
    let released = routine
        .call(
            json!({"id": "r2", "op": "waypoint.release", "name": "pad-9",
                     "lease": routine_lease}),
        )
        .await;
    assert_eq!(released, json!({"id": "r2", "ok": true}));
    let granted = emergency.next(10).await;
    assert_eq!(granted["id"], "e1", "{granted}");
    assert!(
        granted["token"].as_u64().expect("granted") > token_r,
        "{granted}"
    );
}
