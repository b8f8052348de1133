//! `kv-put`: N clients, each one agent (one MQTT connection, no lease) spread over the members
//! of the scenario's own cluster, each putting keys of its own in a loop: puts a second and
//! the commit latency of each put. With one client, the latency of one put at a time.
//!
//! ```text
//!  KvCluster::start (N members) ─▶ clients, client i homed on member i mod N
//!  every client: kv.put(bench-<run>/kv/<client>/<n>, 100 bytes) ─▶ answer, n += 1
//!     until --duration-s or --puts-per-client
//!  report: puts, puts/s, commit p50/p90/p99/max, each member's RSS
//! ```
//!
//! A put through a follower is forwarded to the leader, as any client's would be: the figure
//! is what a fleet spread over the members sees.

use std::time::Duration;

use hivekeeper_agent::Agent;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Launch;
use super::history::micros;
use super::kv_cluster::{self, KvCluster};
use super::report::{Errors, Report};

/// The scenario's shape.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Cluster members.
    pub members: usize,
    /// Clients putting at once.
    pub clients: usize,
    /// Most puts per client: the run also stops when every client did them.
    pub puts_per_client: u64,
}

/// What one client's loop produced.
#[derive(Debug, Default)]
struct ClientRun {
    /// Each committed put's latency, µs.
    commit_us: Vec<u64>,
    /// The client's resends (its SDK's count).
    resends: u64,
    errors: Errors,
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(plan.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!(
        plan.puts_per_client >= 1,
        "--puts-per-client must be at least 1"
    );
    let cluster = KvCluster::start(launch.hivekeeper, launch.run, plan.members).await?;
    let (clients, mut errors) = cluster
        .connect_spread(
            launch.run,
            "client",
            plan.clients,
            launch.common.connect_concurrency,
        )
        .await?;

    let started = Instant::now();
    let deadline = started + Duration::from_secs(launch.common.duration_s);
    let mut tasks = JoinSet::new();
    for (index, client) in clients.into_iter().enumerate() {
        let prefix = launch.run.resource(&format!("kv/{index}"));
        tasks.spawn(client_loop(client, prefix, deadline, plan.puts_per_client));
    }
    let (mut commit_us, mut resends) = (Vec::new(), 0);
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(client) => {
                commit_us.extend(client.commit_us);
                resends += client.resends;
                errors.merge(client.errors);
            }
            Err(panic) => errors.add(format!("client task: {panic}")),
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let puts = commit_us.len() as u64;
    Ok(cluster.write_report(elapsed_s, errors, puts, &commit_us, resends))
}

/// One client: a put of a fresh key, its answer, the next, until the deadline or `puts_max`.
async fn client_loop(client: Agent, prefix: String, deadline: Instant, puts_max: u64) -> ClientRun {
    let kv = client.kv();
    let value = kv_cluster::value();
    let mut run = ClientRun::default();
    let mut attempts = 0u64;
    while attempts < puts_max && Instant::now() < deadline {
        let key = format!("{prefix}/{attempts}");
        attempts += 1;
        let sent = Instant::now();
        match kv.put(key, value.clone()).await {
            Ok(_) => run.commit_us.push(micros(sent.elapsed())),
            Err(error) => {
                run.errors.add(format!("kv.put: {error}"));
                // A refusal repeated at once would spin: pause as a real client would.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    run.resends = client.stats().resends_total;
    run
}
