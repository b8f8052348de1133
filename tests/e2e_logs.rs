//! End to end: what `hivekeeper serve` writes on stderr. `--log-format json` writes one JSON
//! object per line, an operator action is one audit line naming who, what and on what, no
//! ANSI colour reaches a pipe, `--log-level warn` hides INFO, and in a cluster a stopped
//! member is one `peer lost` WARN (by name) and one `peer back`, while openraft's per-read
//! error about it is written once, not once per read.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::ProcessCluster;
use common::{Log, Node, eventually, free_ports, inspect_lock, metric_sum, metrics_text, run_cli};
use serde_json::Value;

/// Every line `node` printed, parsed as JSON.
fn json_lines(node: &Node) -> Vec<Value> {
    node.log_tail(usize::MAX)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_and_an_audit_line_per_operator_action() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start_with_args(dir.path(), &["--log-format", "json"]).await;
    let broker = format!("127.0.0.1:{}", node.mqtt_port());
    let refused = run_cli(&["revoke", "00000000000000ff", "--brokers", &broker]).await;
    assert!(!refused.success, "{}", refused.stdout);
    let audit = eventually(10, "the audit line", || async {
        json_lines(&node)
            .into_iter()
            .find(|line| line["target"] == "hivekeeper::audit")
    })
    .await;
    assert_eq!(audit["level"], "INFO", "{audit}");
    let fields = &audit["fields"];
    assert_eq!(fields["message"], "admin action", "{audit}");
    assert_eq!(fields["action"], "admin.revoke", "{audit}");
    assert_eq!(fields["on"], "lease 00000000000000ff", "{audit}");
    assert!(
        fields["who"]
            .as_str()
            .is_some_and(|who| who.starts_with("hk-admin-")),
        "{audit}"
    );
    assert!(
        fields["outcome"]
            .as_str()
            .is_some_and(|outcome| outcome.starts_with("lease_not_found: ")),
        "{audit}"
    );
    // Reads are not actions: `leases` adds no audit line.
    let listed = run_cli(&["leases", "--brokers", &broker]).await;
    assert!(listed.success, "{}", listed.stderr);
    let audits = json_lines(&node)
        .iter()
        .filter(|line| line["target"] == "hivekeeper::audit")
        .count();
    assert_eq!(audits, 1);
}

