//! The Grafana dashboard (`examples/grafana/hivekeeper.json`) is valid and queries only
//! metrics that exist: every metric name in every panel's `expr` must appear in a real
//! `/metrics` scrape of `hivekeeper serve` after a small workload that touches every
//! subsystem (leases, keepalives, a queued lock and its handover, a fence check, bad input).

mod common;

use std::collections::{BTreeSet, HashSet};

use common::{Node, Raw, metrics_text};
use serde_json::{Value, json};

/// The dashboard, parsed.
fn dashboard() -> Value {
    let text = include_str!("../examples/grafana/hivekeeper.json");
    serde_json::from_str(text).expect("examples/grafana/hivekeeper.json is JSON")
}

/// Every PromQL expression of every panel (row panels have none).
fn expressions(dashboard: &Value) -> Vec<String> {
    let panels = dashboard["panels"].as_array().expect("panels");
    panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
        .map(|target| {
            target["expr"]
                .as_str()
                .expect("every target has an expr")
                .to_string()
        })
        .collect()
}

/// The metric names in a PromQL expression: identifiers that start `hivekeeper_`.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("hivekeeper_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The series names in a Prometheus text scrape (histograms appear as `_bucket`, `_sum` and
/// `_count` series, which is what a dashboard queries).
fn scraped_names(text: &str) -> HashSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_dashboard_is_a_well_formed_grafana_dashboard() {
    let dashboard = dashboard();
    assert_eq!(dashboard["title"], "Hivekeeper");
    assert!(dashboard["uid"].as_str().is_some_and(|uid| !uid.is_empty()));
    assert!(dashboard["schemaVersion"].as_u64().is_some());
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let mut ids = HashSet::new();
    for panel in panels {
        let id = panel["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        assert!(panel["title"].as_str().is_some(), "{panel}");
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64(), grid["w"].as_u64());
        assert!(
            x.zip(w).is_some_and(|(x, w)| w > 0 && x + w <= 24),
            "{panel}"
        );
        assert!(grid["h"].as_u64().is_some_and(|h| h > 0), "{panel}");
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        let ref_ids: HashSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().expect("refId"))
            .collect();
        assert_eq!(ref_ids.len(), targets.len(), "refIds repeat in {panel}");
    }
    // Every expression queries Hivekeeper, and every metric the dashboard must chart is there.
    let expressions = expressions(&dashboard);
    assert!(
        expressions
            .iter()
            .all(|expr| !metric_names(expr).is_empty())
    );
    let queried: BTreeSet<String> = expressions.iter().flat_map(|e| metric_names(e)).collect();
    for wanted in [
        "hivekeeper_raft_is_leader",
        "hivekeeper_raft_has_quorum",
        "hivekeeper_raft_term",
        "hivekeeper_requests_total",
        "hivekeeper_request_duration_seconds_bucket",
        "hivekeeper_leases_active",
        "hivekeeper_resource_waiters",
        "hivekeeper_resource_grants_total",
        "hivekeeper_leases_ended_total",
        "hivekeeper_leases_keepalives_total",
        "hivekeeper_mqtt_messages_in_total",
    ] {
        assert!(
            queried.contains(wanted),
            "the dashboard does not show {wanted}"
        );
    }
}

/// Counted (or kept) by every member as it applies the log, so every member shows the same
/// value (docs/OPERATIONS.md, "Where a metric counts"): summed over the members they count
/// each event once per member.
const APPLY_SIDE: [&str; 8] = [
    "hivekeeper_leases_active",
    "hivekeeper_leases_granted_total",
    "hivekeeper_leases_ended_total",
    "hivekeeper_resource_grants_total",
    "hivekeeper_resource_handovers_total",
    "hivekeeper_resource_releases_total",
    "hivekeeper_resource_held",
    "hivekeeper_resource_waiters",
];

/// Every member applies the same entries, so `sum()` over the members would count every
/// apply-side metric three times in a three-member cluster. They are aggregated with `max` (any
/// member's value is the cluster's).
#[test]
fn apply_side_metrics_are_never_summed_across_members() {
    let mut checked = 0;
    for expr in expressions(&dashboard()) {
        let names = metric_names(&expr);
        if !names.iter().any(|name| APPLY_SIDE.contains(&name.as_str())) {
            continue;
        }
        checked += 1;
        assert!(
            !expr.contains("sum(") && !expr.contains("sum by"),
            "an apply-side metric summed over the members: {expr}"
        );
        assert!(
            expr.starts_with("max(") || expr.starts_with("max by"),
            "an apply-side metric not taken as the max over the members: {expr}"
        );
    }
    assert_eq!(checked, 8, "the dashboard's apply-side panels moved");
}

#[test]
fn metric_names_are_read_out_of_promql() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(hivekeeper_a_seconds_bucket{x="hivekeeper"}[5m]))) / hivekeeper_b"#
        ),
        vec!["hivekeeper_a_seconds_bucket", "hivekeeper_b"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_in_a_scrape() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut a = Raw::connect(port, "drone-a").await;
    let mut b = Raw::connect(port, "drone-b").await;
    let lease_a = a.grant("g", 60_000).await;
    let lease_b = b.grant("g", 60_000).await;
    let held = a
        .call(json!({"id": "a1", "op": "lock.acquire", "name": "pad", "lease": lease_a}))
        .await;
    let token = held["token"].as_u64().expect("granted");
    b.send(json!({"id": "b1", "op": "lock.acquire", "name": "pad", "lease": lease_b}).to_string())
        .await;
    let kept = a
        .call(json!({"id": "a2", "op": "lease.keepalive", "lease": lease_a}))
        .await;
    assert_eq!(kept["ok"], true, "{kept}");
    let checked = a
        .call(json!({"id": "a3", "op": "fence.check", "resource": "pad", "token": token}))
        .await;
    assert_eq!(checked["valid"], true, "{checked}");
    // The revoke hands the lock to drone-b: a handover, a hold time, a lease ended.
    let revoked = a
        .call(json!({"id": "a4", "op": "lease.revoke", "lease": lease_a}))
        .await;
    assert_eq!(revoked["ok"], true, "{revoked}");
    let granted = b.next(10).await;
    assert_eq!(granted["ok"], true, "{granted}");
    a.send(r#"{"id":"bad","op":"#).await;
    a.next(10).await;
    a.publish_to("hk/v1/req/bad*agent", "x").await;

    let wanted: BTreeSet<String> = expressions(&dashboard())
        .iter()
        .flat_map(|expr| metric_names(expr))
        .collect();
    // Polled: some series appear only once their event has happened. At most 30 looks.
    let mut missing = Vec::new();
    for _ in 0..30 {
        let text = metrics_text(node.metrics_port).await.unwrap_or_default();
        let scraped = scraped_names(&text);
        missing = wanted
            .iter()
            .filter(|name| !scraped.contains(*name))
            .cloned()
            .collect();
        if missing.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no scrape has: {missing:?}"
    );
}
