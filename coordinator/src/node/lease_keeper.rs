//! The lease keeper: keepalive deadlines in memory on the leader, and expiry proposals, for
//! leases and for waits. The lease deadlines themselves are the sans-I/O [`Lessor`]'s; this
//! actor feeds it the clock, the applied events and the leadership, checks keepalives against
//! the machine and proposes. Wait deadlines are in the replicated state (the machine's
//! `wait_deadline.rs`): at each tick a ready leader reads the earliest and, once its clock
//! (the one it stamps entries with) has reached it, proposes `ExpireWaits { term }`; the
//! entry ends exactly the waits due on the machine's clock. A new leader finds the deadlines
//! in the state it took over, so a wait still ends about on time across a failover (late by
//! at most the time without a ready leader, never early). The ends of waypoint reservations'
//! time windows (`waypoint/window.rs`) are replicated deadlines too, watched the same way and
//! ended by `ExpireReservations { term }`, and so are the vacate deadlines of reservations
//! preempted by a higher priority (`waypoint/preempt.rs`): the machine's next reservation
//! deadline is the earlier of the two, so one watch serves both. The hold-time deadlines
//! (a hold's `max_hold_ms`, a lock-delay's end: the machine's `hold_time.rs`) are a third
//! watch, ended by `ExpireHoldTimes { term }`.
//!
//! Keepalives are not Raft writes (DESIGN.md §2): like etcd's lessor, the leader keeps each
//! lease's deadline in memory and only an expiry goes through the log, as `ExpireLeases`
//! carrying the leader's term (a deposed leader's proposal is ignored at apply). Only a leader
//! that has applied an entry of its own term keeps deadlines and answers keepalives; when it
//! takes office it gives every lease a fresh deadline (now + TTL), so a failover or a restart
//! extends a lease by at most the time without a ready leader plus one TTL, and never shortens
//! one.
//!
//! ```text
//!  fan-out: LeaseGranted / LeaseEnded ─▶ deadlines[lease] = now + ttl / remove
//!  bridge:  Keepalive(agent, lease)   ─▶ lease live and the agent's? deadline = now + ttl
//!                                        (counted: hivekeeper_leases_keepalives_total, and
//!                                        the TTL used since the last renewal: a histogram)
//!  Tick (every tick_ms)               ─▶ overdue leases ─▶ proposer: ExpireLeases { term }
//!                                        ─▶ ExpiryDone: leases the machine did not end (its
//!                                           clock is behind) back off, 100 ms doubling to 5 s
//!                                           (hivekeeper_leases_expiry_refused_total)
//!                                     ─▶ machine's earliest wait deadline due at the clock
//!                                        an entry stamped now would get (`wait_expiry_due`)?
//!                                        ─▶ proposer: ExpireWaits { term } (one at a time)
//!                                     ─▶ earliest reservation window end or vacate
//!                                        deadline due (`reservation_expiry_due`)?
//!                                        ─▶ proposer: ExpireReservations { term } (one at a
//!                                           time)
//!                                     ─▶ earliest max-hold or lock-delay end due
//!                                        (`hold_time_expiry_due`)?
//!                                        ─▶ proposer: ExpireHoldTimes { term } (one at a time)
//!  Leadership (from Raft metrics)     ─▶ ready? rebuild deadlines from the machine : clear
//! ```
//!
//! Both proposals are the node's own commands: the proposer refuses them on a follower
//! (`NotLeader`) and never forwards them, so they reach the log only from the leader.

use std::sync::Arc;
use std::time::Duration;

use hivekeeper_protocol::ErrorCode;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use super::lessor::{Keepalive, Lessor};
use super::proposer::{NodeCommand, Proposer};
use crate::raft::RaftHandle;
use crate::state_machine::{Command, LeaseId, Reply};
use hivekeeper_protocol::Op;

/// Messages of the lease keeper.
pub enum KeeperMsg {
    /// An agent keeps a lease alive; answered `Ttl` or a refusal.
    Keepalive {
        agent: String,
        lease: String,
        reply: RpcReplyPort<Reply>,
    },
    /// A lease was granted (from an applied entry).
    LeaseGranted { lease: LeaseId, ttl_ms: u64 },
    /// A lease ended (from an applied entry).
    LeaseEnded { lease: LeaseId },
    /// The machine was replaced by a snapshot: rebuild the deadlines from it.
    Resync,
    /// Whether this node is now a ready leader (leader that applied an entry of its term).
    Leadership { ready: bool, term: u64 },
    /// Look for overdue leases.
    Tick,
    /// An expiry proposal completed; these leases may be proposed again if still overdue.
    /// `ended` is what the machine expired (`None`: the proposal failed, retried at the next
    /// tick); the others were refused as not yet due and back off.
    ExpiryDone {
        proposed: Vec<LeaseId>,
        ended: Option<Vec<LeaseId>>,
    },
    /// A wait or reservation expiry proposal completed; another of its kind may be proposed.
    DeadlineExpiryDone(Deadline),
    /// Time left before each lease's deadline, ms, for `admin.leases`: `None` for a lease
    /// without a deadline here (this node is not a ready leader, or the lease is unknown).
    Remaining {
        leases: Vec<LeaseId>,
        reply: RpcReplyPort<Vec<Option<u64>>>,
    },
}

