//! [`Guard`]: proof of a grant (lock, permits, waypoint reservation) with its fencing token.
//!
//! The token is the safety mechanism, the guard only a convenience (DESIGN.md §5.2): pass
//! [`Guard::token`] to whatever the guard protects, and let that resource refuse a token older
//! than the newest it has seen (or ask the service with `fence.check`). A guard cannot stop the
//! world when its lease is lost; the token lets the world stop a stale holder.
//!
//! Releasing: [`Guard::release`] waits for the service's answer. Dropping a guard spawns the
//! same release in the background; that is best effort (no runtime, a lost message), and the
//! lease's end releases everything anyway.
//!
//! One hold per resource per session. The service answers an acquire of something the lease
//! already holds with the existing token, so two guards could share one hold and the first
//! drop would release it under the second. The session therefore keeps a claim per resource
//! (`Slot`): a second acquire while one is held or being acquired is refused with
//! [`AgentError::AlreadyHeld`], and one issued while a release of the same resource is in
//! flight waits for that release first, so `loop { let g = s.lock("x").await?; ... }` works
//! even though each iteration's drop releases in the background.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, broadcast, watch};
use tracing::debug;

use hivekeeper_protocol::{Area, ErrorCode, Event, LockMode, Op, Priority, ResourceKind, Volume};

use crate::error::AgentError;
use crate::session::{Session, SessionInner, SessionState, wait_lost};

/// The vertical cylinder of a waypoint reservation (the protocol's `Area`): centre `lat`/`lon`
/// in degrees, `radius_m`, and an optional altitude band.
pub type Geometry = Area;

/// The time window of a waypoint reservation: `[start_ms, end_ms)` in UTC milliseconds since
/// the Unix epoch, compared by the service with the time of the log entry that applies the
/// request. Without a start it begins at once; without an end it lasts until released. The
/// default (neither) covers all time, as a reservation without a window always has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeWindow {
    /// First instant covered; `None`: from the request's time.
    pub start_ms: Option<u64>,
    /// First instant no longer covered; `None`: until released. The service ends the
    /// reservation by itself then (the guard's token stops being valid).
    pub end_ms: Option<u64>,
}

impl TimeWindow {
    /// `[start_ms, end_ms)`.
    pub fn between(start_ms: u64, end_ms: u64) -> TimeWindow {
        TimeWindow {
            start_ms: Some(start_ms),
            end_ms: Some(end_ms),
        }
    }

    /// From now until `end_ms`.
    pub fn until(end_ms: u64) -> TimeWindow {
        TimeWindow {
            start_ms: None,
            end_ms: Some(end_ms),
        }
    }
}

/// What to acquire.
#[derive(Debug, Clone, PartialEq)]
pub enum Resource {
    /// A FIFO lock.
    Lock {
        /// The lock's name.
        name: String,
    },
    /// Permits of a counting semaphore.
    Semaphore {
        /// The semaphore's name.
        name: String,
        /// Its capacity; the first acquirer fixes it.
        limit: u32,
        /// How many permits to take, 1 to `limit`.
        permits: u32,
    },
    /// A waypoint reservation.
    Waypoint {
        /// The waypoint's name.
        name: String,
        /// The cylinder it also claims; `None` conflicts by name only.
        geometry: Option<Geometry>,
        /// When: two cylinders conflict only if their windows overlap.
        window: TimeWindow,
        /// The priority, 0 (routine) to 3 (emergency). A reservation in the way only of lower
        /// priorities preempts them instead of waiting behind them.
        priority: Priority,
    },
    /// A whole route (`route.reserve`): 1 to 64 4D volumes granted all or nothing with one
    /// token. A route is a waypoint reservation of its name (`kind` is waypoint).
    Route {
        /// The route's name.
        name: String,
        /// Its volumes, in flight order.
        volumes: Vec<Volume>,
        /// As for [`Resource::Waypoint`]'s.
        priority: Priority,
    },
}

impl Resource {
    /// The lock `name`.
    pub fn lock(name: impl Into<String>) -> Resource {
        Resource::Lock { name: name.into() }
    }

    /// Lock, semaphore or waypoint.
    pub fn kind(&self) -> ResourceKind {
        match self {
            Resource::Lock { .. } => ResourceKind::Lock,
            Resource::Semaphore { .. } => ResourceKind::Sem,
            Resource::Waypoint { .. } | Resource::Route { .. } => ResourceKind::Waypoint,
        }
    }

