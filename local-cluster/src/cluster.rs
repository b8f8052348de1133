//! A cluster of real `hivekeeper serve` child processes on this machine, for `hivekeeper bench
//! failover` and `hivekeeper-nemesis`: start, find the leader, kill, pause, restart, and (in
//! network namespaces) cut links, move a member's wall clock and fill its disk. The members
//! run the `hivekeeper` binary the caller names: the bench is that binary itself, the nemesis
//! finds it beside its own.
//!
//! ```text
//!  loopback (default)                 netns (root only: the nemesis with partitions)
//!  ┌──────────────────────────┐       root ns: bridge hkb<pid> 10.a.b.1/24, the clients
//!  │ n1 127.0.0.1:p1,p2,p3    │        ├─ veth ─ ns hk<pid>n1: n1 on 10.a.b.11 (7000, 1883, 9464)
//!  │ n2 127.0.0.1:p4,p5,p6 …  │        ├─ veth ─ ns hk<pid>n2: n2 on 10.a.b.12
//!  └──────────────────────────┘        └─ veth ─ ns hk<pid>n3: n3 on 10.a.b.13
//!                                     a cut n1 ✕ n2 = iptables DROP both ways in n1's namespace
//! ```
//!
//! With `faketime`, each member runs under Debian's libfaketime with its own offset file: the
//! member's whole process sees `CLOCK_REALTIME` moved (its monotonic clock is left alone, as a
//! real NTP step leaves it), and writing the file moves it again at once.
//!
//! With `tmpfs_mib`, each member's data dir is a tmpfs of its own (root only), so one member's
//! disk can be filled ([`Cluster::fill_disk`]) without touching anything else.
//!
//! Everything started here is stopped when the [`Cluster`] drops: the processes, the
//! namespaces, the bridge, the mounts and the directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::netns::Network;

/// The libfaketime build for multi-threaded programs, from Debian's `faketime` package.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// How the cluster is laid out.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Number of members (n1 … nN).
    pub size: usize,
    /// Each member in a network namespace of its own (root only), so links can be cut.
    pub netns: bool,
    /// Each member under libfaketime, its wall clock movable with [`Cluster::set_clock_offset`].
    pub faketime: bool,
    /// Each member's data dir on a tmpfs of this many MiB (root only), so its disk can be filled.
    pub tmpfs_mib: Option<u64>,
    /// Extra `serve` flags for every member.
    pub extra_args: Vec<String>,
}

/// The fault a cluster was not started for, as [`Error::NotStartedFor`].
fn not_started_for(action: &'static str, requirement: &'static str) -> Error {
    Error::NotStartedFor {
        action,
        requirement,
    }
}

/// One member: its child process and how to start it again.
pub struct Member {
    /// `n1`, `n2`, …
    pub name: String,
    /// The agent endpoint, as the clients dial it.
    pub mqtt: SocketAddr,
    /// The metrics endpoint.
    pub metrics: SocketAddr,
    /// The member's IP in netns mode, for cutting links.
    ip: Option<String>,
    /// The namespace it runs in (netns mode).
    namespace: Option<String>,
    /// The `hivekeeper` binary it runs.
    binary: PathBuf,
    /// Its `serve` command line, the same at every start.
    args: Vec<String>,
    /// Its stdout and stderr, appended to at every start.
    log: PathBuf,
    /// Its data dir (inside its tmpfs when it has one).
    data: PathBuf,
    /// The libfaketime offset file of its wall clock, when under libfaketime.
    faketime_file: Option<PathBuf>,
    /// The running process; `None` once killed or exited.
    child: Option<Child>,
    /// Stopped with SIGSTOP and not yet continued.
    paused: bool,
}

