//! # hivekeeper-bench: `hivekeeper bench`, Hivekeeper measured from outside
//!
//! Load scenarios against a running service, through the agent SDK over MQTT, as real agents:
//! one agent is one MQTT connection and one lease. A user-facing subcommand of `hivekeeper`
//! ([`BenchArgs`] is its clap definition, [`run`] its body); its code is a crate of its own so
//! that the server's own modules and the bench's stay apart. `failover` starts its own
//! cluster with `hivekeeper-local-cluster`, the launcher it shares with `hivekeeper-nemesis`,
//! and `uncontended --flood` floods with that crate's raw MQTT client. The key scenarios
//! (`kv-put`, `watch`, `kv-fill`) start their own cluster too, to home a watcher on a
//! follower and to read each member's memory, and so do the recipe scenarios (`election`,
//! `barrier`, `rwlock`), to size the cluster as their targets say and to read a member's
//! gauges.
//!
//! ```text
//!  swarm::connect ─ N agents, each Agent::connect + a session (lease kept alive by the SDK)
//!        │ all connected: the measured phase starts
//!  cycles::run ─ every agent: acquire ─▶ (hold) ─▶ release, until --duration-s or --cycles
//!        │ one Grant record per grant: token, acquire/grant/release-start instants
//!  history ─ mutual-exclusion check, handovers, fairness ─▶ report (table, or --json)
//! ```
//!
//! # Layout
//! - `swarm`: connecting many agents with bounded concurrency; unique agent and resource
//!   names per run.
//! - `accounts`: with `--user`, an account per agent (a service with `--auth`).
//! - `airspace`: `uncontended --resource waypoint|route`, each agent's own waypoint or route.
//! - `cycles`: the acquire → release loop shared by `uncontended`, `contended`, `semaphore`
//!   and the busy part of `scale`.
//! - `reclaim`: a holder whose keepalives stop with a waiter queued.
//! - `scale`: an idle swarm kept alive while a contended run goes on; node memory.
//! - `idle_swarm`: `scale`'s idle agents, here or spread over child processes.
//! - `failover`: a cluster the bench starts itself, its leader killed again and again.
//! - `flood`: `uncontended --flood`, one raw client flooding while the swarm runs.
//! - `kv_cluster`: the key scenarios' own cluster, its leader and a follower, their gauges
//!   and memory; plain agents (no lease) homed on chosen members.
//! - `kv_put`: `kv-put`, N clients putting keys of their own in a loop.
//! - `kv_watch`: `watch`, put → event latency through a follower, and `--watchers N` pending
//!   polls on one member woken by one put.
//! - `kv_fill`: `kv-fill`, K keys in `kv.txn` batches, then each member's memory.
//! - `recipes`: the recipe scenarios' subcommands, one file each:
//!   - `election`: `election`, leadership handovers among N candidates (the `cycles` loop
//!     with campaign → resign);
//!   - `barrier`: `barrier`, rounds of a barrier of N agents, timed from the last arrival.
//!   - `rwlock`: `rwlock`, readers and a writer on one read-write lock (the `cycles` loop,
//!     shared and exclusive), against the agents' uncontended exclusive rate.
//! - `runners`: the runs of `uncontended`, `semaphore` and `failover`.
//! - `memory`: a process's memory from /proc.
//! - `own_cluster`: `uncontended`/`contended --members N`, the cycles on a cluster of their
//!   own, the agents homed over the members or on the leader.
//! - `cpu`: with `uncontended`/`contended --members N`, the members' CPU per committed entry.
//! - `history`: grant records and what follows from them.
//! - `report`: the figures, as a table or JSON.
//! - `error`: [`BenchError`], what [`run`] fails with.

mod accounts;
mod airspace;
mod barrier;
mod cpu;
#[cfg(test)]
mod cpu_test;
mod cycles;
mod election;
mod error;
mod failover;
mod flood;
mod history;
mod idle_swarm;
mod kv_cluster;
mod kv_fill;
mod kv_put;
#[cfg(test)]
mod kv_scenarios_test;
mod kv_watch;
mod memory;
mod own_cluster;
mod recipes;
#[cfg(test)]
mod recipes_test;
mod reclaim;
mod report;
mod runners;
mod rwlock;
mod scale;
mod swarm;

