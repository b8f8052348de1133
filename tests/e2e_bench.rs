//! `hivekeeper bench` against a real node, briefly and with a handful of agents: the JSON
//! report parses, work was done and the mutual-exclusion check passed. No figure is
//! asserted: the machine is shared and the run is short.

mod common;

use std::process::Command;

use common::{Node, within};
use serde_json::Value;

/// Runs `hivekeeper bench <args> --json` against the node and returns the parsed report.
async fn bench(node: &Node, args: &[&str]) -> Value {
    let broker = format!("127.0.0.1:{}", node.mqtt_port());
    let mut all = args.to_vec();
    all.extend(["--brokers", &broker]);
    run_bench(&all).await
}

/// Runs `hivekeeper bench <args> --json` (at most 120 s) and returns the parsed report.
async fn run_bench(args: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hivekeeper"));
    command.arg("bench").args(args).arg("--json");
    let what = format!("hivekeeper bench {}", args.join(" "));
    // Bounded: a short measured phase plus connecting a few agents (or starting a cluster).
    let output = within(
        120,
        &what,
        tokio::task::spawn_blocking(move || command.output()),
    )
    .await
    .expect("the blocking task")
    .expect("hivekeeper bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {stdout}"))
}

/// What every cycling scenario must show.
fn assert_sane(report: &Value, agents: u64) {
    assert!(report["cycles"].as_u64().expect("cycles") > 0, "{report}");
    assert!(report["ops_per_s"].as_f64().expect("ops_per_s") > 0.0);
    assert_eq!(report["acquire"]["count"], report["cycles"], "{report}");
    assert!(report["acquire"]["p50_ms"].as_f64().expect("p50") > 0.0);
    let exclusion = &report["mutual_exclusion"];
    assert_eq!(exclusion["ok"], true, "{report}");
    assert_eq!(exclusion["violations"], 0);
    assert_eq!(exclusion["grants_checked"], report["cycles"]);
    assert_eq!(report["errors"]["total"], 0, "{report}");
    assert_eq!(report["parameters"]["agents"], agents);
    let min = report["fairness"]["grants_min"].as_u64().expect("min");
    assert!(min > 0, "every agent was granted at least once: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_uncontended_and_contended_report_json_with_exclusion_checked() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;

    let uncontended = bench(
        &node,
        &["uncontended", "--agents", "3", "--duration-s", "1"],
    )
    .await;
    assert_eq!(uncontended["scenario"], "uncontended");
    assert_sane(&uncontended, 3);
    assert_eq!(uncontended["parameters"]["flood"], false);
    assert!(uncontended.get("flood").is_none(), "{uncontended}");
    // Every agent has its own lock: nobody ever waits for another.
    assert_eq!(uncontended["handover"]["count"], 0, "{uncontended}");
    assert_eq!(uncontended["parameters"]["resource"], "lock");

    // Each agent's own waypoint, then its own 12-volume route: a kilometre apart, nothing
    // conflicts, and every reserve and release goes through.
    for resource in ["waypoint", "route"] {
        let args = [
            "uncontended",
            "--agents",
            "3",
            "--duration-s",
            "1",
            "--resource",
            resource,
        ];
        let report = bench(&node, &args).await;
        assert_sane(&report, 3);
        assert_eq!(report["parameters"]["resource"], resource, "{report}");
        assert_eq!(report["handover"]["count"], 0, "{report}");
    }

    // Holding 5 ms makes the others queue, so there are handovers to measure.
    let contended = bench(
        &node,
        &[
            "contended",
            "--agents",
            "4",
            "--locks",
            "1",
            "--duration-s",
            "2",
            "--hold-ms",
            "5",
        ],
    )
    .await;
    assert_eq!(contended["scenario"], "contended");
    assert_eq!(contended["parameters"]["locks"], 1);
    assert_sane(&contended, 4);
    assert!(
        contended["handover"]["count"].as_u64().expect("handovers") > 0,
        "{contended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_semaphore_and_reclaim_pass_their_checks() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;

    let semaphore = bench(
        &node,
        &[
            "semaphore",
            "--agents",
            "4",
            "--limit",
            "2",
            "--duration-s",
            "1",
            "--hold-ms",
            "5",
        ],
    )
    .await;
    assert_eq!(semaphore["scenario"], "semaphore");
    assert_sane(&semaphore, 4);
    // No handover figure with several permits (see docs/BENCHMARKS.md).
    assert_eq!(semaphore["handover"]["count"], 0, "{semaphore}");

    // One round at the smallest TTL: the waiter must get the lock, and never before the
    // holder's lease could have expired (the exclusion check counts that as two holders).
    let reclaim = bench(&node, &["reclaim", "--ttl-ms", "500", "--rounds", "1"]).await;
    assert_eq!(reclaim["scenario"], "reclaim");
    assert_eq!(reclaim["cycles"], 1, "{reclaim}");
    assert_eq!(reclaim["errors"]["total"], 0, "{reclaim}");
    assert_eq!(reclaim["mutual_exclusion"]["ok"], true, "{reclaim}");
    assert_eq!(reclaim["mutual_exclusion"]["grants_checked"], 2);
    let round = &reclaim["reclaim"][0];
    assert_eq!(round["ttl_ms"], 500);
    let reclaim_ms = round["reclaim_ms"][0].as_f64().expect("one round's figure");
    assert!(
        reclaim_ms >= 500.0,
        "granted before the TTL ran out: {reclaim}"
    );
}

/// `bench failover` starts its own three-member cluster, kills the leader once and reports the
/// gap; the traffic's grants pass the exclusion check. No figure is asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_failover_kills_the_leader_of_its_own_cluster_and_reports_the_gap() {
    let report = run_bench(&[
        "failover",
        "--kills",
        "1",
        "--kill-every-s",
        "1",
        "--agents",
        "6",
        "--locks",
        "2",
    ])
    .await;
    let failover = &report["failover"];
    assert_eq!(failover["members"], 3, "{report}");
    let gaps = failover["gap_ms"].as_array().expect("gaps");
    assert_eq!(gaps.len(), 1, "{report}");
    assert!(gaps[0].as_f64().expect("a gap") > 0.0);
    assert!(report["cycles"].as_u64().expect("cycles") > 0, "{report}");
    assert_eq!(report["mutual_exclusion"]["ok"], true, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_uncontended_flood_reports_the_flood_and_the_swarms_sessions() {
    let dir = tempfile::tempdir().expect("temp data dir");
    // A low rate and burst, so the one-second flood meets them.
    let config = dir.path().join("fair.toml");
    std::fs::write(
        &config,
        "[node]\nrate_per_s_max = 100\nrate_burst_max = 100\n",
    )
    .expect("write the config");
    let config = config.to_str().expect("a UTF-8 temp path");
    let node = Node::start_with_args(&dir.path().join("data"), &["--config", config]).await;
    let report = bench(
        &node,
        &[
            "uncontended",
            "--agents",
            "3",
            "--duration-s",
            "1",
            "--flood",
        ],
    )
    .await;
    assert_sane(&report, 3);
    assert_eq!(report["parameters"]["flood"], true);
    let flood = &report["flood"];
    assert!(flood["sent"].as_u64().expect("sent") > 0, "{report}");
    assert!(
        flood["answered"]["rate_limited"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "the flooder met its rate: {report}"
    );
    assert_eq!(flood["sessions_lost"], 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scale_spreads_its_idle_agents_over_child_processes() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let pid = node.pid().to_string();
    let report = bench(
        &node,
        &[
            "scale",
            "--idle-agents",
            "41",
            "--processes",
            "2",
            "--idle-ttl-ms",
            "20000",
            "--agents",
            "2",
            "--duration-s",
            "1",
            "--node-pid",
            &pid,
        ],
    )
    .await;
    assert_sane(&report, 2);
    let scale = &report["scale"];
    assert_eq!(scale["processes"], 2, "{report}");
    assert_eq!(
        scale["idle_connected"], 41,
        "both children's shares: {report}"
    );
    assert_eq!(scale["sessions_live"], 41, "{report}");
    assert_eq!(scale["sessions_lost"], 0, "{report}");
    assert!(
        scale["idle_processes_rss_peak_mb"]
            .as_f64()
            .is_some_and(|mb| mb > 0.0),
        "the children report their memory: {report}"
    );
    assert!(
        scale["node_rss_mb"].as_f64().is_some_and(|mb| mb > 0.0),
        "{report}"
    );
    assert_eq!(report["parameters"]["idle_ttl_ms"], 20_000);
}
