//! The proposer: the one actor that writes to Raft. It stamps nothing itself (the raft facade
//! stamps the leader's clock into each entry) but it *batches*: openraft 0.9 appends one entry
//! per `client_write` and waits for that entry's fsync before it submits the next, so one
//! command per entry would cost one fsync per request. Commands that arrive while an entry is in
//! flight wait here and go out together in the next entry.
//!
//! ```text
//!  Propose(cmd, reply) ─▶ queue ──(nothing in flight)──▶ task: raft.propose_batch(queue[..n])
//!                           ▲                                   │ replies sent from the task
//!                           └──────────── Flushed ◀─────────────┘ (then the next batch)
//! ```
//!
//! On a follower (in a cluster) the same batch goes to the leader instead, one forwarded batch
//! at a time, so one agent's requests keep their arrival order across the forwarding too.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::NodeError;
use super::forward::Forwarder;
use crate::raft::RaftHandle;
use crate::state_machine::{Command, Reply};

/// Messages of the proposer. `Propose` is large (a command), but it is the message this
/// actor exists for; boxing it would add an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
pub enum ProposerMsg {
    /// Propose one command; the reply port gets the machine's answer once it is applied.
    Propose(Command, RpcReplyPort<Result<Reply, NodeError>>),
    /// The batch in flight completed (sent by the proposing task to its actor).
    Flushed,
}

/// The proposer's behaviour (stateless; the state is built in `pre_start`).
pub struct Proposer;

/// Arguments: the raft handle and the most commands one entry may carry.
pub struct ProposerArgs {
    pub raft: Arc<RaftHandle>,
    pub batch_max: usize,
    /// To the leader, in a cluster.
    pub forwarder: Option<Forwarder>,
}

/// The proposer's state.
pub struct ProposerState {
    raft: Arc<RaftHandle>,
    batch_max: usize,
    forwarder: Option<Forwarder>,
    /// Commands waiting for the next entry, in arrival order.
    queue: Vec<(Command, RpcReplyPort<Result<Reply, NodeError>>)>,
    /// Whether an entry is being proposed right now.
    in_flight: bool,
}

impl Actor for Proposer {
    type Msg = ProposerMsg;
    type State = ProposerState;
    type Arguments = ProposerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ProposerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ProposerState {
            raft: args.raft,
            batch_max: args.batch_max.max(1),
            forwarder: args.forwarder,
            queue: Vec::new(),
            in_flight: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ProposerMsg::Propose(command, reply) => state.queue.push((command, reply)),
            ProposerMsg::Flushed => state.in_flight = false,
        }
        if !state.in_flight && !state.queue.is_empty() {
            let take = state.queue.len().min(state.batch_max);
            let batch: Vec<_> = state.queue.drain(..take).collect();
            state.in_flight = true;
            let raft = state.raft.clone();
            let forwarder = state.forwarder.clone();
            tokio::spawn(async move {
                let (commands, ports): (Vec<Command>, Vec<_>) = batch.into_iter().unzip();
                // On a follower the batch goes to the leader; it comes back when this node
                // leads (a single node, or a follower that won an election meanwhile).
                let local = match &forwarder {
                    Some(forwarder) => forwarder.propose(commands).await,
                    None => Ok(Err(commands)),
                };
                let replies = match local {
                    Ok(Ok(replies)) => Ok(replies),
                    Ok(Err(commands)) => raft
                        .propose_batch(commands)
                        .await
                        .map(|proposed| proposed.into_iter().map(|p| p.reply).collect())
                        .map_err(NodeError::from),
                    Err(error) => Err(error),
                };
                match replies {
                    Ok(replies) => {
                        for (port, reply) in ports.into_iter().zip(replies) {
                            // The caller may have given up (timeout): nothing to do then.
                            let _ = port.send(Ok(reply));
                        }
                    }
                    Err(error) => {
                        for port in ports {
                            let _ = port.send(Err(error.clone()));
                        }
                    }
                }
                // The actor may be stopping; then there is no next batch to start.
                let _ = myself.cast(ProposerMsg::Flushed);
            });
        }
        Ok(())
    }
}
