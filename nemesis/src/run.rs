//! The run: start the cluster, start every workload, inject the faults on their schedule,
//! stop, check the history and report ([`run`]). The flags are [`NemesisArgs`]; the report is
//! [`NemesisReport`], one [`Window`] per fault.
//!
//! Bounded: the faults stop at `--duration-s`, the workloads a few seconds later, every wait
//! for the cluster is bounded (30 s), and the cluster (processes, namespaces, mounts, files) is
//! stopped and removed when the run ends, whatever its outcome.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use hivekeeper_local_cluster::{Cluster, LIBFAKETIME, Options};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::faults::FaultKind;
use crate::history::{History, Recorder, Timeline};
use crate::schedule::{FaultRecord, Schedule, inject_on_schedule};
use crate::store::FencedStore;
use crate::workload::{self, Context};
use crate::{
    barriers, check, client, elections, hivekeeper_binary, hold_times, keys, rw_locks, sentinel,
    watchers,
};

/// Flags of `hivekeeper-nemesis`.
#[derive(Debug, Args)]
pub struct NemesisArgs {
    /// The `hivekeeper` binary the members run (`hivekeeper serve`). Default: the one beside
    /// this binary (both are built into one target directory and installed into one bin
    /// directory), else the first on PATH.
    #[arg(long, value_name = "PATH")]
    hivekeeper: Option<std::path::PathBuf>,
    /// Members of the cluster it starts (3 or 5).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// How long faults are injected, seconds; the workloads run a few seconds more.
    #[arg(long, default_value_t = 120)]
    duration_s: u64,
    /// The fault classes to cycle through, comma-separated. Default: every class this machine
    /// can run (partitions and disk-full need root, clock faults Debian's `faketime`); the
    /// report lists the ones left out and why.
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<FaultKind>,
    /// How long each fault lasts, seconds: longer than an election timeout and than --ttl-ms.
    #[arg(long, default_value_t = 5)]
    fault_s: u64,
    /// Quiet time before each fault, seconds.
    #[arg(long, default_value_t = 3)]
    quiet_s: u64,
    /// The clients' lease TTL, ms.
    #[arg(long, default_value_t = 3_000)]
    ttl_ms: u64,
    /// How far the clock faults move a wall clock, seconds (more than the TTL).
    #[arg(long, default_value_t = 30)]
    clock_jump_s: i64,
    /// Locks of the fenced-register workload (one register each).
    #[arg(long, default_value_t = 3)]
    locks: usize,
    /// Agents of the fenced-register workload, spread over the locks and the members.
    #[arg(long, default_value_t = 9)]
    lock_agents: usize,
    /// Agents of the semaphore workload (one semaphore).
    #[arg(long, default_value_t = 4)]
    sem_agents: usize,
    /// The semaphore's limit.
    #[arg(long, default_value_t = 2)]
    sem_limit: u32,
    /// Agents of the lease workload.
    #[arg(long, default_value_t = 3)]
    lease_agents: usize,
    /// Agents of the keys workload (put, get, delete, compare-and-set; checked for
    /// linearizability); 0 leaves it, and the watchers, out.
    #[arg(long, default_value_t = 3)]
    kv_agents: usize,
    /// Keys the keys workload shares out among its agents (few, so their writes contend).
    #[arg(long, default_value_t = 4)]
    kv_keys: usize,
    /// Watchers of the keys' prefix (checked against etcd's watch guarantees).
    #[arg(long, default_value_t = 2)]
    watchers: usize,
    /// Agents of the election workload (campaign, proclaim, resign; one leader per name at a
    /// time, checked); 0 leaves it out.
    #[arg(long, default_value_t = 4)]
    election_agents: usize,
    /// Elections the election agents campaign on (few, so they contend).
    #[arg(long, default_value_t = 2)]
    elections: usize,
    /// Barriers of the barrier workload (enter, leave; nobody passes early or is dropped,
    /// checked); 0 leaves it out.
    #[arg(long, default_value_t = 2)]
    barriers: usize,
    /// Agents per barrier: more than --barrier-count, so its rounds mix them.
    #[arg(long, default_value_t = 3)]
    barrier_agents: usize,
    /// The members of one round of a barrier (its `count`).
    #[arg(long, default_value_t = 2)]
    barrier_count: u32,
    /// Agents of the hold-time workload (leases with a lock-delay that lapse, are revoked or
    /// release; holds with a max-hold; no grant inside a delay window, checked); 0 leaves it
    /// out.
    #[arg(long, default_value_t = 3)]
    hold_time_agents: usize,
    /// Locks the hold-time agents contend for.
    #[arg(long, default_value_t = 2)]
    hold_time_locks: usize,
    /// The hold-time agents' lease TTL, ms (short, so lapsed leases expire soon).
    #[arg(long, default_value_t = 1_000)]
    hold_time_ttl_ms: u64,
    /// The hold-time agents' `lock_delay_ms` (more than --hold-time-ttl-ms, so a grant at the
    /// lease's expiry without the delay would be caught).
    #[arg(long, default_value_t = 2_000)]
    lock_delay_ms: u64,
    /// The `max_hold_ms` of a hold-time agent's hold meant to end by its max-hold.
    #[arg(long, default_value_t = 300)]
    max_hold_ms: u64,
    /// Agents of the read-write lock workload (shared and exclusive holds, multi-locks,
    /// downgrades, leases that lapse; no exclusive holder beside anyone, checked); 0 leaves it
    /// out.
    #[arg(long, default_value_t = 4)]
    rw_lock_agents: usize,
    /// Locks the read-write lock agents contend for (a multi-lock takes two of them).
    #[arg(long, default_value_t = 3)]
    rw_locks: usize,
    /// The read-write lock agents' lease TTL, ms (short, so lapsed leases expire soon).
    #[arg(long, default_value_t = 1_000)]
    rw_lock_ttl_ms: u64,
    /// How long a holder keeps what it got, ms.
    #[arg(long, default_value_t = 20)]
    hold_ms: u64,
    /// How long an acquire waits in the queue, ms.
    #[arg(long, default_value_t = 4_000)]
    wait_ms: u64,
    /// Seed of the random choices (which member, which side); default: from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Write every record of the run (holds, writes, leases, waits; times in µs since the
    /// run's start) to this file as JSON, for a closer look at a window.
    #[arg(long, value_name = "FILE")]
    history: Option<std::path::PathBuf>,
    /// Keep the members' data and logs (under the temporary directory; the report names it).
    /// They are always kept when the run finds an anomaly or an error.
    #[arg(long)]
    keep_logs: bool,
}

