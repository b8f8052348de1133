//! `barrier`: how soon a barrier of N agents lets them all through once the last one arrives,
//! on a cluster of the scenario's own (one member by default), round after round.
//!
//! ```text
//!  KvCluster::start (M members) ─▶ N agents, each an SDK agent with a session (a lease),
//!     spread over the members, each with a handle on one barrier of count N
//!  each of --rounds rounds, agent r mod N the last to arrive and the last to leave:
//!    enter: the N − 1 others send barrier.enter ─▶ the leader's
//!           hivekeeper_resource_waiters{kind="barrier"} reaches N − 1 (all applied, queued)
//!           ─▶ t0: the last one sends barrier.enter ─▶ every member's answer (t_i)
//!    leave: the same with barrier.leave (all are answered in the entry where the last leaves)
//!  report per phase, p50/p90/p99/max over the rounds:
//!    release = max t_i − t0 (the target's figure); spread = max t_i − min t_i
//! ```
//!
//! t0 is the send of the last arrival: its commit and apply are inside the figure. The moment
//! the service applied it cannot be seen from outside, but the spread comes close: every
//! member is answered in that one entry, so the first answer arrives right after the apply and
//! the spread is the fan-out of N answers to N connections (the bench's receiving included).
//!
//! What every round must show, else an error is counted: all members answered the same
//! generation, the round's larger than the last round's and the leave's equal to the enter's,
//! and no member answered before t0 (a member let through before the last had arrived).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hivekeeper_agent::{AgentConfig, AgentError, Barrier};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::history::{self, micros};
use super::kv_cluster::KvCluster;
use super::report::{Errors, Latency, Report};
use super::swarm;
use super::{Launch, Parameters};

/// The gauge of the arrivals and leavers waiting on barriers, from the applied entries.
const BARRIER_WAITERS: &str = "hivekeeper_resource_waiters{kind=\"barrier\"}";

/// How long the N − 1 first members of a phase may take to be queued, and its answers to come.
const PHASE_WAIT: Duration = Duration::from_secs(60);

/// The scenario's own flags.
#[derive(Debug, Clone, Copy, Args)]
pub struct Plan {
    /// Cluster members.
    #[arg(long, default_value_t = 1)]
    pub members: usize,
    /// Agents on the barrier, its count (each one agent: one MQTT connection, one lease),
    /// spread over the members. At most the service's `waiters_per_resource_max` + 1.
    #[arg(long, default_value_t = 1_000)]
    pub agents: usize,
    /// Rounds: every agent enters, then leaves, once a round.
    #[arg(long, default_value_t = 10)]
    pub rounds: u64,
}

impl Plan {
    /// The flags as the report records them.
    pub fn parameters(&self) -> Parameters {
        vec![
            ("members", self.members.into()),
            ("agents", self.agents.into()),
            ("rounds", self.rounds.into()),
            ("brokers", "its own cluster".into()),
        ]
    }
}

/// What `barrier` measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BarrierFigures {
    /// Members of the cluster the scenario started.
    pub members: usize,
    /// Agents on the barrier: its count.
    pub agents: usize,
    /// Time to connect them all, each with its lease, seconds.
    pub connect_s: f64,
    /// Rounds every member entered and left.
    pub rounds: u64,
    /// Each round: from sending the last arrival's `barrier.enter` to the last member's answer.
    pub release: Latency,
    /// Each round: from the first member's answer to its `barrier.enter` to the last's.
    pub release_spread: Latency,
    /// Each round: from sending the last leaver's `barrier.leave` to the last member's answer.
    pub leave: Latency,
    /// Each round: from the first member's answer to its `barrier.leave` to the last's.
    pub leave_spread: Latency,
}

