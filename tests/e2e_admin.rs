//! End to end: the admin CLI (`hivekeeper status | inspect | leases | revoke`) against a real
//! `hivekeeper serve`. `inspect` shows the holder and the waiters in order, `leases` lists
//! every lease, `revoke` hands the lock to the next waiter with a higher token and tells the
//! old holder (`lock.lost`, `lease.revoked`, its SDK session ends), `status` shows the node as
//! the leader with consistent indexes, and every `--json` output parses.

mod common;

use common::{Node, Raw, agent, agent_session, run_cli, wait_for_waiters, within};
use hivekeeper_agent::SessionState;
use hivekeeper_agent::protocol::Event;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_leases_and_revoke_hand_a_stuck_lock_to_the_next_waiter() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let broker = format!("127.0.0.1:{port}");
    let cli = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        all.extend(["--broker".to_string(), broker.clone()]);
        async move { run_cli(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };

    // drone-a holds the lock through the SDK; drone-b then drone-c queue behind it.
    let observer = agent("observer", port).await;
    let (agent_a, session_a) = agent_session("drone-a", port, 60_000).await;
    let mut events_a = agent_a.events();
    let guard = within(10, "drone-a takes pad-3", session_a.lock("pad-3"))
        .await
        .expect("the lock is free");
    let old_token = guard.token();
    let mut b = Raw::connect(port, "drone-b").await;
    let mut c = Raw::connect(port, "drone-c").await;
    let lease_b = b.grant("g", 60_000).await;
    let lease_c = c.grant("g", 60_000).await;
    b.send(
        json!({"id": "b1", "op": "lock.acquire", "name": "pad-3", "lease": lease_b}).to_string(),
    )
    .await;
    wait_for_waiters(&observer, "pad-3", &["drone-b".into()]).await;
    c.send(
        json!({"id": "c1", "op": "lock.acquire", "name": "pad-3", "lease": lease_c}).to_string(),
    )
    .await;
    wait_for_waiters(&observer, "pad-3", &["drone-b".into(), "drone-c".into()]).await;

    // inspect: the holder with its token and lease time left, the waiters in order.
    let inspected = cli(&["inspect", "lock", "pad-3", "--json"]).await.json();
    assert_eq!(inspected["kind"], "lock", "{inspected}");
    assert_eq!(inspected["name"], "pad-3", "{inspected}");
    let holders = inspected["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{inspected}");
    assert_eq!(holders[0]["agent"], "drone-a");
    assert_eq!(holders[0]["lease"], session_a.lease());
    assert_eq!(holders[0]["token"], old_token);
    let left_ms = holders[0]["remaining_ms"]
        .as_u64()
        .expect("the leader knows");
    assert!(left_ms <= 60_000, "{left_ms}");
    let waiters: Vec<(&str, u64)> = inspected["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| {
            (
                w["agent"].as_str().unwrap_or(""),
                w["position"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(waiters, vec![("drone-b", 1), ("drone-c", 2)]);
    // The table says the same, in the same order.
    let table = cli(&["inspect", "lock", "pad-3"]).await;
    assert!(table.success, "{}", table.stderr);
    let text = &table.stdout;
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle} not in:\n{text}"))
    };
    assert!(
        at("drone-a") < at("drone-b") && at("drone-b") < at("drone-c"),
        "{text}"
    );
    assert!(text.contains(&old_token.to_string()), "{text}");

    // leases: all three, with their agents and TTLs.
    let listed = cli(&["leases", "--json"]).await.json();
    let mut leases: Vec<(String, String, u64)> = listed["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|l| {
            (
                l["lease"].as_str().unwrap_or("").to_string(),
                l["agent"].as_str().unwrap_or("").to_string(),
                l["ttl_ms"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    leases.sort();
    let mut expected = vec![
        (session_a.lease().to_string(), "drone-a".to_string(), 60_000),
        (lease_b.clone(), "drone-b".to_string(), 60_000),
        (lease_c.clone(), "drone-c".to_string(), 60_000),
    ];
    expected.sort();
    assert_eq!(leases, expected, "{listed}");

    // revoke drone-a's lease: drone-b is granted with a higher token, drone-a is told.
    let revoked = cli(&["revoke", session_a.lease(), "--json"]).await.json();
    assert_eq!(revoked, json!({"revoked": session_a.lease()}));
    let granted = b.next(10).await;
    assert_eq!(granted["id"], "b1", "{granted}");
    assert_eq!(granted["ok"], true, "{granted}");
    let new_token = granted["token"].as_u64().expect("a grant has a token");
    assert!(new_token > old_token, "{new_token} > {old_token}");
    let mut told = Vec::new();
    while told.len() < 2 {
        match within(10, "drone-a's events", events_a.recv()).await {
            Ok(event) => told.push(event),
            Err(error) => panic!("drone-a's events: {error}"),
        }
    }
    assert!(
        told.contains(&Event::LockLost {
            name: "pad-3".into(),
            token: old_token
        }),
        "{told:?}"
    );
    assert!(
        told.contains(&Event::LeaseRevoked {
            lease: session_a.lease().into()
        }),
        "{told:?}"
    );
    let state = within(10, "drone-a's session ends", session_a.lost()).await;
    assert_eq!(state, SessionState::Expired);
    drop(guard);

    // The lease is gone: a second revoke is refused with its code, in one line.
    let again = cli(&["revoke", session_a.lease()]).await;
    assert!(!again.success, "{}", again.stdout);
    assert!(again.stderr.contains("lease_not_found"), "{}", again.stderr);
    assert_eq!(again.stderr.trim().lines().count(), 1, "{}", again.stderr);

    let after = cli(&["inspect", "lock", "pad-3", "--json"]).await.json();
    assert_eq!(after["holders"][0]["agent"], "drone-b", "{after}");
    assert_eq!(after["holders"][0]["token"], new_token, "{after}");
    assert_eq!(after["waiters"][0]["agent"], "drone-c", "{after}");
    assert_eq!(
        after["waiters"].as_array().map(Vec::len),
        Some(1),
        "{after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_node_as_leader_and_names_an_unreachable_one() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let broker = format!("127.0.0.1:{}", node.mqtt_port());
    // Some writes, so the indexes have moved.
    let mut a = Raw::connect(node.mqtt_port(), "drone-a").await;
    a.grant("g1", 60_000).await;
    a.grant("g2", 60_000).await;

    let run = run_cli(&["status", "--broker", &broker, "--json"]).await;
    let nodes = run.json();
    let status = &nodes[0]["status"];
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
    assert_eq!(nodes[0]["broker"], broker.as_str());
    assert_eq!(status["node_id"], 1, "{status}");
    assert_eq!(status["is_leader"], true, "{status}");
    assert_eq!(status["leader_id"], 1, "{status}");
    assert!(status["term"].as_u64() >= Some(1), "{status}");
    let index = |field: &str| {
        status[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} missing: {status}"))
    };
    // The two grants were applied, and nothing is applied before it is committed.
    assert!(index("applied_index") >= 2, "{status}");
    assert!(
        index("applied_index") <= index("committed_index"),
        "{status}"
    );
    assert!(
        index("committed_index") <= index("last_log_index"),
        "{status}"
    );
    assert_eq!(
        status["members"],
        json!([{"id": 1, "name": "", "addr": "", "voter": true}]),
        "{status}"
    );
    assert_eq!(status["replication"], json!([]), "{status}");

    // A table row per node; a broker nobody serves gets an error row, not a failure.
    let dead = format!("127.0.0.1:{}", common::free_port());
    let both = run_cli(&[
        "status",
        "--broker",
        &format!("{broker},{dead}"),
        "--timeout-ms",
        "1500",
    ])
    .await;
    assert!(both.success, "{}", both.stderr);
    let rows: Vec<&str> = both.stdout.lines().collect();
    assert!(rows[0].starts_with("BROKER"), "{}", both.stdout);
    assert!(
        rows[1].starts_with(&broker) && rows[1].contains("leader"),
        "{}",
        both.stdout
    );
    assert!(
        rows[2].starts_with(&dead) && rows[2].contains("no node reachable"),
        "{}",
        both.stdout
    );

    // Only unreachable brokers: a one-line error and a failure exit.
    let none = run_cli(&["status", "--broker", &dead, "--timeout-ms", "1000"]).await;
    assert!(!none.success, "{}", none.stdout);
    assert!(none.stderr.contains("no node reachable"), "{}", none.stderr);
    assert_eq!(none.stderr.trim().lines().count(), 1, "{}", none.stderr);
}

/// An `inspect` answer too big for one MQTT packet lists the first waiters that fit and says
/// how many wait in all. It used to be refused by the transport for its size and never sent:
/// the asker, and every retry of it, waited for nothing (found with 1,000 waiters at the
/// default 64 KiB packet limit; here the limit is lowered so 300 waiters are enough).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_of_a_queue_too_long_for_one_packet_lists_the_first_waiters_and_the_total() {
    const WAITERS: usize = 300;
    const PACKET_BYTES_MAX: usize = 9_216;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("hivekeeper.toml");
    std::fs::write(
        &config,
        format!("[mqtt]\npacket_bytes_max = {PACKET_BYTES_MAX}\n"),
    )
    .expect("config file");
    let config = config.to_str().expect("a UTF-8 path");
    let node = Node::start_with_args(&dir.path().join("data"), &["--config", config]).await;
    let port = node.mqtt_port();

    // One agent holds the lock and queues WAITERS more acquires behind it, one lease each.
    let mut raw = Raw::connect(port, "queuer").await;
    let holder = raw.grant("g-holder", 60_000).await;
    let held = raw
        .call(json!({"id": "a-holder", "op": "lock.acquire", "name": "long", "lease": holder}))
        .await;
    assert_eq!(held["ok"], true, "{held}");
    for i in 0..WAITERS {
        let lease = raw.grant(&format!("g{i}"), 60_000).await;
        raw.send(
            json!({"id": format!("a{i}"), "op": "lock.acquire", "name": "long", "lease": lease})
                .to_string(),
        )
        .await;
    }
    // Bounded: 20 s of looking, 50 ms apart.
    let mut answer = Value::Null;
    for _ in 0..400 {
        answer = raw.inspect("i1", "lock", "long").await;
        if answer["waiters_total"] == WAITERS {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(answer["waiters_total"], WAITERS, "{answer}");
    let bytes = answer.to_string().len();
    assert!(bytes <= PACKET_BYTES_MAX, "{bytes} bytes");
    let waiters = answer["waiters"].as_array().expect("waiters");
    assert!(
        waiters.len() > 100 && waiters.len() < WAITERS,
        "{} waiters listed",
        waiters.len()
    );
    for (i, waiter) in waiters.iter().enumerate() {
        assert_eq!(waiter["position"], i + 1, "in queue order: {waiter}");
    }
    assert_eq!(answer["holders"].as_array().map(Vec::len), Some(1));
    assert!(answer.get("holders_total").is_none(), "{answer}");

    // The CLI shows the first ones and says how many more there are.
    let shown = run_cli(&[
        "inspect",
        "lock",
        "long",
        "--broker",
        &format!("127.0.0.1:{port}"),
    ])
    .await;
    assert!(shown.success, "{}", shown.stderr);
    // Its request id differs from the raw client's, so it may list one more or fewer: count
    // its waiter rows (they start with the position).
    let listed = shown
        .stdout
        .lines()
        .filter(|line| line.starts_with(|c: char| c.is_ascii_digit()))
        .count();
    let more = format!(
        "... and {} more waiters ({WAITERS} in all",
        WAITERS - listed
    );
    assert!(
        shown.stdout.contains(&more),
        "{more:?} not in:\n{}",
        shown.stdout
    );
}
