//! The proposer: the one task that writes to Raft. It stamps nothing itself (the raft facade
//! stamps the leader's clock into each entry) but it *batches*: openraft appends one entry
//! per `client_write`, each entry costs an fsync on every member, and this task proposes one
//! batch at a time (it awaits the batch's commit), so one command per entry would cost one
//! commit per request. Commands that arrive while an entry is in
//! flight wait in the channel and go out together in the next entry. Commands that arrive
//! together while the proposer is idle (the two reactions to a lock's handover) are kept
//! together by holding a batch of one open for a moment, while that pays (`batch_hold.rs`).
//!
//! ```text
//!  Proposer::write(AgentWrite, origin) ─┐
//!  Proposer::propose(NodeCommand)  ─────┴▶ channel ─▶ task: recv_many(batch_max)
//!     ─▶ a batch of one held open while more arrive within batch_hold_us of each other
//!        (batch_hold.rs)
//!     agents' writes ─▶ on a follower: forwarded to the leader whole (PeerRequest::Writes)
//!     a follower's forwarded writes (on the leader, Proposer::forwarded) ─┐
//!     the node's own  ─▶ on a follower: refused NotLeader, never forwarded │
//!     the rest        ─▶ raft.propose_batch (this node leads) ◀───────────┘ one entry
//!     ─▶ each reply to its answer: an agent's to the waits component, a forwarded group's to
//!        the follower's call, the node's own to its caller ─▶ the next batch
//! ```
//!
//! Two kinds of proposal, two types: an agent's write ([`AgentWrite`], answered through the
//! waits component) may be forwarded to the leader; the node's own commands ([`NodeCommand`]:
//! lease expiry, wait expiry, limits, answered to their caller) are proposed only by a leader,
//! with its own term, and have no way onto the peer port (the forwarder takes `AgentWrite`s
//! only). A follower's keeper or configuration step that proposes gets
//! [`NodeError::NotLeader`].
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
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::NodeError;
use super::batch_hold::BatchHold;
use super::forward::Forwarder;
use super::waits::Waits;
use crate::raft::transport::AgentWrite;
use crate::raft::{Origin, RaftHandle};
use crate::state_machine::{Command, Reply};

/// A command the node proposes on its own behalf, only while it leads: one of the log's own
/// commands (an expiry, `Configure`), never an agent's request, which comes as an
/// [`AgentWrite`] and may be forwarded to the leader.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeCommand(Command);

impl NodeCommand {
    /// The node's own `command`.
    pub(crate) fn new(command: Command) -> Self {
        debug_assert!(
            !matches!(command, Command::Request { .. }),
            "an agent's request reaches the proposer as an AgentWrite"
        );
        NodeCommand(command)
    }

    /// The log's command.
    fn into_command(self) -> Command {
        self.0
    }
}

/// What waits in the channel: an agent's write or one of the node's own commands, each with
/// where its reply goes.
enum Queued {
    /// An agent's write: its reply goes to the waits component, keyed by `origin`. `since`
    /// is when it was handed to the proposer ([`WRITE_WAIT_MAX`]).
    Write {
        write: AgentWrite,
        origin: Origin,
        since: Instant,
    },
    /// A follower's batch of agents' writes, on the leader: the replies go back to the
    /// follower's forwarding call, in order. It joins the leader's next entry with the
    /// leader's own agents' writes, so the requests a handover sets off share an entry
    /// whichever members their agents are connected to.
    Forwarded {
        writes: Vec<AgentWrite>,
        reply: oneshot::Sender<Result<Vec<Reply>, NodeError>>,
    },
    /// The node's own command: its reply goes to the caller.
    Own {
        command: NodeCommand,
        caller: oneshot::Sender<Result<Reply, NodeError>>,
    },
}

