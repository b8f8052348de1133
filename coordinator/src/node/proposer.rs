//! The proposer: the one task that writes to Raft. It stamps nothing itself (the raft facade
//! stamps the leader's clock into each entry) but it *batches*: openraft 0.9 appends one entry
//! per `client_write` and waits for that entry's fsync before it submits the next, so one
//! command per entry would cost one fsync per request. Commands that arrive while an entry is in
//! flight wait in the channel and go out together in the next entry.
//!
//! ```text
//!  Proposer::submit(cmd, answer) ─▶ channel ─▶ task: recv_many(batch_max)
//!                                               ─▶ raft.propose_batch  (or, on a follower,
//!                                                  forwarded to the leader whole)
//!                                               ─▶ each reply to its answer: an agent's to the
//!                                                  waits component, the node's own to its caller
//!                                               ─▶ the next batch
//! ```
//!
//! A task, not an actor: the batch is proposed and answered inline, so a command crosses one
//! channel on its way to Raft (an actor would need a task per batch and a message back when it
//! is done). The supervisor watches the task: if it ends while the node runs, the node stops;
//! [`super::Node::shutdown`] ends it after the supervisor.
//!
//! An agent's reply usually reaches the waits component first from the fan-out (the entry is
//! applied before `client_write` returns through openraft's core); the proposer's copy of it
//! then finds nothing pending and does nothing. On a follower the forwarded batch's replies can
//! come before this node applies the entry.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::NodeError;
use super::forward::Forwarder;
use super::waits::Waits;
use crate::raft::{Origin, RaftHandle};
use crate::state_machine::{Command, Reply};

/// Where the reply to a proposed command goes.
pub(crate) enum Answer {
    /// An agent's write: to the waits component, which answers the agent.
    Agent(Origin),
    /// The node's own command (expiry, a wait's cancel, limits): to its caller.
    Caller(oneshot::Sender<Result<Reply, NodeError>>),
}

impl Answer {
    fn send(self, waits: &Waits, result: Result<Reply, NodeError>) {
        match (self, result) {
            (Answer::Agent(origin), Ok(reply)) => waits.replied(&origin, reply),
            (Answer::Agent(origin), Err(error)) => waits.failed(&origin, &error),
            // The caller may have given up (its timeout): nothing to do then.
            (Answer::Caller(caller), result) => {
                let _ = caller.send(result);
            }
        }
    }
}

/// A handle to the proposer task. Cheap to clone; the task ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Proposer {
    queue: mpsc::UnboundedSender<(Command, Answer)>,
}

impl Proposer {
    /// Starts the task. `batch_max` bounds the commands in one entry; `forwarder` sends batches
    /// to the leader in a cluster.
    pub(crate) fn start(
        raft: Arc<RaftHandle>,
        waits: Arc<Waits>,
        forwarder: Option<Forwarder>,
        batch_max: usize,
    ) -> (Proposer, tokio::task::JoinHandle<()>, oneshot::Receiver<()>) {
        // Unbounded: the ingress permits bound what an agent can put here, and the node's own
        // commands are few.
        let (queue, receiver) = mpsc::unbounded_channel();
        let (ended_tx, ended) = oneshot::channel();
        let task = tokio::spawn(async move {
            // Fires when the task ends in any way: returns, panics or is aborted.
            let _ended = Ended(Some(ended_tx));
            run(raft, waits, forwarder, batch_max.max(1), receiver).await;
        });
        (Proposer { queue }, task, ended)
    }

    /// Queues `command` for the next entry, now: commands are proposed in the order of the
    /// calls (one agent's pipelined writes reach the log in the order it sent them).
    pub(crate) fn submit(&self, command: Command, answer: Answer) -> Result<(), NodeError> {
        self.queue
            .send((command, answer))
            .map_err(|_| NodeError::Stopping)
    }

    /// Proposes one of the node's own commands and waits for its reply.
    pub(crate) async fn propose(&self, command: Command) -> Result<Reply, NodeError> {
        let (caller, reply) = oneshot::channel();
        self.submit(command, Answer::Caller(caller))?;
        reply.await.map_err(|_| NodeError::Stopping)?
    }
}

impl Proposer {
    /// Cancels a waiter whose `wait_ms` ran out (a grant that came first wins). Its entry
    /// answers the waiting request (`timeout`), through the fan-out.
    pub(crate) fn cancel_wait(&self, origin: Origin) {
        let proposer = self.clone();
        tokio::spawn(async move {
            let command = Command::CancelWait {
                agent: origin.agent.clone(),
                request_id: origin.request_id.clone(),
            };
            if let Err(error) = proposer.propose(command).await {
                // The agent's SDK resends the same id, which re-arms the wait.
                tracing::warn!(agent = %origin.agent, id = %origin.request_id, %error,
                    "could not cancel a timed-out wait");
            }
        });
    }
}

/// Tells the supervisor that the task ended, when dropped with it.
struct Ended(Option<oneshot::Sender<()>>);

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(ended) = self.0.take() {
            let _ = ended.send(());
        }
    }
}

/// The task: one batch at a time, in arrival order.
async fn run(
    raft: Arc<RaftHandle>,
    waits: Arc<Waits>,
    forwarder: Option<Forwarder>,
    batch_max: usize,
    mut queue: mpsc::UnboundedReceiver<(Command, Answer)>,
) {
    let mut batch = Vec::with_capacity(batch_max);
    while queue.recv_many(&mut batch, batch_max).await > 0 {
        let (commands, answers): (Vec<Command>, Vec<Answer>) = batch.drain(..).unzip();
        // On a follower the batch goes to the leader; it comes back when this node leads (a
        // single node, or a follower that won an election meanwhile).
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
                for (answer, reply) in answers.into_iter().zip(replies) {
                    answer.send(&waits, Ok(reply));
                }
            }
            Err(error) => {
                for answer in answers {
                    answer.send(&waits, Err(error.clone()));
                }
            }
        }
    }
}