/// `serve` with stderr on a pipe and no NO_COLOR: no escape codes. `--log-level warn`: no
/// INFO line (the "ready" line is INFO, so the test waits for the metrics port instead).
#[test]
fn a_pipe_gets_no_colours_and_warn_hides_info() {
    for (level, info_expected) in [("info", true), ("warn", false)] {
        let dir = tempfile::tempdir().expect("temp data dir");
        let ports = free_ports(2);
        let mut child = Command::new(env!("CARGO_BIN_EXE_hivekeeper"))
            .args(["serve", "--log-level", level, "--data-dir"])
            .arg(dir.path())
            .args(["--mqtt-listen", &format!("127.0.0.1:{}", ports[0])])
            .args(["--metrics-listen", &format!("127.0.0.1:{}", ports[1])])
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hivekeeper serve");
        let log = Log::default();
        log.collect(child.stderr.take().expect("piped"));
        // Bounded: 30 s for the node to serve its metrics port.
        let mut up = false;
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", ports[1])).is_ok()
                && (!info_expected || log.contains("hivekeeper ready"))
            {
                up = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(100));
        let text = log.tail(usize::MAX);
        assert!(up, "not up within 30 s:\n{text}");
        assert!(!text.contains('\u{1b}'), "escape codes on a pipe:\n{text}");
        assert_eq!(log.contains(" INFO "), info_expected, "{level}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_member_is_one_warn_by_name_and_openrafts_read_errors_are_not_a_flood() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let stopped = (leader + 1) % 3;
    let name = format!("n{}", stopped + 1);
    // The leader must have reached the member once: a member never reached is news only
    // after the start-up grace (members of a new cluster start one after another).
    let leader_metrics = cluster.nodes[leader].metrics_port;
    eventually(
        10,
        "the leader reached the member it will lose",
        async || {
            let text = metrics_text(leader_metrics).await?;
            let reachable = metric_sum(&text, "hivekeeper_raft_peer_reachable", &[("peer", &name)]);
            (reachable == 1.0).then_some(())
        },
    )
    .await;
    // Only what the leader writes from the kill on (a slow start may have had its own).
    let before = cluster.nodes[leader].log_tail(usize::MAX).lines().count();
    cluster.nodes[stopped].kill9();
    let reader = cluster.agent("reader", leader).await;
    // Reads on the leader: each is a read-index round whose heartbeat to the stopped member
    // fails (openraft logs an ERROR for each one). Bounded: 200 reads.
    for _ in 0..200 {
        inspect_lock(&reader, "door").await;
    }
    let all = cluster.nodes[leader].log_tail(usize::MAX);
    let log = all.lines().skip(before).collect::<Vec<_>>().join("\n");
    let lines = |needle: &str| log.lines().filter(|line| line.contains(needle)).count();
    let lost = format!("peer lost: unreachable, redialling every 10-100 ms peer={name}");
    assert_eq!(lines(&lost), 1, "{log}");
    assert!(
        lines("timeout while confirming leadership for read request") <= 1,
        "openraft's per-read error is written once a minute at most:\n{log}"
    );
    assert_eq!(lines("peer still unreachable"), 0, "{log}");
    // Numeric ids are not how our lines name members, from the start on (the election and
    // leadership lines included).
    // Our lines: those whose target (the third word) is one of Hivekeeper's.
    let ours: Vec<&str> = all
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(2)
                .is_some_and(|target| target.starts_with("hivekeeper"))
        })
        .collect();
    for member in ["n1", "n2", "n3"] {
        let id = format!("{}", hivekeeper_coordinator::raft::node_id_for(member));
        assert!(
            ours.iter().all(|line| !line.contains(&id)),
            "{member}'s id {id} in:\n{}",
            ours.join("\n")
        );
    }
    assert!(
        ours.iter()
            .any(|line| line.contains("leading the cluster member=n")),
        "the leader names itself:\n{}",
        ours.join("\n")
    );

    cluster.nodes[stopped].restart().await;
    eventually(30, "the peer back line", || async {
        let log = cluster.nodes[leader].log_tail(usize::MAX);
        log.lines()
            .skip(before)
            .filter(|line| line.contains(&format!("peer back: reachable again peer={name}")))
            .count()
            == 1
    })
    .await;
}

/// A leader whose followers are both gone says so once (`quorum lost`), and once more when
/// one of them is back (`quorum regained`). A leader that steps down instead (a node may give
/// up leadership without a quorum) says `no longer leading`: either way, one line, no repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_says_once_that_it_lost_its_quorum_and_once_that_it_is_back() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let before = cluster.nodes[leader].log_tail(usize::MAX).lines().count();
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for follower in &followers {
        cluster.nodes[*follower].kill9();
    }
    let count = |cluster: &ProcessCluster, needle: &str| {
        cluster.nodes[leader]
            .log_tail(usize::MAX)
            .lines()
            .skip(before)
            .filter(|line| line.contains(needle))
            .count()
    };
    eventually(20, "the quorum lost (or stepped down) line", || async {
        count(&cluster, "quorum lost: no majority of voters") == 1
            || count(&cluster, "no longer leading") >= 1
    })
    .await;
    // Still without a quorum a while later: no repeat.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(count(&cluster, "quorum lost") <= 1);
    let stepped_down = count(&cluster, "no longer leading") >= 1;
    cluster.nodes[followers[0]].restart().await;
    if !stepped_down {
        eventually(30, "the quorum regained (or stepped down) line", || async {
            count(&cluster, "quorum regained: a majority of voters answers") == 1
                || count(&cluster, "no longer leading") >= 1
        })
        .await;
    }
    assert!(count(&cluster, "quorum lost") <= 1);
    assert!(count(&cluster, "quorum regained") <= 1);
}
