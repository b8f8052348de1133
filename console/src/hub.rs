//! The hub: one reader per (account, view) however many pages show it, pushing what it read to
//! each page as a server-sent event.
//!
//! ```text
//!  page ─ GET /api/v1/events?view=… ─▶ Hub::subscribe(account, view)
//!        first subscriber of a topic ─▶ a topic task:
//!          read the view ─▶ changed? ─▶ watch::Sender (the latest event, for every page)
//!          wait: the backend's change tick │ the timer (views that change unapplied) │ nobody left
//!          then at least COALESCE since the last read: ten changes in 100 ms make one read
//!        each page ─▶ a forwarding task: every new event, and a comment every KEEPALIVE
//! ```
//!
//! So twenty consoles on one member cost the cluster what one watcher costs: one read per
//! topic per [`COALESCE`] at most, and nothing while nothing changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::api::{self, Reader, RequestIds, View};
use crate::backend::ConsoleBackend;

/// The shortest time between two reads of one topic.
pub const COALESCE: Duration = Duration::from_millis(100);

/// How often a view that changes without an applied entry (the cluster) is read again.
pub const UNAPPLIED_REFRESH: Duration = Duration::from_millis(500);

/// How often an idle stream carries a comment, so proxies keep it and a gone page is noticed.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Events queued for one page before its forwarding task waits for it.
const PAGE_QUEUE: usize = 4;

/// Who reads and what: the topic of one reader.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Topic {
    account: String,
    view: View,
}

/// The hub of one console.
pub(crate) struct Hub<B> {
    backend: Arc<B>,
    ids: Arc<RequestIds>,
    topics: Mutex<HashMap<Topic, watch::Sender<Bytes>>>,
    /// Reads done, for the tests and the measurements.
    reads: AtomicU64,
}

impl<B: ConsoleBackend> Hub<B> {
    pub(crate) fn new(backend: Arc<B>, ids: Arc<RequestIds>) -> Hub<B> {
        Hub {
            backend,
            ids,
            topics: Mutex::default(),
            reads: AtomicU64::new(0),
        }
    }

    /// Reads done by the topic tasks so far.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// A stream of `view`'s events as `account` reads it: the current one first. It ends when
    /// `live` turns false (the page's session ended), checked before every event it sends.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        account: &str,
        view: View,
        live: Box<dyn Fn() -> bool + Send>,
    ) -> mpsc::Receiver<Bytes> {
        let topic = Topic {
            account: account.to_string(),
            view,
        };
        let mut latest = {
            let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
            match topics.get(&topic) {
                Some(sender) => sender.subscribe(),
                None => {
                    let (sender, receiver) = watch::channel(Bytes::new());
                    topics.insert(topic.clone(), sender.clone());
                    tokio::spawn(Arc::clone(self).run(topic, sender));
                    receiver
                }
            }
        };
        let (page, events) = mpsc::channel(PAGE_QUEUE);
        tokio::spawn(async move {
            latest.mark_changed();
            loop {
                tokio::select! {
                    changed = latest.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let event = latest.borrow_and_update().clone();
                        if !live() || (!event.is_empty() && page.send(event).await.is_err()) {
                            return;
                        }
                    }
                    () = tokio::time::sleep(KEEPALIVE) => {
                        let keepalive = Bytes::from_static(b": keepalive\n\n");
                        if !live() || page.send(keepalive).await.is_err() {
                            return;
                        }
                    }
                    () = page.closed() => return,
                }
            }
        });
        events
    }

    /// A topic's reader, until no page shows it.
    async fn run(self: Arc<Self>, topic: Topic, sender: watch::Sender<Bytes>) {
        let mut changes = self.backend.changes();
        let name = event_name(&topic.view);
        loop {
            let started = Instant::now();
            changes.mark_unchanged();
            let reader = Reader {
                backend: &*self.backend,
                account: &topic.account,
                ids: &self.ids,
            };
            let event = match api::read(&reader, &topic.view).await {
                Ok(value) => format_event(name, &value),
                // Not `error`: EventSource's own connection errors have that name.
                Err(error) => format_event(
                    "refused",
                    &serde_json::json!({"code": error.code, "message": error.message}),
                ),
            };
            self.reads.fetch_add(1, Ordering::Relaxed);
            sender.send_if_modified(|latest| {
                let modified = *latest != event;
                *latest = event;
                modified
            });
            let refresh = topic.view.changes_unapplied();
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = tokio::time::sleep(UNAPPLIED_REFRESH), if refresh => {}
                () = sender.closed() => {
                    let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
                    // A page may have subscribed since: then read on for it.
                    if sender.receiver_count() == 0 {
                        topics.remove(&topic);
                        return;
                    }
                }
            }
            tokio::time::sleep_until(started + COALESCE).await;
        }
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&topic);
    }
}

/// The SSE event name of a view's events: the API path's last part.
fn event_name(view: &View) -> &'static str {
    match view {
        View::Cluster => "cluster",
        View::Resources(_) => "resources",
        View::Leases { .. } => "leases",
        View::Keys { .. } => "keys",
        View::Accounts { .. } => "accounts",
    }
}

/// One server-sent event: JSON has no raw newline, so it is one `data:` line.
fn format_event(name: &str, value: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}
