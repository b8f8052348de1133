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
//! (`Slot`, in `claim.rs`): a second acquire while one is held or being acquired is refused
//! with [`AgentError::AlreadyHeld`], and one issued while a release of the same resource is in
//! flight waits for that release first, so `loop { let g = s.lock("x").await?; ... }` works
//! even though each iteration's drop releases in the background. A multi-lock
//! ([`Resource::LockAll`]) claims each of its locks, so it never overlaps a single lock of one
//! of its names in the same session.
//!
//! How a hold ends, as [`Guard::ended`] tells ([`HoldEnd`]):
//!
//! ```text
//!  lock.lost / sem.lost {token, reason: "max_hold"} ─▶ MaxHold   (the lease lives on)
//!  lock.lost / sem.lost / waypoint.lost {token}     ─▶ Taken     (its lease ended, or a
//!                                                                 preempted reservation)
//!  the session not Live (Session::lost)             ─▶ Session(state)
//!  Guard::release / drop                            ─▶ Released
//! ```

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Mutex, broadcast, watch};

use hivekeeper_protocol::{Event, Granted, LockMode, Op, Priority, ResourceKind, Volume};

pub(crate) use crate::claim::{Claim, Slot};
use crate::error::AgentError;
use crate::hold_watch::{Acquiring, HoldEndSender, HoldWatch};
pub use crate::resource::{AcquireOptions, Geometry, Resource, TimeWindow, Wait};
pub(crate) use crate::resource::{release_op, whole_ms};
use crate::session::{Session, SessionState, wait_lost};

/// How a hold ended, as [`Guard::ended`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    /// The acquire's max-hold ran out ([`AcquireOptions::max_hold`]): the service took the
    /// hold away (`lock.lost` or `sem.lost` with `"reason":"max_hold"`) and granted the next
    /// waiters. The session lives on, and nothing else it holds is touched.
    MaxHold,
    /// The service took the hold away for another reason (`lock.lost`, `sem.lost` or
    /// `waypoint.lost` without a reason): its lease ended, or a preempted reservation was not
    /// vacated by its deadline.
    Taken,
    /// The session is not live (jeopardy, expired or revoked, see [`Session::lost`]): from now
    /// on the hold may be gone before the SDK can tell, so stop acting under it.
    Session(SessionState),
    /// [`Guard::release`] was called, or the guard was dropped.
    Released,
}

/// A held lock's mode, and whether it is a multi-lock, for [`Guard::downgrade`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LockHold {
    mode: LockMode,
    multi: bool,
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

/// A granted lock (exclusive or shared), multi-lock, permits or waypoint reservation, with its
/// fencing token.
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
    /// A lock's mode and shape; `None` for permits and reservations.
    lock: Option<LockHold>,
    /// The agent's events since before the request was sent (so none for this grant can be
    /// missed), for [`Guard::preempted`]; waypoints and routes only.
    events: Option<Mutex<broadcast::Receiver<Event>>>,
    /// How the service ended the hold ([`HoldEnd::MaxHold`], [`HoldEnd::Taken`]) or the
    /// guard did ([`HoldEnd::Released`]), once one has: set once, by the first. The session's
    /// state is not recorded here: jeopardy is not final.
    end: HoldEndSender,
    /// This hold's entry in the agent's registry, which records its `*.lost` event in `end`;
    /// removed when the guard goes.
    _lost: HoldWatch,
}

