//! [`Watch`]: a `Stream` of the changes to one key or a prefix, by long-polling `watch.poll`
//! with a cursor the client keeps.
//!
//! The service keeps no watcher: each poll names its cursor (`after`), and the answer says
//! where the next one starts (`next`). So the stream resumes wherever the request lands: after
//! a reconnect, on another broker, on another member (a member behind the cursor waits until
//! it has caught up). A change is never skipped or repeated, as long as the cursor only moves
//! to an answer's `next`.
//!
//! ```text
//!  cursor = after(rev)
//!  ┌▶ watch.poll {key|prefix, after: cursor, max_events, wait_ms} (Agent::call: same-id
//!  │   │                                 resends, backoff, failover, patience wait_ms + timeout)
//!  │   ├ events  ─▶ one WatchItem::Changes per revision ─▶ cursor = next
//!  │   ├ none    ─▶ WatchItem::Progress (a bookmark)     ─▶ cursor = next
//!  │   ├ unreachable, timeout, unavailable ─▶ backoff, same cursor (nothing yielded)
//!  │   └ compacted or another refusal ─▶ Err(..) yielded, then the stream ends
//!  └───┘
//! ```
//!
//! Events of one revision (a txn, the keys of an ended lease) come in one item. The service
//! splits a revision across answers only when its events alone pass one answer's bound
//! (`ANSWER_BYTES_MAX`, a prefix delete of thousands of keys): then each answer is a fragment
//! with `next_key`, the stream polls on from that key (`after_key`), and it yields the
//! revision in one item once the last fragment came.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use futures_util::stream::{self, BoxStream};
use hivekeeper_protocol::kv::{Delete, KeySelector, KvEvent, WATCH_WAIT_MS_DEFAULT, WatchPage};
use hivekeeper_protocol::{ErrorCode, Op};
use tracing::debug;

use crate::agent::Agent;
use crate::backoff::Backoff;
use crate::error::AgentError;
use crate::kv::Kv;

/// What a watch stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchItem {
    /// Every matching change of one revision, in the service's order.
    Changes {
        /// The revision of the changes.
        revision: u64,
        /// The changes: one for a put or a delete, several for a txn or an ended lease.
        events: Vec<KvEvent>,
    },
    /// A bookmark: nothing matching changed up to `revision`. The cursor is there now. One
    /// comes after each poll that waited `wait_ms` in vain, moved or not: the watch is alive.
    Progress {
        /// The revision up to which the watch has seen everything.
        revision: u64,
    },
}

impl WatchItem {
    /// The revision the watch has seen everything up to, after this item.
    pub fn revision(&self) -> u64 {
        match self {
            WatchItem::Changes { revision, .. } | WatchItem::Progress { revision } => *revision,
        }
    }
}

/// The changes to one key or a prefix, as a `Stream` of [`WatchItem`]s; see the module doc.
///
/// Built by [`Kv::watch`] (or [`Kv::watch_prefix`], [`Kv::watch_key`]), tuned before the
/// first poll with [`Watch::after`], [`Watch::max_events`] and [`Watch::wait_ms`]. Nothing is
/// sent until the stream is polled. Dropping it stops the polls.
///
/// ```no_run
/// # async fn follow(kv: hivekeeper_agent::Kv) -> Result<(), hivekeeper_agent::AgentError> {
/// use futures_util::StreamExt;
/// use hivekeeper_agent::WatchItem;
/// let read = kv.get_prefix("hive/config/").await?;
/// let mut watch = kv.watch_prefix("hive/config/").after(read.revision);
/// while let Some(item) = watch.next().await {
///     if let WatchItem::Changes { revision, events } = item? {
///         println!("revision {revision}: {} changes", events.len());
///     }
/// }
/// # Ok(()) }
/// ```
pub struct Watch {
    /// What to poll for; taken when the stream starts.
    setup: Option<Setup>,
    /// The cursor, shared with the running stream so [`Watch::cursor`] can read it.
    cursor: Arc<AtomicU64>,
    /// The running stream, from the first poll on.
    running: Option<BoxStream<'static, Result<WatchItem, AgentError>>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("setup", &self.setup)
            .field("cursor", &self.cursor())
            .finish_non_exhaustive()
    }
}

/// A watch's request, before it starts.
#[derive(Debug, Clone)]
struct Setup {
    /// The connection the polls go through.
    agent: Agent,
    /// The key or prefix watched.
    selector: KeySelector,
    /// `max_events`; absent: the service's default, 100.
    max_events: Option<u32>,
    /// `wait_ms`: how long one poll waits for an event.
    wait_ms: u64,
}

impl Kv {
    /// The changes to the keys `selector` names, from revision 0 (set a start with
    /// [`Watch::after`], usually the `revision` of a read).
    pub fn watch(&self, selector: KeySelector) -> Watch {
        Watch {
            setup: Some(Setup {
                agent: self.agent().clone(),
                selector,
                max_events: None,
                wait_ms: WATCH_WAIT_MS_DEFAULT,
            }),
            cursor: Arc::new(AtomicU64::new(0)),
            running: None,
        }
    }

