//! [`Session`]: a lease kept alive in the background, and the SDK's own deadline on it.
//!
//! ```text
//!            keepalive acked, new deadline in the future
//!        ┌──────────────────────────────────────────────┐
//!        ▼                                              │
//!      Live ── deadline passes (no ack in time) ──▶ Jeopardy
//!        │                                              │
//!        ├── lease.expired event / lease_not_found ─────┴──▶ Expired   (terminal)
//!        └── revoke() / last handle dropped ────────────────▶ Revoked   (terminal)
//!
//!  deadline = send time of the last acknowledged keepalive + TTL − keepalive_margin
//! ```
//!
//! **The SDK gives up first (DESIGN.md §5.3).** The service expires a lease no earlier than
//! TTL after it *received* the last keepalive, and a keepalive is received after it was sent.
//! So as long as the local monotonic clock (`tokio::time::Instant`) has not passed the
//! deadline above, the lease is certainly alive; once it has, the session is in *jeopardy* and
//! [`Session::lost`] resolves, still `margin` before the service could expire the lease and
//! grant what it held to anyone else. Clock-rate drift between the two machines is what the
//! margin is for; the offset between their clocks does not matter, since only local
//! durations are compared.
//!
//! Jeopardy is not the end. Keepalives continue, and one acknowledged in time proves the lease
//! still alive (a live lease has lost nothing it held), so the session returns to `Live` with
//! its guards and tokens intact, as in Chubby. The application decides: stop on
//! [`Session::lost`], and resume only if [`Session::state`] is `Live` again. `Expired` and
//! `Revoked` are final.
//!
//! Keepalives go out every TTL/3 (or `keepalive_every_ms`) from the grant's send time, each under a fresh request id
//! and each on its own small task, so a slow one never delays the next. A keepalive is worth
//! waiting for only while its send time can still move the deadline, so each gives up after
//! `TTL − margin`. It is sent again only when the connection was lost before its answer, never
//! on a mere timeout: the next keepalive, one period later and with a later send time, does
//! better than a resend, and resends would multiply the load on a service that is already too
//! slow to answer (10,000 sessions resending every timeout turned an overload into a collapse,
//! docs/BENCHMARKS.md, "scale").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior, sleep_until};
use tracing::{debug, info, warn};

use hivekeeper_protocol::{
    ErrorCode, Event, Granted, LeaseGranted, LockMode, Op, Priority, ResourceKind, Success,
};

use crate::agent::{Abandon, Agent, Patience, Undo};
use crate::error::AgentError;
use crate::guard::{
    AcquireOptions, Claim, Geometry, Guard, Resource, Slot, TimeWindow, Wait, whole_ms,
};

/// Where a session stands, as the SDK knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// The lease is certainly alive: the deadline is in the future.
    Live,
    /// The deadline has passed without an acknowledged keepalive: the lease may be about to
    /// expire. Guards must be treated as lost; a late acknowledgement can bring `Live` back.
    Jeopardy,
    /// The service said the lease is gone (`lease.expired` event or `lease_not_found`).
    Expired,
    /// The session was revoked, or every handle to it was dropped.
    Revoked,
}

impl SessionState {
    /// Whether the session can be used: only `Live`.
    pub fn is_live(self) -> bool {
        self == SessionState::Live
    }

    /// Whether the lease is known to be over: `Expired` or `Revoked`.
    pub fn is_ended(self) -> bool {
        matches!(self, SessionState::Expired | SessionState::Revoked)
    }
}

/// A lease held by this agent and kept alive in the background; the guards of what it holds
/// are taken through it.
///
/// Cheap to clone. The keepalive task runs while any clone or any [`Guard`] taken from it
/// exists; when the last one is dropped, the lease is revoked (best effort: if that message is
/// lost, the lease simply expires after its TTL).
#[derive(Debug, Clone)]
pub struct Session {
    pub(crate) inner: Arc<SessionInner>,
}

