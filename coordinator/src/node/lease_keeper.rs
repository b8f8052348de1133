//! The lease keeper: keepalive deadlines in memory on the leader, and expiry proposals.
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
//!  Leadership (from Raft metrics)     ─▶ ready? rebuild deadlines from the machine : clear
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hivekeeper_protocol::ErrorCode;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use super::proposer::ProposerMsg;
use crate::raft::RaftHandle;
use crate::state_machine::{Command, LeaseId, ReadOp, Reply};

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
    ExpiryDone(Vec<LeaseId>),
    /// Time left before each lease's deadline, ms, for `admin.leases`: `None` for a lease
    /// without a deadline here (this node is not a ready leader, or the lease is unknown).
    Remaining {
        leases: Vec<LeaseId>,
        reply: RpcReplyPort<Vec<Option<u64>>>,
    },
}

/// The keeper's behaviour.
pub struct LeaseKeeper;

/// Arguments.
pub struct KeeperArgs {
    pub raft: Arc<RaftHandle>,
    pub proposer: ActorRef<ProposerMsg>,
    pub tick_ms: u64,
}

/// The keeper's state.
pub struct KeeperState {
    raft: Arc<RaftHandle>,
    proposer: ActorRef<ProposerMsg>,
    /// Deadline and TTL of every live lease, on this node's monotonic clock; empty unless
    /// `ready`.
    deadlines: HashMap<LeaseId, (Instant, u64)>,
    /// Leases in an expiry proposal that has not completed yet (not proposed twice).
    expiring: HashSet<LeaseId>,
    /// Whether this node is a leader that has applied an entry of its own term.
    ready: bool,
    /// The term it leads in.
    term: u64,
}

impl KeeperState {
    /// Fresh deadlines for every lease in the machine: what a new leader owes its leases.
    fn rebuild(&mut self) -> Result<(), ActorProcessingErr> {
        let now = Instant::now();
        let leases = self.raft.query(|sm| {
            sm.leases()
                .map(|(lease, _, ttl_ms)| (lease, ttl_ms))
                .collect::<Vec<_>>()
        })?;
        self.deadlines = leases
            .into_iter()
            .map(|(lease, ttl_ms)| (lease, (now + Duration::from_millis(ttl_ms), ttl_ms)))
            .collect();
        self.expiring.clear();
        Ok(())
    }
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
            deadlines: HashMap::new(),
            expiring: HashSet::new(),
            ready: false,
            term: 0,
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
                let now = Instant::now();
                // The deadline this keepalive finds, for the lateness histogram.
                let previous = LeaseId::parse(&lease)
                    .and_then(|id| state.deadlines.get(&id).copied())
                    .filter(|_| state.ready);
                // A lease past its deadline is as good as expired: its expiry is proposed (or
                // will be at the next tick). Acknowledging the keepalive would let the agent
                // believe it holds for another TTL while the expiry hands its resources to
                // someone else, so the agent is told now (the SDK gives up first).
                let overdue = LeaseId::parse(&lease).filter(|id| {
                    state.expiring.contains(id)
                        || state
                            .deadlines
                            .get(id)
                            .is_some_and(|(deadline, _)| *deadline <= now)
                });
                let answer = if !state.ready {
                    Reply::refused(
                        ErrorCode::Unavailable,
                        "this node is not a ready leader; retry (the SDK does)",
                    )
                } else if overdue.is_some() {
                    if let Some((deadline, ttl_ms)) = previous {
                        super::metrics::keepalive_ttl_used(now, deadline, ttl_ms);
                    }
                    Reply::refused(
                        ErrorCode::LeaseNotFound,
                        format!("lease {lease} expired: its TTL ran out before this keepalive"),
                    )
                } else {
                    let op = ReadOp::LeaseKeepalive { lease };
                    let answer = state.raft.query(|sm| sm.query(&agent, &op))?;
                    if let (Reply::Ttl { ttl_ms }, ReadOp::LeaseKeepalive { lease }) =
                        (&answer, &op)
                        && let Some(id) = LeaseId::parse(lease)
                    {
                        let deadline = Instant::now() + Duration::from_millis(*ttl_ms);
                        state.deadlines.insert(id, (deadline, *ttl_ms));
                        super::metrics::keepalive();
                        if let Some((deadline, ttl_ms)) = previous {
                            super::metrics::keepalive_ttl_used(now, deadline, ttl_ms);
                        }
                    }
                    answer
                };
                let _ = reply.send(answer);
            }
            KeeperMsg::LeaseGranted { lease, ttl_ms } => {
                if state.ready {
                    let deadline = Instant::now() + Duration::from_millis(ttl_ms);
                    state.deadlines.insert(lease, (deadline, ttl_ms));
                }
            }
            KeeperMsg::LeaseEnded { lease } => {
                state.deadlines.remove(&lease);
                state.expiring.remove(&lease);
            }
            KeeperMsg::Resync => {
                if state.ready {
                    state.rebuild()?;
                }
            }
            KeeperMsg::Leadership { ready, term } => {
                let took_office = ready && (!state.ready || term != state.term);
                state.ready = ready;
                state.term = term;
                if took_office {
                    state.rebuild()?;
                } else if !ready {
                    state.deadlines.clear();
                    state.expiring.clear();
                }
            }
            KeeperMsg::Tick => {
                if !state.ready {
                    return Ok(());
                }
                let now = Instant::now();
                let mut overdue: Vec<LeaseId> = state
                    .deadlines
                    .iter()
                    .filter(|(lease, (deadline, _))| {
                        *deadline <= now && !state.expiring.contains(lease)
                    })
                    .map(|(lease, _)| *lease)
                    .collect();
                if overdue.is_empty() {
                    return Ok(());
                }
                overdue.sort_unstable();
                state.expiring.extend(overdue.iter().copied());
                let command = Command::ExpireLeases {
                    term: state.term,
                    leases: overdue.clone(),
                };
                let proposer = state.proposer.clone();
                tokio::spawn(async move {
                    let _ = proposer
                        .call(|port| ProposerMsg::Propose(command, port), None)
                        .await;
                    let _ = myself.cast(KeeperMsg::ExpiryDone(overdue));
                });
            }
            KeeperMsg::ExpiryDone(leases) => {
                for lease in leases {
                    state.expiring.remove(&lease);
                }
            }
            KeeperMsg::Remaining { leases, reply } => {
                let now = Instant::now();
                let remaining = leases
                    .iter()
                    .map(|lease| {
                        let (deadline, _) = state.deadlines.get(lease)?;
                        let left = deadline.saturating_duration_since(now).as_millis();
                        Some(u64::try_from(left).unwrap_or(u64::MAX))
                    })
                    .collect();
                let _ = reply.send(remaining);
            }
        }
        Ok(())
    }
}
