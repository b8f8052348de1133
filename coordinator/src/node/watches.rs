//! `watch.poll`: the pending polls on this member ([`Watches`]), what wakes them, and the poll
//! itself ([`poll`]).
//!
//! A poll is answered from this member's own replica (any member serves one; nothing is
//! forwarded). When the replica has no event after the poll's cursor, the poll waits here until
//! an applied entry changes a key it selects, the replica is replaced by a snapshot, or its
//! `wait_ms` ends. The hub keeps no state for a watcher beyond its one pending poll: the cursor
//! is the client's.
//!
//! ```text
//!  watch.poll ─▶ register (interest: selector, after) ─▶ read the replica's page
//!     ├─ events, or compacted ─▶ answer now (the registration is dropped)
//!     └─ none ─▶ wait: woken ─▶ read again │ wait_ms over ─▶ answer { events: [], progress }
//!  FanOut::applied: the key space moved ─▶ Watches::changed(new events) ─▶ wake the matches
//!  FanOut::snapshot_installed, or events dropped before they were seen ─▶ Watches::wake_all
//! ```
//!
//! The registration comes before the read, so an entry applied between the two still wakes
//! the poll: a change is never missed for want of a waiter.
//!
//! Invariants:
//! 1. Every registered poll is counted once in its agent's count, and an agent's count is at
//!    most [`POLLS_PER_AGENT_MAX`]; a dropped registration leaves no trace.
//! 2. A wake removes the poll's waker: a poll is woken at most once per registration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_protocol::kv::{
    WATCH_EVENTS_DEFAULT, WATCH_POLLS_PER_AGENT_MAX as POLLS_PER_AGENT_MAX, WATCH_WAIT_MS_DEFAULT,
};
use hivekeeper_protocol::{ErrorCode, KeySelector, KvEvent};
use tokio::sync::oneshot;

use super::NodeError;
use super::metrics::NodeMetrics;
use crate::answer::Answer;
use crate::raft::RaftHandle;
use crate::state_machine::{Cursor, Reply};

