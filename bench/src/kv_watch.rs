//! `watch`: how soon a watcher hears of a put, on the scenario's own cluster. The watcher is
//! homed on a follower, the writer on the leader, so every event crosses the replication: the
//! put commits on the leader, the follower applies it and wakes the pending poll.
//!
//! ```text
//!  latency (default): one watcher (SDK watch: watch.poll long polls) on a follower
//!    for each of --puts: t0 ─ kv.put on the leader ─▶ commit │ the watcher's event ─▶ t1
//!    report: put → event (t1 − t0) and the commit latency
//!  fan-out (--watchers N): N watchers, one agent each, all on one follower
//!    RSS before ─▶ connect all ─▶ wait until the member's hivekeeper_watch_polls_pending ≥ N
//!    ─▶ RSS with every poll pending ─▶ one put on the leader (t0)
//!    ─▶ each watcher's event (t1): put → event p50/p99/max over the watchers
//! ```

use std::time::Duration;

use futures_util::StreamExt;
use hivekeeper_agent::protocol::kv::WATCH_POLLS_PER_AGENT_MAX as POLLS_PER_AGENT_MAX;
use hivekeeper_agent::{Agent, AgentError, WatchItem};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::history::micros;
use super::kv_cluster::{self, KvCluster};
use super::report::{Errors, FanOutFigures, KvFigures, Latency, Report};
use super::swarm::RunId;
use super::{Common, Launch};

/// How long one poll waits for a change before the member answers a bookmark (the most the
/// service allows): a pending poll stays pending this long.
const POLL_WAIT_MS: u64 = 60_000;

/// How long a put's event may take before the watcher is counted as not having heard it.
const EVENT_WAIT: Duration = Duration::from_secs(30);

/// The gauge of a member's pending polls.
const POLLS_PENDING: &str = "hivekeeper_watch_polls_pending";

/// The scenario's shape.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Cluster members (at least 2: the watcher is on a follower).
    pub members: usize,
    /// Latency mode: puts, one at a time, each waited for at the watcher.
    pub puts: u64,
    /// Fan-out mode: this many watchers on one follower, and one put.
    pub watchers: Option<usize>,
    /// Fan-out mode: watchers per agent (connection), 1 to 64.
    pub polls_per_agent: usize,
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(
        plan.members >= 2,
        "--members must be at least 2 (the watcher is on a follower)"
    );
    anyhow::ensure!(plan.puts >= 1, "--puts must be at least 1");
    let cluster = KvCluster::start(launch.hivekeeper, launch.run, plan.members).await?;
    let brokers = cluster.brokers();
    let (writer, mut errors) = kv_cluster::connect_agents(launch.run, "writer", 1, 1, |_| {
        vec![brokers[cluster.leader()].clone()]
    })
    .await;
    let writer = writer
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the writer could not connect: {:?}", errors.samples))?;
    let started = Instant::now();
    let mut figures = match plan.watchers {
        None => {
            latency(
                &cluster,
                launch.run,
                &writer,
                plan.puts,
                launch.common,
                &mut errors,
            )
            .await?
        }
        Some(watchers) => {
            let shape = FanOut {
                watchers,
                polls_per_agent: plan.polls_per_agent,
            };
            fan_out(
                &cluster,
                launch.run,
                &writer,
                shape,
                launch.common,
                &mut errors,
            )
            .await?
        }
    };
    let elapsed_s = started.elapsed().as_secs_f64();
    figures.members = cluster.size();
    figures.puts_per_s = figures.puts as f64 / elapsed_s.max(1e-9);
    figures.member_rss = cluster.member_rss();
    figures.resends = writer.stats().resends_total;
    Ok(Report::of_kv(elapsed_s, errors, figures))
}