    /// The priority asked for: routine for locks and semaphores, which have none.
    pub fn priority(&self) -> Priority {
        match self {
            Resource::Waypoint { priority, .. } | Resource::Route { priority, .. } => *priority,
            Resource::Lock { .. } | Resource::Semaphore { .. } => Priority::ROUTINE,
        }
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        match self {
            Resource::Lock { name }
            | Resource::Semaphore { name, .. }
            | Resource::Waypoint { name, .. }
            | Resource::Route { name, .. } => name,
        }
    }

    /// The acquire request for it under `lease`.
    pub(crate) fn acquire_op(&self, lease: &str, wait_ms: Option<u64>) -> Op {
        let lease = lease.to_string();
        match self {
            Resource::Lock { name } => Op::LockAcquire {
                name: name.clone(),
                lease,
                wait_ms,
                max_hold_ms: None,
                mode: LockMode::Exclusive,
            },
            Resource::Semaphore {
                name,
                limit,
                permits,
            } => Op::SemAcquire {
                name: name.clone(),
                limit: *limit,
                lease,
                permits: *permits,
                wait_ms,
                max_hold_ms: None,
            },
            Resource::Waypoint {
                name,
                geometry,
                window,
                priority,
            } => Op::WaypointReserve {
                name: name.clone(),
                lease,
                lat: geometry.map(|g| g.lat),
                lon: geometry.map(|g| g.lon),
                alt_min_m: geometry.and_then(|g| g.alt_min_m),
                alt_max_m: geometry.and_then(|g| g.alt_max_m),
                radius_m: geometry.map(|g| g.radius_m),
                wait_ms,
                start_ms: window.start_ms,
                end_ms: window.end_ms,
                priority: *priority,
            },
            Resource::Route {
                name,
                volumes,
                priority,
            } => Op::RouteReserve {
                name: name.clone(),
                lease,
                volumes: volumes.clone(),
                wait_ms,
                priority: *priority,
            },
        }
    }

    /// The release request for it under `lease`.
    pub(crate) fn release_op(&self, lease: &str) -> Op {
        release_op(self.kind(), self.name(), lease)
    }
}

fn release_op(kind: ResourceKind, name: &str, lease: &str) -> Op {
    let (name, lease) = (name.to_string(), lease.to_string());
    match kind {
        ResourceKind::Lock => Op::LockRelease { name, lease },
        ResourceKind::Sem => Op::SemRelease { name, lease },
        ResourceKind::Waypoint => Op::WaypointRelease { name, lease },
        ResourceKind::Election => unreachable!(
            "a guard holds a lock, a semaphore or a waypoint ([`Resource::kind`]), never an \
             election, which is left by `election.resign` with its token"
        ),
        ResourceKind::Barrier => unreachable!(
            "a guard holds a lock, a semaphore or a waypoint ([`Resource::kind`]), never a \
             barrier, which is left by `barrier.leave`"
        ),
    }
}

/// How long an acquire may wait in the service's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Until granted, while the session is live (no `wait_ms`).
    UntilGranted,
    /// Not at all: grant now or [`AgentError::WouldBlock`] (`wait_ms: 0`).
    Try,
    /// At most this long, then [`AgentError::WaitTimeout`] (`wait_ms`, at most one day).
    AtMost(Duration),
}

