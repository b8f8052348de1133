//! The lock scenarios' runs: `uncontended`, `contended` (against --brokers, or with
//! `--members N` on a cluster of their own, measuring its CPU per entry), `semaphore` and
//! `failover`.

use clap::Args;
use hivekeeper_agent::Resource;

use super::report::Report;
use super::{
    Common, Launch, Parameters, airspace, cpu, cycles, failover, flood, kv_cluster, swarm,
};

/// `--members`, for the scenarios that can start a cluster of their own to measure its CPU.
#[derive(Debug, Clone, Copy, Args)]
pub(super) struct OwnCluster {
    /// Start a cluster of this many members (`hivekeeper serve` on loopback ports, data in a
    /// temporary directory, removed after) instead of using --brokers, spread the agents over
    /// them (agent i homed on member i mod N), and report what each committed entry cost the
    /// members' CPU (utime + stime from /proc, over the leader's log growth in the measured
    /// phase), each member's and summed, and the bench's own. No authentication or TLS:
    /// --user and --tls-* are not used.
    #[arg(long, value_name = "N")]
    pub(super) members: Option<usize>,
}

/// Flags every scenario takes.
/// `uncontended`: each agent on its own lock, waypoint or route; with `flood`, one more
/// agent floods meanwhile.
pub(super) async fn run_uncontended(
    launch: Launch<'_>,
    agents: usize,
    flood: bool,
    resource: airspace::ResourceShape,
    own: OwnCluster,
) -> anyhow::Result<(Report, Parameters)> {
    let run = launch.run;
    let kind = format!("{resource:?}").to_lowercase();
    let resources = (0..agents)
        .map(|i| resource.resource(run.resource(&format!("{kind}-{i}")), i))
        .collect();
    let report = if flood {
        anyhow::ensure!(
            own.members.is_none(),
            "--flood measures a service given by --brokers: leave out --members"
        );
        flood::run(launch.common, run, agents, resources).await?
    } else {
        run_cycles(launch, agents, resources, own).await?
    };
    let mut parameters = vec![
        ("agents", agents.into()),
        ("flood", flood.into()),
        ("resource", kind.into()),
    ];
    parameters.extend(own.parameters());
    Ok((report, parameters))
}

impl OwnCluster {
    /// The flag as the report records it, when given.
    pub(super) fn parameters(self) -> Parameters {
        self.members
            .map(|members| {
                vec![
                    ("members", members.into()),
                    ("brokers", "its own cluster".into()),
                ]
            })
            .unwrap_or_default()
    }
}

/// The acquire → release cycles of `agents` agents on `resources` (one each): against
/// --brokers, or with `--members N` on a cluster of the scenario's own, with the CPU each
/// entry cost its members.
pub(super) async fn run_cycles(
    launch: Launch<'_>,
    agents: usize,
    resources: Vec<Resource>,
    own: OwnCluster,
) -> anyhow::Result<Report> {
    let Some(members) = own.members else {
        return cycles::run(launch.common, launch.run, agents, resources, 1).await;
    };
    let cluster = kv_cluster::KvCluster::start(launch.hivekeeper, launch.run, members).await?;
    let common = Common {
        brokers: cluster.brokers(),
        ..launch.common.clone()
    };
    let (connected, connect_errors) = cycles::connect(&common, launch.run, agents).await?;
    let before = cpu::CpuSample::take(&cluster).await;
    let claims = connected.into_iter().zip(resources).collect();
    let mut report = cycles::measure(&common, claims, 1).await;
    let after = cpu::CpuSample::take(&cluster).await;
    report.errors.merge(connect_errors);
    report.cpu = Some(cpu::CpuFigures::between(&cluster, &before, &after));
    Ok(report)
}

/// `semaphore`: every agent on one semaphore of `limit` permits, one permit each.
pub(super) async fn run_semaphore(
    common: &Common,
    run: &swarm::RunId,
    agents: usize,
    limit: u32,
) -> anyhow::Result<(Report, Parameters)> {
    anyhow::ensure!(limit >= 1, "--limit must be at least 1");
    let name = run.resource("sem");
    let resources = (0..agents)
        .map(|_| Resource::Semaphore {
            name: name.clone(),
            limit,
            permits: 1,
        })
        .collect();
    let capacity = limit as usize;
    let report = cycles::run(common, run, agents, resources, capacity).await?;
    let parameters = vec![("agents", agents.into()), ("limit", limit.into())];
    Ok((report, parameters))
}

/// `failover`: its own cluster, its leader hit again and again under `contended` traffic.
pub(super) async fn run_failover(
    launch: Launch<'_>,
    plan: failover::Plan,
    pause_s: Option<u64>,
) -> anyhow::Result<(Report, Parameters)> {
    let report = failover::run(launch, plan).await?;
    let parameters = vec![
        ("members", plan.size.into()),
        ("kills", plan.kills.into()),
        ("pause_s", pause_s.into()),
        ("agents", plan.agents.into()),
        ("locks", plan.locks.into()),
        // The traffic ran through its own cluster, for as long as the kills took.
        ("brokers", "its own cluster".into()),
        ("duration_s", report.elapsed_s.round().into()),
    ];
    Ok((report, parameters))
}
