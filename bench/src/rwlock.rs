//! `rwlock`: readers and a writer on one read-write lock, against the uncontended exclusive
//! rate of the same agents through the same SDK path, on a cluster of the scenario's own
//! (three members by default).
//!
//! ```text
//!  KvCluster::start (M members) ─▶ R readers + W writers, each an SDK agent with a session
//!     (a lease), agent i homed on member i mod M
//!  phase 1, the baseline: each reader on a lock of its own, exclusive (acquire ─▶ release,
//!     no hold): the uncontended exclusive rate, cycles/s
//!  phase 2: the readers on ONE lock, shared (acquire ─▶ release at once), and the writers on
//!     it, exclusive (acquire ─▶ --hold-ms ─▶ release)
//!  the phases alternate, --slice-s each, until each ran --duration-s
//!  report: shared acquires/s and their ratio to phase 1 (the target: ≥ 0.80); the writer's
//!          wait (acquire sent → granted) p50/p99/max and its cycles; the readers' acquire;
//!          the check over every grant of both phases (history::check_read_write)
//! ```
//!
//! The writer's wait is bounded by the FIFO (PROTOCOL.md §6.1): a writer waits only for the
//! shared holders granted before its request was applied, and every request after it, shared
//! or not, queues behind it. Readers release at once, so a writer's wait is its request's
//! trip, the rest of one reader's hold (that reader's release and its commit) and the entry
//! that grants it, whatever the number of readers; it never waits for a reader that came after
//! it. A reader's hold is about one uncontended acquire (its grant's delivery and its
//! release's commit), and so is the writer's own trip and grant: the bound checked is that the
//! writer's wait p99 is at most [`WAIT_BOUND_ACQUIRES`] times the uncontended exclusive
//! acquire p99 of phase 1 in the same run, independent of the number of readers. Readers
//! overtaking the writer (no FIFO) would keep it waiting until no reader held, which grows
//! with the readers. The table also compares the wait with the readers' acquire p99 (a reader
//! arriving behind a writer waits for the rest of its wait, its hold and its release's
//! commit), and the handover (the last shared release sent → the writer's grant) shows the
//! commit that ends each wait.

use clap::Args;
use hivekeeper_agent::{AgentConfig, Resource};
use serde::Serialize;

use super::cycles;
use super::history::{self, Grant};
use super::kv_cluster::KvCluster;
use super::report::{Errors, Latency, Report};
use super::swarm::{self, Member};
use super::{Common, Launch, Parameters};

/// The ratio of shared acquires a second to the uncontended exclusive rate the target asks for.
pub const RATIO_TARGET: f64 = 0.80;

/// The FIFO's bound on a writer's wait, in uncontended acquires: the last reader's hold ahead
/// of it and its own request's.
pub const WAIT_BOUND_ACQUIRES: f64 = 2.0;

/// The scenario's own flags.
#[derive(Debug, Clone, Copy, Args)]
pub struct Plan {
    /// Cluster members.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Readers (each one agent: one MQTT connection, one lease), spread over the members: each
    /// takes the lock shared and releases it at once. Phase 1 runs as many agents, each on a
    /// lock of its own.
    #[arg(long, default_value_t = 100)]
    pub readers: usize,
    /// Writers on the same lock, each one agent: each takes it exclusive, holds it --hold-ms
    /// and releases it. 0: the readers alone, the shared path's own rate against the
    /// exclusive one.
    #[arg(long, default_value_t = 1)]
    pub writers: usize,
    /// The phases alternate in slices of this many seconds, each phase running --duration-s
    /// in all (rounded up to whole slices), so that a load that comes and goes weighs on both.
    #[arg(long, default_value_t = 2)]
    pub slice_s: u64,
}

impl Plan {
    /// The flags as the report records them.
    pub fn parameters(&self) -> Parameters {
        vec![
            ("members", self.members.into()),
            ("readers", self.readers.into()),
            ("writers", self.writers.into()),
            ("slice_s", self.slice_s.into()),
            ("brokers", "its own cluster".into()),
        ]
    }
}

/// What `rwlock` measured besides phase 2's readers (the report's cycles, acquire and
/// fairness are theirs).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RwLockFigures {
    /// Members of the cluster the scenario started.
    pub members: usize,
    /// Readers that connected.
    pub readers: usize,
    /// Writers that connected.
    pub writers: usize,
    /// Phase 1: exclusive acquire → release cycles a second, each agent on its own lock.
    pub exclusive_per_s: f64,
    /// Phase 1: from sending an exclusive acquire to its grant.
    pub exclusive_acquire: Latency,
    /// Phase 2: shared acquire → release cycles a second, every reader on the one lock.
    pub shared_per_s: f64,
    /// `shared_per_s / exclusive_per_s`.
    pub ratio: f64,
    /// Phase 2: the writers' completed cycles.
    pub writer_cycles: u64,
    /// Phase 2: from sending a writer's acquire to its grant.
    pub writer_wait: Latency,
    /// Phase 2: from sending a reader's acquire to its grant (the report's `acquire`).
    pub reader_acquire: Latency,
    /// From the last shared holder's release start to the grant of the writer waiting for it.
    pub writer_handover: Latency,
    /// Whether the writer's wait p99 was at most [`WAIT_BOUND_ACQUIRES`] times phase 1's
    /// acquire p99 (the FIFO's bound; see the module doc).
    pub fifo_bounded: bool,
}