impl Wait {
    /// The `wait_ms` field this sends.
    pub fn wait_ms(self) -> Option<u64> {
        match self {
            Wait::UntilGranted => None,
            Wait::Try => Some(0),
            // Out of range (over a day) is refused by validation, not silently shortened.
            Wait::AtMost(wait) => Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// The state of one resource in a session's claims.
#[derive(Debug)]
pub(crate) enum Slot {
    /// Being acquired, or held by a guard.
    Busy,
    /// A release is in flight; closes (its sender drops) when the release is done.
    Releasing(watch::Receiver<()>),
}

/// A session's claim on one resource, from the start of its acquire to the end of its release.
#[derive(Debug)]
pub(crate) struct Claim {
    session: Arc<SessionInner>,
    kind: ResourceKind,
    name: String,
    /// Whether dropping the claim frees the slot; false once a [`Releasing`] owns the slot.
    frees_slot: bool,
}

impl Claim {
    /// Claims `(kind, name)` in `session`, waiting for an in-flight release of it first.
    pub(crate) async fn take(
        session: Arc<SessionInner>,
        kind: ResourceKind,
        name: &str,
    ) -> Result<Claim, AgentError> {
        let key = (kind, name.to_string());
        loop {
            let mut releasing = {
                let mut claims = session.claims();
                match claims.get(&key) {
                    None => {
                        claims.insert(key, Slot::Busy);
                        drop(claims);
                        return Ok(Claim {
                            session,
                            kind,
                            name: name.to_string(),
                            frees_slot: true,
                        });
                    }
                    Some(Slot::Busy) => {
                        return Err(AgentError::AlreadyHeld {
                            kind,
                            name: name.to_string(),
                        });
                    }
                    Some(Slot::Releasing(done)) => done.clone(),
                }
            };
            // Returns when the release task drops its sender, after it removed the slot.
            let _ = releasing.changed().await;
        }
    }

    /// The session the claim is in.
    pub(crate) fn session(&self) -> &Arc<SessionInner> {
        &self.session
    }

    /// The resource's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Sends `op`, which ends the hold, and waits for the answer; an acquire of the same
    /// resource waits meanwhile. When the lease already ended nothing is sent and the answer
    /// is [`AgentError::Lost`] (the hold was gone before), as it is when the service no longer
    /// knows the lease.
    pub(crate) async fn release(self, op: Op) -> Result<hivekeeper_protocol::Success, AgentError> {
        let session = self.session.clone();
        let state = session.state();
        if state.is_ended() {
            return Err(AgentError::Lost(state));
        }
        let releasing = self.start_release();
        let result = session.agent.request(op).await;
        drop(releasing);
        match result {
            Err(e) if e.code() == Some(ErrorCode::LeaseNotFound) => {
                session.lease_gone();
                Err(AgentError::Lost(SessionState::Expired))
            }
            result => result,
        }
    }

    /// Sends `op`, which ends the hold, in a task of its own, as a dropped guard does; the
    /// slot stays releasing until the answer. Best effort: nothing is sent when the lease has
    /// ended (its end released everything) or outside a tokio runtime.
    pub(crate) fn release_in_background(self, op: Op) {
        if self.session.state().is_ended() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let agent = self.session.agent.clone();
        let releasing = self.start_release();
        let name = op.name();
        runtime.spawn(async move {
            if let Err(e) = agent.request(op).await {
                debug!("{name} on drop failed (the lease's end undoes it): {e}");
            }
            drop(releasing);
        });
    }

    /// Marks the claim as releasing; the slot is freed when the returned value drops.
    fn start_release(mut self) -> Releasing {
        let (done, waiters) = watch::channel(());
        self.session
            .claims()
            .insert(self.key(), Slot::Releasing(waiters));
        // The slot now belongs to the `Releasing`.
        self.frees_slot = false;
        Releasing {
            session: self.session.clone(),
            key: self.key(),
            _done: done,
        }
    }

    fn key(&self) -> (ResourceKind, String) {
        (self.kind, self.name.clone())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.frees_slot {
            self.session.claims().remove(&self.key());
        }
    }
}

/// A release in flight. Dropping it frees the slot, then (field drop order) closes the channel
/// that acquires of the same resource wait on.
struct Releasing {
    session: Arc<SessionInner>,
    key: (ResourceKind, String),
    _done: watch::Sender<()>,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        self.session.claims().remove(&self.key);
    }
}

/// The service needs a reservation's airspace for a request of a higher priority
/// (`reservation.preempted`): vacate it and release the guard by `vacate_by_ms`, when the
/// service ends it (the token then fails `fence.check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preempted {
    /// When the service ends the reservation unless released first, UTC ms since the Unix
    /// epoch on the service's clock.
    pub vacate_by_ms: u64,
    /// The priority of the request that preempts it.
    pub priority: Priority,
}

/// A granted lock, permits or waypoint reservation, with its fencing token.
///
/// Holds its session alive (keepalives continue while any guard exists). Released by
/// [`Guard::release`], or in the background on drop.
#[derive(Debug)]
pub struct Guard {
    /// The claim, `None` once [`Guard::release`] took it.
    claim: Option<Claim>,
    /// The grant's fencing token.
    token: u64,
    /// The priority it was granted at, which [`Guard::amend`] restates.
    priority: Priority,
    /// The agent's events since before the request was sent (so none for this grant can be
    /// missed), for [`Guard::preempted`]; waypoints and routes only.
    events: Option<Mutex<broadcast::Receiver<Event>>>,
}

impl Guard {
    pub(crate) fn new(
        claim: Claim,
        token: u64,
        priority: Priority,
        events: Option<broadcast::Receiver<Event>>,
    ) -> Guard {
        Guard {
            claim: Some(claim),
            token,
            priority,
            events: events.map(Mutex::new),
        }
    }

