//! End to end over MQTT in raw JSON, one `hivekeeper serve` per test: the parts of 4D airspace
//! (docs/PROTOCOL.md §8.8–§8.9.5, §10) that e2e_airspace.rs covers only through the SDK or not
//! at all, asserting exact replies and events.
//!
//! - Time windows: windows that touch (`end == start`) are both granted; an overlapping one is
//!   `would_block` with `wait_ms: 0`; queued, it is granted with a higher token in the entry
//!   that ends the holder's window at its `end_ms`, and the holder is told nothing (it asked
//!   for that end).
//! - Routes: one waits FIFO as a unit behind a crossing route and is granted with a higher
//!   token when that is released; a third route in the way of the waiting one only (not of the
//!   holder) waits behind it.
//! - Priority: a priority-2 `waypoint.reserve` preempts a routine waypoint holder
//!   (`reservation.preempted`, `kind: "waypoint"`), which releases, and is then granted with a
//!   higher token; with `wait_ms: 0` it is `would_block` and preempts nothing; a `priority`
//!   that is not a level is `bad_request` with the documented message.
//! - Queue order: behind a priority-2 holder, two priority-1 waiters stay FIFO and a later
//!   priority-2 one goes ahead of them (`inspect`), and they are granted in that order.
//! - `airspace.query` by the `admin` role shows agent and lease on every row, and `priority` on
//!   a row above routine.

mod common;

use common::Raw;
use common::airspace::{
    AuthNode, HUB_LAT, HUB_LON, hub_area, line, now_ms, pilot, try_route, volume,
};
use common::{Node, code};
use serde_json::{Value, json};

/// A `waypoint.reserve` of `name` under `lease`: the [`hub_area`] cylinder. Callers add the
/// window, `priority` and `wait_ms`.
fn reserve_over_hub(id: &str, name: &str, lease: &str) -> Value {
    let area = hub_area();
    json!({"id": id, "op": "waypoint.reserve", "name": name, "lease": lease,
           "lat": area.lat, "lon": area.lon, "radius_m": area.radius_m,
           "alt_min_m": area.alt_min_m, "alt_max_m": area.alt_max_m})
}

/// `request` with `fields` added or replaced; a field given as `null` is left out.
fn with(mut request: Value, fields: Value) -> Value {
    let object = request.as_object_mut().expect("a request is an object");
    for (key, value) in fields.as_object().expect("fields are an object") {
        if value.is_null() {
            object.remove(key);
        } else {
            object.insert(key.clone(), value.clone());
        }
    }
    request
}

/// The token of a grant, which must be exactly `{"id": id, "ok": true, "token": n}`.
fn granted(response: &Value, id: &str) -> u64 {
    let token = response["token"]
        .as_u64()
        .unwrap_or_else(|| panic!("{response}"));
    assert_eq!(*response, json!({"id": id, "ok": true, "token": token}));
    token
}

/// The exact `would_block` answer to a reserve of `noun` (`waypoint` or `route`) `name`.
fn would_block(id: &str, noun: &str, name: &str) -> Value {
    json!({"id": id, "ok": false, "error": {"code": "would_block", "message": format!(
        "{noun} {name:?} conflicts with a held or earlier waiting reservation")}})
}

/// Sends `reserve` (without `wait_ms`) as `wait_ms: 0` under its own id, which must be
/// refused `would_block` with nothing queued, then again under `queued_id` without `wait_ms`;
/// returns once `inspect` shows it as the only waiter of its name, as `waiter`.
async fn refused_then_queued(
    raw: &mut Raw,
    observer: &mut Raw,
    reserve: Value,
    queued_id: &str,
    waiter: Value,
) {
    let id = reserve["id"].as_str().expect("a request id").to_string();
    let name = reserve["name"].as_str().expect("a name").to_string();
    let op = reserve["op"].as_str().expect("an op");
    let noun = op.strip_suffix(".reserve").expect("a reserve op");
    let refused = raw.call(with(reserve.clone(), json!({"wait_ms": 0}))).await;
    assert_eq!(refused, would_block(&id, noun, &name));
    let shown = observer
        .inspect(&format!("refused-{id}"), "waypoint", &name)
        .await;
    assert_eq!(shown["waiters"], json!([]), "nothing queued: {shown}");
    raw.send(with(reserve, json!({"id": queued_id})).to_string())
        .await;
    waiters_are(observer, &name, json!([waiter])).await;
}

