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
//! Without `HIVEKEEPER_UPGRADE_FROM_BIN` the test fails, saying how to build the older binary;
//! `HIVEKEEPER_SKIP_UPGRADE_TEST=1` skips it instead, and says so.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::cluster::{Hold, ProcessCluster, check_history, member_list};
use common::node::this_build;
use common::{Node, eventually, free_port, metric, metrics_text, run_cli, within};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Where the older build's binary is.
const UPGRADE_FROM_BIN: &str = "HIVEKEEPER_UPGRADE_FROM_BIN";
/// `1`: skip the test (printed) when [`UPGRADE_FROM_BIN`] is not set.
const SKIP: &str = "HIVEKEEPER_SKIP_UPGRADE_TEST";

/// The older build's binary; `None` when the test is skipped on purpose.
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
        None => panic!(
            "{UPGRADE_FROM_BIN} is not set: build the older binary with \
             `export {UPGRADE_FROM_BIN}=\"$(.ci/upgrade-from)\"` (.ci/run does), or set {SKIP}=1 \
             to skip this test"
        ),
    }
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

/// What the workload saw.
#[derive(Default)]
struct Seen {
    holds: Mutex<Vec<Hold>>,
    /// Requests that failed and were retried (a member going down answers nothing).
    errors: AtomicUsize,
    /// Holds whose lease was lost while held.
    lost: AtomicUsize,
    stop: AtomicBool,
}

impl Seen {
    async fn holds(&self) -> usize {
        self.holds.lock().await.len()
    }

    /// Waits until `more` holds were added to what there is now: traffic flows.
    async fn flowing(&self, more: usize, what: &str) {
        let from = self.holds().await;
        eventually(60, what, || async {
            (self.holds().await >= from + more).then_some(())
        })
        .await;
    }
}

/// 9 agents on 3 hot locks, spread over the 3 members (each fails over along the list), until
/// `seen.stop`.
async fn workload(
    cluster: &ProcessCluster,
    seen: &Arc<Seen>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    for i in 0..9 {
        let agent = cluster.agent(&format!("worker-{i}"), i % 3).await;
        let seen = seen.clone();
        tasks.spawn(async move {
            let session = agent.session(5_000).await.expect("a session");
            let lock = format!("hot/{}", i % 3);
            while !seen.stop.load(Ordering::Relaxed) {
                let Ok(guard) = session.lock(lock.clone()).await else {
                    seen.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(2 + (i as u64 % 5))).await;
                let released = Instant::now();
                if guard.is_lost() {
                    seen.lost.fetch_add(1, Ordering::Relaxed);
                } else {
                    seen.holds.lock().await.push(Hold {
                        lock: lock.clone(),
                        agent: agent.agent_id().to_string(),
                        token: guard.token(),
                        granted,
                        released,
                    });
                }
                if guard.release().await.is_err() {
                    seen.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_upgraded_one_member_at_a_time_keeps_its_locks_and_raises_its_version() {
    let Some(older) = upgrade_from() else {
        return;
    };
    let root = tempfile::tempdir().expect("a temp dir");
    let mut cluster = ProcessCluster::start_program_on(&older, root, &member_list(3), &[]).await;
    let seen = Arc::new(Seen::default());
    let mut tasks = tokio::task::JoinSet::new();
    workload(&cluster, &seen, &mut tasks).await;
    seen.flowing(30, "holds on the older build").await;
    // The older build knows no cluster version.
    assert_eq!(cluster_versions(&cluster).await, vec![None; 3]);

    let started = Instant::now();
    for member in 0..3 {
        let node = &mut cluster.nodes[member];
        node.terminate().await;
        node.set_program(&this_build());
        node.restart().await;
        cluster.leader(30).await;
        seen.flowing(30, &format!("holds with n{} upgraded", member + 1))
            .await;
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
    seen.flowing(30, "holds at cluster version 2").await;
    let upgrade_took = started.elapsed();

    // A member of the older build can no longer join: it could not apply the log.
    let peer = format!("127.0.0.1:{}", free_port());
    let n4 = format!("n4={peer}");
    let _older_member = Node::start_program(
        &older,
        &cluster.root().join("n4"),
        &[
            "--name",
            "n4",
            "--initial-cluster",
            &n4,
            "--initial-cluster-state",
            "existing",
        ],
    )
    .await;
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

    seen.stop.store(true, Ordering::Relaxed);
    within(60, "the agents stop", async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    let holds = seen.holds.lock().await.clone();
    let violations = check_history(&holds);
    assert!(violations.is_empty(), "history violations: {violations:#?}");
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
