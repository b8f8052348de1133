//! The event history: every put and delete of the recent revisions, which a watch pages
//! through with a cursor its client holds.
//!
//! A watcher keeps only `after`, the last revision it has seen; any member holding the same
//! history answers the same page for it, so a cursor resumes on another member after a
//! failover. The history is bounded in events and bytes: past either bound the oldest whole
//! revisions are dropped and `compact_revision` moves up to the last dropped one. A watcher
//! whose cursor is below it has missed events and gets [`Compacted`]; it re-reads the keys and
//! resumes from the read's revision.
//!
//! Paging ([`History::page`], as `KeySpace::events_after`):
//! - The page holds the matching events with revision > `after`, in revision order, the
//!   events of one revision in the order they were made.
//! - A revision's matching events are never split across pages while they fit one answer:
//!   whole revisions are added while they fit in `max_events` and [`ANSWER_BYTES_MAX`]; the
//!   first one is added even when it alone has more than `max_events`.
//! - A revision whose matching events alone pass [`ANSWER_BYTES_MAX`] (a prefix delete of
//!   thousands of keys, a lease's keys ending) would never fit one MQTT packet, so it comes in
//!   fragments, its events in key order: each fragment has `next` = the revision less one and
//!   `next_key` = its last key, and the call with that cursor ([`Cursor::after_key`]) gets the
//!   rest of the revision, then the later ones as usual. Which events make a revision and
//!   their key order are the same on every member, so a fragment's cursor resumes anywhere.
//! - `next` is the cursor for the next call. When matching events remain (the page is full),
//!   `next` is the page's last revision and `progress` is `None`. When none remain, `progress`
//!   is `Some(revision)`, the key space's revision (or `after` if that is later): nothing else
//!   matched up to there, so `next` is `progress` and an idle watcher's cursor moves up with
//!   the writes it does not watch, and does not fall behind the compaction.
//! - `after < compact_revision` is [`Compacted`]. `after == compact_revision` is served: every
//!   event after it is kept.
//!
//! Invariants (checked by [`History::check_invariants`]):
//! 1. Events are in non-decreasing revision order, each after `compact_revision` and at most
//!    the key space's revision, and `compact_revision` is at most that revision.
//! 2. A put event's key has that revision as its `mod_revision`; a delete event carries the
//!    key as it was, so its `mod_revision` is earlier than the event's revision.
//! 3. `bytes` is the sum of the events' key and value lengths, and after every mutating call
//!    there are at most `history_events_max` events and `history_bytes_max` bytes.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use hivekeeper_protocol::kv::{ANSWER_BYTES_MAX, json_len};

use super::{EventKind, KeySelector, KvEvent, KvLimits, WatchPage};
use crate::InvariantViolation;

/// Bytes an event counts against `history_bytes_max`: its key and value.
fn event_bytes(event: &KvEvent) -> u64 {
    (event.kv.key.len() + event.kv.value.len()) as u64
}

/// A watch from before the history's window: the events right after its cursor are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("events up to revision {compact_revision} have been compacted")]
pub struct Compacted {
    /// Every event at or before this revision has been dropped; re-read and resume from the
    /// read's revision.
    pub compact_revision: u64,
}

/// Where a watch is: after revision `after`, and, when the previous answer was a fragment,
/// also after the events of revision `after + 1` up to `after_key` (in key order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor<'a> {
    /// Every matching event up to this revision was received.
    pub after: u64,
    /// The last key received of revision `after + 1`, sent in fragments.
    pub after_key: Option<&'a str>,
}

impl From<u64> for Cursor<'static> {
    /// After revision `after`, nothing received beyond it.
    fn from(after: u64) -> Self {
        Cursor {
            after,
            after_key: None,
        }
    }
}

/// The first fragment of revision `at`'s `matching` events, which pass
/// [`ANSWER_BYTES_MAX`] together: in key order, as many as fit (at least one), the cursor left
/// before the revision with the last key sent.
fn fragment(mut matching: Vec<&KvEvent>, at: u64) -> WatchPage {
    matching.sort_unstable_by(|a, b| a.kv.key.cmp(&b.kv.key));
    let mut bytes = 0;
    let mut events: Vec<KvEvent> = Vec::new();
    for event in matching {
        let size = json_len(event);
        if !events.is_empty() && bytes + size > ANSWER_BYTES_MAX {
            break;
        }
        bytes += size;
        events.push(event.clone());
    }
    let next_key = events.last().map(|event| event.kv.key.clone());
    WatchPage {
        events,
        next: at - 1,
        next_key,
        progress: None,
    }
}

/// The events of the recent revisions, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "HistoryData")]
pub struct History {
    /// Every event at or before this revision has been dropped.
    compact_revision: u64,
    /// The kept events, in revision order.
    events: VecDeque<KvEvent>,
    /// Bytes of the kept events' keys and values. Derived.
    #[serde(skip)]
    bytes: u64,
}

/// The serialized part of a [`History`].
#[derive(Deserialize)]
struct HistoryData {
    /// [`History::compact_revision`].
    compact_revision: u64,
    /// The events, from which the byte count is rebuilt.
    events: VecDeque<KvEvent>,
}

impl From<HistoryData> for History {
    fn from(data: HistoryData) -> Self {
        let bytes = data.events.iter().map(event_bytes).sum();
        History {
            compact_revision: data.compact_revision,
            events: data.events,
            bytes,
        }
    }
}

impl History {
    /// Every event at or before this revision has been dropped.
    pub fn compact_revision(&self) -> u64 {
        self.compact_revision
    }