use std::path::Path;

use clap::{Args, Subcommand};
use hivekeeper_agent::{AgentConfig, Resource};
use hivekeeper_client_flags::{Login, TlsArgs};
use serde_json::Value;

pub use error::BenchError;
use own_cluster::OwnCluster;
use report::Report;

/// Flags of `hivekeeper bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

/// The scenarios.
#[derive(Debug, Subcommand)]
enum Scenario {
    /// N agents, each on its own lock: acquire → release as fast as the service answers.
    Uncontended {
        #[command(flatten)]
        common: Common,
        /// Number of agents (each one MQTT connection and one lease).
        #[arg(long, default_value_t = 100)]
        agents: usize,
        /// One more agent floods the service meanwhile: a raw MQTT client publishing writes
        /// as fast as its client takes them, without backoff. The
        /// report adds what it sent, how it was answered (`rate_limited` past its rate) and
        /// how many of the swarm's sessions were lost.
        #[arg(long)]
        flood: bool,
        /// What each agent acquires and releases: its own lock, its own waypoint (a 10 m
        /// cylinder), or its own route of 12 cylinders with a time window (to compare a route
        /// with a waypoint). Agents are a kilometre apart: nothing conflicts.
        #[arg(long, value_enum, default_value_t = airspace::ResourceShape::Lock)]
        resource: airspace::ResourceShape,
        #[command(flatten)]
        own: OwnCluster,
    },
    /// N agents on K locks (agent i on lock i mod K): FIFO handovers. K = 1 is one hot lock.
    Contended {
        #[command(flatten)]
        common: Common,
        /// Number of agents.
        #[arg(long, default_value_t = 100)]
        agents: usize,
        /// Number of lock names.
        #[arg(long, default_value_t = 1)]
        locks: usize,
        #[command(flatten)]
        own: OwnCluster,
    },
    /// N agents on one counting semaphore of `limit` permits, one permit each.
    Semaphore {
        #[command(flatten)]
        common: Common,
        /// Number of agents.
        #[arg(long, default_value_t = 100)]
        agents: usize,
        /// The semaphore's capacity.
        #[arg(long, default_value_t = 8)]
        limit: u32,
    },
    /// A holder's keepalives stop abruptly while a waiter is queued: the time from the
    /// holder's last keepalive to the waiter's grant, for each TTL. Bounded by --rounds, and
    /// each round by ten TTLs (not by --duration-s).
    Reclaim {
        #[command(flatten)]
        common: Common,
        /// The holder's lease TTLs to measure, ms (each at least the service's minimum).
        #[arg(long, value_delimiter = ',', default_value = "5000,1000,500")]
        ttl_ms: Vec<u64>,
        /// Rounds per TTL.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Many idle agents holding leases kept alive while a contended run goes on: keepalive
    /// success, latencies under that load, node memory.
    ///
    /// Against the agent endpoint (`hivekeeper serve`) or a node behind Mosquitto
    /// (`serve --mqtt-url`, give the broker's address as --brokers; docs/OPERATIONS.md). Raise
    /// `ulimit -n` above the agent count for the bench and the node or broker.
    Scale {
        #[command(flatten)]
        common: Common,
        /// Idle agents, each with a lease kept alive (TTL --ttl-ms).
        #[arg(long, default_value_t = 10_000)]
        idle_agents: usize,
        /// Busy agents running `contended`.
        #[arg(long, default_value_t = 100)]
        agents: usize,
        /// Lock names of the busy agents.
        #[arg(long, default_value_t = 1)]
        locks: usize,
        #[command(flatten)]
        idle: idle_swarm::IdleSettings,
        /// Processes holding the idle agents: above 1, this many child processes share them,
        /// so that none needs more sockets than its `nofile` limit (e.g. 3 for 48,000 agents
        /// under a limit of 20,000). Not with --user.
        #[arg(long, default_value_t = 1)]
        processes: usize,
        /// The nodes' process ids (comma-separated), to read their memory from
        /// /proc/<pid>/status. Without it, the one running `hivekeeper serve` process is used
        /// if there is exactly one.
        #[arg(long, value_delimiter = ',')]
        node_pid: Vec<u32>,
    },
    /// The idle agents of one `scale --processes` child (started by `scale` itself).
    #[command(hide = true)]
    IdleSwarm {
        #[command(flatten)]
        common: Common,
        /// Idle agents this child holds.
        #[arg(long)]
        idle_agents: usize,
        /// This child's index (its agents' names).
        #[arg(long)]
        part: usize,
        #[command(flatten)]
        idle: idle_swarm::IdleSettings,
    },
    /// Starts its own cluster (`hivekeeper serve` processes on loopback ports, data in a
    /// temporary directory), runs `contended` through every member, and kills the leader with
    /// SIGKILL every --kill-every-s, restarting it after: the gap from each kill to the first
    /// grant through a surviving member, the longest time with no grant, and the
    /// mutual-exclusion check over every grant. --brokers is ignored.
    Failover {
        #[command(flatten)]
        common: Common,
        /// Cluster members.
        #[arg(long, default_value_t = 3)]
        members: usize,
        /// Leader kills.
        #[arg(long, default_value_t = 10)]
        kills: usize,
        /// Seconds of traffic before each kill.
        #[arg(long, default_value_t = 3)]
        kill_every_s: u64,
        /// Number of agents.
        #[arg(long, default_value_t = 100)]
        agents: usize,
        /// Number of lock names.
        #[arg(long, default_value_t = 10)]
        locks: usize,
        /// Pause the leader (SIGSTOP) for this many seconds, then continue it (SIGCONT),
        /// instead of killing and restarting it: a GC or VM stall, whose sockets stay open
        /// and silent. The gap is then from the SIGSTOP.
        #[arg(long, value_name = "S")]
        pause_s: Option<u64>,
    },
    /// Starts its own cluster (as `failover` does) and puts keys through it: N clients (one
    /// agent, one MQTT connection each, spread over the members) each put keys of their own
    /// (100-byte values) one after another, for --duration-s or --puts-per-client. Reports
    /// puts a second and the commit latency of a put (sent → answered), and each member's
    /// memory. `--clients 1` measures the latency of one put at a time. --brokers, --user and
    /// the TLS flags are ignored (a plaintext cluster without accounts), and so are the lock
    /// flags (--cycles, --hold-ms, --session-ttl-ms).
    KvPut {
        #[command(flatten)]
        common: Common,
        /// Cluster members.
        #[arg(long, default_value_t = 3)]
        members: usize,
        /// Clients putting at once.
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// Most puts per client: the run also stops when every client did them.
        #[arg(long, default_value_t = 1_000_000)]
        puts_per_client: u64,
    },
    /// Starts its own cluster and measures how soon a watcher hears of a put: a watcher
    /// (the SDK's watch, `watch.poll` long polls) connected to a follower, a writer putting
    /// on the leader one key at a time (--puts, within --duration-s); reports put sent →
    /// event received and the commit latency. With --watchers N, the fan-out instead: N
    /// watchers (one agent each) with a poll pending on one follower, then one put; reports
    /// when each heard of it, and the follower's memory before the watchers and with every
    /// poll pending. Raise `ulimit -n` above N. --brokers, --user, the TLS flags and the lock
    /// flags are ignored, as for kv-put.
    Watch {
        #[command(flatten)]
        common: Common,
        /// Cluster members (at least 2: the watcher is on a follower).
        #[arg(long, default_value_t = 3)]
        members: usize,
        /// Puts of the latency run, each waited for at the watcher.
        #[arg(long, default_value_t = 1_000)]
        puts: u64,
        /// Fan-out: this many watchers, each one poll pending on the same follower, woken by
        /// one put.
        #[arg(long, value_name = "N")]
        watchers: Option<usize>,
        /// Fan-out: watchers per agent (one MQTT connection), 1 to 64 (the service's bound on
        /// one agent's pending polls). 1, the default: one connection per watcher, as a swarm
        /// of drones each watching; more: the polls' own cost apart from the connections'.
        #[arg(long, default_value_t = 1, value_name = "K")]
        polls_per_agent: usize,
    },
    /// Starts its own cluster and fills it with --keys keys (32-byte names, 100-byte values)
    /// in `kv.txn` batches, from several clients at once; reports the fill rate (keys a
    /// second), a batch's commit latency, and each member's memory once every member holds
    /// every key. --duration-s does not bound it. --brokers, --user, the TLS flags and the lock
    /// flags are ignored, as for kv-put.
    KvFill {
        #[command(flatten)]
        common: Common,
        /// Cluster members.
        #[arg(long, default_value_t = 3)]
        members: usize,
        /// Keys to write.
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
        /// Puts per `kv.txn`; by default as many as fit in one request (at most 64).
        #[arg(long)]
        batch: Option<usize>,
        /// Clients writing batches at once.
        #[arg(long, default_value_t = 8)]
        clients: usize,
    },
    /// `election`, `barrier`, `rwlock` (recipes.rs).
    #[command(flatten)]
    Recipe(recipes::RecipeScenario),
}

/// What a scenario that starts its own cluster is given: the `hivekeeper` binary to start,
/// the common flags and the run's id.
#[derive(Clone, Copy)]
struct Launch<'a> {
    hivekeeper: &'a Path,
    common: &'a Common,
    run: &'a swarm::RunId,
}

