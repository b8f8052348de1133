//! The agent endpoint at the edges of the MQTT spec, over raw sockets on loopback: packets are
//! built with rumqttc's codec (never by hand beyond a deliberately broken byte or two), and
//! every wait and every loop is bounded.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::{TestClient, TestMetrics, WAIT_S, eventually, forward, within};
use hivekeeper_mqtt::{Config, EmbeddedConfig, Flow, Inbound, InboundHandler, Mode, Transport};
use rumqttc::mqttbytes::v4;
use rumqttc::v5::mqttbytes::QoS as QoS5;
use rumqttc::v5::mqttbytes::v5;
use rumqttc::{QoS, SubscribeReasonCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The endpoint on a free port with `tune` applied to its settings, handing every request to
/// the returned receiver.
async fn start(
    tune: impl FnOnce(&mut EmbeddedConfig),
) -> (Transport, tokio::sync::mpsc::UnboundedReceiver<Inbound>) {
    let (handler, inbound) = forward();
    (start_handled(tune, handler).await, inbound)
}

/// The endpoint on a free port with `tune` applied to its settings and `handler` as its
/// handler.
async fn start_handled(
    tune: impl FnOnce(&mut EmbeddedConfig),
    handler: Arc<dyn InboundHandler>,
) -> Transport {
    let mut embedded = EmbeddedConfig {
        listen: "127.0.0.1:0".parse().expect("literal address"),
        ..EmbeddedConfig::default()
    };
    tune(&mut embedded);
    let config = Config {
        mode: Mode::Embedded(embedded),
        ..Config::default()
    };
    within(
        WAIT_S,
        "the transport starts",
        Transport::start(config, handler),
    )
    .await
    .expect("the endpoint starts")
}

fn v4_connect(client_id: &str, keep_alive_s: u16) -> BytesMut {
    let mut connect = v4::Connect::new(client_id);
    connect.keep_alive = keep_alive_s;
    let mut out = BytesMut::new();
    v4::Packet::Connect(connect)
        .write(&mut out, usize::MAX)
        .expect("a CONNECT encodes");
    out
}

fn v5_connect(client_id: &str) -> BytesMut {
    let mut connect = v5::Connect {
        keep_alive: 30,
        client_id: client_id.to_string(),
        clean_start: true,
        properties: None,
    };
    connect.keep_alive = 30;
    let mut out = BytesMut::new();
    v5::Packet::Connect(connect, None, None)
        .write(&mut out, None)
        .expect("a CONNECT encodes");
    out
}

fn v4_packet(packet: v4::Packet) -> BytesMut {
    let mut out = BytesMut::new();
    packet.write(&mut out, usize::MAX).expect("encodes");
    out
}

/// Reads one 3.1.1 packet, or `None` when the endpoint closed the connection.
async fn read_v4(stream: &mut TcpStream, buf: &mut BytesMut) -> Option<v4::Packet> {
    within(WAIT_S, "the packet", async {
        loop {
            match v4::Packet::read(buf, 1 << 20) {
                Ok(packet) => return Some(packet),
                Err(rumqttc::mqttbytes::Error::InsufficientBytes(_)) => {}
                Err(error) => panic!("endpoint sent a malformed packet: {error}"),
            }
            match stream.read_buf(buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
}

/// Reads one 5.0 packet, or `None` when the endpoint closed the connection.
async fn read_v5(stream: &mut TcpStream, buf: &mut BytesMut) -> Option<v5::Packet> {
    within(WAIT_S, "the packet", async {
        loop {
            match v5::Packet::read(buf, None) {
                Ok(packet) => return Some(packet),
                Err(rumqttc::v5::mqttbytes::Error::InsufficientBytes(_)) => {}
                Err(error) => panic!("endpoint sent a malformed packet: {error}"),
            }
            match stream.read_buf(buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
}

/// A TCP connection to the endpoint, nothing sent yet.
async fn open_tcp(addr: SocketAddr) -> TcpStream {
    within(
        WAIT_S,
        "a TCP connection to the endpoint",
        TcpStream::connect(addr),
    )
    .await
    .expect("the endpoint accepts TCP connections")
}

/// Stops the transport; fails the test unless it stops cleanly within [`WAIT_S`].
async fn shutdown(transport: Transport) {
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// Connects with 5.0 as `client_id` and reads the CONNACK.
async fn connected_v5(addr: SocketAddr, client_id: &str) -> (TcpStream, BytesMut) {
    let mut stream = open_tcp(addr).await;
    stream
        .write_all(&v5_connect(client_id))
        .await
        .expect("write");
    let mut buf = BytesMut::new();
    assert!(matches!(
        read_v5(&mut stream, &mut buf).await,
        Some(v5::Packet::ConnAck(_))
    ));
    (stream, buf)
}

/// Connects with 3.1.1 as `client_id` and reads the CONNACK.
async fn connected_v4(addr: SocketAddr, client_id: &str) -> (TcpStream, BytesMut) {
    let mut stream = open_tcp(addr).await;
    stream
        .write_all(&v4_connect(client_id, 30))
        .await
        .expect("write");
    let mut buf = BytesMut::new();
    match read_v4(&mut stream, &mut buf).await {
        Some(v4::Packet::ConnAck(ack)) => {
            assert_eq!(ack.code, v4::ConnectReturnCode::Success);
            assert!(!ack.session_present, "the endpoint keeps no session");
        }
        other => panic!("expected CONNACK, got {other:?}"),
    }
    (stream, buf)
}

/// Asserts the endpoint closes `stream` (nothing but a possible 5.0 DISCONNECT first).
async fn assert_closed(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    // The check is the bound: `read_to_end` returns only once the endpoint closed (or reset)
    // the connection; a connection left open fails the test after WAIT_S.
    let _closed_or_reset = within(
        WAIT_S,
        "the endpoint closes the connection",
        stream.read_to_end(&mut rest),
    )
    .await;
}

#[tokio::test]
async fn a_first_packet_that_is_not_connect_closes_the_connection() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let mut stream = open_tcp(addr).await;
    stream
        .write_all(&v4_packet(v4::Packet::PingReq))
        .await
        .expect("write");
    let mut buf = BytesMut::new();
    assert!(
        read_v4(&mut stream, &mut buf).await.is_none(),
        "closed, no answer"
    );
    eventually(WAIT_S, "counted", async || {
        metrics.counter("hivekeeper_endpoint_protocol_errors_total") == 1
    })
    .await;
    shutdown(transport).await;
}

#[tokio::test]
async fn an_unsupported_protocol_level_gets_connack_0x01_and_a_close() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    for level in [3u8, 6] {
        let mut connect = v4_connect(&format!("drone-level-{level}"), 30);
        // Byte 8 is the protocol level: fixed header (2), name length (2), "MQTT" (4).
        connect[8] = level;
        let mut stream = open_tcp(addr).await;
        stream.write_all(&connect).await.expect("write");
        let mut buf = BytesMut::new();
        match read_v4(&mut stream, &mut buf).await {
            Some(v4::Packet::ConnAck(ack)) => {
                assert_eq!(ack.code, v4::ConnectReturnCode::RefusedProtocolVersion);
            }
            other => panic!("level {level}: expected CONNACK 0x01, got {other:?}"),
        }
        assert!(
            read_v4(&mut stream, &mut buf).await.is_none(),
            "then closed"
        );
    }
    assert_eq!(
        metrics.counter("hivekeeper_endpoint_connects_refused_total"),
        2
    );
    shutdown(transport).await;
}

#[tokio::test]
async fn a_client_id_that_is_not_an_agent_id_is_refused() {
    let (transport, _inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    for bad in ["", "has space", "a/b", "+"] {
        let mut stream = open_tcp(addr).await;
        stream.write_all(&v4_connect(bad, 30)).await.expect("write");
        let mut buf = BytesMut::new();
        match read_v4(&mut stream, &mut buf).await {
            Some(v4::Packet::ConnAck(ack)) => {
                assert_eq!(ack.code, v4::ConnectReturnCode::BadClientId, "{bad:?}");
            }
            other => panic!("{bad:?}: expected CONNACK 0x02, got {other:?}"),
        }
    }
    shutdown(transport).await;
}

#[tokio::test]
async fn subscribe_and_publish_outside_the_agents_own_topics_are_refused_and_never_routed() {
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let (mut stream, mut buf) = connected_v4(addr, "drone-a").await;
    let mut subscribe = v4::Subscribe::new("hk/v1/rsp/drone-a", QoS::AtLeastOnce);
    subscribe.add("hk/v1/rsp/drone-b".to_string(), QoS::AtLeastOnce);
    subscribe.add("hk/v1/rsp/+".to_string(), QoS::AtMostOnce);
    subscribe.add("hk/v1/evt/drone-a".to_string(), QoS::ExactlyOnce);
    subscribe.pkid = 7;
    stream
        .write_all(&v4_packet(v4::Packet::Subscribe(subscribe)))
        .await
        .expect("write");
    match read_v4(&mut stream, &mut buf).await {
        Some(v4::Packet::SubAck(ack)) => {
            assert_eq!(ack.pkid, 7);
            assert_eq!(
                ack.return_codes,
                vec![
                    SubscribeReasonCode::Success(QoS::AtLeastOnce),
                    SubscribeReasonCode::Failure,
                    SubscribeReasonCode::Failure,
                    // QoS 2 asked, QoS 1 granted (the endpoint sends nothing at QoS 2).
                    SubscribeReasonCode::Success(QoS::AtLeastOnce),
                ]
            );
        }
        other => panic!("expected SUBACK, got {other:?}"),
    }
    // Another agent's request topic: acknowledged (3.1.1 cannot refuse) and dropped.
    let mut foreign = v4::Publish::new("hk/v1/req/drone-b", QoS::AtLeastOnce, "forged");
    foreign.pkid = 1;
    stream
        .write_all(&v4_packet(v4::Packet::Publish(foreign)))
        .await
        .expect("write");
    assert!(matches!(
        read_v4(&mut stream, &mut buf).await,
        Some(v4::Packet::PubAck(ack)) if ack.pkid == 1
    ));
    let mut own = v4::Publish::new("hk/v1/req/drone-a", QoS::AtLeastOnce, "mine");
    own.pkid = 2;
    stream
        .write_all(&v4_packet(v4::Packet::Publish(own)))
        .await
        .expect("write");
    let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
        .await
        .expect("handler alive");
    assert_eq!(received.agent, "drone-a");
    assert_eq!(
        received.payload,
        Bytes::from_static(b"mine"),
        "the forged one never arrives"
    );
    assert_eq!(
        metrics.counter("hivekeeper_endpoint_publishes_refused_total"),
        1
    );
    assert_eq!(
        metrics.counter("hivekeeper_endpoint_subscribes_refused_total"),
        2
    );
    shutdown(transport).await;
}

#[tokio::test]
async fn mqtt5_refusals_carry_reason_codes() {
    let (transport, _inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let mut stream = open_tcp(addr).await;
    stream
        .write_all(&v5_connect("drone-v5"))
        .await
        .expect("write");
    let mut buf = BytesMut::new();
    match read_v5(&mut stream, &mut buf).await {
        Some(v5::Packet::ConnAck(ack)) => {
            assert_eq!(ack.code, v5::ConnectReturnCode::Success);
            let properties = ack.properties.expect("the endpoint announces its limits");
            assert_eq!(properties.retain_available, Some(0));
            assert_eq!(properties.wildcard_subscription_available, Some(0));
            assert_eq!(
                properties.max_packet_size,
                Some(hivekeeper_mqtt::DEFAULTS.packet_bytes_max as u32)
            );
        }
        other => panic!("expected CONNACK, got {other:?}"),
    }
    let mut foreign = v5::Publish::new("hk/v1/req/drone-b", QoS5::AtLeastOnce, "forged", None);
    foreign.pkid = 3;
    let mut out = BytesMut::new();
    v5::Packet::Publish(foreign)
        .write(&mut out, None)
        .expect("encodes");
    let subscribe = v5::Subscribe {
        pkid: 4,
        filters: vec![v5::Filter::new("hk/v1/evt/drone-b", QoS5::AtLeastOnce)],
        properties: None,
    };
    v5::Packet::Subscribe(subscribe)
        .write(&mut out, None)
        .expect("encodes");
    stream.write_all(&out).await.expect("write");
    match read_v5(&mut stream, &mut buf).await {
        Some(v5::Packet::PubAck(ack)) => {
            assert_eq!(ack.pkid, 3);
            assert_eq!(ack.reason, v5::PubAckReason::NotAuthorized);
        }
        other => panic!("expected PUBACK 0x87, got {other:?}"),
    }
    match read_v5(&mut stream, &mut buf).await {
        Some(v5::Packet::SubAck(ack)) => {
            assert_eq!(
                ack.return_codes,
                vec![v5::SubscribeReasonCode::NotAuthorized]
            );
        }
        other => panic!("expected SUBACK 0x87, got {other:?}"),
    }
    shutdown(transport).await;
}

#[tokio::test]
async fn the_same_client_id_takes_over_and_the_old_connection_is_closed() {
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    // The first one speaks 5.0, so it is told why it goes.
    let (mut first, mut first_buf) = connected_v5(addr, "drone-twin").await;
    let (mut second, mut second_buf) = connected_v4(addr, "drone-twin").await;
    match read_v5(&mut first, &mut first_buf).await {
        Some(v5::Packet::Disconnect(disconnect)) => assert_eq!(
            disconnect.reason_code,
            v5::DisconnectReasonCode::SessionTakenOver
        ),
        other => panic!("expected DISCONNECT 0x8E, got {other:?}"),
    }
    assert!(
        read_v5(&mut first, &mut first_buf).await.is_none(),
        "then closed"
    );
    // The new connection works, and is the one the agent's answers go to.
    let subscribe = v4::Subscribe::new("hk/v1/rsp/drone-twin", QoS::AtMostOnce);
    second
        .write_all(&v4_packet(v4::Packet::Subscribe(subscribe)))
        .await
        .expect("write");
    assert!(matches!(
        read_v4(&mut second, &mut second_buf).await,
        Some(v4::Packet::SubAck(_))
    ));
    let request = v4::Publish::new("hk/v1/req/drone-twin", QoS::AtMostOnce, "hello");
    second
        .write_all(&v4_packet(v4::Packet::Publish(request)))
        .await
        .expect("write");
    let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
        .await
        .expect("handler alive");
    transport
        .publish_response(&received.route, "drone-twin", "answer")
        .expect("queued");
    match read_v4(&mut second, &mut second_buf).await {
        Some(v4::Packet::Publish(publish)) => {
            assert_eq!(publish.topic, "hk/v1/rsp/drone-twin");
            assert_eq!(publish.payload, Bytes::from_static(b"answer"));
        }
        other => panic!("expected the answer, got {other:?}"),
    }
    assert_eq!(metrics.counter("hivekeeper_endpoint_takeovers_total"), 1);
    assert_eq!(
        metrics.value("hivekeeper_mqtt_clients_connected"),
        Some(1.0)
    );
    shutdown(transport).await;
}

#[tokio::test]
async fn a_silent_client_is_closed_after_one_and_a_half_keepalives() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let mut stream = open_tcp(addr).await;
    stream
        .write_all(&v4_connect("drone-quiet", 1))
        .await
        .expect("write");
    let mut buf = BytesMut::new();
    assert!(matches!(
        read_v4(&mut stream, &mut buf).await,
        Some(v4::Packet::ConnAck(_))
    ));
    let started = Instant::now();
    // A PINGREQ answered on the connection's own task resets the clock once.
    stream
        .write_all(&v4_packet(v4::Packet::PingReq))
        .await
        .expect("write");
    assert!(matches!(
        read_v4(&mut stream, &mut buf).await,
        Some(v4::Packet::PingResp)
    ));
    assert!(read_v4(&mut stream, &mut buf).await.is_none(), "closed");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(4),
        "closed after {waited:?}, expected about 1.5 s"
    );
    eventually(WAIT_S, "counted", async || {
        metrics.counter("hivekeeper_endpoint_keepalive_timeouts_total") == 1
    })
    .await;
    shutdown(transport).await;
}

#[tokio::test]
async fn a_half_open_socket_that_never_sends_connect_is_closed_after_the_connect_timeout() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start(|embedded| embedded.connect_packet_timeout_ms = 300).await;
    let addr = transport.listeners()[0].addr;
    let started = Instant::now();
    let mut stream = open_tcp(addr).await;
    // Half a CONNECT, then silence.
    let connect = v4_connect("drone-half", 30);
    stream.write_all(&connect[..5]).await.expect("write");
    assert_closed(&mut stream).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    eventually(WAIT_S, "counted", async || {
        metrics.counter("hivekeeper_endpoint_connect_timeouts_total") == 1
    })
    .await;
    shutdown(transport).await;
}

#[tokio::test]
async fn a_malformed_packet_closes_that_connection_only() {
    let metrics = TestMetrics::install();
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let (mut healthy, _healthy_buf) = connected_v4(addr, "drone-ok").await;
    let (mut broken, mut broken_buf) = connected_v4(addr, "drone-bad").await;
    // Packet type 15 is reserved in 3.1.1; then a SUBSCRIBE with QoS 3.
    broken.write_all(&[0xF0, 0x00]).await.expect("write");
    assert!(
        read_v4(&mut broken, &mut broken_buf).await.is_none(),
        "closed"
    );
    let (mut broken, mut broken_buf) = connected_v4(addr, "drone-bad").await;
    broken
        .write_all(&[0x82, 0x08, 0x00, 0x01, 0x00, 0x03, b'a', b'/', b'b', 0x03])
        .await
        .expect("write");
    assert!(
        read_v4(&mut broken, &mut broken_buf).await.is_none(),
        "closed"
    );
    let request = v4::Publish::new("hk/v1/req/drone-ok", QoS::AtMostOnce, "still here");
    healthy
        .write_all(&v4_packet(v4::Packet::Publish(request)))
        .await
        .expect("write");
    let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
        .await
        .expect("handler alive");
    assert_eq!(received.payload, Bytes::from_static(b"still here"));
    eventually(WAIT_S, "counted", async || {
        metrics.counter("hivekeeper_endpoint_malformed_packets_total") == 2
    })
    .await;
    shutdown(transport).await;
}

/// Random bytes after a valid CONNECT, 200 connections' worth: each ends in a close (or
/// keeps waiting for more bytes until the test drops it), never in a panic or a hung server.
#[tokio::test]
async fn random_bytes_never_take_the_endpoint_down() {
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..200 {
        let (mut stream, _) = connected_v4(addr, &format!("fuzz-{round}")).await;
        let mut noise = vec![0u8; 1 + (round % 64)];
        for byte in &mut noise {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *byte = (seed >> 24) as u8;
        }
        let _ = stream.write_all(&noise).await;
    }
    let (stream, _) = connected_v4(addr, "after-the-noise").await;
    let mut stream = stream;
    let request = v4::Publish::new("hk/v1/req/after-the-noise", QoS::AtMostOnce, "fine");
    stream
        .write_all(&v4_packet(v4::Packet::Publish(request)))
        .await
        .expect("write");
    loop {
        let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
            .await
            .expect("handler alive");
        if received.agent == "after-the-noise" {
            assert_eq!(received.payload, Bytes::from_static(b"fine"));
            break;
        }
    }
    shutdown(transport).await;
}

/// 1,000 sockets that open, send part of a CONNECT and drop: bounded in count and time, and
/// the endpoint is left with no connection and serving.
#[test]
fn a_thousand_connections_dropped_mid_connect_leave_nothing_behind() {
    let metrics = TestMetrics::install();
    metrics
        .multi_thread_runtime()
        .block_on(a_thousand_connections_dropped(&metrics));
}

async fn a_thousand_connections_dropped(metrics: &TestMetrics) {
    const SOCKETS: u64 = 1_000;
    let (transport, _inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let started = Instant::now();
    let connect = v4_connect("drone-dropped", 30);
    for _ in 0..SOCKETS {
        let mut stream = open_tcp(addr).await;
        let _ = stream.write_all(&connect[..connect.len() / 2]).await;
        drop(stream);
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bounded in time"
    );
    eventually(WAIT_S, "every dropped socket accounted for", async || {
        metrics.counter("hivekeeper_endpoint_connects_abandoned_total")
            + metrics.counter("hivekeeper_endpoint_connect_timeouts_total")
            + metrics.counter("hivekeeper_endpoint_connects_rate_limited_total")
            == SOCKETS
    })
    .await;
    let (_stream, _buf) = connected_v4(addr, "drone-after").await;
    eventually(WAIT_S, "only the last one connected", async || {
        metrics.value("hivekeeper_mqtt_clients_connected") == Some(1.0)
    })
    .await;
    shutdown(transport).await;
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_and_counted() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start(|embedded| embedded.connections_max = 2).await;
    let addr = transport.listeners()[0].addr;
    let _one = connected_v4(addr, "drone-1").await;
    let _two = connected_v4(addr, "drone-2").await;
    let mut third = open_tcp(addr).await;
    let _ = third.write_all(&v4_connect("drone-3", 30)).await;
    let mut buf = BytesMut::new();
    assert!(
        read_v4(&mut third, &mut buf).await.is_none(),
        "closed at accept"
    );
    assert_eq!(
        metrics.counter("hivekeeper_endpoint_connections_refused_total"),
        1
    );
    shutdown(transport).await;
}

#[tokio::test]
async fn qos2_requests_are_delivered_once() {
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let (mut stream, mut buf) = connected_v4(addr, "drone-q2").await;
    let mut request = v4::Publish::new("hk/v1/req/drone-q2", QoS::ExactlyOnce, "exactly");
    request.pkid = 9;
    let mut resend = request.clone();
    resend.dup = true;
    stream
        .write_all(&v4_packet(v4::Packet::Publish(request)))
        .await
        .expect("write");
    assert!(
        matches!(read_v4(&mut stream, &mut buf).await, Some(v4::Packet::PubRec(rec)) if rec.pkid == 9)
    );
    // A resend before PUBREL (the PUBREC was "lost") is acknowledged, not delivered again.
    stream
        .write_all(&v4_packet(v4::Packet::Publish(resend)))
        .await
        .expect("write");
    assert!(
        matches!(read_v4(&mut stream, &mut buf).await, Some(v4::Packet::PubRec(rec)) if rec.pkid == 9)
    );
    stream
        .write_all(&v4_packet(v4::Packet::PubRel(v4::PubRel::new(9))))
        .await
        .expect("write");
    assert!(
        matches!(read_v4(&mut stream, &mut buf).await, Some(v4::Packet::PubComp(comp)) if comp.pkid == 9)
    );
    let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
        .await
        .expect("handler alive");
    assert_eq!(received.payload, Bytes::from_static(b"exactly"));
    let again = tokio::time::timeout(Duration::from_millis(300), inbound.recv()).await;
    assert!(again.is_err(), "delivered once: {again:?}");
    shutdown(transport).await;
}

/// A handler that answers `Flow::Pause` (the node found the agent over its request rate)
/// stops the endpoint reading that connection for the pause: the next request, already sent,
/// is handed over only after it. Other connections are not held back.
#[tokio::test]
async fn a_paused_connection_is_not_read_until_the_pause_ends() {
    const PAUSE: Duration = Duration::from_millis(400);
    /// Reports each request with when it was handled; asks for a pause after `first`.
    struct PauseAfterFirst(tokio::sync::mpsc::UnboundedSender<(String, Bytes, Instant)>);
    impl InboundHandler for PauseAfterFirst {
        fn handle(&self, _transport: &Transport, message: Inbound) -> Flow {
            let first = message.payload == Bytes::from_static(b"first");
            let _ = self
                .0
                .send((message.agent, message.payload, Instant::now()));
            if first {
                Flow::Pause(PAUSE)
            } else {
                Flow::Continue
            }
        }
    }
    let (handled_tx, mut handled) = tokio::sync::mpsc::unbounded_channel();
    let transport = start_handled(|_| {}, Arc::new(PauseAfterFirst(handled_tx))).await;
    let addr = transport.listeners()[0].addr;
    let (mut flooder, _) = connected_v4(addr, "drone-fast").await;
    let (mut calm, _) = connected_v4(addr, "drone-calm").await;
    let publish = |topic: &str, payload: &'static str| {
        v4_packet(v4::Packet::Publish(v4::Publish::new(
            topic,
            QoS::AtMostOnce,
            payload,
        )))
    };
    // Both of the flooder's requests in one write: the second is already buffered.
    let mut both = publish("hk/v1/req/drone-fast", "first");
    both.extend_from_slice(&publish("hk/v1/req/drone-fast", "second"));
    flooder.write_all(&both).await.expect("write");
    let (_, payload, first_at) = within(WAIT_S, "a request handled", handled.recv())
        .await
        .expect("handler alive");
    assert_eq!(payload, Bytes::from_static(b"first"));
    calm.write_all(&publish("hk/v1/req/drone-calm", "calm"))
        .await
        .expect("write");
    let (agent, _, _) = within(WAIT_S, "a request handled", handled.recv())
        .await
        .expect("handler alive");
    assert_eq!(agent, "drone-calm", "another agent is not held back");
    let (_, payload, second_at) = within(WAIT_S, "a request handled", handled.recv())
        .await
        .expect("handler alive");
    assert_eq!(payload, Bytes::from_static(b"second"));
    // A lower bound only: a slow machine makes the gap longer, never shorter.
    assert!(
        second_at.duration_since(first_at) >= PAUSE,
        "handled {:?} after the first",
        second_at.duration_since(first_at)
    );
    shutdown(transport).await;
}

/// An agent that stops reading: its responses pile up behind a full socket until a write
/// exceeds `write_timeout_ms` or its queue overflows; either way it is disconnected and
/// counted, and its events went first.
#[tokio::test]
async fn a_slow_consumer_loses_events_then_is_disconnected() {
    let metrics = TestMetrics::install();
    let (transport, _inbound) = start(|embedded| {
        embedded.connection_queue_max = 8;
        embedded.write_timeout_ms = 300;
    })
    .await;
    let addr = transport.listeners()[0].addr;
    let (mut stream, mut buf) = connected_v4(addr, "drone-slow").await;
    let mut subscribe = v4::Subscribe::new("hk/v1/rsp/drone-slow", QoS::AtMostOnce);
    subscribe.add("hk/v1/evt/drone-slow".to_string(), QoS::AtMostOnce);
    stream
        .write_all(&v4_packet(v4::Packet::Subscribe(subscribe)))
        .await
        .expect("write");
    assert!(matches!(
        read_v4(&mut stream, &mut buf).await,
        Some(v4::Packet::SubAck(_))
    ));
    // From here the test never reads: 60 KB messages fill the socket buffers, then the queue.
    let big = Bytes::from(vec![b'x'; 60 * 1024]);
    let started = Instant::now();
    let mut refused = 0;
    for _ in 0..2_000 {
        if metrics.counter("hivekeeper_endpoint_slow_consumer_disconnects_total") == 1 {
            break;
        }
        let _ = transport.publish_event("hk/v1/evt/drone-slow", big.clone());
        if transport
            .publish("hk/v1/rsp/drone-slow", big.clone())
            .is_err()
        {
            refused += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "bounded in time"
        );
    }
    eventually(WAIT_S, "disconnected as a slow consumer", async || {
        metrics.counter("hivekeeper_endpoint_slow_consumer_disconnects_total") == 1
    })
    .await;
    assert!(
        metrics.counter("hivekeeper_endpoint_events_dropped_total") >= 1,
        "events went first"
    );
    let _ = refused;
    shutdown(transport).await;
}

/// MQTT 5 request/response: a request naming the agent's own response topic and carrying
/// Correlation Data gets its answer there with the same Correlation Data; another agent's
/// response topic is refused.
#[tokio::test]
async fn mqtt5_response_topic_and_correlation_data_round_trip() {
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let (mut stream, mut buf) = connected_v5(addr, "drone-rr").await;
    let mut out = BytesMut::new();
    v5::Packet::Subscribe(v5::Subscribe {
        pkid: 1,
        filters: vec![v5::Filter::new("hk/v1/rsp/drone-rr", QoS5::AtLeastOnce)],
        properties: None,
    })
    .write(&mut out, None)
    .expect("encodes");
    let properties = |topic: &str| v5::PublishProperties {
        response_topic: Some(topic.to_string()),
        correlation_data: Some(Bytes::from_static(b"corr-42")),
        ..v5::PublishProperties::default()
    };
    let mut stolen = v5::Publish::new(
        "hk/v1/req/drone-rr",
        QoS5::AtLeastOnce,
        "to someone else",
        Some(properties("hk/v1/rsp/drone-other")),
    );
    stolen.pkid = 2;
    v5::Packet::Publish(stolen)
        .write(&mut out, None)
        .expect("encodes");
    let mut request = v5::Publish::new(
        "hk/v1/req/drone-rr",
        QoS5::AtLeastOnce,
        "question",
        Some(properties("hk/v1/rsp/drone-rr")),
    );
    request.pkid = 3;
    v5::Packet::Publish(request)
        .write(&mut out, None)
        .expect("encodes");
    stream.write_all(&out).await.expect("write");
    assert!(matches!(
        read_v5(&mut stream, &mut buf).await,
        Some(v5::Packet::SubAck(_))
    ));
    match read_v5(&mut stream, &mut buf).await {
        Some(v5::Packet::PubAck(ack)) => assert_eq!(ack.reason, v5::PubAckReason::NotAuthorized),
        other => panic!("expected PUBACK 0x87, got {other:?}"),
    }
    assert!(
        matches!(read_v5(&mut stream, &mut buf).await, Some(v5::Packet::PubAck(ack)) if ack.reason == v5::PubAckReason::Success)
    );
    let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
        .await
        .expect("handler alive");
    assert_eq!(received.payload, Bytes::from_static(b"question"));
    assert_eq!(received.route.response_topic(), Some("hk/v1/rsp/drone-rr"));
    assert_eq!(
        received.route.correlation_data(),
        Some(&Bytes::from_static(b"corr-42"))
    );
    transport
        .publish_response(&received.route, "drone-rr", "answer")
        .expect("queued");
    match read_v5(&mut stream, &mut buf).await {
        Some(v5::Packet::Publish(publish)) => {
            assert_eq!(publish.topic, Bytes::from_static(b"hk/v1/rsp/drone-rr"));
            assert_eq!(publish.payload, Bytes::from_static(b"answer"));
            let properties = publish.properties.expect("correlation data echoed");
            assert_eq!(
                properties.correlation_data,
                Some(Bytes::from_static(b"corr-42"))
            );
        }
        other => panic!("expected the answer, got {other:?}"),
    }
    shutdown(transport).await;
}

/// The SDK's client library against the endpoint: connect, subscribe, request, answer.
#[tokio::test]
async fn rumqttc_round_trip() {
    let (transport, mut inbound) = start(|_| {}).await;
    let addr = transport.listeners()[0].addr;
    let mut agent = TestClient::connect(addr, "drone-rumqttc").await;
    agent
        .subscribe("hk/v1/rsp/drone-rumqttc", QoS::AtLeastOnce)
        .await;
    agent
        .publish("hk/v1/req/drone-rumqttc", QoS::AtLeastOnce, "ping")
        .await;
    let received = within(WAIT_S, "a request reaches the handler", inbound.recv())
        .await
        .expect("handler alive");
    transport
        .publish_response(&received.route, "drone-rumqttc", "pong")
        .expect("queued");
    let answer = agent.next_publish().await;
    assert_eq!(answer.topic, "hk/v1/rsp/drone-rumqttc");
    assert_eq!(answer.payload, Bytes::from_static(b"pong"));
    shutdown(transport).await;
}