impl Guard {
    /// The guard of `resource`'s grant with `token`. `acquiring` was registered before the
    /// request went, so the hold's `*.lost` cannot be missed; `events` were subscribed then
    /// likewise, for a reservation's preemption.
    pub(crate) fn new(
        claim: Claim,
        token: u64,
        resource: &Resource,
        acquiring: Acquiring,
        events: Option<broadcast::Receiver<Event>>,
    ) -> Guard {
        let end: HoldEndSender = Arc::new(watch::Sender::new(None));
        let lost = acquiring.granted(token, end.clone());
        let lock = resource.mode().map(|mode| LockHold {
            mode,
            multi: matches!(resource, Resource::LockAll { .. }),
        });
        Guard {
            claim: Some(claim),
            token,
            priority: resource.priority(),
            lock,
            events: events.map(Mutex::new),
            end,
            _lost: lost,
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
        token == self.token && name == self.claim().name()
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

    /// The resource's name (a multi-lock's first, see [`Guard::names`]).
    pub fn name(&self) -> &str {
        self.claim().name()
    }

    /// Every name the grant holds: one, or each lock of a multi-lock, in the order asked.
    pub fn names(&self) -> &[String] {
        self.claim().names()
    }

    /// Lock, semaphore or waypoint.
    pub fn kind(&self) -> ResourceKind {
        self.claim().kind()
    }

    /// A lock's mode as held now (shared after [`Guard::downgrade`]); `None` for permits and
    /// reservations.
    pub fn mode(&self) -> Option<LockMode> {
        self.lock.map(|lock| lock.mode)
    }

    /// The session the grant is bound to.
    pub fn session(&self) -> Session {
        Session {
            inner: self.claim().session().clone(),
        }
    }

    /// Whether the session is not live, or the service has taken the hold away (see
    /// [`Guard::ended`]): stop acting under this guard.
    pub fn is_lost(&self) -> bool {
        !self.claim().session().state().is_live() || self.end.borrow().is_some()
    }

    /// Resolves as soon as the session is not `Live` (see [`Session::lost`]): from then on
    /// the grant may be taken away before the SDK can tell. [`Guard::ended`] also tells when
    /// the service takes this hold alone away (its max-hold).
    pub async fn lost(&self) -> SessionState {
        wait_lost(self.claim().session().state.clone()).await
    }

    /// Resolves with how the hold ended ([`HoldEnd`]), on the first of: the service's
    /// `lock.lost`, `sem.lost` or `waypoint.lost` for this token (with its reason: a max-hold
    /// that ran out, or the lease's end), the session no longer live, [`Guard::release`] or
    /// the guard's drop. The future owns what it needs, so it can be raced in a `select!`
    /// against the work the guard protects, or moved into a task. The events are a courtesy
    /// (one missed while reconnecting is not seen here); the session's loss is not, and the
    /// token stays the safety mechanism.
    pub fn ended(&self) -> impl Future<Output = HoldEnd> + Send + 'static {
        let mut end = self.end.subscribe();
        let session = self.claim().session().state.clone();
        async move {
            let recorded = async {
                match end.wait_for(Option::is_some).await {
                    Ok(end) => end.expect("waited for Some"),
                    // Both senders gone: the guard was dropped, which records the end first.
                    Err(_) => HoldEnd::Released,
                }
            };
            tokio::select! {
                // An end the service or the guard recorded wins over a loss seen at once.
                biased;
                how = recorded => how,
                state = wait_lost(session) => HoldEnd::Session(state),
            }
        }
    }

    /// Makes an exclusive lock's hold shared (`lock.downgrade`), atomically: the guard keeps
    /// its token (nobody held the lock in between), and the shared waiters at the head of the
    /// queue are let in beside it. There is no upgrade. Only for a guard of one lock held
    /// exclusive; for any other (shared, a multi-lock, permits, a reservation) the answer is
    /// [`AgentError::NotDowngradable`] and nothing is sent.
    pub async fn downgrade(&mut self) -> Result<(), AgentError> {
        let claim = self.claim();
        let exclusive_single = LockHold {
            mode: LockMode::Exclusive,
            multi: false,
        };
        if self.lock != Some(exclusive_single) {
            return Err(AgentError::NotDowngradable {
                held: self.describe(),
            });
        }
        let session = claim.session();
        session.check_live()?;
        let op = Op::LockDowngrade {
            name: claim.name().to_string(),
            lease: session.lease.clone(),
        };
        let granted: Granted = session.agent.request_as(op).await?;
        debug_assert_eq!(
            granted.token, self.token,
            "a downgrade keeps the hold's token"
        );
        self.lock = Some(LockHold {
            mode: LockMode::Shared,
            multi: false,
        });
        Ok(())
    }

    /// What the guard holds, for people: `lock "x" (shared)`, `3 locks (exclusive)`, `sem "y"`.
    fn describe(&self) -> String {
        match self.lock {
            Some(LockHold { mode, multi: true }) => {
                format!("a multi-lock of {:?} ({})", self.names(), mode.as_str())
            }
            Some(LockHold { mode, .. }) => format!("lock {:?} ({})", self.name(), mode.as_str()),
            None => format!("{} {:?}", self.kind().as_str(), self.name()),
        }
    }

    /// Releases the grant (a multi-lock's locks together, by `lock.release_all`) and waits
    /// for the service's answer. When the lease already ended, nothing is sent and the answer
    /// is [`AgentError::Lost`]: the hold was gone before this release, which the application
    /// may want to know. A hold the service already took away (its max-hold) is refused
    /// `not_holder` ([`AgentError::Service`]).
    pub async fn release(mut self) -> Result<(), AgentError> {
        let claim = self
            .claim
            .take()
            .expect("a guard keeps its claim until it is released");
        finish(&self.end, HoldEnd::Released);
        let op = release_op(claim.kind(), claim.names(), &claim.session().lease);
        claim.release(op).await.map(drop)
    }
}

/// Records `how` as the end of a hold (or a leadership), unless an earlier end is recorded.
pub(crate) fn finish<T>(end: &watch::Sender<Option<T>>, how: T) {
    end.send_if_modified(|current| {
        let first = current.is_none();
        if first {
            *current = Some(how);
        }
        first
    });
}

impl Guard {
    /// Replaces a held route's volumes (`route.amend`), e.g. to extend a delayed flight. The
    /// service grants the new volumes at once, keeping this guard's token, or answers
    /// [`AgentError::WouldBlock`] and keeps the old route; it never waits. Only for a guard of
    /// a route ([`Session::reserve_route`]); for another the service answers `bad_request`.
    /// The route keeps its priority ([`Guard::priority`]).
    pub async fn amend(&self, volumes: Vec<Volume>) -> Result<(), AgentError> {
        let claim = self.claim();
        let session = claim.session();
        session.check_live()?;
        let op = Op::RouteAmend {
            name: claim.name().to_string(),
            lease: session.lease.clone(),
            volumes,
            priority: self.priority,
        };
        session.agent.request(op).await.map(drop)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        finish(&self.end, HoldEnd::Released);
        let Some(claim) = self.claim.take() else {
            return;
        };
        let op = release_op(claim.kind(), claim.names(), &claim.session().lease);
        claim.release_in_background(op);
    }
}