/// A handle to the proposer task. Cheap to clone; the task ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Proposer {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Proposer {
    /// Starts the task. `batch_max` bounds the commands in one entry; `batch_hold` is how
    /// close together arrivals keep a batch open (zero: never held); `forwarder` sends agents'
    /// writes to the leader in a cluster.
    pub(crate) fn start(
        raft: Arc<RaftHandle>,
        waits: Arc<Waits>,
        forwarder: Option<Forwarder>,
        batch_max: usize,
        batch_hold: Duration,
    ) -> (Proposer, tokio::task::JoinHandle<()>, oneshot::Receiver<()>) {
        // Unbounded: the ingress permits bound what an agent can put here, and the node's own
        // commands are few.
        let (queue, receiver) = mpsc::unbounded_channel();
        let (ended_tx, ended) = oneshot::channel();
        let task = tokio::spawn(async move {
            // Fires when the task ends in any way: returns, panics or is aborted.
            let _ended = Ended(Some(ended_tx));
            let task = Task {
                raft,
                waits,
                forwarder,
            };
            task.run(batch_max.max(1), BatchHold::new(batch_hold), receiver)
                .await;
        });
        (Proposer { queue }, task, ended)
    }

    /// Queues an agent's write for the next entry, now: writes are proposed in the order of
    /// the calls (one agent's pipelined writes reach the log in the order it sent them). Its
    /// reply goes to the waits component under `origin`.
    pub(crate) fn write(&self, write: AgentWrite, origin: Origin) -> Result<(), NodeError> {
        self.queue
            .send(Queued::Write {
                write,
                origin,
                since: Instant::now(),
            })
            .map_err(|_| NodeError::Stopping)
    }

    /// Proposes a follower's forwarded `writes` in this leader's next entry and waits for
    /// their replies, in order. On a node that does not lead (deposed meanwhile):
    /// [`NodeError::NotLeader`]; they are never forwarded again from here.
    pub(crate) async fn forwarded(&self, writes: Vec<AgentWrite>) -> Result<Vec<Reply>, NodeError> {
        let (reply, replies) = oneshot::channel();
        self.queue
            .send(Queued::Forwarded { writes, reply })
            .map_err(|_| NodeError::Stopping)?;
        replies.await.map_err(|_| NodeError::Stopping)?
    }

    /// Proposes one of the node's own commands and waits for its reply. On a node that does
    /// not lead: [`NodeError::NotLeader`], and nothing leaves the node.
    pub(crate) async fn propose(&self, command: NodeCommand) -> Result<Reply, NodeError> {
        let (caller, reply) = oneshot::channel();
        self.queue
            .send(Queued::Own { command, caller })
            .map_err(|_| NodeError::Stopping)?;
        reply.await.map_err(|_| NodeError::Stopping)?
    }
}

/// Adds to `batch` what arrives while arrivals come within `gap` of the last (at most
/// `3 × gap` in all, and up to `batch_max`); returns how many. The wait spins, yielding to the
/// runtime between looks: tokio's timers have millisecond resolution, a thousand times the
/// gap, and the arrivals come from other tasks, which the yield lets run.
async fn hold_open(
    queue: &mut mpsc::UnboundedReceiver<Queued>,
    batch: &mut Vec<Queued>,
    batch_max: usize,
    gap: Duration,
) -> usize {
    // The wall clock, not tokio's: a paused test clock would never let the spin end.
    let start = std::time::Instant::now();
    let mut last = start;
    let mut caught = 0;
    while batch.len() < batch_max {
        match queue.try_recv() {
            Ok(queued) => {
                batch.push(queued);
                caught += 1;
                last = std::time::Instant::now();
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                let now = std::time::Instant::now();
                if now.duration_since(last) >= gap || now.duration_since(start) >= 3 * gap {
                    break;
                }
                tokio::task::yield_now().await;
            }
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        }
    }
    caught
}

/// A follower's forwarded writes and where their replies go.
type Forwarded = (
    Vec<AgentWrite>,
    oneshot::Sender<Result<Vec<Reply>, NodeError>>,
);

/// Tells the supervisor that the task ended, when dropped with it.
struct Ended(Option<oneshot::Sender<()>>);

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(ended) = self.0.take() {
            let _ = ended.send(());
        }
    }
}

/// The longest an agent's write may wait on this member before it first goes to the log (or
/// to the leader): one second. A write that waited longer (its member had no leader, an entry
/// stuck without a quorum, the process paused) is answered `unavailable` and dropped, as is
/// one already answered meanwhile (its commit deadline, a lost quorum): never proposed later.
/// Why: the agent resends its id after its request timeout (the SDK's default: 2 s) and moves
/// on once a copy is answered; a copy proposed after that could come past the retry memory's
/// newest outcomes of that agent (`dedup_per_agent_max`) and be applied a second time. Below
/// the resend interval, every copy is in the log, ordered before the resend, or gone, by the
/// time the agent resends.
pub(crate) const WRITE_WAIT_MAX: Duration = Duration::from_secs(1);

/// The task's parts.
struct Task {
    raft: Arc<RaftHandle>,
    waits: Arc<Waits>,
    forwarder: Option<Forwarder>,
}

impl Task {
    /// Whether a write queued `since` then may still be proposed ([`WRITE_WAIT_MAX`]); if
    /// not, its wait (if still pending) is answered `unavailable` now.
    fn still_wanted(&self, origin: &Origin, since: Instant) -> bool {
        let waited = since.elapsed();
        if waited <= WRITE_WAIT_MAX && self.waits.is_pending(origin) {
            return true;
        }
        let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(
            agent = %origin.agent,
            request_id = %origin.request_id,
            waited_ms,
            "a write that waited too long, or was answered meanwhile, is dropped unproposed"
        );
        self.waits.failed(origin, &NodeError::Stale { waited_ms });
        false
    }