impl<'a> Launch<'a> {
    fn new(hivekeeper: &'a Path, common: &'a Common, run: &'a swarm::RunId) -> Self {
        Launch {
            hivekeeper,
            common,
            run,
        }
    }
}

/// Flags every scenario takes.
#[derive(Debug, Clone, Args)]
struct Common {
    /// Brokers of the service, `host:port,...` (any node of a cluster). `--broker` is a
    /// hidden alias, as for the admin commands.
    #[arg(
        long,
        alias = "broker",
        value_delimiter = ',',
        default_value = hivekeeper_agent::DEFAULT_BROKER
    )]
    brokers: Vec<String>,
    /// Length of the measured phase, seconds (after every agent connected).
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Most acquire → release cycles per agent: the run also stops when every agent did them.
    #[arg(long, default_value_t = 1_000_000)]
    cycles: u64,
    /// How long a holder keeps what it acquired before releasing it, ms.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    /// TTL of every agent's lease, ms.
    #[arg(long = "session-ttl-ms", default_value_t = 5_000)]
    session_ttl_ms: u64,
    /// Agents connecting at once while the swarm is built.
    #[arg(long, default_value_t = 64)]
    connect_concurrency: usize,
    /// Print the report as JSON (for scripts) instead of a table.
    #[arg(long)]
    json: bool,
    /// With `--user` (an admin account), each agent gets an account of its own before it
    /// connects, removed at the end (a service with `--auth`). Not used by `failover`, which
    /// runs its own cluster without authentication.
    #[command(flatten)]
    login: Login,
    /// TLS to the brokers (not for `failover`, which runs its own plaintext cluster).
    #[command(flatten)]
    tls: TlsArgs,
}

