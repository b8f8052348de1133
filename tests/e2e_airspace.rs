//! End to end over MQTT, one `hivekeeper serve` per test: 4D airspace (issue 18). Waypoint
//! reservations with time windows: windows that do not overlap are granted at once, a future
//! one included; an overlapping one would block; a window ends by itself (the leader's
//! `ExpireReservations`) and its waiter is granted with a higher token; bad windows are
//! `bad_request` with the message that says which.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{Node, Raw, agent, agent_session, code, inspect, release, within};
use hivekeeper_agent::protocol::{Area, ResourceKind};
use hivekeeper_agent::{AgentError, Guard, Session, TimeWindow, Wait};
use serde_json::json;

/// The wall clock, UTC ms: the node stamps entries with the same clock.
fn now_ms() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    u64::try_from(since_epoch.as_millis()).expect("ms since 1970 fit in u64")
}

/// Reserves `name` over [`corridor`] for `window`, within 20 s.
async fn slot(
    session: &Session,
    name: &str,
    window: TimeWindow,
    wait: Wait,
) -> Result<Guard, AgentError> {
    let reserve = session.reserve_waypoint_in(name, Some(corridor()), window, wait);
    within(20, name, reserve).await
}

/// A 25 m cylinder from the ground to 120 m over Zurich.
fn corridor() -> Area {
    Area {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 25.0,
        alt_min_m: Some(0.0),
        alt_max_m: Some(120.0),
    }
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