    /// Whether a batch of writes, the oldest queued at `oldest`, may still go to the log as a
    /// whole: none waited past [`WRITE_WAIT_MAX`] and none was answered meanwhile.
    fn all_still_wanted(&self, origins: &[Origin], oldest: Option<Instant>) -> bool {
        oldest.is_none_or(|oldest| oldest.elapsed() <= WRITE_WAIT_MAX)
            && origins.iter().all(|origin| self.waits.is_pending(origin))
    }

    /// One batch at a time, in arrival order.
    async fn run(
        &self,
        batch_max: usize,
        mut hold: BatchHold,
        mut queue: mpsc::UnboundedReceiver<Queued>,
    ) {
        let mut batch = Vec::with_capacity(batch_max);
        while queue.recv_many(&mut batch, batch_max).await > 0 {
            // Only a batch of one is held: two or more arrived together already (the reactions
            // to the last entry, gathered while it was in flight), and a hold would only delay
            // them.
            if batch.len() == 1
                && batch_max > 1
                && let Some(gap) = hold.should_hold()
            {
                let caught = hold_open(&mut queue, &mut batch, batch_max, gap).await;
                hold.held(caught);
            }
            let mut writes = Vec::new();
            let mut origins = Vec::new();
            let mut oldest: Option<Instant> = None;
            let mut forwarded = Vec::new();
            let mut own = Vec::new();
            let mut callers = Vec::new();
            for queued in batch.drain(..) {
                match queued {
                    Queued::Write {
                        write,
                        origin,
                        since,
                    } => {
                        if self.still_wanted(&origin, since) {
                            writes.push(write);
                            origins.push(origin);
                            oldest = Some(oldest.map_or(since, |oldest| oldest.min(since)));
                        }
                    }
                    // A follower that stopped waiting (its call timed out) answers its agents
                    // itself, and they resend: its writes must not reach the log after that.
                    Queued::Forwarded { reply, .. } if reply.is_closed() => {}
                    Queued::Forwarded { writes, reply } => forwarded.push((writes, reply)),
                    Queued::Own { command, caller } => {
                        own.push(command);
                        callers.push(caller);
                    }
                }
            }
            self.propose(writes, origins, oldest, forwarded, own, callers)
                .await;
        }
    }

    /// Proposes one batch: the writes through the leader (forwarded when this node follows),
    /// a follower's forwarded writes and the node's own commands only here, and only while
    /// this node leads.
    async fn propose(
        &self,
        writes: Vec<AgentWrite>,
        origins: Vec<Origin>,
        oldest: Option<Instant>,
        forwarded: Vec<Forwarded>,
        own: Vec<NodeCommand>,
        callers: Vec<oneshot::Sender<Result<Reply, NodeError>>>,
    ) {
        // On a follower the writes go to the leader; they come back when this node leads (a
        // single node, or a follower that won an election meanwhile).
        let started = tokio::time::Instant::now();
        let (writes, origins) = match &self.forwarder {
            Some(forwarder) if !writes.is_empty() => match forwarder
                .propose(writes, &|| self.all_still_wanted(&origins, oldest))
                .await
            {
                Ok(Ok(replies)) => {
                    self.answer_writes(&origins, Ok(replies));
                    (Vec::new(), Vec::new())
                }
                Ok(Err(writes)) => (writes, origins),
                Err(error) => {
                    self.answer_writes(&origins, Err(error));
                    (Vec::new(), Vec::new())
                }
            },
            _ => (writes, origins),
        };
        // The node's own commands, and writes forwarded here, are never forwarded again: a
        // follower refuses them (the forwarding follower tries the next leader).
        let ((forwarded, own, callers), refused) =
            if (own.is_empty() && forwarded.is_empty()) || self.raft.is_leader() {
                ((forwarded, own, callers), None)
            } else {
                let error = NodeError::NotLeader {
                    node: self.raft.member_name(self.raft.node_id()),
                    leader: self.raft.leader().map(|(_, member)| member.name),
                };
                (
                    (Vec::new(), Vec::new(), Vec::new()),
                    Some((error, forwarded, callers)),
                )
            };
        if let Some((error, forwarded, callers)) = refused {
            // Callers may have given up (their timeouts): nothing to do then.
            for (_, reply) in forwarded {
                let _ = reply.send(Err(error.clone()));
            }
            for caller in callers {
                let _ = caller.send(Err(error.clone()));
            }
        }
        let forwarded_ms = started.elapsed().as_millis();
        let here = writes.len() + forwarded.iter().map(|(w, _)| w.len()).sum::<usize>() + own.len();
        self.propose_here(writes, &origins, forwarded, own, callers)
            .await;
        let elapsed_ms = started.elapsed().as_millis();
        if elapsed_ms > 500 {
            tracing::debug!(
                elapsed_ms,
                forwarded_ms,
                here,
                "a slow batch: the proposer took over 500 ms"
            );
        }
    }

