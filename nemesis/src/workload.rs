//! The in-process workloads, each agent a real SDK client over MQTT, homed on one member (its
//! broker list starts there and goes round the others):
//!
//! ```text
//!  register (mutex) ─ lock L (wait ≤ wait_ms) ─▶ read store[L] ─▶ hold_ms ─▶ write store[L]+1
//!                     with the token ─▶ release            records: Wait, Hold, Write
//!  semaphore        ─ 1 permit of S (limit) ─▶ hold_ms ─▶ release      records: Wait, Hold
//!  leases           ─ lease.grant, then lease.keepalive every TTL/3 by hand, until the
//!                     service says lease_not_found                    records: LeaseLife
//!  observer         ─ inspect of the semaphore every 100 ms: its queue order   records: QueueView
//!  probes           ─ one per member, homed there: try-lock its own lock and release, every
//!                     100 ms: how long the service (not a queue) made a client wait  records: Wait
//! ```
//!
//! The keys and watch workloads, whose records the checker crate judges, are `keys.rs` and
//! `watchers.rs`; the election and barrier workloads are `elections.rs` and `barriers.rs`.
//!
//! Every loop ends at the run's stop time; a request in flight then ends within the SDK's
//! request deadline.

use std::time::Duration;

use hivekeeper_agent::{
    Agent, AgentConfig, AgentError, BrokerOrder, Guard, Resource, Session, Wait as SdkWait,
};
use hivekeeper_checker::recipe::{Answer, LeaseAlive};
use hivekeeper_protocol::{ErrorCode, Inspection, LeaseGranted, Op, Success, UnexpectedReply};
use tokio::time::Instant;

use super::history::{Hold, HoldEnd, LeaseLife, QueueView, Recorder, Timeline, Wait};
use super::store::FencedStore;

/// What every workload task shares.
#[derive(Debug, Clone)]
pub struct Context {
    /// Every member's agent endpoint, n1 first.
    pub brokers: Vec<String>,
    /// Unique per run: the prefix of every agent id and resource name.
    pub run: String,
    /// The sessions' TTL.
    pub ttl_ms: u64,
    /// How long an acquire waits in the queue.
    pub wait_ms: u64,
    /// How long a holder keeps what it got.
    pub hold_ms: u64,
    /// When the workloads stop.
    pub stop_at: Instant,
    /// The run's clock.
    pub timeline: Timeline,
    /// Where the records go.
    pub recorder: Recorder,
}

impl Context {
    /// The config of agent `agent_id` homed on member `home`.
    pub fn config(&self, agent_id: &str, home: usize) -> AgentConfig {
        let n = self.brokers.len();
        AgentConfig {
            agent_id: agent_id.to_string(),
            brokers: (0..n)
                .map(|k| self.brokers[(home + k) % n].clone())
                .collect(),
            // Home first: a fault aimed at a member hits the agents homed there.
            broker_order: BrokerOrder::InOrder,
            // A silent broker (a paused member) is left after ~3 s rather than ~7.5 s.
            mqtt_keepalive_s: 2,
            connect_timeout_s: 2,
            request_deadline_ms: 15_000,
            ..AgentConfig::default()
        }
    }

    /// Whether the run is over.
    pub fn stopped(&self) -> bool {
        Instant::now() >= self.stop_at
    }

