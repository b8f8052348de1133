//! One FIFO lock: take it, print its fencing token, release it.
//!
//! ```sh
//! cargo run --release -- serve &                      # a node on 127.0.0.1:1883
//! cargo run --example lock -- [BROKER] [LOCK]         # default 127.0.0.1:1883 gateway/config
//! ```

use hivekeeper_agent::{Agent, AgentConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let broker = args.next().unwrap_or_else(|| "127.0.0.1:1883".into());
    let lock = args.next().unwrap_or_else(|| "gateway/config".into());
    let agent = Agent::connect(AgentConfig::new("example-lock", &[broker.as_str()])).await?;
    let session = agent.session(5_000).await?;
    let guard = session.lock(lock.as_str()).await?;
    println!("holding {lock} with fencing token {}", guard.token());
    guard.release().await?;
    session.revoke().await?;
    println!("released {lock}");
    Ok(())
}
