//! The acquire → release loop of `uncontended`, `contended`, `semaphore` and the busy agents
//! of `scale`: every agent cycles on its resource until the measured phase ends or it did
//! `--cycles`, recording each grant.

use std::collections::HashMap;
use std::time::Duration;

use hivekeeper_agent::{AgentError, Resource, Wait};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Common;
use super::history::{self, Grant, micros};
use super::report::{Errors, Latency, Report};
use super::swarm::{self, Member, RunId};

/// What one agent's loop produced.
#[derive(Debug, Default)]
struct AgentRun {
    grants: Vec<Grant>,
    acquire_us: Vec<u64>,
    cycles: u64,
    errors: Errors,
}

/// Connects one agent per entry of `resources` (agent i cycles on `resources[i]`) and runs
/// the loop. `capacity` is how many may hold one resource at once (1 for a lock, the limit
/// for a semaphore), for the mutual-exclusion check.
pub async fn run(
    common: &Common,
    run: &RunId,
    agents: usize,
    resources: Vec<Resource>,
    capacity: usize,
) -> anyhow::Result<Report> {
    let (members, connect_errors) = connect(common, run, agents).await?;
    let mut report = measure(
        common,
        members.into_iter().zip(resources).collect(),
        capacity,
    )
    .await;
    report.errors.merge(connect_errors);
    Ok(report)
}

/// Connects the `agents` that cycle (role `agent`), with the common flags' TTL and
/// concurrency: those that connected, and the connect errors.
pub async fn connect(
    common: &Common,
    run: &RunId,
    agents: usize,
) -> anyhow::Result<(Vec<Member>, Errors)> {
    anyhow::ensure!(agents >= 1, "--agents must be at least 1");
    swarm::connect_agents(
        &common.agent_base()?,
        run,
        agents,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await
}

/// The measured phase over connected agents, each paired with its resource.
pub async fn measure(common: &Common, members: Vec<(Member, Resource)>, capacity: usize) -> Report {
    measure_with_grants(common, members, capacity).await.0
}

/// [`measure`], also returning every grant (for figures a scenario derives itself).
pub async fn measure_with_grants(
    common: &Common,
    members: Vec<(Member, Resource)>,
    capacity: usize,
) -> (Report, Vec<Grant>) {
    let agents = members.len();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(common.duration_s);
    let hold = Duration::from_millis(common.hold_ms);
    // The history groups grants by resource: number the names.
    let mut numbers: HashMap<String, usize> = HashMap::new();
    let mut tasks = JoinSet::new();
    for (index, (member, resource)) in members.into_iter().enumerate() {
        let next = numbers.len();
        let number = *numbers.entry(resource.name().to_string()).or_insert(next);
        let cycles_max = common.cycles;
        tasks.spawn(agent_loop(
            index, member, resource, number, deadline, hold, cycles_max,
        ));
    }
    let mut grants = Vec::new();
    let mut acquire_us = Vec::new();
    let mut cycles = 0;
    let mut errors = Errors::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(run) => {
                grants.extend(run.grants);
                acquire_us.extend(run.acquire_us);
                cycles += run.cycles;
                errors.merge(run.errors);
            }
            Err(panic) => errors.add(format!("agent task: {panic}")),
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let report = Report {
        elapsed_s,
        cycles,
        ops_per_s: cycles as f64 / elapsed_s.max(1e-9),
        acquire: Latency::from_micros(&acquire_us),
        // With several permits the bench cannot tell which release freed the permit a waiter
        // got (the latest one before its grant would make the figure look better than it
        // is), so handovers are measured for locks only.
        handover: if capacity == 1 {
            Latency::from_micros(&history::handovers_us(&grants))
        } else {
            Latency::default()
        },
        fairness: history::fairness(&grants, agents),
        errors,
        mutual_exclusion: history::check_exclusion(&grants, capacity),
        ..Report::default()
    };
    (report, grants)
}

/// One agent: acquire (waiting at most until the deadline), hold, release; again.
async fn agent_loop(
    index: usize,
    member: Member,
    resource: Resource,
    resource_number: usize,
    deadline: Instant,
    hold: Duration,
    cycles_max: u64,
) -> AgentRun {
    let mut run = AgentRun::default();
    let session = &member.session;
    while run.cycles < cycles_max {
        let acquire_at = Instant::now();
        let left = deadline.saturating_duration_since(acquire_at);
        // `wait_ms: 0` would be a try-lock: stop instead when under a millisecond is left.
        if left < Duration::from_millis(1) {
            break;
        }
        let guard = match session.acquire(resource.clone(), Wait::AtMost(left)).await {
            Ok(guard) => guard,
            // The wait ran into the end of the measured phase.
            Err(AgentError::WaitTimeout) => break,
            Err(error) => {
                run.errors.add(format!("acquire: {error}"));
                if !session.state().is_live() {
                    break;
                }
                // A refusal repeated at once would spin: pause as a real agent would.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let granted_at = Instant::now();
        run.acquire_us.push(micros(granted_at - acquire_at));
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let token = guard.token();
        let release_at = Instant::now();
        run.grants.push(Grant {
            resource: resource_number,
            agent: index,
            token,
            acquire_at,
            granted_at,
            release_at: Some(release_at),
        });
        match guard.release().await {
            Ok(()) => run.cycles += 1,
            Err(error) => run.errors.add(format!("release: {error}")),
        }
    }
    run
}
