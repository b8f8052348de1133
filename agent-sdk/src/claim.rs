//! [`Claim`]: a session's claim on the resources one grant holds, from the start of its
//! acquire to the end of its release.
//!
//! The service answers an acquire of something the lease already holds with the existing
//! token, so two guards could share one hold and the first drop would release it under the
//! second. The session therefore keeps a [`Slot`] per `(kind, name)`: a claim takes the slots
//! of every name its grant holds (one, or each lock of a multi-lock) all at once or none, so a
//! multi-lock and a single lock of one of its names never overlap in one session
//! ([`AgentError::AlreadyHeld`]).

use std::sync::Arc;

use tokio::sync::watch;
use tracing::debug;

use hivekeeper_protocol::{ErrorCode, Op, ResourceKind, Success};

use crate::error::AgentError;
use crate::session::{SessionInner, SessionState};

/// The state of one resource in a session's claims.
#[derive(Debug)]
pub(crate) enum Slot {
    /// Being acquired, or held by a guard.
    Busy,
    /// A release is in flight; closes (its sender drops) when the release is done.
    Releasing(watch::Receiver<()>),
}

/// A session's claim on the resources of one grant: one name, or a multi-lock's names.
#[derive(Debug)]
pub(crate) struct Claim {
    session: Arc<SessionInner>,
    kind: ResourceKind,
    /// The names the grant holds, at least one; the first is the one [`Claim::name`] gives.
    names: Vec<String>,
    /// Whether dropping the claim frees the slots; false once a [`Releasing`] owns them.
    frees_slot: bool,
}

impl Claim {
    /// Claims `(kind, name)` in `session`, waiting for an in-flight release of it first.
    pub(crate) async fn take(
        session: Arc<SessionInner>,
        kind: ResourceKind,
        name: &str,
    ) -> Result<Claim, AgentError> {
        Claim::take_all(session, kind, vec![name.to_string()]).await
    }

    /// Claims `(kind, name)` for every one of `names` (at least one) in `session`, all or
    /// none: [`AgentError::AlreadyHeld`] naming the first one held or being acquired; waits
    /// for in-flight releases of any of them first.
    pub(crate) async fn take_all(
        session: Arc<SessionInner>,
        kind: ResourceKind,
        names: Vec<String>,
    ) -> Result<Claim, AgentError> {
        loop {
            let mut releasing = {
                let mut claims = session.claims();
                let mut releasing = None;
                for name in &names {
                    match claims.get(&(kind, name.clone())) {
                        None => {}
                        Some(Slot::Busy) => {
                            return Err(AgentError::AlreadyHeld {
                                kind,
                                name: name.clone(),
                            });
                        }
                        Some(Slot::Releasing(done)) => releasing = Some(done.clone()),
                    }
                }
                match releasing {
                    Some(releasing) => releasing,
                    None => {
                        for name in &names {
                            claims.insert((kind, name.clone()), Slot::Busy);
                        }
                        drop(claims);
                        return Ok(Claim {
                            session,
                            kind,
                            names,
                            frees_slot: true,
                        });
                    }
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

    /// The resource's kind.
    pub(crate) fn kind(&self) -> ResourceKind {
        self.kind
    }

    /// The resource's name (a multi-lock's first).
    pub(crate) fn name(&self) -> &str {
        &self.names[0]
    }

    /// Every name the grant holds.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// Sends `op`, which ends the hold, and waits for the answer; an acquire of the same
    /// resource waits meanwhile. When the lease already ended nothing is sent and the answer
    /// is [`AgentError::Lost`] (the hold was gone before), as it is when the service no longer
    /// knows the lease.
    pub(crate) async fn release(self, op: Op) -> Result<Success, AgentError> {
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
    /// slots stay releasing until the answer. Best effort: nothing is sent when the lease has
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

    /// Marks the claim as releasing; the slots are freed when the returned value drops.
    fn start_release(mut self) -> Releasing {
        let (done, waiters) = watch::channel(());
        let keys = self.keys();
        let mut claims = self.session.claims();
        for key in &keys {
            claims.insert(key.clone(), Slot::Releasing(waiters.clone()));
        }
        drop(claims);
        // The slots now belong to the `Releasing`.
        self.frees_slot = false;
        Releasing {
            session: self.session.clone(),
            keys,
            _done: done,
        }
    }

    fn keys(&self) -> Vec<(ResourceKind, String)> {
        self.names
            .iter()
            .map(|name| (self.kind, name.clone()))
            .collect()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.frees_slot {
            let keys = self.keys();
            let mut claims = self.session.claims();
            for key in &keys {
                claims.remove(key);
            }
        }
    }
}

/// A release in flight. Dropping it frees the slots, then (field drop order) closes the
/// channel that acquires of the same resources wait on.
struct Releasing {
    session: Arc<SessionInner>,
    keys: Vec<(ResourceKind, String)>,
    _done: watch::Sender<()>,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        let mut claims = self.session.claims();
        for key in &self.keys {
            claims.remove(key);
        }
    }
}
