//! A real `hivekeeper serve` process on free loopback ports, killed when its guard drops.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use super::{Log, free_ports};

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
    /// The `hivekeeper` binary it runs: this build's, or another's ([`Node::set_program`]).
    program: PathBuf,
}

/// This build's `hivekeeper` binary.
pub fn this_build() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hivekeeper"))
}

/// Why a start failed.
enum StartError {
    /// A port was taken between [`free_ports`] and the node's bind: try other ports.
    PortInUse(String),
    /// Anything else: the test fails.
    Failed(String),
}

/// How often a start on ports that turned out to be taken is retried.
const START_ATTEMPTS: usize = 5;

impl Node {
    /// A node with an embedded broker on free ports.
    pub async fn start(data_dir: &Path) -> Node {
        Node::start_picking(data_dir, Mqtt::Embedded, &[]).await
    }

    /// A node with an embedded broker on free ports and more `serve` arguments.
    pub async fn start_with_args(data_dir: &Path, extra_args: &[&str]) -> Node {
        Node::start_picking(data_dir, Mqtt::Embedded, extra_args).await
    }

    /// A node whose agent endpoint speaks mutual TLS with the files `hivekeeper certs dev`
    /// wrote to `certs` (`server.crt`, `server.key`, `ca.crt`), and more `serve` arguments.
    pub async fn start_mutual_tls(data_dir: &Path, certs: &Path, extra_args: &[&str]) -> Node {
        let file = |name: &str| certs.join(name).display().to_string();
        let (cert, key, ca) = (file("server.crt"), file("server.key"), file("ca.crt"));
        let mut args = vec![
            "--mqtt-tls-cert",
            cert.as_str(),
            "--mqtt-tls-key",
            key.as_str(),
            "--mqtt-client-ca",
            ca.as_str(),
        ];
        args.extend_from_slice(extra_args);
        Node::start_with_args(data_dir, &args).await
    }

    /// [`Node::start_with_args`] running the `hivekeeper` binary at `program` (another
    /// build's, e.g. an older release for an upgrade test).
    pub async fn start_program(program: &Path, data_dir: &Path, extra_args: &[&str]) -> Node {
        Node::start_picking_program(program, data_dir, Mqtt::Embedded, extra_args).await
    }

    /// Runs the `hivekeeper` binary at `program` from the next start on (a restart on the same
    /// data and ports upgrades the node to it).
    pub fn set_program(&mut self, program: &Path) {
        self.program = program.to_path_buf();
    }

    /// A node using the external broker on `broker_port`, metrics on a free port.
    pub async fn start_external(data_dir: &Path, broker_port: u16) -> Node {
        Node::start_external_with_args(data_dir, broker_port, &[]).await
    }

    /// A node using the external broker on `broker_port`, with more `serve` arguments.
    pub async fn start_external_with_args(
        data_dir: &Path,
        broker_port: u16,
        extra_args: &[&str],
    ) -> Node {
        Node::start_picking(data_dir, |_| Mqtt::External(broker_port), extra_args).await
    }

    /// Starts a node on free ports: `mqtt` gets a free port for the MQTT side (an embedded
    /// broker's), the metrics port is the other one picked with it. A port picked by
    /// [`free_ports`] can be taken before the node binds it (by another test's node or an
    /// outgoing connection's ephemeral port): then it starts again on other ports, a bounded
    /// number of times.
    async fn start_picking(
        data_dir: &Path,
        mqtt: impl Fn(u16) -> Mqtt,
        extra_args: &[&str],
    ) -> Node {
        Node::start_picking_program(&this_build(), data_dir, mqtt, extra_args).await
    }

    /// [`Node::start_picking`] running the binary at `program`.
    async fn start_picking_program(
        program: &Path,
        data_dir: &Path,
        mqtt: impl Fn(u16) -> Mqtt,
        extra_args: &[&str],
    ) -> Node {
        let program = program.to_path_buf();
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(2);
            let mut node = Node {
                child: None,
                log: Log::default(),
                data_dir: data_dir.to_path_buf(),
                mqtt: mqtt(ports[0]),
                metrics_port: ports[1],
                ready_at: Instant::now(),
                extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
                program: program.clone(),
            };
            match node.spawn().await {
                Ok(()) => return node,
                Err(StartError::PortInUse(log)) => last = log,
                Err(StartError::Failed(why)) => panic!("{why}"),
            }
        }
        panic!("hivekeeper serve found its ports taken {START_ATTEMPTS} times:\n{last}");
    }

    /// A node with its agent endpoint on `127.0.0.1:mqtt_port` and /metrics on
    /// `127.0.0.1:metrics_port`, for a test that needs those exact ports (the documented
    /// defaults): unlike [`Node::start`] it never moves to other ports, and a port taken by
    /// something else fails the test saying so.
    pub async fn start_on(data_dir: &Path, mqtt_port: u16, metrics_port: u16) -> Node {
        let mut node = Node {
            child: None,
            log: Log::default(),
            data_dir: data_dir.to_path_buf(),
            mqtt: Mqtt::Embedded(mqtt_port),
            metrics_port,
            ready_at: Instant::now(),
            extra_args: Vec::new(),
            program: this_build(),
        };
        match node.spawn().await {
            Ok(()) => node,
            Err(StartError::PortInUse(log)) => panic!(
                "hivekeeper serve could not listen on 127.0.0.1:{mqtt_port} or \
                 127.0.0.1:{metrics_port}: something else listens there; stop it and run \
                 again:\n{log}"
            ),
            Err(StartError::Failed(why)) => panic!("{why}"),
        }
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
        let mut command = Command::new(&self.program);
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
                // The OS's words ("Address already in use") or the endpoint's own ("cannot
                // listen on ...: address already in use").
                return Err(if log.to_lowercase().contains("address already in use") {
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

    /// The running node's process id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(std::process::Child::id)
            .expect("the node is running")
    }

    /// Sends `signal` (a name kill(1) takes, e.g. `STOP`, `CONT`) to the running process.
    pub fn signal(&self, signal: &str) {
        let Some(child) = self.child.as_ref() else {
            panic!("SIG{signal}: the node is not running");
        };
        let pid = child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill(1) runs");
        assert!(sent.success(), "SIG{signal} to {pid} failed");
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
