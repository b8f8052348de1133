//! Sessions over real MQTT against the fake service: keepalive cadence, jeopardy before the
//! TTL when acknowledgements stop (DESIGN.md §5.3) and recovery when they resume, expiry by
//! event and by `lease_not_found`, revoke, and revoke on drop.
//!
//! Timings are asserted as orderings and bounds with wide margins: the machine is small and
//! shared.

mod common;

use std::time::Duration;

use common::{KeepaliveMode, agent_config, broker_with_fake, eventually, within};
use hivekeeper_agent::protocol::Event;
use hivekeeper_agent::{Agent, AgentError, SessionState};
use tokio::time::Instant;

/// `keepalive_every_ms` sets the cadence (200 ms here, where TTL/3 would be 600 ms), and a
/// TTL not more than twice it is refused before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_keepalive_interval_sets_the_cadence() {
    let (port, fake) = broker_with_fake().await;
    let mut config = agent_config("d9", &[port]);
    config.keepalive_every_ms = Some(200);
    let agent = within(10, "connect", Agent::connect(config))
        .await
        .expect("connect");
    match agent.session(400).await {
        Err(AgentError::Config(message)) => {
            assert!(message.contains("keepalive_every_ms"), "{message}");
        }
        other => panic!("a 400 ms TTL with 200 ms keepalives: {other:?}"),
    }
    assert!(fake.received_op("lease.grant").is_empty());
    let _session = within(10, "session", agent.session(1_800))
        .await
        .expect("session");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    // 2.1 s / 200 ms = 10 ticks (TTL/3 would give 3); wide bounds for a busy machine.
    assert_cadence(&fake.received_op("lease.keepalive"), 6..=13, 120..=350);
}

/// Keepalives seen in 2.1 s: their count within `count`, the mean gap within `mean_ms`.
fn assert_cadence(
    keepalives: &[common::Received],
    count: std::ops::RangeInclusive<usize>,
    mean_ms: std::ops::RangeInclusive<u64>,
) {
    assert!(
        count.contains(&keepalives.len()),
        "{} keepalives in 2.1 s, expected {count:?}",
        keepalives.len()
    );
    let gaps: Vec<Duration> = keepalives.windows(2).map(|w| w[1].at - w[0].at).collect();
    let mean = gaps.iter().sum::<Duration>() / gaps.len() as u32;
    let mean_range =
        Duration::from_millis(*mean_ms.start())..=Duration::from_millis(*mean_ms.end());
    assert!(
        mean_range.contains(&mean),
        "mean gap {mean:?}, expected within {mean_ms:?} ms: {gaps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_go_out_about_every_third_of_the_ttl() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(900))
        .await
        .expect("session");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let keepalives = fake.received_op("lease.keepalive");
    // 2.1 s / 300 ms = 7 ticks; allow for a slow start and scheduling noise.
    assert_cadence(&keepalives, 4..=9, 200..=450);
    let ids: std::collections::HashSet<_> = keepalives.iter().map(|k| &k.id).collect();
    assert_eq!(ids.len(), keepalives.len(), "a fresh id per keepalive");
    assert_eq!(session.state(), SessionState::Live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_service_puts_the_session_in_jeopardy_before_the_ttl() {
    const TTL_MS: u64 = 1_000;
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(TTL_MS))
        .await
        .expect("session");
    let guard = within(10, "lock", session.lock("pad")).await.expect("lock");
    // Acks arrive 250 ms after the keepalive did: a deadline counted from the ack's arrival
    // instead of the keepalive's send time would overshoot the bound asserted below.
    fake.set_keepalive(KeepaliveMode::AckAfter(Duration::from_millis(250)));
    eventually(5, "two late acks", async || {
        fake.received_op("lease.keepalive").len() >= 3
    })
    .await;
    // Let the last acknowledgement land, then stop answering.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        session.state(),
        SessionState::Live,
        "late acks still keep it live"
    );
    fake.set_keepalive(KeepaliveMode::Silent);
    let lost = within(5, "lost() resolves", guard.lost()).await;
    let jeopardy_at = Instant::now();
    assert_eq!(lost, SessionState::Jeopardy);
    assert!(guard.is_lost());
    // The last acknowledged keepalive was received after it was sent, so its receive time
    // bounds its send time from above: jeopardy must come before receive time + TTL, which is
    // before the service could expire the lease.
    let last_acked = fake
        .received_op("lease.keepalive")
        .into_iter()
        .rfind(|k| k.answered_ok)
        .expect("some keepalives were acknowledged");
    let after_last_ack = jeopardy_at - last_acked.at;
    assert!(
        after_last_ack < Duration::from_millis(TTL_MS),
        "jeopardy {after_last_ack:?} after the last acked keepalive, TTL is {TTL_MS} ms"
    );
    assert!(
        after_last_ack > Duration::from_millis(TTL_MS / 2),
        "not premature: {after_last_ack:?}"
    );
    // Nothing new can be taken while in jeopardy.
    let refused = within(5, "lock in jeopardy", session.lock("other")).await;
    assert_eq!(
        refused.err(),
        Some(AgentError::Lost(SessionState::Jeopardy))
    );
    // A keepalive acknowledged in time again proves the lease alive: back to Live.
    fake.set_keepalive(KeepaliveMode::Ack);
    let mut state = session.watch();
    within(5, "live again", state.wait_for(|s| s.is_live()))
        .await
        .expect("the keeper runs");
    assert!(!guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expired_event_expires_the_session() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let mut events = agent.events();
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    let guard = within(10, "lock", session.lock("pad")).await.expect("lock");
    // An event about another lease changes nothing.
    let other = Event::LeaseExpired {
        lease: "someone-else".into(),
    };
    fake.send_event("d1", &other).await;
    let seen = within(5, "first event", events.recv())
        .await
        .expect("delivered");
    assert_eq!(seen, other);
    assert_eq!(session.state(), SessionState::Live);
    let ours = Event::LeaseExpired {
        lease: session.lease().into(),
    };
    fake.send_event("d1", &ours).await;
    let lost = within(5, "lost() resolves", session.lost()).await;
    assert_eq!(lost, SessionState::Expired);
    assert_eq!(
        within(5, "lock", session.lock("x")).await.err(),
        Some(AgentError::Lost(SessionState::Expired))
    );
    assert_eq!(
        within(5, "release", guard.release()).await.err(),
        Some(AgentError::Lost(SessionState::Expired)),
        "the hold was gone before the release"
    );
    assert!(fake.received_op("lock.release").is_empty(), "nothing sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_not_found_on_keepalive_expires_the_session() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(900))
        .await
        .expect("session");
    fake.set_keepalive(KeepaliveMode::LeaseNotFound);
    assert_eq!(
        within(5, "lost() resolves", session.lost()).await,
        SessionState::Expired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_ends_the_session_and_silences_its_guards() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    let guard = within(10, "lock", session.lock("pad")).await.expect("lock");
    within(10, "revoke", session.revoke())
        .await
        .expect("revoked");
    assert_eq!(session.state(), SessionState::Revoked);
    assert_eq!(fake.received_op("lease.revoke").len(), 1);
    drop(guard);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        fake.received_op("lock.release").is_empty(),
        "the lease's end released it; the guard sends nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_revokes_the_lease() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    let guard = within(10, "lock", session.lock("pad")).await.expect("lock");
    drop(session);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        fake.received_op("lease.revoke").is_empty(),
        "a guard keeps the session alive"
    );
    drop(guard);
    eventually(5, "revoked after the last handle", async || {
        fake.received_op("lease.revoke").len() == 1
    })
    .await;
}
