//! The `hivekeeper` command line: `serve` runs a node, `bench` measures a running one; more
//! subcommands (status, inspect) arrive with the issues that build them.

mod bench;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Hivekeeper: a replicated coordination service for agent swarms — leases, FIFO locks,
/// counting semaphores and waypoint reservations over MQTT, with a fencing token on every grant.
#[derive(Debug, Parser)]
#[command(name = "hivekeeper", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node. With no flags: one node (a single-member Raft cluster), data in
    /// ./hivekeeper-data, an embedded MQTT broker on 127.0.0.1:1883 and Prometheus metrics on
    /// 127.0.0.1:9464. Flags override the config file, which overrides the defaults. Stops
    /// cleanly on Ctrl-C or SIGTERM.
    Serve(ServeArgs),
    /// Measure a running service through the agent SDK over MQTT, one agent = one MQTT
    /// connection and one lease: throughput, acquire and handover latency, fairness, and a
    /// mutual-exclusion check over every grant. Scenarios: uncontended, contended, semaphore,
    /// reclaim, scale.
    Bench(bench::BenchArgs),
}

/// Flags of `hivekeeper serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML config file (see hivekeeper.example.toml for every setting, commented).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory for the Raft log, vote and snapshots (created if missing). Keep it on a local
    /// disk: every grant waits for its fsync.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address of the embedded MQTT broker (MQTT 3.1.1). Loopback by default: give
    /// 0.0.0.0:1883 to accept agents from the network.
    #[arg(long, value_name = "ADDR", conflicts_with = "mqtt_url")]
    mqtt_listen: Option<SocketAddr>,
    /// Use an existing broker instead of the embedded one, e.g. mqtt://127.0.0.1:1883
    /// (Mosquitto: set `set_tcp_nodelay true`, or every round trip costs about 44 ms).
    #[arg(long, value_name = "URL")]
    mqtt_url: Option<String>,
    /// Topic prefix: agents use {prefix}/req/{agent}, {prefix}/rsp/{agent}, {prefix}/evt/{agent}.
    #[arg(long, value_name = "PREFIX")]
    topic_prefix: Option<String>,
    /// Address of the Prometheus /metrics endpoint.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The bench runs thousands of SDK agents, each logging its session at info: by default
    // only warnings, so the report is not buried.
    let default_filter = match cli.command {
        Command::Serve(_) => "info,openraft=warn,rumqttd=warn",
        Command::Bench(_) => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hivekeeper: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
