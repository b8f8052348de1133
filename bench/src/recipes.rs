//! The recipe scenarios, `hivekeeper bench election`, `barrier` and `rwlock`: each starts a
//! cluster of its own (as the key scenarios do) and lives in a file of its own; this enum,
//! flattened into the bench's scenarios, is where a recipe's scenario is added.

use std::path::Path;

use clap::{Args, Subcommand};

use super::report::Report;
use super::swarm::RunId;
use super::{Common, Launch, Parameters, barrier, election, rwlock};

/// The recipe scenarios.
#[derive(Debug, Subcommand)]
pub enum RecipeScenario {
    /// Starts its own cluster (3 members by default) and measures leadership handovers: N
    /// candidates (one agent each, spread over the members) campaign on one election, and the
    /// leader resigns as soon as it leads (after --hold-ms), then campaigns again behind the
    /// others. Reports the handover (`election.resign` sent → the next candidate's campaign
    /// answered, p50/p99), handovers a second, campaign → leads, fairness, and one leader at a
    /// time over every leadership (tokens strictly increasing). Until --duration-s or --cycles
    /// leaderships per candidate. --brokers, --user and the TLS flags are ignored (a plaintext
    /// cluster without accounts).
    Election(Recipe<election::Plan>),
    /// Starts its own cluster (one member by default) and measures a barrier of N agents: each
    /// round, N − 1 agents enter and are seen queued on the member, then the last enters;
    /// reports the time from sending that last `barrier.enter` to every agent's answer (and
    /// from the first answer to the last), p50/max over --rounds rounds, and the same for
    /// leaving (a double barrier). --duration-s, --cycles, --hold-ms, --brokers, --user and the
    /// TLS flags are ignored. Raise `ulimit -n` above N.
    Barrier(Recipe<barrier::Plan>),
    /// Starts its own cluster (3 members by default) and measures readers and a writer on one
    /// read-write lock. Phase 1, the baseline: as many agents as --readers, each cycling an
    /// exclusive acquire → release on a lock of its own (the uncontended exclusive rate).
    /// Phase 2: the readers cycle a shared acquire → release (no hold) on one lock while
    /// --writers agents cycle an exclusive acquire → (--hold-ms) → release on it. Reports
    /// shared acquires a second and their ratio to phase 1 (the target: ≥ 0.80), the writer's
    /// wait (sent → granted) and cycles against the FIFO's bound (p99 at most two uncontended
    /// acquires), the readers' acquire, and the check over
    /// every grant: no shared holder beside an exclusive one, tokens in order. The phases
    /// alternate in slices of --slice-s, each running --duration-s in all. --brokers, --user and the TLS flags are ignored (a plaintext cluster
    /// without accounts).
    #[command(name = "rwlock")]
    RwLock(Recipe<rwlock::Plan>),
}

/// A recipe scenario's flags: the common ones and its plan.
#[derive(Debug, Args)]
pub struct Recipe<P: Args> {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    plan: P,
}

impl RecipeScenario {
    /// The flags every scenario shares.
    pub fn common(&self) -> &Common {
        match self {
            RecipeScenario::Election(recipe) => &recipe.common,
            RecipeScenario::Barrier(recipe) => &recipe.common,
            RecipeScenario::RwLock(recipe) => &recipe.common,
        }
    }

    /// Runs the scenario: its report, its common flags, its name and its own parameters.
    pub async fn run(
        self,
        hivekeeper: &Path,
        run: &RunId,
    ) -> anyhow::Result<(Report, Common, &'static str, Parameters)> {
        Ok(match self {
            RecipeScenario::Election(Recipe { common, plan }) => {
                let report = election::run(Launch::new(hivekeeper, &common, run), plan).await?;
                (report, common, "election", plan.parameters())
            }
            RecipeScenario::Barrier(Recipe { common, plan }) => {
                let report = barrier::run(Launch::new(hivekeeper, &common, run), plan).await?;
                (report, common, "barrier", plan.parameters())
            }
            RecipeScenario::RwLock(Recipe { common, plan }) => {
                let report = rwlock::run(Launch::new(hivekeeper, &common, run), plan).await?;
                (report, common, "rwlock", plan.parameters())
            }
        })
    }
}
