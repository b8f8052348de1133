//! Helpers shared by the transport's integration tests: an MQTT test client, a mosquitto
//! process guard, free loopback ports and a time bound on every wait.
//!
//! Every wait goes through [`within`], so a broken transport fails a test instead of hanging
//! it.

#![allow(dead_code)] // Each test file uses a different subset.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hivekeeper_mqtt::{Config, EmbeddedConfig, ExternalConfig, Mode};
use rumqttc::{AsyncClient, Event, MqttOptions, NetworkOptions, Packet, Publish, QoS};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Upper bound of any single wait in these tests. Generous: CI machines have 2 cores.
pub const WAIT: Duration = Duration::from_secs(15);

/// Awaits `future`, failing the test after [`WAIT`].
pub async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .expect("test step timed out")
}

/// Waits until `condition` holds, checking every few ms, failing the test after [`WAIT`].
/// For counters that another thread updates just after the observable effect.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(WAIT, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for: {what}");
}

/// A free loopback port: bind port 0, read the port, release it.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
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
        let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
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

    /// The next event, within [`WAIT`].
    pub async fn next_event(&mut self) -> ClientEvent {
        within(self.events.recv())
            .await
            .expect("test client event loop ended")
    }

    /// Subscribes and waits for the SubAck.
    pub async fn subscribe(&mut self, filter: &str, qos: QoS) {
        within(self.client.subscribe(filter, qos))
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
        within(self.client.publish(topic, qos, false, payload))
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

/// A mosquitto process on a loopback port, killed when dropped (also when a test panics).
pub struct Mosquitto {
    child: Child,
    /// The port it listens on (127.0.0.1 only).
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// The mosquitto binary. A missing binary fails the test (never a silent skip): the
    /// external-broker tests are the only proof that mode works.
    pub fn binary() -> PathBuf {
        let candidates = [
            "/usr/sbin/mosquitto",
            "/usr/bin/mosquitto",
            "/usr/local/sbin/mosquitto",
        ];
        if let Some(found) = candidates.iter().map(Path::new).find(|path| path.exists()) {
            return found.to_path_buf();
        }
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .map(|dir| dir.join("mosquitto"))
            .find(|path| path.exists())
            .unwrap_or_else(|| {
                panic!(
                    "mosquitto not found (looked in {candidates:?} and PATH): the external-broker \
                     tests need it; install it with `apt-get install mosquitto`"
                )
            })
    }

    /// Starts mosquitto on 127.0.0.1:`port` and waits until it accepts TCP connections.
    pub async fn start(port: u16) -> Mosquitto {
        let dir = tempfile::tempdir().expect("temp dir for mosquitto");
        let config_path = dir.path().join("mosquitto.conf");
        let mut config = std::fs::File::create(&config_path).expect("write mosquitto.conf");
        writeln!(
            config,
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
             set_tcp_nodelay true\nlog_dest stderr\nlog_type error\nlog_type warning\n\
             log_type notice"
        )
        .expect("write mosquitto.conf");
        let log = std::fs::File::create(dir.path().join("mosquitto.log")).expect("mosquitto log");
        let child = Command::new(Self::binary())
            .arg("-c")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn mosquitto");
        let mut mosquitto = Mosquitto { child, port, dir };
        let ready = tokio::time::timeout(WAIT, async {
            loop {
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if ready.is_err() || mosquitto.child.try_wait().ok().flatten().is_some() {
            let log = std::fs::read_to_string(mosquitto.dir.path().join("mosquitto.log"))
                .unwrap_or_default();
            panic!("mosquitto did not start on port {port}; its log:\n{log}");
        }
        mosquitto
    }

    /// Kills the process and waits for it (SIGKILL: like a crash, no clean goodbye).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.kill();
    }
}
