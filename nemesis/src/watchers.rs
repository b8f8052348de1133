//! The watch workload: a couple of watchers follow the keys workload's prefix with raw
//! `watch.poll` requests (so each answer is recorded as it came, events and bookmark, before
//! any client-side filtering), and the streams are checked against the committed writes by
//! `hivekeeper-checker`'s etcd guarantees ([`check`]).
//!
//! ```text
//!  watcher i (homed on member i+1 mod N):
//!    kv.get {prefix} ─▶ revision R ─▶ stream after R:
//!    ┌▶ watch.poll {prefix, after: cursor, wait_ms: 1000} (the SDK's resends and failover)
//!    │   ├ answer    ─▶ one Batch (events, bookmark = max(next, progress)); cursor moves
//!    │   ├ no answer, unavailable, another refusal ─▶ 100 ms, the same cursor
//!    │   └ compacted ─▶ the stream ends; a fresh kv.get starts the next one
//!    └───┘                                                        records: Watcher
//!  check: the keys' acknowledged writes + the final read ─▶ Vec<Event> ─┐
//!         the watchers' streams ────────────────────────────────────────┴▶ watch::check
//! ```

use std::time::Duration;

use hivekeeper_agent::AgentError;
use hivekeeper_agent::protocol::Op;
use hivekeeper_agent::protocol::kv::{EventKind as WireKind, KvEvent, WatchPage};
use hivekeeper_checker::linearizability::{Input, Outcome, Reply};
use hivekeeper_checker::watch::{self, Batch, Event, EventKind, Selector, Stream, Watcher};

use crate::check::Verdict;
use crate::history::History;
use crate::workload::Context;

/// How long one poll waits for an event: short, so a watcher notices the run's end.
const POLL_WAIT_MS: u64 = 1_000;

/// Most events per answer: small, so a busy prefix takes several answers per burst.
const POLL_EVENTS_MAX: u32 = 20;

/// One watcher of `prefix` until the run ends, its streams recorded.
pub async fn watcher(ctx: Context, index: usize, prefix: String) {
    let id = format!("{}-watch{index}", ctx.run);
    let home = (index + 1) % ctx.brokers.len();
    let Some(agent) = ctx.connect(&id, home).await else {
        return;
    };
    let kv = agent.kv();
    let mut record = Watcher {
        id,
        selector: Selector::Prefix(prefix.clone()),
        streams: Vec::new(),
    };
    while !ctx.stopped() {
        let Ok(read) = kv.get_prefix(prefix.clone()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = Stream {
            after: read.revision,
            batches: Vec::new(),
            compacted: None,
        };
        let mut cursor = read.revision;
        while !ctx.stopped() {
            let op = Op::WatchPoll {
                key: None,
                prefix: Some(prefix.clone()),
                after: cursor,
                // The workload's revisions (a put, a delete or a one-put txn of four short
                // keys) always fit one answer, so no answer is a fragment to continue.
                after_key: None,
                max_events: Some(POLL_EVENTS_MAX),
                wait_ms: Some(POLL_WAIT_MS),
            };
            match agent.request_as::<WatchPage>(op).await {
                Ok(page) => {
                    cursor = advance(cursor, &page);
                    stream.batches.push(batch(&page));
                }
                Err(AgentError::Compacted { compact_revision }) => {
                    stream.compacted = Some(compact_revision);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        record.streams.push(stream);
    }
    ctx.recorder.with(|history| history.watchers.push(record));
}

/// The cursor after an answer, as the SDK moves it: to the answer's `next`, its bookmark or
/// its last event, whichever is highest, and never backwards.
fn advance(cursor: u64, page: &WatchPage) -> u64 {
    let last = page.events.last().map_or(0, |event| event.revision);
    cursor
        .max(page.next)
        .max(page.progress.unwrap_or(0))
        .max(last)
}

/// One answer as the checker reads it. Its bookmark is the highest of `next` and `progress`:
/// the client resumes from `next`, so the service promises nothing matching remains at or
/// below it.
fn batch(page: &WatchPage) -> Batch {
    Batch {
        events: page.events.iter().map(event).collect(),
        progress: Some(page.next.max(page.progress.unwrap_or(0))),
    }
}

/// A received event as the checker reads it: a delete carries no value (its `kv` is the key
/// as it was before).
fn event(received: &KvEvent) -> Event {
    let (kind, value) = match received.kind {
        WireKind::Put => (EventKind::Put, Some(received.kv.value.clone())),
        WireKind::Delete => (EventKind::Delete, None),
    };
    Event {
        revision: received.revision,
        kind,
        key: received.kv.key.clone(),
        value,
    }
}

/// The committed writes the run learnt of: every acknowledged put, successful compare-and-set
/// and delete that deleted, at the revision its reply gave, and every key of the final read at
/// its `mod_revision`. A write with no answer is not in it (the watchers' copies of it are
/// still compared with each other).
pub fn committed(history: &History) -> Vec<Event> {
    let mut events = Vec::new();
    for op in &history.key_ops {
        let Outcome::Ok(reply) = &op.op.outcome else {
            continue;
        };
        let write = match (&op.op.input, reply) {
            (Input::Put { key, value }, Reply::Put { revision })
            | (
                Input::CompareAndSet { key, value, .. },
                Reply::CompareAndSet {
                    succeeded: true,
                    revision,
                },
            ) => revision.map(|revision| (revision, EventKind::Put, key, Some(value.clone()))),
            (
                Input::Delete { key },
                Reply::Delete {
                    deleted: Some(true),
                    revision,
                },
            ) => revision.map(|revision| (revision, EventKind::Delete, key, None)),
            _ => None,
        };
        if let Some((revision, kind, key, value)) = write {
            events.push(Event {
                revision,
                kind,
                key: key.clone(),
                value,
            });
        }
    }
    if let Some(read) = &history.final_read {
        events.extend(read.kvs.iter().map(|kv| Event {
            revision: kv.mod_revision,
            kind: EventKind::Put,
            key: kv.key.clone(),
            value: Some(kv.value.clone()),
        }));
    }
    events
}

/// Checks every watcher's streams against the committed writes: each violation is an anomaly.
pub fn check(history: &History) -> Verdict {
    let events: u64 = history
        .watchers
        .iter()
        .flat_map(|watcher| &watcher.streams)
        .flat_map(|stream| &stream.batches)
        .map(|batch| batch.events.len() as u64)
        .sum();
    let mut verdict = Verdict {
        ops: events,
        ..Verdict::default()
    };
    match watch::check(&committed(history), &history.watchers) {
        Ok(violations) => {
            verdict.anomalies = violations.len() as u64;
            verdict
                .samples
                .extend(violations.iter().take(16).map(ToString::to_string));
            if violations.len() > 16 {
                verdict
                    .samples
                    .push(format!("... and {} more", violations.len() - 16));
            }
        }
        Err(error) => {
            verdict.anomalies += 1;
            verdict
                .samples
                .push(format!("the watch history is unreadable: {error}"));
        }
    }
    for watcher in &history.watchers {
        let compacted = watcher
            .streams
            .iter()
            .filter(|stream| stream.compacted.is_some())
            .count();
        verdict.notes.push(format!(
            "watcher {}: {} streams ({compacted} ended compacted), {} answers",
            watcher.id,
            watcher.streams.len(),
            watcher
                .streams
                .iter()
                .map(|stream| stream.batches.len())
                .sum::<usize>()
        ));
    }
    verdict
}

#[cfg(test)]
#[path = "watchers_test.rs"]
mod tests;
