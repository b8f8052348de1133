//! Support for the end-to-end tests: real `hivekeeper serve` processes, a mosquitto broker, a
//! killable TCP proxy, a raw MQTT client that speaks the wire protocol without the SDK, SDK
//! agents with test-sized timeouts, and a plain HTTP GET of /metrics.
//!
//! Everything binds 127.0.0.1 only, on ports the OS picked. Every wait is bounded
//! ([`within`], [`eventually`]); every child process is killed when its guard drops, also
//! while a test panics (then its log tail is printed, so a failure shows what the node said).

#![allow(dead_code)] // Each test binary uses a different part of this module.

pub mod cluster;
// One killable proxy for both test suites (the SDK's tests cannot reach this crate's).
#[path = "../../agent-sdk/tests/common/proxy.rs"]
mod proxy;

#[allow(unused_imports)] // Each test binary uses a different part of this module.
pub use proxy::Proxy;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_agent::protocol::{HolderInfo, Op, ResourceKind, WaiterInfo};
use hivekeeper_agent::{Agent, AgentConfig, AgentError, Guard, Session};
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, NetworkOptions, Packet, QoS};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// The default topic prefix.
pub const PREFIX: &str = "hk/v1";

/// Fails the test if `future` takes longer than `secs`: every wait in these tests is bounded.
pub async fn within<T>(secs: u64, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {secs} s"))
}

/// Evaluates `check` every 50 ms for at most `secs` until it returns `Some`; fails the test
/// otherwise.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!("{what}: not true within {secs} s");
        }
        // A single check is bounded too (a request to a node that hangs).
        if let Ok(Some(value)) = tokio::time::timeout(left, check()).await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A port that was free a moment ago (bind port 0, read it, close).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener
        .local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// A child process's output, collected by a reader thread.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn lines(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a line holds `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.count(needle) > 0
    }

    /// How many lines hold `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.lines()
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    }

    /// The first line holding `needle`.
    pub fn find(&self, needle: &str) -> Option<String> {
        self.lines()
            .iter()
            .find(|line| line.contains(needle))
            .cloned()
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> String {
        let lines = self.lines();
        let start = lines.len().saturating_sub(n);
        lines[start..].join("\n")
    }

    /// Reads `stream` line by line into the log until it closes.
    pub fn collect(&self, stream: impl std::io::Read + Send + 'static) {
        let log = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                log.lines().push(line);
            }
        });
    }
}

/// How a node reaches MQTT.
#[derive(Debug, Clone)]
pub enum Mqtt {
    /// `--mqtt-listen 127.0.0.1:port` (embedded rumqttd).
    Embedded(u16),
    /// `--mqtt-url mqtt://127.0.0.1:port` (an external broker).
    External(u16),
}

/// A running `hivekeeper serve`, killed (SIGKILL) when dropped. The data dir is the caller's,
/// so a node can be killed and started again on the same data and ports.
pub struct Node {
    child: Option<Child>,
    log: Log,
    data_dir: PathBuf,
    mqtt: Mqtt,
    /// Where /metrics is served.
    pub metrics_port: u16,
    /// When the last start printed "hivekeeper ready".
    pub ready_at: Instant,
    /// More `serve` arguments (e.g. `--config FILE`), kept across restarts.
    extra_args: Vec<String>,
}

/// Why a start failed.
enum StartError {
    /// A port was taken between [`free_port`] and the node's bind: try other ports.
    PortInUse(String),
    /// Anything else: the test fails.
    Failed(String),
}

/// How often a start on ports that turned out to be taken is retried.
const START_ATTEMPTS: usize = 5;

impl Node {
    /// A node with an embedded broker on free ports.
    pub async fn start(data_dir: &Path) -> Node {
        Node::start_picking(data_dir, || Mqtt::Embedded(free_port()), &[]).await
    }

    /// A node with an embedded broker on free ports and more `serve` arguments.
    pub async fn start_with_args(data_dir: &Path, extra_args: &[&str]) -> Node {
        Node::start_picking(data_dir, || Mqtt::Embedded(free_port()), extra_args).await
    }

    /// A node using the external broker on `broker_port`, metrics on a free port.
    pub async fn start_external(data_dir: &Path, broker_port: u16) -> Node {
        Node::start_picking(data_dir, || Mqtt::External(broker_port), &[]).await
    }

