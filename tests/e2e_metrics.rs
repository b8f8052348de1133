//! End to end: /metrics counts a scripted workload exactly. Raw clients run known numbers of
//! lease grants, keepalives, a revoke, an expiry, lock grants (one a handover), releases, a
//! refusal, fence checks and bad input against one `hivekeeper serve`; every counter must
//! move by exactly that much, the histograms must count every grant, release, keepalive and
//! request, and the gauges must end where the state is. The Raft metrics follow the log,
//! a snapshot and a restart.

mod common;

use common::{Node, Raw, code, eventually, metric, metric_sum, metrics_text, wait_metric, within};
use serde_json::json;

/// One series the test reads: metric name, the labels it must carry, and how much the
/// workload moves it.
type Expected = (&'static str, Vec<(&'static str, &'static str)>, f64);

/// Every series the test reads.
fn expected_deltas() -> Vec<Expected> {
    vec![
        ("hivekeeper_leases_granted_total", vec![], 3.0),
        (
            "hivekeeper_leases_ended_total",
            vec![("reason", "expired")],
            1.0,
        ),
        (
            "hivekeeper_leases_ended_total",
            vec![("reason", "revoked")],
            1.0,
        ),
        ("hivekeeper_leases_keepalives_total", vec![], 2.0),
        // Each keepalive found the deadline its lease's grant set.
        (
            "hivekeeper_leases_keepalive_ttl_used_ratio_count",
            vec![],
            2.0,
        ),
        (
            "hivekeeper_resource_grants_total",
            vec![("kind", "lock")],
            4.0,
        ),
        (
            "hivekeeper_resource_handovers_total",
            vec![("kind", "lock")],
            1.0,
        ),
        (
            "hivekeeper_resource_releases_total",
            vec![("kind", "lock"), ("reason", "released")],
            3.0,
        ),
        (
            "hivekeeper_resource_releases_total",
            vec![("kind", "lock"), ("reason", "lease_ended")],
            1.0,
        ),
        // Every grant records its wait (0 when granted at once), every release its hold.
        (
            "hivekeeper_resource_wait_seconds_count",
            vec![("kind", "lock")],
            4.0,
        ),
        (
            "hivekeeper_resource_hold_seconds_count",
            vec![("kind", "lock")],
            4.0,
        ),
        (
            "hivekeeper_requests_total",
            vec![("op", "lease.grant"), ("code", "ok")],
            3.0,
        ),
        (
            "hivekeeper_requests_total",
            vec![("op", "lease.keepalive"), ("code", "ok")],
            2.0,
        ),
        (
            "hivekeeper_requests_total",
            vec![("op", "lease.revoke"), ("code", "ok")],
            1.0,
        ),
        // The queued acquire is counted once, when its deferred grant is published.
        (
            "hivekeeper_requests_total",
            vec![("op", "lock.acquire"), ("code", "ok")],
            4.0,
        ),
        (
            "hivekeeper_requests_total",
            vec![("op", "lock.release"), ("code", "ok")],
            3.0,
        ),
        (
            "hivekeeper_requests_total",
            vec![("op", "lock.release"), ("code", "not_holder")],
            1.0,
        ),
        (
            "hivekeeper_requests_total",
            vec![("op", "fence.check"), ("code", "ok")],
            2.0,
        ),
        (
            "hivekeeper_fence_checks_total",
            vec![("result", "valid")],
            1.0,
        ),
        (
            "hivekeeper_fence_checks_total",
            vec![("result", "stale")],
            1.0,
        ),
        ("hivekeeper_requests_total", vec![], 16.0),
        ("hivekeeper_request_duration_seconds_count", vec![], 16.0),
        (
            "hivekeeper_request_duration_seconds_count",
            vec![("op", "lock.acquire")],
            4.0,
        ),
        (
            "hivekeeper_mqtt_bad_requests_total",
            vec![("code", "bad_request")],
            1.0,
        ),
        (
            "hivekeeper_mqtt_bad_requests_total",
            vec![("code", "unknown_op")],
            1.0,
        ),
        // A publish on another agent's request topic is refused by the agent endpoint
        // before it reaches the bridge.
        ("hivekeeper_endpoint_publishes_refused_total", vec![], 1.0),
    ]
}

/// Each expected series' value in `text`.
fn read(text: &str) -> Vec<f64> {
    expected_deltas()
        .iter()
        .map(|(name, labels, _)| metric_sum(text, name, labels))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_workload_moves_every_metric_by_exactly_its_count() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let metrics_port = node.metrics_port;
    let mut a = Raw::connect(port, "drone-a").await;
    let mut b = Raw::connect(port, "drone-b").await;
    let mut c = Raw::connect(port, "drone-c").await;
    let before_text = eventually(10, "/metrics serves the node's gauges", || async {
        metrics_text(metrics_port)
            .await
            .filter(|text| text.contains("hivekeeper_leases_active"))
    })
    .await;
    let before = read(&before_text);

    // Three leases; drone-c's is short and never kept alive.
    let lease_a = a.grant("g", 60_000).await;
    let lease_b = b.grant("g", 60_000).await;
    let lease_c = c.grant("g", 1_000).await;

    // Lock grant 1: drone-c takes m1. drone-a queues behind it (no wait_ms: until granted).
    let held = c
        .call(json!({"id": "c1", "op": "lock.acquire", "name": "m1", "lease": lease_c}))
        .await;
    assert_eq!(held["ok"], true, "{held}");
    a.send(json!({"id": "a1", "op": "lock.acquire", "name": "m1", "lease": lease_a}).to_string())
        .await;
    // Lock grant 2, the handover: drone-c's lease expires, the same entry releases m1 and
    // grants it to drone-a, whose deferred answer is the grant.
    let granted = a.next(15).await;
    assert_eq!(granted["id"], "a1", "{granted}");
    assert_eq!(granted["ok"], true, "{granted}");

    // Two keepalives, then the releases and one refusal.
    for id in ["k1", "k2"] {
        let kept = a
            .call(json!({"id": id, "op": "lease.keepalive", "lease": lease_a}))
            .await;
        assert_eq!(kept["ok"], true, "{kept}");
    }
    let released = a
        .call(json!({"id": "a2", "op": "lock.release", "name": "m1", "lease": lease_a}))
        .await;
    assert_eq!(released["ok"], true, "{released}");
    // Lock grant 3 and release 2 by drone-b, with a fence check of its token while it holds
    // (valid) and after (stale); its second release is `not_holder`.
    let held = b
        .call(json!({"id": "b1", "op": "lock.acquire", "name": "m2", "lease": lease_b}))
        .await;
    let token = held["token"].as_u64().expect("a grant has a token");
    let fence = json!({"id": "f1", "op": "fence.check", "resource": "m2", "token": token});
    let valid = b.call(fence).await;
    assert_eq!(valid["valid"], true, "{valid}");
    let done = b
        .call(json!({"id": "b2", "op": "lock.release", "name": "m2", "lease": lease_b}))
        .await;
    assert_eq!(done["ok"], true, "{done}");
    let fence = json!({"id": "f2", "op": "fence.check", "resource": "m2", "token": token});
    let stale = b.call(fence).await;
    assert_eq!(stale["valid"], false, "{stale}");
    let refused = b
        .call(json!({"id": "b3", "op": "lock.release", "name": "m2", "lease": lease_b}))
        .await;
    assert_eq!(code(&refused), Some("not_holder"), "{refused}");
    // Lock grant 4 and release 3 by drone-a.
    for (id, op) in [("a3", "lock.acquire"), ("a4", "lock.release")] {
        let done = a
            .call(json!({"id": id, "op": op, "name": "m3", "lease": lease_a}))
            .await;
        assert_eq!(done["ok"], true, "{done}");
    }
    // drone-b revokes its lease.
    let revoked = b
        .call(json!({"id": "b4", "op": "lease.revoke", "lease": lease_b}))
        .await;
    assert_eq!(revoked["ok"], true, "{revoked}");

    // Bad input: malformed JSON, an unknown op, a topic that names no agent.
    a.send(r#"{"id":"m1","op":"#).await;
    let malformed = a.next(10).await;
    assert_eq!(code(&malformed), Some("bad_request"), "{malformed}");
    let unknown = a
        .call(json!({"id": "u1", "op": "lock.steal", "name": "m1", "lease": lease_a}))
        .await;
    assert_eq!(code(&unknown), Some("unknown_op"), "{unknown}");
    a.publish_to("hk/v1/req/bad*agent", "x").await;

    // Counters move where things happen, some after the answer is out (a connection's end):
    // poll until every series reached its count, then check none went past it.
    let expected = expected_deltas();
    let reached = |text: &str| {
        read(text)
            .iter()
            .zip(&before)
            .zip(&expected)
            .all(|((now, was), (_, _, delta))| now - was >= *delta)
    };
    let after_text = eventually(15, "every metric reached its count", || async {
        metrics_text(metrics_port)
            .await
            .filter(|text| reached(text))
    })
    .await;
    // A little longer, so a late double count would show.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let final_text = within(5, "/metrics", metrics_text(metrics_port))
        .await
        .expect("/metrics answers");
    for text in [&after_text, &final_text] {
        for (((name, labels, delta), was), now) in expected.iter().zip(&before).zip(read(text)) {
            assert_eq!(
                now - was,
                *delta,
                "{name}{labels:?} moved by {} instead of {delta}",
                now - was
            );
        }
    }

    // Gauges end where the state is: drone-a's lease alone, nothing held, nobody waiting.
    let gauge = |name: &str, labels: &[(&str, &str)]| metric_sum(&final_text, name, labels);
    assert_eq!(gauge("hivekeeper_leases_active", &[]), 1.0, "leases_active");
    // The retry memory remembers the three drones that wrote (well within dedup_idle_ms).
    assert_eq!(gauge("hivekeeper_dedup_agents", &[]), 3.0, "dedup_agents");
    assert_eq!(
        gauge("hivekeeper_resource_held", &[("kind", "lock")]),
        0.0,
        "resource_held"
    );
    assert_eq!(
        gauge("hivekeeper_resource_waiters", &[("kind", "lock")]),
        0.0,
        "resource_waiters"
    );
    // Histograms export as buckets, with help texts.
    assert!(
        final_text.contains("hivekeeper_resource_wait_seconds_bucket{kind=\"lock\",le=\"0.0005\"}"),
        "histograms export as buckets:\n{final_text}"
    );
    assert!(
        final_text.contains("# HELP hivekeeper_requests_total"),
        "metrics are described:\n{final_text}"
    );
    // One name per fact: the bridge's old copies of the MQTT counters are gone.
    assert!(
        !final_text.contains("hivekeeper_bridge_"),
        "duplicate hivekeeper_bridge_* series:\n{final_text}"
    );
}

/// Reads one Raft gauge or counter, which must be exported.
fn raft(text: &str, name: &str) -> f64 {
    metric(text, name).unwrap_or_else(|| panic!("{name} is not exported:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_metrics_follow_the_log_a_snapshot_and_a_restart() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let config = dir.path().join("hivekeeper.toml");
    // Small snapshots, so a short workload takes one.
    std::fs::write(
        &config,
        "[node.raft]\nsnapshot_every_entries = 20\nentries_kept_after_snapshot = 5\n",
    )
    .expect("write the config file");
    let data = dir.path().join("data");
    let config_arg = config.to_str().expect("a UTF-8 temp path");
    let mut node = Node::start_with_args(&data, &["--config", config_arg]).await;
    let port = node.metrics_port;
    let before = eventually(10, "the Raft metrics are exported", || async {
        metrics_text(port)
            .await
            .filter(|text| metric(text, "hivekeeper_raft_is_leader") == Some(1.0))
    })
    .await;
    let term = raft(&before, "hivekeeper_raft_term");
    assert!(term >= 1.0, "term {term}");
    let applied_before = raft(&before, "hivekeeper_raft_applied_index");

    // 30 writes, one at a time: 30 entries at least, past a snapshot threshold.
    let mut a = Raw::connect(node.mqtt_port(), "drone-a").await;
    for n in 0..30 {
        a.grant(&format!("g{n}"), 60_000).await;
    }
    let after = eventually(10, "the Raft metrics caught up", || async {
        metrics_text(port).await.filter(|text| {
            metric(text, "hivekeeper_raft_applied_index") >= Some(applied_before + 30.0)
                && metric(text, "hivekeeper_raft_snapshots_total") >= Some(1.0)
                && metric(text, "hivekeeper_raft_commit_index")
                    >= metric(text, "hivekeeper_raft_applied_index")
                // One exporter pass sets these three; a scrape may fall between two passes.
                && metric(text, "hivekeeper_raft_apply_lag_entries").zip(
                    metric(text, "hivekeeper_raft_commit_index")
                        .zip(metric(text, "hivekeeper_raft_applied_index")),
                ).is_some_and(|(lag, (commit, applied))| lag == commit - applied)
        })
    })
    .await;
    let applied = raft(&after, "hivekeeper_raft_applied_index");
    let committed = raft(&after, "hivekeeper_raft_commit_index");
    let last_log = raft(&after, "hivekeeper_raft_last_log_index");
    assert!(
        committed <= last_log,
        "commit {committed} > last log {last_log}"
    );
    let snapshot = raft(&after, "hivekeeper_raft_snapshot_index");
    // It covers entries of this workload (the log before it held only a few).
    assert!(
        snapshot > applied_before && snapshot <= applied,
        "snapshot index {snapshot}, applied {applied_before} before and {applied} after"
    );
    // The snapshot purged the log behind it, keeping a few entries.
    let entries = raft(&after, "hivekeeper_raft_log_entries");
    assert!(entries < last_log, "{entries} entries of {last_log}");
    assert_eq!(raft(&after, "hivekeeper_raft_term"), term);
    assert_eq!(raft(&after, "hivekeeper_raft_is_leader"), 1.0);
    assert!(after.contains("# HELP hivekeeper_raft_elections_total"));

    // After a restart the node leads again (a single voter keeps its term: its vote for
    // itself is already committed), and the gauges come back where the log was.
    node.terminate().await;
    node.restart().await;
    let port = node.metrics_port;
    let restarted = eventually(15, "leading again, the log replayed", || async {
        metrics_text(port).await.filter(|text| {
            metric(text, "hivekeeper_raft_is_leader") == Some(1.0)
                && metric(text, "hivekeeper_raft_applied_index") >= Some(applied)
        })
    })
    .await;
    let new_term = raft(&restarted, "hivekeeper_raft_term");
    assert!(
        new_term >= term,
        "term {new_term} after the restart, {term} before"
    );
    assert!(raft(&restarted, "hivekeeper_raft_snapshot_index") >= snapshot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_is_a_waiter_until_its_answer() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let metrics_port = node.metrics_port;
    let mut holder = Raw::connect(port, "drone-h").await;
    let mut waiter = Raw::connect(port, "drone-w").await;
    // Two MQTT clients on the embedded broker (counted from the kernel's socket table).
    wait_metric(
        metrics_port,
        "hivekeeper_mqtt_clients_connected",
        10,
        |clients| clients == 2.0,
    )
    .await;
    let lease_h = holder.grant("g", 60_000).await;
    let lease_w = waiter.grant("g", 60_000).await;
    let held = holder
        .call(json!({"id": "h1", "op": "lock.acquire", "name": "bay", "lease": lease_h}))
        .await;
    assert_eq!(held["ok"], true, "{held}");
    waiter
        .send(
            json!({"id": "w1", "op": "lock.acquire", "name": "bay", "lease": lease_w}).to_string(),
        )
        .await;
    let gauges = |held: f64, waiting: f64| async move {
        metrics_text(metrics_port).await.filter(|text| {
            metric_sum(text, "hivekeeper_resource_held", &[("kind", "lock")]) == held
                && metric_sum(text, "hivekeeper_resource_waiters", &[("kind", "lock")]) == waiting
        })
    };
    eventually(10, "one held, one waiting", || gauges(1.0, 1.0)).await;
    let released = holder
        .call(json!({"id": "h2", "op": "lock.release", "name": "bay", "lease": lease_h}))
        .await;
    assert_eq!(released["ok"], true, "{released}");
    let granted = waiter.next(10).await;
    assert_eq!(granted["ok"], true, "{granted}");
    eventually(10, "handed over: one held, none waiting", || {
        gauges(1.0, 0.0)
    })
    .await;
}

/// Every `hivekeeper_*` metric name docs/OPERATIONS.md mentions, histogram sample suffixes
/// (`_bucket`, `_sum`, `_count`) included as written; a bare prefix (`hivekeeper_raft_`) is
/// not a name.
fn documented_names() -> std::collections::BTreeSet<String> {
    const PREFIX: &str = "hivekeeper_";
    let doc = include_str!("../docs/OPERATIONS.md");
    let mut names = std::collections::BTreeSet::new();
    let mut rest = doc;
    while let Some(at) = rest.find(PREFIX) {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        if !name.ends_with('_') {
            names.insert(name.to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// The metric families of a scrape and their types, from its `# TYPE` lines.
fn scraped_families(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("# TYPE ")?.split_whitespace();
            Some((words.next()?.to_string(), words.next()?.to_string()))
        })
        .filter(|(name, _)| name.starts_with("hivekeeper_"))
        .collect()
}

/// A fresh node's first scrape has every metric docs/OPERATIONS.md names (a counter before
/// its first count, a histogram before its first sample), and OPERATIONS.md names every
/// `hivekeeper_*` family the scrape has. A name written with a histogram's sample suffix
/// stands for its family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_scrape_has_every_documented_metric_and_documents_every_one_it_has() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let text = within(10, "the first scrape", metrics_text(node.metrics_port))
        .await
        .expect("/metrics answers");
    let families = scraped_families(&text);
    let family_of = |name: &str| -> Option<String> {
        if families.contains_key(name) {
            return Some(name.to_string());
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            (families.get(base).map(String::as_str) == Some("histogram")).then(|| base.to_string())
        })
    };
    let documented = documented_names();
    // Per other member, labelled by its name: a single node has none. Absent here, so the
    // list cannot outlive the reason (e2e_logs reads them on a cluster's leader).
    const PER_PEER: [&str; 2] = [
        "hivekeeper_raft_peer_reachable",
        "hivekeeper_raft_peer_lag_entries",
    ];
    for name in PER_PEER {
        assert!(documented.contains(name), "{name} is no longer documented");
        assert_eq!(family_of(name), None, "{name} on a single node");
    }
    let missing: Vec<&String> = documented
        .iter()
        .filter(|name| !PER_PEER.contains(&name.as_str()) && family_of(name).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "documented in OPERATIONS.md, absent from a fresh scrape: {missing:?}"
    );
    let documented_families: std::collections::BTreeSet<String> = documented
        .iter()
        .filter_map(|name| family_of(name))
        .collect();
    let undocumented: Vec<&String> = families
        .keys()
        .filter(|family| !documented_families.contains(*family))
        .collect();
    assert!(
        undocumented.is_empty(),
        "in a fresh scrape, not in OPERATIONS.md: {undocumented:?}"
    );
}
