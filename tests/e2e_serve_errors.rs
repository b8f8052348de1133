//! `hivekeeper serve` refuses what it cannot run on with a one-line error and a non-zero exit,
//! never a panic or a hang, and stops cleanly on SIGTERM.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::free_ports;

const BIN: &str = env!("CARGO_BIN_EXE_hivekeeper");

/// Runs `serve` with these arguments (free loopback ports unless given) and waits at most 20 s.
fn serve(args: &[&str]) -> Output {
    let ports = free_ports(2);
    let mqtt = format!("127.0.0.1:{}", ports[0]);
    let metrics = format!("127.0.0.1:{}", ports[1]);
    let mut command = Command::new(BIN);
    command.arg("serve");
    if !args.contains(&"--mqtt-listen") {
        command.args(["--mqtt-listen", &mqtt]);
    }
    if !args.contains(&"--metrics-listen") {
        command.args(["--metrics-listen", &metrics]);
    }
    let mut child = command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hivekeeper runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("waitable").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("hivekeeper serve {args:?} hung instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn assert_refused(output: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "should fail: {stderr}");
    assert!(
        !stderr.contains("panicked"),
        "a panic, not an error: {stderr}"
    );
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in: {stderr}"
    );
}

#[test]
fn a_taken_mqtt_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("data");
    let output = serve(&[
        "--mqtt-listen",
        &addr,
        "--data-dir",
        dir.to_str().expect("utf-8"),
    ]);
    assert_refused(&output, "address already in use");
    // The hint names the flag the operator typed, not only a config key.
    assert_refused(&output, "another --mqtt-listen");
}

#[test]
fn a_taken_metrics_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("data");
    let output = serve(&[
        "--metrics-listen",
        &addr,
        "--data-dir",
        dir.to_str().expect("utf-8"),
    ]);
    assert_refused(&output, "serving /metrics");
    assert_refused(&output, "another --metrics-listen");
}

#[test]
fn a_corrupt_data_file_is_a_clear_error() {
    let data = tempfile::tempdir().expect("tempdir");
    std::fs::write(data.path().join("hivekeeper.redb"), b"not a database").expect("write");
    let output = serve(&["--data-dir", data.path().to_str().expect("utf-8")]);
    assert_refused(&output, "not a readable redb data file");
}

#[test]
fn an_unusable_data_dir_is_a_clear_error() {
    let data = tempfile::tempdir().expect("tempdir");
    let file = data.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let under_a_file = file.join("data");
    let output = serve(&["--data-dir", under_a_file.to_str().expect("utf-8")]);
    assert_refused(&output, "cannot use data directory");
}

#[test]
fn a_bad_config_file_is_a_clear_error() {
    let data = tempfile::tempdir().expect("tempdir");
    let config = data.path().join("hk.toml");
    std::fs::write(&config, "[node]\nttl_typo = 1\n").expect("write");
    let output = serve(&["--config", config.to_str().expect("utf-8")]);
    assert_refused(&output, "is not valid");
}