    /// The changes to every key with `prefix`.
    pub fn watch_prefix(&self, prefix: impl Into<String>) -> Watch {
        self.watch(KeySelector::Prefix(prefix.into()))
    }

    /// The changes to `key`.
    pub fn watch_key(&self, key: impl Into<String>) -> Watch {
        self.watch(KeySelector::Key(key.into()))
    }
}

impl Watch {
    /// Only the changes after revision `revision` (a read's `revision`, or a cursor saved from
    /// [`Watch::cursor`]). Has no effect once the stream is polled.
    pub fn after(self, revision: u64) -> Watch {
        self.cursor.store(revision, Ordering::Release);
        self
    }

    /// Most events per poll, 1 to 1,000 (a revision's events come whole even past it).
    pub fn max_events(mut self, max_events: u32) -> Watch {
        if let Some(setup) = &mut self.setup {
            setup.max_events = Some(max_events);
        }
        self
    }

    /// How long one poll waits for a change before the service answers a bookmark, ms (0 to
    /// 60,000; by default 30,000).
    pub fn wait_ms(mut self, wait_ms: u64) -> Watch {
        if let Some(setup) = &mut self.setup {
            setup.wait_ms = wait_ms;
        }
        self
    }

    /// The cursor: every change up to it has been yielded. A watch started again
    /// `.after(cursor)` continues exactly where this one is.
    pub fn cursor(&self) -> u64 {
        self.cursor.load(Ordering::Acquire)
    }

    /// The stream of the events one by one (bookmarks left out).
    pub fn events(self) -> impl Stream<Item = Result<KvEvent, AgentError>> + Send + Unpin {
        use futures_util::StreamExt;
        self.flat_map(|item| {
            let events: Vec<Result<KvEvent, AgentError>> = match item {
                Ok(WatchItem::Changes { events, .. }) => events.into_iter().map(Ok).collect(),
                Ok(WatchItem::Progress { .. }) => Vec::new(),
                Err(e) => vec![Err(e)],
            };
            stream::iter(events)
        })
    }
}

impl Watch {
    /// The watch as a stream of whole answers (each answer's items together, so a consumer can
    /// tell what one answer showed at once), for the recipes built on a watch. The cursor is
    /// not shared: [`Watch::cursor`] stays where the watch started.
    pub(crate) fn answers(
        mut self,
    ) -> Option<impl Stream<Item = Result<Vec<WatchItem>, AgentError>> + Send + 'static> {
        let setup = self.setup.take()?;
        let backoff = setup.backoff();
        Some(answers(AgentSource(setup), self.cursor(), backoff))
    }
}

impl Setup {
    /// The backoff between failed polls, from the agent's configuration.
    fn backoff(&self) -> Backoff {
        let config = self.agent.config();
        Backoff::new(
            Duration::from_millis(config.backoff_first_ms),
            Duration::from_millis(config.backoff_cap_ms),
        )
    }
}

impl Stream for Watch {
    type Item = Result<WatchItem, AgentError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.running.is_none() {
            let Some(setup) = self.setup.take() else {
                return Poll::Ready(None);
            };
            let backoff = setup.backoff();
            let source = AgentSource(setup);
            let running = run(source, Arc::clone(&self.cursor), backoff);
            self.running = Some(Box::pin(running));
        }
        let running = self.running.as_mut().expect("started just above");
        running.as_mut().poll_next(cx)
    }
}

/// Where a watch's pages come from: the service, or a unit test's script.
pub(crate) trait Source: Send + 'static {
    /// One `watch.poll` after `after` (and, within a revision sent in fragments, after
    /// `after_key`).
    fn poll(
        &mut self,
        after: u64,
        after_key: Option<String>,
    ) -> impl Future<Output = Result<WatchPage, AgentError>> + Send;
}

/// The service, through the agent's request loop.
struct AgentSource(Setup);

impl Source for AgentSource {
    async fn poll(
        &mut self,
        after: u64,
        after_key: Option<String>,
    ) -> Result<WatchPage, AgentError> {
        let Setup {
            agent,
            selector,
            max_events,
            wait_ms,
        } = &self.0;
        let Delete { key, prefix } = selector.clone().into();
        let op = Op::WatchPoll {
            key,
            prefix,
            after,
            after_key,
            max_events: *max_events,
            wait_ms: Some(*wait_ms),
        };
        AgentError::check_locally(&op)?;
        // Patient for `wait_ms` plus the usual timeouts (`Agent::request`).
        let success = agent.request(op).await?;
        Ok(WatchPage::try_from(success)?)
    }
}

/// Whether a failed poll is worth repeating from the same cursor: the connection or the
/// service's availability, not the request.
pub(crate) fn transient(error: &AgentError) -> bool {
    match error {
        AgentError::Disconnected | AgentError::Timeout { .. } => true,
        AgentError::Service { code, .. } => matches!(code, ErrorCode::Unavailable),
        _ => false,
    }
}

