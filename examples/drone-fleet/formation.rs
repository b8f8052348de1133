//! The drone-fleet example's formation part: a formation of drones takes off together through a
//! barrier, round after round, on the orders of the fleet's controller, a control tower chosen
//! by election (`controller.rs`). Kept apart from `fleet.rs` and `flights.rs`, so the end-to-end
//! test (`tests/example_drone_fleet.rs`) runs the same code with small counts.
//!
//! ```text
//!  towers (controller.rs)                        formation drones (one agent + session each)
//!   campaign fleet/controller                     wait until the board orders round r
//!    ├─ leads: put "order r" on the board,  ─▶     (a watch of fleet/board/order)
//!    │  a kv.txn fenced by its token;             preflight ─▶ barrier.enter fleet/formation/takeoff
//!    │  waits for "landed r" ◀──────┐               (count N): released together, one generation
//!    │  lost() ─▶ stops at once     │             take-off ─▶ fly ─▶ land ─▶ barrier.leave
//!    └─ stands by: observes the     │               (answered once all N have landed)
//!       leader, a line per change   └──────────── the flight lead puts "landed r" on the board
//!  ops desk: after half the rounds it revokes the leader's lease (the next tower leads in that
//!  entry); the deposed tower's delayed order, under its old token, is refused by the board.
//! ```
//!
//! The same barrier serves every round (a new generation each time). The checker (`Log`) counts
//! what must never happen: a drone released before its whole formation lined up, one let go
//! before all had landed, one round released at two generations or a later round at a lower
//! one, and an order accepted under an older token than an earlier order's (or the deposed
//! tower's delayed order accepted at all).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use hivekeeper_agent::protocol::kv::EventKind;
use hivekeeper_agent::{Kv, Session, Wait};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::controller;
use crate::fleet::jitter;
use crate::flights::{connect, connect_agent};

/// The election whose leader is the fleet's controller.
pub(crate) const CONTROLLER: &str = "fleet/controller";
/// The barrier the formation takes off through, every round.
pub(crate) const TAKEOFF: &str = "fleet/formation/takeoff";
/// The board: the keys the controller and the formation coordinate through.
const BOARD: &str = "fleet/board/";
/// The round the controller ordered last, and the tower that ordered it.
pub(crate) const ORDER: &str = "fleet/board/order";
/// The round the formation landed last, and the generation it took off at.
pub(crate) const LANDED: &str = "fleet/board/landed";

/// What the formation part does; [`FormationConfig::default`] is the example's scenario.
#[derive(Debug, Clone)]
pub struct FormationConfig {
    /// Brokers of the service, `host:port`.
    pub brokers: Vec<String>,
    /// Drones in the formation: the barrier's count.
    pub drones: u32,
    /// Formation flights, one round of the barrier each.
    pub rounds: u32,
    /// Control towers campaigning for the controller role.
    pub towers: usize,
    /// How long a formation flight takes, from take-off to the first landing.
    pub flight_ms: u64,
    /// TTL of every session.
    pub ttl_ms: u64,
    /// Every wait stops at this bound even if the rounds are not flown.
    pub duration_s: u64,
}

impl Default for FormationConfig {
    fn default() -> Self {
        FormationConfig {
            brokers: vec![hivekeeper_agent::DEFAULT_BROKER.into()],
            drones: 5,
            rounds: 4,
            towers: 3,
            flight_ms: 400,
            ttl_ms: 5_000,
            duration_s: 45,
        }
    }
}

impl FormationConfig {
    /// The round after whose landing the ops desk takes the leading tower off duty: half-way,
    /// so that two towers order rounds; none when there is a single round.
    pub fn handover_after(&self) -> Option<u32> {
        (self.rounds >= 2).then_some(self.rounds / 2)
    }
}

/// What the formation part did, and what went wrong.
#[derive(Debug)]
pub struct FormationSummary {
    /// Rounds every drone of the formation flew to the end (took off, landed, left).
    pub rounds_flown: u32,
    /// The generation each round took off at, in round order.
    pub generations: Vec<u64>,
    /// The towers in the order they came to lead, each with its leadership's token.
    pub leaders: Vec<(String, u64)>,
    /// Orders the board accepted (the order key's version).
    pub orders: u64,
    /// The tower the ops desk took off duty, if it did.
    pub deposed: Option<String>,
    /// Delayed orders of a deposed tower that the board refused.
    pub stale_orders_refused: u64,
    /// Drones released before their whole formation lined up or let go before all landed,
    /// rounds released at two generations, generations not increasing: must be 0.
    pub barrier_violations: u64,
    /// Orders accepted under an older token than an earlier order's, and delayed orders of a
    /// deposed tower accepted: must be 0.
    pub fencing_violations: u64,
    /// SDK errors (each one stops its drone or tower).
    pub errors: u64,
    /// Sample messages of those errors (the first few).
    pub error_samples: Vec<String>,
    /// Wall time of the part.
    pub elapsed: Duration,
    /// Whether the duration bound cut it short.
    pub cut_short: bool,
}