impl BarrierFigures {
    /// The scenario's rows of the table.
    pub fn rows(&self, elapsed_s: f64, errors: u64) -> Vec<(String, String)> {
        vec![
            ("elapsed".into(), format!("{elapsed_s:.2} s")),
            ("members".into(), self.members.to_string()),
            (
                "agents".into(),
                format!("{}, connected in {:.1} s", self.agents, self.connect_s),
            ),
            ("rounds".into(), self.rounds.to_string()),
            ("last enter → all in".into(), self.release.row()),
            ("first in → all in".into(), self.release_spread.row()),
            ("last leave → all out".into(), self.leave.row()),
            ("first out → all out".into(), self.leave_spread.row()),
            ("errors".into(), errors.to_string()),
        ]
    }
}

/// The two phases of a round of a double barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Enter,
    Leave,
}

impl Phase {
    /// The phase's op, as errors name it.
    fn op(self) -> &'static str {
        match self {
            Phase::Enter => "barrier.enter",
            Phase::Leave => "barrier.leave",
        }
    }

    /// Member `index` sends the phase's request through `barrier` and waits for its answer:
    /// the handle back, and the generation answered with when the answer arrived.
    async fn send(
        self,
        index: usize,
        mut barrier: Barrier,
    ) -> (usize, Barrier, Result<(u64, Instant), AgentError>) {
        let answered = match self {
            Phase::Enter => barrier.enter().await,
            Phase::Leave => barrier.leave().await,
        };
        let at = Instant::now();
        (index, barrier, answered.map(|generation| (generation, at)))
    }
}

/// Every round's figures, and the generation of the last round entered.
#[derive(Debug, Default)]
struct Rounds {
    release_us: Vec<u64>,
    release_spread_us: Vec<u64>,
    leave_us: Vec<u64>,
    leave_spread_us: Vec<u64>,
    /// Rounds every member entered and left.
    completed: u64,
    /// The generation of the last round entered.
    generation: u64,
}

