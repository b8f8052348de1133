//! `reclaim`: how long a lock stays with a holder that stopped, once its keepalives stop.
//!
//! Per round: the holder takes a lease of the TTL under test and the lock, sends two
//! keepalives a third of the TTL apart, and then goes silent (its connection stays up: the
//! service learns of the failure only through the missing keepalives). A waiter, queued on the
//! lock before that, is granted when the lease expires. The figure is the time from the *send*
//! of the holder's last acknowledged keepalive to the waiter's grant: the service cannot have
//! received that keepalive earlier, so the figure is, if anything, slightly high. The holder
//! sends its own requests (not an SDK session) so that the bench knows exactly when the last
//! keepalive left.

use std::time::Duration;

use hivekeeper_agent::protocol::{Granted, Inspection, LeaseGranted, LockMode, Op, ResourceKind};
use hivekeeper_agent::{Agent, AgentConfig};
use tokio::time::Instant;

use super::Common;
use super::history::{self, Grant};
use super::report::{ReclaimFigures, Report};
use super::swarm::{self, RunId};

/// Keepalives the holder sends before it stops.
const KEEPALIVES_BEFORE_SILENCE: usize = 2;

/// Runs `rounds` rounds for each TTL.
pub async fn run(
    common: &Common,
    run: &RunId,
    ttls_ms: &[u64],
    rounds: usize,
) -> anyhow::Result<Report> {
    anyhow::ensure!(rounds >= 1, "--rounds must be at least 1");
    let base = common.agent_base()?;
    let (waiters, mut errors) =
        swarm::connect(&base, run, "waiter", 1, common.session_ttl_ms, 1).await;
    let Some(Some(waiter)) = waiters.into_iter().next() else {
        anyhow::bail!("the waiter could not connect: {:?}", errors.samples);
    };
    let holder = AgentConfig {
        agent_id: run.agent("holder", 0),
        ..base
    };
    let holder = Agent::connect(run.authenticate(holder).await?).await?;
    let started = Instant::now();
    let mut grants = Vec::new();
    let mut figures = Vec::new();
    let mut rounds_done: u64 = 0;
    for (ttl_number, &ttl_ms) in ttls_ms.iter().enumerate() {
        let mut round_ms = Vec::new();
        for round in 0..rounds {
            let lock = run.resource(&format!("reclaim-{ttl_ms}-{round}"));
            let resource = ttl_number * rounds + round;
            match one_round(&holder, &waiter.session, &lock, ttl_ms, resource).await {
                Ok((reclaim, round_grants)) => {
                    rounds_done += 1;
                    round_ms.push(reclaim.as_secs_f64() * 1_000.0);
                    grants.extend(round_grants);
                }
                Err(error) => errors.add(format!("round: ttl {ttl_ms} ms: {error:#}")),
            }
        }
        let worst = round_ms.iter().copied().fold(f64::NAN, f64::max);
        figures.push(ReclaimFigures {
            ttl_ms,
            over_ttl_ms_max: worst - ttl_ms as f64,
            reclaim_ms: round_ms,
        });
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    Ok(Report {
        elapsed_s,
        cycles: rounds_done,
        ops_per_s: rounds_done as f64 / elapsed_s.max(1e-9),
        mutual_exclusion: history::check_exclusion(&grants, 1),
        errors,
        reclaim: figures,
        ..Report::default()
    })
}

/// One round on a fresh lock; returns the reclaim time and the two grants.
async fn one_round(
    holder: &Agent,
    waiter: &hivekeeper_agent::Session,
    lock: &str,
    ttl_ms: u64,
    resource: usize,
) -> anyhow::Result<(Duration, Vec<Grant>)> {
    let LeaseGranted { lease, .. } = holder
        .request_as(Op::LeaseGrant {
            ttl_ms,
            lock_delay_ms: 0,
        })
        .await?;
    let acquire_at = Instant::now();
    let held: Granted = holder
        .request_as(Op::LockAcquire {
            name: lock.to_string(),
            lease: lease.clone(),
            wait_ms: Some(0),
            max_hold_ms: None,
            mode: LockMode::Exclusive,
        })
        .await?;
    let holder_grant = Grant {
        resource,
        agent: 0,
        token: held.token,
        acquire_at,
        granted_at: Instant::now(),
        // Set below: the holder never releases.
        release_at: None,
    };

    // The waiter queues, and is seen queued, before the holder goes silent.
    let waiter_acquire_at = Instant::now();
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.to_string());
        // Bounded: the lease expires after its TTL; ten TTLs is a broken service.
        let wait = Duration::from_millis(10 * ttl_ms);
        tokio::spawn(async move {
            let guard = waiter
                .acquire(
                    hivekeeper_agent::Resource::lock(lock),
                    hivekeeper_agent::Wait::AtMost(wait),
                )
                .await;
            (guard, Instant::now())
        })
    };
    wait_until_queued(holder, lock).await?;

    let period = Duration::from_millis(ttl_ms / 3);
    let mut last_keepalive_sent = Instant::now();
    for _ in 0..KEEPALIVES_BEFORE_SILENCE {
        tokio::time::sleep(period).await;
        let sent = Instant::now();
        holder
            .request(Op::LeaseKeepalive {
                lease: lease.clone(),
            })
            .await?;
        last_keepalive_sent = sent;
    }
    // Silence from here on.
    let (guard, granted_at) = waiting.await?;
    let guard = guard?;
    let reclaim = granted_at - last_keepalive_sent;
    let release_at = Instant::now();
    let waiter_grant = Grant {
        resource,
        agent: 1,
        token: guard.token(),
        acquire_at: waiter_acquire_at,
        granted_at,
        release_at: Some(release_at),
    };
    guard.release().await?;
    // The service received the last keepalive after it was sent, and a lease never expires
    // before its TTL: the holder's hold lasts at least until send time + TTL. A waiter
    // granted earlier held the lock while the holder's lease was alive, which the check
    // reports as two holders at once.
    let mut holder_grant = holder_grant;
    holder_grant.release_at = Some(last_keepalive_sent + Duration::from_millis(ttl_ms));
    Ok((reclaim, vec![holder_grant, waiter_grant]))
}

/// Polls `inspect` until the lock has a waiter (at most 5 s).
async fn wait_until_queued(agent: &Agent, lock: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let seen: Inspection = agent
            .request_as(Op::Inspect {
                kind: ResourceKind::Lock,
                name: lock.to_string(),
            })
            .await?;
        if !seen.waiters.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    anyhow::bail!("the waiter was not queued on {lock} within 5 s")
}
