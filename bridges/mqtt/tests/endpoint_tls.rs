//! TLS on the agent endpoint, with certificates from the development generator
//! (`hivekeeper certs dev`): a round trip over TLS (rumqttc and mosquitto_pub), a plaintext
//! client refused on the TLS port, and mutual TLS: no certificate refused, a certificate
//! whose CN is not the client id refused with "not authorized", a good certificate accepted
//! without a password.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use common::{TestClient, TestMetrics, WAIT_S, eventually, forward, start_transport, within};
use hivekeeper_mqtt::{Config, EmbeddedConfig, Inbound, Mode, Transport};
use hivekeeper_test_support::TestCerts;
use hivekeeper_tls::rustls::ClientConfig;
use hivekeeper_tls::tokio_rustls::TlsConnector;
use hivekeeper_tls::{CertKey, client_config, server_name};
use rumqttc::QoS;
use rumqttc::mqttbytes::v4;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The endpoint on a free loopback port with the dev server certificate, and with `certs`' CA
/// as the client CA when `mutual`.
async fn start_tls(
    certs: &TestCerts,
    mutual: bool,
) -> (Transport, mpsc::UnboundedReceiver<Inbound>) {
    let server = certs.server();
    start_transport(Config {
        mode: Mode::Embedded(EmbeddedConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            tls_cert: Some(server.cert),
            tls_key: Some(server.key),
            client_ca: mutual.then(|| certs.ca()),
            ..EmbeddedConfig::default()
        }),
        ..Config::default()
    })
    .await
}

fn addr(transport: &Transport) -> SocketAddr {
    transport.listeners()[0].addr
}

fn client_tls(certs: &TestCerts, client: Option<&CertKey>) -> Arc<ClientConfig> {
    client_config(&certs.ca(), client).expect("a client config from the dev certificates")
}