impl FormationSummary {
    /// Violations of the guarantees: the example fails if this is not zero.
    pub fn violations(&self) -> u64 {
        self.barrier_violations + self.fencing_violations
    }
}

/// Everything the tasks of the formation part share.
pub(crate) struct Shared {
    pub(crate) config: FormationConfig,
    pub(crate) log: Log,
    deadline: Instant,
}

impl Shared {
    /// `work`, or an error once the run's time is up.
    pub(crate) async fn until_deadline<T>(
        &self,
        what: &str,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        tokio::time::timeout_at(self.deadline, work)
            .await
            .map_err(|_| anyhow::anyhow!("{what}: the run's time is up"))?
    }

    /// A barrier wait bounded by the run's time.
    fn wait_left(&self) -> Wait {
        Wait::AtMost(self.deadline.saturating_duration_since(Instant::now()))
    }
}

/// A board key's value, `"{round} {note}"`: a round, and what stands behind it (the tower that
/// ordered it, or the generation it took off at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) round: u32,
    pub(crate) note: String,
}

impl Entry {
    /// The value of round `round` with `note`.
    pub(crate) fn value(round: u32, note: impl Display) -> String {
        format!("{round} {note}")
    }

    fn parse(value: &str) -> Option<Entry> {
        let (round, note) = value.split_once(' ')?;
        Some(Entry {
            round: round.parse().ok()?,
            note: note.to_string(),
        })
    }
}

/// The board's `key` once it holds round `round` or a later one: a read, then a watch from the
/// read's revision, so that no put in between is missed.
pub(crate) async fn wait_for_round(kv: &Kv, key: &str, round: u32) -> anyhow::Result<Entry> {
    let read = kv
        .get(key)
        .await
        .with_context(|| format!("reading {key}"))?;
    let reached = |value: &str| Entry::parse(value).filter(|entry| entry.round >= round);
    if let Some(entry) = read.kv.as_ref().and_then(|kv| reached(&kv.value)) {
        return Ok(entry);
    }
    let mut events = kv.watch_key(key).after(read.revision).events();
    while let Some(event) = events.next().await {
        let event = event.with_context(|| format!("watching {key}"))?;
        if event.kind == EventKind::Put
            && let Some(entry) = reached(&event.kv.value)
        {
            return Ok(entry);
        }
    }
    anyhow::bail!("the watch of {key} ended")
}

/// The round the board's order key holds now (0: none yet), and the round landed last.
pub(crate) async fn board_now(kv: &Kv) -> anyhow::Result<(u32, u32)> {
    let round_of = |key: &'static str| async move {
        let read = kv
            .get(key)
            .await
            .with_context(|| format!("reading {key}"))?;
        let entry = read.kv.and_then(|kv| Entry::parse(&kv.value));
        anyhow::Ok(entry.map_or(0, |entry| entry.round))
    };
    Ok((round_of(ORDER).await?, round_of(LANDED).await?))
}

/// What the drones saw of one round, on this process's clock.
#[derive(Debug, Default)]
struct RoundSeen {
    /// When each drone lined up (before its `barrier.enter` went).
    lined_up: Vec<Instant>,
    /// When each was released (its `barrier.enter` answered), and at which generation.
    released: Vec<(Instant, u64)>,
    /// When each landed (before its `barrier.leave` went).
    landed: Vec<Instant>,
    /// When each was let go (its `barrier.leave` answered).
    let_go: Vec<Instant>,
}

impl RoundSeen {
    /// Drones released before the last one lined up, and let go before the last one landed.
    fn early(&self) -> u64 {
        let released = self.released.iter().map(|(at, _)| *at);
        count_before(released, self.lined_up.iter().max())
            + count_before(self.let_go.iter().copied(), self.landed.iter().max())
    }
}

