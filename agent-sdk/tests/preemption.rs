//! Priority and preemption in the SDK, against the fake service: the reserve sends its
//! `priority`, and `Guard::preempted` resolves on the `reservation.preempted` event of its own
//! name and token, not on another's.

mod common;

use common::{broker_with_fake, connected_session, within};
use hivekeeper_agent::protocol::{Event, Op};
use hivekeeper_agent::{Geometry, Preempted, Priority, TimeWindow, Wait};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_sends_its_priority_and_preempted_resolves_on_its_own_event() {
    let (port, fake) = broker_with_fake().await;
    let (_agent, session) = connected_session("d1", port, 1_000).await;
    let pad = Geometry {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 25.0,
        alt_min_m: Some(0.0),
        alt_max_m: Some(120.0),
    };
    let level = Priority::new(2).expect("a level");
    let reserve =
        session.reserve_waypoint_at("pad-3", Some(pad), TimeWindow::default(), Wait::Try, level);
    let guard = within(10, "reserve", reserve).await.expect("granted");
    assert_eq!(guard.priority(), level);
    let sent = fake.received_op("waypoint.reserve");
    assert!(
        matches!(sent[0].op, Op::WaypointReserve { priority, .. } if priority == level),
        "{:?}",
        sent[0].op
    );
    let preempted = |name: &str, token: u64, vacate_by_ms: u64| Event::ReservationPreempted {
        name: name.into(),
        token,
        kind: "waypoint".into(),
        vacate_by_ms,
        priority: Priority::EMERGENCY,
    };
    // Another reservation's event, and an older holder's of the same name: not this guard's.
    fake.send_event("d1", &preempted("pad-4", guard.token(), 1))
        .await;
    fake.send_event("d1", &preempted("pad-3", guard.token() - 1, 2))
        .await;
    fake.send_event("d1", &preempted("pad-3", guard.token(), 3))
        .await;
    let seen = within(10, "Guard::preempted", guard.preempted()).await;
    assert_eq!(
        seen,
        Preempted {
            vacate_by_ms: 3,
            priority: Priority::EMERGENCY
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_withdrawn_resolves_on_its_own_event_after_preempted() {
    let (port, fake) = broker_with_fake().await;
    let (_agent, session) = connected_session("d2", port, 1_000).await;
    let reserve = session.reserve_waypoint_at(
        "pad-5",
        None,
        TimeWindow::default(),
        Wait::Try,
        Priority::ROUTINE,
    );
    let guard = within(10, "reserve", reserve).await.expect("granted");
    let withdrawn = |name: &str, token: u64| Event::ReservationPreemptionWithdrawn {
        name: name.into(),
        token,
        kind: "waypoint".into(),
    };
    fake.send_event(
        "d2",
        &Event::ReservationPreempted {
            name: "pad-5".into(),
            token: guard.token(),
            kind: "waypoint".into(),
            vacate_by_ms: 7,
            priority: Priority::EMERGENCY,
        },
    )
    .await;
    let seen = within(10, "Guard::preempted", guard.preempted()).await;
    assert_eq!(seen.vacate_by_ms, 7);
    // Another reservation's withdrawal, and an older holder's: not this guard's. Then its own.
    fake.send_event("d2", &withdrawn("pad-6", guard.token()))
        .await;
    fake.send_event("d2", &withdrawn("pad-5", guard.token() - 1))
        .await;
    let own = guard.preemption_withdrawn();
    tokio::pin!(own);
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), &mut own).await;
    assert!(early.is_err(), "resolved on another reservation's event");
    fake.send_event("d2", &withdrawn("pad-5", guard.token()))
        .await;
    within(10, "Guard::preemption_withdrawn", own).await;
}
