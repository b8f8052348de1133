//! The supervisor: starts the node's actor linked to itself, watches the node's tasks, and
//! stops the whole node if any of them fails. A coordination node that silently lost its lease
//! keeper would keep granting while never expiring anything; failing loudly lets the operator
//! (or the other replicas) take over. ractor catches a panicking actor and reports it here
//! (ractor#282: an unsupervised panic is lost), so the actor is linked; a task that ends is
//! reported the same way.
//!
//! ```text
//!  Supervisor ── LeaseKeeper  (deadlines, expiry proposals, keepalives; linked)
//!  tasks watched: proposer (its end stops the node)
//!  tasks owned:   leadership ─▶ LeaseKeeper (ready, term), a log line on taking office and
//!                 on losing it; Raft's metrics exporter; the cluster watch (quorum lost, cut
//!                 off: pending requests answered, WARN lines; membership changes)
//! ```

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::watch;

use super::lease_keeper::{KeeperArgs, KeeperMsg, LeaseKeeper};
use super::proposer::Proposer;
use super::waits::Waits;
use crate::raft::RaftHandle;

/// The supervisor's behaviour.
pub struct Supervisor;

/// What the supervisor starts its children with.
pub struct SupervisorArgs {
    /// The node's Raft.
    pub raft: Arc<RaftHandle>,
    /// The proposer, for the keeper's expiry proposals.
    pub proposer: Proposer,
    /// Fires when the proposer's task ends: the node stops then.
    pub proposer_ended: tokio::sync::oneshot::Receiver<()>,
    /// How often the keeper looks for overdue leases.
    pub keeper_tick_ms: u64,
    /// Set to the reason when a child fails.
    pub failure: watch::Sender<Option<String>>,
    /// The pending requests, answered by the cluster watch when this node loses contact.
    pub(crate) waits: Arc<Waits>,
}

/// The children, for the node handle.
pub struct SupervisorState {
    keeper: ActorRef<KeeperMsg>,
    failure: watch::Sender<Option<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Messages: the supervisor hands out its child, and hears of a task that ended.
pub enum SupervisorMsg {
    /// Reply with the keeper.
    Keeper(ractor::RpcReplyPort<ActorRef<KeeperMsg>>),
    /// A watched task ended (it never should while the node runs).
    TaskEnded(String),
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
        // ractor's registry is per process: names carry the node id so that several nodes can
        // run in one process (the in-process cluster tests).
        let me = args.raft.node_id();
        let (keeper, _) = Actor::spawn_linked(
            Some(format!("lease-keeper@{me}")),
            LeaseKeeper,
            KeeperArgs {
                raft: args.raft.clone(),
                proposer: args.proposer,
                tick_ms: args.keeper_tick_ms,
            },
            myself.get_cell(),
        )
        .await?;
        let proposer_watch = {
            let myself = myself.clone();
            let ended = args.proposer_ended;
            tokio::spawn(async move {
                let _ = ended.await;
                let reason = "the proposer task ended (see the log for a panic)".to_string();
                let _ = myself.cast(SupervisorMsg::TaskEnded(reason));
            })
        };
        let leadership = tokio::spawn(follow_leadership(args.raft.clone(), keeper.clone()));
        Ok(SupervisorState {
            keeper,
            failure: args.failure,
            tasks: vec![
                proposer_watch,
                leadership,
                crate::raft::metrics::spawn(args.raft.clone()),
                tokio::spawn(super::cluster_watch::run(args.raft.clone(), args.waits)),
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
        state.keeper.stop(None);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Keeper(reply) => {
                let _ = reply.send(state.keeper.clone());
            }
            SupervisorMsg::TaskEnded(reason) => fail(&myself, state, reason),
        }
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
        fail(&myself, state, reason);
        Ok(())
    }
}

/// Records `reason` as the node's failure and stops the node.
fn fail(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState, reason: String) {
    tracing::error!(%reason, "a node component ended; stopping the node");
    let _ = state.failure.send(Some(reason.clone()));
    myself.stop(Some(reason));
}

/// Tells the keeper whether this node is a ready leader, each time that changes, and logs
/// taking and losing office.
async fn follow_leadership(raft: Arc<RaftHandle>, keeper: ActorRef<KeeperMsg>) {
    let mut leadership = raft.leadership();
    let mut was_ready = false;
    loop {
        let (ready, term) = {
            let now = leadership.borrow_and_update();
            (now.ready, now.term)
        };
        if ready != was_ready {
            was_ready = ready;
            // Looked up now: at start the membership that names this node may not be known
            // yet, and the name would fall back to the number.
            let me = raft.member_name(raft.node_id());
            if ready {
                tracing::info!(member = %me, term, "leading the cluster");
            } else {
                tracing::info!(member = %me, term, "no longer leading");
            }
        }
        if keeper.cast(KeeperMsg::Leadership { ready, term }).is_err()
            || leadership.changed().await.is_err()
        {
            break;
        }
    }
}
