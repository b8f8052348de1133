//! A replicated service end to end: real `hivekeeper serve` processes forming 3- and 5-member
//! clusters on loopback, SDK agents spread over the members, `kill -9` of the leader, restarts.
//!
//! ```text
//! cargo test --test e2e_cluster -- --nocapture     # prints the failover gap it saw
//! ```

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::cluster::{Hold, LockWorkload, ProcessCluster, check_history};
use common::{Node, Raw, code, eventually, inspect_lock, release, run_cli, within};
use serde_json::json;
use tokio::time::Instant;

/// Snapshots every 50 entries, keeping 10 behind: a member down for a few hundred entries
/// must catch up from a snapshot.
const LOW_SNAPSHOT_CONFIG: &str = "[node.raft]\nsnapshot_every_entries = 50\n\
                                   entries_kept_after_snapshot = 10\n";

/// 20 agents on 3 hot locks, spread over the 3 members; the leader is killed mid-traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_agents_keep_mutual_exclusion_across_a_leader_kill_and_the_node_catches_up() {
    let config_dir = tempfile::tempdir().expect("a temp dir");
    let config = config_dir.path().join("hivekeeper.toml");
    std::fs::write(&config, LOW_SNAPSHOT_CONFIG).expect("write the config");
    let config = config.to_string_lossy().to_string();
    let mut cluster = ProcessCluster::start(3, &["--config", &config]).await;

    let seen = Arc::new(LockWorkload::default());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let agent = cluster.agent(&format!("worker-{i}"), i % 3).await;
        tasks.spawn(seen.clone().run(agent, format!("hot/{}", i % 3), i));
    }

    // Traffic flows, then the leader dies.
    eventually(30, "holds before the kill", || async {
        (seen.hold_count().await >= 60).then_some(())
    })
    .await;
    let old_leader = cluster.leader(10).await;
    let killed_at = Instant::now();
    cluster.nodes[old_leader].kill9();
    let before_kill = seen.hold_count().await;
    eventually(30, "grants after the kill", || async {
        (seen.hold_count().await >= before_kill + 200).then_some(())
    })
    .await;
    let new_leader = cluster.leader(10).await;
    assert_ne!(new_leader, old_leader);
    let holds = seen.finish(&mut tasks).await;
    let first_after = holds
        .iter()
        .filter(|hold| hold.granted > killed_at)
        .map(|hold| hold.granted - killed_at)
        .min()
        .expect("grants after the kill");
    println!(
        "{} holds, {} errors retried, failover gap (kill to first grant) {:?}",
        holds.len(),
        seen.errors.load(Ordering::Relaxed),
        first_after
    );
    assert_eq!(
        seen.lost.load(Ordering::Relaxed),
        0,
        "a 5 s lease was lost across a failover"
    );

    // The killed member comes back and catches up: the survivors purged the entries it
    // missed behind their snapshots, so it installs one.
    cluster.nodes[old_leader].restart().await;
    eventually(30, "the restarted node installs a snapshot", || async {
        cluster.nodes[old_leader]
            .log_tail(400)
            .contains("installed a snapshot from the leader")
            .then_some(())
    })
    .await;
    // And it serves: a request through it is forwarded and answered.
    let mut raw = Raw::connect(cluster.nodes[old_leader].mqtt_port(), "late-agent").await;
    let lease = raw.grant("g1", 5_000).await;
    let answer = raw
        .call(json!({"id": "a1", "op": "lock.acquire", "name": "hot/0", "lease": lease, "wait_ms": 5_000}))
        .await;
    let max_token = holds
        .iter()
        .filter(|hold| hold.lock == "hot/0")
        .map(|hold| hold.token)
        .max()
        .expect("hot/0 was held");
    let token = answer["token"]
        .as_u64()
        .unwrap_or_else(|| panic!("acquire answered {answer}"));
    assert!(token > max_token, "token {token} after {max_token}");
}

