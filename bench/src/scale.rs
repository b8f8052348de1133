//! `scale`: an idle swarm (10,000 agents by default, each with a lease the SDK keeps alive,
//! held here or by `--processes` child processes: `idle_swarm`) while busy agents run
//! `contended`; whether every idle session stayed live, the busy agents' latencies under that
//! load, and the nodes' memory.

use std::path::Path;

use hivekeeper_agent::Resource;

use super::Common;
use super::cycles;
use super::idle_swarm::{IdleSettings, IdleSwarm};
use super::memory::status_mb;
use super::report::{NodeMemory, Report, ScaleFigures};
use super::swarm::{self, Member, RunId};

/// What `scale` is asked to run.
pub struct ScalePlan {
    /// Idle agents, and their lease TTL and MQTT keepalive.
    pub idle_agents: usize,
    pub idle: IdleSettings,
    /// Processes holding the idle agents (1: this one).
    pub processes: usize,
    /// Busy agents, and the lock names they share.
    pub agents: usize,
    pub locks: usize,
    /// The nodes whose memory is read (none: the one `serve` process found, if any).
    pub node_pids: Vec<u32>,
}

/// Runs the scenario.
pub async fn run(common: &Common, run: &RunId, plan: ScalePlan) -> anyhow::Result<Report> {
    anyhow::ensure!(plan.agents >= 1, "--agents must be at least 1");
    anyhow::ensure!(plan.processes >= 1, "--processes must be at least 1");
    anyhow::ensure!(
        plan.processes == 1 || run.accounts().is_none(),
        "--processes with --user: the idle agents' accounts are made by this process only; \
         run the idle agents here (--processes 1) on a service with --auth"
    );
    let node_pids = match plan.node_pids.as_slice() {
        [] => discover_node_pid(&common.brokers).into_iter().collect(),
        pids => pids.to_vec(),
    };
    let (idle, idle_connected, connect_s, mut errors) =
        IdleSwarm::connect(common, &plan.idle, run, plan.idle_agents, plan.processes).await?;
    let base = common.agent_base()?;
    let (busy, busy_errors) = swarm::connect(
        &base,
        run,
        "agent",
        plan.agents,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await;
    errors.merge(busy_errors);
    let busy: Vec<(Member, Resource)> = busy
        .into_iter()
        .enumerate()
        .filter_map(|(i, member)| {
            let lock = Resource::lock(run.resource(&format!("lock-{}", i % plan.locks)));
            member.map(|member| (member, lock))
        })
        .collect();
    anyhow::ensure!(
        !busy.is_empty(),
        "no busy agent connected: {:?}",
        errors.samples
    );

    let mut report = cycles::measure(common, busy, 1).await;
    let idle = idle.end().await?;
    let nodes: Vec<NodeMemory> = node_pids
        .iter()
        .map(|&pid| {
            let status = format!("/proc/{pid}/status");
            NodeMemory {
                pid,
                rss_mb: status_mb(Path::new(&status), "VmRSS"),
                rss_peak_mb: status_mb(Path::new(&status), "VmHWM"),
            }
        })
        .collect();
    let largest =
        |value: fn(&NodeMemory) -> Option<f64>| nodes.iter().filter_map(value).reduce(f64::max);
    report.scale = Some(ScaleFigures {
        idle_agents: plan.idle_agents as u64,
        idle_connected,
        connect_s,
        sessions_live: idle.live,
        sessions_lost: idle.lost,
        node_rss_mb: largest(|node| node.rss_mb),
        node_rss_peak_mb: largest(|node| node.rss_peak_mb),
        bench_rss_peak_mb: status_mb(Path::new("/proc/self/status"), "VmHWM"),
        processes: plan.processes as u64,
        idle_processes_rss_peak_mb: idle.rss_peak_mb,
        nodes: if node_pids.len() > 1 {
            nodes
        } else {
            Vec::new()
        },
    });
    report.errors.merge(errors);
    report.parameters.insert(
        "node_pid".into(),
        node_pids
            .first()
            .map_or(serde_json::Value::Null, |&pid| pid.into()),
    );
    Ok(report)
}

/// The pid of the `hivekeeper serve` process on this machine whose embedded broker is the
/// first of `brokers`: its `--mqtt-listen` port, or 1883 when it has none (and no config
/// file, which could say otherwise). `None` unless exactly one process matches.
fn discover_node_pid(brokers: &[String]) -> Option<u32> {
    let port = brokers.first()?.rsplit(':').next()?.trim_end_matches('/');
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&byte| byte == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        let is_serve = args.first().is_some_and(|program| {
            Path::new(program)
                .file_name()
                .is_some_and(|name| name == "hivekeeper")
        }) && args.get(1).is_some_and(|arg| arg == "serve");
        if !is_serve {
            continue;
        }
        let listen = args
            .iter()
            .enumerate()
            .find_map(|(i, arg)| match arg.as_str() {
                "--mqtt-listen" => args.get(i + 1).map(String::as_str),
                _ => arg.strip_prefix("--mqtt-listen="),
            });
        let listens_on = match listen {
            Some(addr) => addr.rsplit(':').next() == Some(port),
            None => {
                port == "1883"
                    && !args
                        .iter()
                        .any(|arg| arg.starts_with("--config") || arg == "-c")
            }
        };
        if listens_on {
            found.push(pid);
        }
    }
    (found.len() == 1).then(|| found[0])
}
