//! The cluster the key scenarios (`kv-put`, `watch`, `kv-fill`) and the recipe scenarios
//! (`election`, `barrier`) start for themselves, as `failover` does: `hivekeeper serve`
//! children on loopback ports, data in a temporary directory, all stopped and removed when it
//! drops. Owning the members is what lets a scenario home a watcher on a follower, read a
//! member's gauges (a barrier's waiting members) and its memory.
//!
//! ```text
//!  KvCluster::start ─ Cluster::start (N members, waits for a leader) ─▶ leader, a follower
//!  connect_agents ─ plain SDK agents (no lease), each homed where the scenario says
//!  rss_mb(member) ─ /proc/<member pid>/status VmRSS       gauge(member) ─ its /metrics
//! ```

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use hivekeeper_agent::{Agent, AgentConfig, BrokerOrder};
use hivekeeper_local_cluster::{Cluster, Options};

use super::memory;
use super::report::{Errors, KvFigures, Latency, MemberRss, Report};
use super::swarm::RunId;

/// A value of 100 bytes, what every key scenario writes (the size of a small config entry or
/// presence record).
pub const VALUE_BYTES: usize = 100;

/// A cluster of the scenario's own, and which member led when it started.
pub struct KvCluster {
    /// The members; dropping it stops them and removes their data.
    cluster: Cluster,
    /// The member that led once the cluster was up: writers are homed on it, watchers on
    /// another.
    leader: usize,
}

impl KvCluster {
    /// Starts `members` members of `hivekeeper serve` (the binary at `hivekeeper`) and finds
    /// the leader.
    pub async fn start(hivekeeper: &Path, run: &RunId, members: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(members >= 1, "--members must be at least 1");
        // One path segment (a resource name has a `/`).
        let root = std::env::temp_dir().join(format!("hivekeeper-{}", run.agent("cluster", 0)));
        let options = Options {
            size: members,
            ..Options::default()
        };
        let cluster = Cluster::start(hivekeeper, root, &options)
            .await
            .context("starting the scenario's own cluster")?;
        let leader = cluster.leader(Duration::from_secs(30)).await?;
        Ok(KvCluster { cluster, leader })
    }

    /// Members in the cluster.
    pub fn size(&self) -> usize {
        self.cluster.members.len()
    }

    /// The member that led at the start.
    pub fn leader(&self) -> usize {
        self.leader
    }

    /// A member that did not lead at the start (the next one after the leader).
    pub fn follower(&self) -> usize {
        (self.leader + 1) % self.size()
    }

    /// Every member's agent endpoint, `host:port`, n1 first.
    pub fn brokers(&self) -> Vec<String> {
        self.cluster.brokers()
    }

    /// Member `index`'s name (`n1`, ...).
    pub fn name(&self, index: usize) -> &str {
        &self.cluster.members[index].name
    }

    /// Member `index`'s resident memory now, MB.
    pub fn rss_mb(&self, index: usize) -> Option<f64> {
        self.pid(index).and_then(memory::rss_mb)
    }

    /// Member `index`'s process id, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.cluster.members[index].pid()
    }

    /// Each member's name and its role at the start (`leader` or `follower`), n1 first.
    pub fn member_roles(&self) -> Vec<(String, String)> {
        (0..self.size())
            .map(|index| {
                let role = if index == self.leader {
                    "leader"
                } else {
                    "follower"
                };
                (self.name(index).to_string(), role.to_string())
            })
            .collect()
    }

    /// Every member's resident memory now, with its role at the start.
    pub fn member_rss(&self) -> Vec<MemberRss> {
        self.member_roles()
            .into_iter()
            .enumerate()
            .map(|(index, (member, role))| MemberRss {
                member,
                role,
                rss_mb: self.rss_mb(index),
            })
            .collect()
    }

    /// An unlabelled gauge of member `index`'s /metrics, `None` when it does not answer.
    pub async fn gauge(&self, index: usize, name: &str) -> Option<u64> {
        let text = hivekeeper_local_cluster::scrape(self.cluster.members[index].metrics).await?;
        hivekeeper_local_cluster::gauge(&text, name)
    }

    /// Waits until gauge `name` is at least `target` on each of `members`, at most `within`;
    /// returns whether they all got there.
    pub async fn wait_for_gauge(
        &self,
        members: &[usize],
        name: &str,
        target: u64,
        within: Duration,
    ) -> bool {
        self.wait_for_gauge_where(members, name, |value| value >= target, within)
            .await
    }

    /// Waits until gauge `name` satisfies `wanted` on each of `members` (a gauge a member does
    /// not show reads as 0), at most `within`; returns whether they all got there.
    pub async fn wait_for_gauge_where(
        &self,
        members: &[usize],
        name: &str,
        wanted: impl Fn(u64) -> bool,
        within: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut all = true;
            for &index in members {
                if !wanted(self.gauge(index, name).await.unwrap_or(0)) {
                    all = false;
                    break;
                }
            }
            if all {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every member's index.
    pub fn all(&self) -> Vec<usize> {
        (0..self.size()).collect()
    }
}

impl KvCluster {
    /// The report of a write scenario (`kv-put`, `kv-fill`): `puts` committed in `elapsed_s`,
    /// each write's commit latency, the SDK's resends, and every member's memory now.
    pub fn write_report(
        &self,
        elapsed_s: f64,
        errors: Errors,
        puts: u64,
        commit_us: &[u64],
        resends: u64,
    ) -> Report {
        let figures = KvFigures {
            members: self.size(),
            puts,
            puts_per_s: puts as f64 / elapsed_s.max(1e-9),
            commit: Latency::from_micros(commit_us),
            resends,
            member_rss: self.member_rss(),
            ..KvFigures::default()
        };
        Report::of_kv(elapsed_s, errors, figures)
    }

    /// Connects `count` plain agents named `run.agent(role, i)`, agent i homed on member
    /// i mod N (its broker list rotated to start there), at most `concurrency` at once: those
    /// that connected, and the failures counted. An error when none could.
    pub async fn connect_spread(
        &self,
        run: &RunId,
        role: &str,
        count: usize,
        concurrency: usize,
    ) -> anyhow::Result<(Vec<Agent>, Errors)> {
        let brokers = self.brokers();
        let (agents, errors) = connect_agents(run, role, count, concurrency, |index| {
            super::swarm::rotated(&brokers, index)
        })
        .await;
        let agents: Vec<Agent> = agents.into_iter().flatten().collect();
        anyhow::ensure!(
            !agents.is_empty(),
            "no client could connect: {:?}",
            errors.samples
        );
        Ok((agents, errors))
    }
}

/// Connects `count` plain agents (no lease) named `run.agent(role, i)`, at most
/// `concurrency` at once; agent i dials the brokers `brokers_of(i)` (its home first). Returns
/// them in index order (`None` where connecting failed, the failure counted in the errors).
pub async fn connect_agents(
    run: &RunId,
    role: &str,
    count: usize,
    concurrency: usize,
    brokers_of: impl Fn(usize) -> Vec<String>,
) -> (Vec<Option<Agent>>, Errors) {
    let configs = (0..count).map(|index| AgentConfig {
        agent_id: run.agent(role, index),
        brokers: brokers_of(index),
        broker_order: BrokerOrder::InOrder,
        ..AgentConfig::default()
    });
    super::swarm::connect_each(configs, concurrency, |config| async move {
        Ok(Agent::connect(config).await?)
    })
    .await
}

/// The value every key scenario writes: [`VALUE_BYTES`] bytes.
pub fn value() -> String {
    "v".repeat(VALUE_BYTES)
}