    /// Proposes `writes`, the `forwarded` groups and `own` in one entry on this node (it
    /// leads) and answers each. This node's agents' writes come first, in their order, then
    /// each forwarded group in its order, then the node's own commands: all arrived while the
    /// previous entry was in flight, so any order is one the log could have had, and one
    /// agent's writes (which all come through one member at a time) keep theirs.
    async fn propose_here(
        &self,
        writes: Vec<AgentWrite>,
        origins: &[Origin],
        forwarded: Vec<Forwarded>,
        own: Vec<NodeCommand>,
        callers: Vec<oneshot::Sender<Result<Reply, NodeError>>>,
    ) {
        if writes.is_empty() && forwarded.is_empty() && own.is_empty() {
            return;
        }
        let mut groups = Vec::with_capacity(forwarded.len());
        let mut forwarded_commands = Vec::new();
        for (writes, reply) in forwarded {
            groups.push((writes.len(), reply));
            forwarded_commands.extend(writes.into_iter().map(AgentWrite::into_command));
        }
        let commands: Vec<Command> = writes
            .into_iter()
            .map(AgentWrite::into_command)
            .chain(forwarded_commands)
            .chain(own.into_iter().map(NodeCommand::into_command))
            .collect();
        let replies = self
            .raft
            .propose_batch(commands)
            .await
            .map(|proposed| proposed.into_iter().map(|p| p.reply).collect::<Vec<_>>())
            .map_err(NodeError::from);
        match replies {
            Ok(mut replies) => {
                // One reply per command (`propose_batch`); a short answer leaves the callers
                // past it unanswered (`Stopping` when dropped), never a panic here.
                let mut rest = replies.split_off(origins.len().min(replies.len()));
                self.answer_writes(origins, Ok(replies));
                for (count, reply) in groups {
                    let after = rest.split_off(count.min(rest.len()));
                    let _ = reply.send(Ok(std::mem::replace(&mut rest, after)));
                }
                for (caller, reply) in callers.into_iter().zip(rest) {
                    let _ = caller.send(Ok(reply));
                }
            }
            Err(error) => {
                self.answer_writes(origins, Err(error.clone()));
                for (_, reply) in groups {
                    let _ = reply.send(Err(error.clone()));
                }
                for caller in callers {
                    let _ = caller.send(Err(error.clone()));
                }
            }
        }
    }

    /// Hands the writes' replies (or the batch's failure) to the waits component.
    fn answer_writes(&self, origins: &[Origin], replies: Result<Vec<Reply>, NodeError>) {
        match replies {
            Ok(replies) => {
                for (origin, reply) in origins.iter().zip(replies) {
                    self.waits.replied(origin, reply);
                }
            }
            Err(error) => {
                for origin in origins {
                    self.waits.failed(origin, &error);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node command for the channel; its reply is never read.
    fn queued() -> Queued {
        let (caller, _) = oneshot::channel();
        Queued::Own {
            command: NodeCommand::new(Command::ExpireWaits { term: 1 }),
            caller,
        }
    }

    #[tokio::test]
    async fn a_held_batch_takes_what_has_arrived_up_to_the_bound_then_closes() {
        let (sender, mut queue) = mpsc::unbounded_channel();
        for _ in 0..5 {
            sender.send(queued()).expect("open");
        }
        let mut batch = vec![queued()];
        let gap = Duration::from_micros(100);
        assert_eq!(hold_open(&mut queue, &mut batch, 4, gap).await, 3);
        assert_eq!(batch.len(), 4, "never past batch_max");
        let mut batch = Vec::new();
        assert_eq!(hold_open(&mut queue, &mut batch, 4, gap).await, 2);
        // Nothing more arrives: the hold ends after the gap with nothing caught.
        let started = std::time::Instant::now();
        let mut batch = Vec::new();
        assert_eq!(hold_open(&mut queue, &mut batch, 4, gap).await, 0);
        assert!(started.elapsed() >= gap);
        drop(sender);
        assert_eq!(hold_open(&mut queue, &mut batch, 4, gap).await, 0);
    }
}
