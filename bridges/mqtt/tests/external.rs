//! The transport in external mode against a real mosquitto that each test starts on a free
//! loopback port (and kills at the end, also on panic). Needs the `mosquitto` binary:
//! `apt-get install mosquitto`; without it these tests fail, they never skip.

mod common;

use bytes::Bytes;
use common::{
    Mosquitto, TestClient, TestMetrics, WAIT_S, eventually, external_config, free_port,
    start_refused, start_transport, within,
};
use hivekeeper_mqtt::MqttError;
use rumqttc::QoS;

#[tokio::test]
async fn requests_and_responses_round_trip_through_mosquitto() {
    let metrics = TestMetrics::install();
    let mosquitto = Mosquitto::start().await;
    let (transport, mut inbound) =
        start_transport(external_config(mosquitto.port, "hk-node-1")).await;
    assert!(transport.listeners().is_empty());
    let addr = ([127, 0, 0, 1], mosquitto.port).into();
    let mut agent = TestClient::connect(addr, "drone-1").await;
    agent.subscribe("hk/v1/rsp/drone-1", QoS::AtLeastOnce).await;

    let grant = br#"{"id":"1","op":"lease.grant","ttl_ms":5000}"#;
    agent
        .publish("hk/v1/req/drone-1", QoS::AtLeastOnce, grant.to_vec())
        .await;
    let request = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(request.agent, "drone-1");
    assert_eq!(request.payload, Bytes::from_static(grant));

    agent
        .publish("hk/v1/req/drone-1", QoS::AtMostOnce, b"qos0".to_vec())
        .await;
    let request = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(request.payload, Bytes::from_static(b"qos0"));

    // Only the request filter is subscribed: other topics under the prefix are not received.
    agent
        .publish(
            "hk/v1/other/drone-1",
            QoS::AtLeastOnce,
            b"not for us".to_vec(),
        )
        .await;
    // A request topic that names no agent: nobody to answer, dropped and counted.
    agent
        .publish("hk/v1/req/", QoS::AtLeastOnce, b"from nobody".to_vec())
        .await;

    let response = br#"{"id":"1","ok":true,"lease":"L1","ttl_ms":5000}"#;
    transport
        .publish("hk/v1/rsp/drone-1", Bytes::from_static(response))
        .expect("queued");
    let received = agent.next_publish().await;
    assert_eq!(received.topic, "hk/v1/rsp/drone-1");
    assert_eq!(received.payload, Bytes::from_static(response));
    // Published QoS 1 by the transport, subscribed QoS 1 by the agent.
    assert_eq!(received.qos, QoS::AtLeastOnce);

    let nothing = tokio::time::timeout(std::time::Duration::from_millis(300), inbound.recv()).await;
    assert!(
        nothing.is_err(),
        "only {{prefix}}/req/{{agent}} reaches the handler: {nothing:?}"
    );
    eventually(WAIT_S, "one message published", async || {
        metrics.counter("hivekeeper_mqtt_messages_out_total") == 1
    })
    .await;
    assert_eq!(metrics.counter("hivekeeper_mqtt_messages_in_total"), 3);
    assert_eq!(metrics.counter("hivekeeper_mqtt_bad_topics_total"), 1);
    assert_eq!(metrics.counter("hivekeeper_endpoint_connects_total"), 1);
    assert_eq!(metrics.value("hivekeeper_mqtt_connected"), Some(1.0));
    assert_eq!(metrics.value("hivekeeper_mqtt_clients_connected"), None);

    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
    assert!(
        within(WAIT_S, "an inbound message", inbound.recv())
            .await
            .is_none(),
        "the handler is released after shutdown"
    );
    assert!(matches!(
        transport.publish("hk/v1/rsp/drone-1", Bytes::new()),
        Err(MqttError::Closed)
    ));
}

/// rumqttc reconnects silently and the clean session loses the subscription: the transport
/// must subscribe again on every ConnAck, or it goes deaf after the first broker restart.
#[tokio::test]
async fn a_request_after_a_broker_restart_still_arrives() {
    let metrics = TestMetrics::install();
    let mut mosquitto = Mosquitto::start().await;
    let port = mosquitto.port;
    let (transport, mut inbound) = start_transport(external_config(port, "hk-node-2")).await;
    let addr = ([127, 0, 0, 1], port).into();
    let agent = TestClient::connect(addr, "drone-2").await;
    agent
        .publish("hk/v1/req/drone-2", QoS::AtLeastOnce, b"before".to_vec())
        .await;
    let before = within(WAIT_S, "an inbound message", inbound.recv())
        .await
        .expect("inbound open");
    assert_eq!(before.payload, Bytes::from_static(b"before"));
    drop(agent);

    mosquitto.kill();
    eventually(
        WAIT_S,
        "the transport notices the broker is gone",
        async || metrics.value("hivekeeper_mqtt_connected") == Some(0.0),
    )
    .await;
    let _mosquitto = Mosquitto::start_on(port).await;
    eventually(WAIT_S, "the transport reconnects", async || {
        metrics.value("hivekeeper_mqtt_connected") == Some(1.0)
            && metrics.counter("hivekeeper_endpoint_connects_total") == 2
    })
    .await;

    // The resubscription may still be in flight right after the ConnAck: publish until one
    // request arrives, each attempt with its own id, within the overall bound.
    let mut agent = TestClient::connect(addr, "drone-2").await;
    agent.subscribe("hk/v1/rsp/drone-2", QoS::AtLeastOnce).await;
    let after = within(WAIT_S, "a request after the restart arrives", async {
        for attempt in 0u32.. {
            agent
                .publish(
                    "hk/v1/req/drone-2",
                    QoS::AtLeastOnce,
                    format!("after-{attempt}"),
                )
                .await;
            let wait = std::time::Duration::from_millis(200);
            if let Ok(message) = tokio::time::timeout(wait, inbound.recv()).await {
                return message.expect("inbound open");
            }
        }
        unreachable!("the loop only ends by returning")
    })
    .await;
    assert_eq!(after.agent, "drone-2");
    assert!(after.payload.starts_with(b"after-"), "{after:?}");

    transport
        .publish("hk/v1/rsp/drone-2", Bytes::from_static(b"still answering"))
        .expect("queued");
    assert_eq!(
        agent.next_publish().await.payload,
        Bytes::from_static(b"still answering")
    );
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

#[tokio::test]
async fn no_broker_at_start_is_a_clear_error_within_the_startup_timeout() {
    let port = free_port();
    let mut config = external_config(port, "hk-node-3");
    config.startup_timeout_ms = 1_000;
    let error = start_refused(config, "nothing listens on the port").await;
    match &error {
        MqttError::BrokerUnreachable {
            url, last_error, ..
        } => {
            assert_eq!(url, &format!("mqtt://127.0.0.1:{port}"));
            assert!(
                last_error.to_lowercase().contains("refused"),
                "last error names the cause: {last_error}"
            );
        }
        other => panic!("expected BrokerUnreachable, got {other:?}"),
    }
}
