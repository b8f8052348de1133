//! `hivekeeper barrier NAME --count N [--leave] [-- COMMAND ...]`: a double barrier from the
//! shell, through the SDK's [`Session::barrier`](hivekeeper_agent::Session::barrier).
//!
//! ```text
//!  barrier NAME --count N               ─▶ barrier.enter (waits for N) ─▶ `passed ...`, exit
//!                                           (the lease is revoked: counts as leaving at once)
//!  barrier NAME --count N --leave       ─▶ barrier.enter ─▶ barrier.leave (waits for all N)
//!  barrier NAME --count N -- CMD ARGS   ─▶ barrier.enter ─▶ CMD ─▶ barrier.leave ─▶ CMD's status
//! ```
//!
//! The three shapes are the three uses: a start line (nobody starts before all have
//! arrived), a rendezvous (nobody goes on before all have arrived and all have left), and a
//! phase run in step (every member runs CMD together, and none goes on before the slowest is
//! done).

use anyhow::{Context, anyhow};
use hivekeeper_agent::{Session, SessionOptions};

use super::{Target, failure, run_in_session};

/// `hivekeeper barrier NAME --count N`.
#[derive(Debug, clap::Args)]
pub struct BarrierArgs {
    /// The barrier's name, 1 to 256 bytes.
    name: String,
    /// How many members a round has: the first arrival of a round fixes it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    count: u32,
    /// After the round is full, leave at once and wait until every member has left (without
    /// it, the command exits once the round is full, which counts as leaving without waiting
    /// for the others).
    #[arg(long)]
    leave: bool,
    /// The TTL of the lease the membership is bound to, ms: a member that dies is out of the
    /// barrier at most this long after.
    #[arg(long, value_name = "MS", default_value_t = super::SESSION_TTL_MS)]
    ttl_ms: u64,
    /// A command to run once the round is full, with HIVEKEEPER_BARRIER_GENERATION set; then
    /// leave and wait for every member, and exit with the command's status.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    target: Target,
}

/// `hivekeeper barrier`.
pub fn barrier(args: BarrierArgs) -> anyhow::Result<()> {
    // Out of the barrier whatever happened (the lease is revoked on the way out): a member
    // that is not there any more must not keep the others waiting until its lease expires.
    let options = SessionOptions::default();
    let args = &args;
    run_in_session(&args.target, args.ttl_ms, options, |session| async move {
        tokio::select! {
            outcome = rounds(&session, args) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted in barrier {:?}", args.name)),
        }
    })
}

/// Enters, runs the command, leaves, as the flags say; the command's exit code, if one ran.
async fn rounds(session: &Session, args: &BarrierArgs) -> anyhow::Result<Option<i32>> {
    let mut barrier = session.barrier(args.name.clone(), args.count);
    let generation = barrier
        .enter()
        .await
        .map_err(|e| failure("barrier.enter", e))?;
    report(args, "passed", generation);
    let status = match args.command.split_first() {
        Some((program, rest)) => {
            let mut command = std::process::Command::new(program);
            command
                .args(rest)
                .env("HIVEKEEPER_BARRIER_GENERATION", generation.to_string());
            // The session's keepalives go on meanwhile, on the runtime.
            let status = tokio::task::spawn_blocking(move || command.status())
                .await
                .context("waiting for the command")?
                .with_context(|| format!("running {program:?}"))?;
            // A command killed by a signal has no code: a failure all the same.
            Some(status.code().unwrap_or(1))
        }
        None => None,
    };
    if args.leave || status.is_some() {
        let generation = barrier
            .leave()
            .await
            .map_err(|e| failure("barrier.leave", e))?;
        report(args, "left", generation);
    }
    Ok(status)
}

/// `passed "NAME" generation G` (or `left ...`), or its JSON line.
fn report(args: &BarrierArgs, what: &str, generation: u64) {
    if args.target.json {
        println!(
            "{}",
            serde_json::json!({"name": args.name, "event": what, "generation": generation})
        );
    } else {
        println!("{what} {:?} generation {generation}", args.name);
    }
}
