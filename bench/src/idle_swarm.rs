//! The idle swarm of `scale`: agents that hold a lease the SDK keeps alive and do nothing
//! else, in this process or spread over child processes (`scale --processes N`), so that no
//! process needs more sockets than its `nofile` limit allows.
//!
//! ```text
//!  parent (scale --processes N)             child i (hidden `bench idle-swarm --part i`)
//!  spawn N children ───────────────────────▶ connect its share ─▶ stdout {"connected":..}
//!  wait for every "connected" line            watch its sessions
//!  measure the busy agents
//!  close each child's stdin ───────────────▶ stdout {"live":..,"lost":..,"rss_peak_mb":..}
//!  sum the children's figures                 exit
//! ```
//!
//! A child is this binary again (`std::env::current_exe`), given the brokers, the TTL, the
//! connect concurrency and the TLS CA of the parent's flags. A child that dies or never
//! reports fails the run: its agents' figures would otherwise go missing silently.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use clap::Args;
use hivekeeper_agent::{AgentConfig, DEFAULTS};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Common;
use super::memory::status_mb;
use super::report::Errors;
use super::swarm::{self, Member, RunId};

/// How the idle agents keep alive: their lease TTL and their MQTT keepalive.
#[derive(Debug, Clone, Args)]
pub struct IdleSettings {
    /// TTL of the idle agents' leases, ms (default: --session-ttl-ms). A long one keeps a large
    /// swarm's lease keepalives (one every third of it per agent) affordable.
    #[arg(long)]
    idle_ttl_ms: Option<u64>,
    /// MQTT keepalive of the idle agents, s: a PINGREQ when an agent sent nothing for this
    /// long, and the endpoint closes a connection silent for 1.5 times it. Tens of thousands
    /// of agents at the SDK's default (5 s) are thousands of pings a second.
    #[arg(long, default_value_t = DEFAULTS.mqtt_keepalive_s)]
    idle_mqtt_keepalive_s: u64,
}

impl IdleSettings {
    /// The idle agents' lease TTL, ms.
    pub fn ttl_ms(&self, common: &Common) -> u64 {
        self.idle_ttl_ms.unwrap_or(common.session_ttl_ms)
    }

    /// The idle agents' settings: the common ones with this MQTT keepalive.
    fn agent_base(&self, common: &Common) -> anyhow::Result<AgentConfig> {
        Ok(AgentConfig {
            mqtt_keepalive_s: self.idle_mqtt_keepalive_s,
            ..common.agent_base()?
        })
    }

    /// These settings as a child's flags.
    fn flags(&self, common: &Common) -> [String; 4] {
        [
            "--idle-ttl-ms".into(),
            self.ttl_ms(common).to_string(),
            "--idle-mqtt-keepalive-s".into(),
            self.idle_mqtt_keepalive_s.to_string(),
        ]
    }
}

/// The watch over idle sessions: did each leave `Live` before the end?
pub struct SessionWatch {
    end_tx: watch::Sender<bool>,
    watchers: JoinSet<bool>,
}

impl SessionWatch {
    /// Starts watching every session of `idle`.
    pub fn start(idle: &[Member]) -> SessionWatch {
        let (end_tx, end_rx) = watch::channel(false);
        let mut watchers = JoinSet::new();
        for member in idle {
            let session = member.session.clone();
            let mut end = end_rx.clone();
            watchers.spawn(async move {
                tokio::select! {
                    _ = session.lost() => false,
                    _ = end.wait_for(|ended| *ended) => session.state().is_live(),
                }
            });
        }
        SessionWatch { end_tx, watchers }
    }

    /// Ends the watch: (sessions that stayed live, sessions lost).
    pub async fn end(mut self) -> (u64, u64) {
        let _ = self.end_tx.send(true);
        let (mut live, mut lost) = (0, 0);
        while let Some(joined) = self.watchers.join_next().await {
            match joined {
                Ok(true) => live += 1,
                _ => lost += 1,
            }
        }
        (live, lost)
    }
}

/// What a child says once its share connected.
#[derive(Debug, Serialize, Deserialize)]
struct Connected {
    connected: u64,
    errors: Errors,
}

/// What a child says at the end.
#[derive(Debug, Serialize, Deserialize)]
struct Ended {
    live: u64,
    lost: u64,
    rss_peak_mb: Option<f64>,
}

/// The idle swarm's figures, from this process or summed over the children.
#[derive(Debug, Default)]
pub struct IdleFigures {
    pub live: u64,
    pub lost: u64,
    /// The largest peak resident memory of the processes holding idle agents, MB.
    pub rss_peak_mb: Option<f64>,
}

/// Body of the hidden `bench idle-swarm`: connects `count` idle agents (role `idle{part}`),
/// reports, holds them until stdin closes or gives a line, reports again.
pub async fn child(
    common: &Common,
    settings: &IdleSettings,
    count: usize,
    part: usize,
) -> anyhow::Result<()> {
    let run = RunId::new();
    let base = settings.agent_base(common)?;
    let ttl_ms = settings.ttl_ms(common);
    let role = format!("idle{part}");
    let (idle, errors) = swarm::connect(
        &base,
        &run,
        &role,
        count,
        ttl_ms,
        common.connect_concurrency,
    )
    .await;
    let idle: Vec<Member> = idle.into_iter().flatten().collect();
    let watch = SessionWatch::start(&idle);
    let connected = Connected {
        connected: idle.len() as u64,
        errors,
    };
    println!("{}", serde_json::to_string(&connected)?);
    let mut line = String::new();
    let _ = BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await;
    let (live, lost) = watch.end().await;
    let ended = Ended {
        live,
        lost,
        rss_peak_mb: status_mb(Path::new("/proc/self/status"), "VmHWM"),
    };
    println!("{}", serde_json::to_string(&ended)?);
    drop(idle);
    Ok(())
}

