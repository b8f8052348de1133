//! The recipe scenarios at a tiny size, each on a cluster of its own, parsed from the command
//! line as a user gives it: the report counts what was asked for, every latency was measured,
//! nothing failed. No figure is compared to a target (the machine is shared). Built on the
//! key scenarios' runner, so the `hivekeeper` binary must be built first as for those.

use super::kv_scenarios_test::{bench, refused};
use crate::report::Report;

/// `hivekeeper bench <line>`, the line split at spaces, as `bench` runs it.
fn bench_line(line: &str) -> Report {
    bench(&line.split(' ').collect::<Vec<_>>())
}

#[test]
fn election_hands_the_leadership_over_among_three_candidates() {
    let report = bench_line("election --candidates 3 --duration-s 3 --json");
    assert_eq!(report.scenario, "election");
    assert_eq!(report.parameters["candidates"], 3);
    assert_eq!(report.parameters["brokers"], "its own cluster");
    assert_eq!(report.errors.total, 0, "{report:#?}");
    // One leader at a time, tokens strictly increasing: the lock's check over leaderships.
    assert!(report.passed(), "{report:#?}");
    assert!(report.mutual_exclusion.grants_checked >= report.cycles);
    let election = report.election.as_ref().expect("the election's figures");
    assert_eq!((election.members, election.candidates), (3, 3));
    // Every leadership but the first few was taken over from a resigning leader.
    assert!(election.handovers >= 3, "{report:#?}");
    assert_eq!(election.handovers, report.handover.count);
    assert!(election.handovers_per_s > 0.0, "{election:?}");
    let handover = report.handover;
    assert!(
        handover.p50_ms > 0.0 && handover.p50_ms <= handover.p99_ms,
        "{handover:?}"
    );
    assert!(handover.p99_ms <= handover.max_ms, "{handover:?}");
    // Every candidate led.
    assert!(report.fairness.grants_min >= 1, "{report:#?}");
}

#[test]
fn barrier_releases_every_agent_each_round_through_three_members() {
    let report = bench_line("barrier --members 3 --agents 5 --rounds 3 --json");
    assert_eq!(report.scenario, "barrier");
    assert_eq!(report.parameters["agents"], 5);
    assert_eq!(report.errors.total, 0, "{report:#?}");
    assert!(report.passed(), "{report:#?}");
    let barrier = report.barrier.as_ref().expect("the barrier's figures");
    assert_eq!((barrier.members, barrier.agents), (3, 5));
    assert_eq!(barrier.rounds, 3);
    assert_eq!(report.cycles, 3);
    for (phase, until_all, spread) in [
        ("enter", barrier.release, barrier.release_spread),
        ("leave", barrier.leave, barrier.leave_spread),
    ] {
        assert_eq!(
            (until_all.count, spread.count),
            (3, 3),
            "{phase}: {barrier:#?}"
        );
        assert!(until_all.p50_ms > 0.0, "{phase}: {barrier:#?}");
        // Every answer came after the last request was sent: the first is no earlier.
        assert!(spread.max_ms <= until_all.max_ms, "{phase}: {barrier:#?}");
    }
}

#[test]
fn readers_share_one_lock_with_a_writer_and_are_compared_to_the_exclusive_rate() {
    let report = bench_line("rwlock --readers 4 --hold-ms 2 --duration-s 2 --slice-s 1 --json");
    assert_eq!(report.scenario, "rwlock");
    assert_eq!(report.parameters["readers"], 4);
    assert_eq!(report.parameters["writers"], 1);
    assert_eq!(report.parameters["slice_s"], 1);
    // The FIFO bound is a timing figure for the benchmark, not for a test on a loaded CI
    // machine: every other kind of error must be absent.
    let fifo = report.errors.by_kind.get("fifo").copied().unwrap_or(0);
    assert_eq!(report.errors.total - fifo, 0, "{report:#?}");
    // No reader beside the writer, tokens in order, over both phases' grants.
    assert!(report.passed(), "{report:#?}");
    let rwlock = report
        .rwlock
        .as_ref()
        .expect("the read-write lock's figures");
    assert_eq!((rwlock.members, rwlock.readers, rwlock.writers), (3, 4, 1));
    assert!(rwlock.exclusive_per_s > 0.0, "{rwlock:?}");
    // The report's cycles are the readers' shared ones, over two slices of a second.
    assert!(report.cycles >= 4, "{report:#?}");
    assert!(report.elapsed_s >= 1.9, "{report:#?}");
    assert!((rwlock.shared_per_s - report.ops_per_s).abs() < 1e-9);
    let ratio = rwlock.shared_per_s / rwlock.exclusive_per_s;
    assert!((rwlock.ratio - ratio).abs() < 1e-9, "{rwlock:?}");
    assert!(rwlock.writer_cycles >= 1, "{rwlock:?}");
    assert_eq!(rwlock.writer_wait.count, rwlock.writer_cycles);
    // The FIFO verdict says whether the writer's wait p99 is within its bound (one reader's
    // hold and its own acquire); whether it is, is measured by the benchmark, not asserted here.
    assert_eq!(
        rwlock.fifo_bounded,
        rwlock.writer_wait.p99_ms <= rwlock.wait_bound_ms(),
        "{rwlock:?}"
    );
    assert_eq!(fifo, u64::from(!rwlock.fifo_bounded), "{report:#?}");
    let checked = report.mutual_exclusion.grants_checked;
    assert!(
        checked >= report.cycles + rwlock.writer_cycles,
        "{report:#?}"
    );
    assert!(report.fairness.grants_min >= 1, "{report:#?}");
}

#[test]
fn the_recipe_scenarios_refuse_what_cannot_be_measured() {
    let error = refused(&["election", "--candidates", "1"]);
    assert!(
        error
            .to_string()
            .starts_with("--candidates must be at least 2"),
        "{error}"
    );
    let error = refused(&["barrier", "--rounds", "0"]);
    assert_eq!(error.to_string(), "--rounds must be at least 1");
    let error = refused(&["rwlock", "--readers", "0"]);
    assert_eq!(error.to_string(), "--readers must be at least 1");
}