impl Member {
    /// Starts (or starts again, on the same data dir) the member's process.
    pub fn spawn(&mut self) -> Result<(), Error> {
        let log_error = |source| Error::File {
            action: "opening",
            path: self.log.clone(),
            source,
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(log_error)?;
        let stderr = log.try_clone().map_err(log_error)?;
        let mut command = match &self.namespace {
            Some(namespace) => {
                // `ip netns exec` execs the program: the child's pid is the member's own.
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        command.args(&self.args).env("NO_COLOR", "1");
        if let Some(file) = &self.faketime_file {
            command
                .env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|source| Error::StartMember {
                member: self.name.clone(),
                binary: self.binary.clone(),
                source,
            })?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// The exit status if the process ended on its own (a full disk, a fatal error).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status)
            }
            _ => None,
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) with kill(1): the workspace forbids `unsafe`.
    pub fn signal(&mut self, signal: &str) -> Result<(), Error> {
        let child = self.child.as_ref().ok_or_else(|| Error::NotRunning {
            member: self.name.clone(),
        })?;
        send_signal(child.id(), signal)?;
        match signal {
            "STOP" => self.paused = true,
            "CONT" => self.paused = false,
            _ => {}
        }
        Ok(())
    }

    /// SIGKILL, and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// The process id while it runs (the bench reads its memory from /proc/<pid>/status).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The member's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }
}

/// Sends a signal by name to a process with kill(1): the workspace forbids `unsafe`, and this
/// is the one place the bench and the nemesis do it.
pub fn send_signal(pid: u32, signal: &str) -> Result<(), Error> {
    run("kill", &[&format!("-{signal}"), &pid.to_string()], "", "")
}

/// Runs `program` with `args` to its end; an error names the command and what it printed,
/// and adds `spawn_hint` (the program would not start) or `failure_hint` (it failed).
pub(crate) fn run(
    program: &str,
    args: &[&str],
    spawn_hint: &'static str,
    failure_hint: &'static str,
) -> Result<(), Error> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: program.to_string(),
            hint: spawn_hint,
            source,
        })?;
    if !output.status.success() {
        return Err(Error::CommandFailed {
            command: format!("{program} {}", args.join(" ")),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            hint: failure_hint,
        });
    }
    Ok(())
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The cluster: members, their data under a directory of the run's own.
pub struct Cluster {
    /// The members, n1 first.
    pub members: Vec<Member>,
    root: PathBuf,
    network: Option<Network>,
    mounts: Vec<PathBuf>,
    keep_files: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if member.paused {
                let _ = member.signal("CONT");
            }
            member.kill();
        }
        for mount in &self.mounts {
            let _ = Command::new("umount").arg(mount).status();
        }
        // The namespaces go with the network (its own Drop); then the files.
        self.network.take();
        if self.keep_files {
            return;
        }
        if let Err(error) = std::fs::remove_dir_all(&self.root) {
            eprintln!(
                "hivekeeper: could not remove {}: {error}",
                self.root.display()
            );
        }
    }
}

