//! `Agent::connect` against a broker that can never accept it as configured: the refusal is
//! returned at once, typed, naming the broker, not `Unreachable` after the connect deadline.
//! The deadline here is a minute, and each connect is bounded by `within` well below it, so a
//! refusal that waited for the deadline would fail the test.
//!
//! - Mosquitto with a password file refuses a wrong password in its CONNACK.
//! - A TLS-only listener (a rustls acceptor, like the agent endpoint's) answers a plaintext
//!   CONNECT with a TLS alert; with mutual TLS it refuses a client without a certificate; a
//!   client trusting another CA refuses its certificate.
//! - Mosquitto without TLS closes a TLS handshake, and answers plaintext MQTT.

mod common;

use std::sync::Arc;

use common::{agent_config, within};
use hivekeeper_agent::{Agent, AgentConfig, AgentError, CredentialsRefusal, TlsFailure};
use hivekeeper_test_support::Mosquitto;
use hivekeeper_test_support::certs::TestCerts;
use hivekeeper_tls::tokio_rustls::TlsAcceptor;
use tokio::io::AsyncReadExt;

/// Far beyond the `within` bound of each connect: only a final refusal ends it in time.
const DEADLINE_MS: u64 = 60_000;

/// `config` with the long deadline.
fn patient(mut config: AgentConfig) -> AgentConfig {
    config.request_deadline_ms = DEADLINE_MS;
    config
}

/// The outcome of connecting with `config`, within 20 s.
async fn connect(config: AgentConfig) -> Result<Agent, AgentError> {
    within(20, "connect ends", Agent::connect(config)).await
}

/// A TLS-only listener on a free loopback port presenting `certs`' server certificate; with
/// `mutual`, clients must present a certificate of the same CA. Each connection gets its
/// handshake, then is read until it closes. Runs until the test ends.
async fn tls_listener(certs: &TestCerts, mutual: bool) -> u16 {
    let ca = certs.ca();
    let config = hivekeeper_tls::server_config(&certs.server(), mutual.then_some(ca.as_path()))
        .expect("the test certificates make a server config");
    let acceptor = TlsAcceptor::from(Arc::clone(&config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let port = listener.local_addr().expect("bound").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut stream) = acceptor.accept(stream).await {
                    let mut sink = [0u8; 256];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_wrong_password_is_refused_at_once_by_the_connack() {
    let broker = Mosquitto::start_secured(&[("drone-1", "right")]).await;
    let config = patient(agent_config("drone-1", &[broker.port])).credentials("wrong");
    let refused = connect(config).await.expect_err("refused");
    assert_eq!(
        refused,
        AgentError::CredentialsRefused {
            broker: format!("127.0.0.1:{}", broker.port),
            refusal: CredentialsRefusal::NotAuthorized,
        }
    );
}

#[tokio::test]
async fn a_plaintext_agent_on_a_tls_port_is_told_tls_is_expected() {
    let certs = TestCerts::new(&[], &[]);
    let port = tls_listener(&certs, false).await;
    let refused = connect(patient(agent_config("drone-1", &[port])))
        .await
        .expect_err("refused");
    assert_eq!(
        refused,
        AgentError::Tls {
            broker: format!("127.0.0.1:{port}"),
            failure: TlsFailure::ExpectsTls,
        }
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "TLS with 127.0.0.1:{port} failed: the broker expects TLS, and the agent connected \
             without (no CA configured)"
        )
    );
}

#[tokio::test]
async fn an_agent_without_a_client_certificate_under_mutual_tls_is_told_one_is_required() {
    let certs = TestCerts::new(&[], &["drone-1"]);
    let port = tls_listener(&certs, true).await;
    let config = patient(agent_config("drone-1", &[port])).tls(certs.ca());
    let refused = connect(config).await.expect_err("refused");
    assert_eq!(
        refused,
        AgentError::Tls {
            broker: format!("127.0.0.1:{port}"),
            failure: TlsFailure::CertificateRequired,
        }
    );
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_refused_and_so_is_a_server_of_another_ca() {
    let certs = TestCerts::new(&[], &["drone-1"]);
    let other = TestCerts::new(&[], &["drone-1"]);
    let port = tls_listener(&certs, true).await;
    let broker = format!("127.0.0.1:{port}");

    // The client trusts the server, the server does not trust the client's certificate.
    let client = other.client("drone-1");
    let config = patient(agent_config("drone-1", &[port]))
        .tls(certs.ca())
        .client_certificate(client.cert, client.key);
    let refused = connect(config).await.expect_err("refused");
    assert!(
        matches!(
            &refused,
            AgentError::Tls { broker: at, failure: TlsFailure::CertificateRefused { .. } }
                if *at == broker
        ),
        "{refused:?}"
    );

    // The client trusts another CA: the server's certificate is refused on the client's side.
    let config = patient(agent_config("drone-1", &[port])).tls(other.ca());
    let refused = connect(config).await.expect_err("refused");
    assert!(
        matches!(
            &refused,
            AgentError::Tls { broker: at, failure: TlsFailure::UnknownCa { .. } } if *at == broker
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_tls_agent_on_a_plaintext_port_is_told_the_port_does_not_speak_tls() {
    let certs = TestCerts::new(&[], &[]);
    let broker = Mosquitto::start().await;
    let config = patient(agent_config("drone-1", &[broker.port])).tls(certs.ca());
    let refused = connect(config).await.expect_err("refused");
    assert_eq!(
        refused,
        AgentError::Tls {
            broker: format!("127.0.0.1:{}", broker.port),
            failure: TlsFailure::NotTls,
        }
    );
}