    /// Starts a node on free ports. A port picked by [`free_port`] can be taken before the
    /// node binds it (by another test's node or an outgoing connection's ephemeral port):
    /// then it starts again on other ports, a bounded number of times.
    async fn start_picking(data_dir: &Path, mqtt: impl Fn() -> Mqtt, extra_args: &[&str]) -> Node {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let mut node = Node {
                child: None,
                log: Log::default(),
                data_dir: data_dir.to_path_buf(),
                mqtt: mqtt(),
                metrics_port: free_port(),
                ready_at: Instant::now(),
                extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
            };
            match node.spawn().await {
                Ok(()) => return node,
                Err(StartError::PortInUse(log)) => last = log,
                Err(StartError::Failed(why)) => panic!("{why}"),
            }
        }
        panic!("hivekeeper serve found its ports taken {START_ATTEMPTS} times:\n{last}");
    }

    /// The port agents connect to (the embedded broker's, or the external broker's).
    pub fn mqtt_port(&self) -> u16 {
        match self.mqtt {
            Mqtt::Embedded(port) | Mqtt::External(port) => port,
        }
    }

    /// Starts the process and waits until it logged that it is ready (30 s at most: a debug
    /// build on a busy machine).
    async fn spawn(&mut self) -> Result<(), StartError> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hivekeeper"));
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", self.metrics_port));
        match self.mqtt {
            Mqtt::Embedded(port) => command
                .arg("--mqtt-listen")
                .arg(format!("127.0.0.1:{port}")),
            Mqtt::External(port) => command
                .arg("--mqtt-url")
                .arg(format!("mqtt://127.0.0.1:{port}")),
        };
        command.args(&self.extra_args);
        let mut child = command
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hivekeeper serve");
        let log = Log::default();
        if let Some(stderr) = child.stderr.take() {
            log.collect(stderr);
        }
        if let Some(stdout) = child.stdout.take() {
            log.collect(stdout);
        }
        self.log = log;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.log.contains("hivekeeper ready") {
                self.ready_at = Instant::now();
                return Ok(());
            }
            if let Some(status) = self.exit_status() {
                // The reader threads may still be copying the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let log = self.log.tail(40);
                self.child = None;
                return Err(if log.contains("Address already in use") {
                    StartError::PortInUse(log)
                } else {
                    StartError::Failed(format!(
                        "hivekeeper serve exited with {status} before it was ready:\n{log}"
                    ))
                });
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "hivekeeper serve not ready within 30 s:\n{}",
                    self.log.tail(40)
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `Some(status)` once the process has exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exit_status().is_none()
    }

    /// SIGTERM (sent with kill(1): the workspace forbids `unsafe`), then waits at most 15 s
    /// for the process to exit on its own.
    pub async fn terminate(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let pid = child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill(1) runs");
        assert!(sent.success(), "SIGTERM to {pid} failed");
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.exit_status().is_none() {
            assert!(
                Instant::now() < deadline,
                "hivekeeper serve did not stop within 15 s of SIGTERM:\n{}",
                self.log.tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `kill -9`: no shutdown, no flush beyond what was already fsynced.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the node again on the same data dir and ports. If a port is briefly taken (an
    /// outgoing connection's ephemeral port), tries again, a bounded number of times.
    pub async fn restart(&mut self) {
        self.kill9();
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match self.spawn().await {
                Ok(()) => return,
                Err(StartError::PortInUse(log)) => last = log,
                Err(StartError::Failed(why)) => panic!("{why}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("hivekeeper serve found its ports taken {START_ATTEMPTS} times:\n{last}");
    }

    /// The last `n` lines the node printed.
    pub fn log_tail(&self, n: usize) -> String {
        self.log.tail(n)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Killed first: printing can panic (stderr a closed pipe), and a panic in a drop while
        // unwinding aborts the process, which would leave the node running.
        self.kill9();
        if std::thread::panicking() {
            let log = self.log.tail(60);
            let _ = std::panic::catch_unwind(|| {
                eprintln!("--- hivekeeper serve log (last 60 lines) ---\n{log}");
            });
        }
    }
}

/// A mosquitto broker on a free loopback port with a generated config, killed on drop.
pub struct Mosquitto {
    child: Child,
    log: Log,
    /// Its port.
    pub port: u16,
    _dir: tempfile::TempDir,
}

/// Where Debian and Ubuntu install the broker.
pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

impl Mosquitto {
    /// Starts mosquitto and waits until it accepts TCP connections; on a port taken meanwhile
    /// it tries another, a bounded number of times. Fails the test, saying what to install,
    /// when the binary is missing.
    pub async fn start() -> Mosquitto {
        assert!(
            Path::new(MOSQUITTO).exists(),
            "{MOSQUITTO} not found: the external-broker test needs mosquitto \
             (apt-get install mosquitto)"
        );
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Mosquitto::try_start().await {
                Ok(broker) => return broker,
                Err(log) if log.contains("Address already in use") => last = log,
                Err(log) => panic!("mosquitto did not start:\n{log}"),
            }
        }
        panic!("mosquitto found its port taken {START_ATTEMPTS} times:\n{last}");
    }

    async fn try_start() -> Result<Mosquitto, String> {
        let dir = tempfile::tempdir().expect("a temp dir for mosquitto.conf");
        let port = free_port();
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\n\
                 allow_anonymous true\n\
                 set_tcp_nodelay true\n\
                 persistence false\n\
                 log_dest stderr\n\
                 log_type error\n\
                 log_type warning\n"
            ),
        )
        .expect("write mosquitto.conf");
        let mut child = Command::new(MOSQUITTO)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mosquitto");
        let log = Log::default();
        if let Some(stderr) = child.stderr.take() {
            log.collect(stderr);
        }
        if let Some(stdout) = child.stdout.take() {
            log.collect(stdout);
        }
        let mut broker = Mosquitto {
            child,
            log,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = broker.child.try_wait() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(format!("exited with {status}:\n{}", broker.log.tail(20)));
            }
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(broker);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "not listening on {port} within 10 s:\n{}",
                    broker.log.tail(20)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        // Killed first, as for `Node`.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log.tail(20);
            let _ = std::panic::catch_unwind(|| eprintln!("--- mosquitto log ---\n{log}"));
        }
    }
}

/// SDK settings for a test agent: timeouts short enough that retries happen within a test,
/// long enough for a debug build on a busy 2-core machine.
pub fn agent_config(agent_id: &str, port: u16) -> AgentConfig {
    AgentConfig {
        agent_id: agent_id.to_string(),
        brokers: vec![format!("127.0.0.1:{port}")],
        request_timeout_ms: 1_000,
        request_deadline_ms: 15_000,
        // A queued acquire resends its id every second: how a grant whose response was lost
        // (a node restart) reaches the agent.
        wait_resend_ms: 1_000,
        backoff_first_ms: 20,
        backoff_cap_ms: 250,
        keepalive_margin_ms: 150,
        mqtt_keepalive_s: 2,
        connect_timeout_s: 2,
        ..AgentConfig::default()
    }
}

/// An SDK agent with [`agent_config`].
pub async fn agent(agent_id: &str, port: u16) -> Agent {
    within(
        20,
        &format!("agent {agent_id} connects"),
        Agent::connect(agent_config(agent_id, port)),
    )
    .await
    .unwrap_or_else(|e| panic!("agent {agent_id} connects: {e}"))
}

/// An SDK agent and a session of `ttl_ms`.
pub async fn agent_session(agent_id: &str, port: u16, ttl_ms: u64) -> (Agent, Session) {
    let agent = agent(agent_id, port).await;
    let session = within(10, &format!("{agent_id} session"), agent.session(ttl_ms))
        .await
        .unwrap_or_else(|e| panic!("{agent_id} session: {e}"));
    (agent, session)
}

/// Holders and waiters of a resource, through an SDK agent.
pub async fn inspect(
    agent: &Agent,
    kind: ResourceKind,
    name: &str,
) -> (Vec<HolderInfo>, Vec<WaiterInfo>) {
    let success = within(
        20,
        "inspect",
        agent.request(Op::Inspect {
            kind,
            name: name.to_string(),
        }),
    )
    .await
    .unwrap_or_else(|e| panic!("inspect {kind:?} {name}: {e}"));
    (
        success.holders.unwrap_or_default(),
        success.waiters.unwrap_or_default(),
    )
}

/// `inspect` of a lock.
pub async fn inspect_lock(agent: &Agent, name: &str) -> (Vec<HolderInfo>, Vec<WaiterInfo>) {
    inspect(agent, ResourceKind::Lock, name).await
}

/// Waits until the lock's waiters are exactly `agents`, in that order (positions 1, 2, ...).
pub async fn wait_for_waiters(observer: &Agent, lock: &str, agents: &[String]) {
    eventually(
        15,
        &format!("waiters of {lock} are {agents:?}"),
        move || async move {
            let (_, waiters) = inspect_lock(observer, lock).await;
            let seen: Vec<&str> = waiters.iter().map(|w| w.agent.as_str()).collect();
            let positions: Vec<u32> = waiters.iter().map(|w| w.position).collect();
            let expected_positions: Vec<u32> = (1..=agents.len() as u32).collect();
            (seen == agents && positions == expected_positions).then_some(())
        },
    )
    .await;
}

/// The FIFO scenario shared by the embedded and the external-broker tests: one agent holds
/// the lock, a second contends (try-lock: `would_block`), five waiters queue in a known order
/// (each one seen queued by `inspect` before the next starts), and on release they are granted
/// one after the other in that order with strictly increasing tokens.
pub async fn fifo_scenario(port: u16, lock: &str) {
    let observer = agent("observer", port).await;
    let (_holder_agent, holder) = agent_session("holder", port, 5_000).await;
    let first = within(10, "holder takes the free lock", holder.lock(lock))
        .await
        .expect("the holder takes the free lock");
    let first_token = first.token();

    // Two agents contend: the second is refused at once by a try-lock, and nothing queues.
    let (_contender_agent, contender) = agent_session("contender", port, 5_000).await;
    let refused = within(10, "contender try_lock", contender.try_lock(lock)).await;
    assert!(
        matches!(refused, Err(AgentError::WouldBlock)),
        "a try-lock of a held lock is would_block, got {refused:?}"
    );
    let (holders, waiters) = inspect_lock(&observer, lock).await;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].agent, "holder");
    assert_eq!(holders[0].token, first_token);
    assert!(waiters.is_empty(), "a try-lock never queues: {waiters:?}");

    // Five waiters, queued one by one.
    let grants: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut tasks = JoinSet::new();
    let mut queued = Vec::new();
    for i in 1..=5 {
        let id = format!("waiter-{i}");
        let (_agent, session) = agent_session(&id, port, 5_000).await;
        let (grants, name, me) = (grants.clone(), lock.to_string(), id.clone());
        tasks.spawn(async move {
            let guard = session
                .lock(name)
                .await
                .unwrap_or_else(|e| panic!("{me} waits for the lock: {e}"));
            grants
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((me.clone(), guard.token()));
            // Hold it a moment, so a second grant at once would show up in the order.
            tokio::time::sleep(Duration::from_millis(30)).await;
            guard
                .release()
                .await
                .unwrap_or_else(|e| panic!("{me} releases: {e}"));
            session
        });
        queued.push(id);
        wait_for_waiters(&observer, lock, &queued).await;
    }
    let (holders, _) = inspect_lock(&observer, lock).await;
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].agent.as_str(), holders[0].token),
        ("holder", first_token)
    );

    within(10, "the holder releases", first.release())
        .await
        .expect("the holder releases");
    within(30, "all five waiters are served", async {
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a waiter task panicked");
        }
    })
    .await;

    let grants = grants
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let order: Vec<&str> = grants.iter().map(|(agent, _)| agent.as_str()).collect();
    assert_eq!(order, queued, "waiters are granted in arrival order");
    let mut last = first_token;
    for (agent, token) in &grants {
        assert!(
            *token > last,
            "{agent}'s token {token} is not above the previous grant's {last}: {grants:?}"
        );
        last = *token;
    }
    let (holders, waiters) = inspect_lock(&observer, lock).await;
    assert!(
        holders.is_empty() && waiters.is_empty(),
        "{holders:?} {waiters:?}"
    );
}