impl RwLockFigures {
    /// The scenario's rows of the table, beside the readers' cycles.
    pub fn rows(&self) -> Vec<(String, String)> {
        vec![
            (
                "agents".into(),
                format!(
                    "readers {}, writers {}, on {} members",
                    self.readers, self.writers, self.members
                ),
            ),
            (
                "exclusive/s (phase 1)".into(),
                format!(
                    "{:.0}, acquire {}",
                    self.exclusive_per_s,
                    self.exclusive_acquire.row()
                ),
            ),
            (
                "shared/s (phase 2)".into(),
                format!(
                    "{:.0}: ratio {:.2} (target ≥ {RATIO_TARGET:.2})",
                    self.shared_per_s, self.ratio
                ),
            ),
            (
                "writer wait".into(),
                format!("{} ({} cycles)", self.writer_wait.row(), self.writer_cycles),
            ),
            (
                "writer wait bound".into(),
                format!(
                    "{}: p99 {:.2} ms against {WAIT_BOUND_ACQUIRES} × exclusive p99 = {:.2} ms; \
                     readers' acquire p99 {:.2} ms",
                    if self.fifo_bounded { "within" } else { "OVER" },
                    self.writer_wait.p99_ms,
                    self.wait_bound_ms(),
                    self.reader_acquire.p99_ms,
                ),
            ),
            ("writer handover".into(), self.writer_handover.row()),
        ]
    }
}

impl RwLockFigures {
    /// The FIFO's bound on the writer's wait p99, ms.
    pub fn wait_bound_ms(&self) -> f64 {
        WAIT_BOUND_ACQUIRES * self.exclusive_acquire.p99_ms
    }
}

/// For each `exclusive` grant that waited for a shared holder, the time from the last shared
/// release start before its grant to the grant, µs (a writer granted with no reader releasing
/// during its wait is left out).
fn writer_handovers_us(shared: &[Grant], exclusive: &[Grant]) -> Vec<u64> {
    let mut releases: Vec<_> = shared.iter().filter_map(|grant| grant.release_at).collect();
    releases.sort_unstable();
    exclusive
        .iter()
        .filter_map(|wait| {
            let before = releases.partition_point(|&at| at <= wait.granted_at);
            let last = *releases.get(before.checked_sub(1)?)?;
            (last >= wait.acquire_at).then(|| history::micros(wait.granted_at - last))
        })
        .collect()
}

/// Connects the readers and then the writers, spread over the cluster's members: all of them,
/// or an error; and the connect errors.
async fn connect(
    cluster: &KvCluster,
    launch: Launch<'_>,
    plan: Plan,
) -> anyhow::Result<(Vec<Member>, Vec<Member>, Errors)> {
    let base = AgentConfig {
        brokers: cluster.brokers(),
        ..AgentConfig::default()
    };
    let agents = plan.readers + plan.writers;
    let (mut readers, errors) = swarm::connect_agents(
        &base,
        launch.run,
        agents,
        launch.common.session_ttl_ms,
        launch.common.connect_concurrency,
    )
    .await?;
    anyhow::ensure!(
        readers.len() == agents,
        "{} of {agents} agents connected: {:?}",
        readers.len(),
        errors.samples
    );
    let writers = readers.split_off(plan.readers);
    Ok((readers, writers, errors))
}

/// What one phase's agents did over all its slices.
#[derive(Debug, Default)]
struct Phase {
    grants: Vec<Grant>,
    cycles: u64,
    elapsed_s: f64,
    errors: Errors,
}

impl Phase {
    /// Adds a slice measured by `cycles::measure_with_grants`.
    fn add(&mut self, (report, grants): (Report, Vec<Grant>)) {
        self.grants.extend(grants);
        self.cycles += report.cycles;
        self.elapsed_s += report.elapsed_s;
        self.errors.merge(report.errors);
    }

    fn per_s(&self) -> f64 {
        self.cycles as f64 / self.elapsed_s.max(1e-9)
    }

