//! The Rust SDK's airspace calls against a real `hivekeeper serve` over MQTT: the SDK's own
//! tests (agent-sdk/tests/) play the service with a fake, since the SDK must not depend on the
//! coordinator; these run the real one, which only this package can start.
//!
//! - `Agent::airspace_query`: the protocol's `ConflictInfo` rows for a cylinder and for a
//!   route, pages of one with `next_after`, and bad queries as `AgentError::Service` with
//!   `bad_request` (one refused by the SDK before sending, one by the service).
//! - `Guard::amend`: granted at once it keeps the token and the route's airspace moves (the
//!   old volumes are free, the new ones held); into another lease's airspace it is
//!   `AgentError::WouldBlock` and the old route is kept.

mod common;

use common::airspace::{HUB_LAT, HUB_LON, hub_area, line, now_ms, volume};
use common::{Node, agent, agent_session, fence_check, inspect, release, within};
use hivekeeper_agent::protocol::{
    ConflictInfo, ErrorCode, QueryVolume, ReservationKind, ResourceKind, Volume,
};
use hivekeeper_agent::{
    Agent, AgentError, AirspaceQuery, ConflictPage, Guard, Priority, Session, TimeWindow, Wait,
};

/// A 20 m cylinder over the hub, from the ground to 120 m, from `start_ms` on.
fn over_hub_from(start_ms: u64) -> QueryVolume {
    QueryVolume {
        lat: HUB_LAT,
        lon: HUB_LON,
        radius_m: 20.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: Some(start_ms),
        end_ms: None,
    }
}

/// The `airspace.query` row of route `name` held by `session`, with its conflicting volumes at
/// `indexes` of `route`.
fn route_row(name: &str, session: &Session, route: &[Volume], indexes: &[u32]) -> ConflictInfo {
    ConflictInfo {
        name: name.into(),
        kind: ReservationKind::Route,
        agent: session.agent().agent_id().into(),
        lease: session.lease().into(),
        area: None,
        start_ms: None,
        end_ms: None,
        volumes: indexes.iter().map(|&i| route[i as usize]).collect(),
        volume_indexes: indexes.to_vec(),
        priority: None,
    }
}

/// One page of `query` through `agent`, within 20 s; it must succeed.
async fn page(agent: &Agent, query: &AirspaceQuery) -> ConflictPage {
    within(20, "airspace.query", agent.airspace_query(query))
        .await
        .unwrap_or_else(|e| panic!("airspace.query {query:?}: {e}"))
}

/// Reserves route `name` through `session`, trying once; it must be granted.
async fn route(session: &Session, name: &str, volumes: Vec<Volume>) -> Guard {
    within(10, name, session.reserve_route(name, volumes, Wait::Try))
        .await
        .unwrap_or_else(|e| panic!("route {name}: {e}"))
}