    /// The priority the reservation holds (routine for locks and semaphores).
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Resolves when the service tells this reservation (a waypoint's or a route's, with this
    /// guard's token) that a higher priority preempts it: vacate the airspace and release the
    /// guard before [`Preempted::vacate_by_ms`]. Pending forever for a lock or a semaphore,
    /// and once the agent's connection is gone. Events are a courtesy (one missed while
    /// reconnecting, or among more than 256 unread ones, is not seen here): the token is the
    /// safety mechanism.
    pub async fn preempted(&self) -> Preempted {
        self.next_event(|event| match event {
            Event::ReservationPreempted {
                name,
                token,
                vacate_by_ms,
                priority,
                ..
            } if self.is_mine(&name, token) => Some(Preempted {
                vacate_by_ms,
                priority,
            }),
            _ => None,
        })
        .await
    }

    /// Resolves when the service drops this reservation's vacate deadline
    /// (`reservation.preemption_withdrawn`): no waiting request needs its airspace any more,
    /// so it is kept, with its token. Await it after [`Guard::preempted`] (the two read the
    /// same events in order, so neither can miss what the other has not read); a later
    /// preemption resolves [`Guard::preempted`] again. Pending forever for a lock or a
    /// semaphore, and once the agent's connection is gone; a courtesy, as events are.
    pub async fn preemption_withdrawn(&self) {
        self.next_event(|event| match event {
            Event::ReservationPreemptionWithdrawn { name, token, .. }
                if self.is_mine(&name, token) =>
            {
                Some(())
            }
            _ => None,
        })
        .await
    }

    /// Whether an event's reservation is this guard's.
    fn is_mine(&self, name: &str, token: u64) -> bool {
        token == self.token && name == self.claim().name
    }

    /// The first of the agent's unread events that `pick` takes (waypoints and routes only;
    /// pending forever otherwise, and once the connection is gone).
    async fn next_event<T>(&self, pick: impl Fn(Event) -> Option<T>) -> T {
        let Some(events) = &self.events else {
            return std::future::pending().await;
        };
        let mut events = events.lock().await;
        loop {
            match events.recv().await {
                Ok(event) => {
                    if let Some(picked) = pick(event) {
                        return picked;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    return std::future::pending().await;
                }
            }
        }
    }

    fn claim(&self) -> &Claim {
        self.claim
            .as_ref()
            .expect("only release() takes the claim, and it consumes the guard")
    }

    /// The fencing token: strictly increasing per resource across grants, leader changes and
    /// restarts. Send it with every action the guard protects.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.claim().name
    }

    /// Lock, semaphore or waypoint.
    pub fn kind(&self) -> ResourceKind {
        self.claim().kind
    }

    /// The session the grant is bound to.
    pub fn session(&self) -> Session {
        Session {
            inner: self.claim().session.clone(),
        }
    }

    /// Whether the session is not live: stop acting under this guard.
    pub fn is_lost(&self) -> bool {
        !self.claim().session.state().is_live()
    }

    /// Resolves as soon as the session is not `Live` (see [`Session::lost`]): from then on
    /// the grant may be taken away before the SDK can tell.
    pub async fn lost(&self) -> SessionState {
        wait_lost(self.claim().session.state.clone()).await
    }

    /// Releases the grant and waits for the service's answer. When the lease already ended,
    /// nothing is sent and the answer is [`AgentError::Lost`]: the hold was gone before this
    /// release, which the application may want to know.
    pub async fn release(mut self) -> Result<(), AgentError> {
        let claim = self
            .claim
            .take()
            .expect("a guard keeps its claim until it is released");
        let op = release_op(claim.kind, &claim.name, &claim.session.lease);
        claim.release(op).await.map(drop)
    }
}

impl Guard {
    /// Replaces a held route's volumes (`route.amend`), e.g. to extend a delayed flight. The
    /// service grants the new volumes at once, keeping this guard's token, or answers
    /// [`AgentError::WouldBlock`] and keeps the old route; it never waits. Only for a guard of
    /// a route ([`Session::reserve_route`]); for another the service answers `bad_request`.
    /// The route keeps its priority ([`Guard::priority`]).
    pub async fn amend(&self, volumes: Vec<Volume>) -> Result<(), AgentError> {
        let claim = self.claim();
        let session = &claim.session;
        session.check_live()?;
        let op = Op::RouteAmend {
            name: claim.name.clone(),
            lease: session.lease.clone(),
            volumes,
            priority: self.priority,
        };
        session.agent.request(op).await.map(drop)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let op = release_op(claim.kind, &claim.name, &claim.session.lease);
        claim.release_in_background(op);
    }
}
