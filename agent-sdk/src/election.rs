//! [`Leadership`]: leading an election (`election.*`, docs/PROTOCOL.md §8.23), with its
//! fencing token, from [`Session::campaign`].
//!
//! The service decides who leads: candidates are served in arrival (log) order, one leader
//! per name, and the leadership is bound to the session's lease. The SDK only carries the
//! answer: the token, and the ways to act on it.
//!
//! ```text
//!  session.campaign(name, value) ─▶ election.campaign {name, lease, value, wait_ms?}
//!        (queued behind the leader; dropped while queued: a later grant is resigned)
//!                                ◀─ {token} ─▶ Leadership
//!  leadership.proclaim(value)    ─▶ election.proclaim {name, token, value} ─▶ revision
//!  leadership.resign() / drop    ─▶ election.resign {name, token}   (the next candidate leads)
//!  leadership.lost() resolves on the first of: `election.lost` for this token (the lease
//!        ended), a proclaim refused `not_holder`, the session not live, resign or drop.
//! ```
//!
//! As with every grant, the token is the safety mechanism, the guard a convenience: send
//! [`Leadership::token`] with what the leader does (`fence.check` with `kind: "election"`, or
//! a `kv.txn` holder compare), so a deposed leader's late action is refused wherever it lands.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tokio::task::AbortHandle;

use hivekeeper_protocol::{ErrorCode, Event, Granted, KvPutDone, Op, ResourceKind};

use crate::agent::Undo;
use crate::error::AgentError;
use crate::guard::{Claim, Wait, finish};
use crate::session::{Session, SessionState, wait_lost};

/// Why a [`Leadership`] ended, as [`Leadership::lost`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipEnd {
    /// The service ended it: its lease ended (`election.lost`), or a proclaim was refused
    /// `not_holder` (the token no longer leads).
    Lost,
    /// The session is not live (jeopardy, expired or revoked): from now on the leadership may
    /// be gone before the SDK can tell, so stop acting as the leader.
    Session(SessionState),
    /// [`Leadership::resign`] was called, or the guard was dropped.
    Resigned,
}

/// The leadership of an election, with its fencing token; from [`Session::campaign`].
///
/// Holds its session alive. Resigned by [`Leadership::resign`], or in the background on drop
/// (best effort, as a [`crate::Guard`]'s release: the lease's end ends the leadership anyway).
#[derive(Debug)]
pub struct Leadership {
    /// The session's claim on the election, `None` once [`Leadership::resign`] took it.
    claim: Option<Claim>,
    /// The leadership's fencing token.
    token: u64,
    /// How the leadership ended, once it has: set once, by the first end seen.
    end: Arc<watch::Sender<Option<LeadershipEnd>>>,
    /// The task that watches for `election.lost` and the session's loss, stopped on drop.
    watcher: AbortHandle,
}

impl Session {
    /// Campaigns for the leadership of the election `name` with `value` (what the leader
    /// announces, e.g. its address; `$election/{name}` holds it), waiting behind the leader
    /// and earlier candidates for as long as the session is live.
    pub async fn campaign(
        &self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Leadership, AgentError> {
        self.campaign_wait(name, value, Wait::UntilGranted).await
    }

    /// [`Session::campaign`], waiting as `wait` says: [`Wait::Try`] answers
    /// [`AgentError::WouldBlock`] when someone leads, [`Wait::AtMost`] answers
    /// [`AgentError::WaitTimeout`] when the wait runs out.
    ///
    /// Errors as for [`Session::acquire`] ([`AgentError::AlreadyHeld`] when this session
    /// already leads or campaigns for `name`). Cancel-safe as it is: if the future is dropped
    /// (or the session is lost) while the campaign is queued, a leadership granted later is
    /// resigned at once.
    pub async fn campaign_wait(
        &self,
        name: impl Into<String>,
        value: impl Into<String>,
        wait: Wait,
    ) -> Result<Leadership, AgentError> {
        let inner = &self.inner;
        inner.check_live()?;
        let name = name.into();
        let op = Op::ElectionCampaign {
            name: name.clone(),
            lease: inner.lease.clone(),
            value: value.into(),
            wait_ms: wait.wait_ms(),
        };
        AgentError::check_locally(&op)?;
        let claim = Claim::take(inner.clone(), ResourceKind::Election, &name).await?;
        // Subscribed before the request goes, so an `election.lost` that follows the grant at
        // once is not missed.
        let events = inner.agent.events();
        let success = self.queue(op, Some(Undo::Resign { name })).await?;
        let token = Granted::try_from(success)?.token;
        // From here on the leadership exists: its drop resigns it on every path.
        let leadership = Leadership::new(claim, token, events);
        inner.check_live()?;
        Ok(leadership)
    }
}

impl Leadership {
    fn new(claim: Claim, token: u64, events: broadcast::Receiver<Event>) -> Leadership {
        let end = Arc::new(watch::Sender::new(None));
        let watcher = tokio::spawn(watch_end(
            claim.name().to_string(),
            token,
            events,
            claim.session().state.clone(),
            end.clone(),
        ))
        .abort_handle();
        Leadership {
            claim: Some(claim),
            token,
            end,
            watcher,
        }
    }