/// Why a watcher heard no event: its stream failed or ended, or nothing came in time. The
/// text starts `watch:`, the kind the report counts it under.
#[derive(Debug, thiserror::Error)]
enum WatchFailure {
    /// The SDK's watch stream yielded an error.
    #[error("watch: {0}")]
    Stream(#[from] AgentError),
    /// The watch stream ended.
    #[error("watch: the watcher's stream ended")]
    Ended,
    /// No event for the key within [`EVENT_WAIT`].
    #[error("watch: no event for {key} within {} s", EVENT_WAIT.as_secs())]
    NoEvent {
        /// The key whose put was not heard of.
        key: String,
    },
}

/// The revision now, read through `writer`: a watch after it sees every later put.
async fn revision_now(writer: &Agent, run: &RunId) -> anyhow::Result<u64> {
    Ok(writer.kv().get(run.resource("watch/start")).await?.revision)
}

/// One watcher on a follower, `puts` puts on the leader one at a time, each waited for at the
/// watcher (at most `--duration-s` in all).
async fn latency(
    cluster: &KvCluster,
    run: &RunId,
    writer: &Agent,
    puts: u64,
    common: &Common,
    errors: &mut Errors,
) -> anyhow::Result<KvFigures> {
    let brokers = cluster.brokers();
    let follower = brokers[cluster.follower()].clone();
    let (watcher, connect_errors) =
        kv_cluster::connect_agents(run, "watcher", 1, 1, |_| vec![follower.clone()]).await;
    errors.merge(connect_errors);
    let watcher =
        watcher.into_iter().flatten().next().ok_or_else(|| {
            anyhow::anyhow!("the watcher could not connect: {:?}", errors.samples)
        })?;
    let prefix = run.resource("watch/");
    let after = revision_now(writer, run).await?;
    // Each event's key and when it arrived, from the watch's own task.
    let (events_tx, mut events) =
        mpsc::unbounded_channel::<Result<(String, Instant), WatchFailure>>();
    let mut watch = watcher
        .kv()
        .watch_prefix(prefix.clone())
        .after(after)
        .wait_ms(POLL_WAIT_MS);
    let watching = tokio::spawn(async move {
        while let Some(item) = watch.next().await {
            let received = Instant::now();
            let sent = match item {
                Ok(WatchItem::Changes { events, .. }) => events
                    .into_iter()
                    .all(|event| events_tx.send(Ok((event.kv.key, received))).is_ok()),
                Ok(WatchItem::Progress { .. }) => true,
                Err(error) => {
                    let _ = events_tx.send(Err(error.into()));
                    false
                }
            };
            if !sent {
                return;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(common.duration_s);
    let value = kv_cluster::value();
    let (mut commit_us, mut event_us) = (Vec::new(), Vec::new());
    for n in 0..puts {
        if Instant::now() > deadline {
            break;
        }
        let key = format!("{prefix}{n}");
        let sent = Instant::now();
        if let Err(error) = writer.kv().put(key.clone(), value.clone()).await {
            errors.add(format!("kv.put: {error}"));
            continue;
        }
        commit_us.push(micros(sent.elapsed()));
        match wait_for_key(&mut events, &key).await {
            Ok(received) => event_us.push(micros(received - sent)),
            Err(failure) => {
                errors.add(failure.to_string());
                break;
            }
        }
    }
    watching.abort();
    Ok(KvFigures {
        puts: commit_us.len() as u64,
        commit: Latency::from_micros(&commit_us),
        event: Some(Latency::from_micros(&event_us)),
        ..KvFigures::default()
    })
}

/// The arrival of `key`'s event, skipping any other; an error when the watch failed or
/// nothing came within [`EVENT_WAIT`].
async fn wait_for_key(
    events: &mut mpsc::UnboundedReceiver<Result<(String, Instant), WatchFailure>>,
    key: &str,
) -> Result<Instant, WatchFailure> {
    let deadline = Instant::now() + EVENT_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(Ok((received_key, received)))) if received_key == key => return Ok(received),
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(error))) => return Err(error),
            Ok(None) => return Err(WatchFailure::Ended),
            Err(_) => {
                return Err(WatchFailure::NoEvent {
                    key: key.to_string(),
                });
            }
        }
    }
}

/// The fan-out's shape: how many watchers, and how many of them share an agent.
#[derive(Debug, Clone, Copy)]
struct FanOut {
    watchers: usize,
    polls_per_agent: usize,
}

