//! The client that can be paused: a fenced-register agent in a child process of its own
//! (`hivekeeper-nemesis client`, hidden: the binary starts itself), so SIGSTOP freezes the whole client — its keepalives
//! too — as a GC pause or a suspended laptop does, while it believes it holds the lock.
//!
//! ```text
//!  child                                   parent (the nemesis)
//!  ACQUIRE                      ─────────▶ invoke time
//!  (lock L, wait ≤ wait_ms)
//!  GRANT <token>                ─────────▶ grant time; reads store[L]
//!                               ◀───────── VALUE <v>       (a pause is injected right here:
//!  (hold_ms)                                               SIGSTOP longer than the TTL)
//!  WRITE <token> <v>            ─────────▶ store.write_increment(L, token, v)
//!                               ◀───────── DONE
//!  RELEASE released|lost|unknown ────────▶ the hold's end
//!  FAIL <outcome>               ─────────▶ an acquire that got no grant
//! ```
//!
//! The parent keeps the store and every record, on its own clock; the child only acts.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use hivekeeper_agent::{Agent, Resource, Wait as SdkWait};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

use super::history::{Hold, HoldEnd};
use super::store::FencedStore;
use super::workload::{Context, outcome, release};
use hivekeeper_local_cluster::send_signal;

/// Flags of the hidden `hivekeeper-nemesis client`.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The agent id.
    #[arg(long)]
    agent: String,
    /// Brokers, in the order to try them.
    #[arg(long, value_delimiter = ',', required = true)]
    brokers: Vec<String>,
    /// The lock (and register) to work on.
    #[arg(long)]
    lock: String,
    /// The session's TTL.
    #[arg(long)]
    ttl_ms: u64,
    /// How long an acquire waits.
    #[arg(long)]
    wait_ms: u64,
    /// How long it holds between reading and writing.
    #[arg(long)]
    hold_ms: u64,
    /// When to stop.
    #[arg(long)]
    duration_s: u64,
}

