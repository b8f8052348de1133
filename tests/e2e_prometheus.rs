//! End to end: a real Prometheus (Debian's `prometheus` package) scrapes a three-member
//! cluster with the shipped `deploy/prometheus/prometheus.yml` (this test's ports, 1 s
//! intervals) and the shipped `deploy/prometheus/alerts.yml` (unchanged). Through Prometheus's
//! HTTP API it checks that every member is an `up` target, that the `hivekeeper_` series
//! arrive, that every rule loads and evaluates, that every metric the rules read is scraped,
//! and that every query of the Grafana dashboard (`examples/grafana/hivekeeper.json`) parses
//! and runs on this server. Then it kills two members and waits for `HivekeeperNoQuorum` to
//! fire.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use common::cluster::ProcessCluster;
use common::{Log, eventually, free_port};
use serde_json::Value;

/// The shipped scrape config and rules.
const SCRAPE_CONFIG: &str = include_str!("../deploy/prometheus/prometheus.yml");
const ALERT_RULES: &str = include_str!("../deploy/prometheus/alerts.yml");

/// The member addresses and interval the shipped scrape config names, which the test replaces
/// with its own.
const SHIPPED_TARGETS: [&str; 3] = ["127.0.0.1:9471", "127.0.0.1:9472", "127.0.0.1:9473"];
const SHIPPED_INTERVALS: [&str; 2] = ["scrape_interval: 15s", "evaluation_interval: 15s"];

/// The alert that must fire once two of three members are gone.
const NO_QUORUM: &str = "HivekeeperNoQuorum";

/// The `prometheus` binary. Fails the test when it is missing (CI installs it).
fn prometheus_binary() -> PathBuf {
    hivekeeper_test_support::installed(
        "prometheus",
        "this test needs Debian's `prometheus` package; install it with \
         `apt-get install prometheus` (.ci/run does)",
    )
}

/// The shipped scrape config with the members' metrics ports and 1 s intervals.
fn scrape_config(metrics_ports: &[u16]) -> String {
    let mut config = SCRAPE_CONFIG.to_string();
    for (shipped, port) in SHIPPED_TARGETS.iter().zip(metrics_ports) {
        assert!(config.contains(shipped), "prometheus.yml names {shipped}");
        config = config.replace(shipped, &format!("127.0.0.1:{port}"));
    }
    for shipped in SHIPPED_INTERVALS {
        assert!(config.contains(shipped), "prometheus.yml says `{shipped}`");
        let (key, _) = shipped.split_once(':').expect("key: value");
        config = config.replace(shipped, &format!("{key}: 1s"));
    }
    config
}

/// A `prometheus` process on a free loopback port, killed when dropped (its log printed if
/// the test is failing).
struct Prometheus {
    child: Child,
    port: u16,
    log: Log,
}

impl Prometheus {
    /// Writes `config` and the shipped rules into `dir`, starts Prometheus on them with its
    /// storage in `dir`, and waits until it is ready.
    async fn start(dir: &Path, config: &str) -> Prometheus {
        std::fs::write(dir.join("prometheus.yml"), config).expect("write prometheus.yml");
        std::fs::write(dir.join("alerts.yml"), ALERT_RULES).expect("write alerts.yml");
        let port = free_port();
        let mut child = Command::new(prometheus_binary())
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prometheus starts");
        let log = Log::default();
        log.collect(child.stderr.take().expect("prometheus's stderr"));
        let prometheus = Prometheus { child, port, log };
        eventually(20, "prometheus is ready", async || {
            common::metrics::http_get(prometheus.port, "/-/ready")
                .await
                .is_some_and(|answer| answer.status == 200)
        })
        .await;
        prometheus
    }

    /// GET an API path; the answer's `data` once its `status` is `success`.
    async fn api(&self, path: &str) -> anyhow::Result<Value> {
        let answer = common::metrics::http_get(self.port, path)
            .await
            .ok_or_else(|| anyhow::anyhow!("no answer to {path}"))?;
        let body: Value = serde_json::from_str(&answer.body)
            .with_context(|| format!("{path}: not JSON: {}", answer.body))?;
        anyhow::ensure!(body["status"] == "success", "{path}: {body}");
        Ok(body["data"].clone())
    }

    /// The result vector of an instant PromQL query.
    async fn query(&self, promql: &str) -> anyhow::Result<Vec<Value>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", url_encoded(promql)))
            .await
            .with_context(|| format!("query {promql}"))?;
        match &data["result"] {
            Value::Array(result) => Ok(result.clone()),
            other => Ok(vec![other.clone()]),
        }
    }

    /// The one value of an instant query with a single sample, once there is one.
    async fn value(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql).await.ok()?;
        let [sample] = &result[..] else { return None };
        sample["value"][1].as_str()?.parse().ok()
    }

    /// The state (`pending`, `firing`) of the alert `name`, `None` while it is inactive.
    async fn alert_state(&self, name: &str) -> Option<String> {
        let data = self.api("/api/v1/alerts").await.ok()?;
        data["alerts"]
            .as_array()?
            .iter()
            .find(|alert| alert["labels"]["alertname"] == name)
            .and_then(|alert| alert["state"].as_str().map(str::to_string))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("prometheus's log:\n{}", self.log.tail(40));
        }
    }
}