/// What the stream's loop carries from one answer to the next.
struct Run<S> {
    source: S,
    cursor: Cursor,
    backoff: Backoff,
    /// Set after a final error: the next poll of the stream ends it.
    ended: bool,
}

/// The polling loop as a stream of answers: the items of each answer that has any, together,
/// from the cursor `after`.
pub(crate) fn answers<S: Source>(
    source: S,
    after: u64,
    backoff: Backoff,
) -> impl Stream<Item = Result<Vec<WatchItem>, AgentError>> + Send + 'static {
    let run = Run {
        source,
        cursor: Cursor::new(after),
        backoff,
        ended: false,
    };
    stream::unfold(run, |mut run| async move {
        loop {
            if run.ended {
                return None;
            }
            let after_key = run.cursor.after_key.clone();
            match run.source.poll(run.cursor.after, after_key).await {
                Ok(page) => {
                    run.backoff.reset();
                    let items = run.cursor.absorb(page);
                    if !items.is_empty() {
                        return Some((Ok(items), run));
                    }
                }
                Err(error) if transient(&error) => {
                    let delay = run.backoff.next_delay();
                    debug!(%error, after = run.cursor.after, "watch.poll failed; again after {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                Err(error) => {
                    run.ended = true;
                    return Some((Err(error), run));
                }
            }
        }
    })
}

/// The polling loop as a stream of items, one answer's items after the other; `shared` is
/// the cursor to start from, moved as each item is handed out, so a watch restarted from it
/// repeats nothing the consumer has already seen.
pub(crate) fn run<S: Source>(
    source: S,
    shared: Arc<AtomicU64>,
    backoff: Backoff,
) -> impl Stream<Item = Result<WatchItem, AgentError>> + Send + 'static {
    use futures_util::StreamExt;
    let after = shared.load(Ordering::Acquire);
    answers(source, after, backoff)
        .flat_map(|answer| {
            let items: Vec<Result<WatchItem, AgentError>> = match answer {
                Ok(items) => items.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error)],
            };
            stream::iter(items)
        })
        .inspect(move |item| {
            if let Ok(item) = item {
                shared.fetch_max(item.revision(), Ordering::AcqRel);
            }
        })
}

/// The client-held cursor and the rules that move it. Pure: no I/O, so the rules are tested
/// alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// The `after` of the next poll: every event up to it has been taken.
    pub after: u64,
    /// While a revision comes in fragments: the last key received of revision `after + 1`,
    /// the next poll's `after_key`.
    pub after_key: Option<String>,
    /// The fragments of revision `after + 1` received so far, yielded with its last one.
    fragments: Vec<KvEvent>,
}

impl Cursor {
    pub fn new(after: u64) -> Cursor {
        Cursor {
            after,
            after_key: None,
            fragments: Vec::new(),
        }
    }

    /// Takes one answer: its events grouped by revision (any at or below the cursor dropped,
    /// so nothing is ever repeated), or its bookmark when it has none; the cursor moves to
    /// `next` and never backwards. A fragment (`next_key`) is kept until the answer that
    /// ends its revision, which yields the whole revision in one item.
    pub fn absorb(&mut self, page: WatchPage) -> Vec<WatchItem> {
        let WatchPage {
            events,
            next,
            next_key,
            progress,
        } = page;
        if let Some(next_key) = next_key {
            let within = |event: &KvEvent| {
                event.revision == next + 1
                    && self
                        .after_key
                        .as_ref()
                        .is_none_or(|after_key| event.kv.key > *after_key)
            };
            let fresh: Vec<KvEvent> = events.into_iter().filter(within).collect();
            if next >= self.after {
                self.fragments.extend(fresh);
                self.after = next;
                self.after_key = Some(next_key);
            }
            return Vec::new();
        }
        self.after_key = None;
        let events = std::mem::take(&mut self.fragments)
            .into_iter()
            .chain(events);
        let mut items: Vec<WatchItem> = Vec::new();
        for event in events {
            if event.revision <= self.after {
                continue;
            }
            match items.last_mut() {
                Some(WatchItem::Changes { revision, events }) if *revision == event.revision => {
                    events.push(event);
                }
                _ => items.push(WatchItem::Changes {
                    revision: event.revision,
                    events: vec![event],
                }),
            }
        }
        let last = items.last().map_or(self.after, WatchItem::revision);
        self.after = self.after.max(next).max(progress.unwrap_or(0)).max(last);
        // Every bookmark is handed on, moved or not: it also tells an idle consumer that the
        // watch is alive and current up to now.
        if items.is_empty() && progress.is_some() {
            items.push(WatchItem::Progress {
                revision: self.after,
            });
        }
        items
    }
}

#[cfg(test)]
#[path = "watch_test.rs"]
mod tests;