impl Common {
    /// The settings every bench agent starts from: the brokers and TLS.
    fn agent_base(&self) -> anyhow::Result<AgentConfig> {
        anyhow::ensure!(
            self.tls.tls_cert.is_none(),
            "--tls-cert: the bench runs many agent ids and one client certificate names one \
             (its CN); measure TLS against an endpoint without --mqtt-client-ca"
        );
        Ok(self.tls.apply(AgentConfig {
            brokers: self.brokers.clone(),
            ..AgentConfig::default()
        })?)
    }
}

/// Runs `hivekeeper bench`; `hivekeeper` is the binary whose `serve` the `failover` scenario's
/// members run (the caller's own executable: `bench` is its subcommand).
pub fn run(args: BenchArgs, hivekeeper: &Path) -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    if let Scenario::IdleSwarm {
        common,
        idle_agents,
        part,
        idle,
    } = &args.scenario
    {
        let child = idle_swarm::child(common, idle, *idle_agents, *part);
        return runtime.block_on(child).map_err(BenchError::Scenario);
    }
    let (report, json) = runtime
        .block_on(scenario(args.scenario, hivekeeper))
        .map_err(BenchError::Scenario)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(BenchError::Encode)?
        );
    } else {
        report.print_table();
    }
    if !report.passed() {
        return Err(BenchError::MutualExclusion {
            violations: report.mutual_exclusion.violations,
        });
    }
    Ok(())
}

