//! End to end: `hivekeeper serve --auth` (accounts and roles) over real processes and real
//! MQTT. The first start writes the `admin` secret; the CLI manages accounts with it; a CONNECT
//! without the right secret is refused with "bad username or password"; a client-id takeover
//! without the victim's secret fails and the victim keeps its lock; roles are checked per op;
//! removing an account closes its connection and revokes its leases.

mod common;

use std::path::{Path, PathBuf};

use common::cluster::ProcessCluster;
use common::{
    Mosquitto, Node, Raw, agent_config, code, connack, eventually, run_cli, run_cli_as_admin,
    within,
};
use hivekeeper_agent::{Agent, SessionState};
use rumqttc::ConnectReturnCode;
use serde_json::{Value, json};

/// One CONNECT as `client_id` with `login`: `Ok` when accepted, the refusal's code otherwise.
async fn connect_result(
    port: u16,
    client_id: &str,
    login: Option<(&str, &str)>,
) -> Result<(), ConnectReturnCode> {
    match connack(port, client_id, login).await {
        Ok(ConnectReturnCode::Success) => Ok(()),
        Ok(refused) => Err(refused),
        Err(error) => panic!("CONNECT as {client_id}: {error}"),
    }
}

/// A node with `--auth` on free ports, and the path of its admin secret.
async fn auth_node(dir: &Path) -> (Node, PathBuf) {
    let node = Node::start_with_args(dir, &["--auth"]).await;
    (node, dir.join("admin.secret"))
}

/// `agent add NAME --role ROLE --json` as the admin: the new secret.
async fn add_agent(port: u16, secret_file: &Path, name: &str, role: &str) -> String {
    let added = run_cli_as_admin(
        port,
        secret_file,
        &["agent", "add", name, "--role", role, "--json"],
    )
    .await
    .json();
    assert_eq!(added["agent"], name, "{added}");
    assert_eq!(added["role"], role, "{added}");
    added["secret"]
        .as_str()
        .expect("the secret, once")
        .to_string()
}