impl Cluster {
    /// Starts `options.size` members of the `hivekeeper` binary at `binary` under `root`
    /// (created; removed on drop) and waits for a leader.
    pub async fn start(binary: &Path, root: PathBuf, options: &Options) -> Result<Cluster, Error> {
        let size = options.size;
        if size == 0 {
            return Err(Error::NoMembers);
        }
        create_dir(&root)?;
        let mut cluster = Cluster {
            members: Vec::new(),
            root,
            network: None,
            mounts: Vec::new(),
            keep_files: false,
        };
        let addresses = cluster.assign_addresses(options)?;
        let list = addresses
            .iter()
            .enumerate()
            .map(|(i, (ip, peer, _, _))| format!("n{}={ip}:{peer}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        for (i, (ip, _, mqtt_port, metrics_port)) in addresses.into_iter().enumerate() {
            let name = format!("n{}", i + 1);
            let data = cluster.data_dir(&name, options.tmpfs_mib)?;
            let faketime_file = if options.faketime {
                let file = cluster.root.join(format!("{name}.faketime"));
                write_file(&file, "+0\n")?;
                Some(file)
            } else {
                None
            };
            let mut args = vec![
                "serve".to_string(),
                "--name".into(),
                name.clone(),
                "--initial-cluster".into(),
                list.clone(),
                "--data-dir".into(),
                data.display().to_string(),
                "--mqtt-listen".into(),
                format!("{ip}:{mqtt_port}"),
                "--metrics-listen".into(),
                format!("{ip}:{metrics_port}"),
            ];
            if options.netns {
                // Not loopback: `serve` asks for the explicit waiver (the namespaces are the
                // run's own, reachable only from this machine).
                args.push("--insecure".into());
            }
            args.extend(options.extra_args.iter().cloned());
            let ip_address: std::net::IpAddr =
                ip.parse().expect("an IPv4 address written by this module");
            let mut member = Member {
                log: cluster.root.join(format!("{name}.log")),
                mqtt: SocketAddr::new(ip_address, mqtt_port),
                metrics: SocketAddr::new(ip_address, metrics_port),
                namespace: cluster.network.as_ref().map(|network| network.namespace(i)),
                ip: options.netns.then_some(ip.clone()),
                binary: binary.to_path_buf(),
                name,
                args,
                data,
                faketime_file,
                child: None,
                paused: false,
            };
            member.spawn()?;
            cluster.members.push(member);
        }
        cluster.leader(Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    /// Each member's addresses, (ip, peer port, MQTT port, metrics port): the fixed ports on
    /// an address of its own in a network namespace of its own (creating the namespaces), or
    /// free loopback ports.
    fn assign_addresses(
        &mut self,
        options: &Options,
    ) -> Result<Vec<(String, u16, u16, u16)>, Error> {
        let size = options.size;
        let mut addresses = Vec::new();
        if options.netns {
            let network = Network::create(size)?;
            for i in 0..size {
                addresses.push((network.ip(i), 7000, 1883, 9464));
            }
            self.network = Some(network);
        } else {
            let ports = hivekeeper_loopback::free_ports(3 * size).map_err(Error::Ports)?;
            for i in 0..size {
                let ip = "127.0.0.1".to_string();
                addresses.push((ip, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]));
            }
        }
        Ok(addresses)
    }

    /// Creates member `name`'s data dir under the root; with `tmpfs_mib`, on a tmpfs of its own
    /// of that size (so its disk can be filled without filling the machine's).
    fn data_dir(&mut self, name: &str, tmpfs_mib: Option<u64>) -> Result<PathBuf, Error> {
        let data = self.root.join(name);
        create_dir(&data)?;
        let Some(mib) = tmpfs_mib else {
            return Ok(data);
        };
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m"),
                "tmpfs",
                &data.display().to_string(),
            ],
            "",
            ": a member's own disk needs root",
        )?;
        self.mounts.push(data.clone());
        Ok(data.join("data"))
    }

    /// Keeps the members' data and logs when the cluster drops; returns where they are.
    pub fn keep_files(&mut self) -> &Path {
        self.keep_files = true;
        &self.root
    }

