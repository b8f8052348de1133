//! `hivekeeper lock NAME [--shared] [-- COMMAND ...]`: hold a lock from the shell, as
//! `etcdctl lock` does, through the SDK's [`Session::acquire_with`].
//!
//! ```text
//!  lock NAME [--shared]            ─▶ lease.grant, lock.acquire (waits in line) ─▶ the token
//!                                      ... held until Ctrl-C / SIGTERM ─▶ lock.release, lease.revoke
//!  lock NAME [--shared] -- CMD ARGS ─▶ lease.grant, lock.acquire ─▶ CMD with
//!                                      HIVEKEEPER_LOCK_NAME, HIVEKEEPER_LOCK_TOKEN
//!                                      ... CMD exits ─▶ lock.release, lease.revoke, CMD's status
//!  either, the hold lost meanwhile (the session's loss, its max-hold, an operator's revoke)
//!                                  ─▶ CMD gets SIGTERM, the reason on stderr, exit code 1
//! ```
//!
//! The token is the safety mechanism (docs/PROTOCOL.md §2): a command that changes something
//! another holder may change later should pass `HIVEKEEPER_LOCK_TOKEN` along, so that a stale
//! holder's late action can be refused.
//!
//! [`Session::acquire_with`]: hivekeeper_agent::Session::acquire_with

use std::time::Duration;

use anyhow::{Context, anyhow};
use hivekeeper_agent::{
    AcquireOptions, Guard, HoldEnd, Resource, Session, SessionOptions, SessionState, Wait,
};

use super::{Target, failure, run_in_session};
use crate::serve::shutdown_signal;

/// `hivekeeper lock NAME`.
#[derive(Debug, clap::Args)]
pub struct LockArgs {
    /// The lock's name, 1 to 256 bytes.
    name: String,
    /// Take the lock shared (a reader): held together with other shared holders, never beside
    /// an exclusive one. Without it the lock is exclusive (a writer). Either way the queue is
    /// FIFO: a shared request behind a waiting exclusive one waits for it.
    #[arg(long)]
    shared: bool,
    /// How long to wait in line for the lock, ms; 0 tries once and fails at once if it is
    /// taken. Without it, wait until granted.
    #[arg(long, value_name = "MS")]
    wait_ms: Option<u64>,
    /// The hold ends this long after its grant, ms, even while this process lives (at most
    /// the service's longest lease TTL): a stuck command cannot keep the lock forever. When
    /// it ends, the command gets SIGTERM and this exits 1. Without it, no bound.
    #[arg(long, value_name = "MS")]
    max_hold_ms: Option<u64>,
    /// If this process's lease ends without a release (it dies, or an operator revokes it),
    /// nobody is granted the lock for this long, ms (at most 60000): time for a command the
    /// process left behind to stop. 0, the default: none.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    lock_delay_ms: u64,
    /// The TTL of the lease the lock is bound to, ms: if this process dies without releasing,
    /// the next waiter is granted at most this long after (plus any --lock-delay-ms).
    #[arg(long, value_name = "MS", default_value_t = super::SESSION_TTL_MS)]
    ttl_ms: u64,
    /// A command to run while holding the lock, with HIVEKEEPER_LOCK_NAME and
    /// HIVEKEEPER_LOCK_TOKEN (the fencing token) set; the lock is released when it exits, and
    /// this exits with its status. Without one, print the token and hold the lock until
    /// Ctrl-C or SIGTERM.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    target: Target,
}

/// `hivekeeper lock`.
pub fn lock(args: LockArgs) -> anyhow::Result<()> {
    let options = SessionOptions {
        lock_delay: Duration::from_millis(args.lock_delay_ms),
    };
    let args = &args;
    run_in_session(&args.target, args.ttl_ms, options, |session| async move {
        hold(&session, args).await
    })
}

/// Takes the lock, then runs the command or waits for a signal; the command's exit code, if
/// one ran.
async fn hold(session: &Session, args: &LockArgs) -> anyhow::Result<Option<i32>> {
    let resource = if args.shared {
        Resource::read_lock(args.name.clone())
    } else {
        Resource::lock(args.name.clone())
    };
    let wait = Wait::from_wait_ms(args.wait_ms);
    let options = AcquireOptions {
        max_hold: args.max_hold_ms.map(Duration::from_millis),
    };
    let guard = tokio::select! {
        guard = session.acquire_with(resource, wait, options) => {
            guard.map_err(|e| failure("lock.acquire", e))?
        }
        () = shutdown_signal() => {
            return Err(anyhow!("interrupted before holding {:?}", args.name));
        }
    };
    let status = match args.command.split_first() {
        Some((program, rest)) => Some(run(&guard, args, program, rest).await?),
        None => {
            wait_for_signal(&guard, args).await?;
            None
        }
    };
    guard
        .release()
        .await
        .map_err(|e| failure("lock.release", e))?;
    Ok(status)
}

