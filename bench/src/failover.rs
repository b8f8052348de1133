//! `failover`: a cluster the bench starts itself (`hivekeeper serve` child processes on
//! loopback), contended traffic through every member, and the leader killed with SIGKILL
//! every few seconds, then restarted.
//!
//! ```text
//!  start N members ─▶ agents (spread over the members) run `contended` for the whole run
//!  every --kill-every-s: find the leader (/metrics: hivekeeper_raft_is_leader 1)
//!     ├─ kill -9 it                                   ── t_kill
//!     ├─ a probe agent homed on a survivor: try-lock + release with fresh ids
//!     │    until one is granted                       ── t_grant: gap = t_grant − t_kill
//!     └─ restart the killed member on its data dir (it catches up)
//!  with --pause-s S: SIGSTOP instead of kill -9 (t_kill), the same probe, then SIGCONT S
//!  seconds after the SIGSTOP (a GC or VM stall: its sockets stay open and silent)
//!  report: gap per kill (median, max), the longest time with no grant at all in the
//!          traffic, and the mutual-exclusion check over every grant
//! ```
//!
//! The gap is what an agent sees: it includes detection (the election timeout), the election,
//! the first commit of the new leader, and the SDK's own retry. Killing the member the probe is
//! homed on is avoided (a probe homed on the dead member would measure its reconnect instead).

use std::time::Duration;

use anyhow::{Context, bail};
use hivekeeper_agent::{Agent, AgentConfig, BrokerOrder, Resource, Session};
use serde::Serialize;
use tokio::time::Instant;

use super::cycles;
use super::history::{Grant, micros};
use super::report::{Latency, Report};
use super::swarm::{self, RunId};
use super::{Common, Launch};
use hivekeeper_local_cluster::{Cluster, Options};

/// What `failover` measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FailoverFigures {
    /// Members in the cluster.
    pub members: usize,
    /// Each fault's gap: from the SIGKILL (or, with `--pause-s`, the SIGSTOP) of the leader to
    /// the first grant a probe got through a surviving member, ms.
    pub gap_ms: Vec<f64>,
    /// Median of `gap_ms`.
    pub gap_ms_median: f64,
    /// Largest of `gap_ms`.
    pub gap_ms_max: f64,
    /// The longest time in the measured phase with no grant to any agent of the traffic, ms.
    pub longest_no_grant_ms: f64,
    /// Where that longest time began, relative to the last fault or recovery before it (e.g.
    /// "12 ms after kill 3", "850 ms after restart 5", "5 ms after pause 2"): a hole right
    /// after a fault is the failover, one after a restart or continue is the rejoin.
    pub longest_no_grant_began: String,
}

/// A probe homed on one member: a session through that member first.
async fn probe(run: &RunId, brokers: &[String], home: usize) -> anyhow::Result<Session> {
    let agent = Agent::connect(AgentConfig {
        agent_id: run.agent("probe", home),
        brokers: swarm::rotated(brokers, home),
        broker_order: BrokerOrder::InOrder,
        ..AgentConfig::default()
    })
    .await
    .context("connecting a probe")?;
    agent.session(5_000).await.context("a probe's session")
}

