//! The key scenarios at a tiny size, each on a three-member cluster of its own, parsed from
//! the command line as a user gives it: the report counts what was asked for, every latency
//! was measured, nothing failed. No figure is compared to a target (the machine is shared).
//!
//! The members run the `hivekeeper` binary of the same target directory; build it first
//! (`cargo build --bin hivekeeper`): without it these tests fail and say so. [`bench`] and
//! [`refused`] serve the recipe scenarios' tests too (recipes_test.rs).

use std::path::PathBuf;
use std::sync::Mutex;

use clap::Parser;
use hivekeeper_test_support::hivekeeper_binary;

use super::report::{KvFigures, Report};
use super::swarm::RunId;
use super::{BenchArgs, run_scenario};

/// The bench's flags as `hivekeeper bench` parses them.
#[derive(Debug, Parser)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) bench: BenchArgs,
}

/// One cluster at a time: three members each on a shared two-core machine are enough.
static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `hivekeeper bench <args>` in this process and returns its report.
pub(crate) fn bench(args: &[&str]) -> Report {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("{args:?}: {error}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (report, json) = runtime
        .block_on(run_scenario(
            cli.bench.scenario,
            &RunId::new(),
            &hivekeeper_binary(),
        ))
        .unwrap_or_else(|error| panic!("{args:?}: {error:#}"));
    assert!(json, "every test asks for --json");
    // The report encodes as `--json` prints it.
    serde_json::to_string(&report).expect("the report encodes");
    report
}

/// The key figures of a report, with what every key scenario must show.
fn kv_figures(report: &Report) -> &KvFigures {
    assert_eq!(report.errors.total, 0, "{report:#?}");
    // `hivekeeper bench` exits with an error unless the report passed.
    assert!(report.passed(), "{report:#?}");
    let kv = report.kv.as_ref().expect("a key scenario's figures");
    assert_eq!(kv.members, 3);
    assert_eq!(report.cycles, kv.puts);
    assert!(kv.puts_per_s > 0.0, "{kv:#?}");
    assert!(kv.commit.p50_ms > 0.0, "{kv:#?}");
    assert!(kv.commit.p50_ms <= kv.commit.p90_ms, "{kv:#?}");
    assert!(kv.commit.p90_ms <= kv.commit.p99_ms, "{kv:#?}");
    assert!(kv.commit.p99_ms <= kv.commit.max_ms, "{kv:#?}");
    assert_eq!(kv.member_rss.len(), 3);
    assert_eq!(
        kv.member_rss.iter().filter(|m| m.role == "leader").count(),
        1,
        "{kv:#?}"
    );
    for member in &kv.member_rss {
        assert!(member.rss_mb.is_some_and(|mb| mb > 1.0), "{member:?}");
    }
    kv
}

#[test]
fn kv_put_with_two_clients_counts_every_put_and_its_commit_latency() {
    let report = bench(&[
        "kv-put",
        "--clients",
        "2",
        "--puts-per-client",
        "20",
        "--duration-s",
        "60",
        "--json",
    ]);
    assert_eq!(report.scenario, "kv-put");
    assert_eq!(report.parameters["clients"], 2);
    assert_eq!(report.parameters["brokers"], "its own cluster");
    let kv = kv_figures(&report);
    assert_eq!(kv.puts, 40, "{kv:#?}");
    assert_eq!(kv.commit.count, 40);
    assert!(kv.event.is_none() && kv.fan_out.is_none());
}

#[test]
fn watch_through_a_follower_hears_every_put() {
    let report = bench(&["watch", "--puts", "20", "--duration-s", "60", "--json"]);
    assert_eq!(report.scenario, "watch");
    let kv = kv_figures(&report);
    assert_eq!(kv.puts, 20, "{kv:#?}");
    let event = kv.event.expect("put → event latencies");
    assert_eq!(event.count, 20, "{kv:#?}");
    assert!(
        event.p50_ms > 0.0 && event.p50_ms <= event.max_ms,
        "{event:?}"
    );
}

#[test]
fn watch_fan_out_wakes_every_pending_poll_with_one_put() {
    let report = bench(&["watch", "--watchers", "3", "--json"]);
    let kv = kv_figures(&report);
    assert_eq!(kv.puts, 1, "{kv:#?}");
    assert!(kv.event.is_none());
    let fan_out = kv.fan_out.as_ref().expect("fan-out figures");
    assert_eq!(fan_out.watchers, 3);
    assert_eq!(fan_out.connected, 3);
    assert!(fan_out.polls_pending >= 3, "{fan_out:#?}");
    assert_eq!(fan_out.received, 3, "{fan_out:#?}");
    assert_eq!(fan_out.event.count, 3);
    assert!(fan_out.event.p50_ms > 0.0);
    assert!(fan_out.rss_mb_before.is_some_and(|mb| mb > 1.0));
    assert!(fan_out.rss_mb_pending.is_some_and(|mb| mb > 1.0));
    // The watchers are on a follower, never on the leader.
    let leader = kv.member_rss.iter().find(|m| m.role == "leader");
    assert_ne!(Some(&fan_out.member), leader.map(|m| &m.member));
}

/// Five watchers, two to an agent: three connections, five polls, five events.
#[test]
fn watch_fan_out_shares_agents_between_watchers() {
    let report = bench(&[
        "watch",
        "--watchers",
        "5",
        "--polls-per-agent",
        "2",
        "--json",
    ]);
    assert_eq!(report.parameters["polls_per_agent"], 2);
    let fan_out = kv_figures(&report)
        .fan_out
        .clone()
        .expect("fan-out figures");
    assert_eq!((fan_out.watchers, fan_out.connected), (5, 5));
    assert!(fan_out.polls_pending >= 5, "{fan_out:#?}");
    assert_eq!(fan_out.received, 5, "{fan_out:#?}");
}

#[test]
fn kv_fill_writes_every_key_in_batches_and_reads_each_members_memory() {
    let report = bench(&[
        "kv-fill",
        "--keys",
        "100",
        "--batch",
        "16",
        "--clients",
        "2",
        "--json",
    ]);
    assert_eq!(report.scenario, "kv-fill");
    assert_eq!(report.parameters["keys"], 100);
    assert_eq!(report.parameters["batch"], 16);
    let kv = kv_figures(&report);
    assert_eq!(kv.puts, 100, "{kv:#?}");
    // 100 keys in batches of 16: six full ones and one of 4.
    assert_eq!(kv.commit.count, 7, "{kv:#?}");
}

/// Runs `hivekeeper bench <args>` with no `hivekeeper` binary to start, for flags refused
/// before any cluster starts; returns the refusal.
pub(crate) fn refused(args: &[&str]) -> anyhow::Error {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("{args:?}: {error}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(run_scenario(
            cli.bench.scenario,
            &RunId::new(),
            &PathBuf::from("/nonexistent/hivekeeper"),
        ))
        .expect_err("refused before any cluster starts")
}

#[test]
fn kv_fill_refuses_a_batch_over_what_fits_in_one_request() {
    let error = refused(&["kv-fill", "--batch", "65"]);
    assert!(
        error.to_string().starts_with("--batch must be 1 to "),
        "{error}"
    );
}