/// Prints the token, then holds the lock until Ctrl-C or SIGTERM; an error if the hold is
/// lost first.
async fn wait_for_signal(guard: &Guard, args: &LockArgs) -> anyhow::Result<()> {
    let token = guard.token();
    if args.target.json {
        let mode = if args.shared { "shared" } else { "exclusive" };
        println!(
            "{}",
            serde_json::json!({"name": args.name, "token": token, "mode": mode})
        );
    } else {
        println!("{token}");
    }
    tokio::select! {
        end = guard.ended() => Err(lost(args, token, end)),
        () = shutdown_signal() => Ok(()),
    }
}

/// Runs the command while the lock is held: its exit code, or an error once the hold is lost
/// (the command is sent SIGTERM first). Ctrl-C or SIGTERM to this process is passed on to the
/// command, whose exit then ends the hold.
async fn run(
    guard: &Guard,
    args: &LockArgs,
    program: &str,
    rest: &[String],
) -> anyhow::Result<i32> {
    let token = guard.token();
    let mut child = std::process::Command::new(program)
        .args(rest)
        .env("HIVEKEEPER_LOCK_NAME", &args.name)
        .env("HIVEKEEPER_LOCK_TOKEN", token.to_string())
        .spawn()
        .with_context(|| format!("running {program:?}"))?;
    let pid = child.id();
    // The session's keepalives go on meanwhile, on the runtime.
    let mut exited = tokio::task::spawn_blocking(move || child.wait());
    let mut signalled = false;
    loop {
        tokio::select! {
            status = &mut exited => {
                let status = status
                    .context("waiting for the command")?
                    .with_context(|| format!("waiting for {program:?}"))?;
                // A command killed by a signal has no code: a failure all the same.
                return Ok(status.code().unwrap_or(1));
            }
            end = guard.ended() => {
                let error = lost(args, token, end);
                eprintln!("{error}: sending {program:?} SIGTERM");
                terminate(pid);
                let _ = exited.await;
                return Err(error);
            }
            () = shutdown_signal(), if !signalled => {
                signalled = true;
                terminate(pid);
            }
        }
    }
}

/// Sends the command SIGTERM, with kill(1): the workspace forbids `unsafe`. Best effort: a
/// command that has exited already is not there to stop.
fn terminate(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

/// The error for a hold that ended under the command, saying why.
fn lost(args: &LockArgs, token: u64, end: HoldEnd) -> anyhow::Error {
    let why = match end {
        HoldEnd::MaxHold => format!(
            "its max-hold of {} ms ran out",
            args.max_hold_ms.unwrap_or_default()
        ),
        HoldEnd::Taken => "the service took it away (the lease ended)".into(),
        HoldEnd::Session(SessionState::Jeopardy) => {
            "no keepalive was acknowledged in time (the session is in jeopardy)".into()
        }
        HoldEnd::Session(state) => format!("the session is {state:?}"),
        HoldEnd::Released => "released".into(),
    };
    anyhow!("lost the lock {:?} (token {token}): {why}", args.name)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `hivekeeper lock ARGS`, parsed as the command line would be.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        lock: LockArgs,
    }

    #[test]
    fn the_command_after_the_double_dash_is_kept_whole() {
        let cli = Cli::try_parse_from([
            "lock",
            "db",
            "--shared",
            "--wait-ms",
            "0",
            "--",
            "sh",
            "-c",
            "echo --shared",
        ])
        .expect("parses");
        assert!(cli.lock.shared);
        assert_eq!(cli.lock.wait_ms, Some(0));
        assert_eq!(cli.lock.command, ["sh", "-c", "echo --shared"]);
        assert_eq!((cli.lock.ttl_ms, cli.lock.lock_delay_ms), (10_000, 0));
    }

    #[test]
    fn a_lost_hold_says_why() {
        let cli = Cli::try_parse_from(["lock", "pump", "--max-hold-ms", "500"]).expect("parses");
        let error = lost(&cli.lock, 42, HoldEnd::MaxHold).to_string();
        assert_eq!(
            error,
            "lost the lock \"pump\" (token 42): its max-hold of 500 ms ran out"
        );
    }
}