/// Holds, queues and tokens survive a `kill -9` of every member at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_restart_keeps_every_acknowledged_hold_queue_and_token() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let holder = cluster.agent("holder", 0).await;
    let holder_session = holder.session(20_000).await.expect("session");
    let guard = holder_session.lock("depot").await.expect("lock");
    let first_token = guard.token();
    // Two waiters, queued through two other members, in a known order.
    let mut waiters = Vec::new();
    for (i, home) in [(1, 1), (2, 2)] {
        let agent = cluster.agent(&format!("waiter-{i}"), home).await;
        let session = agent.session(20_000).await.expect("session");
        let waiting = tokio::spawn(async move {
            let guard = session.lock("depot").await.expect("granted in the end");
            (guard.token(), guard)
        });
        eventually(10, "queued", || async {
            let (_, queue) = inspect_lock(&holder, "depot").await;
            (queue.len() == i).then_some(())
        })
        .await;
        waiters.push((agent, waiting));
    }
    let (holders_before, waiters_before) = inspect_lock(&holder, "depot").await;

    for node in &mut cluster.nodes {
        node.kill9();
    }
    for node in &mut cluster.nodes {
        node.restart().await;
    }
    cluster.leader(30).await;
    let (holders_after, waiters_after) = inspect_lock(&holder, "depot").await;
    assert_eq!(holders_after, holders_before);
    assert_eq!(waiters_after, waiters_before);

    // The queue moves on in order, tokens higher than before the restart.
    release(guard, "the holder releases").await;
    let mut previous = first_token;
    for (agent, waiting) in waiters {
        let (token, guard) = within(20, "the next waiter is granted", waiting)
            .await
            .expect("the waiter task");
        assert!(
            token > previous,
            "{} got {token} after {previous}",
            agent.agent_id()
        );
        previous = token;
        release(guard, "the waiter releases").await;
    }
}

/// A request sent to a follower is answered there; five members survive two kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_survive_two_kills_and_followers_answer() {
    let mut cluster = ProcessCluster::start(5, &[]).await;
    let leader = cluster.leader(10).await;
    let follower = (leader + 1) % 5;
    let mut raw = Raw::connect(cluster.nodes[follower].mqtt_port(), "probe").await;
    let lease = raw.grant("g1", 10_000).await;
    let answer = raw
        .call(
            json!({"id": "a1", "op": "lock.acquire", "name": "pad", "lease": lease, "wait_ms": 0}),
        )
        .await;
    let first = answer["token"]
        .as_u64()
        .unwrap_or_else(|| panic!("answered {answer}"));
    let answer = raw
        .call(json!({"id": "r1", "op": "lock.release", "name": "pad", "lease": lease}))
        .await;
    assert_eq!(answer["ok"], json!(true), "release answered {answer}");

    // Kill the leader and one more member (not the one the probe uses).
    let second = (0..5)
        .find(|i| *i != leader && *i != follower)
        .expect("five members");
    // Outage reports so far (members dial each other while the cluster starts).
    let outages = |node: &Node| {
        node.log_tail(100_000)
            .matches("peer lost: unreachable")
            .count()
    };
    let before: Vec<usize> = cluster.nodes.iter().map(outages).collect();
    cluster.nodes[leader].kill9();
    cluster.nodes[second].kill9();
    // Retried (new ids: a `would_block` or `unavailable` answer is final for its id) until the
    // three survivors have a leader; bounded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    let token = loop {
        attempt += 1;
        let answer = raw
            .call(
                json!({"id": format!("a2-{attempt}"), "op": "lock.acquire", "name": "pad",
                         "lease": lease, "wait_ms": 0}),
            )
            .await;
        if code(&answer).is_none() {
            break answer["token"]
                .as_u64()
                .unwrap_or_else(|| panic!("answered {answer}"));
        }
        assert!(
            Instant::now() < deadline,
            "no grant from the three survivors within 30 s; last answer {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(token > first, "token {token} after {first}");

    // The survivors say once that a peer went, not at every heartbeat: openraft's lines per
    // failed RPC (about 50 a second per dead peer) are off by default, the transport reports
    // an outage once when it starts (and once when it ends).
    let now_leader = cluster.leader(10).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (i, node) in cluster.nodes.iter().enumerate() {
        if i == leader || i == second {
            continue;
        }
        let log = node.log_tail(100_000);
        assert!(
            !log.contains("RPCError") && !log.contains("heartbeat error"),
            "member {i} logs every failed RPC:\n{}",
            node.log_tail(20)
        );
        // Two dead peers, dialled by the Raft network's pool and the forwarder's: at most 4
        // reports since the kills.
        let reports = outages(node) - before[i];
        assert!(
            reports <= 4,
            "member {i} reported {reports} outages:\n{log}"
        );
        if i == now_leader {
            assert!(
                reports >= 1,
                "the leader never said its peers are gone:\n{log}"
            );
        }
    }
}