/// An SDK agent authenticated with `secret`.
async fn sdk_agent(name: &str, port: u16, secret: &str) -> Agent {
    within(
        20,
        &format!("{name} connects with its secret"),
        Agent::connect(agent_config(name, port).credentials(secret)),
    )
    .await
    .unwrap_or_else(|error| panic!("{name} connects: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_writes_the_admin_secret_and_the_cli_manages_accounts() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, secret_file) = auth_node(dir.path()).await;
    let port = node.mqtt_port();
    let admin_secret = std::fs::read_to_string(&secret_file).expect("admin.secret is written");
    assert_eq!(admin_secret.trim().len(), 64, "256 bits as hex");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert!(
        node.log_tail(200).contains("admin.secret"),
        "the path is logged"
    );
    assert!(
        !node.log_tail(200).contains(admin_secret.trim()),
        "the secret is never logged"
    );

    let secret = add_agent(port, &secret_file, "drone-1", "agent").await;
    assert_eq!(
        connect_result(port, "drone-1", Some(("drone-1", &secret))).await,
        Ok(())
    );

    let listed = run_cli_as_admin(port, &secret_file, &["agent", "list", "--json"])
        .await
        .json();
    assert_eq!(
        listed,
        json!({"accounts": [
            {"agent": "admin", "role": "admin"},
            {"agent": "drone-1", "role": "agent"}]})
    );

    let rotated = run_cli_as_admin(
        port,
        &secret_file,
        &["agent", "rotate", "drone-1", "--json"],
    )
    .await
    .json();
    assert_eq!(rotated["agent"], "drone-1");
    assert_eq!(rotated["role"], "agent");
    let new_secret = rotated["secret"].as_str().expect("a new secret");
    assert_ne!(new_secret, secret);
    assert_eq!(
        connect_result(port, "drone-1", Some(("drone-1", &secret))).await,
        Err(ConnectReturnCode::BadUserNamePassword),
        "the old secret stops working"
    );
    assert_eq!(
        connect_result(port, "drone-1", Some(("drone-1", new_secret))).await,
        Ok(())
    );

    let removed = run_cli_as_admin(
        port,
        &secret_file,
        &["agent", "remove", "drone-1", "--json"],
    )
    .await
    .json();
    assert_eq!(removed, json!({"removed": "drone-1"}));
    assert_eq!(
        connect_result(port, "drone-1", Some(("drone-1", new_secret))).await,
        Err(ConnectReturnCode::BadUserNamePassword)
    );
    let listed = run_cli_as_admin(port, &secret_file, &["agent", "list", "--json"])
        .await
        .json();
    assert_eq!(
        listed,
        json!({"accounts": [{"agent": "admin", "role": "admin"}]})
    );

    // Without credentials the CLI is refused, and says what to try; with a wrong password it
    // is told the credentials were refused. Both at once: the CONNACK's refusal is final (the
    // timeout is far beyond the test's bound, and its message would be another).
    let broker = format!("127.0.0.1:{port}");
    let anonymous = run_cli(&["leases", "--broker", &broker, "--timeout-ms", "60000"]).await;
    assert!(!anonymous.success);
    assert_eq!(
        anonymous.stderr.trim(),
        format!(
            "hivekeeper: credentials refused by {broker}: bad username or password: the \
             service has authentication on; pass --user NAME and --password-file FILE (or \
             HIVEKEEPER_USER and HIVEKEEPER_PASSWORD)"
        )
    );
    let wrong = common::run_cli_with_env(
        &["leases", "--broker", &broker, "--timeout-ms", "60000"],
        &[
            ("HIVEKEEPER_USER", "admin"),
            ("HIVEKEEPER_PASSWORD", "not-the-secret"),
        ],
    )
    .await;
    assert!(!wrong.success);
    assert_eq!(
        wrong.stderr.trim(),
        format!(
            "hivekeeper: credentials refused by {broker}: bad username or password (check \
             --user and the password)"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_wrong_and_borrowed_credentials_are_refused_and_a_takeover_fails() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, secret_file) = auth_node(dir.path()).await;
    let port = node.mqtt_port();
    let secret = add_agent(port, &secret_file, "victim", "agent").await;
    let other = add_agent(port, &secret_file, "mallory", "agent").await;

    let refused = Err(ConnectReturnCode::BadUserNamePassword);
    assert_eq!(
        connect_result(port, "victim", None).await,
        refused,
        "anonymous"
    );
    assert_eq!(
        connect_result(port, "victim", Some(("victim", "wrong"))).await,
        refused,
        "wrong secret"
    );
    assert_eq!(
        connect_result(port, "victim", Some(("mallory", &other))).await,
        refused,
        "another agent's good credentials under the victim's client id"
    );
    assert_eq!(
        connect_result(port, "nobody", Some(("nobody", &secret))).await,
        refused,
        "no account"
    );

    // The victim holds a lock through the SDK; a takeover attempt by client id fails and the
    // victim keeps its connection, session and lock.
    let victim = sdk_agent("victim", port, &secret).await;
    let session = within(10, "victim session", victim.session(30_000))
        .await
        .expect("a session");
    let guard = within(10, "victim locks pad-1", session.lock("pad-1"))
        .await
        .expect("the lock is free");
    assert_eq!(
        connect_result(port, "victim", Some(("victim", "not-the-secret"))).await,
        refused
    );
    assert_eq!(connect_result(port, "victim", None).await, refused);
    let mut mallory = Raw::connect_with(port, "mallory", Some(&other)).await;
    let inspected = mallory.inspect("i1", "lock", "pad-1").await;
    assert_eq!(inspected["holders"][0]["agent"], "victim", "{inspected}");
    assert_eq!(
        inspected["holders"][0]["token"],
        guard.token(),
        "{inspected}"
    );
    assert!(
        inspected["holders"][0].get("lease").is_none(),
        "another agent's lease id is not shown to an agent: {inspected}"
    );
    assert_eq!(session.state(), SessionState::Live);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_may_do_what_it_names_and_is_refused_the_rest() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, secret_file) = auth_node(dir.path()).await;
    let port = node.mqtt_port();
    let agent_secret = add_agent(port, &secret_file, "drone-1", "agent").await;
    let observer_secret = add_agent(port, &secret_file, "watcher", "observer").await;
    let mut drone = Raw::connect_with(port, "drone-1", Some(&agent_secret)).await;
    let mut watcher = Raw::connect_with(port, "watcher", Some(&observer_secret)).await;
    let lease = drone.grant("g1", 30_000).await;

    let forbidden = |response: &Value, needed: &str, who: &str, has: &str| {
        assert_eq!(code(response), Some("forbidden"), "{response}");
        let op = response["id"].as_str().unwrap_or_default().to_string();
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.ends_with(&format!(
                "needs the {needed} role; agent \"{who}\" has the {has} role"
            )),
            "{op}: {message}"
        );
    };
    for request in [
        json!({"id": "a1", "op": "admin.revoke", "lease": lease}),
        json!({"id": "a2", "op": "admin.member.add", "name": "n9", "addr": "127.0.0.1:1"}),
        json!({"id": "a3", "op": "admin.agent.add", "name": "sneaky"}),
    ] {
        forbidden(&drone.call(request).await, "admin", "drone-1", "agent");
    }
    forbidden(
        &drone.call(json!({"id": "a4", "op": "admin.status"})).await,
        "observer",
        "drone-1",
        "agent",
    );

    // The observer watches but changes nothing.
    let status = watcher
        .call(json!({"id": "o1", "op": "admin.status"}))
        .await;
    assert_eq!(status["ok"], true, "{status}");
    assert_eq!(status["status"]["is_leader"], true, "{status}");
    let leases = watcher
        .call(json!({"id": "o2", "op": "admin.leases"}))
        .await;
    assert_eq!(leases["leases"][0]["agent"], "drone-1", "{leases}");
    forbidden(
        &watcher
            .call(json!({"id": "o3", "op": "admin.revoke", "lease": lease}))
            .await,
        "admin",
        "watcher",
        "observer",
    );
    // The agent's own ops go on.
    let locked = drone
        .call(json!({"id": "l1", "op": "lock.acquire", "name": "gw", "lease": lease}))
        .await;
    assert_eq!(locked["ok"], true, "{locked}");
    // Nothing the refusals named changed: the lease lives, no account was added.
    let listed = run_cli_as_admin(port, &secret_file, &["agent", "list", "--json"])
        .await
        .json();
    assert_eq!(
        listed["accounts"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    let own = drone.inspect("i1", "lock", "gw").await;
    assert_eq!(
        own["holders"][0]["lease"],
        lease.as_str(),
        "an agent sees its own lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_account_closes_its_connection_and_revokes_its_leases() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, secret_file) = auth_node(dir.path()).await;
    let port = node.mqtt_port();
    let secret = add_agent(port, &secret_file, "drone-9", "agent").await;
    let mut drone = Raw::connect_with(port, "drone-9", Some(&secret)).await;
    let lease = drone.grant("g1", 60_000).await;
    let locked = drone
        .call(json!({"id": "l1", "op": "lock.acquire", "name": "gw", "lease": lease}))
        .await;
    assert_eq!(locked["ok"], true, "{locked}");
    // The SDK connects with credentials too, under another account.
    let other_secret = add_agent(port, &secret_file, "drone-8", "agent").await;
    let other = sdk_agent("drone-8", port, &other_secret).await;
    let session = within(10, "drone-8 session", other.session(60_000))
        .await
        .expect("a session");

    // An SDK agent whose account is removed hears `lease.revoked` before its connection
    // closes (the endpoint flushes its queue first), so its session ends at once.
    let doomed_secret = add_agent(port, &secret_file, "drone-7", "agent").await;
    let doomed = sdk_agent("drone-7", port, &doomed_secret).await;
    let doomed_session = within(10, "drone-7 session", doomed.session(60_000))
        .await
        .expect("a session");

    let removed = run_cli_as_admin(
        port,
        &secret_file,
        &["agent", "remove", "drone-9", "--json"],
    )
    .await
    .json();
    assert_eq!(removed, json!({"removed": "drone-9"}));
    drone.disconnected(10).await;
    let removed = run_cli_as_admin(
        port,
        &secret_file,
        &["agent", "remove", "drone-7", "--json"],
    )
    .await
    .json();
    assert_eq!(removed, json!({"removed": "drone-7"}));
    eventually(10, "drone-7's session ends", || async {
        (doomed_session.state() == SessionState::Expired).then_some(())
    })
    .await;

    // Its lease is gone (the removal's entry revoked it), so the lock is free; drone-8's
    // session is untouched.
    let leases = run_cli_as_admin(port, &secret_file, &["leases", "--json"])
        .await
        .json();
    let agents: Vec<&str> = leases["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|info| info["agent"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        agents,
        vec!["drone-8"],
        "drone-9's lease {lease} is revoked: {leases}"
    );
    let inspected = run_cli_as_admin(port, &secret_file, &["inspect", "lock", "gw", "--json"])
        .await
        .json();
    assert_eq!(inspected["holders"], json!([]), "{inspected}");
    assert_eq!(session.state(), SessionState::Live);
    assert_eq!(
        connect_result(port, "drone-9", Some(("drone-9", &secret))).await,
        Err(ConnectReturnCode::BadUserNamePassword)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_an_admin_user_gives_each_agent_an_account_and_removes_them_after() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let (node, secret_file) = auth_node(dir.path()).await;
    let port = node.mqtt_port();
    let broker = format!("127.0.0.1:{port}");
    let secret_path = secret_file.to_str().expect("a UTF-8 temp path");
    let args = [
        "bench",
        "contended",
        "--agents",
        "3",
        "--duration-s",
        "1",
        "--brokers",
        &broker,
        "--user",
        "admin",
        "--password-file",
        secret_path,
        "--json",
    ];
    let report = within(120, "hivekeeper bench with --user", run_cli_long(&args)).await;
    assert_eq!(report["scenario"], "contended", "{report}");
    assert!(report["cycles"].as_u64().expect("cycles") > 0, "{report}");
    assert_eq!(report["mutual_exclusion"]["ok"], true, "{report}");
    assert_eq!(report["errors"]["total"], 0, "{report}");
    let listed = run_cli_as_admin(port, &secret_file, &["agent", "list", "--json"])
        .await
        .json();
    assert_eq!(
        listed,
        json!({"accounts": [{"agent": "admin", "role": "admin"}]}),
        "the run's accounts are removed"
    );
}

/// Runs the CLI for longer than `run_cli`'s 30 s (a bench) and parses its JSON output.
async fn run_cli_long(args: &[&str]) -> Value {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hivekeeper"))
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
    })
    .await
    .expect("the blocking task ran")
    .expect("hivekeeper runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_leader_creates_the_admin_and_every_member_checks_the_accounts_it_applied() {
    let cluster = ProcessCluster::start(3, &["--auth"]).await;
    let leader = cluster.leader(30).await;
    let secret_file = cluster.admin_secret(leader).await;
    let ports = cluster.mqtt_ports();
    // The admin's account reaches every member: the CLI authenticates on each.
    let secret = eventually(20, "agent add through the leader", || async {
        let added = run_cli_as_admin(
            ports[leader],
            &secret_file,
            &["agent", "add", "drone-1", "--json"],
        )
        .await;
        added
            .success
            .then(|| added.json()["secret"].as_str().map(str::to_string))
            .flatten()
    })
    .await;
    let follower = (leader + 1) % 3;
    eventually(20, "the follower applied the new account", || async {
        (connect_result(ports[follower], "drone-1", Some(("drone-1", &secret))).await == Ok(()))
            .then_some(())
    })
    .await;
    // A role is checked on the member the request arrives at.
    let mut drone = Raw::connect_with(ports[follower], "drone-1", Some(&secret)).await;
    let refused = drone.call(json!({"id": "s1", "op": "admin.status"})).await;
    assert_eq!(code(&refused), Some("forbidden"), "{refused}");
    let lease = drone.grant("g1", 30_000).await;
    assert_eq!(
        lease.len(),
        16,
        "a follower forwards the agent's own writes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_an_external_broker_the_topics_agent_gets_the_roles() {
    let broker = Mosquitto::start().await;
    let dir = tempfile::tempdir().expect("temp data dir");
    let _node = Node::start_external_with_args(dir.path(), broker.port, &["--auth"]).await;
    // Mosquitto (here without a password file) authenticates the clients; the service takes
    // the request topic's agent id as the identity: without an account, the agent role.
    let mut drone = Raw::connect(broker.port, "drone-1").await;
    let lease = drone.grant("g1", 30_000).await;
    let refused = drone
        .call(json!({"id": "a1", "op": "admin.revoke", "lease": lease}))
        .await;
    assert_eq!(code(&refused), Some("forbidden"), "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "admin.revoke needs the admin role; agent \"drone-1\" has the agent role"
    );
    // The admin account created at the first start works through the broker's topics too.
    let secret_file = dir.path().join("admin.secret");
    let listed = run_cli(&[
        "agent",
        "list",
        "--json",
        "--broker",
        &format!("127.0.0.1:{}", broker.port),
        "--user",
        "admin",
        "--password-file",
        secret_file.to_str().expect("a UTF-8 temp path"),
    ])
    .await
    .json();
    assert_eq!(
        listed,
        json!({"accounts": [{"agent": "admin", "role": "admin"}]})
    );
}
