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

/// `hivekeeper ARGS --broker BROKER`.
fn cli_at(
    broker: &str,
    args: &[&str],
) -> impl std::future::Future<Output = common::CliRun> + use<> {
    let mut all: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    all.extend(["--broker".to_string(), broker.to_string()]);
    async move { run_cli(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_leases_and_revoke_hand_a_stuck_lock_to_the_next_waiter() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let broker = format!("127.0.0.1:{port}");
    let cli = |args: &[&str]| cli_at(&broker, args);

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
            token: old_token,
            reason: None,
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
/// how many wait in all, rather than be refused by the transport for its size and never sent
/// (the asker, and every retry of it, would wait for nothing). At the default 64 KiB packet
/// limit that takes about 1,000 waiters; here the limit is lowered so 300 are enough.
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

/// Discovery: `ls` lists what is in use with holder and waiter counts (filtered and cut by
/// `--limit`), `leases --agent` one agent's leases, `inspect` a waypoint's cylinder and how
/// long each has held or waited, and `revoke --agent` ends every lease of an agent, saying
/// which, after which the next waiter holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_leases_and_revoke_by_agent_find_and_free_what_an_agent_holds() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let broker = format!("127.0.0.1:{port}");
    let cli = |args: &[&str]| cli_at(&broker, args);
    let ok = |answer: Value| assert_eq!(answer["ok"], true, "{answer}");

    // drone-a: door/1 under one lease; door/2, 1 of 4 chargers and pad-1 under another.
    // drone-b: 2 chargers, and it waits for door/2.
    let mut a = Raw::connect(port, "drone-a").await;
    let mut b = Raw::connect(port, "drone-b").await;
    let a1 = a.grant("g1", 60_000).await;
    let a2 = a.grant("g2", 60_000).await;
    let lease_b = b.grant("g", 60_000).await;
    ok(
        a.call(json!({"id": "1", "op": "lock.acquire", "name": "door/1", "lease": a1}))
            .await,
    );
    ok(
        a.call(json!({"id": "2", "op": "lock.acquire", "name": "door/2", "lease": a2}))
            .await,
    );
    ok(a.call(
        json!({"id": "3", "op": "sem.acquire", "name": "chargers", "limit": 4, "lease": a2}),
    )
    .await);
    ok(a.call(
        json!({"id": "4", "op": "waypoint.reserve", "name": "pad-1", "lease": a2,
                     "lat": 51.5, "lon": -0.1, "radius_m": 3.0, "alt_max_m": 120.0}),
    )
    .await);
    ok(b.call(json!({"id": "1", "op": "sem.acquire", "name": "chargers", "limit": 4, "lease": lease_b, "permits": 2})).await);
    b.send(
        json!({"id": "2", "op": "lock.acquire", "name": "door/2", "lease": lease_b}).to_string(),
    )
    .await;
    let observer = agent("observer", port).await;
    wait_for_waiters(&observer, "door/2", &["drone-b".into()]).await;

    let listed = cli(&["ls"]).await;
    assert!(listed.success, "{}", listed.stderr);
    assert_eq!(
        listed.stdout,
        "KIND      NAME      HOLDERS  WAITERS\n\
         lock      door/1    1        0\n\
         lock      door/2    1        1\n\
         sem       chargers  2        0\n\
         waypoint  pad-1     1        0\n"
    );
    let doors = cli(&["ls", "lock", "--prefix", "door/", "--limit", "1"]).await;
    assert_eq!(
        doors.stdout,
        "KIND  NAME    HOLDERS  WAITERS\n\
         lock  door/1  1        0\n\
         ... and more (the first 1 shown; raise --limit or narrow with --prefix)\n",
        "{}",
        doors.stderr
    );
    assert_eq!(
        cli(&["ls", "sem", "--json"]).await.json(),
        json!({"resources": [{"kind": "sem", "name": "chargers", "holders": 2, "waiters": 0}]})
    );
    assert_eq!(
        cli(&["ls", "waypoint", "--prefix", "gate"]).await.stdout,
        "no resources in use\n"
    );

    let of_b = cli(&["leases", "--agent", "drone-b", "--json"])
        .await
        .json();
    let of_b: Vec<(&str, &str)> = of_b["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|l| {
            (
                l["lease"].as_str().unwrap_or(""),
                l["agent"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(of_b, vec![(lease_b.as_str(), "drone-b")]);

    // inspect: the cylinder of the holder, how long it has held.
    let pad = cli(&["inspect", "waypoint", "pad-1"]).await;
    let lines: Vec<&str> = pad.stdout.lines().collect();
    assert_eq!(lines[0], "waypoint \"pad-1\"", "{}", pad.stdout);
    assert!(
        lines[1].starts_with("HOLDER")
            && lines[1].contains("HELD_FOR")
            && lines[1].ends_with("AREA"),
        "{}",
        pad.stdout
    );
    assert!(lines[2].starts_with("drone-a"), "{}", pad.stdout);
    assert!(
        lines[2].ends_with("51.500000,-0.100000 r=3m alt=..120m"),
        "{}",
        pad.stdout
    );
    assert_eq!(lines[3], "waiters: none", "{}", pad.stdout);
    let json = cli(&["inspect", "waypoint", "pad-1", "--json"])
        .await
        .json();
    assert_eq!(
        json["holders"][0]["area"],
        json!({"lat": 51.5, "lon": -0.1, "radius_m": 3.0, "alt_min_m": null, "alt_max_m": 120.0})
    );
    assert!(
        json["holders"][0]["held_for_ms"].as_u64().is_some(),
        "{json}"
    );
    let door = cli(&["inspect", "lock", "door/2", "--json", "--limit", "0"])
        .await
        .json();
    assert_eq!(door["waiters"], json!([]), "{door}");
    assert_eq!(door["waiters_total"], 1, "{door}");

    // revoke --agent: both of drone-a's leases, in lease order; drone-b gets door/2.
    let revoked = cli(&["revoke", "--agent", "drone-a"]).await;
    assert_eq!(
        revoked.stdout,
        format!(
            "revoked lease {a1} of agent drone-a\n\
             revoked lease {a2} of agent drone-a\n\
             2 lease(s) of agent drone-a revoked: everything they held is released and handed \
             to the next waiters\n"
        ),
        "{}",
        revoked.stderr
    );
    let granted = b.next(10).await;
    assert_eq!(
        (&granted["id"], &granted["ok"]),
        (&json!("2"), &json!(true)),
        "{granted}"
    );
    assert_eq!(
        cli(&["ls"]).await.stdout,
        "KIND  NAME      HOLDERS  WAITERS\n\
         lock  door/2    1        0\n\
         sem   chargers  1        0\n"
    );
    assert_eq!(
        cli(&["revoke", "--agent", "drone-a", "--json"])
            .await
            .json(),
        json!({"agent": "drone-a", "revoked": []})
    );
    assert_eq!(
        cli(&["revoke", "--agent", "nobody"]).await.stdout,
        "agent nobody has no live lease: nothing revoked\n"
    );
    // A lease and --agent together, or neither, is a usage error.
    let both = cli(&["revoke", &lease_b, "--agent", "drone-b"]).await;
    assert!(
        !both.success && both.stderr.contains("cannot be used with"),
        "{}",
        both.stderr
    );
    let neither = cli(&["revoke"]).await;
    assert!(
        !neither.success && neither.stderr.contains("required"),
        "{}",
        neither.stderr
    );
}

/// A broker address where nothing listens fails at once, naming the refusal, instead of
/// redialling for all of `--timeout-ms` (5 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_a_clear_error_at_once() {
    let dead = format!("127.0.0.1:{}", common::free_port());
    for command in [
        &["leases"][..],
        &["ls", "lock"],
        &["inspect", "lock", "door"],
    ] {
        let mut args = command.to_vec();
        // Long enough that only the refusal, not the timeout, can end the run within the
        // harness's 30 s.
        args.extend(["--brokers", &dead, "--timeout-ms", "120000"]);
        let run = run_cli(&args).await;
        assert!(!run.success, "{}", run.stdout);
        assert_eq!(
            run.stderr.trim(),
            format!(
                "hivekeeper: no node reachable at {dead}: connection refused (is `hivekeeper \
                 serve` running there, and is --brokers its agent endpoint's address?)"
            )
        );
    }
}
