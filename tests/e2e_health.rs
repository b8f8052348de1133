//! Health that tells the truth, on real `hivekeeper serve` processes: the metrics port's
//! `/health`, `/ready` and 404s, the build and process metrics, per-peer reachability, and a
//! leader whose followers are gone saying `NO QUORUM` everywhere an operator looks, answering
//! requests `unavailable` at once with the reason.
//!
//! ```text
//! cargo test --test e2e_health -- --nocapture     # prints how fast `unavailable` came
//! ```

mod common;

use common::cluster::ProcessCluster;
use common::{
    Node, Raw, code, eventually, http_get, metric, metric_sum, metrics_text, run_cli,
    wait_http_status,
};
use serde_json::json;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_is_healthy_ready_and_says_what_it_runs() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let port = node.metrics_port;
    // Ready once it leads and has applied its own first entry.
    let ready = wait_http_status(port, "/ready", 200, 10).await;
    assert!(
        ready
            .body
            .starts_with("ok: leader with a quorum, applied up to "),
        "{ready:?}"
    );
    let health = http_get(port, "/health").await.expect("an answer");
    assert_eq!(health.status, 200, "{health:?}");
    assert!(
        health.body.starts_with("ok: leader with a quorum"),
        "{health:?}"
    );
    let unknown = http_get(port, "/nope").await.expect("an answer");
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (
            404,
            "/nope is not served here: try /metrics, /health or /ready\n"
        )
    );

    let text = metrics_text(port).await.expect("a scrape");
    assert_eq!(
        metric_sum(
            &text,
            "hivekeeper_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(metric(&text, "hivekeeper_raft_has_quorum"), Some(1.0));
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
    ] {
        assert!(
            metric(&text, name).is_some_and(|value| value > 0.0),
            "{name} missing or 0:\n{text}"
        );
    }
    // CPU time is counted in clock ticks of 10 ms: a node that just started on a busy machine
    // may not have been running at any tick yet (CI once saw 0). Present and a time, then; its
    // reading is checked by `process_metrics`' unit tests.
    assert!(
        metric(&text, "process_cpu_seconds_total").is_some_and(|value| value >= 0.0),
        "process_cpu_seconds_total missing:\n{text}"
    );
}

/// Stop two of three members: the leader left alone says `NO QUORUM` in `status`, exports
/// `hivekeeper_raft_has_quorum 0` and its followers unreachable, answers `/health` and
/// `/ready` 503, and refuses a request `unavailable` at once, naming the missing members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_left_alone_says_no_quorum_everywhere() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(10).await;
    let port = cluster.nodes[leader].metrics_port;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let names: Vec<String> = followers.iter().map(|i| format!("n{}", i + 1)).collect();
    // Both followers reachable and caught up, by name, on the leader.
    eventually(10, "both followers reachable", || async {
        let text = metrics_text(port).await?;
        names
            .iter()
            .all(|peer| {
                metric_sum(&text, "hivekeeper_raft_peer_reachable", &[("peer", peer)]) == 1.0
                    && text.contains(&format!(
                        "hivekeeper_raft_peer_lag_entries{{peer=\"{peer}\"}} 0"
                    ))
            })
            .then_some(())
    })
    .await;

    // Idle for several election timeouts: heartbeats alone keep the quorum acknowledged. (On
    // a loaded machine one heartbeat round can come late and the quorum lapse for a moment,
    // so the check waits for it to hold; without heartbeats refreshing it, it never would.)
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    wait_http_status(port, "/health", 200, 10).await;
    eventually(10, "the idle leader has its quorum", || async {
        let text = metrics_text(port).await?;
        (metric(&text, "hivekeeper_raft_has_quorum") == Some(1.0)).then_some(())
    })
    .await;

    for follower in &followers {
        cluster.nodes[*follower].kill9();
    }
    let broker = format!("127.0.0.1:{}", cluster.nodes[leader].mqtt_port());
    let health = wait_http_status(port, "/health", 503, 10).await;
    assert!(
        health
            .body
            .starts_with("no quorum: leader not acknowledged by a majority of its 3 voters for "),
        "{health:?}"
    );
    // The quorum can lapse (one election timeout) before the leader's failed sends to the
    // second follower mark it unreachable, so the first 503 may name only one of them; both
    // are named once both sends have failed.
    let both = format!(
        " ms (election timeout 300 ms); unreachable: {}\n",
        names.join(", ")
    );
    eventually(10, "/health names both stopped followers", || async {
        let answer = http_get(port, "/health").await?;
        (answer.status == 503 && answer.body.ends_with(&both)).then_some(())
    })
    .await;
    let ready = http_get(port, "/ready").await.expect("an answer");
    assert_eq!(ready.status, 503, "{ready:?}");

    let text = metrics_text(port).await.expect("a scrape");
    assert_eq!(
        metric(&text, "hivekeeper_raft_has_quorum"),
        Some(0.0),
        "{text}"
    );
    // It still leads in its own term: openraft never steps down on its own.
    assert_eq!(metric(&text, "hivekeeper_raft_is_leader"), Some(1.0));
    for peer in &names {
        assert_eq!(
            metric_sum(&text, "hivekeeper_raft_peer_reachable", &[("peer", peer)]),
            0.0,
            "{peer}:\n{text}"
        );
    }

    let status = run_cli(&["status", "--broker", &broker]).await;
    assert!(status.success, "{}", status.stderr);
    let leader_name = format!("n{}", leader + 1);
    let row = status
        .stdout
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no row:\n{}", status.stdout));
    assert!(
        row.starts_with(&format!(
            "{broker}  {leader_name}    leader NO QUORUM  {leader_name} "
        )),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains(&format!(
            "NO QUORUM: {leader_name} leads, but no majority of its voters has acknowledged it \
             for "
        )),
        "{}",
        status.stdout
    );
    let json = run_cli(&["status", "--json", "--broker", &broker])
        .await
        .json();
    assert_eq!(json[0]["status"]["has_quorum"], json!(false), "{json}");

    // A request is refused at once, with the reason, not after the 5 s commit timeout.
    let mut raw = Raw::connect(cluster.nodes[leader].mqtt_port(), "drone-q").await;
    let asked = Instant::now();
    let answer = raw
        .call(json!({"id": "g1", "op": "lease.grant", "ttl_ms": 5_000}))
        .await;
    let took = asked.elapsed();
    assert_eq!(code(&answer), Some("unavailable"), "{answer}");
    let message = answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {answer}"));
    assert!(
        message.starts_with(
            "no quorum: this leader has not heard from a majority of its 3 voters for "
        ),
        "{message}"
    );
    assert!(
        message.ends_with(&format!(
            " ms (more than the 300 ms election timeout); unreachable: {}; nothing can commit \
             until enough members are back",
            names.join(", ")
        )),
        "{message}"
    );
    // Printed, not asserted (no timing assertions on two shared cores): the message above
    // is what only the immediate refusal says; the commit timeout's says `no commit within`.
    println!("`unavailable: no quorum` after {took:?} (the commit timeout is 5 s)");
}