/// How many of `times` come before `last` (none when there is no `last`).
fn count_before(times: impl Iterator<Item = Instant>, last: Option<&Instant>) -> u64 {
    last.map_or(0, |last| times.filter(|at| at < last).count() as u64)
}

/// What the drones and the towers saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Each round's events, by round.
    rounds: BTreeMap<u32, RoundSeen>,
    /// The towers in the order they came to lead, with their tokens.
    pub(crate) leaders: Vec<(String, u64)>,
    /// The tokens of the orders the board accepted, in the order the towers saw them accepted.
    pub(crate) order_tokens: Vec<u64>,
}

/// The checker: everything seen, behind one mutex.
#[derive(Debug, Default)]
pub(crate) struct Log(Mutex<Seen>);

impl Log {
    /// What was seen, also after a panic of another task (the record stays usable).
    pub(crate) fn seen(&self) -> MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn round(&self, round: u32, record: impl FnOnce(&mut RoundSeen)) {
        record(self.seen().rounds.entry(round).or_default());
    }
}

/// Runs the formation part against the service at `config.brokers`.
pub async fn run(config: FormationConfig) -> anyhow::Result<FormationSummary> {
    anyhow::ensure!(
        config.drones > 0 && config.rounds > 0 && config.towers > 0,
        "need at least one formation drone, one round and one tower"
    );
    let started = Instant::now();
    let shared = Arc::new(Shared {
        deadline: started + Duration::from_secs(config.duration_s),
        log: Log::default(),
        config,
    });
    let config = &shared.config;
    // A clean board: what an earlier run left on the same service is not this run's.
    let ops = connect_agent(&config.brokers, "ops-desk").await?;
    ops.kv()
        .delete_prefix(BOARD)
        .await
        .context("clearing the board")?;
    println!();
    println!(
        "formation: {} drones, {} rounds through the barrier {TAKEOFF}; {} towers campaign for \
         {CONTROLLER}",
        config.drones, config.rounds, config.towers
    );

    let mut towers = JoinSet::new();
    for i in 0..config.towers {
        let shared = shared.clone();
        towers.spawn(async move { controller::tower(&shared, i).await });
    }
    let mut drones = JoinSet::new();
    for i in 0..config.drones {
        let session = connect(&config.brokers, &format!("formation-{i}"), config.ttl_ms).await?;
        let shared = shared.clone();
        drones.spawn(async move { formation_drone(&shared, session, i).await });
    }
    let handover = config.handover_after().map(|round| {
        let (shared, ops) = (shared.clone(), ops.clone());
        tokio::spawn(async move { controller::take_leader_off_duty(&shared, &ops, round).await })
    });

    let mut errors = Vec::new();
    while let Some(joined) = drones.join_next().await {
        errors.extend(joined.context("a formation drone's task panicked")?);
    }
    let handover = match handover {
        Some(task) => match task.await.context("the ops desk's task panicked")? {
            Ok(handover) => Some(handover),
            Err(error) => {
                errors.push(format!("ops desk: {error:#}"));
                None
            }
        },
        None => None,
    };
    // The formation is done: the towers stop, the leader still leading (no last handover).
    towers.abort_all();
    while let Some(joined) = towers.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(error)) => errors.push(format!("{error:#}")),
            Err(error) if error.is_cancelled() => {}
            Err(error) => return Err(error).context("a tower's task panicked"),
        }
    }
    let orders = ops.kv().get(ORDER).await.context("reading the orders")?;
    let orders = orders.kv.map_or(0, |kv| kv.version);
    Ok(summarize(&shared, orders, handover, errors, started))
}