/// A waiter queued through one member, whose member dies, reconnects to another, resends its
/// request id, finds its queue slot (not a second one) and is granted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_member_dies_is_granted_through_another() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(10).await;
    let home = (leader + 1) % 3;
    let holder = cluster.agent("holder", leader).await;
    let holder_session = holder.session(10_000).await.expect("session");
    let guard = holder_session.lock("gate").await.expect("lock");
    let held_token = guard.token();

    let waiter = cluster.agent("waiter", home).await;
    let session = waiter.session(10_000).await.expect("session");
    let waiting = tokio::spawn(async move {
        let guard = session.lock("gate").await.expect("granted in the end");
        (guard.token(), guard, session)
    });
    eventually(10, "the waiter is queued", || async {
        let (_, queue) = inspect_lock(&holder, "gate").await;
        (queue.len() == 1).then_some(())
    })
    .await;

    cluster.nodes[home].kill9();
    // The waiter's SDK moves to the next member and resends its acquire (same id) there.
    eventually(20, "the waiter reconnected elsewhere", || async {
        let broker = waiter.broker()?;
        (!broker.ends_with(&format!(":{}", cluster.nodes[home].mqtt_port()))).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (_, queue) = inspect_lock(&holder, "gate").await;
    assert_eq!(queue.len(), 1, "one queue slot, not two: {queue:?}");

    release(guard, "the holder releases").await;
    let (token, guard, _session) = within(20, "the waiter is granted", waiting)
        .await
        .expect("the waiter task");
    assert!(token > held_token, "token {token} after {held_token}");
    release(guard, "the waiter releases").await;
}

/// `hivekeeper member add` brings a fourth node in (learner, then voter), it serves agents,
/// `member remove` takes a member out, and `member list` shows both changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_add_and_remove_through_the_cli() {
    let cluster = ProcessCluster::start(3, &[]).await;
    let brokers = cluster
        .mqtt_ports()
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect::<Vec<_>>()
        .join(",");
    let list = || {
        let brokers = brokers.clone();
        async move {
            run_cli(&["member", "list", "--json", "--broker", &brokers])
                .await
                .json()
        }
    };
    let names = |listing: &serde_json::Value| -> Vec<(String, bool)> {
        let mut names: Vec<(String, bool)> = listing["members"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().expect("a name").to_string(),
                    m["voter"].as_bool().expect("a flag"),
                )
            })
            .collect();
        names.sort();
        names
    };
    let voters = |names: &[&str]| -> Vec<(String, bool)> {
        names.iter().map(|name| (name.to_string(), true)).collect()
    };
    assert_eq!(names(&list().await), voters(&["n1", "n2", "n3"]));

    // A fresh node started to join, then added.
    let (n4, n4_member) = cluster
        .start_joining(&common::node::this_build(), "n4")
        .await;
    let added = run_cli(&[
        "member",
        "add",
        &n4_member,
        "--broker",
        &brokers,
        "--timeout-ms",
        "20000",
    ])
    .await;
    assert!(added.success, "member add failed: {}", added.stderr);
    assert_eq!(names(&list().await), voters(&["n1", "n2", "n3", "n4"]));
    // The new member serves: a lease and a lock through its own broker.
    let mut raw = Raw::connect(n4.mqtt_port(), "via-n4").await;
    let lease = raw.grant("g1", 5_000).await;
    let answer = raw
        .call(json!({"id": "a1", "op": "lock.acquire", "name": "n4-lock", "lease": lease, "wait_ms": 0}))
        .await;
    assert!(
        answer["token"].as_u64().is_some(),
        "acquire through n4: {answer}"
    );
    // The admin reads work through a follower too (forwarded to the leader).
    let n4_broker = format!("127.0.0.1:{}", n4.mqtt_port());
    let inspect = run_cli(&[
        "inspect", "lock", "n4-lock", "--json", "--broker", &n4_broker,
    ])
    .await
    .json();
    assert_eq!(inspect["holders"][0]["agent"], "via-n4", "{inspect}");
    let leases = run_cli(&["leases", "--json", "--broker", &n4_broker])
        .await
        .json();
    assert!(
        leases.to_string().contains("via-n4"),
        "leases through n4: {leases}"
    );

    // Remove a follower that is not n4.
    let leader = cluster.leader(10).await;
    let removed = format!(
        "n{}",
        (0..3).find(|i| *i != leader).expect("a follower") + 1
    );
    let out = run_cli(&["member", "remove", &removed, "--broker", &brokers]).await;
    assert!(out.success, "member remove failed: {}", out.stderr);
    let left: Vec<&str> = ["n1", "n2", "n3", "n4"]
        .into_iter()
        .filter(|name| *name != removed)
        .collect();
    assert_eq!(names(&list().await), voters(&left));
    // Removing it again is refused with the reason.
    let again = run_cli(&["member", "remove", &removed, "--broker", &brokers]).await;
    assert!(!again.success);
    assert!(again.stderr.contains("not a member"), "{}", again.stderr);
}

