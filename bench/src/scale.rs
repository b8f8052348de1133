//! `scale`: an idle swarm (10,000 agents by default, each with a lease the SDK keeps alive)
//! while busy agents run `contended`; whether every idle session stayed live, the busy
//! agents' latencies under that load, and the node's memory.

use std::path::Path;

use hivekeeper_agent::Resource;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Common;
use super::cycles;
use super::memory::status_mb;
use super::report::{Report, ScaleFigures};
use super::swarm::{self, Member, RunId};

/// Runs the scenario.
pub async fn run(
    common: &Common,
    run: &RunId,
    idle_agents: usize,
    agents: usize,
    locks: usize,
    node_pid: Option<u32>,
) -> anyhow::Result<Report> {
    anyhow::ensure!(agents >= 1, "--agents must be at least 1");
    let node_pid = node_pid.or_else(|| discover_node_pid(&common.brokers));
    let connect_started = Instant::now();
    let base = common.agent_base()?;
    let (idle, mut errors) = swarm::connect(
        &base,
        run,
        "idle",
        idle_agents,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await;
    let connect_s = connect_started.elapsed().as_secs_f64();
    let idle: Vec<Member> = idle.into_iter().flatten().collect();
    let (busy, busy_errors) = swarm::connect(
        &base,
        run,
        "agent",
        agents,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await;
    errors.merge(busy_errors);
    let busy: Vec<(Member, Resource)> = busy
        .into_iter()
        .enumerate()
        .filter_map(|(i, member)| {
            let lock = Resource::lock(run.resource(&format!("lock-{}", i % locks)));
            member.map(|member| (member, lock))
        })
        .collect();
    anyhow::ensure!(
        !busy.is_empty(),
        "no busy agent connected: {:?}",
        errors.samples
    );

    // One watcher per idle session: did it leave `Live` during the measured phase?
    let (end_tx, end_rx) = watch::channel(false);
    let mut watchers = JoinSet::new();
    for member in &idle {
        let session = member.session.clone();
        let mut end = end_rx.clone();
        watchers.spawn(async move {
            tokio::select! {
                _ = session.lost() => false,
                _ = end.wait_for(|ended| *ended) => session.state().is_live(),
            }
        });
    }
    let mut report = cycles::measure(common, busy, 1).await;
    let _ = end_tx.send(true);
    let (mut sessions_live, mut sessions_lost) = (0, 0);
    while let Some(joined) = watchers.join_next().await {
        match joined {
            Ok(true) => sessions_live += 1,
            _ => sessions_lost += 1,
        }
    }
    let node_status = node_pid.map(|pid| format!("/proc/{pid}/status"));
    let node_status = node_status.as_deref().map(Path::new);
    report.scale = Some(ScaleFigures {
        idle_agents: idle_agents as u64,
        idle_connected: idle.len() as u64,
        connect_s,
        sessions_live,
        sessions_lost,
        node_rss_mb: node_status.and_then(|path| status_mb(path, "VmRSS")),
        node_rss_peak_mb: node_status.and_then(|path| status_mb(path, "VmHWM")),
        bench_rss_peak_mb: status_mb(Path::new("/proc/self/status"), "VmHWM"),
    });
    report.errors.merge(errors);
    report.parameters.insert(
        "node_pid".into(),
        node_pid.map_or(serde_json::Value::Null, Into::into),
    );
    drop(idle);
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