/// One fault as it happened, and what the clients saw around it.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// The fault class.
    pub fault: FaultKind,
    /// Which members (or client) it hit.
    pub target: String,
    /// When it was injected, ms into the run.
    pub inject_ms: f64,
    /// When it was undone.
    pub undo_ms: f64,
    /// When the cluster had a leader again with every member up.
    pub recovered_ms: f64,
    /// The longest time from the injection to the recovery + 1 s without a grant to anyone.
    pub longest_no_grant_ms: f64,
    /// The longest any acquire sent in that span took to be answered (queueing included).
    pub longest_wait_ms: f64,
    /// Per member, the longest time the probes connected to it (each an uncontended try-lock
    /// every 100 ms) went without a grant in that span: the service's own unavailability;
    /// `None` when no probe was connected there.
    pub probe_gap_ms: Vec<Option<f64>>,
    /// The largest `probe_gap_ms` among members the fault did not hit (killed, paused or cut
    /// off): what a client of the majority saw.
    pub majority_probe_gap_ms: f64,
    /// The longest the probes homed on members the fault hit waited for any answer (a grant,
    /// or an error such as `unavailable`) to one try-lock; `None` when it hit no member.
    pub hit_probe_answer_ms: Option<f64>,
    /// From the injection to the first `unavailable` answer of a member the fault hit, as its
    /// sentinel (a raw client pinned to it, asking every 100 ms) saw it; `None` when no hit
    /// member answered `unavailable` in the span (a killed or paused member answers nothing).
    pub hit_unavailable_ms: Option<f64>,
    /// Acquires sent in that span, by outcome.
    pub outcomes: std::collections::BTreeMap<String, u64>,
    /// `pause-client`: from the pause to the next grant of its lock to another agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_ms: Option<f64>,
    /// A member that exited by itself, with its status (a full disk's member is expected to).
    pub exited: Vec<String>,
}

/// The run's report.
#[derive(Debug, Clone, Serialize)]
pub struct NemesisReport {
    /// Members.
    pub members: usize,
    /// The seed of the random choices.
    pub seed: u64,
    /// Wall-clock time of the run's start (Unix ms), to match the members' logs.
    pub wall_start_ms: u64,
    /// Fault classes left out, with why.
    pub not_run: Vec<String>,
    /// Every fault.
    pub windows: Vec<Window>,
    /// The checks.
    pub checks: check::Verdicts,
    /// The registers' final values.
    pub registers: std::collections::BTreeMap<String, u64>,
    /// Problems of the run itself (a cluster that did not recover, a workload that failed).
    pub errors: Vec<String>,
    /// Anomalies + errors: non-zero fails the run.
    pub anomalies: u64,
    /// Where the members' data and logs were kept, if they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
}

