//! Helpers shared by the transport's integration tests: transport configs, the test's handler
//! (the transport calls it on the receiving task, as it calls the service's bridge in
//! production), a metrics recorder of the test's own and an MQTT test client. Free ports, the
//! mosquitto process guard and the time bound on every wait come from
//! `hivekeeper-test-support`.
//!
//! Every wait goes through [`within`], so a broken transport fails a test instead of hanging
//! it.

#![allow(dead_code)] // Each test file uses a different subset.

#[allow(unused_imports)] // Each test file uses a different subset.
pub use hivekeeper_test_support::{Mosquitto, eventually, free_port, within};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hivekeeper_mqtt::{
    Config, EmbeddedConfig, ExternalConfig, Flow, Inbound, InboundHandler, Mode, MqttError,
    Transport,
};
use metrics::LocalRecorderGuard;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use rumqttc::{
    AsyncClient, Event, MqttOptions, NetworkOptions, Packet, Publish, QoS, TlsConfiguration,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Upper bound of any single wait in these tests, in seconds. Generous: CI machines have 2
/// cores.
pub const WAIT_S: u64 = 15;

/// The test's handler: hands every request to the test through a channel, and asks the
/// connection to go on reading.
pub struct Forward(mpsc::UnboundedSender<Inbound>);

impl InboundHandler for Forward {
    fn handle(&self, _transport: &Transport, inbound: Inbound) -> Flow {
        // The test may have stopped reading; the transport must not care.
        let _ = self.0.send(inbound);
        Flow::Continue
    }
}

/// A handler forwarding to a channel, and the channel's receiver. The receiver yields `None`
/// once the transport has stopped and let go of the handler.
pub fn forward() -> (Arc<Forward>, mpsc::UnboundedReceiver<Inbound>) {
    let (inbound_tx, inbound_rx) = mpsc::unbounded_channel();
    (Arc::new(Forward(inbound_tx)), inbound_rx)
}

/// Starts the transport with `config` and a [`Forward`] handler; fails the test unless it
/// starts within [`WAIT_S`].
pub async fn start_transport(config: Config) -> (Transport, mpsc::UnboundedReceiver<Inbound>) {
    let (handler, inbound) = forward();
    let transport = within(
        WAIT_S,
        "the transport starts",
        Transport::start(config, handler),
    )
    .await
    .unwrap_or_else(|error| panic!("the transport starts: {error}"));
    (transport, inbound)
}

/// Starts the transport with `config`, which must refuse to start; its error. Fails the test
/// if the transport starts, or if the refusal takes longer than [`WAIT_S`].
pub async fn start_refused(config: Config, why: &str) -> MqttError {
    let (handler, _inbound) = forward();
    match within(
        WAIT_S,
        "the transport starts",
        Transport::start(config, handler),
    )
    .await
    {
        Ok(_) => panic!("the transport started, but {why}"),
        Err(error) => error,
    }
}

/// A Prometheus recorder of the test's own, so it reads only its own transport's metrics
/// while other tests run beside it: installed on the test's thread, where a current-thread
/// test runtime runs every task ([`TestMetrics::multi_thread_runtime`] for more threads).
pub struct TestMetrics {
    /// Leaked: the thread-local installation borrows it for as long as the thread lives.
    recorder: &'static PrometheusRecorder,
    _guard: LocalRecorderGuard<'static>,
}

impl TestMetrics {
    /// A fresh recorder, installed on this thread.
    pub fn install() -> TestMetrics {
        let recorder: &'static PrometheusRecorder =
            Box::leak(Box::new(PrometheusBuilder::new().build_recorder()));
        TestMetrics {
            recorder,
            _guard: metrics::set_default_local_recorder(recorder),
        }
    }

    /// A multi-thread runtime with two workers whose every thread records here too.
    pub fn multi_thread_runtime(&self) -> tokio::runtime::Runtime {
        let recorder = self.recorder;
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                // For the thread's whole life: the recorder is never freed.
                std::mem::forget(metrics::set_default_local_recorder(recorder));
            })
            .build()
            .expect("a test runtime")
    }

    /// The value of the unlabelled series `name` in the Prometheus text, as the metrics port
    /// would serve it; `None` when it was never recorded.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.recorder.handle().render().lines().find_map(|line| {
            let (series, value) = line.split_once(' ')?;
            (series == name).then(|| value.parse().expect("a number"))
        })
    }

    /// The counter `name`; fails the test if it was never exported.
    pub fn counter(&self, name: &str) -> u64 {
        let value = self
            .value(name)
            .unwrap_or_else(|| panic!("{name} is not exported"));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a count
        let count = value as u64;
        count
    }
}

/// Embedded mode on a free loopback port (port 0: the transport picks and reports it).
pub fn embedded_config() -> Config {
    Config {
        mode: Mode::Embedded(EmbeddedConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            ..EmbeddedConfig::default()
        }),
        ..Config::default()
    }
}