/// The children of `scale --processes N`, each holding a share of the idle agents.
pub struct Children {
    children: Vec<(Child, BufReader<ChildStdout>)>,
}

impl Children {
    /// Spawns `processes` children sharing `total` idle agents (the first ones take the
    /// remainder) and waits until each has connected its share. The connection errors and
    /// the count connected are returned with them.
    pub async fn spawn(
        common: &Common,
        settings: &IdleSettings,
        processes: usize,
        total: usize,
    ) -> anyhow::Result<(Children, u64, Errors)> {
        let exe = std::env::current_exe().context("finding the hivekeeper binary")?;
        let mut children = Vec::new();
        for part in 0..processes {
            let share = total / processes + usize::from(part < total % processes);
            let mut command = Command::new(&exe);
            command
                .args([
                    "bench",
                    "idle-swarm",
                    "--brokers",
                    &common.brokers.join(","),
                ])
                .args(["--idle-agents", &share.to_string()])
                .args(["--part", &part.to_string()])
                .args(settings.flags(common))
                .args([
                    "--connect-concurrency",
                    &common.connect_concurrency.to_string(),
                ]);
            if let Some(ca) = &common.tls.tls_ca {
                command.arg("--tls-ca").arg(ca);
            }
            let mut child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting idle-swarm child {part}"))?;
            let stdout = child.stdout.take().context("a child's stdout")?;
            children.push((child, BufReader::new(stdout)));
        }
        let mut children = Children { children };
        let (mut connected, mut errors) = (0, Errors::default());
        for part in 0..processes {
            let said: Connected = children.read_line(part).await?;
            connected += said.connected;
            errors.merge(said.errors);
        }
        Ok((children, connected, errors))
    }

    /// Reads the next JSON line of child `part`.
    async fn read_line<T: for<'de> Deserialize<'de>>(&mut self, part: usize) -> anyhow::Result<T> {
        let (_, stdout) = &mut self.children[part];
        let mut line = String::new();
        let read = stdout
            .read_line(&mut line)
            .await
            .with_context(|| format!("reading idle-swarm child {part}"))?;
        anyhow::ensure!(read > 0, "idle-swarm child {part} ended without a report");
        serde_json::from_str(&line)
            .with_context(|| format!("idle-swarm child {part} said {line:?}"))
    }

    /// Ends every child's watch and sums what they report.
    pub async fn end(mut self) -> anyhow::Result<IdleFigures> {
        let mut figures = IdleFigures::default();
        for (child, _) in &mut self.children {
            drop(child.stdin.take());
        }
        for part in 0..self.children.len() {
            let ended: Ended = self.read_line(part).await?;
            figures.live += ended.live;
            figures.lost += ended.lost;
            figures.rss_peak_mb = match (figures.rss_peak_mb, ended.rss_peak_mb) {
                (Some(seen), Some(peak)) => Some(seen.max(peak)),
                (seen, peak) => seen.or(peak),
            };
        }
        for (mut child, mut stdout) in self.children {
            let mut rest = Vec::new();
            let _ = stdout.read_to_end(&mut rest).await;
            let _ = child.wait().await;
        }
        Ok(figures)
    }
}

/// Connects the idle swarm in this process, or spread over `processes` children.
pub enum IdleSwarm {
    Here(Vec<Member>, SessionWatch),
    Children(Children),
}

impl IdleSwarm {
    /// Connects `count` idle agents as `settings` say: (the swarm, agents connected, seconds
    /// it took, errors).
    pub async fn connect(
        common: &Common,
        settings: &IdleSettings,
        run: &RunId,
        count: usize,
        processes: usize,
    ) -> anyhow::Result<(IdleSwarm, u64, f64, Errors)> {
        let started = Instant::now();
        if processes > 1 {
            let (children, connected, errors) =
                Children::spawn(common, settings, processes, count).await?;
            let took = started.elapsed().as_secs_f64();
            return Ok((IdleSwarm::Children(children), connected, took, errors));
        }
        let base = settings.agent_base(common)?;
        let ttl_ms = settings.ttl_ms(common);
        let (idle, errors) = swarm::connect(
            &base,
            run,
            "idle",
            count,
            ttl_ms,
            common.connect_concurrency,
        )
        .await;
        let idle: Vec<Member> = idle.into_iter().flatten().collect();
        let took = started.elapsed().as_secs_f64();
        let connected = idle.len() as u64;
        let watch = SessionWatch::start(&idle);
        Ok((IdleSwarm::Here(idle, watch), connected, took, errors))
    }

    /// Ends the watch: what stayed live and what was lost, and the memory of the processes
    /// that held the agents (`None` here: the bench's own peak is reported apart).
    pub async fn end(self) -> anyhow::Result<IdleFigures> {
        match self {
            IdleSwarm::Here(idle, watch) => {
                let (live, lost) = watch.end().await;
                drop(idle);
                Ok(IdleFigures {
                    live,
                    lost,
                    rss_peak_mb: None,
                })
            }
            IdleSwarm::Children(children) => children.end().await,
        }
    }
}