/// Runs `hivekeeper-nemesis`: the whole run, its report, and an error when it found any
/// anomaly.
pub fn run(args: NemesisArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let json = args.json;
    let report = runtime.block_on(nemesis(args))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else {
        print_table(&report);
    }
    anyhow::ensure!(
        report.anomalies == 0,
        "{} anomalies or errors (see the report)",
        report.anomalies
    );
    Ok(())
}

/// Whether this process runs as root (network namespaces, mounts).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The classes to run, and the ones left out with why.
fn plan(asked: &[FaultKind]) -> anyhow::Result<(Vec<FaultKind>, Vec<String>)> {
    let root = is_root();
    let faketime = Path::new(LIBFAKETIME).exists();
    let why_not = |kind: FaultKind| {
        if kind.needs_root() && !root {
            Some("needs root (network namespaces, tmpfs)")
        } else if kind.needs_faketime() && !faketime {
            Some("needs Debian's faketime (libfaketime)")
        } else {
            None
        }
    };
    if asked.is_empty() {
        let mut run = Vec::new();
        let mut not_run = Vec::new();
        for kind in FaultKind::ALL {
            match why_not(kind) {
                Some(why) => not_run.push(format!("{}: {why}", kind.name())),
                None => run.push(kind),
            }
        }
        return Ok((run, not_run));
    }
    for &kind in asked {
        if let Some(why) = why_not(kind) {
            anyhow::bail!("fault {} {why}", kind.name());
        }
    }
    Ok((asked.to_vec(), Vec::new()))
}

async fn nemesis(args: NemesisArgs) -> anyhow::Result<NemesisReport> {
    validate(&args)?;
    let (kinds, not_run) = plan(&args.faults)?;
    let seed = args.seed.unwrap_or_else(|| wall_clock_ms() / 1_000);
    let mut rng = fastrand::Rng::with_seed(seed);
    let run_id = format!("nem{}x{}", std::process::id(), seed % 10_000);
    let options = cluster_options(&kinds, args.members);
    let root = std::env::temp_dir().join(format!("hivekeeper-{run_id}"));
    let binary = hivekeeper_binary::find(args.hivekeeper.as_deref())?;
    let mut cluster = Cluster::start(&binary, root, &options).await?;
    let wall_start_ms = wall_clock_ms();
    let timeline = Timeline::start();
    let recorder = Recorder::default();
    let store = FencedStore::new(recorder.clone(), timeline);
    let faults_until = Instant::now() + Duration::from_secs(args.duration_s);
    let ctx = Context {
        brokers: cluster.brokers(),
        run: run_id.clone(),
        ttl_ms: args.ttl_ms,
        wait_ms: args.wait_ms,
        hold_ms: args.hold_ms,
        stop_at: faults_until + Duration::from_secs(args.quiet_s.max(3)),
        timeline,
        recorder: recorder.clone(),
    };
    let locks: Vec<String> = (0..args.locks)
        .map(|i| format!("{run_id}-lock{i}"))
        .collect();
    let tasks = spawn_workloads(&args, &ctx, &store, &locks, seed);
    let (pause_tx, pause_rx) = mpsc::channel(1);
    let paused_lock = locks[0].clone();
    let pausable = client::PausableClient::start(
        ctx.clone(),
        store.clone(),
        paused_lock.clone(),
        1 % args.members,
        pause_rx,
    )?;

    let mut errors = Vec::new();
    let schedule = Schedule {
        kinds: &kinds,
        until: faults_until,
        quiet: Duration::from_secs(args.quiet_s),
        hold: Duration::from_secs(args.fault_s),
        clock_jump_s: args.clock_jump_s,
    };
    let faults = inject_on_schedule(
        &schedule,
        &mut cluster,
        &mut rng,
        &pause_tx,
        timeline,
        &mut errors,
    )
    .await;
    drop(pause_tx);

    // The workloads end at ctx.stop_at; a request in flight then ends within its deadline.
    join_workloads(
        tasks,
        pausable,
        ctx.stop_at + Duration::from_secs(40),
        &mut errors,
    )
    .await;
    final_read(&args, &ctx, &mut errors).await;
    let end_us = timeline.now_us();
    let mut history = recorder.take();
    history.clock_faults = faults.iter().filter_map(FaultRecord::clock_fault).collect();
    if let Some(path) = &args.history {
        write_history(path, &history)?;
    }
    let checks = check::check(&history, args.sem_limit);
    let windows: Vec<Window> = faults
        .into_iter()
        .map(|fault| fault.window(&history, end_us, args.members, &paused_lock))
        .collect();
    let anomalies = checks.anomalies() + errors.len() as u64;
    let logs =
        (anomalies > 0 || args.keep_logs).then(|| cluster.keep_files().display().to_string());
    drop(cluster);
    Ok(NemesisReport {
        members: args.members,
        seed,
        wall_start_ms,
        not_run,
        windows,
        checks,
        registers: store.values().into_iter().collect(),
        errors,
        anomalies,
        logs,
    })
}

