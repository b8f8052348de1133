//! A raw MQTT client that speaks the wire protocol without the SDK: any bytes on any topic,
//! same-id resends, bad input.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event as MqttEvent, MqttOptions,
    NetworkOptions, Packet, QoS, TlsConfiguration, Transport,
};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{PREFIX, within};

/// A raw MQTT client of the wire protocol, without the SDK: publishes any bytes on any topic
/// and reads its agent's response topic. Re-subscribes after every reconnect.
pub struct Raw {
    client: AsyncClient,
    agent: String,
    responses: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Messages on any other topic (from [`Raw::subscribe`]): (topic, payload).
    elsewhere: mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    /// Counts SubAcks: a new value means (re)subscribed.
    subscribed: watch::Receiver<u64>,
    /// Counts connection errors (the server closed the connection, or refused a reconnect).
    errors: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Raw {
    /// Connects as MQTT client `{agent}` (the agent endpoint takes the client id as the agent
    /// id) and subscribes to `{PREFIX}/rsp/{agent}`.
    pub async fn connect(port: u16, agent: &str) -> Raw {
        Raw::connect_login(port, agent, None).await
    }

    /// [`Raw::connect`] with the agent's secret (username = the agent id), for a node with
    /// authentication on.
    pub async fn connect_with(port: u16, agent: &str, secret: Option<&str>) -> Raw {
        Raw::connect_login(port, agent, secret.map(|secret| (agent, secret))).await
    }

    /// Like [`Raw::connect`], logging in with `login` (username, password) when given.
    pub async fn connect_login(port: u16, agent: &str, login: Option<(&str, &str)>) -> Raw {
        Raw::connect_options(options(port, agent, login), agent).await
    }

    /// [`Raw::connect`] over TLS with `tls` (a client certificate in it: mutual TLS, the
    /// certificate's CN being the agent id).
    pub async fn connect_tls(port: u16, agent: &str, tls: Arc<rustls::ClientConfig>) -> Raw {
        let mut options = options(port, agent, None);
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(tls)));
        Raw::connect_options(options, agent).await
    }

    /// Connects with `options` as `agent` and subscribes to its response topic.
    async fn connect_options(options: MqttOptions, agent: &str) -> Raw {
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        eventloop.set_network_options(network_options());
        let (responses_tx, responses) = mpsc::unbounded_channel();
        let (elsewhere_tx, elsewhere) = mpsc::unbounded_channel();
        let (subscribed_tx, subscribed) = watch::channel(0u64);
        let (errors_tx, errors) = watch::channel(0u64);
        let response_topic = format!("{PREFIX}/rsp/{agent}");
        let subscriber = client.clone();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                        // try_: never block the polling task on its own request channel.
                        let _ = subscriber.try_subscribe(response_topic.clone(), QoS::AtLeastOnce);
                    }
                    Ok(MqttEvent::Incoming(Packet::SubAck(_))) => {
                        subscribed_tx.send_modify(|n| *n += 1);
                    }
                    Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                        if p.topic == response_topic {
                            let _ = responses_tx.send(p.payload.to_vec());
                        } else {
                            let _ = elsewhere_tx.send((p.topic.clone(), p.payload.to_vec()));
                        }
                    }
                    Ok(_) => {}
                    // Broker down (a node restart): keep polling, which reconnects.
                    Err(_) => {
                        errors_tx.send_modify(|n| *n += 1);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        let mut raw = Raw {
            client,
            agent: agent.to_string(),
            responses,
            elsewhere,
            subscribed,
            errors,
            task,
        };
        within(
            10,
            &format!("raw client {agent} subscribed"),
            raw.subscribed.wait_for(|n| *n > 0),
        )
        .await
        .expect("the raw client's task is running");
        raw
    }

    /// How many times this client has subscribed so far (once per connection).
    pub fn subscriptions(&self) -> u64 {
        *self.subscribed.borrow()
    }

    /// Waits until this client has subscribed more than `seen` times: after a node restart, a
    /// request sent before the client re-subscribed is answered while nobody listens.
    pub async fn resubscribed(&mut self, seen: u64) {
        within(
            15,
            &format!("raw client {} subscribed again", self.agent),
            self.subscribed.wait_for(|n| *n > seen),
        )
        .await
        .expect("the raw client's task is running");
    }

    /// Waits until the server has closed this client's connection (or refused a reconnect)
    /// after the errors seen so far, at most `secs`.
    pub async fn disconnected(&mut self, secs: u64) {
        let seen = self.connection_errors();
        within(
            secs,
            &format!("raw client {} disconnected", self.agent),
            self.errors.wait_for(|n| *n > seen),
        )
        .await
        .expect("the raw client's task is running");
    }

    /// How many times the connection has failed so far (closed by the server, or a reconnect
    /// refused).
    pub fn connection_errors(&self) -> u64 {
        *self.errors.borrow()
    }

    /// Waits at most `bound` for a connection failure after the first `seen`
    /// ([`Raw::connection_errors`] read before the act that should close the connection):
    /// the time waited, as `Err` when none came.
    pub async fn disconnected_after(
        &mut self,
        seen: u64,
        bound: Duration,
    ) -> Result<Duration, Duration> {
        let started = std::time::Instant::now();
        match tokio::time::timeout(bound, self.errors.wait_for(|n| *n > seen)).await {
            Ok(waited) => {
                waited.expect("the raw client's task is running");
                Ok(started.elapsed())
            }
            Err(_) => Err(started.elapsed()),
        }
    }

    /// Subscribes to `filter` too (QoS 1) and waits for the SUBACK; what arrives there is read
    /// with [`Raw::try_next_elsewhere`]. A broker may grant the SUBACK and still deliver
    /// nothing (Mosquitto's ACLs filter at delivery).
    pub async fn subscribe(&mut self, filter: &str) {
        let seen = self.subscriptions();
        within(
            5,
            "raw subscribe",
            self.client.subscribe(filter, QoS::AtLeastOnce),
        )
        .await
        .expect("the raw client's event loop is running");
        within(
            10,
            &format!("{} subscribed to {filter}", self.agent),
            self.subscribed.wait_for(|n| *n > seen),
        )
        .await
        .expect("the raw client's task is running");
    }

    /// The next message on a topic other than this agent's response topic, or `None` after
    /// `ms`.
    pub async fn try_next_elsewhere(&mut self, ms: u64) -> Option<(String, Vec<u8>)> {
        tokio::time::timeout(Duration::from_millis(ms), self.elsewhere.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next message on a topic other than this agent's response topic (an event, after
    /// [`Raw::subscribe`] to the event topic), decoded as JSON; fails the test after `secs`.
    pub async fn next_event(&mut self, secs: u64) -> (String, Value) {
        let Some((topic, payload)) = self.try_next_elsewhere(secs * 1_000).await else {
            panic!("{}: no event within {secs} s", self.agent);
        };
        let event = serde_json::from_slice(&payload)
            .unwrap_or_else(|e| panic!("an event that is not JSON ({e}): {payload:?}"));
        (topic, event)
    }

    /// Publishes `payload` on `topic` (QoS 1).
    pub async fn publish_to(&self, topic: &str, payload: impl Into<Vec<u8>>) {
        within(
            5,
            "raw publish",
            self.client
                .publish(topic, QoS::AtLeastOnce, false, payload.into()),
        )
        .await
        .expect("the raw client's event loop is running");
    }

    /// Publishes `payload` on this agent's request topic.
    pub async fn send(&self, payload: impl Into<Vec<u8>>) {
        let topic = format!("{PREFIX}/req/{}", self.agent);
        self.publish_to(&topic, payload).await;
    }

    /// The next response, or `None` after `ms`.
    pub async fn try_next(&mut self, ms: u64) -> Option<Value> {
        match tokio::time::timeout(Duration::from_millis(ms), self.responses.recv()).await {
            Ok(Some(bytes)) => Some(
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("a response that is not JSON ({e}): {bytes:?}")),
            ),
            _ => None,
        }
    }

    /// The next response; fails the test after `secs`.
    pub async fn next(&mut self, secs: u64) -> Value {
        match self.try_next(secs * 1_000).await {
            Some(value) => value,
            None => panic!("{}: no response within {secs} s", self.agent),
        }
    }

    /// Sends `request` and returns the next response, which must carry the request's id.
    pub async fn call(&mut self, request: Value) -> Value {
        self.send(request.to_string()).await;
        let response = self.next(10).await;
        assert_eq!(
            response["id"], request["id"],
            "the response answers the request: {request} -> {response}"
        );
        response
    }

    /// Like [`Raw::call`], but first skips copies of `replayed`: the answers to same-id
    /// resends of an earlier request, which may still be on their way (each resend is
    /// answered with the first outcome once it is final). Anything else is the answer.
    pub async fn call_after_resends(&mut self, request: Value, replayed: &Value) -> Value {
        self.send(request.to_string()).await;
        // Bounded: at most 100 replays skipped.
        for _ in 0..100 {
            let response = self.next(10).await;
            if response == *replayed {
                continue;
            }
            assert_eq!(
                response["id"], request["id"],
                "the response answers the request (or replays {replayed}): {request} -> \
                 {response}"
            );
            return response;
        }
        panic!("more than 100 replays of {replayed}");
    }

    /// `lease.grant`, returning the lease id.
    pub async fn grant(&mut self, id: &str, ttl_ms: u64) -> String {
        let response = self
            .call(serde_json::json!({"id": id, "op": "lease.grant", "ttl_ms": ttl_ms}))
            .await;
        assert_eq!(response["ok"], true, "{response}");
        response["lease"]
            .as_str()
            .expect("a grant carries a lease")
            .to_string()
    }

    /// `inspect`, returning the whole response.
    pub async fn inspect(&mut self, id: &str, kind: &str, name: &str) -> Value {
        let response = self
            .call(serde_json::json!({"id": id, "op": "inspect", "kind": kind, "name": name}))
            .await;
        assert_eq!(response["ok"], true, "{response}");
        response
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the server answers to a CONNECT from `client_id` with `login`: the CONNACK's return
/// code, or the connection error (the server closed the socket first, say).
pub async fn connack(
    port: u16,
    client_id: &str,
    login: Option<(&str, &str)>,
) -> Result<ConnectReturnCode, ConnectionError> {
    let (_client, mut eventloop) = AsyncClient::new(options(port, client_id, login), 8);
    eventloop.set_network_options(network_options());
    within(10, &format!("a CONNACK for {client_id}"), async {
        // Bounded: the CONNACK is the first packet a server sends; a few events at most.
        for _ in 0..10 {
            match eventloop.poll().await {
                Ok(MqttEvent::Incoming(Packet::ConnAck(connack))) => return Ok(connack.code),
                Ok(_) => {}
                // rumqttc reports a refusing CONNACK as an error carrying its code.
                Err(ConnectionError::ConnectionRefused(code)) => return Ok(code),
                Err(error) => return Err(error),
            }
        }
        panic!("no CONNACK among the first 10 events");
    })
    .await
}

/// The MQTT options of a test client: a 5 s keepalive, a clean session, 64 KiB packets.
fn options(port: u16, client_id: &str, login: Option<(&str, &str)>) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    options.set_clean_session(true);
    options.set_max_packet_size(64 * 1024, 64 * 1024);
    if let Some((username, password)) = login {
        options.set_credentials(username, password);
    }
    options
}

/// TCP_NODELAY (a QoS 1 round trip costs 44 ms without it) and a 2 s connect timeout.
fn network_options() -> NetworkOptions {
    let mut network = NetworkOptions::new();
    network.set_tcp_nodelay(true);
    network.set_connection_timeout(2);
    network
}

/// The error code of a response, `None` for a success.
pub fn code(response: &Value) -> Option<&str> {
    response["error"]["code"].as_str()
}
