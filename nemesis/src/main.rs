//! # hivekeeper-nemesis: Hivekeeper's fault test
//!
//! Starts a cluster of real `hivekeeper serve` processes on this machine, runs workloads through
//! real SDK clients over MQTT, injects faults on a schedule (kill, pause of a leader or of a
//! client, partitions, clock jumps and skew, a full disk) and checks the whole history at the end
//! (fenced register, mutex, semaphore, leases, keys, watches, elections, barriers, lock-delay and
//! max-hold, read-write locks). Exits non-zero on any anomaly or harness error. A binary of its
//! own, beside `hivekeeper`: the server binary links no test harness, and this one runs the
//! `hivekeeper` it finds (`--hivekeeper`, else the one beside it, else PATH).
//!
//! # Layout
//! - `run`: the flags, the workloads started and joined, the checks, the report.
//! - `schedule`: the faults in turn, the recovery wait after each, and each fault's record.
//! - `faults`: the fault classes, how each is injected and undone on the cluster.
//! - `workload`: the SDK agents (fenced register and mutex, semaphore, leases, probes, the
//!   queue observer) and what they record.
//! - `client`: the pausable client, a child process of this binary (hidden `client`
//!   subcommand), so SIGSTOP freezes its keepalives too.
//! - `sentinel`: one raw MQTT client pinned to each member, recording when it answers
//!   `unavailable`.
//! - `keys`: the keys workload (put, get, delete, compare-and-set on a few keys) and its
//!   linearizability check; `watchers`: the watch workload and its check against etcd's
//!   watch guarantees (both checks are `hivekeeper-checker`'s).
//! - `elections`, `barriers`: the election workload (campaign, proclaim, resign, fence
//!   checks, leader reads) and the barrier workload (enter, leave), checked by
//!   `hivekeeper-checker`'s election and barrier rules.
//! - `hold_times`: the hold-time workload (locks on leases with a lock-delay that lapse, are
//!   revoked or release; holds with a max-hold), checked by `hivekeeper-checker`'s hold-time
//!   rules with the run's clock faults excused.
//! - `rw_locks`: the read-write lock workload (shared and exclusive holds, multi-locks,
//!   downgrades, leases that lapse), checked by `hivekeeper-checker`'s read-write rules.
//! - `kept_lease`: a lease kept alive by hand with every proof of life reported, and the
//!   `lock.lost` recorder, shared by the hold-time and read-write workloads.
//! - `store`: the fenced store the register agents write through.
//! - `history`: the records of the run and the clock they are stamped with.
//! - `check`: the checkers over the history; `availability`: each fault's window figures.
//! - `hivekeeper_binary`: which `hivekeeper` binary the members run.
//!
//! The cluster itself (processes, network namespaces, libfaketime, tmpfs) is
//! `hivekeeper-local-cluster`'s, shared with `hivekeeper bench failover`.
//!
//! ```text
//!  Cluster::start ── N members (network namespaces when partitions are asked for,
//!        │           libfaketime for clock faults, tmpfs for disk-full)
//!  workloads, all through the run (workload.rs, client.rs, sentinel.rs):
//!        register/mutex agents ── fenced store (store.rs)      ┐
//!        semaphore agents, lease agents, the pausable client   ├─▶ history (history.rs)
//!        keys agents (keys.rs), watchers (watchers.rs)         │
//!        candidates (elections.rs), barrier members (barriers.rs) │
//!        hold-time agents (hold_times.rs), read-write lock     │
//!        agents (rw_locks.rs)                                  │
//!  schedule: quiet ─▶ inject ─▶ hold ─▶ undo ─▶ recovered      ┘   + one window per fault
//!        (faults.rs; every class in turn until --duration-s)
//!  stop ─▶ final read of the keys ─▶ check.rs (register, mutex, semaphore, leases, keys,
//!       watch, election, barrier, hold times, read-write locks) + availability per window
//!       ─▶ report (table or --json); exit status 1 on any anomaly or harness error
//! ```

mod availability;
mod barriers;
mod check;
mod client;
mod elections;
mod faults;
mod history;
mod hivekeeper_binary;
mod hold_times;
mod kept_lease;
mod keys;
mod run;
mod rw_locks;
mod schedule;
mod sentinel;
mod store;
mod watchers;
mod workload;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Hivekeeper's fault test: a cluster of `hivekeeper serve` processes under faults, the whole
/// history checked.
///
/// Starts a cluster of `hivekeeper serve` processes on this machine, runs workloads through real
/// SDK clients, injects faults (kill, pause, partition, clock jumps, full disk) on a schedule and
/// checks the whole history (fenced register, mutex linearizability, semaphore, leases, keys
/// linearizability, etcd's watch guarantees, elections, barriers, lock-delay and max-hold,
/// read-write locks).
/// Prints a report (a table, or --json) and exits non-zero on any anomaly. Partitions and
/// disk-full need root; clock faults need Debian's faketime: with neither, the classes that need
/// them are left out and the report says why. Every class in turn, as root: `sudo hivekeeper-nemesis --duration-s 120`.
#[derive(Debug, Parser)]
#[command(
    name = "hivekeeper-nemesis",
    version,
    about,
    long_about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    child: Option<Child>,
    #[command(flatten)]
    run: run::NemesisArgs,
}

/// The child processes this binary starts of itself.
#[derive(Debug, Subcommand)]
enum Child {
    /// The pausable client of a run (a child process the run starts and stops).
    #[command(hide = true)]
    Client(client::ClientArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The SDK's clients warn at every jeopardy and reconnect, which faults cause by design:
    // errors only, unless RUST_LOG says otherwise.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let result = match cli.child {
        None => run::run(cli.run),
        Some(Child::Client(args)) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(client::child(args))),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hivekeeper-nemesis: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Child, Cli};

    /// The hidden `client` subcommand parses its own flags and takes none of the run's.
    #[test]
    fn the_client_subcommand_is_hidden_and_takes_only_its_own_flags() {
        let command = Cli::command();
        let client = command.find_subcommand("client").expect("client");
        assert!(client.is_hide_set());
        let cli = Cli::try_parse_from([
            "hivekeeper-nemesis",
            "client",
            "--agent",
            "a",
            "--brokers",
            "127.0.0.1:1883",
            "--lock",
            "l",
            "--ttl-ms",
            "3000",
            "--wait-ms",
            "4000",
            "--hold-ms",
            "200",
            "--duration-s",
            "9",
        ])
        .expect("a client command line");
        assert!(matches!(cli.child, Some(Child::Client(_))));
        let mixed = Cli::try_parse_from(["hivekeeper-nemesis", "--members", "5", "client"]);
        assert_eq!(
            mixed.expect_err("run flags and client").kind(),
            clap::error::ErrorKind::ArgumentConflict
        );
    }
}