/// The child's side: runs until `duration_s` or until stdin closes.
pub async fn child(args: ClientArgs) -> anyhow::Result<()> {
    let stop_at = Instant::now() + Duration::from_secs(args.duration_s);
    let config = hivekeeper_agent::AgentConfig {
        agent_id: args.agent.clone(),
        brokers: args.brokers.clone(),
        // The parent lists the home member first.
        broker_order: hivekeeper_agent::BrokerOrder::InOrder,
        mqtt_keepalive_s: 2,
        connect_timeout_s: 2,
        request_deadline_ms: 15_000,
        ..hivekeeper_agent::AgentConfig::default()
    };
    let agent = Agent::connect(config).await.context("connecting")?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let mut session = None;
    while Instant::now() < stop_at {
        let live = match &session {
            Some(s) if hivekeeper_agent::Session::state(s).is_live() => {
                hivekeeper_agent::Session::clone(s)
            }
            _ => match agent.session(args.ttl_ms).await {
                Ok(s) => {
                    session = Some(s.clone());
                    s
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        stdout.write_all(b"ACQUIRE\n").await?;
        stdout.flush().await?;
        let wait = SdkWait::AtMost(Duration::from_millis(args.wait_ms));
        match live.acquire(Resource::lock(args.lock.clone()), wait).await {
            Ok(guard) => {
                let token = guard.token();
                stdout
                    .write_all(format!("GRANT {token}\n").as_bytes())
                    .await?;
                stdout.flush().await?;
                let Some(line) = stdin.next_line().await? else {
                    return Ok(());
                };
                let value: u64 = line
                    .strip_prefix("VALUE ")
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("expected VALUE <n>, got {line:?}"))?;
                tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;
                stdout
                    .write_all(format!("WRITE {token} {value}\n").as_bytes())
                    .await?;
                stdout.flush().await?;
                if stdin.next_line().await?.is_none() {
                    return Ok(());
                }
                let timeline = super::history::Timeline::start();
                let end = match release(&timeline, guard).await {
                    HoldEnd::Released { .. } => "released",
                    HoldEnd::Lost { .. } => "lost",
                    HoldEnd::Unknown { .. } => "unknown",
                };
                stdout
                    .write_all(format!("RELEASE {end}\n").as_bytes())
                    .await?;
            }
            Err(error) => {
                stdout
                    .write_all(format!("FAIL {}\n", outcome(&error)).as_bytes())
                    .await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        stdout.flush().await?;
    }
    Ok(())
}

/// The parent's side of one child: spawns it, serves its reads and writes from the store,
/// records its holds, and pauses it right after a grant when asked through `pause`.
pub struct PausableClient {
    child: Child,
}

/// A request to pause the child for this long at its next grant; the driver answers on
/// `paused` with the pause's start (µs) once the child is stopped.
pub struct PauseRequest {
    /// How long to keep it stopped.
    pub pause: Duration,
    /// Told when the child was stopped, with the time.
    pub paused: tokio::sync::oneshot::Sender<u64>,
}

impl PausableClient {
    /// Starts the child process and the task that drives it until the run ends.
    pub fn start(
        ctx: Context,
        store: FencedStore,
        lock: String,
        home: usize,
        mut pauses: tokio::sync::mpsc::Receiver<PauseRequest>,
    ) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
        let n = ctx.brokers.len();
        let brokers: Vec<String> = (0..n)
            .map(|k| ctx.brokers[(home + k) % n].clone())
            .collect();
        let agent_id = format!("{}-paused0", ctx.run);
        let duration_s = ctx
            .stop_at
            .saturating_duration_since(Instant::now())
            .as_secs()
            + 1;
        // The child is this binary again, under its hidden `client` subcommand.
        let exe = std::env::current_exe().context("finding the hivekeeper-nemesis binary")?;
        let mut child = Command::new(exe)
            .arg("client")
            .args(["--agent", &agent_id, "--lock", &lock])
            .args(["--brokers", &brokers.join(",")])
            .args(["--ttl-ms", &ctx.ttl_ms.to_string()])
            .args(["--wait-ms", &ctx.wait_ms.to_string()])
            .args(["--hold-ms", &ctx.hold_ms.max(200).to_string()])
            .args(["--duration-s", &duration_s.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting the pausable client")?;
        let stdout = child.stdout.take().context("the child's stdout")?;
        let mut stdin = child.stdin.take().context("the child's stdin")?;
        let mut client = PausableClient { child };
        let driver = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut pending: Option<PauseRequest> = None;
            let mut invoke_us = 0;
            let mut grant: Option<(u64, u64)> = None;
            loop {
                tokio::select! {
                    Some(request) = pauses.recv(), if pending.is_none() => pending = Some(request),
                    line = lines.next_line() => {
                        let Some(line) = line? else { break };
                        let now_us = ctx.timeline.now_us();
                        let mut words = line.split_whitespace();
                        match (words.next(), words.next(), words.next()) {
                            (Some("ACQUIRE"), _, _) => invoke_us = now_us,
                            (Some("GRANT"), Some(token), _) => {
                                let token: u64 = token.parse().context("GRANT token")?;
                                grant = Some((token, now_us));
                                ctx.wait(&agent_id, None, invoke_us, "granted".into());
                                // A refused read: the child is told a value it cannot write
                                // (its write is refused too), so the protocol stays one shape.
                                let value = store.read(&lock, &agent_id, token).unwrap_or(0);
                                reply(&mut stdin, &format!("VALUE {value}")).await?;
                                if let Some(request) = pending.take() {
                                    client.pause_for(&ctx, request).await?;
                                }
                            }
                            (Some("WRITE"), Some(token), Some(value)) => {
                                let token: u64 = token.parse().context("WRITE token")?;
                                let value: u64 = value.parse().context("WRITE value")?;
                                store.write_increment(&lock, &agent_id, token, value);
                                reply(&mut stdin, "DONE").await?;
                            }
                            (Some("RELEASE"), Some(how), _) => {
                                if let Some((token, granted_us)) = grant.take() {
                                    let end = match how {
                                        "released" => HoldEnd::Released { invoke_us: granted_us, complete_us: now_us },
                                        "lost" => HoldEnd::Lost { observed_us: now_us },
                                        _ => HoldEnd::Unknown { invoke_us: granted_us },
                                    };
                                    record(&ctx, &lock, &agent_id, [token, invoke_us, granted_us], end);
                                }
                            }
                            (Some("FAIL"), Some(what), _) => {
                                ctx.wait(&agent_id, None, invoke_us, what.to_string());
                            }
                            _ => anyhow::bail!("the pausable client said {line:?}"),
                        }
                    }
                }
            }
            // The run ended with a hold open: it is checked as held until the end.
            if let Some((token, granted_us)) = grant {
                let end = HoldEnd::Unknown {
                    invoke_us: ctx.timeline.now_us(),
                };
                record(&ctx, &lock, &agent_id, [token, invoke_us, granted_us], end);
            }
            let _ = client.child.wait().await;
            Ok(())
        });
        Ok(driver)
    }

    /// SIGSTOP, the pause, SIGCONT.
    async fn pause_for(&mut self, ctx: &Context, request: PauseRequest) -> anyhow::Result<()> {
        let pid = self
            .child
            .id()
            .context("the pausable client already exited")?;
        send_signal(pid, "STOP")?;
        let _ = request.paused.send(ctx.timeline.now_us());
        tokio::time::sleep(request.pause).await;
        send_signal(pid, "CONT")?;
        Ok(())
    }
}

/// Records one of the child's holds: `[token, invoke_us, granted_us]`.
fn record(
    ctx: &Context,
    lock: &str,
    agent: &str,
    [token, invoke_us, granted_us]: [u64; 3],
    end: HoldEnd,
) {
    let hold = Hold {
        resource: lock.to_string(),
        agent: agent.to_string(),
        token,
        invoke_us,
        granted_us,
        end,
    };
    ctx.recorder.with(|history| history.lock_holds.push(hold));
}

/// One line to the child.
async fn reply(stdin: &mut ChildStdin, line: &str) -> anyhow::Result<()> {
    stdin.write_all(format!("{line}\n").as_bytes()).await?;
    stdin.flush().await?;
    Ok(())
}