/// What the session handles and guards share.
#[derive(Debug)]
pub(crate) struct SessionInner {
    /// The agent the lease belongs to.
    pub agent: Agent,
    /// The opaque lease id.
    pub lease: String,
    /// The TTL the service granted.
    pub ttl: Duration,
    /// The state, written only by the keeper task.
    pub state: watch::Receiver<SessionState>,
    /// Tells the keeper about a lease end seen elsewhere, or a revoke. Closing it (dropping
    /// the last handle) stops the keeper.
    control: mpsc::Sender<Control>,
    /// What this session holds or is acquiring, by resource: a second guard for a hold would
    /// release it under the first one's feet. See [`Slot`].
    pub claims: Mutex<HashMap<(ResourceKind, String), Slot>>,
}

/// How a session's lease is granted, beyond its TTL; the default asks for nothing more.
/// Passed to [`Agent::session_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionOptions {
    /// When the lease ends by expiry or by an operator (`admin.revoke`), the locks it held
    /// are granted to nobody for this long (`lease.grant`'s `lock_delay_ms`, at most one
    /// minute, whole milliseconds): a holder that has not noticed its loss yet gets time to
    /// stop before anyone else starts. A release, or this session's own revoke, skips it.
    /// Zero, the default: none. Locks only; permits and reservations are freed at once.
    pub lock_delay: Duration,
}

/// Messages to the keeper task.
#[derive(Debug, Clone, Copy)]
enum Control {
    /// A request was answered `lease_not_found`.
    LeaseGone,
    /// [`Session::revoke`] succeeded.
    Revoked,
}

/// Room for control messages; a full channel means the keeper already has one to act on.
const CONTROL_CAPACITY: usize = 4;

impl SessionInner {
    pub(crate) fn state(&self) -> SessionState {
        *self.state.borrow()
    }

    /// `Ok` while the session is live, else [`AgentError::Lost`] with its state.
    pub(crate) fn check_live(&self) -> Result<(), AgentError> {
        let state = self.state();
        if state.is_live() {
            Ok(())
        } else {
            Err(AgentError::Lost(state))
        }
    }

    /// Reports that the service answered `lease_not_found`.
    pub(crate) fn lease_gone(&self) {
        let _ = self.control.try_send(Control::LeaseGone);
    }