    /// From sending each acquire to its grant, over every slice.
    fn acquire(&self) -> Latency {
        let waits: Vec<u64> = self
            .grants
            .iter()
            .map(|grant| history::micros(grant.granted_at - grant.acquire_at))
            .collect();
        Latency::from_micros(&waits)
    }
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(plan.readers >= 1, "--readers must be at least 1");
    anyhow::ensure!(plan.slice_s >= 1, "--slice-s must be at least 1");
    let common = launch.common;
    let cluster = KvCluster::start(launch.hivekeeper, launch.run, plan.members).await?;
    let (readers, writers, mut errors) = connect(&cluster, launch, plan).await?;

    // Readers release at once in both phases; only the writers hold.
    let slice = |hold_ms| Common {
        duration_s: plan.slice_s,
        hold_ms,
        ..common.clone()
    };
    let (no_hold, writer_hold) = (slice(0), slice(common.hold_ms));
    let run = launch.run;
    let own_locks: Vec<(Member, Resource)> = (readers.iter().enumerate())
        .map(|(index, member)| {
            let lock = Resource::lock(run.resource(&format!("lock-{index}")));
            (member.clone(), lock)
        })
        .collect();
    let lock = run.resource("rwlock");
    let on_lock = |members: &[Member], resource: Resource| -> Vec<(Member, Resource)> {
        let claims = std::iter::repeat(resource);
        members.iter().cloned().zip(claims).collect()
    };
    let (shared_claims, writer_claims) = (
        on_lock(&readers, Resource::read_lock(lock.clone())),
        on_lock(&writers, Resource::lock(lock)),
    );
    // The phases alternate, a slice each, so that a load that comes and goes on the machine
    // weighs on both alike.
    let (mut baseline, mut shared, mut exclusive) = <(Phase, Phase, Phase)>::default();
    for _ in 0..common.duration_s.div_ceil(plan.slice_s) {
        baseline.add(cycles::measure_with_grants(&no_hold, own_locks.clone(), 1).await);
        let (read, write) = tokio::join!(
            cycles::measure_with_grants(&no_hold, shared_claims.clone(), plan.readers),
            cycles::measure_with_grants(&writer_hold, writer_claims.clone(), 1),
        );
        shared.add(read);
        exclusive.add(write);
    }

    let (reader_acquire, writer_wait) = (shared.acquire(), exclusive.acquire());
    let figures = RwLockFigures {
        members: cluster.size(),
        readers: readers.len(),
        writers: writers.len(),
        exclusive_per_s: baseline.per_s(),
        exclusive_acquire: baseline.acquire(),
        shared_per_s: shared.per_s(),
        ratio: shared.per_s() / baseline.per_s().max(1e-9),
        writer_cycles: exclusive.cycles,
        writer_wait,
        reader_acquire,
        writer_handover: Latency::from_micros(&writer_handovers_us(
            &shared.grants,
            &exclusive.grants,
        )),
        fifo_bounded: false,
    };
    let figures = RwLockFigures {
        fifo_bounded: figures.writer_wait.p99_ms <= figures.wait_bound_ms(),
        ..figures
    };
    if !figures.fifo_bounded {
        errors.add(format!(
            "fifo: the writer's wait p99, {:.2} ms, is over its bound, {:.2} ms",
            figures.writer_wait.p99_ms,
            figures.wait_bound_ms()
        ));
    }
    // Phase 1's locks are numbered from 0 as phase 2's one lock is: moved apart, each is
    // checked as the lock it is.
    let phase_1 = baseline.grants.iter().map(|grant| Grant {
        resource: grant.resource + 1,
        ..*grant
    });
    let exclusive_all: Vec<Grant> = exclusive.grants.iter().copied().chain(phase_1).collect();
    for other in [baseline.errors, exclusive.errors, shared.errors] {
        errors.merge(other);
    }
    Ok(Report {
        elapsed_s: shared.elapsed_s,
        cycles: shared.cycles,
        ops_per_s: figures.shared_per_s,
        acquire: reader_acquire,
        fairness: history::fairness(&shared.grants, readers.len()),
        mutual_exclusion: history::check_read_write(&shared.grants, &exclusive_all),
        errors,
        rwlock: Some(figures),
        ..Report::default()
    })
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::history::tests::grant;

    #[test]
    fn a_writer_handover_is_timed_from_the_last_shared_release_during_its_wait() {
        let t0 = Instant::now();
        let shared = [
            grant(t0, 0, 0, 1, (0, 1, 3)),
            grant(t0, 0, 0, 2, (0, 2, 4)),
            grant(t0, 0, 0, 5, (0, 9, 9)),
        ];
        // The first writer waits from 2 to 6, behind releases at 3 and 4; the second from 7
        // to 8, with no release during its wait.
        let exclusive = [grant(t0, 0, 0, 3, (2, 6, 7)), grant(t0, 0, 0, 4, (7, 8, 8))];
        assert_eq!(writer_handovers_us(&shared, &exclusive), vec![2_000]);
    }
}
