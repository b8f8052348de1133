//! End to end over MQTT in raw JSON, one `hivekeeper serve` per test: lock-delay and max-hold
//! (docs/PROTOCOL.md §6.1), ended by the node on time with no client action.
//!
//! - Lock-delay: an operator revokes a lease granted with `lock_delay_ms` while it holds a
//!   lock another agent waits for. The holder is told `lease.revoked` and `lock.lost`; the lock
//!   has no holder during the delay (`inspect`), a try is `would_block` naming the delay, the
//!   waiter is not granted before the delay has passed and then is, with a higher token,
//!   without asking again.
//! - Max-hold: a lock acquired with `max_hold_ms` is taken from its live holder at its grant
//!   time plus that much: the holder is told `lock.lost` with `"reason":"max_hold"`, the waiter
//!   is granted with a higher token, the holder's lease lives on, and /metrics counts the
//!   release under `reason="max_hold"`.

mod common;

use std::time::{Duration, Instant};

use common::{Node, Raw, code, eventually, metric_sum, metrics_text};
use serde_json::{Value, json};

/// An agent that also reads its event topic, with a lease of a minute (`lock_delay_ms` as
/// given), and the lease id.
async fn agent(port: u16, name: &str, lock_delay_ms: u64) -> (Raw, String) {
    let mut raw = Raw::connect(port, name).await;
    raw.subscribe(&format!("hk/v1/evt/{name}")).await;
    let granted = raw
        .call(json!({"id": "g", "op": "lease.grant", "ttl_ms": 60_000,
                     "lock_delay_ms": lock_delay_ms}))
        .await;
    assert_eq!(granted["ok"], true, "{granted}");
    let lease = granted["lease"].as_str().expect("a lease").to_string();
    (raw, lease)
}

/// The token of a grant answering `id`.
fn token(response: &Value, id: &str) -> u64 {
    assert_eq!(response["id"], id, "{response}");
    assert_eq!(response["ok"], true, "{response}");
    response["token"].as_u64().expect("a grant has a token")
}

/// The agents of `inspect`'s `holders` or `waiters`.
fn agents(inspection: &Value, which: &str) -> Vec<String> {
    let rows = inspection[which].as_array().expect("a list");
    rows.iter()
        .map(|row| row["agent"].as_str().expect("an agent").to_string())
        .collect()
}

/// Waits until `observer` sees `waiter` queued on lock `name`.
async fn queued(observer: &mut Raw, name: &str, waiter: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = observer.inspect("i", "lock", name).await;
        if agents(&seen, "waiters") == [waiter] {
            return;
        }
        assert!(Instant::now() < deadline, "{waiter} never queued: {seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_revoke_holds_the_lock_back_for_the_lock_delay_then_grants_the_waiter() {
    const DELAY_MS: u64 = 1_500;
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut holder, lease_a) = agent(port, "pump-a", DELAY_MS).await;
    let (mut waiter, lease_b) = agent(port, "pump-b", 0).await;
    let mut operator = Raw::connect(port, "operator").await;

    let acquire = |id: &str, lease: &str| json!({"id": id, "op": "lock.acquire", "name": "pump-2", "lease": lease});
    let old_token = token(&holder.call(acquire("a1", &lease_a)).await, "a1");
    waiter.send(acquire("b1", &lease_b).to_string()).await;
    queued(&mut operator, "pump-2", "pump-b").await;

    let revoked_at = Instant::now();
    let revoke = json!({"id": "r1", "op": "admin.revoke", "lease": lease_a});
    assert_eq!(operator.call(revoke).await, json!({"id": "r1", "ok": true}));
    let mut told = Vec::new();
    for _ in 0..2 {
        told.push(holder.next_event(10).await.1);
    }
    told.sort_by_key(|event| event["event"].to_string());
    assert_eq!(
        told,
        vec![
            json!({"event": "lease.revoked", "lease": lease_a}),
            json!({"event": "lock.lost", "name": "pump-2", "token": old_token}),
        ]
    );

    // During the delay: no holder, the waiter still queued, a try refused naming the delay.
    let seen = operator.inspect("i2", "lock", "pump-2").await;
    assert_eq!(agents(&seen, "holders"), Vec::<String>::new(), "{seen}");
    assert_eq!(agents(&seen, "waiters"), ["pump-b"], "{seen}");
    let (mut third, lease_c) = agent(port, "pump-c", 0).await;
    let tried = third
        .call(
            json!({"id": "c1", "op": "lock.acquire", "name": "pump-2", "lease": lease_c,
                     "wait_ms": 0}),
        )
        .await;
    assert_eq!(code(&tried), Some("would_block"), "{tried}");
    let message = tried["error"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("lock \"pump-2\" is held back by its last holder's lock-delay until "),
        "{message}"
    );
    // Then the waiter is granted without asking again, once the delay has passed: the revoke's
    // entry was stamped after `revoked_at`, the grant's at least the delay after that.
    let new_token = token(&waiter.next(10).await, "b1");
    let waited = revoked_at.elapsed();
    assert!(
        waited >= Duration::from_millis(DELAY_MS),
        "granted {waited:?} after the revoke, inside the {DELAY_MS} ms delay"
    );
    assert!(new_token > old_token, "{new_token} > {old_token}");
    let seen = operator.inspect("i3", "lock", "pump-2").await;
    assert_eq!(agents(&seen, "holders"), ["pump-b"], "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_past_its_max_hold_is_lost_with_reason_max_hold_and_handed_to_the_waiter() {
    const MAX_HOLD_MS: u64 = 1_000;
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut holder, lease_a) = agent(port, "job-a", 0).await;
    let (mut waiter, lease_b) = agent(port, "job-b", 0).await;

    let granted_at = Instant::now();
    let bounded = json!({"id": "a1", "op": "lock.acquire", "name": "batch", "lease": lease_a,
                         "max_hold_ms": MAX_HOLD_MS});
    let old_token = token(&holder.call(bounded).await, "a1");
    waiter
        .send(
            json!({"id": "b1", "op": "lock.acquire", "name": "batch", "lease": lease_b})
                .to_string(),
        )
        .await;

    let (topic, lost) = holder.next_event(10).await;
    assert_eq!(topic, "hk/v1/evt/job-a");
    assert_eq!(
        lost,
        json!({"event": "lock.lost", "name": "batch", "token": old_token, "reason": "max_hold"})
    );
    let new_token = token(&waiter.next(10).await, "b1");
    assert!(new_token > old_token, "{new_token} > {old_token}");
    assert!(
        granted_at.elapsed() >= Duration::from_millis(MAX_HOLD_MS),
        "ended {:?} after the grant, before its {MAX_HOLD_MS} ms",
        granted_at.elapsed()
    );

    // The hold ended, not the lease: it keeps alive, and releasing the lock is `not_holder`.
    let kept = holder
        .call(json!({"id": "k1", "op": "lease.keepalive", "lease": lease_a}))
        .await;
    assert_eq!(kept, json!({"id": "k1", "ok": true, "ttl_ms": 60_000}));
    let released = holder
        .call(json!({"id": "a2", "op": "lock.release", "name": "batch", "lease": lease_a}))
        .await;
    assert_eq!(code(&released), Some("not_holder"), "{released}");

    let port = node.metrics_port;
    let labels = [("kind", "lock"), ("reason", "max_hold")];
    eventually(10, "the max-hold release counted", || async {
        let text = metrics_text(port).await?;
        let count = metric_sum(&text, "hivekeeper_resource_releases_total", &labels);
        (count == 1.0).then_some(())
    })
    .await;
}
