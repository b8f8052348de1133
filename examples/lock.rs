//! One FIFO lock: take it, print its fencing token, release it.
//!
//! ```sh
//! cargo run --release -- serve &                      # a node on 127.0.0.1:1883
//! cargo run --example lock                            # 127.0.0.1:1883, lock gateway/config
//! cargo run --example lock -- --brokers 10.0.0.1:1883,10.0.0.2:1883 --lock door/1
//! cargo run --example lock -- --help
//! ```
//!
//! Gives up after `--timeout-s` (default 10) with one line, when no broker answers or the lock
//! stays taken.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use hivekeeper_agent::{Agent, AgentConfig};

/// Take one Hivekeeper lock, print its fencing token, release it.
#[derive(Debug, Parser)]
#[command(name = "lock")]
struct Args {
    /// Brokers of the service, `host:port,...` (any node of a cluster).
    #[arg(
        long,
        alias = "broker",
        value_delimiter = ',',
        default_value = hivekeeper_agent::DEFAULT_BROKER
    )]
    brokers: Vec<String>,
    /// The lock's name.
    #[arg(long, default_value = "gateway/config")]
    lock: String,
    /// The session's lease TTL, ms.
    #[arg(long, default_value_t = 60_000)]
    ttl_ms: u64,
    /// Give up after this many seconds in all (connecting, waiting for the lock).
    #[arg(long, default_value_t = 10)]
    timeout_s: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lock: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Takes and releases the lock, within `--timeout-s`.
async fn run(args: Args) -> anyhow::Result<()> {
    let brokers: Vec<&str> = args.brokers.iter().map(String::as_str).collect();
    let config = AgentConfig {
        connect_timeout_s: args.timeout_s.clamp(1, 5),
        ..AgentConfig::new("example-lock", &brokers)
    };
    let run = async {
        let agent = Agent::connect(config).await?;
        let session = agent.session(args.ttl_ms).await?;
        let guard = session.lock(args.lock.as_str()).await?;
        println!("holding {} with fencing token {}", args.lock, guard.token());
        guard.release().await?;
        session.revoke().await?;
        println!("released {}", args.lock);
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(args.timeout_s), run)
        .await
        .with_context(|| {
            format!(
                "gave up after {} s: no broker of {} answered, or {} stayed taken (is \
                 `hivekeeper serve` running there?)",
                args.timeout_s,
                args.brokers.join(","),
                args.lock
            )
        })?
}
