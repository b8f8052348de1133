//! A rolling upgrade end to end: a three-member cluster of an older build (the last commit
//! before peer protocol versions, built by `.ci/upgrade-from`) is upgraded to this build one
//! member at a time (SIGTERM, then this build's binary on the same data and ports), while
//! agents take and release locks through every member. The history has no anomaly (holds of
//! one lock never overlap, tokens grow in grant order, no lease is lost), the cluster version
//! stays 1 while an older member remains, and rises to 2 once the last member runs this
//! build; then a member of the older build is refused when it is added.
//!
//! ```text
//! export HIVEKEEPER_UPGRADE_FROM_BIN="$(.ci/upgrade-from)"   # .ci/run does this
//! cargo test --test e2e_upgrade -- --nocapture
//! ```
//!
//! Without `HIVEKEEPER_UPGRADE_FROM_BIN` the test runs `.ci/upgrade-from` itself (minutes the
//! first time); `HIVEKEEPER_SKIP_UPGRADE_TEST=1` skips it instead, and says so.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::cluster::{LockWorkload, ProcessCluster, member_list};
use common::node::this_build;
use common::{eventually, metric, metrics_text, run_cli};
use tokio::time::Instant;

/// Where the older build's binary is.
const UPGRADE_FROM_BIN: &str = "HIVEKEEPER_UPGRADE_FROM_BIN";
/// `1`: skip the test (printed) when [`UPGRADE_FROM_BIN`] is not set.
const SKIP: &str = "HIVEKEEPER_SKIP_UPGRADE_TEST";

/// The older build's binary; `None` when the test is skipped on purpose. Unset, the test
/// builds it with `.ci/upgrade-from` (in a target dir of its own, so it never waits for the
/// `cargo test` running this): minutes the first time, then a cargo no-op.
fn upgrade_from() -> Option<PathBuf> {
    match std::env::var_os(UPGRADE_FROM_BIN) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{UPGRADE_FROM_BIN}={} is not a file: build it with \
                 `export {UPGRADE_FROM_BIN}=\"$(.ci/upgrade-from)\"`",
                path.display()
            );
            Some(path)
        }
        None if std::env::var(SKIP).as_deref() == Ok("1") => {
            eprintln!("SKIPPED: the rolling upgrade test ({SKIP}=1 and {UPGRADE_FROM_BIN} unset)");
            None
        }
        None => Some(build_upgrade_from()),
    }
}

/// Runs `.ci/upgrade-from` and returns the path it prints; fails the test with its output
/// when it fails.
fn build_upgrade_from() -> PathBuf {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/upgrade-from");
    eprintln!("{UPGRADE_FROM_BIN} is not set: building the older release with {script}");
    let output = std::process::Command::new("bash")
        .arg(script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|error| panic!("running {script}: {error}"));
    assert!(
        output.status.success(),
        "{script} failed ({}); set {SKIP}=1 to skip this test",
        output.status
    );
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(
        path.is_file(),
        "{script} printed {}, not a file",
        path.display()
    );
    path
}

/// Each running member's `hivekeeper_cluster_version` (`None`: not exported, an older build).
async fn cluster_versions(cluster: &ProcessCluster) -> Vec<Option<f64>> {
    let mut versions = Vec::new();
    for node in &cluster.nodes {
        let text = metrics_text(node.metrics_port).await.unwrap_or_default();
        versions.push(metric(&text, "hivekeeper_cluster_version"));
    }
    versions
}

/// Waits until `more` holds were added to what `seen` has now: traffic flows.
async fn flowing(seen: &LockWorkload, more: usize, what: &str) {
    let from = seen.hold_count().await;
    eventually(60, what, || async {
        (seen.hold_count().await >= from + more).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_upgraded_one_member_at_a_time_keeps_its_locks_and_raises_its_version() {
    let Some(older) = upgrade_from() else {
        return;
    };
    let root = tempfile::tempdir().expect("a temp dir");
    let mut cluster = ProcessCluster::start_program_on(&older, root, &member_list(3), &[]).await;
    let seen = Arc::new(LockWorkload::default());
    let mut tasks = tokio::task::JoinSet::new();
    // 9 agents on 3 hot locks, spread over the 3 members (each fails over along the list).
    for i in 0..9 {
        let agent = cluster.agent(&format!("worker-{i}"), i % 3).await;
        tasks.spawn(seen.clone().run(agent, format!("hot/{}", i % 3), i));
    }
    flowing(&seen, 30, "holds on the older build").await;
    // The older build knows no cluster version.
    assert_eq!(cluster_versions(&cluster).await, vec![None; 3]);

    let started = Instant::now();
    for member in 0..3 {
        let node = &mut cluster.nodes[member];
        node.terminate().await;
        node.set_program(&this_build());
        node.restart().await;
        cluster.leader(30).await;
        flowing(&seen, 30, &format!("holds with n{} upgraded", member + 1)).await;
        if member < 2 {
            // An older member remains: the upgraded ones stay at version 1.
            let versions = cluster_versions(&cluster).await;
            let upgraded = &versions[..=member];
            assert!(
                upgraded.iter().all(|version| *version == Some(1.0)),
                "with n{} upgraded: {versions:?}",
                member + 1
            );
        }
    }
    // Every member runs this build: the leader raises the version, and every member applies it.
    eventually(30, "cluster version 2 on every member", || async {
        let versions = cluster_versions(&cluster).await;
        versions
            .iter()
            .all(|version| *version == Some(2.0))
            .then_some(())
    })
    .await;
    let raised = cluster
        .nodes
        .iter()
        .any(|node| node.log_tail(5_000).contains("cluster version raised"));
    assert!(raised, "no member logged the raise");
    flowing(&seen, 30, "holds at cluster version 2").await;
    let upgrade_took = started.elapsed();

    // A member of the older build can no longer join: it could not apply the log.
    let (_older_member, n4) = cluster.start_joining(&older, "n4").await;
    let brokers = format!("127.0.0.1:{}", cluster.nodes[0].mqtt_port());
    let refused = run_cli(&["member", "add", &n4, "--broker", &brokers]).await;
    assert!(
        !refused.success,
        "an older member was added: {}",
        refused.stdout
    );
    assert_eq!(
        refused.stderr,
        "hivekeeper: admin.member.add refused: bad_request: n4 runs a build that applies \
         cluster version 1 at most, and the cluster is at version 2: nothing was changed; run \
         this release on n4 first, then add it\n"
    );

    let holds = seen.finish(&mut tasks).await;
    assert_eq!(
        seen.lost.load(Ordering::Relaxed),
        0,
        "a 5 s lease was lost during the upgrade"
    );
    println!(
        "{} holds, {} errors retried, the upgrade of 3 members took {upgrade_took:?}",
        holds.len(),
        seen.errors.load(Ordering::Relaxed)
    );
}
