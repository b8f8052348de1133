//! Requests over real MQTT against the fake service: a lost response or an `unavailable` or
//! `rate_limited` answer is retried under the SAME id, other refusals come back typed, responses nobody
//! waits for are dropped and counted, and an unanswered request ends at its deadline.

mod common;

use common::{agent_config, broker_with_fake, eventually, within};
use hivekeeper_agent::protocol::{ErrorCode, Op, ResourceKind, Response, Success};
use hivekeeper_agent::{Agent, AgentConfig, AgentError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_response_is_retried_under_the_same_id() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    fake.drop_responses("lock.acquire", 1);
    let guard = within(10, "lock", session.lock("door"))
        .await
        .expect("granted on retry");
    let sent = fake.received_op("lock.acquire");
    assert!(sent.len() >= 2, "retried: {} sends", sent.len());
    assert!(
        sent.iter().all(|r| r.id == sent[0].id),
        "same id on every send: {:?}",
        sent.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    // The retry was answered with the first outcome: one grant, one token.
    assert!(fake.holds(session.lease(), "door"));
    assert_eq!(guard.token(), 1, "the only token the fake handed out");
    assert!(agent.stats().resends_total >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_is_retried_under_the_same_id() {
    passing_refusals_are_retried_under_the_same_id(ErrorCode::Unavailable).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_is_retried_under_the_same_id() {
    passing_refusals_are_retried_under_the_same_id(ErrorCode::RateLimited).await;
}

/// Two `code` answers to a `lease.grant`, then the grant: three sends of one id.
async fn passing_refusals_are_retried_under_the_same_id(code: ErrorCode) {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    fake.transient("lease.grant", code, 2);
    let session = within(10, "session", agent.session(1_000))
        .await
        .unwrap_or_else(|error| panic!("granted after two {code} answers: {error}"));
    let sent = fake.received_op("lease.grant");
    assert_eq!(sent.len(), 3, "two refusals, then the grant");
    assert!(sent.iter().all(|r| r.id == sent[0].id), "one id throughout");
    assert!(sent[2].answered_ok);
    assert!(!session.lease().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_refusals_come_back_typed() {
    let (port, _fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let session = within(10, "session", agent.session(1_000))
        .await
        .expect("session");
    let release = Op::LockRelease {
        name: "never-taken".into(),
        lease: session.lease().into(),
    };
    let refused = within(10, "release", agent.request(release)).await;
    assert!(
        matches!(
            refused,
            Err(AgentError::Service {
                code: ErrorCode::NotHolder,
                ..
            })
        ),
        "{refused:?}"
    );
    let unknown = Op::LeaseKeepalive {
        lease: "no-such-lease".into(),
    };
    let refused = within(10, "keepalive", agent.request(unknown)).await;
    assert_eq!(
        refused.err().and_then(|e| e.code()),
        Some(ErrorCode::LeaseNotFound)
    );
    assert_eq!(agent.stats().resends_total, 0, "refusals are not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_nobody_waits_for_are_dropped_and_counted() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let stray = Response::ok("0000000000000000-99", Success::default());
    fake.send_raw_response("d1", stray.encode()).await;
    fake.send_raw_response("d1", b"not json".to_vec()).await;
    eventually(5, "both counted", async || {
        let stats = agent.stats();
        stats.responses_unknown_total == 1 && stats.responses_undecodable_total == 1
    })
    .await;
    // The agent is unharmed.
    within(10, "session after", agent.session(1_000))
        .await
        .expect("session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_request_ends_at_its_deadline() {
    let (port, fake) = broker_with_fake().await;
    let config = AgentConfig {
        request_deadline_ms: 1_000,
        ..agent_config("d1", &[port])
    };
    let agent = within(10, "connect", Agent::connect(config))
        .await
        .expect("connect");
    fake.silence("inspect");
    let inspect = Op::Inspect {
        kind: ResourceKind::Lock,
        name: "door".into(),
    };
    let started = tokio::time::Instant::now();
    let result = within(10, "inspect", agent.request(inspect)).await;
    assert!(
        matches!(result, Err(AgentError::Timeout { op: "inspect", .. })),
        "{result:?}"
    );
    let waited = started.elapsed().as_millis();
    assert!(
        (1_000..4_000).contains(&waited),
        "ended at its deadline: {waited} ms"
    );
    let sent = fake.received_op("inspect");
    assert!(sent.len() >= 2, "resent before giving up");
    assert!(sent.iter().all(|r| r.id == sent[0].id));
}

/// A request larger than the service accepts is refused `too_large` at once, naming both sizes,
/// and never sent: the service's `too_large` answer to it would carry no id to match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_is_refused_before_it_is_sent() {
    let (port, fake) = broker_with_fake().await;
    let agent = within(10, "connect", Agent::connect(agent_config("d1", &[port])))
        .await
        .expect("connect");
    let op = Op::KvPut {
        key: "config/big".into(),
        value: "x".repeat(9_000),
        lease: None,
        prev_kv: None,
    };
    let error = within(10, "refusal", agent.request(op))
        .await
        .expect_err("too large to send");
    let AgentError::Service { code, message } = &error else {
        panic!("a service-shaped refusal: {error:?}");
    };
    assert_eq!(*code, ErrorCode::TooLarge);
    assert!(
        message.contains("kv.put request is 9") && message.contains("8192"),
        "{message}"
    );
    assert!(fake.received_op("kv.put").is_empty(), "nothing sent");
    assert_eq!(agent.stats().resends_total, 0);
}
