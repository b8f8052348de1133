//! Guards over real MQTT against the fake service: the five-line flow, `try_lock`,
//! `lock_timeout`, a long wait that outlives every request timeout, one hold per resource,
//! release on drop, and the release of a grant whose caller stopped waiting.

mod common;

use std::time::Duration;

use common::{agent_config, broker_with_fake, eventually, within};
use hivekeeper_agent::protocol::Op;
use hivekeeper_agent::{Agent, AgentConfig, AgentError, Geometry};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_line_flow_returns_a_token() {
    let (port, fake) = broker_with_fake().await;
    let flow = async {
        let agent = Agent::connect(agent_config("drone-7", &[port])).await?;
        let session = agent.session(1_000).await?;
        let guard = session.lock("pad-3").await?;
        let token = guard.token();
        guard.release().await?;
        Ok::<_, AgentError>((token, session))
    };
    let (token, session) = within(10, "five-line flow", flow)
        .await
        .expect("the flow succeeds");
    assert!(token > 0, "a real token");
    let released = fake.received_op("lock.release");
    assert_eq!(released.len(), 1, "one release, answered");
    assert!(released[0].answered_ok);
    assert!(!fake.holds(session.lease(), "pad-3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_on_a_taken_lock_would_block() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    fake.set_busy("door", true);
    let refused = within(10, "try_lock", session.try_lock("door")).await;
    assert_eq!(refused.err(), Some(AgentError::WouldBlock));
    let sent = fake.received_op("lock.acquire");
    assert!(matches!(
        sent[0].op,
        Op::LockAcquire {
            wait_ms: Some(0),
            ..
        }
    ));
    // The refusal freed the session's claim: a later try works once the lock is free.
    fake.set_busy("door", false);
    let guard = within(10, "try_lock again", session.try_lock("door"))
        .await
        .expect("free now");
    assert!(guard.token() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_timeout_answers_wait_timeout() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    fake.set_busy("door", true);
    let started = tokio::time::Instant::now();
    let result = within(
        10,
        "lock_timeout",
        session.lock_timeout("door", Duration::from_millis(400)),
    )
    .await;
    assert_eq!(result.err(), Some(AgentError::WaitTimeout));
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the service decided, after wait_ms"
    );
    let sent = fake.received_op("lock.acquire");
    assert!(matches!(
        sent[0].op,
        Op::LockAcquire {
            wait_ms: Some(400),
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_lock_outlives_request_timeouts_and_resends_one_id() {
    let (port, fake) = broker_with_fake().await;
    // Every request limit is far below the wait: 300 ms per attempt, 1 s in all.
    let config = AgentConfig {
        request_deadline_ms: 1_000,
        ..agent_config("d1", &[port])
    };
    let agent = within(10, "connect", Agent::connect(config))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    fake.set_busy("door", true);
    let waiter = {
        let session = session.clone();
        tokio::spawn(async move { session.lock("door").await })
    };
    // Long enough for several resend periods (wait_resend_ms = 500) and the 1 s deadline.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(!waiter.is_finished(), "still waiting, not cut by a timeout");
    fake.grant_waiters().await;
    let guard = within(10, "the grant arrives", waiter)
        .await
        .expect("the task ran")
        .expect("granted");
    assert!(guard.token() > 0);
    let sent = fake.received_op("lock.acquire");
    assert!(
        sent.len() >= 2,
        "the queued id was re-asserted: {} sends",
        sent.len()
    );
    assert!(
        sent.iter().all(|r| r.id == sent[0].id),
        "every resend reuses the first id"
    );
    assert!(agent.stats().resends_total >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hold_per_resource_and_drop_releases() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    let guard = within(10, "lock", session.lock("x")).await.expect("lock");
    let second = within(10, "second lock", session.lock("x")).await;
    assert!(
        matches!(second, Err(AgentError::AlreadyHeld { ref name, .. }) if name == "x"),
        "{second:?}"
    );
    drop(guard);
    // Re-locking right after a drop (whose release runs in the background) must not race it:
    // each new acquire waits for the release, so every grant is a new hold with a new token.
    let mut tokens = Vec::new();
    for round in 0..3 {
        let guard = within(10, "lock in a loop", session.lock("x"))
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        tokens.push(guard.token());
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fresh grants: {tokens:?}"
    );
    eventually(5, "every dropped guard released", async || {
        fake.received_op("lock.release")
            .iter()
            .filter(|r| r.answered_ok)
            .count()
            == 4
    })
    .await;
    assert!(!fake.holds(session.lease(), "x"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_after_the_caller_gave_up_is_released() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    fake.set_busy("door", true);
    let gave_up = tokio::time::timeout(Duration::from_millis(500), session.lock("door")).await;
    assert!(gave_up.is_err(), "the caller stopped waiting");
    assert_eq!(agent.stats().requests_abandoned_total, 1);
    // The request is still queued at the service; the grant must not leak a hold.
    fake.grant_waiters().await;
    eventually(5, "the late grant released", async || {
        fake.received_op("lock.release")
            .iter()
            .any(|r| r.answered_ok)
    })
    .await;
    assert!(!fake.holds(session.lease(), "door"));
    // And the session can take the lock normally afterwards.
    let guard = within(10, "lock after", session.lock("door"))
        .await
        .expect("lock");
    assert!(guard.token() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_waypoint_guards_carry_tokens() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    let permits = within(10, "semaphore", session.semaphore("chargers", 4, 2))
        .await
        .expect("permits");
    let pad = Geometry {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 25.0,
        alt_min_m: Some(10.0),
        alt_max_m: Some(120.0),
    };
    let reservation = within(10, "waypoint", session.reserve_waypoint("pad-9", Some(pad)))
        .await
        .expect("reservation");
    assert!(permits.token() > 0 && reservation.token() > permits.token());
    let sem = fake.received_op("sem.acquire");
    assert!(matches!(
        sem[0].op,
        Op::SemAcquire {
            limit: 4,
            permits: 2,
            wait_ms: None,
            ..
        }
    ));
    let waypoint = fake.received_op("waypoint.reserve");
    assert!(matches!(
        waypoint[0].op,
        Op::WaypointReserve {
            radius_m: Some(25.0),
            alt_max_m: Some(120.0),
            ..
        }
    ));
    within(10, "release permits", permits.release())
        .await
        .expect("released");
    within(10, "release waypoint", reservation.release())
        .await
        .expect("released");
    assert_eq!(fake.received_op("sem.release").len(), 1);
    assert_eq!(fake.received_op("waypoint.release").len(), 1);
}
