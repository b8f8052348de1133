//! Broker failover over real MQTT: two brokers served by one fake service (shared state, like
//! a replicated service's nodes). The first broker sits behind a proxy; killing the proxy is
//! what an agent sees when a node dies (a killable TCP proxy in front of each broker).

mod common;

use std::time::Duration;

use common::{Fake, Proxy, agent_config, eventually, free_port, start_broker, within};
use hivekeeper_agent::{Agent, SessionState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_fails_over_to_the_next_broker_and_keeps_its_session() {
    let (port_a, port_b) = (start_broker(), start_broker());
    let fake = Fake::new();
    let responder_a = fake.serve(port_a).await;
    let responder_b = fake.serve(port_b).await;
    let proxy_a = Proxy::start(port_a).await;
    let agent = within(
        10,
        "connect",
        Agent::connect(agent_config("d1", &[proxy_a.port, port_b])),
    )
    .await
    .expect("connect");
    assert_eq!(agent.broker(), Some(format!("127.0.0.1:{}", proxy_a.port)));
    let session = within(10, "session", agent.session(2_000))
        .await
        .expect("session");
    let first = within(10, "lock on A", session.lock("pad-1"))
        .await
        .expect("lock");
    assert!(
        fake.received_op("lock.acquire")
            .iter()
            .all(|r| r.responder == responder_a)
    );

    proxy_a.kill();
    let b = format!("127.0.0.1:{port_b}");
    eventually(10, "moved to broker B", async || {
        agent.broker().as_deref() == Some(b.as_str())
    })
    .await;
    let second = within(10, "lock on B", session.lock("pad-2"))
        .await
        .expect("lock after failover");
    assert!(second.token() > first.token());
    let on_b = fake
        .received_op("lock.acquire")
        .into_iter()
        .filter(|r| r.responder == responder_b)
        .count();
    assert_eq!(on_b, 1, "the new lock went through broker B");
    eventually(5, "keepalives acknowledged through B", async || {
        fake.received_op("lease.keepalive")
            .iter()
            .any(|k| k.responder == responder_b && k.answered_ok)
    })
    .await;
    let mut state = session.watch();
    within(5, "session live", state.wait_for(|s| s.is_live()))
        .await
        .expect("the keeper runs");
    assert_eq!(session.state(), SessionState::Live);
    let stats = agent.stats();
    assert!(stats.connects_total >= 2, "{stats:?}");
    assert!(stats.connection_errors_total >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_skips_a_dead_broker() {
    let port_b = start_broker();
    let fake = Fake::new();
    fake.serve(port_b).await;
    let dead = free_port();
    let agent = within(
        10,
        "connect",
        Agent::connect(agent_config("d1", &[dead, port_b])),
    )
    .await
    .expect("the second broker accepts");
    assert_eq!(agent.broker(), Some(format!("127.0.0.1:{port_b}")));
    assert!(agent.stats().connection_errors_total >= 1);
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(session.state(), SessionState::Live);
}

/// A node cut off from the majority keeps its broker up and answers every request
/// `unavailable`: the agent leaves that broker for the next one once it has heard nothing else
/// for a while, and the request (same id) succeeds there; the session lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_answers_only_unavailable_is_left_for_the_next_one() {
    let (port_a, port_b) = (start_broker(), start_broker());
    let fake = Fake::new();
    let responder_a = fake.serve(port_a).await;
    let responder_b = fake.serve(port_b).await;
    let agent = within(
        10,
        "connect",
        Agent::connect(agent_config("d1", &[port_a, port_b])),
    )
    .await
    .expect("connect");
    let session = within(10, "session", agent.session(5_000))
        .await
        .expect("session");
    fake.cut_off(responder_a);
    let guard = within(10, "lock through the next broker", session.lock("pad-1"))
        .await
        .expect("granted through broker B");
    assert_eq!(agent.broker(), Some(format!("127.0.0.1:{port_b}")));
    let acquires = fake.received_op("lock.acquire");
    assert!(
        acquires
            .iter()
            .any(|r| r.responder == responder_a && !r.answered_ok),
        "first refused by the cut-off node: {acquires:?}"
    );
    let last = acquires.last().expect("an acquire");
    assert_eq!(last.responder, responder_b);
    assert!(last.answered_ok);
    assert!(
        acquires.iter().all(|r| r.id == acquires[0].id),
        "one id throughout"
    );
    assert_eq!(session.state(), SessionState::Live);
    drop(guard);
}