    /// Every member's agent endpoint, `host:port`, n1 first.
    pub fn brokers(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|member| member.mqtt.to_string())
            .collect()
    }

    /// The member that leads: of the running, unpaused members whose /metrics say they lead,
    /// the one with the highest term (a leader cut off from the others keeps saying so).
    pub async fn leader(&self, within: Duration) -> Result<usize, Error> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader_now().await {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                return Err(Error::NoLeader {
                    within_s: within.as_secs(),
                    logs: self.root.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One look at every member's /metrics: the leader with the highest term, if any.
    pub async fn leader_now(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (index, member) in self.members.iter().enumerate() {
            if member.child.is_none() || member.paused {
                continue;
            }
            let Some(text) = scrape(member.metrics).await else {
                continue;
            };
            if gauge(&text, "hivekeeper_raft_is_leader") != Some(1) {
                continue;
            }
            let term = gauge(&text, "hivekeeper_raft_term").unwrap_or(0);
            if best.is_none_or(|(best_term, _)| term > best_term) {
                best = Some((term, index));
            }
        }
        best.map(|(_, index)| index)
    }

    /// Waits until member `index` serves /metrics again after a restart (used by the bench).
    pub async fn wait_up(&self, index: usize, within: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + within;
        while scrape(self.members[index].metrics).await.is_none() {
            if Instant::now() > deadline {
                return Err(Error::NotBack {
                    member: self.members[index].name.clone(),
                    within_s: within.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Cuts the links between every member of `a` and every member of `b`, both ways (packets
    /// dropped silently, as a real partition does). Needs netns mode.
    pub fn cut(&self, a: &[usize], b: &[usize]) -> Result<(), Error> {
        let network = self.network.as_ref().ok_or_else(|| {
            not_started_for(
                "cutting links",
                "the members in network namespaces (netns mode)",
            )
        })?;
        for &x in a {
            for &y in b {
                network.cut(x, self.ip(y)?)?;
                network.cut(y, self.ip(x)?)?;
            }
        }
        Ok(())
    }

    /// Heals every cut link.
    pub fn heal(&self) -> Result<(), Error> {
        if let Some(network) = &self.network {
            for i in 0..self.members.len() {
                network.heal(i)?;
            }
        }
        Ok(())
    }

    fn ip(&self, index: usize) -> Result<&str, Error> {
        self.members[index].ip.as_deref().ok_or_else(|| {
            not_started_for(
                "cutting links",
                "each member with an address of its own (netns mode)",
            )
        })
    }

    /// Moves member `index`'s wall clock to real time + `offset_s` (negative: behind), at once.
    /// Needs `faketime`.
    pub fn set_clock_offset(&self, index: usize, offset_s: i64) -> Result<(), Error> {
        let file = self.members[index].faketime_file.as_ref().ok_or_else(|| {
            not_started_for("moving a member's clock", "the members under libfaketime")
        })?;
        write_file(file, &format!("{offset_s:+}\n"))
    }

    /// Fills member `index`'s disk (its tmpfs) with a filler file until the file system
    /// refuses; returns the bytes written. Needs `tmpfs_mib`.
    pub fn fill_disk(&self, index: usize) -> Result<u64, Error> {
        use std::io::Write as _;
        if self.mounts.is_empty() {
            return Err(not_started_for(
                "filling a member's disk",
                "each member on a tmpfs of its own",
            ));
        }
        let path = self.filler(index);
        let mut file = std::fs::File::create(&path).map_err(|source| Error::File {
            action: "creating",
            path: path.clone(),
            source,
        })?;
        let chunk = vec![0u8; 1 << 20];
        let mut written = 0u64;
        // Bounded by the tmpfs size: at most that many chunks can succeed.
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(_) => break,
            }
        }
        // The last partial page: byte by byte is too slow, so small writes until refused.
        let small = [0u8; 4096];
        while let Ok(n) = file.write(&small) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        Ok(written)
    }

    /// Removes the filler of [`Cluster::fill_disk`].
    pub fn free_disk(&self, index: usize) -> Result<(), Error> {
        let path = self.filler(index);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::File {
                action: "removing",
                path,
                source,
            }),
        }
    }

    fn filler(&self, index: usize) -> PathBuf {
        let data = &self.members[index].data;
        data.parent().unwrap_or(data).join("filler")
    }
}

/// Creates `dir` and its parents.
fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::File {
        action: "creating",
        path: dir.to_path_buf(),
        source,
    })
}

/// Writes `text` to `file`, replacing what it held.
fn write_file(file: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(file, text).map_err(|source| Error::File {
        action: "writing",
        path: file.to_path_buf(),
        source,
    })
}

/// GET /metrics, at most 1 s; `None` when the member does not answer.
pub async fn scrape(addr: SocketAddr) -> Option<String> {
    hivekeeper_loopback::metrics_text_at(addr, Duration::from_secs(1)).await
}

/// An unlabelled gauge's value from Prometheus text.
pub fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse::<f64>().ok().map(|value| value as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_are_read_by_exact_name() {
        let text =
            "hivekeeper_raft_term_x 9\nhivekeeper_raft_term 4\nhivekeeper_raft_is_leader 1\n";
        assert_eq!(gauge(text, "hivekeeper_raft_term"), Some(4));
        assert_eq!(gauge(text, "hivekeeper_raft_is_leader"), Some(1));
        assert_eq!(gauge(text, "hivekeeper_raft_missing"), None);
    }

    #[tokio::test]
    async fn a_missing_binary_is_named_and_the_cluster_directory_removed() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        let root = parent.path().join("cluster");
        let options = Options {
            size: 1,
            ..Options::default()
        };
        let error = Cluster::start(Path::new("/nonexistent/hivekeeper"), root.clone(), &options)
            .await
            .err()
            .expect("no binary, no cluster");
        assert_eq!(
            error.to_string(),
            "starting member n1 (/nonexistent/hivekeeper)"
        );
        assert!(!root.exists(), "{} left behind", root.display());
    }

    #[tokio::test]
    async fn a_cluster_of_no_members_is_refused() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        let error = Cluster::start(
            Path::new("hivekeeper"),
            parent.path().join("cluster"),
            &Options::default(),
        )
        .await
        .err()
        .expect("refused");
        assert_eq!(error.to_string(), "a cluster needs at least one member");
    }
}
