//! `uncontended`/`contended --members N`: the acquire → release cycles on a cluster the
//! scenario starts itself, with the CPU each committed entry cost its members (`cpu`).
//!
//! ```text
//!  KvCluster::start ─▶ agents connected, homed by --home ─▶ CpuSample ─▶ cycles::measure
//!        ─▶ CpuSample ─▶ CpuFigures in the report
//! ```

use clap::{Args, ValueEnum};
use hivekeeper_agent::Resource;

use super::report::Report;
use super::{Common, Launch, Parameters, cpu, cycles, kv_cluster};

/// `--members` and `--home`, for the scenarios that can start a cluster of their own to
/// measure its CPU.
#[derive(Debug, Clone, Copy, Args)]
pub struct OwnCluster {
    /// Start a cluster of this many members (`hivekeeper serve` on loopback ports, data in a
    /// temporary directory, removed after) instead of using --brokers (then ignored), home
    /// the agents as --home says, and report what each committed entry cost the members'
    /// CPU (utime + stime from /proc, over the leader's log growth in the measured phase),
    /// each member's and summed, and the bench's own. No authentication or TLS: --user and
    /// --tls-* are not used.
    #[arg(long, value_name = "N")]
    pub members: Option<usize>,
    /// With --members: where the agents connect. `spread`: agent i on member i mod N (the
    /// others after it, to fail over to); `leader`: every agent on the member that leads at
    /// the start.
    #[arg(long, value_enum, default_value_t = Home::Spread, requires = "members")]
    pub home: Home,
}

/// Where the agents of an own cluster connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Home {
    /// Round-robin over the members.
    Spread,
    /// All on the leader.
    Leader,
}

impl OwnCluster {
    /// The flags as the report records them, when --members is given.
    pub fn parameters(self) -> Parameters {
        self.members
            .map(|members| {
                let home = format!("{:?}", self.home).to_lowercase();
                vec![
                    ("members", members.into()),
                    ("home", home.into()),
                    ("brokers", "its own cluster".into()),
                ]
            })
            .unwrap_or_default()
    }
}

/// The acquire → release cycles of `agents` agents on `resources` (one each): against
/// --brokers, or with `--members N` on a cluster of the scenario's own, with the CPU each
/// entry cost its members.
pub async fn run_cycles(
    launch: Launch<'_>,
    agents: usize,
    resources: Vec<Resource>,
    own: OwnCluster,
) -> anyhow::Result<Report> {
    let Some(members) = own.members else {
        return cycles::run(launch.common, launch.run, agents, resources, 1).await;
    };
    let cluster = kv_cluster::KvCluster::start(launch.hivekeeper, launch.run, members).await?;
    // The swarm homes agent i on the i-th broker of the list, mod its length.
    let brokers = match own.home {
        Home::Spread => cluster.brokers(),
        Home::Leader => vec![cluster.brokers()[cluster.leader()].clone()],
    };
    let common = Common {
        brokers,
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