impl Rounds {
    /// Records a phase whose last request was sent at `sent` and whose members were answered
    /// `answers` (generation, arrival); returns what the answers should not have shown.
    fn record(&mut self, phase: Phase, sent: Instant, answers: &[(u64, Instant)]) -> Vec<String> {
        let mut wrong = Vec::new();
        let generations: BTreeSet<u64> =
            answers.iter().map(|&(generation, _)| generation).collect();
        if generations.len() > 1 {
            wrong.push(format!(
                "{}: one round answered generations {generations:?}",
                phase.op()
            ));
        }
        let generation = generations.last().copied().unwrap_or_default();
        match phase {
            Phase::Enter if generation <= self.generation => wrong.push(format!(
                "barrier.enter: generation {generation} after the last round's {}",
                self.generation
            )),
            Phase::Leave if generation != self.generation => wrong.push(format!(
                "barrier.leave: generation {generation} for the round entered at {}",
                self.generation
            )),
            _ => {}
        }
        match phase {
            Phase::Enter => self.generation = generation,
            Phase::Leave => self.completed += 1,
        }
        let early = answers.iter().filter(|&&(_, at)| at < sent).count();
        if early > 0 {
            wrong.push(format!(
                "{}: {early} members answered before the last one's request was sent",
                phase.op()
            ));
        }
        let first = answers.iter().map(|&(_, at)| at).min();
        let last = answers.iter().map(|&(_, at)| at).max();
        if let (Some(first), Some(last)) = (first, last) {
            let (until_all, spread) = match phase {
                Phase::Enter => (&mut self.release_us, &mut self.release_spread_us),
                Phase::Leave => (&mut self.leave_us, &mut self.leave_spread_us),
            };
            until_all.push(micros(last.saturating_duration_since(sent)));
            spread.push(micros(last - first));
        }
        wrong
    }
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(plan.agents >= 1, "--agents must be at least 1");
    anyhow::ensure!(plan.rounds >= 1, "--rounds must be at least 1");
    let count = u32::try_from(plan.agents).context("--agents is a barrier's count")?;
    let common = launch.common;
    let cluster = KvCluster::start(launch.hivekeeper, launch.run, plan.members).await?;
    let base = AgentConfig {
        brokers: cluster.brokers(),
        ..AgentConfig::default()
    };
    let connect_started = Instant::now();
    let (agents, mut errors) = swarm::connect_agents(
        &base,
        launch.run,
        plan.agents,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await?;
    let connect_s = connect_started.elapsed().as_secs_f64();
    anyhow::ensure!(
        agents.len() == plan.agents,
        "{} of {} agents connected, and a round needs them all: {:?}",
        agents.len(),
        plan.agents,
        errors.samples
    );
    let name = launch.run.resource("barrier");
    let mut barriers: Vec<Barrier> = agents
        .iter()
        .map(|agent| agent.session.barrier(name.clone(), count))
        .collect();

    let started = Instant::now();
    let mut rounds = Rounds::default();
    for round in 0..plan.rounds {
        let last = (round % plan.agents as u64) as usize;
        match one_round(&cluster, barriers, last, &mut rounds, &mut errors).await {
            Ok(back) => barriers = back,
            Err(error) => {
                errors.add(format!("barrier: round {round}: {error:#}"));
                break;
            }
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let figures = BarrierFigures {
        members: cluster.size(),
        agents: agents.len(),
        connect_s,
        rounds: rounds.completed,
        release: Latency::from_micros(&rounds.release_us),
        release_spread: Latency::from_micros(&rounds.release_spread_us),
        leave: Latency::from_micros(&rounds.leave_us),
        leave_spread: Latency::from_micros(&rounds.leave_spread_us),
    };
    Ok(Report {
        elapsed_s,
        cycles: rounds.completed,
        ops_per_s: rounds.completed as f64 / elapsed_s.max(1e-9),
        errors,
        // Nothing is held: the check passes over no grant.
        mutual_exclusion: history::check_exclusion(&[], 1),
        barrier: Some(figures),
        ..Report::default()
    })
}

/// One round, `last` the last to arrive and to leave: every member enters, then leaves. The
/// handles come back for the next round; what the answers should not have shown is counted
/// in `errors`.
async fn one_round(
    cluster: &KvCluster,
    mut barriers: Vec<Barrier>,
    last: usize,
    rounds: &mut Rounds,
    errors: &mut Errors,
) -> anyhow::Result<Vec<Barrier>> {
    for phase in [Phase::Enter, Phase::Leave] {
        let (back, sent, answers) = one_phase(cluster, barriers, last, phase).await?;
        for wrong in rounds.record(phase, sent, &answers) {
            errors.add(format!("barrier: {wrong}"));
        }
        barriers = back;
    }
    Ok(barriers)
}

/// One phase: every member but `last` sends, the bench waits until the service has queued
/// them all, then `last` sends. Returns the handles, when the last request was sent, and each
/// member's answer (generation, arrival).
async fn one_phase(
    cluster: &KvCluster,
    barriers: Vec<Barrier>,
    last: usize,
    phase: Phase,
) -> anyhow::Result<(Vec<Barrier>, Instant, Vec<(u64, Instant)>)> {
    let count = barriers.len();
    let leader = [cluster.leader()];
    // The gauge follows the answers of the last phase by an apply: nobody waits from here on.
    anyhow::ensure!(
        cluster
            .wait_for_gauge_where(&leader, BARRIER_WAITERS, |waiting| waiting == 0, PHASE_WAIT)
            .await,
        "{}: members of the last phase still wait after {} s",
        phase.op(),
        PHASE_WAIT.as_secs()
    );
    let mut tasks = JoinSet::new();
    let mut last_barrier = None;
    for (index, barrier) in barriers.into_iter().enumerate() {
        if index == last {
            last_barrier = Some(barrier);
        } else {
            tasks.spawn(phase.send(index, barrier));
        }
    }
    let last_barrier = last_barrier.context("the last member is one of the barrier's")?;
    // A member answered before the last one sends was refused (a count over the service's
    // bound, say), or let through early: either way the phase cannot be measured.
    tokio::select! {
        queued = cluster.wait_for_gauge(&leader, BARRIER_WAITERS, count as u64 - 1, PHASE_WAIT) =>
            anyhow::ensure!(
                queued,
                "{}: the first {} members were not all queued within {} s",
                phase.op(),
                count - 1,
                PHASE_WAIT.as_secs()
            ),
        Some(joined) = tasks.join_next() => {
            let (index, _, answered) = joined.context("a member's task")?;
            let (generation, _) =
                answered.with_context(|| format!("{} of member {index}", phase.op()))?;
            anyhow::bail!(
                "{}: member {index} was answered (generation {generation}) before the last one \
                 was sent",
                phase.op()
            );
        }
    }
    let sent = Instant::now();
    tasks.spawn(phase.send(last, last_barrier));

    let deadline = sent + PHASE_WAIT;
    let mut handles: Vec<Option<Barrier>> = (0..count).map(|_| None).collect();
    let mut answers = Vec::with_capacity(count);
    while let Some(joined) = tokio::time::timeout_at(deadline, tasks.join_next())
        .await
        .with_context(|| {
            format!(
                "{}: {} of {count} members answered within {} s",
                phase.op(),
                answers.len(),
                PHASE_WAIT.as_secs()
            )
        })?
    {
        let (index, barrier, answered) = joined.context("a member's task")?;
        answers.push(answered.with_context(|| format!("{} of member {index}", phase.op()))?);
        handles[index] = Some(barrier);
    }
    let barriers = handles
        .into_iter()
        .collect::<Option<Vec<Barrier>>>()
        .context("a member's handle did not come back")?;
    Ok((barriers, sent, answers))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ms` milliseconds after `t0`.
    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_round_is_timed_from_the_last_send_to_the_last_answer() {
        let t0 = Instant::now();
        let mut rounds = Rounds::default();
        // The last arrival sent at 10 ms; three members answered at 14, 12 and 19 ms.
        let entered = [(7, at(t0, 14)), (7, at(t0, 12)), (7, at(t0, 19))];
        assert!(rounds.record(Phase::Enter, at(t0, 10), &entered).is_empty());
        let left = [(7, at(t0, 30)), (7, at(t0, 31)), (7, at(t0, 30))];
        assert!(rounds.record(Phase::Leave, at(t0, 29), &left).is_empty());
        assert_eq!(rounds.release_us, [9_000]);
        assert_eq!(rounds.release_spread_us, [7_000]);
        assert_eq!(rounds.leave_us, [2_000]);
        assert_eq!(rounds.leave_spread_us, [1_000]);
        assert_eq!((rounds.completed, rounds.generation), (1, 7));
        // The next round's generation is larger.
        let next = [(9, at(t0, 41)), (9, at(t0, 41)), (9, at(t0, 42))];
        assert!(rounds.record(Phase::Enter, at(t0, 40), &next).is_empty());
        assert_eq!(rounds.release_us, [9_000, 2_000]);
    }

    #[test]
    fn an_early_answer_or_a_wrong_generation_is_reported() {
        let t0 = Instant::now();
        let mut rounds = Rounds {
            generation: 7,
            ..Rounds::default()
        };
        // A member let through before the last one arrived, and two generations in one round.
        let wrong = rounds.record(
            Phase::Enter,
            at(t0, 10),
            &[(8, at(t0, 9)), (9, at(t0, 11)), (9, at(t0, 12))],
        );
        assert_eq!(wrong.len(), 2, "{wrong:?}");
        assert!(wrong[0].contains("generations {8, 9}"), "{wrong:?}");
        assert!(wrong[1].contains("1 members answered before"), "{wrong:?}");
        // A generation not above the last round's.
        let stale = rounds.record(Phase::Enter, at(t0, 20), &[(9, at(t0, 21))]);
        assert_eq!(stale.len(), 1, "{stale:?}");
        // A leave answered with another round's generation.
        let other = rounds.record(Phase::Leave, at(t0, 30), &[(5, at(t0, 31))]);
        assert_eq!(other.len(), 1, "{other:?}");
        assert!(other[0].contains("generation 5 for the round entered at 9"));
    }
}