    pub(crate) fn claims(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(ResourceKind, String), Slot>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for SessionInner {
    fn drop(&mut self) {
        if self.state().is_ended() {
            return;
        }
        // Nothing can use the lease any more: give it back now rather than after its TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let agent = self.agent.clone();
            let lease = self.lease.clone();
            runtime.spawn(async move {
                if let Err(e) = agent.request(Op::LeaseRevoke { lease }).await {
                    debug!("revoke of a dropped session failed (it will expire): {e}");
                }
            });
        }
    }
}

impl Session {
    /// `lease.grant`, then the keeper task. See [`Agent::session_with`].
    pub(crate) async fn grant(
        agent: Agent,
        ttl_ms: u64,
        options: SessionOptions,
    ) -> Result<Session, AgentError> {
        let margin_ms = agent.config().keepalive_margin_ms;
        if ttl_ms <= 2 * margin_ms {
            return Err(AgentError::Config(format!(
                "ttl_ms ({ttl_ms}) must be more than twice keepalive_margin_ms ({margin_ms}), \
                 or the session would be in jeopardy before its second keepalive"
            )));
        }
        if let Some(every_ms) = agent.config().keepalive_every_ms
            && ttl_ms <= 2 * every_ms
        {
            return Err(AgentError::Config(format!(
                "ttl_ms ({ttl_ms}) must be more than twice keepalive_every_ms ({every_ms}): one \
                 lost keepalive must not cost the lease"
            )));
        }
        // Taken before the first send: the lease cannot have been created earlier, so a
        // deadline counted from here is on the safe side even if a retry was the one answered.
        let sent = Instant::now();
        let events = agent.events();
        let LeaseGranted {
            lease,
            ttl_ms: granted_ttl_ms,
        } = agent
            .request_as(Op::LeaseGrant {
                ttl_ms,
                lock_delay_ms: whole_ms(options.lock_delay),
            })
            .await?;
        let ttl = Duration::from_millis(granted_ttl_ms);
        let margin = Duration::from_millis(margin_ms).min(ttl / 2);
        // The service may grant another TTL than asked: the period follows the granted one.
        let period = agent
            .config()
            .keepalive_every_ms
            .map_or(ttl / 3, |every_ms| {
                Duration::from_millis(every_ms).min(ttl / 2)
            });
        let (state_tx, state_rx) = watch::channel(SessionState::Live);
        let (control_tx, control_rx) = mpsc::channel(CONTROL_CAPACITY);
        let keeper = Keeper {
            agent: agent.clone(),
            lease: lease.clone(),
            ttl,
            margin,
            period,
            deadline: sent + ttl - margin,
            state: state_tx,
            control: control_rx,
            events,
        };
        tokio::spawn(keeper.run(sent));
        info!(%lease, ttl_ms = ttl.as_millis() as u64, "session granted");
        Ok(Session {
            inner: Arc::new(SessionInner {
                agent,
                lease,
                ttl,
                state: state_rx,
                control: control_tx,
                claims: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The opaque lease id, as the service granted it.
    pub fn lease(&self) -> &str {
        &self.inner.lease
    }

    /// The lease's TTL.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The agent this session belongs to.
    pub fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// The state right now.
    pub fn state(&self) -> SessionState {
        self.inner.state()
    }

    /// A receiver of every state change, for `select!` loops and dashboards.
    pub fn watch(&self) -> watch::Receiver<SessionState> {
        self.inner.state.clone()
    }

    /// Resolves as soon as the session is not `Live` (jeopardy, expired or revoked), with that
    /// state; at once if it already is not. Race your critical section against it.
    pub async fn lost(&self) -> SessionState {
        wait_lost(self.inner.state.clone()).await
    }

    /// Ends the lease now: the service releases everything it holds and drops its waits in one
    /// log entry. Guards of this session become inert (their drop sends nothing). Revoking a
    /// lease that is already gone is a success.
    pub async fn revoke(&self) -> Result<(), AgentError> {
        if self.state().is_ended() {
            return Ok(());
        }
        let lease = self.inner.lease.clone();
        match self.inner.agent.request(Op::LeaseRevoke { lease }).await {
            Ok(_) => {}
            Err(e) if e.code() == Some(ErrorCode::LeaseNotFound) => {}
            Err(e) => return Err(e),
        }
        // The keeper is alive while this handle is; it applies the message promptly.
        let _ = self.inner.control.send(Control::Revoked).await;
        let mut state = self.inner.state.clone();
        let _ = state.wait_for(|s| s.is_ended()).await;
        Ok(())
    }

    /// Acquires `resource`, waiting as `wait` says, while the session is `Live`: a lock
    /// (exclusive or shared), a multi-lock, permits or a reservation. [`Session::acquire_with`]
    /// with the default options.
    pub async fn acquire(&self, resource: Resource, wait: Wait) -> Result<Guard, AgentError> {
        self.acquire_with(resource, wait, AcquireOptions::default())
            .await
    }

    /// Acquires `resource`, waiting as `wait` says, while the session is `Live`, held as
    /// `options` say (a max-hold).
    ///
    /// Errors: [`AgentError::Lost`] when the session is not live (before, or while waiting);
    /// [`AgentError::WouldBlock`] for [`Wait::Try`] on a taken resource;
    /// [`AgentError::WaitTimeout`] when [`Wait::AtMost`] runs out; [`AgentError::AlreadyHeld`]
    /// when this session already holds or is acquiring it; any other refusal as
    /// [`AgentError::Service`].
    ///
    /// Cancel-safe in the sense that matters: if the future is dropped (or the session is lost)
    /// while the request is queued at the service, a grant that arrives later is released.
    pub async fn acquire_with(
        &self,
        resource: Resource,
        wait: Wait,
        options: AcquireOptions,
    ) -> Result<Guard, AgentError> {
        let inner = &self.inner;
        inner.check_live()?;
        let op = resource.acquire_op(&inner.lease, wait.wait_ms(), options)?;
        AgentError::check_locally(&op)?;
        let claim = Claim::take_all(inner.clone(), resource.kind(), resource.names()).await?;
        // Registered before the request goes, so a `*.lost` or a `reservation.preempted` that
        // follows the grant at once is not missed (`Guard::ended`, `Guard::preempted`).
        let acquiring = inner.agent.acquiring(resource.kind(), resource.names());
        let events = (resource.kind() == ResourceKind::Waypoint).then(|| inner.agent.events());
        let undo = Undo::Send(resource.release_op(&inner.lease));
        let success = self.queue(op, Some(undo)).await?;
        let granted = Granted::try_from(success);
        let token = granted.as_ref().map_or(0, |granted| granted.token);
        // From here on the hold exists: the guard's drop releases it on every path.
        let guard = Guard::new(claim, token, &resource, acquiring, events);
        if let Err(unexpected) = granted {
            return Err(unexpected.into());
        }
        inner.check_live()?;
        Ok(guard)
    }

    /// Sends `op`, a request that may wait in a resource's queue, and waits for its answer
    /// while the session is live: [`AgentError::Lost`] as soon as it is not (or when the
    /// service no longer knows the lease). If the future is dropped, or the session is lost,
    /// while the request is queued, `undo` undoes a grant that arrives later.
    pub(crate) async fn queue(&self, op: Op, undo: Option<Undo>) -> Result<Success, AgentError> {
        let inner = &self.inner;
        let patience = inner.agent.patience_for(&op);
        let abandon = undo.map(|undo| Abandon {
            undo,
            session: inner.state.clone(),
        });
        let result = tokio::select! {
            // A grant that is ready wins over a loss noticed at the same instant; the caller
            // still refuses it if the session is no longer live.
            biased;
            result = inner.agent.call(op, patience, abandon) => result,
            state = wait_lost(inner.state.clone()) => return Err(AgentError::Lost(state)),
        };
        match result {
            Err(e) if e.code() == Some(ErrorCode::LeaseNotFound) => {
                inner.lease_gone();
                Err(AgentError::Lost(SessionState::Expired))
            }
            result => result,
        }
    }

    /// Takes the FIFO lock `name`, waiting in the service's queue for as long as the session is
    /// live. Exclusive: the same as [`Session::write_lock`].
    pub async fn lock(&self, name: impl Into<String>) -> Result<Guard, AgentError> {
        self.acquire(Resource::lock(name), Wait::UntilGranted).await
    }

    /// Takes the lock `name` exclusive (a writer), waiting while the session is live: no other
    /// holder, shared or exclusive, beside it. [`Guard::downgrade`] makes it shared. Other
    /// waits: [`Session::acquire`] with [`Resource::lock`].
    pub async fn write_lock(&self, name: impl Into<String>) -> Result<Guard, AgentError> {
        self.lock(name).await
    }

    /// Takes the lock `name` shared (a reader), waiting while the session is live: held
    /// together with other shared holders, each with its own token, never beside an exclusive
    /// one. Strict FIFO: behind a waiting writer it waits too, so writers are not starved.
    /// Other waits: [`Session::acquire`] with [`Resource::read_lock`]. A shared hold is never
    /// upgraded: release it, then take the write lock.
    pub async fn read_lock(&self, name: impl Into<String>) -> Result<Guard, AgentError> {
        self.acquire(Resource::read_lock(name), Wait::UntilGranted)
            .await
    }

    /// Takes every lock of `names` (1 to 64, distinct) in `mode` as one multi-lock, waiting
    /// while the session is live: granted all together with one token, or queued FIFO as a
    /// unit, holding none of them meanwhile, so it never deadlocks against another multi-lock
    /// however that one orders the names. The guard releases them together
    /// (`lock.release_all`). Refused [`AgentError::AlreadyHeld`] when this session holds or
    /// acquires one of them already. Other waits and a max-hold: [`Session::acquire_with`]
    /// with [`Resource::lock_all`].
    pub async fn lock_all<N: Into<String>>(
        &self,
        names: impl IntoIterator<Item = N>,
        mode: LockMode,
    ) -> Result<Guard, AgentError> {
        self.acquire(Resource::lock_all(names, mode), Wait::UntilGranted)
            .await
    }

    /// Takes the lock `name` if it is free right now (`wait_ms: 0`); otherwise
    /// [`AgentError::WouldBlock`].
    pub async fn try_lock(&self, name: impl Into<String>) -> Result<Guard, AgentError> {
        self.acquire(Resource::lock(name), Wait::Try).await
    }

    /// Takes the lock `name`, waiting at most `wait` in the service's queue; then
    /// [`AgentError::WaitTimeout`]. The wait is enforced by the service (`wait_ms`), so the
    /// request leaves the queue when it runs out.
    pub async fn lock_timeout(
        &self,
        name: impl Into<String>,
        wait: Duration,
    ) -> Result<Guard, AgentError> {
        self.acquire(Resource::lock(name), Wait::AtMost(wait)).await
    }

    /// Takes `permits` of the counting semaphore `name` of capacity `limit`, waiting while the
    /// session is live. The first acquirer fixes `limit`; another value is refused
    /// (`limit_mismatch`).
    pub async fn semaphore(
        &self,
        name: impl Into<String>,
        limit: u32,
        permits: u32,
    ) -> Result<Guard, AgentError> {
        let resource = Resource::Semaphore {
            name: name.into(),
            limit,
            permits,
        };
        self.acquire(resource, Wait::UntilGranted).await
    }

    /// Reserves the waypoint `name`, and with `geometry` the cylinder around it, waiting while
    /// the session is live.
    pub async fn reserve_waypoint(
        &self,
        name: impl Into<String>,
        geometry: Option<Geometry>,
    ) -> Result<Guard, AgentError> {
        let resource = Resource::Waypoint {
            name: name.into(),
            geometry,
            window: TimeWindow::default(),
            priority: Priority::ROUTINE,
        };
        self.acquire(resource, Wait::UntilGranted).await
    }

    /// Reserves the route `name`: its `volumes` (1 to 64 cylinders with altitude bands and
    /// time windows) as one intent, granted all or nothing with one token, waiting as `wait`
    /// says (FIFO as a unit behind earlier conflicting requests). The guard amends
    /// ([`Guard::amend`]) and releases the route.
    pub async fn reserve_route(
        &self,
        name: impl Into<String>,
        volumes: Vec<hivekeeper_protocol::Volume>,
        wait: Wait,
    ) -> Result<Guard, AgentError> {
        self.reserve_route_at(name, volumes, wait, Priority::ROUTINE)
            .await
    }

    /// [`Session::reserve_route`] at `priority`. A route in the way only of lower priorities is
    /// not queued behind them: each holder is told to vacate by a deadline, and the route is
    /// granted when they have released or at the deadline, with a higher token. Among waiters a
    /// higher priority goes first.
    pub async fn reserve_route_at(
        &self,
        name: impl Into<String>,
        volumes: Vec<hivekeeper_protocol::Volume>,
        wait: Wait,
        priority: Priority,
    ) -> Result<Guard, AgentError> {
        let resource = Resource::Route {
            name: name.into(),
            volumes,
            priority,
        };
        self.acquire(resource, wait).await
    }

    /// Reserves the waypoint `name` (and with `geometry` its cylinder) for the time `window`
    /// only, waiting as `wait` says. A future window is granted at once when nothing conflicts
    /// with it in space and time; the guard's token is issued then. The service ends the
    /// reservation by itself at `window.end_ms`.
    pub async fn reserve_waypoint_in(
        &self,
        name: impl Into<String>,
        geometry: Option<Geometry>,
        window: TimeWindow,
        wait: Wait,
    ) -> Result<Guard, AgentError> {
        self.reserve_waypoint_at(name, geometry, window, wait, Priority::ROUTINE)
            .await
    }

    /// [`Session::reserve_waypoint_in`] at `priority`, which preempts as
    /// [`Session::reserve_route_at`] says.
    pub async fn reserve_waypoint_at(
        &self,
        name: impl Into<String>,
        geometry: Option<Geometry>,
        window: TimeWindow,
        wait: Wait,
        priority: Priority,
    ) -> Result<Guard, AgentError> {
        let resource = Resource::Waypoint {
            name: name.into(),
            geometry,
            window,
            priority,
        };
        self.acquire(resource, wait).await
    }
}

/// Waits until the state is not `Live`; a gone keeper counts as `Revoked` (its last state
/// is returned when it is final).
pub(crate) async fn wait_lost(mut state: watch::Receiver<SessionState>) -> SessionState {
    let seen = state.wait_for(|s| !s.is_live()).await.map(|s| *s);
    seen.unwrap_or_else(|_| match *state.borrow() {
        SessionState::Live => SessionState::Revoked,
        last => last,
    })
}

/// The background task of one session: keepalives, the deadline, and the state.
struct Keeper {
    agent: Agent,
    lease: String,
    ttl: Duration,
    margin: Duration,
    /// How often a keepalive goes out (`keepalive_every_ms`, or TTL/3).
    period: Duration,
    /// Send time of the last acknowledged keepalive (or of the grant) + TTL − margin.
    deadline: Instant,
    state: watch::Sender<SessionState>,
    control: mpsc::Receiver<Control>,
    events: broadcast::Receiver<Event>,
}

/// How one keepalive ended.
#[derive(Debug)]
enum Keepalive {
    /// Acknowledged; this is when it was sent.
    Acked(Instant),
    /// The service does not know the lease any more.
    LeaseGone,
    /// No answer in time, or another refusal.
    Failed,
}

impl Keeper {
    async fn run(mut self, granted_sent: Instant) {
        let period = self.period;
        let mut ticks = tokio::time::interval_at(granted_sent + period, period);
        // After a stall, one keepalive now and the cadence from there, not a burst.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Dropped with the keeper, which aborts keepalives still in flight.
        let mut keepalives = JoinSet::new();
        // False once the event channel closed, so a closed channel is not polled in a loop.
        let mut events_open = true;
        loop {
            let live = self.state.borrow().is_live();
            tokio::select! {
                _ = ticks.tick() => {
                    keepalives.spawn(keepalive(
                        self.agent.clone(),
                        self.lease.clone(),
                        self.ttl,
                        self.margin,
                    ));
                }
                Some(joined) = keepalives.join_next() => match joined {
                    Ok(Keepalive::Acked(sent)) => self.acked(sent),
                    Ok(Keepalive::LeaseGone) => return self.end(SessionState::Expired),
                    Ok(Keepalive::Failed) | Err(_) => {}
                },
                () = sleep_until(self.deadline), if live => {
                    warn!(
                        lease = %self.lease,
                        "no keepalive acknowledged in time: session in jeopardy"
                    );
                    self.state.send_replace(SessionState::Jeopardy);
                }
                event = self.events.recv(), if events_open => match event {
                    // An operator's `admin.revoke` ends the lease as surely as an expiry.
                    Ok(Event::LeaseExpired { lease } | Event::LeaseRevoked { lease })
                        if lease == self.lease =>
                    {
                        return self.end(SessionState::Expired);
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        warn!(missed, "session missed events");
                    }
                    // The agent's event sender lives as long as the agent, which this task
                    // holds: not reachable, but then keepalives alone decide.
                    Err(broadcast::error::RecvError::Closed) => events_open = false,
                },
                control = self.control.recv() => match control {
                    Some(Control::LeaseGone) => return self.end(SessionState::Expired),
                    Some(Control::Revoked) | None => return self.end(SessionState::Revoked),
                },
            }
        }
    }

    /// A keepalive sent at `sent` was acknowledged: the lease lives at least until
    /// `sent + TTL` on the service's side.
    fn acked(&mut self, sent: Instant) {
        let deadline = sent + self.ttl - self.margin;
        if deadline > self.deadline {
            self.deadline = deadline;
        }
        let jeopardy = *self.state.borrow() == SessionState::Jeopardy;
        if jeopardy && self.deadline > Instant::now() {
            info!(lease = %self.lease, "keepalive acknowledged in time: session live again");
            self.state.send_replace(SessionState::Live);
        }
    }

    fn end(&mut self, state: SessionState) {
        info!(lease = %self.lease, ?state, "session ended");
        self.state.send_replace(state);
    }
}

/// One keepalive, under its own request id, retried until it can no longer help.
async fn keepalive(agent: Agent, lease: String, ttl: Duration, margin: Duration) -> Keepalive {
    let sent = Instant::now();
    // One attempt for the whole useful life: see the module doc.
    let useful = ttl - margin;
    let patience = Patience {
        attempt: useful,
        total: Some(useful),
    };
    match agent
        .call(Op::LeaseKeepalive { lease }, patience, None)
        .await
    {
        Ok(_) => Keepalive::Acked(sent),
        Err(e) if e.code() == Some(ErrorCode::LeaseNotFound) => Keepalive::LeaseGone,
        Err(e) => {
            debug!("keepalive failed: {e}");
            Keepalive::Failed
        }
    }
}