    fn claim(&self) -> &Claim {
        self.claim
            .as_ref()
            .expect("only resign() takes the claim, and it consumes the leadership")
    }

    /// The leadership's fencing token: strictly increasing per election. Send it with every
    /// action the leader takes.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.claim().name()
    }

    /// The session the leadership is bound to.
    pub fn session(&self) -> Session {
        Session {
            inner: self.claim().session().clone(),
        }
    }

    /// Whether the leadership has ended as far as the SDK knows (see [`Leadership::lost`]).
    pub fn is_lost(&self) -> bool {
        self.end.borrow().is_some()
    }

    /// Resolves with how the leadership ended, on the first of: the service's `election.lost`
    /// for this token (its lease ended), a proclaim refused `not_holder`, the session no
    /// longer live ([`Session::lost`]), [`Leadership::resign`] or the guard's drop. The future
    /// owns what it needs, so it can be moved into a task or a `select!` while the
    /// leadership is used, proclaimed or resigned. `election.lost` is a courtesy (an event
    /// missed while reconnecting is not seen here); the session's loss is not.
    pub fn lost(&self) -> impl Future<Output = LeadershipEnd> + Send + 'static {
        let mut end = self.end.subscribe();
        async move {
            match end.wait_for(Option::is_some).await {
                Ok(end) => end.expect("waited for Some"),
                // Both senders gone: the guard was dropped, which records the end first.
                Err(_) => LeadershipEnd::Resigned,
            }
        }
    }

    /// Announces `value` as the leader's (`election.proclaim`): `$election/{name}` is put at a
    /// new revision, which is returned. A token that no longer leads is refused `not_holder`
    /// ([`AgentError::Service`]), changing nothing, and [`Leadership::lost`] resolves.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<u64, AgentError> {
        let claim = self.claim();
        claim.session().check_live()?;
        let op = Op::ElectionProclaim {
            name: claim.name().to_string(),
            token: self.token,
            value: value.into(),
        };
        AgentError::check_locally(&op)?;
        match claim.session().agent.request_as::<KvPutDone>(op).await {
            Ok(done) => Ok(done.revision),
            Err(e) => {
                if e.code() == Some(ErrorCode::NotHolder) {
                    finish(&self.end, LeadershipEnd::Lost);
                }
                Err(e)
            }
        }
    }

    /// Steps down (`election.resign`) and waits for the service's answer; the next candidate
    /// leads in the same log entry. [`Leadership::lost`] resolves ([`LeadershipEnd::Resigned`])
    /// before the request goes. When the lease already ended nothing is sent and the answer
    /// is [`AgentError::Lost`]; a leadership the service already ended is refused
    /// `not_holder` ([`AgentError::Service`]).
    pub async fn resign(mut self) -> Result<(), AgentError> {
        let claim = self
            .claim
            .take()
            .expect("a leadership keeps its claim until it is resigned");
        finish(&self.end, LeadershipEnd::Resigned);
        let op = Op::ElectionResign {
            name: claim.name().to_string(),
            token: self.token,
        };
        claim.release(op).await.map(drop)
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        finish(&self.end, LeadershipEnd::Resigned);
        self.watcher.abort();
        if let Some(claim) = self.claim.take() {
            let op = Op::ElectionResign {
                name: claim.name().to_string(),
                token: self.token,
            };
            claim.release_in_background(op);
        }
    }
}

/// The leadership's watcher: records the first of `election.lost` for (`name`, `token`) and
/// the session's loss.
async fn watch_end(
    name: String,
    token: u64,
    mut events: broadcast::Receiver<Event>,
    session: watch::Receiver<SessionState>,
    end: Arc<watch::Sender<Option<LeadershipEnd>>>,
) {
    let lost_event = async {
        loop {
            match events.recv().await {
                Ok(Event::ElectionLost {
                    name: lost,
                    token: lost_token,
                }) if lost == name && lost_token == token => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                // The connection is gone: the session's loss decides.
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    };
    let how = tokio::select! {
        () = lost_event => LeadershipEnd::Lost,
        state = wait_lost(session) => LeadershipEnd::Session(state),
    };
    finish(&end, how);
}
