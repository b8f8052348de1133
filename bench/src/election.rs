//! `election`: how fast the leadership of one election passes from a leader that resigns to
//! the next candidate, on a cluster of the scenario's own (three members by default).
//!
//! ```text
//!  KvCluster::start (N members) ─▶ C candidates, each an SDK agent with a session (a lease),
//!     candidate i homed on member i mod N: its campaign is answered by that member
//!  every candidate, as `contended` does with a lock (cycles.rs):
//!     election.campaign (one election) ─▶ leads (token) ─▶ (--hold-ms) ─▶ election.resign
//!     ─▶ campaign again, behind the candidates already waiting
//!     until --duration-s or --cycles
//!  report: handover = resign sent → the next candidate's campaign answered (p50/p99),
//!          handovers/s, campaign sent → leads, fairness, and the check of locks over every
//!          leadership: one leader at a time, tokens strictly increasing
//! ```
//!
//! The service hands the leadership over in the entry that applies the resign (PROTOCOL.md
//! §8.23): the figure is a resign's commit and apply, plus the answer to the next candidate
//! from its own member, which on a follower learns the commit one append after the leader.

use clap::Args;
use hivekeeper_agent::AgentConfig;
use serde::Serialize;

use super::cycles::{self, Claim};
use super::kv_cluster::KvCluster;
use super::report::Report;
use super::swarm;
use super::{Launch, Parameters};

/// The scenario's own flags.
#[derive(Debug, Clone, Copy, Args)]
pub struct Plan {
    /// Cluster members.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Candidates campaigning on the one election (each one agent: one MQTT connection, one
    /// lease), spread over the members.
    #[arg(long, default_value_t = 10)]
    pub candidates: usize,
}

impl Plan {
    /// The flags as the report records them.
    pub fn parameters(&self) -> Parameters {
        vec![
            ("members", self.members.into()),
            ("candidates", self.candidates.into()),
            ("brokers", "its own cluster".into()),
        ]
    }
}

/// What `election` measured besides the cycles' figures (`handover`, `acquire`: campaign sent
/// → leads, fairness, the check).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ElectionFigures {
    /// Members of the cluster the scenario started.
    pub members: usize,
    /// Candidates that connected and campaigned.
    pub candidates: usize,
    /// Leaderships that passed from a resigning leader to a candidate already waiting.
    pub handovers: u64,
    /// `handovers` per second of the measured phase.
    pub handovers_per_s: f64,
}

impl ElectionFigures {
    /// The figures of a measured phase whose report is `cycles`.
    fn of(cycles: &Report, members: usize, candidates: usize) -> ElectionFigures {
        let handovers = cycles.handover.count;
        ElectionFigures {
            members,
            candidates,
            handovers,
            handovers_per_s: handovers as f64 / cycles.elapsed_s.max(1e-9),
        }
    }

    /// The scenario's rows of the table, beside the cycles'.
    pub fn rows(&self) -> Vec<(String, String)> {
        vec![
            (
                "candidates".into(),
                format!("{} on {} members", self.candidates, self.members),
            ),
            (
                "handovers/s".into(),
                format!("{:.0} ({} handovers)", self.handovers_per_s, self.handovers),
            ),
        ]
    }
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(
        plan.candidates >= 2,
        "--candidates must be at least 2 (a handover needs a candidate waiting)"
    );
    let common = launch.common;
    let cluster = KvCluster::start(launch.hivekeeper, launch.run, plan.members).await?;
    let base = AgentConfig {
        brokers: cluster.brokers(),
        ..AgentConfig::default()
    };
    let (candidates, connect_errors) = swarm::connect_agents(
        &base,
        launch.run,
        plan.candidates,
        common.session_ttl_ms,
        common.connect_concurrency,
    )
    .await?;
    let connected = candidates.len();
    let election = launch.run.resource("election");
    let claims = (0..connected).map(|index| Claim::Leadership {
        election: election.clone(),
        value: format!("candidate-{index}"),
    });
    let mut report = cycles::measure(common, candidates.into_iter().zip(claims).collect(), 1).await;
    report.errors.merge(connect_errors);
    report.election = Some(ElectionFigures::of(&report, cluster.size(), connected));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    #[test]
    fn handovers_a_second_count_the_handovers_over_the_measured_phase() {
        let cycles = Report {
            elapsed_s: 2.0,
            cycles: 301,
            handover: Latency::from_micros(&[900; 300]),
            ..Report::default()
        };
        let figures = ElectionFigures::of(&cycles, 3, 10);
        assert_eq!(figures.handovers, 300);
        assert!(
            (figures.handovers_per_s - 150.0).abs() < 1e-9,
            "{figures:?}"
        );
        assert_eq!((figures.members, figures.candidates), (3, 10));
        let rows = figures.rows();
        assert_eq!(
            rows[1],
            ("handovers/s".into(), "150 (300 handovers)".into())
        );
    }
}