    /// How many events are kept.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// The events from position `start` on (those the current call appended).
    pub fn since(&self, start: usize) -> Vec<KvEvent> {
        self.events.range(start..).cloned().collect()
    }

    /// Appends an event of the current call (trimmed when the call is accepted).
    pub fn push(&mut self, event: KvEvent) {
        self.bytes += event_bytes(&event);
        self.events.push_back(event);
    }

    /// Drops the events from position `len` on: a refused call's.
    pub fn truncate(&mut self, len: usize) {
        while self.events.len() > len {
            let event = self.events.pop_back().expect("longer than len");
            self.bytes -= event_bytes(&event);
        }
    }

    /// Drops the oldest whole revisions until the history is within its bounds. The newest
    /// revision goes too when it alone is over them: the bound is kept, and its watchers
    /// re-read.
    pub fn trim(&mut self, limits: &KvLimits) {
        while self.events.len() > limits.history_events_max as usize
            || self.bytes > limits.history_bytes_max
        {
            let oldest = self
                .events
                .front()
                .expect("over a bound, so not empty")
                .revision;
            while self
                .events
                .front()
                .is_some_and(|event| event.revision == oldest)
            {
                let event = self.events.pop_front().expect("front exists");
                self.bytes -= event_bytes(&event);
            }
            self.compact_revision = oldest;
        }
    }

    /// How many kept events have a revision above `after`.
    pub fn count_after(&self, after: u64) -> usize {
        self.events.len() - self.events.partition_point(|event| event.revision <= after)
    }

    /// Whether the history has the put of `key` at `revision`.
    pub fn has_put(&self, key: &str, revision: u64) -> bool {
        let start = self
            .events
            .partition_point(|event| event.revision < revision);
        self.events
            .range(start..)
            .take_while(|event| event.revision == revision)
            .any(|event| event.kind == EventKind::Put && event.kv.key == key)
    }

    /// One watch page (module doc); `revision` is the key space's.
    pub fn page(
        &self,
        cursor: Cursor<'_>,
        selector: &KeySelector,
        max_events: usize,
        revision: u64,
    ) -> Result<WatchPage, Compacted> {
        let Cursor { after, after_key } = cursor;
        if after < self.compact_revision {
            return Err(Compacted {
                compact_revision: self.compact_revision,
            });
        }
        let mut events: Vec<KvEvent> = Vec::new();
        let mut bytes = 0;
        let mut position = self.events.partition_point(|event| event.revision <= after);
        while let Some(first) = self.events.get(position) {
            let at = first.revision;
            let end = position
                + self
                    .events
                    .range(position..)
                    .take_while(|event| event.revision == at)
                    .count();
            let mut matching: Vec<&KvEvent> = self
                .events
                .range(position..end)
                .filter(|event| selector.matches(&event.kv.key))
                .collect();
            // The rest of a revision sent in fragments: its events in key order, after the
            // last key sent.
            if let Some(after_key) = after_key.filter(|_| at == after + 1) {
                matching.sort_unstable_by(|a, b| a.kv.key.cmp(&b.kv.key));
                matching.retain(|event| event.kv.key.as_str() > after_key);
            }
            if matching.is_empty() {
                position = end;
                continue;
            }
            let size: usize = matching.iter().map(json_len).sum();
            if events.len() + matching.len() <= max_events && bytes + size <= ANSWER_BYTES_MAX {
                events.extend(matching.into_iter().cloned());
                bytes += size;
                position = end;
                continue;
            }
            if events.is_empty() && size <= ANSWER_BYTES_MAX {
                // One revision past `max_events` alone still comes whole.
                events.extend(matching.into_iter().cloned());
                bytes += size;
                position = end;
                continue;
            }
            if events.is_empty() {
                return Ok(fragment(matching, at));
            }
            let next = events.last().expect("a full page has events").revision;
            return Ok(WatchPage {
                events,
                next,
                next_key: None,
                progress: None,
            });
        }
        let progress = revision.max(after);
        Ok(WatchPage {
            events,
            next: progress,
            next_key: None,
            progress: Some(progress),
        })
    }

    /// The invariants in the module doc, against the key space's revision and bounds.
    pub fn check_invariants(
        &self,
        revision: u64,
        limits: &KvLimits,
    ) -> Result<(), InvariantViolation> {
        if self.compact_revision > revision {
            return Err(violation!(
                "history invariant 1: compacted at {} past the revision {revision}",
                self.compact_revision
            ));
        }
        let mut previous = self.compact_revision + 1;
        for event in &self.events {
            if event.revision < previous || event.revision > revision {
                return Err(violation!(
                    "history invariant 1: event at {} after one at {previous}, compacted at {}, \
                     revision {revision}",
                    event.revision,
                    self.compact_revision
                ));
            }
            previous = event.revision;
            let carried = event.kv.mod_revision;
            let consistent = match event.kind {
                EventKind::Put => carried == event.revision,
                EventKind::Delete => carried < event.revision,
            };
            if !consistent {
                return Err(violation!(
                    "history invariant 2: {:?} of {:?} at {} carries mod_revision {carried}",
                    event.kind,
                    event.kv.key,
                    event.revision
                ));
            }
        }
        let bytes: u64 = self.events.iter().map(event_bytes).sum();
        if bytes != self.bytes {
            return Err(violation!(
                "history invariant 3: {bytes} bytes, counted {}",
                self.bytes
            ));
        }
        if self.events.len() > limits.history_events_max as usize
            || bytes > limits.history_bytes_max
        {
            return Err(violation!(
                "history invariant 3: {} events and {bytes} bytes, past the bounds",
                self.events.len()
            ));
        }
        Ok(())
    }
}
