//! End to end: bad input from a raw MQTT client. Every bad request on a valid request topic is
//! answered on the agent's response topic with the documented code and changes nothing;
//! garbage on a topic that names no valid agent is counted on /metrics and dropped, and the
//! node stays up.

mod common;

use common::{Node, Raw, code, metrics_text, wait_metric_sum, within};
use serde_json::{Value, json};

/// What `inspect` says about every resource the test touches, without the timestamps'
/// context lost: the whole `holders` and `waiters` arrays (and `limit`).
async fn state(raw: &mut Raw, round: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    for (i, (kind, name)) in [
        ("lock", "door"),
        ("lock", "window"),
        ("sem", "pumps"),
        ("waypoint", "pad-1"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut response = raw.inspect(&format!("{round}-{i}"), kind, name).await;
        // The id differs per call; everything else must not change.
        response["id"] = Value::Null;
        seen.push(response);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_with_its_code_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut bad = Raw::connect(port, "drone-bad").await;
    let mut other = Raw::connect(port, "drone-other").await;
    let lease = bad.grant("g", 60_000).await;
    let others = other.grant("g", 60_000).await;
    // The other agent holds the door; the bad agent holds the window.
    let held = other
        .call(json!({"id": "o1", "op": "lock.acquire", "name": "door", "lease": others}))
        .await;
    assert_eq!(held["ok"], true, "{held}");
    let window = bad
        .call(json!({"id": "b1", "op": "lock.acquire", "name": "window", "lease": lease}))
        .await;
    assert_eq!(window["ok"], true, "{window}");
    let before = state(&mut bad, "before").await;
    let bad_requests_before = wait_metric_sum(
        node.metrics_port,
        "hivekeeper_mqtt_bad_requests_total",
        10,
        |_| true,
    )
    .await;

    let oversized = |bytes: usize| {
        let mut request = json!({"id": "big", "op": "lock.acquire", "name": "door",
                                 "lease": lease, "pad": ""})
        .to_string();
        let fill = bytes - request.len();
        request.insert_str(request.len() - 2, &"x".repeat(fill));
        assert_eq!(request.len(), bytes);
        request
    };
    // (payload, expected code, expected id: None for `"id": null`)
    let decode_errors: Vec<(String, &str, Option<&str>)> = vec![
        // Malformed JSON, not an object, no usable id: nothing to echo.
        (r#"{"id":"m1","op":"#.into(), "bad_request", None),
        ("not json at all".into(), "bad_request", None),
        ("[1,2,3]".into(), "bad_request", None),
        (
            json!({"op": "lock.acquire", "name": "door", "lease": lease}).to_string(),
            "bad_request",
            None,
        ),
        (
            json!({"id": 12, "op": "inspect", "kind": "lock", "name": "door"}).to_string(),
            "bad_request",
            None,
        ),
        // Unknown op, missing op.
        (
            json!({"id": "u1", "op": "lock.steal", "name": "door", "lease": lease}).to_string(),
            "unknown_op",
            Some("u1"),
        ),
        (json!({"id": "u2"}).to_string(), "bad_request", Some("u2")),
        // Missing fields.
        (
            json!({"id": "f1", "op": "lock.acquire", "lease": lease}).to_string(),
            "bad_request",
            Some("f1"),
        ),
        (
            json!({"id": "f2", "op": "lock.release", "name": "window"}).to_string(),
            "bad_request",
            Some("f2"),
        ),
        (
            json!({"id": "f3", "op": "sem.acquire", "name": "pumps", "lease": lease}).to_string(),
            "bad_request",
            Some("f3"),
        ),
        // Wrong types and out-of-range values.
        (
            json!({"id": "t1", "op": "lock.acquire", "name": 42, "lease": lease}).to_string(),
            "bad_request",
            Some("t1"),
        ),
        (
            json!({"id": "t2", "op": "lock.acquire", "name": "door", "lease": lease,
                   "wait_ms": "soon"})
            .to_string(),
            "bad_request",
            Some("t2"),
        ),
        (
            r#"{"id":"t3","op":"lease.grant","ttl_ms":1e3}"#.into(),
            "bad_request",
            Some("t3"),
        ),
        (
            json!({"id": "t4", "op": "lease.grant", "ttl_ms": -5}).to_string(),
            "bad_request",
            Some("t4"),
        ),
        (
            json!({"id": "t5", "op": "sem.acquire", "name": "pumps", "limit": 3,
                   "lease": lease, "permits": 5})
            .to_string(),
            "bad_request",
            Some("t5"),
        ),
        (
            json!({"id": "t6", "op": "waypoint.reserve", "name": "pad-1", "lease": lease,
                   "lat": 47.0})
            .to_string(),
            "bad_request",
            Some("t6"),
        ),
        (
            json!({"id": "t7", "op": "lock.acquire", "name": "door", "lease": lease,
                   "wiat_ms": 0})
            .to_string(),
            "bad_request",
            Some("t7"),
        ),
        // Over 8 KiB (and under the broker's 64 KiB packet limit): not read at all.
        (oversized(9_000), "too_large", None),
        (oversized(60_000), "too_large", None),
    ];
    let decode_error_count = decode_errors.len() as f64;
    // Refused by the service after decoding.
    let service_errors: Vec<(String, &str, Option<&str>)> = vec![
        // A TTL under the configured minimum (500 ms).
        (
            json!({"id": "s1", "op": "lease.grant", "ttl_ms": 100}).to_string(),
            "bad_request",
            Some("s1"),
        ),
        // Someone else's lease.
        (
            json!({"id": "s2", "op": "lock.release", "name": "door", "lease": others}).to_string(),
            "forbidden",
            Some("s2"),
        ),
        (
            json!({"id": "s3", "op": "lock.acquire", "name": "door", "lease": others,
                   "wait_ms": 0})
            .to_string(),
            "forbidden",
            Some("s3"),
        ),
        (
            json!({"id": "s4", "op": "lease.keepalive", "lease": others}).to_string(),
            "forbidden",
            Some("s4"),
        ),
        (
            json!({"id": "s5", "op": "lease.revoke", "lease": others}).to_string(),
            "forbidden",
            Some("s5"),
        ),
        // Releases of what the lease does not hold.
        (
            json!({"id": "s6", "op": "lock.release", "name": "door", "lease": lease}).to_string(),
            "not_holder",
            Some("s6"),
        ),
        (
            json!({"id": "s7", "op": "sem.release", "name": "pumps", "lease": lease}).to_string(),
            "not_holder",
            Some("s7"),
        ),
        (
            json!({"id": "s8", "op": "waypoint.release", "name": "pad-1", "lease": lease})
                .to_string(),
            "not_holder",
            Some("s8"),
        ),
        // A lease that does not exist.
        (
            json!({"id": "s9", "op": "lock.acquire", "name": "door",
                   "lease": "00000000deadbeef", "wait_ms": 0})
            .to_string(),
            "lease_not_found",
            Some("s9"),
        ),
    ];

    for (payload, expected, id) in decode_errors.into_iter().chain(service_errors) {
        let shown = if payload.len() > 120 {
            format!("<{} bytes>", payload.len())
        } else {
            payload.clone()
        };
        bad.send(payload).await;
        let response = bad.next(10).await;
        assert_eq!(response["ok"], false, "{shown} -> {response}");
        assert_eq!(code(&response), Some(expected), "{shown} -> {response}");
        assert_eq!(response["id"].as_str(), id, "{shown} -> {response}");
        assert!(
            response["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "a failure explains itself: {response}"
        );
    }

    let after = state(&mut bad, "after").await;
    assert_eq!(before, after, "bad input changed the state");
    // Both leases are alive and still bound to their agents.
    let kept = other
        .call(json!({"id": "o2", "op": "lease.keepalive", "lease": others}))
        .await;
    assert_eq!(kept["ok"], true, "{kept}");
    let kept = bad
        .call(json!({"id": "b2", "op": "lease.keepalive", "lease": lease}))
        .await;
    assert_eq!(kept["ok"], true, "{kept}");
    assert_eq!(bad.try_next(300).await, None, "one response per request");
    let counted = wait_metric_sum(
        node.metrics_port,
        "hivekeeper_mqtt_bad_requests_total",
        10,
        |n| n >= bad_requests_before + decode_error_count,
    )
    .await;
    eprintln!(
        "bad_requests_total {bad_requests_before} -> {counted} after {decode_error_count} decode errors"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_a_topic_without_a_valid_agent_is_counted_and_dropped() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let mut node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut raw = Raw::connect(port, "drone-7").await;
    let lease = raw.grant("g", 60_000).await;
    // The agent endpoint refuses a publish outside the agent's own request topic before it
    // reaches the bridge: counted as a refused publish.
    let before = wait_metric_sum(
        node.metrics_port,
        "hivekeeper_endpoint_publishes_refused_total",
        10,
        |_| true,
    )
    .await;

    let long_id = "a".repeat(65);
    let topics = [
        "hk/v1/req/bad*agent".to_string(),
        "hk/v1/req/bad agent".to_string(),
        format!("hk/v1/req/{long_id}"),
        "hk/v1/req/dr\u{f6}ne".to_string(),
    ];
    let payloads: [&[u8]; 3] = [
        b"\xff\xfe garbage \x00",
        br#"{"id":"1","op":"lease.grant","ttl_ms":1000}"#,
        b"",
    ];
    for topic in &topics {
        for payload in payloads {
            raw.publish_to(topic, payload).await;
        }
    }
    let sent = (topics.len() * payloads.len()) as f64;
    let after = wait_metric_sum(
        node.metrics_port,
        "hivekeeper_endpoint_publishes_refused_total",
        15,
        |n| n >= before + sent,
    )
    .await;
    eprintln!("publishes_refused_total {before} -> {after} after {sent} messages on bad topics");

    // Still up, still serving, nothing was done for the bad topics.
    assert!(node.is_running(), "the node died:\n{}", node.log_tail(30));
    let acquired = raw
        .call(json!({"id": "a1", "op": "lock.acquire", "name": "door", "lease": lease}))
        .await;
    assert_eq!(acquired["ok"], true, "{acquired}");
    assert_eq!(raw.try_next(300).await, None, "no stray responses");
    let text = within(5, "metrics", metrics_text(node.metrics_port))
        .await
        .expect("/metrics answers");
    assert!(
        text.contains("# HELP hivekeeper_mqtt_bad_topics_total"),
        "/metrics serves the bridge counters"
    );
}