    /// Connects, retrying until the run ends.
    pub async fn connect(&self, agent_id: &str, home: usize) -> Option<Agent> {
        while !self.stopped() {
            match Agent::connect(self.config(agent_id, home)).await {
                Ok(agent) => return Some(agent),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        None
    }

    /// A live session, new if `current` is absent or no longer live.
    pub async fn live_session(
        &self,
        agent: &Agent,
        current: &mut Option<Session>,
    ) -> Option<Session> {
        if let Some(session) = current
            && session.state().is_live()
        {
            return Some(session.clone());
        }
        *current = None;
        match agent.session(self.ttl_ms).await {
            Ok(session) => {
                *current = Some(session.clone());
                Some(session)
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                None
            }
        }
    }

    /// The member `agent` is connected to now, if any.
    pub fn member_of(&self, agent: &Agent) -> Option<usize> {
        let broker = agent.broker()?;
        self.brokers.iter().position(|b| *b == broker)
    }

    /// Records an acquire's wait.
    pub fn wait(&self, agent: &str, member: Option<usize>, invoke_us: u64, outcome: String) {
        self.wait_detailed(agent, member, invoke_us, outcome, None);
    }

    /// Records an acquire that failed with `error`.
    pub fn failed(&self, agent: &str, member: Option<usize>, invoke_us: u64, error: &AgentError) {
        let outcome = outcome(error);
        let detail = unexpected(&outcome).then(|| error.to_string());
        self.wait_detailed(agent, member, invoke_us, outcome, detail);
    }

    fn wait_detailed(
        &self,
        agent: &str,
        member: Option<usize>,
        invoke_us: u64,
        outcome: String,
        detail: Option<String>,
    ) {
        let wait = Wait {
            agent: agent.to_string(),
            member,
            invoke_us,
            complete_us: self.timeline.now_us(),
            outcome,
            detail,
        };
        self.recorder.with(|history| history.waits.push(wait));
    }
}

/// A recipe request's outcome as the checkers read it: the service's refusal by its code, or
/// `Unknown` when the SDK gave up (no answer, a lost connection). One a well-formed request
/// should never get ([`unexpected`]) is also recorded, with the request and the error.
pub fn answer<T>(ctx: &Context, request: &str, result: Result<T, AgentError>) -> Answer<T> {
    match result {
        Ok(value) => Answer::Ok(value),
        Err(error) => {
            let outcome = outcome(&error);
            if unexpected(&outcome) {
                let what = format!("{request} was answered {outcome}: {error}");
                ctx.recorder
                    .with(|history| history.recipe_errors.push(what));
            }
            match error.code() {
                Some(code) => Answer::Refused(code.to_string()),
                None => Answer::Unknown,
            }
        }
    }
}

/// Sends `op` as agent `id` and reads its answer as the checkers do ([`answer`]): returns its
/// send time and that answer.
pub async fn ask<T>(ctx: &Context, agent: &Agent, id: &str, op: Op) -> (u64, Answer<T>)
where
    T: TryFrom<Success, Error = UnexpectedReply>,
{
    let invoke_us = ctx.timeline.now_us();
    let request = format!("{id}'s {}", op.name());
    let result = agent.request_as::<T>(op).await;
    (invoke_us, answer(ctx, &request, result))
}

/// One `lease.keepalive` of `lease`, recorded when acknowledged: the proof that the lease
/// still lived, after a refusal that says it holds nothing any more.
pub async fn prove_alive(ctx: &Context, agent: &Agent, lease: &str) {
    let invoke_us = ctx.timeline.now_us();
    let op = Op::LeaseKeepalive {
        lease: lease.to_string(),
    };
    if agent.request(op).await.is_ok() {
        let alive = LeaseAlive {
            lease: lease.to_string(),
            invoke_us,
            complete_us: ctx.timeline.now_us(),
        };
        ctx.recorder
            .with(|history| history.leases_alive.push(alive));
    }
}

/// How an error reads in the records.
pub fn outcome(error: &AgentError) -> String {
    match error.code() {
        Some(code) => code.to_string(),
        None => match error {
            AgentError::Timeout { .. } => "sdk_timeout".into(),
            AgentError::Disconnected => "disconnected".into(),
            AgentError::Lost(_) => "session_lost".into(),
            _ => "other".into(),
        },
    }
}

/// Whether a well-formed acquire should never end this way: the service or the SDK misbehaved.
pub fn unexpected(outcome: &str) -> bool {
    matches!(outcome, "bad_request" | "internal" | "other")
}

/// Releases `guard` and says how the hold ended.
pub async fn release(timeline: &Timeline, guard: Guard) -> HoldEnd {
    let invoke_us = timeline.now_us();
    match guard.release().await {
        Ok(()) => HoldEnd::Released {
            invoke_us,
            complete_us: timeline.now_us(),
        },
        Err(error)
            if matches!(error, AgentError::Lost(_))
                || matches!(
                    error.code(),
                    Some(ErrorCode::NotHolder | ErrorCode::LeaseNotFound)
                ) =>
        {
            HoldEnd::Lost {
                observed_us: timeline.now_us(),
            }
        }
        Err(_) => HoldEnd::Unknown { invoke_us },
    }
}

/// Which list of the history a workload's holds go to.
#[derive(Debug, Clone, Copy)]
enum Holds {
    Lock,
    Semaphore,
}

/// An agent's acquire → `work(token)` → release loop on `resource` until the run ends, every
/// wait and hold recorded.
async fn cycle<F, W>(
    ctx: &Context,
    agent_id: &str,
    home: usize,
    resource: Resource,
    to: Holds,
    work: W,
) where
    W: Fn(u64) -> F,
    F: std::future::Future<Output = ()>,
{
    let (resource, work) = (&resource, &work);
    attempts(ctx, agent_id, home, |live, invoke_us, at| async move {
        let wait = SdkWait::AtMost(Duration::from_millis(ctx.wait_ms));
        match live.acquire(resource.clone(), wait).await {
            Ok(guard) => {
                let granted_us = ctx.timeline.now_us();
                ctx.wait(agent_id, at, invoke_us, "granted".into());
                let token = guard.token();
                work(token).await;
                let end = release(&ctx.timeline, guard).await;
                let hold = Hold {
                    resource: resource.name().to_string(),
                    agent: agent_id.to_string(),
                    token,
                    invoke_us,
                    granted_us,
                    end,
                };
                ctx.recorder.with(|history| match to {
                    Holds::Lock => history.lock_holds.push(hold),
                    Holds::Semaphore => history.sem_holds.push(hold),
                });
            }
            Err(error) => {
                ctx.failed(agent_id, at, invoke_us, &error);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
    .await;
}

/// Connects agent `agent_id` homed on member `home`, then, until the run ends, calls
/// `attempt` with a live session (a new one when the last was lost), the time of the call and
/// the member the agent is connected to then.
async fn attempts<A, F>(ctx: &Context, agent_id: &str, home: usize, mut attempt: A)
where
    A: FnMut(Session, u64, Option<usize>) -> F,
    F: std::future::Future<Output = ()>,
{
    let Some(agent) = ctx.connect(agent_id, home).await else {
        return;
    };
    let mut session = None;
    while !ctx.stopped() {
        let Some(live) = ctx.live_session(&agent, &mut session).await else {
            continue;
        };
        let invoke_us = ctx.timeline.now_us();
        let at = ctx.member_of(&agent);
        attempt(live, invoke_us, at).await;
    }
}

/// One agent of the fenced-register workload on `lock`, homed on member `home`: under each
/// grant, read the register with the token, hold, write it back plus one.
pub async fn register(ctx: Context, store: FencedStore, index: usize, lock: String, home: usize) {
    let agent_id = format!("{}-reg{index}", ctx.run);
    let hold = Duration::from_millis(ctx.hold_ms);
    let work = |token: u64| {
        let (store, lock, agent_id) = (store.clone(), lock.clone(), agent_id.clone());
        async move {
            if let Some(value) = store.read(&lock, &agent_id, token) {
                tokio::time::sleep(hold).await;
                store.write_increment(&lock, &agent_id, token, value);
            }
        }
    };
    let resource = Resource::lock(lock.clone());
    cycle(&ctx, &agent_id, home, resource, Holds::Lock, work).await;
}

/// One agent of the semaphore workload: one permit of `name` (capacity `limit`) at a time.
pub async fn semaphore(ctx: Context, index: usize, name: String, limit: u32) {
    let home = index % ctx.brokers.len();
    let agent_id = format!("{}-sem{index}", ctx.run);
    let hold = Duration::from_millis(ctx.hold_ms);
    let resource = Resource::Semaphore {
        name,
        limit,
        permits: 1,
    };
    let work = |_token: u64| tokio::time::sleep(hold);
    cycle(&ctx, &agent_id, home, resource, Holds::Semaphore, work).await;
}

/// Keeps `lease` alive by hand every `every` until the run ends or the service says it is gone
/// (`lease_not_found`): then returns when the client learnt it. `acked` gets the send time of
/// every acknowledged keepalive.
pub async fn keep_alive(
    ctx: &Context,
    agent: &Agent,
    lease: &str,
    every: Duration,
    mut acked: impl FnMut(u64),
) -> Option<u64> {
    let mut next = Instant::now() + every;
    while !ctx.stopped() {
        tokio::time::sleep_until(next).await;
        next += every;
        let invoke_us = ctx.timeline.now_us();
        let op = Op::LeaseKeepalive {
            lease: lease.to_string(),
        };
        match agent.request(op).await {
            Ok(_) => acked(invoke_us),
            Err(error) if error.code() == Some(ErrorCode::LeaseNotFound) => {
                return Some(ctx.timeline.now_us());
            }
            Err(_) => {}
        }
        // A keepalive answered late: the next one goes out now, not in a burst.
        next = next.max(Instant::now());
    }
    None
}

/// One agent of the lease workload: a lease kept alive by hand (not by the SDK's session), so
/// the send time of every acknowledged keepalive is known.
pub async fn lease(ctx: Context, index: usize) {
    let home = index % ctx.brokers.len();
    let agent_id = format!("{}-lease{index}", ctx.run);
    let Some(agent) = ctx.connect(&agent_id, home).await else {
        return;
    };
    let every = Duration::from_millis(ctx.ttl_ms / 3);
    while !ctx.stopped() {
        let invoke_us = ctx.timeline.now_us();
        let granted = agent
            .request_as(Op::LeaseGrant {
                ttl_ms: ctx.ttl_ms,
                lock_delay_ms: 0,
            })
            .await;
        let Ok(LeaseGranted { lease, .. }) = granted else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut last_ack_invoke_us = invoke_us;
        let acked = |sent_us: u64| last_ack_invoke_us = last_ack_invoke_us.max(sent_us);
        let ended_observed_us = keep_alive(&ctx, &agent, &lease, every, acked).await;
        let life = LeaseLife {
            agent: agent_id.clone(),
            ttl_ms: ctx.ttl_ms,
            last_ack_invoke_us,
            ended_observed_us,
        };
        if life.ended_observed_us.is_none() {
            let _ = agent.request(Op::LeaseRevoke { lease }).await;
        }
        ctx.recorder.with(|history| history.leases.push(life));
    }
}

/// The probe homed on member `home`: an uncontended try-lock and release every 100 ms, so a
/// gap between its grants is the service's, never a queue's.
pub async fn probe(ctx: Context, home: usize) {
    let agent_id = format!("{}-probe{home}", ctx.run);
    let lock = format!("{}-probe{home}", ctx.run);
    let (ctx, agent_id, lock) = (&ctx, agent_id.as_str(), &lock);
    attempts(ctx, agent_id, home, |live, invoke_us, at| async move {
        match live.try_lock(lock.clone()).await {
            Ok(guard) => {
                ctx.wait(agent_id, at, invoke_us, "granted".into());
                let _ = guard.release().await;
            }
            Err(error) => ctx.failed(agent_id, at, invoke_us, &error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    })
    .await;
}

/// The observer: the semaphore's queue as the service shows it, every 100 ms, so the FIFO check
/// compares grant order with a queue order the service itself reported.
pub async fn observer(ctx: Context, name: String) {
    let agent_id = format!("{}-observer", ctx.run);
    let Some(agent) = ctx.connect(&agent_id, 0).await else {
        return;
    };
    while !ctx.stopped() {
        let invoke_us = ctx.timeline.now_us();
        let op = Op::Inspect {
            kind: hivekeeper_protocol::ResourceKind::Sem,
            name: name.clone(),
        };
        if let Ok(inspection) = agent.request_as::<Inspection>(op).await {
            let view = QueueView {
                invoke_us,
                complete_us: ctx.timeline.now_us(),
                waiters: inspection
                    .waiters
                    .into_iter()
                    .map(|waiter| waiter.agent)
                    .collect(),
            };
            ctx.recorder.with(|history| history.queue_views.push(view));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