/// Try-locks the probe's own lock (fresh request ids each time) until one is granted, at most
/// `within`; releases it. Returns when the grant arrived.
async fn first_grant(session: &Session, lock: &str, within: Duration) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + within;
    loop {
        match session.try_lock(lock.to_string()).await {
            Ok(guard) => {
                let granted = Instant::now();
                let _ = guard.release().await;
                return Ok(granted);
            }
            Err(error) if Instant::now() > deadline => {
                bail!("no grant within {} s: {error}", within.as_secs())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// What is done to the leader each time.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// SIGKILL, then a restart on its data dir once a survivor granted.
    Kill,
    /// SIGSTOP for this long, then SIGCONT: its sockets stay open and silent meanwhile.
    Pause(Duration),
}

/// The scenario's shape: the cluster, the faults and the traffic.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Cluster members.
    pub size: usize,
    /// How many times the leader is hit.
    pub kills: usize,
    /// Traffic before each fault.
    pub kill_every: Duration,
    /// What is done to the leader.
    pub fault: Fault,
    /// Agents of the traffic.
    pub agents: usize,
    /// Lock names of the traffic.
    pub locks: usize,
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(
        plan.size >= 3,
        "--members must be at least 3 (a majority must survive)"
    );
    anyhow::ensure!(
        plan.locks >= 1 && plan.agents >= 1,
        "--agents and --locks must be at least 1"
    );
    // One path segment (a resource name has a `/`, which made the parent outlive the run).
    let root = std::env::temp_dir().join(format!("hivekeeper-{}", launch.run.agent("cluster", 0)));
    let options = Options {
        size: plan.size,
        ..Options::default()
    };
    let mut cluster = Cluster::start(launch.hivekeeper, root, &options).await?;
    let brokers = cluster.brokers();
    let mut probes = Vec::new();
    for home in 0..plan.size {
        probes.push(probe(launch.run, &brokers, home).await?);
    }
    let (traffic, connect_errors) =
        start_traffic(launch.common, launch.run, &brokers, &plan).await?;
    let faults = hit_leaders(&mut cluster, &mut probes, launch.run, &brokers, &plan).await?;
    let (mut report, grants) = traffic.await.context("the traffic task")?;
    report.errors.merge(connect_errors);

    let (longest_no_grant_us, longest_no_grant_began) = longest_no_grant(&grants, &faults.moments);
    let gaps = Latency::from_micros(&faults.gaps_us);
    report.failover = Some(FailoverFigures {
        members: plan.size,
        gap_ms: faults
            .gaps_us
            .iter()
            .map(|us| *us as f64 / 1_000.0)
            .collect(),
        gap_ms_median: gaps.p50_ms,
        gap_ms_max: gaps.max_ms,
        longest_no_grant_ms: longest_no_grant_us as f64 / 1_000.0,
        longest_no_grant_began,
    });
    // The probes' SDKs would otherwise keep dialling the members being stopped.
    drop(probes);
    drop(cluster);
    Ok(report)
}

/// The `contended` traffic through every member, as a task, with the errors of connecting
/// its agents. It runs through every fault and a little after the last one.
async fn start_traffic(
    common: &Common,
    run: &RunId,
    brokers: &[String],
    plan: &Plan,
) -> anyhow::Result<(
    tokio::task::JoinHandle<(Report, Vec<Grant>)>,
    super::report::Errors,
)> {
    let (members, connect_errors) = swarm::connect_agents(
        &AgentConfig {
            brokers: brokers.to_vec(),
            ..AgentConfig::default()
        },
        run,
        plan.agents,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await?;
    let resources: Vec<Resource> = (0..members.len())
        .map(|i| Resource::lock(run.resource(&format!("lock-{}", i % plan.locks))))
        .collect();
    let mut traffic_common = common.clone();
    let paused_s = match plan.fault {
        Fault::Pause(pause) => pause.as_secs(),
        Fault::Kill => 0,
    };
    traffic_common.duration_s = (plan.kill_every.as_secs() + paused_s + 2) * plan.kills as u64 + 2;
    let traffic = tokio::spawn(async move {
        cycles::measure_with_grants(
            &traffic_common,
            members.into_iter().zip(resources).collect(),
            1,
        )
        .await
    });
    Ok((traffic, connect_errors))
}

/// What the faults measured.
struct FaultTimes {
    /// Each fault's gap to the first grant through a survivor, µs.
    gaps_us: Vec<u64>,
    /// (when, what): every fault and recovery, for placing the longest hole.
    moments: Vec<(Instant, String)>,
}

/// Every --kill-every-s, kills (or pauses) the leader, measures the gap to a probe's grant
/// through a surviving member, then restarts (or continues) it and waits until it is up.
async fn hit_leaders(
    cluster: &mut Cluster,
    probes: &mut [Session],
    run: &RunId,
    brokers: &[String],
    plan: &Plan,
) -> anyhow::Result<FaultTimes> {
    let probe_lock = run.resource("probe");
    let mut gaps_us = Vec::new();
    let mut moments: Vec<(Instant, String)> = Vec::new();
    for kill in 1..=plan.kills {
        tokio::time::sleep(plan.kill_every).await;
        let leader = cluster.leader(Duration::from_secs(30)).await?;
        let home = (leader + 1) % plan.size;
        // A probe whose lease ended in an earlier fault (one homed on a member that was paused
        // longer than its TTL) is replaced: the gap is the service's, not the probe's.
        if probes[home].state().is_ended() {
            probes[home] = probe(run, brokers, home).await?;
        }
        let killed_at = Instant::now();
        match plan.fault {
            Fault::Kill => {
                cluster.members[leader].kill();
                moments.push((killed_at, format!("kill {kill}")));
            }
            Fault::Pause(_) => {
                cluster.members[leader].signal("STOP")?;
                moments.push((killed_at, format!("pause {kill}")));
            }
        }
        let granted = first_grant(&probes[home], &probe_lock, Duration::from_secs(30)).await?;
        gaps_us.push(micros(granted - killed_at));
        match plan.fault {
            Fault::Kill => {
                moments.push((Instant::now(), format!("restart {kill}")));
                cluster.members[leader].spawn()?;
            }
            Fault::Pause(pause) => {
                tokio::time::sleep_until(killed_at + pause).await;
                moments.push((Instant::now(), format!("continue {kill}")));
                cluster.members[leader].signal("CONT")?;
            }
        }
        cluster.wait_up(leader, Duration::from_secs(30)).await?;
    }
    Ok(FaultTimes { gaps_us, moments })
}

/// The longest time between two grants of the traffic, µs, and where it began relative to
/// the last fault or recovery before it.
fn longest_no_grant(grants: &[Grant], moments: &[(Instant, String)]) -> (u64, String) {
    let mut granted: Vec<Instant> = grants.iter().map(|grant| grant.granted_at).collect();
    granted.sort();
    let longest = granted
        .windows(2)
        .max_by_key(|pair| pair[1] - pair[0])
        .map(|pair| (pair[0], micros(pair[1] - pair[0])));
    let longest_no_grant_us = longest.map_or(0, |(_, us)| us);
    let longest_no_grant_began = longest
        .and_then(|(began, _)| {
            moments
                .iter()
                .rev()
                .find(|(when, _)| *when <= began)
                .map(|(when, what)| format!("{} ms after {what}", (began - *when).as_millis()))
        })
        .unwrap_or_else(|| "before the first kill".into());
    (longest_no_grant_us, longest_no_grant_began)
}