/// The replicated deadlines the keeper watches besides leases'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// A queued request's `wait_ms`: `ExpireWaits`.
    Wait,
    /// A waypoint reservation's `end_ms`: `ExpireReservations`.
    ReservationEnd,
    /// A hold's `max_hold_ms` or a lock-delay's end: `ExpireHoldTimes`.
    HoldTime,
}

impl Deadline {
    /// Every kind, in the order the keeper checks them at a tick.
    const ALL: [Deadline; 3] = [Deadline::Wait, Deadline::ReservationEnd, Deadline::HoldTime];

    /// Its slot in [`KeeperState::expiring`].
    fn slot(self) -> usize {
        match self {
            Deadline::Wait => 0,
            Deadline::ReservationEnd => 1,
            Deadline::HoldTime => 2,
        }
    }
}

/// The keeper's behaviour.
pub struct LeaseKeeper;

/// Arguments.
pub struct KeeperArgs {
    pub raft: Arc<RaftHandle>,
    pub proposer: Proposer,
    pub tick_ms: u64,
}

/// The keeper's state: its arguments and the lessor (the deadlines, as plain data).
pub struct KeeperState {
    raft: Arc<RaftHandle>,
    proposer: Proposer,
    lessor: Lessor,
    /// Whether an expiry of each [`Deadline`] kind is in flight (by its slot): one of each at
    /// a time, so a slow commit does not pile up proposals that would each find nothing left
    /// to end.
    expiring: [bool; Deadline::ALL.len()],
}

impl KeeperState {
    /// Fresh deadlines for every lease in the machine: what a new leader owes its leases.
    fn rebuild(&mut self) -> Result<(), ActorProcessingErr> {
        let leases = self.raft.query(|sm| {
            sm.leases()
                .map(|(lease, _, ttl_ms)| (lease, ttl_ms))
                .collect::<Vec<_>>()
        })?;
        self.lessor.took_office(Instant::now(), leases);
        Ok(())
    }

    /// Answers a keepalive of `lease` from `agent`.
    fn keepalive(&mut self, agent: &str, lease: String) -> Result<Reply, ActorProcessingErr> {
        let now = Instant::now();
        let id = LeaseId::parse(&lease);
        let previous = match self.lessor.keepalive(now, id) {
            Keepalive::NotLeader => {
                return Ok(refused(
                    ErrorCode::Unavailable,
                    "this node is not a ready leader; retry (the SDK does)".into(),
                ));
            }
            // A lease past its deadline is as good as expired: its expiry is proposed (or will
            // be at the next tick). Acknowledging the keepalive would let the agent believe it
            // holds for another TTL while the expiry hands its resources to someone else, so
            // the agent is told now (the SDK gives up first).
            Keepalive::Overdue { previous } => {
                if let Some((deadline, ttl_ms)) = previous {
                    super::metrics::keepalive_ttl_used(now, deadline, ttl_ms);
                }
                return Ok(refused(
                    ErrorCode::LeaseNotFound,
                    format!("lease {lease} expired: its TTL ran out before this keepalive"),
                ));
            }
            Keepalive::Live { previous } => previous,
        };
        let op = Op::LeaseKeepalive { lease };
        let answer = self.raft.query(|sm| sm.query(agent, &op))?;
        if let (Reply::Ttl { ttl_ms }, Some(id)) = (&answer, id) {
            self.lessor.renew(Instant::now(), id, *ttl_ms);
            super::metrics::keepalive();
            if let Some((deadline, ttl_ms)) = previous {
                super::metrics::keepalive_ttl_used(now, deadline, ttl_ms);
            }
        }
        Ok(answer)
    }

    /// The machine applied an expiry of `proposed` and ended only `ended`: the rest were not
    /// due on its clock (behind this leader's, `clock.rs`). Each backs off before it is
    /// proposed again, and is counted.
    fn expiry_refused(&mut self, proposed: &[LeaseId], ended: &[LeaseId]) {
        let refused: Vec<LeaseId> = proposed
            .iter()
            .filter(|lease| !ended.contains(lease))
            .copied()
            .collect();
        if refused.is_empty() {
            return;
        }
        let count = self.lessor.expiry_refused(Instant::now(), &refused);
        if count > 0 {
            super::metrics::expiry_refused(count);
            tracing::debug!(
                leases = ?refused,
                "the machine refused an expiry (not due on its clock, which is behind this \
                 leader's); backing off"
            );
        }
    }

