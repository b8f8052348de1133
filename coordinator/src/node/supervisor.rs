//! The supervisor: starts the node's actors linked to itself and stops the whole node if any of
//! them fails. A coordination node that silently lost its lease keeper would keep granting
//! while never expiring anything; failing loudly lets the operator (or the other replicas) take
//! over. ractor catches a panicking actor and reports it here (ractor#282: an unsupervised
//! panic is lost), so every actor is linked.
//!
//! ```text
//!  Supervisor ─┬─ Proposer      (Raft writes, batched)
//!              ├─ LeaseKeeper   (deadlines, expiry proposals, keepalives)
//!              └─ FanOut        (applied events ─▶ bridge, keeper)
//!  tasks: applied pump (raft ─▶ FanOut), leadership watch (raft metrics ─▶ LeaseKeeper)
//! ```

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{mpsc, watch};

use super::Outbound;
use super::fan_out::{FanOut, FanOutArgs, FanOutMsg};
use super::forward::Forwarder;
use super::lease_keeper::{KeeperArgs, KeeperMsg, LeaseKeeper};
use super::proposer::{Proposer, ProposerArgs, ProposerMsg};
use crate::raft::{AppliedReceiver, RaftHandle};

/// The supervisor's behaviour.
pub struct Supervisor;

/// What the supervisor starts its children with.
pub struct SupervisorArgs {
    pub raft: Arc<RaftHandle>,
    pub applied: AppliedReceiver,
    pub outbound: mpsc::UnboundedSender<Outbound>,
    pub batch_max: usize,
    pub keeper_tick_ms: u64,
    /// To the leader, in a cluster.
    pub forwarder: Option<Forwarder>,
    /// Set to the reason when a child fails.
    pub failure: watch::Sender<Option<String>>,
}

/// The children, for the node handle.
pub struct SupervisorState {
    pub proposer: ActorRef<ProposerMsg>,
    pub keeper: ActorRef<KeeperMsg>,
    failure: watch::Sender<Option<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Messages: the supervisor only hands out its children.
pub enum SupervisorMsg {
    /// Reply with the proposer and keeper.
    Children(ractor::RpcReplyPort<(ActorRef<ProposerMsg>, ActorRef<KeeperMsg>)>),
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let cell = myself.get_cell();
        // ractor's registry is per process: names carry the node id so that several nodes can
        // run in one process (the in-process cluster tests).
        let me = args.raft.node_id();
        let (proposer, _) = Actor::spawn_linked(
            Some(format!("proposer@{me}")),
            Proposer,
            ProposerArgs {
                raft: args.raft.clone(),
                batch_max: args.batch_max,
                forwarder: args.forwarder,
            },
            cell.clone(),
        )
        .await?;
        let (keeper, _) = Actor::spawn_linked(
            Some(format!("lease-keeper@{me}")),
            LeaseKeeper,
            KeeperArgs {
                raft: args.raft.clone(),
                proposer: proposer.clone(),
                tick_ms: args.keeper_tick_ms,
            },
            cell.clone(),
        )
        .await?;
        let (fan_out, _) = Actor::spawn_linked(
            Some(format!("fan-out@{me}")),
            FanOut,
            FanOutArgs {
                keeper: keeper.clone(),
                outbound: args.outbound,
                raft: args.raft.clone(),
            },
            cell,
        )
        .await?;
        let mut applied = args.applied;
        let pump = tokio::spawn(async move {
            while let Some(entry) = applied.recv().await {
                if fan_out.cast(FanOutMsg::Applied(entry)).is_err() {
                    break;
                }
            }
        });
        let watch_keeper = keeper.clone();
        let raft = args.raft.clone();
        let leadership = tokio::spawn(async move {
            let mut metrics = raft.raft().metrics();
            let me = raft.node_id();
            let mut was_ready = false;
            loop {
                let (ready, term) = {
                    let m = metrics.borrow_and_update();
                    (crate::raft::is_ready_leader(&m, me), m.current_term)
                };
                if ready != was_ready {
                    was_ready = ready;
                    if ready {
                        tracing::info!(node = me, term, "leading the cluster");
                    } else {
                        tracing::info!(node = me, term, "no longer leading");
                    }
                }
                if watch_keeper
                    .cast(KeeperMsg::Leadership { ready, term })
                    .is_err()
                    || metrics.changed().await.is_err()
                {
                    break;
                }
            }
        });
        Ok(SupervisorState {
            proposer,
            keeper,
            failure: args.failure,
            tasks: vec![
                pump,
                leadership,
                super::raft_metrics::spawn(args.raft.clone()),
            ],
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for task in &state.tasks {
            task.abort();
        }
        state.proposer.stop(None);
        state.keeper.stop(None);
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisorMsg::Children(reply) = message;
        let _ = reply.send((state.proposer.clone(), state.keeper.clone()));
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let reason = match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                format!("actor {:?} failed: {error}", cell.get_name())
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => format!(
                "actor {:?} stopped: {}",
                cell.get_name(),
                reason.unwrap_or_else(|| "no reason given".into())
            ),
            _ => return Ok(()),
        };
        tracing::error!(%reason, "a node actor ended; stopping the node");
        let _ = state.failure.send(Some(reason.clone()));
        myself.stop(Some(reason));
        Ok(())
    }
}
