//! [`Observe`]: who leads an election, as a `Stream` of changes, from [`Agent::observe`].
//!
//! The service mirrors each election's leader as the key `$election/{name}` (docs/PROTOCOL.md
//! §8.23): created anew at the revision equal to a new leader's token, put again by a
//! proclaim, deleted when nobody leads. So an observer is a read of that key followed by a
//! [`Watch`](crate::Watch) from the read's revision, and inherits the watch's guarantees: it
//! resumes across reconnects and failover, and after `compacted` it reads the key again and
//! watches on from there.
//!
//! ```text
//!  kv.get $election/{name} ─▶ first item: the leader now (or None)
//!  watch.poll $election/{name} after the read's revision, answer after answer:
//!     put    ─▶ Some(leader)   (a new token: one election.leader read names its agent)
//!     delete ─▶ None, unless a put follows in the same answer (a handover)
//!  compacted ─▶ read again, watch on; an item only if the leader differs from the last one
//! ```
//!
//! **One item per change.** A handover (resign, or the leader's lease ending, with a candidate
//! waiting) deletes the key and creates it again in one log entry, at two revisions. Both
//! always come in one answer unless the answer was cut between them (`max_events`), so
//! within one answer a delete followed by a put is not shown: the observer sees the new
//! leader straight after the old one. A delete that ends an answer is shown as `None`
//! (nobody leads now). A proclaim is a change too (same token, new value); a put that changes
//! neither the token nor the value is not.
//!
//! **The agent** is not in the key (it holds the value only): for each new token the
//! observer asks `election.leader` once. If that leadership has already ended by then, the
//! agent is unknown and [`Leader::agent`] is `None`; the stream's next items show what came
//! after.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt};
use hivekeeper_protocol::kv::{EventKind, KvEvent, election_key};
use hivekeeper_protocol::{KeyValue, LeaderReport, Op};

use crate::agent::Agent;
use crate::backoff::Backoff;
use crate::error::AgentError;
use crate::kv::Kv;
use crate::watch::{WatchItem, transient};

/// An election's leader as an observer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leadership's fencing token (the key's `create_revision`).
    pub token: u64,
    /// The leader's value: what it campaigned with, or last proclaimed.
    pub value: String,
    /// The leading agent, from one `election.leader` read per token; `None` when that
    /// leadership had ended before the read (see the module doc).
    pub agent: Option<String>,
    /// The revision at which the key took this value (its `mod_revision`).
    pub revision: u64,
}

impl Leader {
    /// The leader the key `kv` mirrors, its agent not yet known.
    fn from_key(kv: KeyValue) -> Leader {
        Leader {
            token: kv.create_revision,
            value: kv.value,
            agent: None,
            revision: kv.mod_revision,
        }
    }

    /// Whether `self` and `other` are the same leadership with the same value.
    fn same_as(&self, other: &Leader) -> bool {
        self.token == other.token && self.value == other.value
    }
}

/// The leaders of one election, one item per change; see the module doc. Nothing is sent
/// until the stream is polled; dropping it stops the polls. It ends after an error it cannot
/// resume from (any refusal but `compacted` and the transient ones), which it yields first.
pub struct Observe {
    stream: BoxStream<'static, Result<Option<Leader>, AgentError>>,
}

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observe").finish_non_exhaustive()
    }
}

impl Stream for Observe {
    type Item = Result<Option<Leader>, AgentError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

impl Agent {
    /// Follows the leader of the election `name`: first who leads now (`None`: nobody), then
    /// one item per change. Needs no session: any agent, or an observer, may watch.
    ///
    /// ```no_run
    /// # async fn follow(agent: hivekeeper_agent::Agent) -> Result<(), hivekeeper_agent::AgentError> {
    /// use futures_util::StreamExt;
    /// let mut leaders = agent.observe("hive/gateway");
    /// while let Some(leader) = leaders.next().await {
    ///     match leader? {
    ///         Some(leader) => println!("{} leads at {}", leader.token, leader.value),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self, name: impl Into<String>) -> Observe {
        let name = name.into();
        let config = self.config();
        let observer = Observer {
            kv: self.kv(),
            key: election_key(&name),
            name,
            answers: None,
            last: None,
            queue: VecDeque::new(),
            backoff: Backoff::new(
                Duration::from_millis(config.backoff_first_ms),
                Duration::from_millis(config.backoff_cap_ms),
            ),
            ended: false,
        };
        Observe {
            stream: stream::unfold(observer, Observer::next).boxed(),
        }
    }
}

