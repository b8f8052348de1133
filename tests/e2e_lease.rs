//! End to end: a holder whose keepalives stop (its network dies) loses its lock to the next
//! waiter within TTL + 250 ms of its last keepalive, and its SDK reports the session lost
//! before that grant.

mod common;

use std::time::Duration;

use common::{Node, Proxy, agent, agent_config, inspect_lock, release, wait_for_waiters, within};
use hivekeeper_agent::{Agent, SessionState};
use tokio::time::Instant;

const TTL_MS: u64 = 1_000;
/// The bound on the reclaim delay past the TTL that this test holds the service to.
const SLACK_MS: u64 = 250;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_holder_is_reclaimed_within_ttl_plus_250ms_and_knew_it_first() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;

    // The holder reaches the broker through a proxy the test can kill.
    let proxy = Proxy::start(port).await;
    let holder_agent = within(
        20,
        "holder connects through the proxy",
        Agent::connect(agent_config("holder", proxy.port)),
    )
    .await
    .expect("the holder connects");
    let holder = within(10, "holder session", holder_agent.session(TTL_MS))
        .await
        .expect("a 1 s session");
    let guard = within(10, "holder locks", holder.lock("dock"))
        .await
        .expect("the lock is free");
    let holder_token = guard.token();

    let (_waiter_agent, waiter) = common::agent_session("waiter", port, 5_000).await;
    let granted = tokio::spawn(async move {
        let guard = waiter.lock("dock").await;
        (Instant::now(), guard, waiter)
    });
    wait_for_waiters(&observer, "dock", &["waiter".to_string()]).await;
    // Several keepalive rounds (every TTL/3) go through the proxy before it dies.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(holder.state(), SessionState::Live);

    let lost = {
        let holder = holder.clone();
        tokio::spawn(async move {
            let state = holder.lost().await;
            (Instant::now(), state)
        })
    };
    // Every keepalive the service saw was sent before this instant.
    let killed_at = Instant::now();
    proxy.kill();

    let (lost_at, lost_state) = within(10, "the holder's SDK notices", lost)
        .await
        .expect("the lost() task");
    let (granted_at, next, _waiter) = within(10, "the waiter is granted", granted)
        .await
        .expect("the waiting task");
    let next = next.expect("the waiter gets the lock once the holder's lease expires");
    let lost_after = lost_at - killed_at;
    let granted_after = granted_at - killed_at;
    eprintln!(
        "holder lost() after {lost_after:?} ({lost_state:?}); waiter granted after \
         {granted_after:?}; bound TTL + {SLACK_MS} ms = {} ms",
        TTL_MS + SLACK_MS
    );
    assert_ne!(lost_state, SessionState::Live);
    assert!(
        lost_at < granted_at,
        "the stopped holder must know it lost the lease ({lost_after:?}) before the next \
         holder is granted ({granted_after:?})"
    );
    assert!(
        granted_after <= Duration::from_millis(TTL_MS + SLACK_MS),
        "reclaimed {granted_after:?} after the holder's last keepalive, bound {} ms",
        TTL_MS + SLACK_MS
    );
    assert!(
        next.token() > holder_token,
        "{} > {holder_token}",
        next.token()
    );
    let (holders, waiters) = inspect_lock(&observer, "dock").await;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].agent, "waiter");
    assert!(waiters.is_empty(), "{waiters:?}");
    release(next, "the waiter releases").await;
    drop(guard);
}

/// Regression: a keepalive that arrives after a lease's deadline, before the leader's next look
/// for overdue leases, was acknowledged — the agent believed it held for another TTL while the
/// expiry handed its resources on. With the leader looking only every 3 s, a keepalive 700 ms
/// into a 500 ms lease must be refused.
#[tokio::test]
async fn a_keepalive_after_the_deadline_is_refused_not_acknowledged() {
    let data = tempfile::tempdir().expect("tempdir");
    let config = data.path().join("slow-keeper.toml");
    std::fs::write(&config, "[node]\nkeeper_tick_ms = 3000\n").expect("config");
    let node_dir = data.path().join("data");
    let node = common::Node::start_with_args(
        &node_dir,
        &["--config", config.to_str().expect("utf-8 path")],
    )
    .await;
    let mut raw = common::Raw::connect(node.mqtt_port(), "late-keeper").await;
    let lease = raw.grant("grant", 500).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let answer = raw
        .call(serde_json::json!({"id": "late", "op": "lease.keepalive", "lease": lease}))
        .await;
    assert_eq!(
        common::code(&answer),
        Some("lease_not_found"),
        "a keepalive past the deadline must not extend the lease: {answer}"
    );
}