/// The part's summary, from the checker's record, the board and the handover.
fn summarize(
    shared: &Shared,
    orders: u64,
    handover: Option<controller::Handover>,
    mut errors: Vec<String>,
    started: Instant,
) -> FormationSummary {
    let seen = shared.log.seen();
    let drones = shared.config.drones as usize;
    let (mut rounds_flown, mut generations, mut barrier_violations) = (0, Vec::new(), 0);
    for round in seen.rounds.values() {
        barrier_violations += round.early();
        let mut released: Vec<u64> = round.released.iter().map(|(_, g)| *g).collect();
        released.sort_unstable();
        released.dedup();
        if released.len() > 1 {
            barrier_violations += 1;
        }
        if let Some(&generation) = released.first() {
            if generations.last().is_some_and(|&last| last >= generation) {
                barrier_violations += 1;
            }
            generations.push(generation);
        }
        if round.let_go.len() == drones {
            rounds_flown += 1;
        }
    }
    let tokens = &seen.order_tokens;
    let mut fencing_violations = tokens.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    let stale_orders_refused = match &handover {
        Some(handover) if handover.stale_order_refused => 1,
        Some(_) => {
            fencing_violations += 1;
            0
        }
        None => 0,
    };
    let error_count = errors.len() as u64;
    errors.truncate(5);
    FormationSummary {
        rounds_flown,
        generations,
        leaders: seen.leaders.clone(),
        orders,
        deposed: handover.map(|handover| handover.deposed),
        stale_orders_refused,
        barrier_violations,
        fencing_violations,
        errors: error_count,
        error_samples: errors,
        elapsed: started.elapsed(),
        cut_short: Instant::now() >= shared.deadline,
    }
}

/// Formation drone `index`: its rounds, and the error that stopped it, if any.
async fn formation_drone(shared: &Shared, session: Session, index: u32) -> Option<String> {
    fly_rounds(shared, &session, index == 0)
        .await
        .err()
        .map(|error| format!("formation-{index}: {error:#}"))
}

/// Every round: wait for the controller's order, line up at the barrier, take off when the
/// whole formation is there, fly, land, leave. The flight lead (`lead`) tells the output and
/// puts the landing on the board, which the controller waits for before the next order.
async fn fly_rounds(shared: &Shared, session: &Session, lead: bool) -> anyhow::Result<()> {
    let config = &shared.config;
    let kv = session.kv();
    let mut barrier = session.barrier(TAKEOFF, config.drones);
    for round in 1..=config.rounds {
        let order = shared
            .until_deadline("waiting for an order", wait_for_round(&kv, ORDER, round))
            .await?;
        tokio::time::sleep(jitter(50, 300)).await; // Preflight checks.
        if lead {
            println!(
                "formation round {round}: ordered by {}; lining up at {TAKEOFF}, waiting for all {}",
                order.note, config.drones
            );
        }
        let lined_up = Instant::now();
        shared.log.round(round, |seen| seen.lined_up.push(lined_up));
        let generation = barrier
            .enter_wait(shared.wait_left())
            .await
            .with_context(|| format!("lining up for round {round}"))?;
        let released = Instant::now();
        let first_lined_up = {
            let mut seen = shared.log.seen();
            let seen = seen.rounds.entry(round).or_default();
            seen.released.push((released, generation));
            seen.lined_up.iter().min().copied().unwrap_or(lined_up)
        };
        if lead {
            println!(
                "formation round {round}: take-off, generation {generation} (the first drone \
                 waited {} ms for the last)",
                released.duration_since(first_lined_up).as_millis()
            );
        }
        // The flight; the landings spread over 100 ms.
        tokio::time::sleep(Duration::from_millis(config.flight_ms) + jitter(0, 100)).await;
        shared
            .log
            .round(round, |seen| seen.landed.push(Instant::now()));
        barrier
            .leave_wait(shared.wait_left())
            .await
            .with_context(|| format!("leaving round {round}"))?;
        shared
            .log
            .round(round, |seen| seen.let_go.push(Instant::now()));
        if lead {
            kv.put(LANDED, Entry::value(round, generation))
                .await
                .context("putting the landing on the board")?;
            println!(
                "formation round {round}: landed; all {} left generation {generation}",
                config.drones
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker's predicate: a drone released before the last one lined up, or let go
    /// before the last one landed, is early; released or let go after them, it is not.
    #[test]
    fn the_checker_sees_a_drone_released_before_its_formation_lined_up() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let together = RoundSeen {
            lined_up: vec![at(0), at(10)],
            released: vec![(at(11), 7), (at(12), 7)],
            landed: vec![at(20), at(30)],
            let_go: vec![at(31), at(31)],
        };
        assert_eq!(together.early(), 0);
        let early = RoundSeen {
            released: vec![(at(5), 7), (at(12), 7)],
            let_go: vec![at(25), at(31)],
            ..together
        };
        assert_eq!(early.early(), 2);
    }

    #[test]
    fn a_board_entry_reads_back_its_round_and_note() {
        let entry = Entry::parse(&Entry::value(3, "tower-1")).expect("an entry");
        assert_eq!((entry.round, entry.note.as_str()), (3, "tower-1"));
        assert_eq!(Entry::parse("three tower-1"), None);
    }
}
