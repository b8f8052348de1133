//! [`Barrier`]: a session's place in a reusable double barrier (`barrier.*`,
//! docs/PROTOCOL.md §8.24), from [`Session::barrier`].
//!
//! The service counts: a round's `count` members are answered together in the log entry where
//! the last one arrives, and again where the last one leaves. The handle only remembers the
//! round the session is in, so that dropping it leaves that round (the others would wait for
//! this member until its lease ended otherwise).
//!
//! ```text
//!  barrier.enter()  ─▶ barrier.enter {name, count, lease, wait_ms?} ─▶ generation (all arrived)
//!        (dropped while waiting: if the round still fills, the SDK leaves it in the background)
//!  ... the work of the round ...
//!  barrier.leave()  ─▶ barrier.leave {name, lease, wait_ms?}        ─▶ generation (all left)
//!  drop while in a round ─▶ barrier.leave in the background
//! ```

use hivekeeper_protocol::{BarrierPassed, Op, ResourceKind};

use crate::agent::Undo;
use crate::error::AgentError;
use crate::guard::{Claim, Wait};
use crate::session::Session;

/// A session's membership of the double barrier `name` with rounds of `count` members.
///
/// One handle per barrier per session at a time: a second one's [`Barrier::enter`] is refused
/// with [`AgentError::AlreadyHeld`] while the first is in a round (or entering), and waits for
/// a leave the first's drop sent in the background.
#[derive(Debug)]
pub struct Barrier {
    /// The session the membership is bound to.
    session: Session,
    /// The barrier's name.
    name: String,
    /// How many members a round has.
    count: u32,
    /// The session's claim on the barrier while it is in a round.
    claim: Option<Claim>,
    /// The generation of the round the session is in and has not left.
    generation: Option<u64>,
}

impl Session {
    /// A handle on the double barrier `name` whose rounds have `count` members (the first
    /// arrival of a round fixes it; another `count` while a round fills is refused
    /// `bad_request`). Nothing is sent until [`Barrier::enter`].
    pub fn barrier(&self, name: impl Into<String>, count: u32) -> Barrier {
        Barrier {
            session: self.clone(),
            name: name.into(),
            count,
            claim: None,
            generation: None,
        }
    }
}

impl Barrier {
    /// The barrier's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The generation of the round the session is in and has not left, if any.
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// Enters the round that fills now and waits, while the session is live, until all
    /// `count` members have arrived; returns the round's generation (unique, larger for every
    /// later round, comparable with fencing tokens). Entering again before leaving answers
    /// the same generation at once.
    pub async fn enter(&mut self) -> Result<u64, AgentError> {
        self.enter_wait(Wait::UntilGranted).await
    }

    /// [`Barrier::enter`], waiting as `wait` says: [`AgentError::WouldBlock`] for
    /// [`Wait::Try`] unless this arrival fills the round, [`AgentError::WaitTimeout`] when
    /// [`Wait::AtMost`] runs out; either way the session is not in the round. Errors
    /// otherwise as for [`Session::acquire`]. If the future is dropped while waiting and the
    /// round fills later, the SDK leaves it in the background.
    pub async fn enter_wait(&mut self, wait: Wait) -> Result<u64, AgentError> {
        let inner = &self.session.inner;
        inner.check_live()?;
        let op = Op::BarrierEnter {
            name: self.name.clone(),
            count: self.count,
            lease: inner.lease.clone(),
            wait_ms: wait.wait_ms(),
        };
        AgentError::check_locally(&op)?;
        if self.claim.is_none() {
            let claim = Claim::take(inner.clone(), ResourceKind::Barrier, &self.name).await?;
            self.claim = Some(claim);
        }
        let undo = Undo::Send(self.leave_op(None));
        let success = match self.session.queue(op, Some(undo)).await {
            Ok(success) => success,
            Err(e) => {
                if self.generation.is_none() {
                    self.claim = None;
                }
                return Err(e);
            }
        };
        // From here on the session is in the round: the handle's drop leaves it.
        let generation = BarrierPassed::try_from(success)?.generation;
        self.generation = Some(generation);
        Ok(generation)
    }

    /// Leaves the round the session is in and waits, while the session is live, until every
    /// member of it has left; returns the round's generation. Refused `not_holder`
    /// ([`AgentError::Service`]) when the session is in no passed round of this barrier.
    pub async fn leave(&mut self) -> Result<u64, AgentError> {
        self.leave_wait(Wait::UntilGranted).await
    }

    /// [`Barrier::leave`], waiting as `wait` says. A leave that times out (or would block) has
    /// **not** left: the session is still in its round, and may leave again.
    pub async fn leave_wait(&mut self, wait: Wait) -> Result<u64, AgentError> {
        self.session.inner.check_live()?;
        let op = self.leave_op(wait.wait_ms());
        AgentError::check_locally(&op)?;
        let success = self.session.queue(op, None).await?;
        self.generation = None;
        self.claim = None;
        Ok(BarrierPassed::try_from(success)?.generation)
    }

    fn leave_op(&self, wait_ms: Option<u64>) -> Op {
        Op::BarrierLeave {
            name: self.name.clone(),
            lease: self.session.lease().to_string(),
            wait_ms,
        }
    }
}

impl Drop for Barrier {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        if self.generation.is_some() {
            claim.release_in_background(self.leave_op(None));
        }
    }
}
