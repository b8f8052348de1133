//! End to end: rotating or removing an account closes that agent's live connections within a
//! second, whether it proved its identity by secret or by client certificate, and on every
//! member it is connected to (each member closes them when it applies the change).
//!
//! The bound is the one docs/SECURITY.md promises; the close happens when the member applies
//! the entry, so the time measured is the time from the CLI's answer (the entry applied on
//! the member it asked) to the socket closed here, normally a few milliseconds.

mod common;

use std::time::Duration;

use common::cluster::ProcessCluster;
use common::{Node, Raw, code, eventually, run_cli, run_cli_as_admin};
use hivekeeper_tls::CertKey;
use rumqttc::ConnectReturnCode;
use serde_json::json;

/// How soon a live connection must close after its account changed.
const CLOSE_BOUND: Duration = Duration::from_secs(1);

/// Waits until the member on `port` accepts drone-1 with `secret` (it applied the account).
async fn accepted_on(port: u16, secret: &str, what: &str) {
    eventually(20, what, || async {
        let accepted = common::connack(port, "drone-1", Some(("drone-1", secret))).await;
        (accepted.ok() == Some(ConnectReturnCode::Success)).then_some(())
    })
    .await;
}

/// Waits for each of `clients` to lose its connection after `seen` (its error count read
/// before the change), within [`CLOSE_BOUND`].
async fn all_closed(clients: &mut [&mut Raw], seen: &[u64], what: &str) {
    for (index, (client, seen)) in clients.iter_mut().zip(seen).enumerate() {
        match client.disconnected_after(*seen, CLOSE_BOUND).await {
            Ok(waited) => {
                eprintln!("{what}: connection {index} closed {waited:?} after the answer")
            }
            Err(waited) => panic!("{what}: connection {index} still open after {waited:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_or_removing_an_account_closes_its_connections_on_every_member() {
    let cluster = ProcessCluster::start(3, &["--auth"]).await;
    let leader = cluster.leader(30).await;
    let follower = (leader + 1) % 3;
    let ports = cluster.mqtt_ports();
    let secret_file = cluster.admin_secret(leader).await;
    let added = eventually(20, "agent add through the leader", || async {
        let added = run_cli_as_admin(
            ports[leader],
            &secret_file,
            &["agent", "add", "drone-1", "--json"],
        )
        .await;
        added.success.then(|| added.json())
    })
    .await;
    let secret = added["secret"].as_str().expect("the secret").to_string();
    // The same agent on the leader and on a follower, once the follower knows the account.
    accepted_on(ports[follower], &secret, "the follower applied the account").await;
    let mut on_leader = Raw::connect_with(ports[leader], "drone-1", Some(&secret)).await;
    let mut on_follower = Raw::connect_with(ports[follower], "drone-1", Some(&secret)).await;

    let seen = [
        on_leader.connection_errors(),
        on_follower.connection_errors(),
    ];
    let rotated = run_cli_as_admin(
        ports[leader],
        &secret_file,
        &["agent", "rotate", "drone-1", "--json"],
    )
    .await
    .json();
    assert_eq!(rotated["agent"], "drone-1", "{rotated}");
    all_closed(&mut [&mut on_leader, &mut on_follower], &seen, "rotate").await;
    drop((on_leader, on_follower));

    let secret = rotated["secret"].as_str().expect("the new secret");
    let mut on_leader = Raw::connect_with(ports[leader], "drone-1", Some(secret)).await;
    accepted_on(ports[follower], secret, "the follower applied the rotation").await;
    let mut on_follower = Raw::connect_with(ports[follower], "drone-1", Some(secret)).await;
    let seen = [
        on_leader.connection_errors(),
        on_follower.connection_errors(),
    ];
    let removed = run_cli_as_admin(
        ports[leader],
        &secret_file,
        &["agent", "remove", "drone-1", "--json"],
    )
    .await
    .json();
    assert_eq!(removed, json!({"removed": "drone-1"}));
    all_closed(&mut [&mut on_leader, &mut on_follower], &seen, "remove").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_a_client_certificate_is_closed_when_its_account_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    let out = certs.display().to_string();
    let made = run_cli(&["certs", "dev", "--out", &out, "--clients", "admin,drone-1"]).await;
    assert!(made.success, "{}", made.stderr);
    let file = |name: &str| certs.join(name).display().to_string();
    let node = Node::start_mutual_tls(&dir.path().join("data"), &certs, &["--auth"]).await;
    let port = node.mqtt_port();
    // The admin proves itself by its certificate (CN admin, the account the first start made).
    let broker = format!("localhost:{port}");
    let admin = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        for (flag, name) in [
            ("--tls-ca", "ca.crt"),
            ("--tls-cert", "client-admin.crt"),
            ("--tls-key", "client-admin.key"),
        ] {
            all.extend([flag.to_string(), file(name)]);
        }
        all.extend(["--broker".to_string(), broker.clone()]);
        async move {
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            run_cli(&all).await
        }
    };
    let added = admin(&["agent", "add", "drone-1", "--role", "observer", "--json"]).await;
    assert!(added.success, "{}", added.stderr);
    let tls = hivekeeper_tls::client_config(
        &certs.join("ca.crt"),
        Some(&CertKey {
            cert: certs.join("client-drone-1.crt"),
            key: certs.join("client-drone-1.key"),
        }),
    )
    .expect("drone-1's client config");
    let mut drone = Raw::connect_tls(port, "drone-1", tls).await;
    // Its certificate gives it its account's role.
    let status = drone.call(json!({"id": "s1", "op": "admin.status"})).await;
    assert_eq!(status["ok"], true, "an observer reads the status: {status}");

    let seen = drone.connection_errors();
    let rotated = admin(&["agent", "rotate", "drone-1", "--json"]).await;
    assert!(rotated.success, "{}", rotated.stderr);
    all_closed(&mut [&mut drone], &[seen], "rotate").await;

    // The client reconnects with its certificate, which still names an account.
    let subscribed = drone.subscriptions();
    drone.resubscribed(subscribed).await;
    let status = drone.call(json!({"id": "s2", "op": "admin.status"})).await;
    assert_eq!(status["ok"], true, "{status}");

    let seen = drone.connection_errors();
    let removed = admin(&["agent", "remove", "drone-1", "--json"])
        .await
        .json();
    assert_eq!(removed, json!({"removed": "drone-1"}));
    all_closed(&mut [&mut drone], &[seen], "remove").await;
    // Back in by its certificate, without an account: the agent role's defaults, so the
    // observer's reads are gone.
    let subscribed = drone.subscriptions();
    drone.resubscribed(subscribed).await;
    let refused = drone.call(json!({"id": "s3", "op": "admin.status"})).await;
    assert_eq!(code(&refused), Some("forbidden"), "{refused}");
}