/// The wall clock, ms since the Unix epoch (0 before it): the run's start in the report (as
/// its timeline starts), and the seed when none is given.
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The keys workload's final read, into the history once every agent stopped; one that fails
/// is an error of the run (the checks would lack the keys' end state).
async fn final_read(args: &NemesisArgs, ctx: &Context, errors: &mut Vec<String>) {
    if args.kv_agents == 0 {
        return;
    }
    match keys::final_read(ctx, &keys::keys(&ctx.run, args.kv_keys)).await {
        Ok(read) => ctx.recorder.with(|history| history.final_read = Some(read)),
        Err(error) => errors.push(error),
    }
}

/// Every record of the run, as JSON, for `--history`.
fn write_history(path: &Path, history: &History) -> anyhow::Result<()> {
    let text = serde_json::to_string(history).context("encoding the history")?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Refuses flags a run cannot work with, before anything is started.
fn validate(args: &NemesisArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.members >= 3,
        "--members must be at least 3 (a majority must survive one fault)"
    );
    anyhow::ensure!(
        args.locks >= 1 && args.lock_agents >= 1,
        "--locks and --lock-agents must be at least 1"
    );
    anyhow::ensure!(args.sem_limit >= 1, "--sem-limit must be at least 1");
    anyhow::ensure!(
        args.kv_agents == 0 || args.kv_keys >= 1,
        "--kv-keys must be at least 1 when --kv-agents is"
    );
    anyhow::ensure!(
        args.election_agents == 0 || args.elections >= 1,
        "--elections must be at least 1 when --election-agents is"
    );
    anyhow::ensure!(
        args.barriers == 0 || (args.barrier_count >= 1 && args.barrier_agents >= 1),
        "--barrier-count and --barrier-agents must be at least 1 when --barriers is"
    );
    anyhow::ensure!(
        args.hold_time_agents == 0 || (args.hold_time_locks >= 1 && args.max_hold_ms >= 1),
        "--hold-time-locks and --max-hold-ms must be at least 1 when --hold-time-agents is"
    );
    anyhow::ensure!(
        args.rw_lock_agents == 0 || args.rw_locks >= 1,
        "--rw-locks must be at least 1 when --rw-lock-agents is"
    );
    Ok(())
}

/// The cluster the planned fault classes need: network namespaces for the partitions, clocks
/// under libfaketime for the clock faults, a small tmpfs per member for `disk-full`.
fn cluster_options(kinds: &[FaultKind], members: usize) -> Options {
    Options {
        size: members,
        netns: kinds
            .iter()
            .any(|k| k.needs_root() && *k != FaultKind::DiskFull),
        faketime: kinds.iter().any(|k| k.needs_faketime()),
        tmpfs_mib: kinds.contains(&FaultKind::DiskFull).then_some(128),
        extra_args: Vec::new(),
    }
}