/// `watchers` watchers on one follower, `polls_per_agent` to an agent, each with one poll
/// pending on one key; one put on the leader; when each watcher heard of it.
async fn fan_out(
    cluster: &KvCluster,
    run: &RunId,
    writer: &Agent,
    shape: FanOut,
    common: &Common,
    errors: &mut Errors,
) -> anyhow::Result<KvFigures> {
    let FanOut {
        watchers,
        polls_per_agent,
    } = shape;
    anyhow::ensure!(watchers >= 1, "--watchers must be at least 1");
    anyhow::ensure!(
        (1..=POLLS_PER_AGENT_MAX).contains(&polls_per_agent),
        "--polls-per-agent must be 1 to {POLLS_PER_AGENT_MAX} (the service's bound on one \
         agent's pending polls)"
    );
    let member = cluster.follower();
    let follower = cluster.brokers()[member].clone();
    let rss_mb_before = cluster.rss_mb(member);
    let setup_started = Instant::now();
    let agent_count = watchers.div_ceil(polls_per_agent);
    let (agents, connect_errors) = kv_cluster::connect_agents(
        run,
        "watcher",
        agent_count,
        common.connect_concurrency,
        |_| vec![follower.clone()],
    )
    .await;
    errors.merge(connect_errors);
    let agents: Vec<Agent> = agents.into_iter().flatten().collect();
    anyhow::ensure!(
        !agents.is_empty(),
        "no watcher could connect: {:?}",
        errors.samples
    );
    let key = run.resource("watch/fan-out");
    let after = revision_now(writer, run).await?;
    let (mut tasks, heard) = start_watches(&agents, shape, &key, after);
    let connected = agents.len().saturating_mul(polls_per_agent).min(watchers) as u64;
    // Every poll registered on the member: the put must find them all pending.
    // At most half a poll's wait: past a full one the first polls are answered with a
    // bookmark and polled again.
    let all_pending = cluster
        .wait_for_gauge(
            &[member],
            POLLS_PENDING,
            connected,
            Duration::from_millis(POLL_WAIT_MS / 2),
        )
        .await;
    let polls_pending = cluster.gauge(member, POLLS_PENDING).await.unwrap_or(0);
    if !all_pending {
        errors.add(format!(
            "watch: only {polls_pending} of {connected} polls pending on {} before the put",
            cluster.name(member)
        ));
    }
    let setup_s = setup_started.elapsed().as_secs_f64();
    let rss_mb_pending = cluster.rss_mb(member);

    let sent = Instant::now();
    let mut commit_us = Vec::new();
    match writer.kv().put(key.clone(), kv_cluster::value()).await {
        Ok(_) => commit_us.push(micros(sent.elapsed())),
        Err(error) => errors.add(format!("kv.put: {error}")),
    }
    let event_us = events_heard(heard, connected, sent, errors).await;
    tasks.abort_all();
    let watcher_resends = agents.iter().map(|agent| agent.stats().resends_total).sum();
    let event = Latency::from_micros(&event_us);
    Ok(KvFigures {
        puts: commit_us.len() as u64,
        commit: Latency::from_micros(&commit_us),
        fan_out: Some(FanOutFigures {
            member: cluster.name(member).to_string(),
            watchers: watchers as u64,
            connected,
            polls_pending,
            watcher_resends,
            setup_s,
            received: event.count,
            event,
            rss_mb_before,
            rss_mb_pending,
        }),
        ..KvFigures::default()
    })
}

/// When each watcher heard of a change (or why it heard none), from the watchers' tasks.
type Heard = mpsc::UnboundedReceiver<Result<Instant, WatchFailure>>;

/// One watch of `key` after revision `after` for each of `shape`'s watchers, `polls_per_agent`
/// to an agent, each in a task that reports its first change and ends.
fn start_watches(agents: &[Agent], shape: FanOut, key: &str, after: u64) -> (JoinSet<()>, Heard) {
    let (heard_tx, heard) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let mut watches = Vec::new();
    for (index, agent) in agents.iter().enumerate() {
        let first = index * shape.polls_per_agent;
        for _ in first..shape.watchers.min(first + shape.polls_per_agent) {
            watches.push(agent.kv().watch_key(key.to_string()));
        }
    }
    for watch in watches {
        let mut watch = watch.after(after).wait_ms(POLL_WAIT_MS);
        let heard_tx = heard_tx.clone();
        tasks.spawn(async move {
            while let Some(item) = watch.next().await {
                let outcome = match item {
                    Ok(WatchItem::Changes { .. }) => Ok(Instant::now()),
                    Ok(WatchItem::Progress { .. }) => continue,
                    Err(error) => Err(WatchFailure::from(error)),
                };
                let _ = heard_tx.send(outcome);
                return;
            }
        });
    }
    (tasks, heard)
}

/// Each of `connected` watchers' latency from `sent` to hearing of the change, µs, waiting at
/// most [`EVENT_WAIT`]; failures and the watchers that heard nothing go to `errors`.
async fn events_heard(
    mut heard: Heard,
    connected: u64,
    sent: Instant,
    errors: &mut Errors,
) -> Vec<u64> {
    let deadline = Instant::now() + EVENT_WAIT;
    let mut event_us = Vec::new();
    while (event_us.len() as u64) < connected {
        match tokio::time::timeout_at(deadline, heard.recv()).await {
            Ok(Some(Ok(received))) => event_us.push(micros(received - sent)),
            Ok(Some(Err(failure))) => errors.add(failure.to_string()),
            Ok(None) => break,
            Err(_) => {
                let missing = connected - event_us.len() as u64;
                errors.add(format!(
                    "watch: {missing} watchers heard nothing within {} s",
                    EVENT_WAIT.as_secs()
                ));
                break;
            }
        }
    }
    event_us
}