/// Sends a 3.1.1 CONNECT as `client_id` over `stream` and returns the CONNACK's return code,
/// or `None` when the endpoint closed the connection without one.
async fn connack_code<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    client_id: &str,
) -> Option<v4::ConnectReturnCode> {
    let mut out = BytesMut::new();
    v4::Packet::Connect(v4::Connect::new(client_id))
        .write(&mut out, usize::MAX)
        .expect("a CONNECT encodes");
    if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
        return None;
    }
    let mut buf = BytesMut::new();
    within(WAIT_S, "a CONNACK or the close", async {
        loop {
            match v4::Packet::read(&mut buf, 1 << 20) {
                Ok(v4::Packet::ConnAck(connack)) => return Some(connack.code),
                Ok(other) => panic!("expected a CONNACK, got {other:?}"),
                Err(rumqttc::mqttbytes::Error::InsufficientBytes(_)) => {}
                Err(error) => panic!("not MQTT from the endpoint: {error}"),
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
}

/// A TLS connection as the rumqttc and mosquitto clients make it; `Err` with the handshake's
/// error when it fails.
async fn tls_connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> Result<hivekeeper_tls::tokio_rustls::client::TlsStream<TcpStream>, String> {
    let tcp = within(WAIT_S, "a TCP connection", TcpStream::connect(addr))
        .await
        .expect("the endpoint accepts TCP");
    let name = server_name("localhost").expect("a server name");
    within(
        WAIT_S,
        "the TLS handshake",
        TlsConnector::from(config).connect(name, tcp),
    )
    .await
    .map_err(|error| error.to_string())
}

#[tokio::test]
async fn a_request_and_its_response_travel_over_tls() {
    let metrics = TestMetrics::install();
    let certs = TestCerts::new(&[], &[]);
    let (transport, mut inbound) = start_tls(&certs, false).await;
    let port = addr(&transport).port();
    let mut agent =
        TestClient::connect_to("localhost", port, "drone-1", Some(client_tls(&certs, None))).await;
    agent.subscribe("hk/v1/rsp/drone-1", QoS::AtLeastOnce).await;
    agent
        .publish(
            "hk/v1/req/drone-1",
            QoS::AtLeastOnce,
            b"{\"ping\":1}".to_vec(),
        )
        .await;
    agent.wait_pubacks(1).await;
    let request = within(WAIT_S, "the request reaches the handler", inbound.recv())
        .await
        .expect("an inbound request");
    assert_eq!(request.agent, "drone-1");
    assert_eq!(&request.payload[..], b"{\"ping\":1}");
    transport
        .publish_response(&request.route, "drone-1", b"{\"pong\":1}".to_vec())
        .expect("queued");
    let response = agent.next_publish().await;
    assert_eq!(response.topic, "hk/v1/rsp/drone-1");
    assert_eq!(&response.payload[..], b"{\"pong\":1}");
    assert_eq!(
        metrics.counter("hivekeeper_endpoint_tls_handshake_failures_total"),
        0
    );
    within(WAIT_S, "shutdown", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn mosquitto_pub_with_the_dev_ca_publishes_over_tls_and_with_a_client_certificate() {
    let certs = TestCerts::new(&[], &["sensor-7"]);
    for mutual in [false, true] {
        let (transport, mut inbound) = start_tls(&certs, mutual).await;
        let port = addr(&transport).port().to_string();
        let client = certs.client("sensor-7");
        let mut args = vec![
            "-h".to_string(),
            "localhost".into(),
            "-p".into(),
            port,
            "--cafile".into(),
            certs.ca().display().to_string(),
            "-i".into(),
            "sensor-7".into(),
            "-q".into(),
            "1".into(),
            "-t".into(),
            "hk/v1/req/sensor-7".into(),
            "-m".into(),
            "{\"hello\":true}".into(),
        ];
        if mutual {
            args.extend([
                "--cert".into(),
                client.cert.display().to_string(),
                "--key".into(),
                client.key.display().to_string(),
            ]);
        }
        let output = within(
            WAIT_S,
            "mosquitto_pub",
            tokio::process::Command::new("mosquitto_pub")
                .args(&args)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("mosquitto_pub runs");
        assert!(
            output.status.success(),
            "mutual {mutual}: mosquitto_pub failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let request = within(WAIT_S, "the request reaches the handler", inbound.recv())
            .await
            .expect("an inbound request");
        assert_eq!(
            (request.agent.as_str(), &request.payload[..]),
            ("sensor-7", &b"{\"hello\":true}"[..])
        );
        within(WAIT_S, "shutdown", transport.shutdown())
            .await
            .expect("clean shutdown");
    }
}

#[tokio::test]
async fn a_plaintext_client_on_the_tls_port_gets_no_connack() {
    let metrics = TestMetrics::install();
    let certs = TestCerts::new(&[], &[]);
    let (transport, _inbound) = start_tls(&certs, false).await;
    let mut plain = TcpStream::connect(addr(&transport))
        .await
        .expect("TCP connects");
    let mut out = BytesMut::new();
    v4::Packet::Connect(v4::Connect::new("drone-1"))
        .write(&mut out, usize::MAX)
        .expect("a CONNECT encodes");
    plain.write_all(&out).await.expect("written");
    // The endpoint answers with a TLS alert record (content type 21), never a CONNACK, and
    // closes.
    let mut answer = Vec::new();
    within(WAIT_S, "the close", plain.read_to_end(&mut answer))
        .await
        .expect("read until closed");
    assert_eq!(answer.first(), Some(&21), "{answer:?}");
    eventually(WAIT_S, "the failed handshake is counted", async || {
        metrics.counter("hivekeeper_endpoint_tls_handshake_failures_total") == 1
    })
    .await;
    assert_eq!(
        (
            metrics.counter("hivekeeper_endpoint_connects_total"),
            metrics.counter("hivekeeper_endpoint_connects_refused_total")
        ),
        (0, 0)
    );
    within(WAIT_S, "shutdown", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn mutual_tls_the_certificate_cn_is_the_agent_identity() {
    let metrics = TestMetrics::install();
    let certs = TestCerts::new(&[], &["drone-1", "drone-2"]);
    let (transport, _inbound) = start_tls(&certs, true).await;
    let addr = addr(&transport);

    // No client certificate: refused in the handshake (rustls' TLS 1.3 client learns it on
    // its first read, so the CONNECT is written and never answered).
    let refused = match tls_connect(addr, client_tls(&certs, None)).await {
        Err(_) => None,
        Ok(mut stream) => connack_code(&mut stream, "drone-1").await,
    };
    assert_eq!(refused, None);

    // A certificate of another CA: refused the same way.
    let stranger = TestCerts::new(&[], &["drone-1"]);
    let foreign = client_config(&certs.ca(), Some(&stranger.client("drone-1"))).expect("config");
    let refused = match tls_connect(addr, foreign).await {
        Err(_) => None,
        Ok(mut stream) => connack_code(&mut stream, "drone-1").await,
    };
    assert_eq!(refused, None);
    eventually(WAIT_S, "both failed handshakes are counted", async || {
        metrics.counter("hivekeeper_endpoint_tls_handshake_failures_total") == 2
    })
    .await;

    // drone-2's certificate, client id drone-1: not authorized.
    let drone_2 = client_tls(&certs, Some(&certs.client("drone-2")));
    let mut stream = tls_connect(addr, drone_2)
        .await
        .expect("a valid certificate");
    assert_eq!(
        connack_code(&mut stream, "drone-1").await,
        Some(v4::ConnectReturnCode::NotAuthorized)
    );

    // drone-1's certificate, client id drone-1, no username or password: accepted.
    let drone_1 = client_tls(&certs, Some(&certs.client("drone-1")));
    let mut stream = tls_connect(addr, drone_1)
        .await
        .expect("a valid certificate");
    assert_eq!(
        connack_code(&mut stream, "drone-1").await,
        Some(v4::ConnectReturnCode::Success)
    );
    assert_eq!(
        (
            metrics.counter("hivekeeper_endpoint_connects_total"),
            metrics.counter("hivekeeper_endpoint_connects_refused_total"),
            metrics.counter("hivekeeper_endpoint_tls_handshake_failures_total")
        ),
        (1, 1, 2)
    );
    within(WAIT_S, "shutdown", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn tls_settings_are_checked_before_anything_listens() {
    let certs = TestCerts::new(&[], &[]);
    let config = |tune: fn(&mut EmbeddedConfig, &TestCerts)| {
        let mut embedded = EmbeddedConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            ..EmbeddedConfig::default()
        };
        tune(&mut embedded, &certs);
        Config {
            mode: Mode::Embedded(embedded),
            ..Config::default()
        }
    };
    let no_key = config(|embedded, certs| embedded.tls_cert = Some(certs.server().cert));
    assert_eq!(
        Transport::start(no_key, forward().0)
            .await
            .err()
            .map(|e| e.to_string()),
        Some(
            "invalid MQTT config: `mode.tls_key` is missing: `tls_cert` needs its private key"
                .into()
        )
    );
    let ca_alone = config(|embedded, certs| embedded.client_ca = Some(certs.ca()));
    assert!(matches!(
        Transport::start(ca_alone, forward().0).await.err(),
        Some(hivekeeper_mqtt::MqttError::InvalidConfig {
            field: "mode.client_ca",
            ..
        })
    ));
    let missing = config(|embedded, certs| {
        embedded.tls_cert = Some(certs.path("missing.crt"));
        embedded.tls_key = Some(certs.server().key);
    });
    match Transport::start(missing, forward().0).await.err() {
        Some(hivekeeper_mqtt::MqttError::Tls(hivekeeper_tls::TlsError::Read { path, .. })) => {
            assert_eq!(path, certs.path("missing.crt"));
        }
        other => panic!("expected a TLS read error, got {other:?}"),
    }
}