#[test]
fn a_taken_peer_port_and_bad_cluster_flags_are_clear_errors() {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("data");
    let dir = dir.to_str().expect("utf-8");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let list = format!("n1={},n2=127.0.0.1:1", taken.local_addr().expect("addr"));
    let output = serve(&[
        "--data-dir",
        dir,
        "--name",
        "n1",
        "--initial-cluster",
        &list,
    ]);
    assert_refused(&output, "cannot listen for peers on");
    let output = serve(&[
        "--data-dir",
        dir,
        "--name",
        "n9",
        "--initial-cluster",
        &list,
    ]);
    assert_refused(&output, "\"n9\" is not in initial_cluster");
    let output = serve(&["--data-dir", dir, "--name", "n1"]);
    assert_refused(&output, "--initial-cluster");
    let config = data.path().join("external.toml");
    let toml = format!(
        "[node.cluster]\nname = \"n1\"\ninitial_cluster = \"{list}\"\n\
         [mqtt.mode]\nkind = \"external\"\nurl = \"mqtt://127.0.0.1:1883\"\n\
         share_group = \"east/hk\"\n"
    );
    std::fs::write(&config, toml).expect("write");
    let output = Command::new(BIN)
        .args(["serve", "--data-dir", dir, "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .output()
        .expect("hivekeeper runs");
    assert_refused(&output, "mode.share_group");
    let output = serve(&["--data-dir", dir, "--mqtt-share-group", "east"]);
    assert_refused(&output, "--mqtt-share-group needs an external broker");
}

#[tokio::test]
async fn sigterm_stops_the_node_cleanly_and_it_restarts_on_the_same_data() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut node = common::Node::start(data.path()).await;
    let port = node.mqtt_port();
    let (_agent, session) = common::agent_session("terminated", port, 5_000).await;
    // Keep the guard: dropping it would release the lock.
    let guard = session.lock("kept").await.expect("lock");
    let token = guard.token();
    node.terminate().await;
    let status = node.exit_status().expect("exited");
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    node.restart().await;
    let observer = common::agent("observer", node.mqtt_port()).await;
    let (holders, _) = common::inspect_lock(&observer, "kept").await;
    assert_eq!(
        holders.iter().map(|h| h.token).collect::<Vec<_>>(),
        vec![token]
    );
}

/// Secure by default: a listener facing the network without its protection is refused before
/// anything binds (so this test opens nothing beyond loopback), naming the listener, what it
/// lacks and the way out.
#[test]
fn a_public_listener_without_its_protection_is_refused() {
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_ports(1)[0];
    let public = format!("0.0.0.0:{port}");
    let output = serve(&[
        "--data-dir",
        data.path().to_str().expect("utf-8"),
        "--mqtt-listen",
        &public,
    ]);
    assert_refused(
        &output,
        &format!(
            "refusing to start: the agent endpoint on {public} without authentication and TLS \
             (--auth, --mqtt-tls-cert, --mqtt-tls-key)"
        ),
    );
    assert_refused(&output, "pass --insecure to start anyway");
    let output = serve(&[
        "--data-dir",
        data.path().to_str().expect("utf-8"),
        "--auth",
        "--metrics-listen",
        &public,
    ]);
    assert_refused(
        &output,
        &format!("/metrics on {public} without authentication and TLS"),
    );
}

/// A certificate that cannot be read is refused before anything starts: one line naming the
/// file, exit code 1, and no data dir (Raft never ran). For the agent endpoint's files and
/// for the peer port's alike.
#[test]
fn an_unreadable_certificate_is_one_line_before_the_data_dir_is_created() {
    let certs = hivekeeper_test_support::TestCerts::new(&["n1"], &[]);
    let path = |p: std::path::PathBuf| p.display().to_string();
    let (server, peer, ca) = (certs.server(), certs.peer("n1"), path(certs.ca()));
    let peer_port = free_ports(1)[0];
    let cluster = format!("n1=127.0.0.1:{peer_port}");
    let missing = "/nonexistent/hivekeeper-test.crt";
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "--mqtt-tls-cert",
                missing,
                "--mqtt-tls-key",
                &path(server.key.clone()),
            ],
            "agent endpoint TLS: cannot read certificate file",
        ),
        (
            &[
                "--mqtt-tls-cert",
                &path(server.cert.clone()),
                "--mqtt-tls-key",
                &path(server.key.clone()),
                "--mqtt-client-ca",
                missing,
            ],
            "agent endpoint TLS: cannot read CA file",
        ),
        (
            &[
                "--name",
                "n1",
                "--initial-cluster",
                &cluster,
                "--peer-tls-cert",
                missing,
                "--peer-tls-key",
                &path(peer.key.clone()),
                "--peer-ca",
                &ca,
            ],
            "peer TLS: cannot read certificate file",
        ),
    ];
    for (flags, expected) in cases {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("data");
        let mut args = flags.to_vec();
        args.extend(["--data-dir", dir.to_str().expect("utf-8")]);
        let output = serve(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let prefix = if flags.contains(&"--name") {
            format!(
                "hivekeeper: starting the node on data dir {}: ",
                dir.display()
            )
        } else {
            "hivekeeper: ".to_string()
        };
        assert_eq!(
            stderr,
            format!("{prefix}{expected} {missing}: No such file or directory (os error 2)\n"),
            "{flags:?}"
        );
        assert_eq!(output.status.code(), Some(1), "{flags:?}");
        assert!(!dir.exists(), "{flags:?}: the data dir was created");
    }
}
