//! End to end: an agent's attacks on another (sniffing its traffic, spoofing its requests,
//! forging its responses, taking over its client id), tried against
//! `hivekeeper serve --mqtt-url` behind a Mosquitto hardened exactly as docs/SECURITY.md says
//! (the files in `deploy/mosquitto/`: a password file, `pattern` ACLs, the client id forced to
//! the username). Mallory is a legitimate agent of the same broker; each attack is refused and
//! the victim keeps its lease and its lock.
//!
//! Ordering without sleeps: Mosquitto handles one client's publishes in order, and the service
//! answers a client's own request only after the broker routed everything that client
//! published before it. So once Mallory's own request is answered, her earlier attacks have
//! been routed (or refused) and their effect, if any, is visible.

mod common;

use common::{Node, Raw, code, connack};
use hivekeeper_test_support::Mosquitto;
use rumqttc::ConnectReturnCode;
use serde_json::json;

/// The service's login on the broker (the ACL file's `user hivekeeper`).
const SERVICE: (&str, &str) = ("hivekeeper", "service-secret-1");
const VICTIM: (&str, &str) = ("drone-victim", "victim-secret-1");
const MALLORY: (&str, &str) = ("mallory", "mallory-secret-1");

/// A hardened broker with the three users, and the service logged in to it.
async fn hardened(dir: &std::path::Path) -> (Mosquitto, Node) {
    let broker = Mosquitto::start_secured(&[SERVICE, VICTIM, MALLORY]).await;
    let config = dir.join("hivekeeper.toml");
    std::fs::write(
        &config,
        format!(
            "[mqtt.mode]\nkind = \"external\"\nurl = \"mqtt://127.0.0.1:{}\"\n\
             username = \"{}\"\npassword = \"{}\"\n",
            broker.port, SERVICE.0, SERVICE.1
        ),
    )
    .expect("write the config file");
    let config = config.to_str().expect("a UTF-8 temp path").to_string();
    let node =
        Node::start_external_with_args(&dir.join("data"), broker.port, &["--config", &config])
            .await;
    (broker, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacks_through_a_hardened_mosquitto_are_refused_and_the_victim_keeps_its_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, _node) = hardened(dir.path()).await;
    let port = broker.port;

    // The victim takes a lease and a lock.
    let mut victim = Raw::connect_login(port, VICTIM.0, Some(VICTIM)).await;
    let lease = victim.grant("v1", 60_000).await;
    let acquired = victim
        .call(json!({"id": "v2", "op": "lock.acquire", "name": "pad-1", "lease": lease}))
        .await;
    assert_eq!(acquired["ok"], true, "{acquired}");
    let token = acquired["token"].clone();

    // Anonymous, and the victim's name with a wrong password: refused at CONNECT.
    assert_eq!(
        connack(port, "stranger", None).await.expect("a CONNACK"),
        ConnectReturnCode::NotAuthorized
    );
    assert_eq!(
        connack(port, VICTIM.0, Some((VICTIM.0, "guessed")))
            .await
            .expect("a CONNACK"),
        ConnectReturnCode::NotAuthorized
    );

    let mut mallory = Raw::connect_login(port, MALLORY.0, Some(MALLORY)).await;
    // Sniff: everything, every response topic, the victim's own.
    for filter in ["#", "hk/v1/rsp/+", "hk/v1/rsp/drone-victim", "hk/v1/evt/+"] {
        mallory.subscribe(filter).await;
    }
    // Spoof: the victim's request topic, to revoke its lease and release its lock.
    mallory
        .publish_to(
            "hk/v1/req/drone-victim",
            json!({"id": "m1", "op": "lock.release", "name": "pad-1", "lease": lease}).to_string(),
        )
        .await;
    mallory
        .publish_to(
            "hk/v1/req/drone-victim",
            json!({"id": "m2", "op": "lease.revoke", "lease": lease}).to_string(),
        )
        .await;
    // Forge: a grant on the victim's response topic, with the id the victim uses next.
    mallory
        .publish_to(
            "hk/v1/rsp/drone-victim",
            json!({"id": "v3", "ok": true, "token": 999_999}).to_string(),
        )
        .await;
    // Mallory's own request: its answer means the broker routed (or refused) all her earlier
    // publishes (module doc).
    let own = mallory.grant("m3", 10_000).await;
    assert!(!own.is_empty());

    // The victim: the next thing on its response topic answers its own request (no forged
    // token), its lease is alive and it still holds the lock with the same token.
    let kept = victim
        .call(json!({"id": "v3", "op": "lease.keepalive", "lease": lease}))
        .await;
    assert_eq!(kept, json!({"id": "v3", "ok": true, "ttl_ms": 60_000}));
    let held = victim
        .call(json!({"id": "v4", "op": "fence.check", "resource": "pad-1", "token": token}))
        .await;
    assert_eq!(held["ok"], true, "{held}");
    assert_eq!(code(&held), None, "{held}");
    // Mallory saw none of the victim's traffic: her only messages were her own responses.
    assert_eq!(mallory.try_next_elsewhere(500).await, None);

    // Take over: the victim's client id with Mallory's login. The broker makes the client id
    // "mallory", so it replaces Mallory's own connection and never the victim's.
    drop(mallory);
    let victim_subscriptions = victim.subscriptions();
    assert_eq!(
        connack(port, VICTIM.0, Some(MALLORY))
            .await
            .expect("a CONNACK"),
        ConnectReturnCode::Success
    );
    let kept = victim
        .call(json!({"id": "v5", "op": "lease.keepalive", "lease": lease}))
        .await;
    assert_eq!(kept, json!({"id": "v5", "ok": true, "ttl_ms": 60_000}));
    assert_eq!(
        victim.subscriptions(),
        victim_subscriptions,
        "the victim was never disconnected (it would have subscribed again)"
    );
}
