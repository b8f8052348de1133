//! The walk of one watcher's streams, answer by answer.
//!
//! Invariants of a `Walk` after each answer:
//! 1. `last_revision` is the highest event revision received in the stream (or its `after`).
//! 2. `bookmark` is the highest bookmark received in the stream, if any.
//! 3. Every change received by the watcher, in any stream, is in `received`, with where it
//!    first came.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::history::{Event, Stream, Watcher};
use super::violation::{Violation, ViolationKind};
use super::{Copies, HistoryIndex};

/// Where a change first came: (stream, answer).
type Origin = (usize, usize);

/// The state of the walk through a watcher's streams.
struct Walk<'w> {
    /// The watcher walked.
    watcher: &'w Watcher,
    /// The changes received across all streams, with where each first came: uniqueness holds
    /// for the watcher, not per stream.
    received: HashMap<(u64, &'w str), Origin>,
    /// The stream's index.
    stream: usize,
    /// The stream walked.
    current: &'w Stream,
    /// The highest event revision so far, starting at the stream's cursor.
    last_revision: u64,
    /// The highest bookmark so far.
    bookmark: Option<u64>,
    /// The answer that first carried each revision, to find a revision split across two.
    revision_batch: HashMap<u64, usize>,
    /// The keys received at each revision in this stream.
    delivered: BTreeMap<u64, HashSet<&'w str>>,
}

/// Checks every stream of `watcher`, appending to `violations`.
pub(crate) fn check_watcher(
    index: &HistoryIndex<'_>,
    copies: &mut Copies,
    watcher: &Watcher,
    violations: &mut Vec<Violation>,
) {
    let mut received = HashMap::new();
    for (stream_index, stream) in watcher.streams.iter().enumerate() {
        let mut walk = Walk {
            watcher,
            received,
            stream: stream_index,
            current: stream,
            last_revision: stream.after,
            bookmark: None,
            revision_batch: HashMap::new(),
            delivered: BTreeMap::new(),
        };
        for (batch_index, batch) in stream.batches.iter().enumerate() {
            for event in &batch.events {
                let found = walk.event(index, copies, batch_index, event);
                violations.extend(found.into_iter().map(|kind| {
                    walk.violation(Some(batch_index), event.revision, Some(&event.key), kind)
                }));
            }
            if let Some(progress) = batch.progress {
                walk.progress(batch_index, progress, violations);
            }
        }
        walk.finish(index, violations);
        received = walk.received;
    }
}

impl<'w> Walk<'w> {
    fn violation(
        &self,
        batch: Option<usize>,
        revision: u64,
        key: Option<&str>,
        kind: ViolationKind,
    ) -> Violation {
        Violation {
            watcher: self.watcher.id.clone(),
            stream: self.stream,
            batch,
            revision,
            key: key.map(str::to_owned),
            kind,
        }
    }

    /// Checks one received event: ordered, unique, atomic (split), bookmarkable, resumable and
    /// consistent. Returns what it broke.
    fn event(
        &mut self,
        index: &HistoryIndex<'_>,
        copies: &mut Copies,
        batch: usize,
        event: &'w Event,
    ) -> Vec<ViolationKind> {
        let revision = event.revision;
        let key = event.key.as_str();
        let after = self.current.after;
        let mut found = Vec::new();
        let mut report = |kind| found.push(kind);
        if !self.watcher.selector.matches(key) {
            report(ViolationKind::Unselected {
                selector: self.watcher.selector.clone(),
            });
        }
        if revision <= after {
            report(ViolationKind::AtOrBeforeCursor { after });
        } else if let Some(bookmark) = self.bookmark.filter(|&bookmark| revision <= bookmark) {
            report(ViolationKind::EventBehindBookmark { bookmark });
        }
        if revision < self.last_revision && revision > after {
            report(ViolationKind::OutOfOrder {
                previous: self.last_revision,
            });
        }
        match self.received.get(&(revision, key)) {
            Some(&(first_stream, first_batch)) => report(ViolationKind::Duplicate {
                first_stream,
                first_batch,
            }),
            None => {
                self.received.insert((revision, key), (self.stream, batch));
            }
        }
        let first_batch = *self.revision_batch.entry(revision).or_insert(batch);
        if first_batch != batch {
            report(ViolationKind::SplitRevision { first_batch });
        }
        if let Some(written) = index
            .change(revision, key)
            .filter(|written| !same(written, event))
        {
            report(ViolationKind::DiffersFromHistory {
                written: written.clone(),
                received: event.clone(),
            });
        }
        match copies.get(&(revision, key.to_owned())) {
            Some((other, theirs)) if !same(theirs, event) => {
                report(ViolationKind::DiffersFromWatcher {
                    other: other.clone(),
                    theirs: theirs.clone(),
                    ours: event.clone(),
                });
            }
            Some(_) => {}
            None => {
                copies.insert(
                    (revision, key.to_owned()),
                    (self.watcher.id.clone(), event.clone()),
                );
            }
        }
        self.last_revision = self.last_revision.max(revision);
        self.delivered.entry(revision).or_default().insert(key);
        found
    }

    /// Checks a bookmark: it must not be below the cursor already reached.
    fn progress(&mut self, batch: usize, progress: u64, violations: &mut Vec<Violation>) {
        let previous = self.last_revision.max(self.bookmark.unwrap_or(0));
        if progress < previous {
            violations.push(self.violation(
                Some(batch),
                progress,
                None,
                ViolationKind::BookmarkBackwards { previous },
            ));
        }
        self.bookmark = Some(self.bookmark.unwrap_or(0).max(progress));
    }

    /// Once the stream is over: every matching write up to the cursor it reached arrived
    /// (reliable, or atomic when others of its revision did), and a compacted answer came only
    /// for a cursor below the compacted revision.
    fn finish(&self, index: &HistoryIndex<'_>, violations: &mut Vec<Violation>) {
        let stream = self.current;
        let covered = self.last_revision.max(self.bookmark.unwrap_or(0));
        for written in index.matching(&self.watcher.selector, stream.after, covered) {
            let keys = self.delivered.get(&written.revision);
            if keys.is_some_and(|keys| keys.contains(written.key.as_str())) {
                continue;
            }
            let kind = if keys.is_some() {
                ViolationKind::PartialRevision
            } else {
                ViolationKind::Missed { covered }
            };
            violations.push(self.violation(None, written.revision, Some(&written.key), kind));
        }
        if let Some(compact_revision) = stream.compacted
            && compact_revision <= covered
        {
            violations.push(self.violation(
                None,
                compact_revision,
                None,
                ViolationKind::SpuriousCompaction { cursor: covered },
            ));
        }
    }
}

/// Whether two copies of a change agree; a put whose value was not recorded agrees with any.
fn same(a: &Event, b: &Event) -> bool {
    a.kind == b.kind
        && a.key == b.key
        && a.revision == b.revision
        && (a.value.is_none() || b.value.is_none() || a.value == b.value)
}
