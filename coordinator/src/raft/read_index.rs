//! Read-index rounds shared by concurrent keepalives and reads.
//!
//! A keepalive may move a lease's deadline, and a read may answer, only after this node has
//! confirmed with a quorum that it still leads, in a round that started after the request
//! arrived (DESIGN.md §2: read-index). One openraft `ensure_linearizable` per request would
//! cost a heartbeat round trip to every voter per keepalive: 10,000 agents keeping alive every
//! 1.7 s would be 6,000 rounds a second. So requests queue here and one round at a time
//! serves every request that was queued before it started:
//!
//! ```text
//!  confirm() ─▶ queue ─▶ task: take all queued ─▶ ensure_linearizable ─▶ answer them all
//!                          ▲ (arrivals during a round wait for the next one) ┘
//! ```

use tokio::sync::{mpsc, oneshot};

use super::error::{RaftError, check_is_leader_error};
use super::types::Raft;

type Waiter = oneshot::Sender<Result<(), RaftError>>;

/// A handle to the round runner; the runner ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct ReadIndex {
    queue: mpsc::UnboundedSender<Waiter>,
}

impl ReadIndex {
    /// Starts the round runner for `raft`.
    pub(crate) fn start(raft: Raft) -> ReadIndex {
        let (queue, mut waiting) = mpsc::unbounded_channel::<Waiter>();
        tokio::spawn(async move {
            while let Some(first) = waiting.recv().await {
                let mut batch = vec![first];
                while let Ok(next) = waiting.try_recv() {
                    batch.push(next);
                }
                let result = raft
                    .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
                    .await
                    .map(|_| ())
                    .map_err(check_is_leader_error);
                for waiter in batch {
                    let _ = waiter.send(match &result {
                        Ok(()) => Ok(()),
                        Err(error) => Err(error.duplicate()),
                    });
                }
            }
        });
        ReadIndex { queue }
    }

    /// Returns once a quorum confirmed this node's leadership in a round that started after
    /// this call, and everything committed before that round is applied here.
    pub(crate) async fn confirm(&self) -> Result<(), RaftError> {
        let (waiter, answer) = oneshot::channel();
        let stopping = || RaftError::Fatal("raft is shutting down".into());
        self.queue.send(waiter).map_err(|_| stopping())?;
        answer.await.map_err(|_| stopping())?
    }
}