/// A raw MQTT client of the wire protocol, without the SDK: publishes any bytes on any topic
/// and reads its agent's response topic. Re-subscribes after every reconnect.
pub struct Raw {
    client: AsyncClient,
    agent: String,
    responses: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Counts SubAcks: a new value means (re)subscribed.
    subscribed: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Raw {
    /// Connects as MQTT client `{agent}` (the agent endpoint takes the client id as the agent
    /// id) and subscribes to `{PREFIX}/rsp/{agent}`.
    pub async fn connect(port: u16, agent: &str) -> Raw {
        let mut options = MqttOptions::new(agent, "127.0.0.1", port);
        options.set_keep_alive(Duration::from_secs(5));
        options.set_clean_session(true);
        options.set_max_packet_size(64 * 1024, 64 * 1024);
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        let mut network = NetworkOptions::new();
        network.set_tcp_nodelay(true);
        network.set_connection_timeout(2);
        eventloop.set_network_options(network);
        let (responses_tx, responses) = mpsc::unbounded_channel();
        let (subscribed_tx, subscribed) = watch::channel(0u64);
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
                        }
                    }
                    Ok(_) => {}
                    // Broker down (a node restart): keep polling, which reconnects.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        let mut raw = Raw {
            client,
            agent: agent.to_string(),
            responses,
            subscribed,
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

