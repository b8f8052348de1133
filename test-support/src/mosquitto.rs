//! A mosquitto broker process for the external-broker tests, with a generated config.
//!
//! A missing binary fails the test, saying what to install (never a silent skip): these tests
//! are the only proof that the external-broker mode works.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::ports::free_port;

/// How long mosquitto may take to accept TCP connections (a busy 2-core machine).
const START_WAIT: Duration = Duration::from_secs(15);

/// How often a start on a port that turned out to be taken is retried with another port.
const START_ATTEMPTS: usize = 5;

/// A mosquitto process on 127.0.0.1, killed (SIGKILL) when dropped, also while a test panics
/// (then its log is printed).
pub struct Mosquitto {
    child: Child,
    /// The port it listens on (127.0.0.1 only).
    pub port: u16,
    /// Holds `mosquitto.conf` and `mosquitto.log`; removed on drop.
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// The mosquitto binary: where Debian and Ubuntu install it, or on `PATH`. Fails the test
    /// when it is missing.
    pub fn binary() -> PathBuf {
        installed("mosquitto")
    }

    /// Starts mosquitto on a free port and waits until it accepts TCP connections. On a port
    /// taken meanwhile it tries another, a bounded number of times.
    pub async fn start() -> Mosquitto {
        Mosquitto::start_picking(&Access::Anonymous).await
    }

    /// Starts mosquitto hardened as docs/SECURITY.md says: `deploy/mosquitto/hivekeeper.conf`
    /// and `hivekeeper.acl` from this repository (so the tests check what the docs give), with
    /// a password file holding `users` (name, password).
    pub async fn start_secured(users: &[(&str, &str)]) -> Mosquitto {
        let users = users
            .iter()
            .map(|(name, password)| (name.to_string(), password.to_string()))
            .collect();
        Mosquitto::start_picking(&Access::Secured(users)).await
    }

    async fn start_picking(access: &Access) -> Mosquitto {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Mosquitto::try_start(free_port(), access).await {
                Ok(broker) => return broker,
                Err(log) if log.contains("Address already in use") => last = log,
                Err(log) => panic!("mosquitto did not start:\n{log}"),
            }
        }
        panic!("mosquitto found its port taken {START_ATTEMPTS} times:\n{last}");
    }

    /// Starts mosquitto on 127.0.0.1:`port` (a broker coming back on the port of one that was
    /// killed) and waits until it accepts TCP connections; fails the test otherwise.
    pub async fn start_on(port: u16) -> Mosquitto {
        Mosquitto::try_start(port, &Access::Anonymous)
            .await
            .unwrap_or_else(|log| panic!("mosquitto did not start:\n{log}"))
    }

    /// One start on `port`: the broker once it accepts connections, or why not, with its log.
    async fn try_start(port: u16, access: &Access) -> Result<Mosquitto, String> {
        let dir = tempfile::tempdir().expect("a temp dir for mosquitto");
        let config_path = dir.path().join("mosquitto.conf");
        let access_settings = match access {
            Access::Anonymous => "allow_anonymous true\nset_tcp_nodelay true\n".to_string(),
            Access::Secured(users) => secured_settings(dir.path(), users),
        };
        std::fs::write(
            &config_path,
            format!(
                "listener {port} 127.0.0.1\n\
                 {access_settings}\n\
                 persistence false\n\
                 log_dest stderr\n\
                 log_type error\n\
                 log_type warning\n\
                 log_type notice\n"
            ),
        )
        .expect("write mosquitto.conf");
        let log = std::fs::File::create(dir.path().join("mosquitto.log")).expect("mosquitto.log");
        let child = Command::new(Mosquitto::binary())
            .arg("-c")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second handle on mosquitto.log"))
            .stderr(log)
            .spawn()
            .expect("spawn mosquitto");
        let mut broker = Mosquitto { child, port, dir };
        let deadline = Instant::now() + START_WAIT;
        loop {
            if let Ok(Some(status)) = broker.child.try_wait() {
                return Err(format!("exited with {status}:\n{}", broker.log()));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(broker);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "not listening on {port} within {START_WAIT:?}:\n{}",
                    broker.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What mosquitto has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// Kills the process and waits for it (SIGKILL: like a crash, no clean goodbye).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Who may connect to a test broker.
enum Access {
    /// Anyone, anywhere (the plain external-broker tests).
    Anonymous,
    /// The repository's hardened settings with these users (name, password).
    Secured(Vec<(String, String)>),
}

/// The repository's hardened settings (`deploy/mosquitto/`), pointed at `dir`: the ACL file
/// copied there and a password file for `users` made there with `mosquitto_passwd`.
fn secured_settings(dir: &Path, users: &[(String, String)]) -> String {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/mosquitto");
    let read = |name: &str| {
        std::fs::read_to_string(deploy.join(name))
            .unwrap_or_else(|e| panic!("read deploy/mosquitto/{name}: {e}"))
    };
    std::fs::write(dir.join("hivekeeper.acl"), read("hivekeeper.acl")).expect("write the ACL file");
    let passwords = dir.join("hivekeeper.passwd");
    for (n, (name, password)) in users.iter().enumerate() {
        // -c creates the file with the first user; -b takes the password from the arguments.
        let mut command = Command::new(installed("mosquitto_passwd"));
        if n == 0 {
            command.arg("-c");
        }
        let status = command
            .arg("-b")
            .arg(&passwords)
            .arg(name)
            .arg(password)
            .stdout(Stdio::null())
            .status()
            .expect("run mosquitto_passwd");
        assert!(status.success(), "mosquitto_passwd for {name}: {status}");
    }
    let dir = format!("{}/", dir.display());
    read("hivekeeper.conf").replace("/etc/mosquitto/", &dir)
}

/// A program of Debian's mosquitto package (`mosquitto`, `mosquitto_passwd`). Fails the test
/// when it is missing.
fn installed(name: &str) -> PathBuf {
    crate::binary::installed(
        name,
        "the external-broker tests need it; install it with `apt-get install mosquitto`",
    )
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        // Killed first: printing can panic (stderr a closed pipe), and a panic in a drop while
        // unwinding aborts the process, which would leave the broker running.
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let _ = std::panic::catch_unwind(|| eprintln!("--- mosquitto log ---\n{log}"));
        }
    }
}