/// Asserts that route `name` is held, by one lease, with `token` (`fence.check` answers it
/// valid and current) and exactly `volumes` (`inspect`), and that nobody waits for it.
async fn holds_route(observer: &Agent, name: &str, token: u64, volumes: &[Volume]) {
    assert_eq!(
        fence_check(observer, ResourceKind::Waypoint, name, token).await,
        (true, token),
        "{name} is held with token {token}"
    );
    let (holders, waiters) = inspect(observer, ResourceKind::Waypoint, name).await;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(
        (holders[0].token, holders[0].volumes.as_slice()),
        (token, volumes)
    );
    assert!(waiters.is_empty(), "{waiters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airspace_query_returns_typed_rows_in_pages_and_a_bad_query_as_a_typed_error() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (_a, a) = agent_session("drone-a", port, 60_000).await;
    let (_b, b) = agent_session("drone-b", port, 60_000).await;
    let planner = agent("planner", port).await;
    let t = now_ms() + 60_000;
    // drone-a flies west to east over the hub; drone-b holds the hub's pad at priority 1 an
    // hour later.
    let legs = line(true, 200.0, t, 60_000);
    let east = route(&a, "east", legs.clone()).await;
    let (pad_start, pad_end) = (t + 3_600_000, t + 7_200_000);
    let level_1 = Priority::new(1).expect("a level");
    let pad = within(
        10,
        "the pad",
        b.reserve_waypoint_at(
            "pad",
            Some(hub_area()),
            TimeWindow::between(pad_start, pad_end),
            Wait::Try,
            level_1,
        ),
    )
    .await
    .expect("the pad is free");
    let east_row = route_row("east", &a, &legs, &[1]);
    let pad_row = ConflictInfo {
        name: "pad".into(),
        kind: ReservationKind::Waypoint,
        agent: "drone-b".into(),
        lease: b.lease().into(),
        area: Some(hub_area()),
        start_ms: Some(pad_start),
        end_ms: Some(pad_end),
        volumes: Vec::new(),
        volume_indexes: Vec::new(),
        priority: Some(level_1),
    };

    // Over the hub from the middle leg's minute on: the route's middle leg and the pad, in name
    // order, all in one page (authentication is off: every row shows its holder).
    let over_hub = AirspaceQuery::volume(over_hub_from(t + 60_000));
    assert_eq!(
        page(&planner, &over_hub).await,
        ConflictPage {
            conflicts: vec![east_row.clone(), pad_row.clone()],
            next_after: None,
        }
    );
    // Pages of one: the first says where the next starts, the last says nothing follows.
    let first = page(&planner, &over_hub.clone().limit(1)).await;
    assert_eq!(
        first,
        ConflictPage {
            conflicts: vec![east_row.clone()],
            next_after: Some("east".into()),
        }
    );
    let next = over_hub
        .clone()
        .limit(1)
        .after(first.next_after.expect("more follow"));
    assert_eq!(
        page(&planner, &next).await,
        ConflictPage {
            conflicts: vec![pad_row],
            next_after: None,
        }
    );
    // A route crossing drone-a's at the hub in the same minutes: its middle leg only.
    let north = AirspaceQuery::route(line(false, 200.0, t, 60_000));
    assert_eq!(
        page(&planner, &north).await,
        ConflictPage {
            conflicts: vec![east_row],
            next_after: None,
        }
    );

    // Bad queries: refused by the SDK with the service's message (nothing sent), or by the
    // service; the same typed error either way.
    let refused = planner
        .airspace_query(&over_hub.clone().limit(0))
        .await
        .expect_err("limit 0 is out of range");
    assert_eq!(
        refused,
        AgentError::Service {
            code: ErrorCode::BadRequest,
            message: "airspace.query: `limit` is 0, it must be from 1 to 100".into(),
        }
    );
    let past = QueryVolume {
        start_ms: Some(1_000),
        end_ms: Some(2_000),
        ..over_hub_from(0)
    };
    let refused = within(
        20,
        "a query in the past",
        planner.airspace_query(&AirspaceQuery::volume(past)),
    )
    .await
    .expect_err("the window is in the past");
    let AgentError::Service { code, message } = &refused else {
        panic!("a refusal by the service: {refused:?}");
    };
    assert_eq!(*code, ErrorCode::BadRequest);
    assert!(
        message.starts_with(
            "airspace.query: `volume`: the window is in the past: `end_ms` (2000) is not after \
             the entry's time ("
        ),
        "{message}"
    );
    release(east, "drone-a lands").await;
    release(pad, "drone-b frees the pad").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amend_granted_at_once_keeps_the_token_and_moves_the_held_airspace() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (_a, a) = agent_session("drone-a", port, 60_000).await;
    let observer = agent("observer", port).await;
    let t = now_ms() + 60_000;
    let legs = line(true, 200.0, t, 60_000);
    let guard = route(&a, "east", legs.clone()).await;
    let token = guard.token();

    // The flight is delayed by an hour: the same legs, an hour later, granted at once.
    let delayed = line(true, 200.0, t + 3_600_000, 60_000);
    within(10, "the amend", guard.amend(delayed.clone()))
        .await
        .expect("nothing is in the way an hour later");
    assert_eq!(guard.token(), token);
    // The hold and its token are kept, with the new volumes.
    holds_route(&observer, "east", token, &delayed).await;
    // The old minutes are free, the new ones held.
    let old = page(&observer, &AirspaceQuery::route(legs)).await;
    assert_eq!(old.conflicts, Vec::new());
    let new = page(&observer, &AirspaceQuery::route(delayed.clone())).await;
    assert_eq!(
        new.conflicts,
        vec![route_row("east", &a, &delayed, &[0, 1, 2])]
    );
    release(guard, "drone-a lands").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amend_into_another_leases_airspace_would_block_and_keeps_the_old_route() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (_a, a) = agent_session("drone-a", port, 60_000).await;
    let (_b, b) = agent_session("drone-b", port, 60_000).await;
    let observer = agent("observer", port).await;
    let t = now_ms() + 60_000;
    let legs = line(true, 200.0, t, 60_000);
    let guard = route(&a, "east", legs.clone()).await;
    let token = guard.token();
    // drone-b holds the slot right after drone-a's route, at its east end.
    let slot = route(
        &b,
        "slot",
        vec![volume(0.0, 200.0, t + 180_000, t + 240_000)],
    )
    .await;

    // Delaying drone-a's last leg into drone-b's slot: would block, nothing changes.
    let mut delayed = legs.clone();
    delayed[2] = volume(0.0, 200.0, t + 120_000, t + 200_000);
    let refused = within(10, "the amend", guard.amend(delayed)).await;
    assert_eq!(refused, Err(AgentError::WouldBlock));
    holds_route(&observer, "east", token, &legs).await;
    release(guard, "drone-a lands").await;
    release(slot, "drone-b frees the slot").await;
}