/// `text` percent-encoded for a URL's query string (everything but unreserved characters).
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The metric names a PromQL text reads: identifiers that start `hivekeeper_` or `process_`.
fn metric_names(text: &str) -> Vec<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.split(|c: char| !is_name(c))
        .filter(|word| word.starts_with("hivekeeper_") || word.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

/// Every `expr` of the Grafana dashboard, with its template variables made concrete: every
/// instance (`$instance` → `.*`) and a fixed rate window (`$__rate_interval` → `1m`).
fn dashboard_queries() -> Vec<String> {
    let text = include_str!("../examples/grafana/hivekeeper.json");
    let dashboard: Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let queries: Vec<String> = panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
        .map(|target| {
            let expr = target["expr"].as_str().expect("every target has an expr");
            expr.replace("$__rate_interval", "1m")
                .replace("${instance}", ".*")
                .replace("$instance", ".*")
        })
        .collect();
    for query in &queries {
        assert!(!query.contains('$'), "a template variable left in {query}");
    }
    queries
}

/// Every member is an `up` target and its `hivekeeper_` series are stored: exactly one leader.
async fn check_scraped(prometheus: &Prometheus, members: usize) {
    eventually(20, "every member is an up target", async || {
        let Ok(targets) = prometheus.api("/api/v1/targets").await else {
            return false;
        };
        let active = targets["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        active.len() == members
            && active
                .iter()
                .all(|target| target["health"] == "up" && target["labels"]["job"] == "hivekeeper")
    })
    .await;
    let series = eventually(10, "hivekeeper_ series are scraped", async || {
        let count = prometheus
            .value(r#"count({__name__=~"hivekeeper_.*"})"#)
            .await?;
        (count > 0.0).then_some(count)
    })
    .await;
    eprintln!("{series} hivekeeper_ series scraped");
    eventually(10, "hivekeeper_raft_is_leader sums to 1", async || {
        prometheus.value("sum(hivekeeper_raft_is_leader)").await == Some(1.0)
    })
    .await;
}

/// Every rule of the shipped group loaded and evaluated without error, and every metric the
/// rules read or name is one the members export (a histogram by its `_bucket` series), so a
/// renamed metric cannot silence an alert.
async fn check_rules(prometheus: &Prometheus) {
    let rules = eventually(10, "every rule evaluated", async || {
        let data = prometheus.api("/api/v1/rules").await.ok()?;
        let group = data["groups"]
            .as_array()?
            .iter()
            .find(|group| group["name"] == "hivekeeper")?
            .clone();
        let rules = group["rules"].as_array()?.clone();
        rules
            .iter()
            .all(|rule| rule["health"] == "ok")
            .then_some(rules)
    })
    .await;
    let names: Vec<&str> = rules
        .iter()
        .filter_map(|rule| rule["name"].as_str())
        .collect();
    assert!(names.contains(&NO_QUORUM), "{names:?}");
    let scraped = prometheus
        .api("/api/v1/label/__name__/values")
        .await
        .expect("the metric names");
    let scraped: Vec<&str> = scraped
        .as_array()
        .expect("a list of names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in metric_names(ALERT_RULES) {
        let histogram = format!("{name}_bucket");
        assert!(
            scraped.contains(&name.as_str()) || scraped.contains(&histogram.as_str()),
            "alerts.yml reads {name}, which no member exports"
        );
    }
}

/// Every dashboard query parses and runs on this Prometheus.
async fn check_dashboard(prometheus: &Prometheus) {
    let queries = dashboard_queries();
    assert!(!queries.is_empty());
    for query in &queries {
        if let Err(error) = prometheus.query(query).await {
            panic!("the dashboard's query does not run on Prometheus: {error:#}");
        }
    }
    eprintln!("{} dashboard queries ran", queries.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_cluster_and_pages_when_the_quorum_is_lost() {
    prometheus_binary();
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let metrics_ports: Vec<u16> = cluster.nodes.iter().map(|node| node.metrics_port).collect();
    let dir = tempfile::tempdir().expect("a temp dir");
    let prometheus = Prometheus::start(dir.path(), &scrape_config(&metrics_ports)).await;

    check_scraped(&prometheus, metrics_ports.len()).await;
    check_rules(&prometheus).await;
    check_dashboard(&prometheus).await;
    // Before the first scrape Prometheus knows no member, so the alert may start pending; a
    // healthy cluster clears it.
    eventually(10, "HivekeeperNoQuorum is inactive", async || {
        prometheus.alert_state(NO_QUORUM).await.is_none()
    })
    .await;

    // The survivor is the leader: it still says `is_leader 1`, but `has_quorum 0`.
    let leader = cluster.leader(10).await;
    for (index, node) in cluster.nodes.iter_mut().enumerate() {
        if index != leader {
            node.kill9();
        }
    }
    eventually(30, "HivekeeperNoQuorum fires", async || {
        prometheus.alert_state(NO_QUORUM).await.as_deref() == Some("firing")
    })
    .await;
}