/// A node on `dir` and three [`pilot`]s, `raw-a`, `raw-b` and `raw-c`.
async fn three_pilots(dir: &std::path::Path) -> (Node, [(Raw, String); 3]) {
    let node = Node::start(dir).await;
    let port = node.mqtt_port();
    let pilots = [
        pilot(port, "raw-a").await,
        pilot(port, "raw-b").await,
        pilot(port, "raw-c").await,
    ];
    (node, pilots)
}

/// Asserts that `raw` gets no response and no event within `ms`.
async fn quiet(raw: &mut Raw, ms: u64) {
    assert_eq!(raw.try_next(ms).await, None, "no response");
    assert_eq!(raw.try_next_elsewhere(1).await, None, "no event");
}

/// Waits (at most 10 s) until `inspect` of the waypoint `name` lists exactly `expected` as
/// its waiters, each compared without its `since_ms` (the service's clock).
async fn waiters_are(observer: &mut Raw, name: &str, expected: Value) {
    let mut polls = 0u32;
    common::eventually(
        10,
        &format!("the waiters of {name} are {expected}"),
        async || {
            polls += 1;
            // A fresh id per poll: the service answers a reused id with its first outcome.
            let shown = observer
                .inspect(&format!("waiters-{name}-{polls}"), "waypoint", name)
                .await;
            let mut waiters = shown["waiters"].clone();
            for waiter in waiters.as_array_mut()? {
                waiter.as_object_mut()?.remove("since_ms");
            }
            (waiters == expected).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touching_windows_pass_an_overlap_waits_for_the_end_ms_and_the_holder_is_told_nothing() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, [(mut a, lease_a), (mut b, lease_b), (mut c, lease_c)]) =
        three_pilots(dir.path()).await;
    let port = node.mqtt_port();
    // A few seconds ahead on the service's clock (the node stamps entries with this clock).
    let t = now_ms();
    let (a_start, a_end) = (t + 4_000, t + 8_000);
    let window = |start_ms: u64, end_ms: u64| json!({"start_ms": start_ms, "end_ms": end_ms});

    // drone-a holds the hub in [t+4 s, t+8 s); drone-b holds it in [t+2 s, t+4 s), which
    // ends where drone-a's starts: both granted, with increasing tokens.
    let reserve_a = with(
        reserve_over_hub("a1", "slot-a", &lease_a),
        window(a_start, a_end),
    );
    let token_a = granted(&a.call(with(reserve_a, json!({"wait_ms": 0}))).await, "a1");
    let reserve_b = with(
        reserve_over_hub("b1", "slot-b", &lease_b),
        window(t + 2_000, a_start),
    );
    let token_b = granted(&b.call(with(reserve_b, json!({"wait_ms": 0}))).await, "b1");
    assert!(token_b > token_a, "{token_b} > {token_a}");

    // drone-c wants [t+5 s, t+11 s), overlapping drone-a's window only: with `wait_ms: 0`
    // it would block; queued, it waits for drone-a's window to end by itself.
    let mut observer = Raw::connect(port, "observer").await;
    let reserve_c = with(
        reserve_over_hub("c1", "slot-c", &lease_c),
        window(t + 5_000, t + 11_000),
    );
    let queued = json!({"agent": "raw-c", "position": 1, "area": hub_area(),
                        "start_ms": t + 5_000, "end_ms": t + 11_000});
    refused_then_queued(&mut c, &mut observer, reserve_c, "c2", queued).await;
    let grant = c.next(15).await;
    let token_c = granted(&grant, "c2");
    assert!(token_c > token_b, "{token_c} > {token_b}");
    assert!(
        now_ms() >= a_end,
        "granted in the entry that ends drone-a's window, not before its end_ms ({a_end})"
    );
    // drone-a's reservation is over: its token no longer fences anything.
    let fence = a
        .call(
            json!({"id": "f1", "op": "fence.check", "name": "slot-a", "kind": "waypoint",
                     "token": token_a}),
        )
        .await;
    assert_eq!(
        fence,
        json!({"id": "f1", "ok": true, "current": 0, "valid": false})
    );
    // The end of one's own window is not news: no `waypoint.lost` (§8.8), to either holder.
    quiet(&mut a, 500).await;
    quiet(&mut b, 1).await;
    let late = a
        .call(json!({"id": "a2", "op": "waypoint.release", "name": "slot-a", "lease": lease_a}))
        .await;
    assert_eq!(code(&late), Some("not_holder"), "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_waits_fifo_as_a_unit_and_one_in_its_way_only_waits_behind_it() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, [(mut a, lease_a), (mut b, lease_b), (mut c, lease_c)]) =
        three_pilots(dir.path()).await;
    let port = node.mqtt_port();
    let mut observer = Raw::connect(port, "observer").await;
    let t = now_ms() + 60_000;
    // drone-a flies west to east over the hub, drone-b south to north, in the same minutes:
    // their middle legs cross at the hub.
    let east = line(true, 200.0, t, 60_000);
    let north = line(false, 200.0, t, 60_000);
    let token_a = try_route(&mut a, "east", &lease_a, &east).await;
    // With `wait_ms: 0` drone-b's route would block; queued, it waits as a unit: it holds
    // none of its legs while it waits, not even those drone-a is not in the way of.
    let reserve_north = json!({"id": "b1", "op": "route.reserve", "name": "north",
                               "lease": lease_b, "volumes": north});
    let north_waits = json!({"agent": "raw-b", "position": 1, "volumes": north});
    refused_then_queued(&mut b, &mut observer, reserve_north, "b2", north_waits).await;
    let shown = observer.inspect("i1", "waypoint", "north").await;
    assert_eq!(shown["holders"], json!([]), "{shown}");

    // drone-c's spur, at drone-b's last leg (200 m north) in its minute: clear of drone-a's
    // route, in the way of drone-b's waiting one. FIFO among conflicting requests: it does not
    // pass drone-b (would_block), and queued it waits behind drone-b.
    let spur = [volume(200.0, 0.0, t + 120_000, t + 180_000)];
    let reserve_spur = json!({"id": "c1", "op": "route.reserve", "name": "spur",
                              "lease": lease_c, "volumes": spur});
    let spur_waits = json!({"agent": "raw-c", "position": 1, "volumes": spur});
    refused_then_queued(
        &mut c,
        &mut observer,
        reserve_spur,
        "c2",
        spur_waits.clone(),
    )
    .await;

    // drone-a lands: drone-b's whole route is granted, with a higher token; drone-c now waits
    // for drone-b's held route.
    let released = a
        .call(json!({"id": "a2", "op": "route.release", "name": "east", "lease": lease_a}))
        .await;
    assert_eq!(released, json!({"id": "a2", "ok": true}));
    let token_b = granted(&b.next(10).await, "b2");
    assert!(token_b > token_a, "{token_b} > {token_a}");
    let shown = observer.inspect("i2", "waypoint", "north").await;
    assert_eq!(shown["holders"][0]["volumes"], json!(north), "{shown}");
    assert_eq!(shown["holders"][0]["token"], token_b, "{shown}");
    waiters_are(&mut observer, "spur", json!([spur_waits])).await;
    quiet(&mut c, 300).await;

    // drone-b lands: drone-c's spur is granted, with a higher token still.
    let released = b
        .call(json!({"id": "b3", "op": "route.release", "name": "north", "lease": lease_b}))
        .await;
    assert_eq!(released, json!({"id": "b3", "ok": true}));
    let token_c = granted(&c.next(10).await, "c2");
    assert!(token_c > token_b, "{token_c} > {token_b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_2_waypoint_preempts_a_routine_holder_which_releases_and_it_gets_a_higher_token()
{
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut holder, lease_h) = pilot(port, "survey-5").await;
    let (mut urgent, lease_u) = pilot(port, "medevac-5").await;
    // A routine survey holds the hub's cylinder for all time.
    let token_h = granted(
        &holder
            .call(with(
                reserve_over_hub("h1", "survey", &lease_h),
                json!({"wait_ms": 0}),
            ))
            .await,
        "h1",
    );

    // A `priority` that is not a level (`null` included, §8.9.4) is refused, with the
    // message that names the field.
    let refusal = |id: &str, shown: &str| {
        json!({"id": id, "ok": false, "error": {"code": "bad_request", "message": format!(
            "waypoint.reserve: `priority` is {shown}; it must be an integer from 0 (routine) \
             to 3 (emergency)")}})
    };
    let bad = [
        ("p1", json!(4), "4"),
        ("p2", json!(-1), "-1"),
        ("p3", json!(1.5), "1.5"),
        ("p4", json!("high"), "\"high\""),
        ("p5", Value::Null, "null"),
    ];
    for (id, priority, shown) in bad {
        let mut request = reserve_over_hub(id, "medevac", &lease_u);
        request["priority"] = priority;
        assert_eq!(urgent.call(request).await, refusal(id, shown));
    }
    // With `wait_ms: 0` a request that would preempt is `would_block` and preempts nothing.
    let try_now = with(
        reserve_over_hub("u0", "medevac", &lease_u),
        json!({"priority": 2, "wait_ms": 0}),
    );
    assert_eq!(
        urgent.call(try_now).await,
        would_block("u0", "waypoint", "medevac")
    );
    quiet(&mut holder, 300).await;

    // Priority 2, in the way of the routine holder only: it does not wait behind it. The
    // holder is told to vacate, once, by the preempting entry's time + 5 s (the default).
    urgent
        .send(
            with(
                reserve_over_hub("u1", "medevac", &lease_u),
                json!({"priority": 2}),
            )
            .to_string(),
        )
        .await;
    let (topic, event) = holder.next_event(10).await;
    assert_eq!(topic, "hk/v1/evt/survey-5");
    let vacate_by_ms = event["vacate_by_ms"].as_u64().expect("a deadline");
    assert_eq!(
        event,
        json!({"event": "reservation.preempted", "name": "survey", "token": token_h,
               "kind": "waypoint", "vacate_by_ms": vacate_by_ms, "priority": 2})
    );
    let stamped_ms = vacate_by_ms - 5_000;
    assert!(
        stamped_ms + 30_000 > now_ms() && stamped_ms <= now_ms(),
        "the deadline is the preempting entry's time + 5 s: {vacate_by_ms}"
    );
    // `inspect` shows the deadline on the holder and the priority on the waiter.
    let shown = urgent.inspect("i1", "waypoint", "survey").await;
    let holder_shown = &shown["holders"][0];
    assert_eq!(
        *holder_shown,
        json!({"agent": "survey-5", "lease": lease_h, "token": token_h,
               "since_ms": holder_shown["since_ms"], "area": hub_area(),
               "vacate_by_ms": vacate_by_ms}),
        "{shown}"
    );
    let medevac_waits =
        json!({"agent": "medevac-5", "position": 1, "area": hub_area(), "priority": 2});
    waiters_are(&mut urgent, "medevac", json!([medevac_waits])).await;

    // The holder vacates in time: the preemptor is granted in the release's entry, with a
    // higher token, and the holder is told nothing more.
    let released = holder
        .call(json!({"id": "h2", "op": "waypoint.release", "name": "survey", "lease": lease_h}))
        .await;
    assert_eq!(released, json!({"id": "h2", "ok": true}));
    let token_u = granted(&urgent.next(10).await, "u1");
    assert!(token_u > token_h, "{token_u} > {token_h}");
    let shown = urgent.inspect("i2", "waypoint", "medevac").await;
    assert_eq!(shown["holders"][0]["priority"], 2, "{shown}");
    quiet(&mut holder, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_priorities_wait_fifo_and_a_later_higher_one_goes_ahead_without_preempting() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut holder, lease_h) = pilot(port, "pad-holder").await;
    let mut observer = Raw::connect(port, "observer").await;
    // The holder's priority is 2, so no waiter below preempts it: only the order is tested.
    let token_h = granted(
        &holder
            .call(with(
                reserve_over_hub("h1", "pad", &lease_h),
                json!({"priority": 2, "wait_ms": 0}),
            ))
            .await,
        "h1",
    );
    // Three drones ask for the pad, one after the other (each seen queued before the next
    // asks): two at priority 1, then one at priority 2.
    let mut queue = Vec::new();
    let mut waiters = Vec::new();
    for (agent, priority) in [("first-1", 1), ("second-1", 1), ("third-2", 2)] {
        let (raw, lease) = pilot(port, agent).await;
        raw.send(
            with(
                reserve_over_hub("w1", "pad", &lease),
                json!({"priority": priority}),
            )
            .to_string(),
        )
        .await;
        queue.push(json!({"agent": agent, "area": hub_area(), "priority": priority}));
        // Expected order: the priority-2 one first, then the priority-1 ones in arrival order.
        let mut expected = queue.clone();
        expected.sort_by_key(|w| std::cmp::Reverse(w["priority"].as_u64()));
        for (i, waiter) in expected.iter_mut().enumerate() {
            waiter["position"] = json!(i + 1);
        }
        waiters_are(&mut observer, "pad", json!(expected)).await;
        waiters.push((raw, lease));
    }
    // Nobody preempted the holder: no event, no deadline.
    quiet(&mut holder, 1).await;
    let shown = observer.inspect("i1", "waypoint", "pad").await;
    assert_eq!(shown["holders"][0]["vacate_by_ms"], Value::Null, "{shown}");

    // Granted in queue order, each with a higher token, as the one before releases.
    let third = waiters.pop().expect("three waiters");
    let in_queue_order = [third, waiters.remove(0), waiters.remove(0)];
    let (mut releaser, mut lease_before, mut token) = (holder, lease_h, token_h);
    for (mut next, lease) in in_queue_order {
        let released = releaser
            .call(
                json!({"id": "release", "op": "waypoint.release", "name": "pad",
                         "lease": lease_before}),
            )
            .await;
        assert_eq!(released, json!({"id": "release", "ok": true}));
        let next_token = granted(&next.next(10).await, "w1");
        assert!(next_token > token, "{next_token} > {token}");
        (releaser, lease_before, token) = (next, lease, next_token);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airspace_query_by_an_admin_shows_every_holder_and_a_priority_above_routine() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let mut auth = AuthNode::start(dir.path()).await;
    let (admin, a, b) = (&mut auth.admin, &mut auth.a, &mut auth.b);
    let (lease_a, lease_b) = (auth.lease_a.clone(), auth.lease_b.clone());
    let t = now_ms() + 60_000;
    // drone-a flies west to east over the hub (routine); drone-b holds the hub's pad at
    // priority 1 an hour later.
    let legs = line(true, 200.0, t, 60_000);
    try_route(a, "east", &lease_a, &legs).await;
    let pad = with(
        reserve_over_hub("b1", "pad", &lease_b),
        json!({"start_ms": t + 3_600_000, "end_ms": t + 7_200_000, "priority": 1, "wait_ms": 0}),
    );
    granted(&b.call(pad).await, "b1");

    let query = |id: &str| {
        json!({"id": id, "op": "airspace.query", "volume": {"lat": HUB_LAT, "lon": HUB_LON,
               "radius_m": 20, "alt_min_m": 0, "alt_max_m": 120, "start_ms": t + 60_000}})
    };
    let route_row = json!({"name": "east", "kind": "route", "agent": "drone-a",
                           "lease": lease_a, "volumes": [legs[1]], "volume_indexes": [1]});
    let pad_row = json!({"name": "pad", "kind": "waypoint", "agent": "drone-b",
                         "lease": lease_b, "area": hub_area(), "start_ms": t + 3_600_000,
                         "end_ms": t + 7_200_000, "priority": 1});
    // The admin sees who holds every row; the routine route has no `priority`.
    assert_eq!(
        admin.call(query("q1")).await,
        json!({"id": "q1", "ok": true, "conflicts": [route_row, pad_row]})
    );
    // drone-a (role agent) sees its own row whole, and the pad's priority but not its holder.
    let mut pad_anonymous = pad_row.clone();
    let fields = pad_anonymous.as_object_mut().expect("a row is an object");
    fields.remove("agent");
    fields.remove("lease");
    assert_eq!(
        a.call(query("q2")).await,
        json!({"id": "q2", "ok": true, "conflicts": [route_row, pad_anonymous]})
    );
}