async fn scenario(scenario: Scenario, hivekeeper: &Path) -> anyhow::Result<(Report, bool)> {
    let accounts = match &scenario {
        // These run their own cluster, without authentication.
        Scenario::Failover { .. }
        | Scenario::Uncontended {
            own: own_cluster::OwnCluster {
                members: Some(_), ..
            },
            ..
        }
        | Scenario::Contended {
            own: own_cluster::OwnCluster {
                members: Some(_), ..
            },
            ..
        }
        | Scenario::KvPut { .. }
        | Scenario::Watch { .. }
        | Scenario::KvFill { .. }
        | Scenario::IdleSwarm { .. }
        | Scenario::Recipe(_) => None,
        other => accounts::Accounts::open(other.common()).await?,
    };
    let run = swarm::RunId::new().with_accounts(accounts);
    let result = run_scenario(scenario, &run, hivekeeper).await;
    if let Some(accounts) = run.accounts() {
        let failed = accounts.remove_all().await;
        if failed > 0 {
            eprintln!("hivekeeper bench: {failed} of the run's accounts could not be removed");
        }
    }
    result
}

impl Scenario {
    /// The flags every scenario shares.
    fn common(&self) -> &Common {
        match self {
            Scenario::Uncontended { common, .. }
            | Scenario::Contended { common, .. }
            | Scenario::Semaphore { common, .. }
            | Scenario::Reclaim { common, .. }
            | Scenario::Scale { common, .. }
            | Scenario::IdleSwarm { common, .. }
            | Scenario::Failover { common, .. }
            | Scenario::KvPut { common, .. }
            | Scenario::Watch { common, .. }
            | Scenario::KvFill { common, .. } => common,
            Scenario::Recipe(recipe) => recipe.common(),
        }
    }
}

/// Runs one scenario on the run's names; returns its report, with the common and the
/// scenario's own parameters recorded, and whether to print it as JSON.
async fn run_scenario(
    scenario: Scenario,
    run: &swarm::RunId,
    hivekeeper: &Path,
) -> anyhow::Result<(Report, bool)> {
    let run = run.clone();
    let (report, common, name, parameters): Outcome = match scenario {
        Scenario::Uncontended {
            common,
            agents,
            flood,
            resource,
            own,
        } => {
            let launch = Launch::new(hivekeeper, &common, &run);
            let (report, parameters) =
                runners::run_uncontended(launch, agents, flood, resource, own).await?;
            (report, common, "uncontended", parameters)
        }
        Scenario::Contended {
            common,
            agents,
            locks,
            own,
        } => {
            anyhow::ensure!(locks >= 1, "--locks must be at least 1");
            let resources = (0..agents)
                .map(|i| Resource::lock(run.resource(&format!("lock-{}", i % locks))))
                .collect();
            let launch = Launch::new(hivekeeper, &common, &run);
            let report = own_cluster::run_cycles(launch, agents, resources, own).await?;
            let mut parameters = vec![("agents", agents.into()), ("locks", locks.into())];
            parameters.extend(own.parameters());
            (report, common, "contended", parameters)
        }
        Scenario::Semaphore {
            common,
            agents,
            limit,
        } => {
            let (report, parameters) = runners::run_semaphore(&common, &run, agents, limit).await?;
            (report, common, "semaphore", parameters)
        }
        Scenario::Reclaim {
            common,
            ttl_ms,
            rounds,
        } => {
            let report = reclaim::run(&common, &run, &ttl_ms, rounds).await?;
            (report, common, "reclaim", vec![("rounds", rounds.into())])
        }
        Scenario::Scale {
            common,
            idle_agents,
            agents,
            locks,
            idle,
            processes,
            node_pid,
        } => {
            anyhow::ensure!(locks >= 1, "--locks must be at least 1");
            let idle_ttl_ms = idle.ttl_ms(&common);
            let plan = scale::ScalePlan {
                idle_agents,
                idle,
                processes,
                agents,
                locks,
                node_pids: node_pid,
            };
            let report = scale::run(&common, &run, plan).await?;
            let parameters = vec![
                ("agents", agents.into()),
                ("locks", locks.into()),
                ("idle_agents", idle_agents.into()),
                ("idle_ttl_ms", idle_ttl_ms.into()),
                ("processes", processes.into()),
            ];
            (report, common, "scale", parameters)
        }
        own_cluster => run_on_own_cluster(own_cluster, &run, hivekeeper).await?,
    };
    let mut report = with_common(report, &common);
    report.scenario = name.into();
    for (key, value) in parameters {
        report.parameters.insert(key.into(), value);
    }
    Ok((report, common.json))
}

