//! The lock scenarios' runs: `uncontended` (against --brokers, or with `--members N` on a
//! cluster of its own: `own_cluster.rs`), `semaphore` and `failover`.

use hivekeeper_agent::Resource;

use super::own_cluster::{OwnCluster, run_cycles};
use super::report::Report;
use super::{Common, Launch, Parameters, airspace, cycles, failover, flood, swarm};

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
