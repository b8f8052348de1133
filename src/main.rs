//! The `hivekeeper` command line.
//!
//! Only what exists is offered: the coordination core is built and tested as a library; the
//! `serve`, `status`, `inspect` and `bench` subcommands arrive with the issues that build the
//! node, the admin CLI and the bench (see README.md, "Status").

use clap::Parser;

/// Hivekeeper: a replicated coordination service for agent swarms (leases, FIFO locks,
/// counting semaphores and waypoint reservations over MQTT).
///
/// This build contains the coordination core only; it has no subcommands yet.
#[derive(Debug, Parser)]
#[command(name = "hivekeeper", version, about, long_about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    println!(
        "hivekeeper {}: the coordination core is built; `serve` is not yet (see README.md). \
         Run `hivekeeper --help` for options.",
        env!("CARGO_PKG_VERSION")
    );
    Ok(())
}
