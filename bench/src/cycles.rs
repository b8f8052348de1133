//! The acquire → release loop of `uncontended`, `contended`, `semaphore`, the busy agents of
//! `scale`, and `election`'s campaign → resign: every agent cycles on its [`Claim`] until the
//! measured phase ends or it did `--cycles`, recording each grant (a leadership is a grant:
//! one holder at a time, its token strictly increasing).

use std::collections::HashMap;
use std::time::Duration;

use hivekeeper_agent::{AgentError, Guard, Leadership, Resource, Session, Wait};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Common;
use super::history::{self, Grant, micros};
use super::report::{Errors, Latency, Report};
use super::swarm::{self, Member, RunId};

/// What an agent of the loop takes and gives back in each cycle.
#[derive(Debug, Clone)]
pub enum Claim {
    /// A lock, semaphore permits, a waypoint or a route: acquire → release.
    Resource(Resource),
    /// The leadership of an election: campaign with `value` → resign.
    Leadership {
        /// The election's name.
        election: String,
        /// What the candidate announces when it leads.
        value: String,
    },
}

impl From<Resource> for Claim {
    fn from(resource: Resource) -> Self {
        Claim::Resource(resource)
    }
}

impl Claim {
    /// The name of what is claimed: the grants of one name are checked together.
    fn name(&self) -> &str {
        match self {
            Claim::Resource(resource) => resource.name(),
            Claim::Leadership { election, .. } => election,
        }
    }

    /// How taking and giving back are called, for the errors.
    fn verbs(&self) -> (&'static str, &'static str) {
        match self {
            Claim::Resource(_) => ("acquire", "release"),
            Claim::Leadership { .. } => ("campaign", "resign"),
        }
    }

    /// Takes it through `session`, waiting as `wait` says.
    async fn take(&self, session: &Session, wait: Wait) -> Result<Held, AgentError> {
        Ok(match self {
            Claim::Resource(resource) => {
                Held::Guard(session.acquire(resource.clone(), wait).await?)
            }
            Claim::Leadership { election, value } => Held::Leadership(
                session
                    .campaign_wait(election.clone(), value.clone(), wait)
                    .await?,
            ),
        })
    }
}

/// What a [`Claim`] gave: a guard or a leadership.
enum Held {
    Guard(Guard),
    Leadership(Leadership),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Guard(guard) => guard.token(),
            Held::Leadership(leadership) => leadership.token(),
        }
    }

    /// Releases the guard or resigns the leadership, waiting for the answer.
    async fn give_back(self) -> Result<(), AgentError> {
        match self {
            Held::Guard(guard) => guard.release().await,
            Held::Leadership(leadership) => leadership.resign().await,
        }
    }
}

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

/// The measured phase over connected agents, each paired with what it claims; `capacity` as
/// for [`run`] (1 for an election: one leader).
pub async fn measure<C: Into<Claim>>(
    common: &Common,
    members: Vec<(Member, C)>,
    capacity: usize,
) -> Report {
    measure_with_grants(common, members, capacity).await.0
}

/// [`measure`], also returning every grant (for figures a scenario derives itself).
pub async fn measure_with_grants<C: Into<Claim>>(
    common: &Common,
    members: Vec<(Member, C)>,
    capacity: usize,
) -> (Report, Vec<Grant>) {
    let agents = members.len();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(common.duration_s);
    let hold = Duration::from_millis(common.hold_ms);
    // The history groups grants by resource: number the names.
    let mut numbers: HashMap<String, usize> = HashMap::new();
    let mut tasks = JoinSet::new();
    for (index, (member, claim)) in members.into_iter().enumerate() {
        let claim = claim.into();
        let next = numbers.len();
        let number = *numbers.entry(claim.name().to_string()).or_insert(next);
        let cycles_max = common.cycles;
        tasks.spawn(agent_loop(
            index, member, claim, number, deadline, hold, cycles_max,
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
    claim: Claim,
    resource_number: usize,
    deadline: Instant,
    hold: Duration,
    cycles_max: u64,
) -> AgentRun {
    let mut run = AgentRun::default();
    let session = &member.session;
    let (take, give_back) = claim.verbs();
    while run.cycles < cycles_max {
        let acquire_at = Instant::now();
        let left = deadline.saturating_duration_since(acquire_at);
        // `wait_ms: 0` would be a try-lock: stop instead when under a millisecond is left.
        if left < Duration::from_millis(1) {
            break;
        }
        let held = match claim.take(session, Wait::AtMost(left)).await {
            Ok(held) => held,
            // The wait ran into the end of the measured phase.
            Err(AgentError::WaitTimeout) => break,
            Err(error) => {
                run.errors.add(format!("{take}: {error}"));
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
        let token = held.token();
        let release_at = Instant::now();
        run.grants.push(Grant {
            resource: resource_number,
            agent: index,
            token,
            acquire_at,
            granted_at,
            release_at: Some(release_at),
        });
        match held.give_back().await {
            Ok(()) => run.cycles += 1,
            Err(error) => run.errors.add(format!("{give_back}: {error}")),
        }
    }
    run
}
