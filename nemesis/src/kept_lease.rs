//! A lease an agent grants itself and keeps alive by hand, from a task of its own (not the
//! SDK's session), so that every proof that it lived is recorded with its send time; the
//! recorder of the `lock.lost` events an agent is told; and the loop of an agent that takes
//! turns under such a lease. What the hold-time and read-write workloads share: their
//! checkers bound a hold's end by its lease's last proof of life.
//!
//! ```text
//!  KeptLease::grant ─ lease.grant ─▶ News::Granted ─▶ keepalive every `every` ─▶ News::KeptAlive
//!                                                     … lease_not_found ─▶ News::Gone, is_gone()
//!  dropped (or stop_keepalives) ─▶ the keepalives stop: the lease lapses unless revoked
//!  take_turns: new_lease (when none, or gone) ─▶ turn ─▶ 10-50 ms ─▶ … run over ─▶ drop_lease
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hivekeeper_agent::Agent;
use hivekeeper_checker::hold_time::Lost;
use hivekeeper_checker::recipe::Answer;
use hivekeeper_protocol::{Event, LeaseGranted, LostReason, Op};
use tokio::task::JoinHandle;

use crate::history::History;
use crate::workload::{self, Context, ask};

/// What the service said of a kept lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum News {
    /// Its `lease.grant` was answered: it lived.
    Granted,
    /// A keepalive was acknowledged: it lived.
    KeptAlive,
    /// A keepalive was answered `lease_not_found`: it had ended.
    Gone,
}

/// Told every [`News`] of a lease: the lease, the news, and the send time of the request
/// that brought it (for [`News::Gone`], when it arrived).
pub type Reporter = Arc<dyn Fn(&str, News, u64) + Send + Sync>;

/// A lease of an agent and the task keeping it alive.
pub struct KeptLease {
    /// The lease's id.
    pub id: String,
    keepalives: JoinHandle<()>,
    /// Set once a keepalive was answered `lease_not_found`.
    gone: Arc<AtomicBool>,
}

impl KeptLease {
    /// Grants agent `id` a lease (`grant`, a `lease.grant`) and keeps it alive every `every`
    /// until dropped or the run ends, telling `report` each news; `None` when the grant
    /// failed (after a short pause, so a caller may loop).
    pub async fn grant(
        ctx: &Context,
        agent: &Agent,
        id: &str,
        grant: Op,
        every: Duration,
        report: Reporter,
    ) -> Option<KeptLease> {
        let (invoke_us, granted) = ask::<LeaseGranted>(ctx, agent, id, grant).await;
        let Answer::Ok(granted) = granted else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return None;
        };
        report(&granted.lease, News::Granted, invoke_us);
        let gone = Arc::new(AtomicBool::new(false));
        let keepalives = tokio::spawn(keep_alive(
            ctx.clone(),
            agent.clone(),
            granted.lease.clone(),
            every,
            gone.clone(),
            report,
        ));
        Some(KeptLease {
            id: granted.lease,
            keepalives,
            gone,
        })
    }

    /// Whether a keepalive found the lease gone.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// Stops the keepalives: the lease lapses unless it is revoked.
    pub fn stop_keepalives(&self) {
        self.keepalives.abort();
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        self.keepalives.abort();
    }
}

/// An agent of a lease workload: one lease at a time, under which it takes its turns.
pub trait LeaseHolder {
    /// A new lease, recorded, and its keepalive task; `None` when the grant failed.
    async fn new_lease(&self) -> Option<KeptLease>;
    /// One acquire under `lease` and what follows it; returns the lease when it goes on.
    async fn turn(&self, lease: KeptLease, rng: &mut fastrand::Rng) -> Option<KeptLease>;
    /// Ends `lease` by its agent's `lease.revoke`, recorded.
    async fn drop_lease(&self, lease: KeptLease);
}

/// Agent `id` of a lease workload until the run ends: connected, homed on member `home`, every
/// `lock.lost` it is told recorded into the list `into` names, and `holder` (made of its
/// connection and id) taking its turns, each under its lease, a new one when it has none or
/// it is gone; the last lease is revoked.
pub async fn take_turns<H: LeaseHolder>(
    ctx: &Context,
    id: String,
    home: usize,
    into: fn(&mut History) -> &mut Vec<Lost>,
    rng: &mut fastrand::Rng,
    holder: impl FnOnce(Agent, String) -> H,
) {
    let Some(agent) = ctx.connect(&id, home).await else {
        return;
    };
    let events = tokio::spawn(record_lost(ctx.clone(), agent.clone(), id.clone(), into));
    let holder = holder(agent, id);
    let mut kept: Option<KeptLease> = None;
    while !ctx.stopped() {
        let lease = match kept.take() {
            Some(lease) if !lease.is_gone() => lease,
            _ => match holder.new_lease().await {
                Some(lease) => lease,
                None => continue,
            },
        };
        kept = holder.turn(lease, rng).await;
        tokio::time::sleep(Duration::from_millis(rng.u64(10..50))).await;
    }
    if let Some(lease) = kept {
        holder.drop_lease(lease).await;
    }
    events.abort();
}

/// Keeps `lease` alive every `every` until aborted or the run ends, each acknowledged
/// keepalive reported; sets `gone` (and reports it) when the service says the lease ended.
async fn keep_alive(
    ctx: Context,
    agent: Agent,
    lease: String,
    every: Duration,
    gone: Arc<AtomicBool>,
    report: Reporter,
) {
    let acked = |sent_us| report(&lease, News::KeptAlive, sent_us);
    if let Some(observed_us) = workload::keep_alive(&ctx, &agent, &lease, every, acked).await {
        gone.store(true, Ordering::Relaxed);
        report(&lease, News::Gone, observed_us);
    }
}

/// Records every `lock.lost` agent `id` is told, into the list `into` names, until the run
/// ends.
async fn record_lost(
    ctx: Context,
    agent: Agent,
    id: String,
    into: fn(&mut History) -> &mut Vec<Lost>,
) {
    let mut events = agent.events();
    while let Ok(received) = tokio::time::timeout_at(ctx.stop_at, events.recv()).await {
        let event = match received {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if let Event::LockLost {
            name,
            token,
            reason,
        } = event
        {
            let lost = Lost {
                agent: id.clone(),
                lock: name,
                token,
                max_hold: reason == Some(LostReason::MaxHold),
                observed_us: ctx.timeline.now_us(),
            };
            ctx.recorder.with(|history| into(history).push(lost));
        }
    }
}