/// The checker above is what the cluster tests trust: it must flag an overlap and a token
/// that goes backwards.
#[test]
fn the_history_checker_flags_overlaps_and_token_regressions() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let hold = |agent: &str, token: u64, from: u64, to: u64| Hold {
        lock: "l".into(),
        agent: agent.into(),
        token,
        granted: at(from),
        released: at(to),
    };
    assert!(check_history(&[hold("a", 1, 0, 10), hold("b", 2, 10, 20)]).is_empty());
    let overlap = check_history(&[hold("a", 1, 0, 10), hold("b", 2, 5, 20)]);
    assert_eq!(overlap.len(), 1, "{overlap:?}");
    let backwards = check_history(&[hold("a", 5, 0, 10), hold("b", 4, 11, 20)]);
    assert_eq!(backwards.len(), 1, "{backwards:?}");
}

/// A paused leader (SIGSTOP: a GC or VM stall) keeps its sockets open and answers nothing. A
/// request a follower forwarded to it must not wait for the forward's timeout: once the
/// follower learns of the new leader, the request goes there. Without that, the agent would get
/// `unavailable: no commit within 5000 ms`; here it gets its grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_forwarded_to_a_paused_leader_goes_to_the_new_one() {
    let cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let follower = (leader + 1) % 3;
    let mut raw = Raw::connect(cluster.nodes[follower].mqtt_port(), "drone-paused").await;
    let lease = raw.grant("g1", 60_000).await;

    cluster.nodes[leader].signal("STOP");
    let acquired = raw
        .call(json!({"id": "a1", "op": "lock.acquire", "name": "pad-p", "lease": lease}))
        .await;
    cluster.nodes[leader].signal("CONT");
    assert_eq!(acquired["ok"], true, "{acquired}");
    assert_eq!(code(&acquired), None, "{acquired}");

    // Continued, the old leader learns it was deposed and its clients' writes go to the new
    // leader. Until it learns, `unavailable` is a fair answer: retried with the same id, as
    // the SDK does, a bounded number of times.
    let mut back = Raw::connect(cluster.nodes[leader].mqtt_port(), "drone-back").await;
    let grant = json!({"id": "g2", "op": "lease.grant", "ttl_ms": 60_000});
    let mut answers = Vec::new();
    for _ in 0..40 {
        let answer = back.call(grant.clone()).await;
        let granted = answer["ok"] == true;
        answers.push(answer);
        if granted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        answers.last().map(|answer| answer["ok"].clone()),
        Some(json!(true)),
        "the continued member never took a write: {answers:?}"
    );
}