    /// Proposes `ExpireWaits`, `ExpireReservations` or `ExpireHoldTimes` (by `deadline`) when
    /// this node is a ready leader, none of that kind is in flight, and its clock has reached
    /// the machine's earliest deadline of that kind.
    fn expire_due(
        &mut self,
        myself: &ActorRef<KeeperMsg>,
        deadline: Deadline,
    ) -> Result<(), ActorProcessingErr> {
        if !self.lessor.is_ready() || self.expiring[deadline.slot()] {
            return Ok(());
        }
        // Due on the clock an entry stamped now would get, not on this node's wall clock: the
        // machine's clock steps by stamps (`clock.rs`) and may differ from it after a jump.
        let stamp_ms = self.raft.clock_ms();
        let due = self.raft.query(|sm| match deadline {
            Deadline::Wait => sm.wait_expiry_due(stamp_ms),
            Deadline::ReservationEnd => sm.reservation_expiry_due(stamp_ms),
            Deadline::HoldTime => sm.hold_time_expiry_due(stamp_ms),
        })?;
        if !due {
            return Ok(());
        }
        self.expiring[deadline.slot()] = true;
        let term = self.lessor.term();
        let command = match deadline {
            Deadline::Wait => NodeCommand::new(Command::ExpireWaits { term }),
            Deadline::ReservationEnd => NodeCommand::new(Command::ExpireReservations { term }),
            Deadline::HoldTime => NodeCommand::new(Command::ExpireHoldTimes { term }),
        };
        let (proposer, myself) = (self.proposer.clone(), myself.clone());
        tokio::spawn(async move {
            if let Err(error) = proposer.propose(command).await {
                tracing::debug!(%error, ?deadline, "an expiry proposal failed; retried at the next tick");
            }
            let _ = myself.cast(KeeperMsg::DeadlineExpiryDone(deadline));
        });
        Ok(())
    }
}

/// A refusal, as the machine would word it.
fn refused(code: ErrorCode, message: String) -> Reply {
    Reply::Refused { code, message }
}

impl Actor for LeaseKeeper {
    type Msg = KeeperMsg;
    type State = KeeperState;
    type Arguments = KeeperArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: KeeperArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(Duration::from_millis(args.tick_ms.max(1)), || {
            KeeperMsg::Tick
        });
        Ok(KeeperState {
            raft: args.raft,
            proposer: args.proposer,
            lessor: Lessor::default(),
            expiring: [false; Deadline::ALL.len()],
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            KeeperMsg::Keepalive {
                agent,
                lease,
                reply,
            } => {
                let answer = state.keepalive(&agent, lease)?;
                let _ = reply.send(answer);
            }
            KeeperMsg::LeaseGranted { lease, ttl_ms } => {
                state.lessor.granted(Instant::now(), lease, ttl_ms);
            }
            KeeperMsg::LeaseEnded { lease } => state.lessor.ended(&lease),
            KeeperMsg::Resync => {
                if state.lessor.is_ready() {
                    state.rebuild()?;
                }
            }
            KeeperMsg::Leadership { ready, term } => {
                if state.lessor.leadership(ready, term) {
                    state.rebuild()?;
                }
            }
            KeeperMsg::Tick => {
                for deadline in Deadline::ALL {
                    state.expire_due(&myself, deadline)?;
                }
                let overdue = state.lessor.overdue(Instant::now());
                if overdue.is_empty() {
                    return Ok(());
                }
                let command = NodeCommand::new(Command::ExpireLeases {
                    term: state.lessor.term(),
                    leases: overdue.clone(),
                });
                let proposer = state.proposer.clone();
                tokio::spawn(async move {
                    let ended = match proposer.propose(command).await {
                        Ok(Reply::Expired { leases }) => {
                            // One line per tick that expired any, however many.
                            if !leases.is_empty() {
                                tracing::info!(count = leases.len(), "leases expired");
                            }
                            Some(leases)
                        }
                        Ok(other) => {
                            tracing::warn!(reply = ?other, "an expiry proposal got an unexpected reply");
                            None
                        }
                        Err(error) => {
                            tracing::debug!(%error, "an expiry proposal failed; retried at the next tick");
                            None
                        }
                    };
                    let done = KeeperMsg::ExpiryDone {
                        proposed: overdue,
                        ended,
                    };
                    let _ = myself.cast(done);
                });
            }
            KeeperMsg::ExpiryDone { proposed, ended } => {
                state.lessor.expiry_done(&proposed);
                if let Some(ended) = ended {
                    state.expiry_refused(&proposed, &ended);
                }
            }
            KeeperMsg::DeadlineExpiryDone(deadline) => state.expiring[deadline.slot()] = false,
            KeeperMsg::Remaining { leases, reply } => {
                let _ = reply.send(state.lessor.remaining(Instant::now(), &leases));
            }
        }
        Ok(())
    }
}
