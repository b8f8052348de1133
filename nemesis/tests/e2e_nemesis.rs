//! `hivekeeper-nemesis` on three members: every fault class once (kill -9 of the leader, of a
//! random member and of a majority; SIGSTOP of the leader and of a client holding a lock;
//! partitions: minority, isolated leader, bridge; the leader's clock forward and backward,
//! skew; one member's disk full), with every workload running throughout (the keys and watch
//! workloads included), and the whole history checked. The run must find no anomaly and no harness error.
//!
//! Partitions and the full disk need root (network namespaces, tmpfs) and the clock faults
//! Debian's `faketime`: `.ci/run` runs as root and installs it. Run elsewhere, this test fails
//! and says what is missing rather than skipping. About 2.5 minutes.
//!
//! The members run the `hivekeeper` binary of the same target directory (`cargo test
//! --workspace` builds every binary of the workspace before it runs a test); without it, this
//! test fails and says how to build it.
//!
//! The availability figures are reported, not asserted (a shared 2-core machine); they are
//! recorded in docs/RELIABILITY.md from release builds.

use std::process::Command;

use hivekeeper_test_support::{hivekeeper_binary, within};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_class_once_on_three_members_finds_no_anomaly() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hivekeeper-nemesis"));
    command.arg("--hivekeeper").arg(hivekeeper_binary());
    command.args([
        "--members",
        "3",
        "--duration-s",
        "130",
        "--quiet-s",
        "2",
        "--fault-s",
        "4",
        "--seed",
        "7",
        "--json",
    ]);
    let output = within(
        420,
        "hivekeeper-nemesis",
        tokio::task::spawn_blocking(move || command.output()),
    )
    .await
    .expect("the blocking task")
    .expect("hivekeeper-nemesis runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!(
            "no JSON report ({error}); exit {}:\n{stdout}\n{stderr}",
            output.status
        )
    });
    assert_eq!(
        report["not_run"],
        serde_json::json!([]),
        "every fault class must run here (root and faketime: see .ci/run)"
    );
    assert_eq!(report["errors"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["anomalies"], 0, "{report:#}");
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    let ran: Vec<&str> = report["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .map(|w| w["fault"].as_str().expect("fault name"))
        .collect();
    for fault in [
        "kill-leader",
        "kill-random",
        "kill-majority",
        "pause-leader",
        "pause-client",
        "partition-minority",
        "partition-leader",
        "partition-bridge",
        "clock-forward",
        "clock-backward",
        "clock-skew",
        "disk-full",
    ] {
        assert!(ran.contains(&fault), "{fault} did not run: {ran:?}");
    }
    for check in [
        "register",
        "mutex",
        "semaphore",
        "leases",
        "keys",
        "watch",
        "election",
        "barrier",
        "hold_time",
        "rw_lock",
    ] {
        let ops = report["checks"][check]["ops"].as_u64().expect("ops");
        assert!(ops > 0, "the {check} workload did nothing: {report:#}");
    }
    // The paused client's lock went to someone else while it was stopped.
    let reclaimed = report["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .filter(|w| w["fault"] == "pause-client")
        .all(|w| w["reclaim_ms"].is_number());
    assert!(reclaimed, "{report:#}");
    // A member cut off from the majority answered `unavailable` (to its sentinel, a raw client
    // that never leaves it) during its fault: what its clients need to move elsewhere.
    let told = report["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .filter(|w| w["fault"] == "partition-leader" || w["fault"] == "partition-minority")
        .all(|w| w["hit_unavailable_ms"].is_number());
    assert!(told, "{report:#}");
}
