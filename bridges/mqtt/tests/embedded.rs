//! The transport in embedded mode, over real MQTT on loopback: rumqttc clients play agents
//! against the agent endpoint.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use common::{
    TestClient, TestMetrics, WAIT_S, embedded_config, eventually, start_refused, start_transport,
    within,
};
use hivekeeper_mqtt::{Config, EmbeddedConfig, Mode, MqttError, MqttVersion};
use hivekeeper_protocol::validate::REQUEST_BYTES_MAX;
use rumqttc::QoS;

#[tokio::test]
async fn qos1_and_qos0_requests_reach_the_handler_and_responses_reach_the_agent() {
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start_transport(embedded_config()).await;
    let addr = transport.listeners()[0].addr;
    let mut agent = TestClient::connect(addr, "drone-1").await;
    agent.subscribe("hk/v1/rsp/drone-1", QoS::AtLeastOnce).await;

    let grant = br#"{"id":"1","op":"lease.grant","ttl_ms":5000}"#;
    agent
        .publish("hk/v1/req/drone-1", QoS::AtLeastOnce, grant.to_vec())
        .await;
    let first = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(first.agent, "drone-1");
    assert_eq!(first.payload, Bytes::from_static(grant));

    let keepalive = br#"{"id":"2","op":"lease.keepalive","lease":"L1"}"#;
    agent
        .publish("hk/v1/req/drone-1", QoS::AtMostOnce, keepalive.to_vec())
        .await;
    let second = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(second.agent, "drone-1");
    assert_eq!(second.payload, Bytes::from_static(keepalive));

    let response = br#"{"id":"1","ok":true,"lease":"L1","ttl_ms":5000}"#;
    transport
        .publish("hk/v1/rsp/drone-1", Bytes::from_static(response))
        .expect("response queued");
    let received = agent.next_publish().await;
    assert_eq!(received.topic, "hk/v1/rsp/drone-1");
    assert_eq!(received.payload, Bytes::from_static(response));
    // Delivered at the QoS the agent subscribed with.
    assert_eq!(received.qos, QoS::AtLeastOnce);

    eventually(WAIT_S, "one message published", async || {
        metrics.counter("hivekeeper_mqtt_messages_out_total") == 1
    })
    .await;
    assert_eq!(metrics.counter("hivekeeper_mqtt_messages_in_total"), 2);
    assert_eq!(metrics.counter("hivekeeper_mqtt_messages_dropped_total"), 0);
    assert_eq!(metrics.counter("hivekeeper_mqtt_messages_out_total"), 1);
    assert_eq!(metrics.counter("hivekeeper_endpoint_connects_total"), 1);
    assert_eq!(metrics.value("hivekeeper_mqtt_connected"), Some(1.0));
    assert_eq!(
        metrics.value("hivekeeper_mqtt_clients_connected"),
        Some(1.0)
    );
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// 1,000 QoS 1 requests from 10 agents, all published before any is read: every one reaches
/// the handler once.
#[test]
fn a_thousand_requests_from_ten_agents_all_arrive_once() {
    let metrics = TestMetrics::install();
    metrics
        .multi_thread_runtime()
        .block_on(a_thousand_requests(&metrics));
}

async fn a_thousand_requests(metrics: &TestMetrics) {
    const AGENTS: usize = 10;
    const REQUESTS_PER_AGENT: usize = 100;
    let (transport, mut inbound) = start_transport(embedded_config()).await;
    let addr = transport.listeners()[0].addr;
    let mut agents = Vec::new();
    for agent in 0..AGENTS {
        agents.push(TestClient::connect(addr, &format!("drone-{agent}")).await);
    }
    for seq in 0..REQUESTS_PER_AGENT {
        for (agent, client) in agents.iter().enumerate() {
            let payload = format!(r#"{{"id":"{seq}","op":"lease.grant","ttl_ms":{agent}}}"#);
            client
                .publish(
                    &format!("hk/v1/req/drone-{agent}"),
                    QoS::AtLeastOnce,
                    payload,
                )
                .await;
        }
    }
    // A PUBACK from the endpoint means the handler has taken the request.
    for client in &mut agents {
        client.wait_pubacks(REQUESTS_PER_AGENT).await;
    }
    let mut seen = HashSet::new();
    while seen.len() < AGENTS * REQUESTS_PER_AGENT {
        let message = within(WAIT_S, "an inbound message", inbound.recv())
            .await
            .expect("inbound open");
        let key = (message.agent.clone(), message.payload.clone());
        assert!(seen.insert(key), "duplicate request {message:?}");
    }
    for agent in 0..AGENTS {
        let from_agent = seen
            .iter()
            .filter(|(from, _)| *from == format!("drone-{agent}"))
            .count();
        assert_eq!(from_agent, REQUESTS_PER_AGENT, "drone-{agent}");
    }
    assert_eq!(metrics.counter("hivekeeper_mqtt_messages_in_total"), 1000);
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// A request above `REQUEST_BYTES_MAX` still reaches the handler (to be answered `too_large`);
/// one above `packet_bytes_max` makes the endpoint close the agent's connection without
/// reading it.
#[tokio::test]
async fn an_oversized_request_is_handled_and_one_past_the_packet_limit_disconnects() {
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start_transport(embedded_config()).await;
    let addr = transport.listeners()[0].addr;
    let mut agent = TestClient::connect(addr, "drone-big").await;

    let oversized = vec![b'x'; 20 * 1024];
    assert!(oversized.len() > REQUEST_BYTES_MAX);
    agent
        .publish("hk/v1/req/drone-big", QoS::AtLeastOnce, oversized.clone())
        .await;
    let received = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(received.agent, "drone-big");
    assert_eq!(received.payload.len(), 20 * 1024);
    assert_eq!(received.payload, Bytes::from(oversized));

    let beyond_limit = vec![b'y'; 70 * 1024];
    assert!(beyond_limit.len() > hivekeeper_mqtt::DEFAULTS.packet_bytes_max);
    agent
        .publish("hk/v1/req/drone-big", QoS::AtLeastOnce, beyond_limit)
        .await;
    let error = agent.next_error().await;
    assert!(!error.is_empty());
    let nothing = tokio::time::timeout(Duration::from_millis(500), inbound.recv()).await;
    assert!(
        nothing.is_err(),
        "a packet over the limit must not reach the handler: {nothing:?}"
    );
    assert_eq!(
        metrics.counter("hivekeeper_endpoint_packets_too_large_total"),
        1
    );
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = taken.local_addr().expect("bound address");
    let config = Config {
        mode: Mode::Embedded(EmbeddedConfig {
            listen: addr,
            ..EmbeddedConfig::default()
        }),
        ..Config::default()
    };
    let error = start_refused(config, "the port is taken").await;
    match &error {
        MqttError::ListenAddrInUse { addr: reported } => assert_eq!(*reported, addr),
        other => panic!("expected ListenAddrInUse, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains(&addr.to_string()), "{message}");
    assert!(message.contains("address already in use"), "{message}");
}

/// Answering an agent that is not connected or never subscribed (a plain `mosquitto_pub`)
/// drops the answer, as a broker would, and costs nothing else.
#[tokio::test]
async fn a_response_to_an_agent_that_never_subscribed_keeps_the_link_alive() {
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start_transport(embedded_config()).await;
    let addr = transport.listeners()[0].addr;
    transport
        .publish("hk/v1/rsp/nobody-listens", Bytes::from_static(b"{}"))
        .expect("queued");
    transport
        .publish("hk/v1/evt/nobody-listens", Bytes::from_static(b"{}"))
        .expect("queued");

    let mut agent = TestClient::connect(addr, "drone-2").await;
    agent.subscribe("hk/v1/rsp/drone-2", QoS::AtLeastOnce).await;
    agent
        .publish("hk/v1/req/drone-2", QoS::AtLeastOnce, b"after".to_vec())
        .await;
    let received = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound still open");
    assert_eq!(received.payload, Bytes::from_static(b"after"));
    transport
        .publish("hk/v1/rsp/drone-2", Bytes::from_static(b"reply"))
        .expect("queued");
    assert_eq!(
        agent.next_publish().await.payload,
        Bytes::from_static(b"reply")
    );
    eventually(WAIT_S, "one message published, two unrouted", async || {
        metrics.counter("hivekeeper_mqtt_messages_out_total") == 1
            && metrics.counter("hivekeeper_endpoint_outbound_unrouted_total") == 2
    })
    .await;
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn shutdown_flushes_releases_the_handler_and_frees_the_port() {
    let (transport, mut inbound) = start_transport(embedded_config()).await;
    let addr = transport.listeners()[0].addr;
    let mut agent = TestClient::connect(addr, "drone-3").await;
    agent.subscribe("hk/v1/rsp/drone-3", QoS::AtLeastOnce).await;

    transport
        .publish("hk/v1/rsp/drone-3", Bytes::from_static(b"last words"))
        .expect("queued");
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
    assert_eq!(
        agent.next_publish().await.payload,
        Bytes::from_static(b"last words")
    );

    assert!(
        within(WAIT_S, "an inbound message", inbound.recv())
            .await
            .is_none(),
        "the handler is released after shutdown"
    );
    assert!(matches!(
        transport.publish("hk/v1/rsp/drone-3", Bytes::new()),
        Err(MqttError::Closed)
    ));
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("a second shutdown is a no-op");
    // The listener is closed, so the agent's connection is gone and the port is free.
    assert!(!agent.next_error().await.is_empty());
    std::net::TcpListener::bind(addr).expect("the port is free after shutdown");
}

#[tokio::test]
async fn publish_refuses_wildcards_and_oversized_messages_without_queueing() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start_transport(embedded_config()).await;
    assert!(matches!(
        transport.publish("hk/v1/rsp/+", Bytes::new()),
        Err(MqttError::InvalidTopic { .. })
    ));
    let too_large = Bytes::from(vec![0u8; hivekeeper_mqtt::DEFAULTS.packet_bytes_max]);
    match transport.publish("hk/v1/rsp/drone-4", too_large) {
        Err(MqttError::PayloadTooLarge {
            bytes, bytes_max, ..
        }) => {
            assert!(bytes > bytes_max);
            assert_eq!(bytes_max, hivekeeper_mqtt::DEFAULTS.packet_bytes_max);
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    assert_eq!(metrics.counter("hivekeeper_mqtt_messages_out_total"), 0);
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// TCP_NODELAY is set on every accepted socket unless disabled; it removes the ~40 ms
/// Nagle/delayed-ACK stall of every QoS 1 request.
#[tokio::test]
async fn the_listener_has_tcp_nodelay_unless_disabled() {
    let (transport, _inbound) = start_transport(embedded_config()).await;
    assert!(
        transport.listeners()[0].tcp_nodelay,
        "{:?}",
        transport.listeners()
    );
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");

    let config = Config {
        mode: Mode::Embedded(EmbeddedConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            tcp_nodelay: false,
            ..EmbeddedConfig::default()
        }),
        ..Config::default()
    };
    let (transport, _inbound) = start_transport(config).await;
    assert!(!transport.listeners()[0].tcp_nodelay);
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn a_second_listener_serves_mqtt5_too() {
    use rumqttc::v5::mqttbytes::QoS as QoS5;
    use rumqttc::v5::mqttbytes::v5::Packet as Packet5;
    use rumqttc::v5::{AsyncClient as Client5, Event as Event5, MqttOptions as Options5};

    let config = Config {
        mode: Mode::Embedded(EmbeddedConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            listen_v5: Some("127.0.0.1:0".parse().expect("literal address")),
            ..EmbeddedConfig::default()
        }),
        ..Config::default()
    };
    let (transport, mut inbound) = start_transport(config).await;
    let listeners = transport.listeners();
    assert_eq!(listeners.len(), 2);
    let v5 = listeners
        .iter()
        .find(|listener| listener.version == MqttVersion::V5)
        .expect("a v5 listener");
    assert_ne!(v5.addr, listeners[0].addr);

    let options = Options5::new("drone-5", "127.0.0.1", v5.addr.port());
    let (client, mut eventloop) = Client5::new(options, 10);
    let poll = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event5::Incoming(Packet5::ConnAck(_))) => {}
                Ok(_) => {}
                Err(error) => panic!("v5 client: {error}"),
            }
        }
    });
    within(
        WAIT_S,
        "an MQTT 5 publish",
        client.publish("hk/v1/req/drone-5", QoS5::AtLeastOnce, false, "v5 request"),
    )
    .await
    .expect("queued");
    let received = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(received.agent, "drone-5");
    assert_eq!(received.payload, Bytes::from_static(b"v5 request"));
    poll.abort();
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// An MQTT 3.1.1 packet: `kind` (the fixed header's first byte) and its body, with the
/// remaining length (bodies here are under 128 bytes: one length byte).
fn packet(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut packet = vec![kind, u8::try_from(body.len()).expect("a short body")];
    packet.extend_from_slice(body);
    packet
}

/// A length-prefixed MQTT string.
fn mqtt_str(text: &str) -> Vec<u8> {
    let mut bytes = u16::try_from(text.len())
        .expect("short")
        .to_be_bytes()
        .to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

/// Connects `client_id` over raw TCP (MQTT 3.1.1, clean session, keepalive 60 s) and reads
/// its CONNACK.
async fn raw_connect(addr: std::net::SocketAddr, client_id: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut body = mqtt_str("MQTT");
    body.extend_from_slice(&[4, 0x02, 0, 60]);
    body.extend(mqtt_str(client_id));
    stream
        .write_all(&packet(0x10, &body))
        .await
        .expect("CONNECT");
    let mut connack = [0u8; 4];
    stream.read_exact(&mut connack).await.expect("CONNACK");
    assert_eq!(connack, [0x20, 2, 0, 0], "accepted");
    stream
}

/// A client that went silent, then sent a request and closed the connection right behind it
/// without DISCONNECT, gave up on this member: the kernel kept its bytes until the endpoint
/// read them (a paused process, a healed partition), and the client resent elsewhere. The
/// request is dropped unhandled. The same request followed by DISCONNECT is served.
#[tokio::test]
async fn a_request_its_client_abandoned_after_a_silence_is_dropped() {
    use tokio::io::AsyncWriteExt;
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start_transport(embedded_config()).await;
    let addr = transport.listeners()[0].addr;
    let request = |agent: &str| {
        let mut body = mqtt_str(&format!("hk/v1/req/{agent}"));
        body.extend_from_slice(br#"{"id":"1","op":"admin.status"}"#);
        packet(0x30, &body)
    };

    let mut gone = raw_connect(addr, "drone-gone").await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    gone.write_all(&request("drone-gone"))
        .await
        .expect("PUBLISH");
    gone.shutdown().await.expect("close");
    let nothing = tokio::time::timeout(Duration::from_millis(500), inbound.recv()).await;
    assert!(
        nothing.is_err(),
        "an abandoned request is not handled: {nothing:?}"
    );
    assert_eq!(metrics.counter("hivekeeper_endpoint_abandoned_total"), 1);

    let mut meant = raw_connect(addr, "drone-meant").await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let mut bytes = request("drone-meant");
    bytes.extend(packet(0xE0, &[]));
    meant.write_all(&bytes).await.expect("PUBLISH, DISCONNECT");
    meant.shutdown().await.expect("close");
    let received = within(WAIT_S, "the request", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(received.agent, "drone-meant");
    assert_eq!(metrics.counter("hivekeeper_endpoint_abandoned_total"), 1);
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}
