//! End to end: one agent floods the node with requests as fast as a bounded loop can publish
//! them (a raw MQTT client, no SDK backoff) while a few agents hold short leases and keep
//! locking: none of their leases expires, every one of their requests succeeds, and the
//! flooder is answered `rate_limited` once past its rate. On the agent endpoint every flood
//! request is answered (the endpoint stops reading the flooder meanwhile); behind an external
//! broker, whose one connection carries every agent, the flooder's requests past a refusal are
//! dropped unread until its bucket refills. No timing is asserted: the loop is bounded in
//! count and in time, and the checks are on answers, counters and session states.

mod common;

use std::time::Duration;

use common::{Mosquitto, Node, Raw, agent_session, within};
use hivekeeper_agent::SessionState;
use serde_json::json;
use tokio::time::Instant;

/// The flooder's rate and burst: low, so a short flood passes them many times over.
const RATE_PER_S_MAX: u32 = 200;
/// The shortest TTL the service accepts by default: the flood must not outlast a lease's
/// keepalives.
const TTL_MS: u64 = 500;
/// Bounds of the flood.
const FLOOD_REQUESTS_MAX: usize = 20_000;
const FLOOD_SECS_MAX: u64 = 8;
/// Agents holding leases meanwhile.
const HOLDERS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_agent_is_rate_limited_and_expires_no_other_agents_lease() {
    flood_beside_holders(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_an_external_broker_a_flooder_is_dropped_before_it_delays_anyone() {
    let broker = Mosquitto::start().await;
    flood_beside_holders(Some(&broker)).await;
}

/// The flood beside the holders, on the agent endpoint or behind `broker`.
async fn flood_beside_holders(broker: Option<&Mosquitto>) {
    let dir = tempfile::tempdir().expect("temp data dir");
    let config = dir.path().join("fair.toml");
    std::fs::write(
        &config,
        format!("[node]\nrate_per_s_max = {RATE_PER_S_MAX}\nrate_burst_max = {RATE_PER_S_MAX}\n"),
    )
    .expect("write the config");
    let data = dir.path().join("data");
    let config_arg = config.to_str().expect("a UTF-8 temp path");
    let (node, port) = match broker {
        None => {
            let node = Node::start_with_args(&data, &["--config", config_arg]).await;
            let port = node.mqtt_port();
            (node, port)
        }
        Some(broker) => {
            let args = ["--config", config_arg];
            let node = Node::start_external_with_args(&data, broker.port, &args).await;
            (node, broker.port)
        }
    };

    let mut holders = Vec::new();
    for i in 0..HOLDERS {
        holders.push(agent_session(&format!("holder-{i}"), port, TTL_MS).await);
    }
    let mut flooder = Raw::connect(port, "flooder").await;

    // The holders lock and release their own locks in a loop while the flood runs.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut cycles = Vec::new();
    for (i, (_, session)) in holders.iter().enumerate() {
        let session = session.clone();
        let stop = stop.clone();
        cycles.push(tokio::spawn(async move {
            let mut done = 0u64;
            while !*stop.borrow() {
                let guard = session
                    .lock(&format!("holder-{i}/own"))
                    .await
                    .unwrap_or_else(|error| panic!("holder-{i}'s lock: {error}"));
                guard
                    .release()
                    .await
                    .unwrap_or_else(|error| panic!("holder-{i}'s release: {error}"));
                done += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            done
        }));
    }

    // The flood: writes the node must put through the log if it admits them (a release of a
    // lease that does not exist), published as fast as the client takes them.
    let started = Instant::now();
    let mut sent = 0;
    while sent < FLOOD_REQUESTS_MAX && started.elapsed() < Duration::from_secs(FLOOD_SECS_MAX) {
        let request = json!({
            "id": format!("f-{sent}"),
            "op": "lock.release",
            "name": "anything",
            "lease": "0000000000000001",
        });
        flooder.send(request.to_string()).await;
        sent += 1;
    }
    let _ = stop_tx.send(true);
    let mut holder_cycles = Vec::new();
    for cycle in cycles {
        holder_cycles.push(
            within(20, "a holder's loop ends", cycle)
                .await
                .expect("no panic"),
        );
    }

    // Every flood request is answered, or (behind a broker) dropped while the flooder is
    // paused: admitted ones `lease_not_found`, the rest `rate_limited` with the configured
    // rate in the message.
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    let mut rate_message = None;
    let mut answered = 0;
    let mut dropped = 0.0;
    // Settled when every request is accounted for, or when neither an answer nor a drop came
    // for a second (what the broker dropped never comes), at most 20 s.
    let settled_by = Instant::now() + Duration::from_secs(20);
    let mut quiet = false;
    while answered + (dropped as usize) < sent && Instant::now() < settled_by {
        let Some(response) = flooder.try_next(500).await else {
            let metrics = common::metrics_text(node.metrics_port)
                .await
                .expect("the node's /metrics");
            let now_dropped =
                common::metric_sum(&metrics, "hivekeeper_mqtt_messages_dropped_total", &[]);
            if quiet && now_dropped == dropped {
                break;
            }
            quiet = now_dropped == dropped;
            dropped = now_dropped;
            continue;
        };
        quiet = false;
        answered += 1;
        let code = response["error"]["code"]
            .as_str()
            .unwrap_or("ok")
            .to_string();
        if code == "rate_limited" {
            rate_message.get_or_insert_with(|| response["error"]["message"].clone());
        }
        *codes.entry(code).or_default() += 1;
    }
    match broker {
        None => assert_eq!(
            (answered, dropped),
            (sent, 0.0),
            "the endpoint answers every flood request (it stops reading the flooder instead \
             of dropping): {codes:?}"
        ),
        // The broker itself may drop some of the flood too (Mosquitto queues at most
        // `max_queued_messages` for the service's session): those reach nobody.
        Some(_) => assert!(
            dropped > 0.0 && answered + dropped as usize <= sent,
            "behind a broker, the paused flooder's requests are dropped unanswered: \
             {sent} sent, {dropped} dropped, answers {codes:?}"
        ),
    }
    assert!(
        codes.get("rate_limited").is_some_and(|n| *n > 0),
        "the flooder was rate limited after {sent} requests: {codes:?}"
    );
    assert_eq!(
        codes.keys().collect::<Vec<_>>(),
        ["lease_not_found", "rate_limited"],
        "the admitted ones were applied, the rest refused: {codes:?}"
    );
    assert_eq!(
        rate_message.expect("a rate_limited answer"),
        json!(format!(
            "agent flooder is over its request rate: rate_per_s_max is {RATE_PER_S_MAX} a \
             second, rate_burst_max {RATE_PER_S_MAX}; retry with backoff"
        ))
    );

    // No holder's lease expired, and each holder's loop went on through the flood.
    for (i, (_, session)) in holders.iter().enumerate() {
        assert_eq!(session.state(), SessionState::Live, "holder-{i}'s session");
        assert!(holder_cycles[i] > 0, "holder-{i} locked during the flood");
        let guard = within(10, "a lock after the flood", session.lock("after"))
            .await
            .unwrap_or_else(|error| panic!("holder-{i} locks after the flood: {error}"));
        guard.release().await.expect("release after the flood");
    }
    let metrics = common::metrics_text(node.metrics_port)
        .await
        .expect("the node's /metrics");
    let expired = common::metric_sum(
        &metrics,
        "hivekeeper_leases_ended_total",
        &[("reason", "expired")],
    );
    assert_eq!(expired, 0.0, "no lease expired during the flood");
    let limited = common::metric_sum(
        &metrics,
        "hivekeeper_requests_total",
        &[("code", "rate_limited")],
    );
    assert_eq!(
        limited as usize, codes["rate_limited"],
        "each refusal is counted"
    );
}