/// The pending polls of a member.
#[derive(Default)]
pub(crate) struct Watches {
    state: Mutex<HubState>,
    /// Counts the entries applied (and snapshots installed) here: what the console's hub waits
    /// on to read its views again.
    applied: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct HubState {
    next_id: u64,
    polls: HashMap<u64, Waiting>,
    per_agent: HashMap<Arc<str>, usize>,
}

struct Waiting {
    agent: Arc<str>,
    selector: KeySelector,
    after: u64,
    wake: Option<oneshot::Sender<()>>,
}

/// An agent already has [`POLLS_PER_AGENT_MAX`] polls pending here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agent {agent} already has {max} watch polls pending on this member")]
pub(crate) struct TooManyPolls {
    pub agent: String,
    pub max: usize,
}

/// One registered poll: woken by a matching change, unregistered when dropped.
pub(crate) struct Registration {
    watches: Arc<Watches>,
    id: u64,
    woken: oneshot::Receiver<()>,
}

impl Watches {
    /// An entry was applied, or a snapshot installed: tells [`Watches::applied_ticks`]'s readers.
    pub(crate) fn tick_applied(&self) {
        self.applied
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A receiver of the applied ticks.
    pub(crate) fn applied_ticks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Registers interest in changes of `selector` after revision `after`.
    pub(crate) fn register(
        self: &Arc<Self>,
        agent: &str,
        selector: KeySelector,
        after: u64,
    ) -> Result<Registration, TooManyPolls> {
        let mut state = self.lock();
        let count = state.per_agent.get(agent).copied().unwrap_or(0);
        if count >= POLLS_PER_AGENT_MAX {
            return Err(TooManyPolls {
                agent: agent.to_string(),
                max: POLLS_PER_AGENT_MAX,
            });
        }
        let agent: Arc<str> = Arc::from(agent);
        *state.per_agent.entry(agent.clone()).or_default() += 1;
        let (wake, woken) = oneshot::channel();
        state.next_id += 1;
        let id = state.next_id;
        state.polls.insert(
            id,
            Waiting {
                agent,
                selector,
                after,
                wake: Some(wake),
            },
        );
        NodeMetrics::watch_polls_pending(state.polls.len());
        Ok(Registration {
            watches: self.clone(),
            id,
            woken,
        })
    }

    /// Applied entries made `events`: wakes every poll that selects one of their keys at a
    /// revision after its cursor.
    pub(crate) fn changed(&self, events: &[KvEvent]) {
        let mut state = self.lock();
        for waiting in state.polls.values_mut() {
            let matches = events.iter().any(|event| {
                event.revision > waiting.after && waiting.selector.matches(&event.kv.key)
            });
            if matches && let Some(wake) = waiting.wake.take() {
                let _ = wake.send(());
            }
        }
    }

    /// The replica was replaced (a snapshot installed): every poll reads again.
    pub(crate) fn wake_all(&self) {
        let mut state = self.lock();
        for waiting in state.polls.values_mut() {
            if let Some(wake) = waiting.wake.take() {
                let _ = wake.send(());
            }
        }
    }

    /// How many polls are pending.
    pub(crate) fn pending(&self) -> usize {
        self.lock().polls.len()
    }

    fn unregister(&self, id: u64) {
        let mut state = self.lock();
        let Some(waiting) = state.polls.remove(&id) else {
            return;
        };
        NodeMetrics::watch_polls_pending(state.polls.len());
        if let Some(count) = state.per_agent.get_mut(&waiting.agent) {
            *count -= 1;
            if *count == 0 {
                state.per_agent.remove(&waiting.agent);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Registration {
    /// Waits until a matching change (or a snapshot) wakes this poll.
    pub(crate) async fn woken(&mut self) {
        let _ = (&mut self.woken).await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.watches.unregister(self.id);
    }
}

/// A `watch.poll` as the node serves it: its fields, checked by the wire decoder.
pub(crate) struct PollRequest {
    /// The key or prefix watched.
    pub selector: KeySelector,
    /// The cursor: only events above it.
    pub after: u64,
    /// With a fragment's cursor: the last key received of revision `after + 1`.
    pub after_key: Option<String>,
    /// Most events in the answer (one revision's events come whole).
    pub max_events: Option<u32>,
    /// How long to wait for an event.
    pub wait_ms: Option<u64>,
}

/// Serves one poll from this member's replica: its events after the cursor at once, else the
/// first that comes within `wait_ms`, else none with the replica's revision as `progress`.
pub(crate) async fn poll(
    raft: &RaftHandle,
    watches: &Arc<Watches>,
    agent: &str,
    request: PollRequest,
) -> Result<Answer, NodeError> {
    let max_events = request.max_events.unwrap_or(WATCH_EVENTS_DEFAULT) as usize;
    let wait = Duration::from_millis(request.wait_ms.unwrap_or(WATCH_WAIT_MS_DEFAULT));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Registered before the read: an entry applied in between still wakes this poll.
        let mut registration =
            match watches.register(agent, request.selector.clone(), request.after) {
                Ok(registration) => registration,
                Err(too_many) => {
                    let refusal =
                        Reply::refused(ErrorCode::ResourceExhausted, too_many.to_string());
                    return Ok(refusal.into());
                }
            };
        let cursor = Cursor {
            after: request.after,
            after_key: request.after_key.as_deref(),
        };
        let page = raft.query(|sm| sm.watch(cursor, &request.selector, max_events))?;
        let page = match page {
            Err(compacted) => {
                return Ok(Answer::Compacted {
                    compact_revision: compacted.compact_revision,
                });
            }
            Ok(page) if !page.events.is_empty() || wait.is_zero() => {
                return Ok(Answer::Watch(page));
            }
            Ok(page) => page,
        };
        tokio::select! {
            () = registration.woken() => continue,
            () = tokio::time::sleep_until(deadline) => return Ok(Answer::Watch(page)),
        }
    }
}