/// What a scenario's run gives [`run_scenario`]: its report, its flags, its name and its own
/// parameters.
type Outcome = (Report, Common, &'static str, Parameters);

/// The scenarios that always start a cluster of their own: `failover`, the key scenarios and
/// the recipes.
async fn run_on_own_cluster(
    scenario: Scenario,
    run: &swarm::RunId,
    hivekeeper: &Path,
) -> anyhow::Result<Outcome> {
    let run = run.clone();
    Ok(match scenario {
        Scenario::Failover {
            common,
            members,
            kills,
            kill_every_s,
            agents,
            locks,
            pause_s,
        } => {
            let plan = failover::Plan {
                size: members,
                kills,
                kill_every: std::time::Duration::from_secs(kill_every_s),
                fault: pause_s.map_or(failover::Fault::Kill, |s| {
                    failover::Fault::Pause(std::time::Duration::from_secs(s))
                }),
                agents,
                locks,
            };
            let launch = Launch::new(hivekeeper, &common, &run);
            let (report, parameters) = runners::run_failover(launch, plan, pause_s).await?;
            (report, common, "failover", parameters)
        }
        Scenario::KvPut {
            common,
            members,
            clients,
            puts_per_client,
        } => {
            let plan = kv_put::Plan {
                members,
                clients,
                puts_per_client,
            };
            let report = kv_put::run(Launch::new(hivekeeper, &common, &run), plan).await?;
            let parameters = vec![
                ("members", members.into()),
                ("clients", clients.into()),
                ("puts_per_client", puts_per_client.into()),
                ("brokers", "its own cluster".into()),
            ];
            (report, common, "kv-put", parameters)
        }
        Scenario::Watch {
            common,
            members,
            puts,
            watchers,
            polls_per_agent,
        } => {
            let plan = kv_watch::Plan {
                members,
                puts,
                watchers,
                polls_per_agent,
            };
            let report = kv_watch::run(Launch::new(hivekeeper, &common, &run), plan).await?;
            let parameters = vec![
                ("members", members.into()),
                ("puts", puts.into()),
                ("watchers", watchers.into()),
                ("polls_per_agent", polls_per_agent.into()),
                ("brokers", "its own cluster".into()),
            ];
            (report, common, "watch", parameters)
        }
        Scenario::KvFill {
            common,
            members,
            keys,
            batch,
            clients,
        } => {
            let plan = kv_fill::Plan {
                members,
                keys,
                batch,
                clients,
            };
            let report = kv_fill::run(Launch::new(hivekeeper, &common, &run), plan).await?;
            let parameters = vec![
                ("members", members.into()),
                ("keys", keys.into()),
                ("batch", batch.unwrap_or_else(kv_fill::batch_max).into()),
                ("clients", clients.into()),
                ("brokers", "its own cluster".into()),
            ];
            (report, common, "kv-fill", parameters)
        }
        Scenario::Recipe(recipe) => recipe.run(hivekeeper, &run).await?,
        other => anyhow::bail!("{other:?} does not start a cluster of its own"),
    })
}

/// A scenario's own parameters, in the order they are recorded.
type Parameters = Vec<(&'static str, Value)>;

/// Records the common parameters in the report.
fn with_common(mut report: Report, common: &Common) -> Report {
    let parameters = &mut report.parameters;
    parameters.insert("duration_s".into(), common.duration_s.into());
    parameters.insert("hold_ms".into(), common.hold_ms.into());
    parameters.insert("session_ttl_ms".into(), common.session_ttl_ms.into());
    parameters.insert("brokers".into(), common.brokers.join(",").into());
    report
}
