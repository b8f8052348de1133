//! A cluster of real `hivekeeper serve` child processes on this machine, for `bench failover`
//! and `nemesis`: start, find the leader, kill, pause, restart, and (in network namespaces)
//! cut links, move a member's wall clock and fill its disk.
//!
//! ```text
//!  loopback (default)                 netns (root only: `nemesis` with partitions)
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

mod netns;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

use netns::Network;

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
    args: Vec<String>,
    log: PathBuf,
    data: PathBuf,
    faketime_file: Option<PathBuf>,
    child: Option<Child>,
    paused: bool,
}

impl Member {
    /// Starts (or starts again, on the same data dir) the member's process.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let exe = std::env::current_exe().context("finding the hivekeeper binary")?;
        let mut command = match &self.namespace {
            Some(namespace) => {
                // `ip netns exec` execs the program: the child's pid is the member's own.
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(exe);
                command
            }
            None => Command::new(exe),
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
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting member {}", self.name))?;
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
    pub fn signal(&mut self, signal: &str) -> anyhow::Result<()> {
        let child = self
            .child
            .as_ref()
            .with_context(|| format!("member {} is not running", self.name))?;
        send_signal(child.id(), signal).with_context(|| format!("member {}", self.name))?;
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

    /// The member's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }
}

/// Sends a signal by name to a process with kill(1): the workspace forbids `unsafe`, and this
/// is the one place the bench and the nemesis do it.
pub fn send_signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .context("running kill(1)")?;
    anyhow::ensure!(status.success(), "SIG{signal} to pid {pid}: {status}");
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
    /// Starts `options.size` members under `root` (created; removed on drop) and waits for a
    /// leader.
    pub async fn start(root: PathBuf, options: &Options) -> anyhow::Result<Cluster> {
        let size = options.size;
        anyhow::ensure!(size >= 1, "a cluster needs at least one member");
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        let mut cluster = Cluster {
            members: Vec::new(),
            root,
            network: None,
            mounts: Vec::new(),
            keep_files: false,
        };
        // Per member: (ip, peer, mqtt, metrics).
        let mut addresses = Vec::new();
        if options.netns {
            let network = Network::create(size)?;
            for i in 0..size {
                addresses.push((network.ip(i), 7000, 1883, 9464));
            }
            cluster.network = Some(network);
        } else {
            let ports = hivekeeper_loopback::free_ports(3 * size)?;
            for i in 0..size {
                let ip = "127.0.0.1".to_string();
                addresses.push((ip, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]));
            }
        }
        let list = addresses
            .iter()
            .enumerate()
            .map(|(i, (ip, peer, _, _))| format!("n{}={ip}:{peer}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        for (i, (ip, _, mqtt_port, metrics_port)) in addresses.into_iter().enumerate() {
            let name = format!("n{}", i + 1);
            let mut data = cluster.root.join(&name);
            std::fs::create_dir_all(&data)
                .with_context(|| format!("creating {}", data.display()))?;
            if let Some(mib) = options.tmpfs_mib {
                let status = Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                    .arg(&data)
                    .status()
                    .context("running mount(8)")?;
                anyhow::ensure!(
                    status.success(),
                    "mounting a tmpfs on {} failed ({status}): a member's own disk needs root",
                    data.display()
                );
                cluster.mounts.push(data.clone());
                data = data.join("data");
            }
            let faketime_file = if options.faketime {
                let file = cluster.root.join(format!("{name}.faketime"));
                std::fs::write(&file, "+0\n")
                    .with_context(|| format!("writing {}", file.display()))?;
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
            let parse = |port: u16| -> anyhow::Result<SocketAddr> {
                format!("{ip}:{port}")
                    .parse()
                    .with_context(|| format!("address {ip}:{port}"))
            };
            let mut member = Member {
                log: cluster.root.join(format!("{name}.log")),
                mqtt: parse(mqtt_port)?,
                metrics: parse(metrics_port)?,
                namespace: cluster.network.as_ref().map(|network| network.namespace(i)),
                ip: options.netns.then_some(ip.clone()),
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
    pub async fn leader(&self, within: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader_now().await {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!(
                    "no leader among the members within {} s (logs in {})",
                    within.as_secs(),
                    self.root.display()
                );
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
    pub async fn wait_up(&self, index: usize, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while scrape(self.members[index].metrics).await.is_none() {
            if Instant::now() > deadline {
                bail!("member {} did not come back", self.members[index].name);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Cuts the links between every member of `a` and every member of `b`, both ways (packets
    /// dropped silently, as a real partition does). Needs netns mode.
    pub fn cut(&self, a: &[usize], b: &[usize]) -> anyhow::Result<()> {
        let network = self
            .network
            .as_ref()
            .context("cutting links needs the members in network namespaces (netns mode)")?;
        for &x in a {
            for &y in b {
                network.cut(x, self.ip(y)?)?;
                network.cut(y, self.ip(x)?)?;
            }
        }
        Ok(())
    }

    /// Heals every cut link.
    pub fn heal(&self) -> anyhow::Result<()> {
        if let Some(network) = &self.network {
            for i in 0..self.members.len() {
                network.heal(i)?;
            }
        }
        Ok(())
    }

    fn ip(&self, index: usize) -> anyhow::Result<&str> {
        self.members[index]
            .ip
            .as_deref()
            .context("the member has no address of its own (not in netns mode)")
    }

    /// Moves member `index`'s wall clock to real time + `offset_s` (negative: behind), at once.
    /// Needs `faketime`.
    pub fn set_clock_offset(&self, index: usize, offset_s: i64) -> anyhow::Result<()> {
        let file = self.members[index]
            .faketime_file
            .as_ref()
            .context("moving a member's clock needs the members under libfaketime")?;
        std::fs::write(file, format!("{offset_s:+}\n"))
            .with_context(|| format!("writing {}", file.display()))
    }

    /// Fills member `index`'s disk (its tmpfs) with a filler file until the file system
    /// refuses; returns the bytes written. Needs `tmpfs_mib`.
    pub fn fill_disk(&self, index: usize) -> anyhow::Result<u64> {
        use std::io::Write as _;
        anyhow::ensure!(
            !self.mounts.is_empty(),
            "filling a member's disk needs each member on a tmpfs of its own"
        );
        let path = self.filler(index);
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
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
    pub fn free_disk(&self, index: usize) -> anyhow::Result<()> {
        let path = self.filler(index);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error).with_context(|| format!("removing {}", path.display())),
        }
    }

    fn filler(&self, index: usize) -> PathBuf {
        let data = &self.members[index].data;
        data.parent().unwrap_or(data).join("filler")
    }
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
}
