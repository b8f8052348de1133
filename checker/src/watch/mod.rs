//! etcd's watch guarantees, checked against the history of committed writes.
//!
//! ```text
//!  history: &[Event] --index by revision and (revision, key)--+
//!                                                             v
//!  watchers: &[Watcher] -> each stream, answer by answer --> Vec<Violation>
//!            (ordered, unique, atomic, bookmarkable, resumable, consistent as it goes;
//!             reliable and the rest of atomic once the stream's covered range is known)
//! ```
//!
//! The history need not be complete: it is what the workload learned from successful replies
//! and a final read. A write missing from it cannot be found missing from a watcher, and an
//! event for a write missing from it is checked only against other watchers' copies.

mod history;
mod stream;
mod violation;

use std::collections::{BTreeMap, HashMap, HashSet};

pub use history::{Batch, Event, EventKind, Selector, Stream, WatchInputError, Watcher};
pub use violation::{Rule, Violation, ViolationKind};

/// The committed writes, indexed for the checks.
pub(crate) struct HistoryIndex<'h> {
    /// The writes of each revision.
    by_revision: BTreeMap<u64, Vec<&'h Event>>,
    /// The write of each key at each revision.
    by_change: HashMap<(u64, &'h str), &'h Event>,
}

impl<'h> HistoryIndex<'h> {
    fn new(history: &'h [Event]) -> Result<Self, WatchInputError> {
        let mut by_revision: BTreeMap<u64, Vec<&'h Event>> = BTreeMap::new();
        let mut by_change: HashMap<(u64, &'h str), &'h Event> = HashMap::new();
        for event in history {
            match by_change.get(&(event.revision, event.key.as_str())) {
                Some(known) if *known == event => continue,
                Some(_) => {
                    return Err(WatchInputError::ConflictingHistory {
                        revision: event.revision,
                        key: event.key.clone(),
                    });
                }
                None => {}
            }
            by_change.insert((event.revision, event.key.as_str()), event);
            by_revision.entry(event.revision).or_default().push(event);
        }
        Ok(HistoryIndex {
            by_revision,
            by_change,
        })
    }

    /// The write of `key` at `revision`, if the history knows it.
    fn change(&self, revision: u64, key: &str) -> Option<&'h Event> {
        self.by_change.get(&(revision, key)).copied()
    }

    /// The writes with a revision in `(after, to]` whose key `selector` matches, by revision.
    fn matching(
        &self,
        selector: &Selector,
        after: u64,
        to: u64,
    ) -> impl Iterator<Item = &'h Event> + '_ {
        let range = if after < to {
            self.by_revision.range(after + 1..=to)
        } else {
            self.by_revision.range(1..1)
        };
        let selector = selector.clone();
        range
            .flat_map(|(_, events)| events.iter().copied())
            .filter(move |event| selector.matches(&event.key))
    }
}

/// The first copy of each change any watcher received, to compare the others with.
pub(crate) type Copies = HashMap<(u64, String), (String, Event)>;

/// Checks every watcher's streams against `history` and each other; returns every violation
/// found, watcher by watcher in the order given, each in the order it was met.
pub fn check(history: &[Event], watchers: &[Watcher]) -> Result<Vec<Violation>, WatchInputError> {
    let index = HistoryIndex::new(history)?;
    let mut names = HashSet::new();
    for watcher in watchers {
        if !names.insert(watcher.id.as_str()) {
            return Err(WatchInputError::DuplicateWatcher {
                id: watcher.id.clone(),
            });
        }
    }
    let mut copies = Copies::new();
    let mut violations = Vec::new();
    for watcher in watchers {
        stream::check_watcher(&index, &mut copies, watcher, &mut violations);
    }
    Ok(violations)
}
