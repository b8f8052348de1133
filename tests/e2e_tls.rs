//! End to end: TLS with the development certificates of `hivekeeper certs dev` — the command
//! itself (files, modes, no overwrite), then `hivekeeper serve` with mutual TLS on the agent
//! endpoint, an SDK agent with its client certificate taking a lock, an agent without one
//! refused, and the admin CLI with its TLS flags and with their environment variables.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{Node, agent_config, run_cli, run_cli_with_env, within};
use hivekeeper_agent::{Agent, AgentError, Resource, TlsFailure, Wait};

/// Runs `hivekeeper certs dev --out DIR ...` and returns the run.
async fn certs_dev(out: &Path, extra: &[&str]) -> common::CliRun {
    let out = out.display().to_string();
    let mut args = vec!["certs", "dev", "--out", &out];
    args.extend_from_slice(extra);
    run_cli(&args).await
}

#[tokio::test]
async fn certs_dev_writes_keys_0600_and_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("certs");
    let run = certs_dev(&out, &["--members", "n1,n2", "--clients", "admin,drone-1"]).await;
    assert!(run.success, "{}", run.stderr);
    let mut files: Vec<(String, u32)> = std::fs::read_dir(&out)
        .expect("the directory exists")
        .map(|entry| {
            let entry = entry.expect("an entry");
            let mode = entry.metadata().expect("metadata").permissions().mode() & 0o777;
            (entry.file_name().to_string_lossy().into_owned(), mode)
        })
        .collect();
    files.sort();
    let want: Vec<(String, u32)> = [
        "ca",
        "client-admin",
        "client-drone-1",
        "peer-n1",
        "peer-n2",
        "server",
    ]
    .iter()
    .flat_map(|stem| {
        [
            (format!("{stem}.crt"), 0o644),
            (format!("{stem}.key"), 0o600),
        ]
    })
    .collect();
    assert_eq!(files, want);
    assert!(
        run.stdout.contains("--mqtt-tls-cert") && run.stdout.contains("--peer-ca"),
        "prints the flags to use: {}",
        run.stdout
    );
    let before = std::fs::read(out.join("ca.key")).expect("ca.key");
    let again = certs_dev(&out, &[]).await;
    assert!(!again.success);
    assert_eq!(
        again.stderr.trim(),
        format!(
            "hivekeeper: certs dev: {} exists; nothing was written (pass --force to overwrite)",
            out.join("ca.crt").display()
        )
    );
    assert_eq!(std::fs::read(out.join("ca.key")).expect("ca.key"), before);
    let forced = certs_dev(&out, &["--force"]).await;
    assert!(forced.success, "{}", forced.stderr);
    assert_ne!(std::fs::read(out.join("ca.key")).expect("ca.key"), before);
}

#[tokio::test]
async fn an_sdk_agent_and_the_cli_use_mutual_tls_with_the_dev_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    let made = certs_dev(&certs, &["--clients", "admin,drone-1"]).await;
    assert!(made.success, "{}", made.stderr);
    let file = |name: &str| certs.join(name).display().to_string();
    let node = Node::start_mutual_tls(&dir.path().join("data"), &certs, &[]).await;
    let port = node.mqtt_port();
    // The start line says, for people, where agents connect and how.
    let listening = format!(
        "agent endpoint listening on 127.0.0.1:{port}: TLS with client certificates (mutual \
         TLS), MQTT 3.1.1 and 5"
    );
    assert!(
        node.log_tail(50).contains(&listening),
        "{}",
        node.log_tail(50)
    );

    // The SDK with drone-1's certificate: a session and a lock over mutual TLS.
    let config = agent_config("drone-1", port)
        .tls(certs.join("ca.crt"))
        .client_certificate(
            certs.join("client-drone-1.crt"),
            certs.join("client-drone-1.key"),
        );
    let agent = within(20, "drone-1 connects over TLS", Agent::connect(config))
        .await
        .expect("drone-1 connects");
    let session = within(10, "a session", agent.session(5_000))
        .await
        .expect("a session");
    let guard = within(
        10,
        "a lock",
        session.acquire(Resource::lock("pad-1"), Wait::Try),
    )
    .await
    .expect("the lock");
    assert!(guard.token() > 0);

    // Without a client certificate: refused in the handshake, and told so at once (the
    // deadline is far beyond the test's bound).
    let mut anonymous = agent_config("drone-2", port).tls(certs.join("ca.crt"));
    anonymous.request_deadline_ms = 60_000;
    let refused = within(20, "drone-2 gives up", Agent::connect(anonymous)).await;
    assert_eq!(
        refused.expect_err("refused"),
        AgentError::Tls {
            broker: format!("127.0.0.1:{port}"),
            failure: TlsFailure::CertificateRequired,
        }
    );

    // The CLI with admin's certificate (client id = its CN), by flags and by environment.
    let broker = format!("localhost:{port}");
    let status = run_cli(&[
        "status",
        "--broker",
        &broker,
        "--json",
        "--tls-ca",
        &file("ca.crt"),
        "--tls-cert",
        &file("client-admin.crt"),
        "--tls-key",
        &file("client-admin.key"),
    ])
    .await
    .json();
    assert_eq!(status[0]["status"]["is_leader"], true, "{status}");
    let by_env = run_cli_with_env(
        &["inspect", "lock", "pad-1", "--broker", &broker, "--json"],
        &[
            ("HIVEKEEPER_TLS_CA", &file("ca.crt")),
            ("HIVEKEEPER_TLS_CERT", &file("client-admin.crt")),
            ("HIVEKEEPER_TLS_KEY", &file("client-admin.key")),
        ],
    )
    .await
    .json();
    assert_eq!(by_env["holders"][0]["agent"], "drone-1", "{by_env}");
    assert_eq!(by_env["holders"][0]["token"], guard.token(), "{by_env}");

    // The CLI without TLS flags (a plaintext client on the TLS port) is told TLS is expected,
    // and without a client certificate that one is required: at once, not after --timeout-ms.
    let plain = run_cli(&[
        "inspect",
        "lock",
        "pad-1",
        "--broker",
        &broker,
        "--timeout-ms",
        "60000",
    ])
    .await;
    assert!(!plain.success, "{}", plain.stdout);
    assert_eq!(
        plain.stderr.trim(),
        format!(
            "hivekeeper: the service at {broker} expects TLS: pass --tls-ca FILE (the CA that \
             signed its certificate; or HIVEKEEPER_TLS_CA)"
        )
    );
    let no_cert = run_cli(&[
        "inspect",
        "lock",
        "pad-1",
        "--broker",
        &broker,
        "--timeout-ms",
        "60000",
        "--tls-ca",
        &file("ca.crt"),
    ])
    .await;
    assert!(!no_cert.success, "{}", no_cert.stdout);
    assert_eq!(
        no_cert.stderr.trim(),
        format!(
            "hivekeeper: the service at {broker} requires a client certificate (mutual TLS): \
             pass --tls-cert FILE and --tls-key FILE (or HIVEKEEPER_TLS_CERT and \
             HIVEKEEPER_TLS_KEY)"
        )
    );
    drop(node);
}