/// Starts every workload agent, the probes and sentinels (one each per member) and the
/// semaphore's and elections' observers; they all stop by themselves at `ctx.stop_at`.
fn spawn_workloads(
    args: &NemesisArgs,
    ctx: &Context,
    store: &FencedStore,
    locks: &[String],
    seed: u64,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.lock_agents {
        let lock = locks[i % locks.len()].clone();
        // Each lock's agents on different members (agent i on lock i mod L would otherwise
        // put all of a lock's agents on one member when L = N).
        let home = (i + i / locks.len()) % args.members;
        tasks.spawn(workload::register(
            ctx.clone(),
            store.clone(),
            i,
            lock,
            home,
        ));
    }
    let semaphore = format!("{}-sem", ctx.run);
    for i in 0..args.sem_agents {
        tasks.spawn(workload::semaphore(
            ctx.clone(),
            i,
            semaphore.clone(),
            args.sem_limit,
        ));
    }
    for i in 0..args.lease_agents {
        tasks.spawn(workload::lease(ctx.clone(), i));
    }
    for home in 0..args.members {
        tasks.spawn(workload::probe(ctx.clone(), home));
        tasks.spawn(sentinel::sentinel(ctx.clone(), home));
    }
    tasks.spawn(workload::observer(ctx.clone(), semaphore));
    if args.kv_agents > 0 {
        let keys = keys::keys(&ctx.run, args.kv_keys);
        for i in 0..args.kv_agents {
            tasks.spawn(keys::agent(ctx.clone(), i, keys.clone()));
        }
        for i in 0..args.watchers {
            tasks.spawn(watchers::watcher(ctx.clone(), i, keys::prefix(&ctx.run)));
        }
    }
    if args.election_agents > 0 {
        let names = elections::names(&ctx.run, args.elections);
        for i in 0..args.election_agents {
            tasks.spawn(elections::candidate(ctx.clone(), i, names.clone(), seed));
        }
        tasks.spawn(elections::observer(ctx.clone(), names));
    }
    for b in 0..args.barriers {
        for j in 0..args.barrier_agents {
            let member = barriers::Member {
                index: b * args.barrier_agents + j,
                name: format!("{}-barrier{b}", ctx.run),
                count: args.barrier_count,
            };
            tasks.spawn(barriers::member(ctx.clone(), member, seed));
        }
    }
    let plan = hold_times::Plan {
        locks: hold_times::Plan::locks(&ctx.run, args.hold_time_locks),
        ttl_ms: args.hold_time_ttl_ms,
        lock_delay_ms: args.lock_delay_ms,
        max_hold_ms: args.max_hold_ms,
    };
    for i in 0..args.hold_time_agents {
        tasks.spawn(hold_times::agent(ctx.clone(), plan.clone(), i, seed));
    }
    let plan = rw_locks::Plan {
        locks: rw_locks::Plan::locks(&ctx.run, args.rw_locks),
        ttl_ms: args.rw_lock_ttl_ms,
    };
    for i in 0..args.rw_lock_agents {
        tasks.spawn(rw_locks::agent(ctx.clone(), plan.clone(), i, seed));
    }
    tasks
}

/// Waits for the workloads and the pausable client to stop, at most until `join_by`; one that
/// failed or did not stop in time is an error of the run (and is aborted).
async fn join_workloads(
    mut tasks: tokio::task::JoinSet<()>,
    pausable: tokio::task::JoinHandle<anyhow::Result<()>>,
    join_by: Instant,
    errors: &mut Vec<String>,
) {
    while let Ok(Some(joined)) = tokio::time::timeout_at(join_by, tasks.join_next()).await {
        if let Err(error) = joined {
            errors.push(format!("a workload task failed: {error}"));
        }
    }
    if !tasks.is_empty() {
        errors.push(format!(
            "{} workload tasks did not stop in time",
            tasks.len()
        ));
        tasks.abort_all();
    }
    match tokio::time::timeout_at(join_by, pausable).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(error))) => errors.push(format!("the pausable client: {error:#}")),
        Ok(Err(error)) => errors.push(format!("the pausable client's driver: {error}")),
        Err(_) => errors.push("the pausable client did not stop in time".into()),
    }
}

fn print_table(report: &NemesisReport) {
    println!(
        "nemesis: {} members, seed {}, {} faults",
        report.members,
        report.seed,
        report.windows.len()
    );
    println!(
        "{:<20} {:<30} {:>10} {:>12} {:>10} {:>12} {:>10}",
        "fault", "target", "no grant", "longest wait", "majority", "unavailable", "reclaim"
    );
    let or_dash = |ms: Option<f64>| ms.map_or(String::from("-"), |ms| format!("{ms:.0}ms"));
    for window in &report.windows {
        println!(
            "{:<20} {:<30} {:>8.0}ms {:>10.0}ms {:>8.0}ms {:>12} {:>10}",
            window.fault.name(),
            window.target,
            window.longest_no_grant_ms,
            window.longest_wait_ms,
            window.majority_probe_gap_ms,
            or_dash(window.hit_unavailable_ms),
            or_dash(window.reclaim_ms)
        );
    }
    for (name, verdict) in report.checks.named() {
        println!(
            "check {name:<10} {:>6} ops  {} anomalies",
            verdict.ops, verdict.anomalies
        );
        for sample in &verdict.samples {
            println!("    {sample}");
        }
        for undecided in &verdict.undecided {
            println!("    undecided: {undecided}");
        }
        for note in &verdict.notes {
            println!("    note: {note}");
        }
    }
    for line in &report.not_run {
        println!("not run: {line}");
    }
    for error in &report.errors {
        println!("error: {error}");
    }
    println!("anomalies: {}", report.anomalies);
    if let Some(logs) = &report.logs {
        println!("members' logs: {logs}");
    }
}