    /// Waits until this client subscribed again after its connection dropped (a node
    /// restart). A request sent before that races its own response, which is dropped if it
    /// comes before the subscription (PROTOCOL.md §2, "Subscribe first"); fails the test after
    /// `secs`.
    pub async fn resubscribed(&mut self, secs: u64) {
        within(
            secs,
            &format!("raw client {} subscribed again", self.agent),
            self.subscribed.changed(),
        )
        .await
        .expect("the raw client's task is running");
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

/// The error code of a response, `None` for a success.
pub fn code(response: &Value) -> Option<&str> {
    response["error"]["code"].as_str()
}

/// GET /metrics (at most 5 s; `None` if the node does not answer).
pub async fn metrics_text(port: u16) -> Option<String> {
    hivekeeper::loopback::metrics_text(port, Duration::from_secs(5)).await
}

/// The value of an unlabelled counter or gauge in Prometheus text, `None` if absent.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !rest.starts_with(' ') {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Polls /metrics until `name` is present and satisfies `want`; returns its value.
pub async fn wait_metric(port: u16, name: &str, secs: u64, want: impl Fn(f64) -> bool) -> f64 {
    let want = &want;
    eventually(secs, &format!("metric {name}"), move || async move {
        let text = metrics_text(port).await?;
        metric(&text, name).filter(|value| want(*value))
    })
    .await
}

/// Polls /metrics until the sum of `name`'s series (all labels; 0 while none exists yet, as a
/// counter that has not moved is absent) satisfies `want`; returns it.
pub async fn wait_metric_sum(port: u16, name: &str, secs: u64, want: impl Fn(f64) -> bool) -> f64 {
    let want = &want;
    eventually(secs, &format!("metric {name}"), move || async move {
        let text = metrics_text(port).await?;
        Some(metric_sum(&text, name, &[])).filter(|value| want(*value))
    })
    .await
}

/// Releases `guard` within 10 s, failing the test otherwise.
pub async fn release(guard: Guard, what: &str) {
    within(10, what, guard.release())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The sum of every series of `name` in Prometheus text whose labels include all of `labels`
/// (`name{a="x",b="y"} 3` matches `[("a", "x")]`); 0 when none does, as a counter that has
/// not moved yet is absent.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (series_labels, value) = match rest.strip_prefix('{') {
                Some(labelled) => {
                    let (inside, value) = labelled.split_once('}')?;
                    (inside, value)
                }
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            let has_all = labels.iter().all(|(key, want)| {
                series_labels
                    .split(',')
                    .any(|pair| pair == format!("{key}=\"{want}\""))
            });
            if !has_all {
                return None;
            }
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}

/// What one run of the `hivekeeper` binary printed.
pub struct CliRun {
    /// Whether it exited 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl CliRun {
    /// The standard output as JSON (for `--json`); fails the test with both streams otherwise.
    pub fn json(&self) -> Value {
        assert!(self.success, "the command failed:\n{}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "--json printed something that is not JSON ({e}):\n{}",
                self.stdout
            )
        })
    }
}

/// Runs `hivekeeper ARGS` (an admin subcommand) to completion, at most 30 s.
pub async fn run_cli(args: &[&str]) -> CliRun {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let what = format!("hivekeeper {}", args.join(" "));
    let output = within(
        30,
        &what,
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_hivekeeper"))
                .args(&args)
                .stdin(Stdio::null())
                .output()
        }),
    )
    .await
    .expect("the blocking task ran")
    .unwrap_or_else(|e| panic!("{what}: could not run: {e}"));
    CliRun {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