/// What the stream carries from one item to the next.
struct Observer {
    kv: Kv,
    /// The election's name.
    name: String,
    /// `$election/{name}`.
    key: String,
    /// The watch's answers since the last read; `None`: read the key first.
    answers: Option<BoxStream<'static, Result<Vec<WatchItem>, AgentError>>>,
    /// The last item yielded (`Some(None)`: nobody led); `None` before the first.
    last: Option<Option<Leader>>,
    /// Items decided and not yet yielded.
    queue: VecDeque<Option<Leader>>,
    /// Between failed reads.
    backoff: Backoff,
    /// Set after a final error.
    ended: bool,
}

impl Observer {
    async fn next(mut self) -> Option<(Result<Option<Leader>, AgentError>, Observer)> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some((Ok(item), self));
            }
            if self.ended {
                return None;
            }
            if let Err(error) = self.step().await {
                self.ended = true;
                return Some((Err(error), self));
            }
        }
    }

    /// Reads the key (first, and after `compacted`) or takes the watch's next answer, and
    /// queues the changes it shows.
    async fn step(&mut self) -> Result<(), AgentError> {
        let Some(answers) = self.answers.as_mut() else {
            let read = match self.kv.get(self.key.clone()).await {
                Ok(read) => read,
                Err(error) if transient(&error) => {
                    tokio::time::sleep(self.backoff.next_delay()).await;
                    return Ok(());
                }
                Err(error) => return Err(error),
            };
            self.backoff.reset();
            self.offer(read.kv.map(Leader::from_key)).await;
            let watch = self.kv.watch_key(self.key.clone()).after(read.revision);
            self.answers = Some(watch.answers().expect("a new watch").boxed());
            return Ok(());
        };
        match answers.next().await {
            Some(Ok(items)) => {
                for leader in leader_changes(items) {
                    self.offer(leader).await;
                }
                Ok(())
            }
            // The history no longer reaches the cursor: read the key again.
            Some(Err(AgentError::Compacted { .. })) => {
                self.answers = None;
                Ok(())
            }
            Some(Err(error)) => Err(error),
            // A watch ends only after yielding its error.
            None => {
                self.ended = true;
                Ok(())
            }
        }
    }

    /// Queues `leader` unless it is the last item's leadership and value; a new token gets its
    /// agent from one `election.leader` read.
    async fn offer(&mut self, leader: Option<Leader>) {
        let last = self.last.as_ref();
        let unchanged = match (last, &leader) {
            (Some(Some(last)), Some(leader)) => last.same_as(leader),
            (Some(None), None) => true,
            _ => false,
        };
        if unchanged {
            return;
        }
        let leader = match leader {
            Some(mut leader) => {
                leader.agent = match last {
                    Some(Some(last)) if last.token == leader.token => last.agent.clone(),
                    _ => agent_of(&self.kv, &self.name, leader.token).await,
                };
                Some(leader)
            }
            None => None,
        };
        self.last = Some(leader.clone());
        self.queue.push_back(leader);
    }
}

/// The agent that leads the election `name` with `token`, if it still does.
async fn agent_of(kv: &Kv, name: &str, token: u64) -> Option<String> {
    let op = Op::ElectionLeader {
        name: name.to_string(),
    };
    let report: LeaderReport = kv.agent().request_as(op).await.ok()?;
    report
        .leader
        .filter(|leader| leader.token == token)
        .map(|leader| leader.agent)
}

/// The leaders one watch answer shows, in order: a put's leader; a delete's `None` only when
/// it ends the answer (within it, a put follows: a handover, shown as the new leader alone).
pub(crate) fn leader_changes(items: Vec<WatchItem>) -> Vec<Option<Leader>> {
    let events: Vec<KvEvent> = items
        .into_iter()
        .flat_map(|item| match item {
            WatchItem::Changes { events, .. } => events,
            WatchItem::Progress { .. } => Vec::new(),
        })
        .collect();
    let count = events.len();
    events
        .into_iter()
        .enumerate()
        .filter_map(|(at, event)| match event.kind {
            EventKind::Put => Some(Some(Leader::from_key(event.kv))),
            EventKind::Delete if at + 1 == count => Some(None),
            EventKind::Delete => None,
        })
        .collect()
}

#[cfg(test)]
#[path = "observe_test.rs"]
mod tests;