/// External mode against a broker on `port`, with short reconnect delays so a broker restart
/// is noticed quickly.
pub fn external_config(port: u16, client_id: &str) -> Config {
    Config {
        mode: Mode::External(ExternalConfig {
            url: format!("mqtt://127.0.0.1:{port}"),
            client_id: client_id.to_string(),
            reconnect_delay_ms_min: 50,
            reconnect_delay_ms_max: 500,
            keepalive_s: 5,
            ..ExternalConfig::default()
        }),
        ..Config::default()
    }
}

/// What the test client's event loop saw.
#[derive(Debug)]
pub enum ClientEvent {
    /// Connected.
    ConnAck,
    /// A subscription was acknowledged.
    SubAck,
    /// A QoS 1 publish was acknowledged by the broker.
    PubAck,
    /// A message arrived.
    Publish(Publish),
    /// The connection failed; the event loop is no longer polled.
    Error(String),
}

/// An agent stand-in: a rumqttc client (TCP_NODELAY on, large packet limit so it can send
/// oversized requests) whose event loop runs in its own task and reports what it sees.
pub struct TestClient {
    /// The client, to publish and subscribe.
    pub client: AsyncClient,
    events: mpsc::UnboundedReceiver<ClientEvent>,
    task: JoinHandle<()>,
}

impl TestClient {
    /// Connects to `addr` as `client_id` and waits for the ConnAck.
    pub async fn connect(addr: SocketAddr, client_id: &str) -> TestClient {
        TestClient::connect_to(&addr.ip().to_string(), addr.port(), client_id, None).await
    }

    /// Connects to `host:port` as `client_id`, over TLS with `tls` (the server's certificate is
    /// checked against `host`), and waits for the ConnAck.
    pub async fn connect_to(
        host: &str,
        port: u16,
        client_id: &str,
        tls: Option<Arc<hivekeeper_tls::rustls::ClientConfig>>,
    ) -> TestClient {
        let mut options = MqttOptions::new(client_id, host, port);
        if let Some(tls) = tls {
            options.set_transport(rumqttc::Transport::tls_with_config(
                TlsConfiguration::Rustls(tls),
            ));
        }
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(1024 * 1024, 1024 * 1024);
        let (client, mut eventloop) = AsyncClient::new(options, 2000);
        let mut network = NetworkOptions::new();
        network.set_tcp_nodelay(true);
        eventloop.set_network_options(network);
        let (events_tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let event = match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => ClientEvent::ConnAck,
                    Ok(Event::Incoming(Packet::SubAck(_))) => ClientEvent::SubAck,
                    Ok(Event::Incoming(Packet::PubAck(_))) => ClientEvent::PubAck,
                    Ok(Event::Incoming(Packet::Publish(publish))) => ClientEvent::Publish(publish),
                    Ok(_) => continue,
                    Err(error) => {
                        let _ = events_tx.send(ClientEvent::Error(error.to_string()));
                        return;
                    }
                };
                if events_tx.send(event).is_err() {
                    return;
                }
            }
        });
        let mut test_client = TestClient {
            client,
            events,
            task,
        };
        match test_client.next_event().await {
            ClientEvent::ConnAck => test_client,
            other => panic!("{client_id}: expected ConnAck, got {other:?}"),
        }
    }

    /// The next event, within [`WAIT_S`].
    pub async fn next_event(&mut self) -> ClientEvent {
        within(WAIT_S, "a test client event", self.events.recv())
            .await
            .expect("test client event loop ended")
    }

    /// Subscribes and waits for the SubAck.
    pub async fn subscribe(&mut self, filter: &str, qos: QoS) {
        within(
            WAIT_S,
            "a subscribe queued",
            self.client.subscribe(filter, qos),
        )
        .await
        .expect("subscribe queued");
        loop {
            match self.next_event().await {
                ClientEvent::SubAck => return,
                ClientEvent::Error(error) => panic!("subscribe {filter}: {error}"),
                _ => {}
            }
        }
    }

    /// Queues a publish.
    pub async fn publish(&self, topic: &str, qos: QoS, payload: impl Into<Vec<u8>>) {
        within(
            WAIT_S,
            "a publish queued",
            self.client.publish(topic, qos, false, payload),
        )
        .await
        .expect("publish queued");
    }

    /// Waits for `count` PubAcks, failing on a connection error.
    pub async fn wait_pubacks(&mut self, count: usize) {
        let mut seen = 0;
        while seen < count {
            match self.next_event().await {
                ClientEvent::PubAck => seen += 1,
                ClientEvent::Error(error) => panic!("after {seen} PubAcks: {error}"),
                _ => {}
            }
        }
    }

    /// The next message received, skipping acks.
    pub async fn next_publish(&mut self) -> Publish {
        loop {
            match self.next_event().await {
                ClientEvent::Publish(publish) => return publish,
                ClientEvent::Error(error) => panic!("waiting for a message: {error}"),
                _ => {}
            }
        }
    }

    /// The connection error that ends the event loop, skipping other events.
    pub async fn next_error(&mut self) -> String {
        loop {
            if let ClientEvent::Error(error) = self.next_event().await {
                return error;
            }
        }
    }
}

impl Drop for TestClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}
