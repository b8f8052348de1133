//! The last entries appended, kept decoded: openraft reads an entry soon after `append` twice
//! or more (each follower's replication on a leader, the apply on every member), and each read
//! used to parse the entry's JSON row again (and, once durable, `pread` it first). Entries
//! read here are clones of the values `append` was given; a range that is not all here is read
//! from the log as before.
//!
//! ```text
//!  append(entries) ─▶ RecentEntries::appended (clones; the oldest beyond CAPACITY dropped)
//!  truncate_after(i) ─▶ forget_after(i)          purge(i) ─▶ forget_upto(i)
//!  entries(from..=last) ─▶ every index here: clones ─ else None: the tail and the file
//! ```
//!
//! Invariants (checked by [`RecentEntries::check`] in the tests):
//! 1. The indexes held are consecutive, and each entry is stored under its own index.
//! 2. At most [`CAPACITY`] entries.
//! 3. Every entry held is the one last appended at its index and not truncated or purged
//!    since: the log store forgets truncated and purged indexes before it submits the write,
//!    so no read after the call sees them here.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use super::types::Entry;

/// The most entries kept: at 1,000 entries a second, the last second. Replication and the
/// apply read an entry within milliseconds of its append; a follower catching up reads older
/// ones from the log.
pub(crate) const CAPACITY: usize = 1024;

/// The last appended entries, decoded, shared by every clone of the log store.
#[derive(Default)]
pub(crate) struct RecentEntries {
    /// Consecutive entries, the oldest first (invariant 1).
    entries: Mutex<VecDeque<Entry>>,
}

impl RecentEntries {
    fn held(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        // Every change leaves the deque whole, so a poisoned lock is used as is.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records entries just submitted for append. An entry that does not follow the last one
    /// held (the first append, or after a gap) starts the run afresh.
    pub(crate) fn appended(&self, appended: Vec<Entry>) {
        let mut entries = self.held();
        for entry in appended {
            let index = entry.log_id.index;
            // An append at an index already held follows a truncate that forgot it; anything
            // else breaks the run, which then starts again here.
            let follows = entries
                .back()
                .is_some_and(|last| last.log_id.index.checked_add(1) == Some(index));
            if !follows {
                entries.clear();
            }
            entries.push_back(entry);
            if entries.len() > CAPACITY {
                entries.pop_front();
            }
        }
    }

    /// Forgets the entries after `last` (every entry when `None`): a truncate.
    pub(crate) fn forget_after(&self, last: Option<u64>) {
        let mut entries = self.held();
        match last {
            None => entries.clear(),
            Some(last) => {
                while entries
                    .back()
                    .is_some_and(|entry| entry.log_id.index > last)
                {
                    entries.pop_back();
                }
            }
        }
    }

    /// Forgets the entries up to `upto`, inclusive: a purge.
    pub(crate) fn forget_upto(&self, upto: u64) {
        let mut entries = self.held();
        while entries
            .front()
            .is_some_and(|entry| entry.log_id.index <= upto)
        {
            entries.pop_front();
        }
    }

    /// Clones of the entries `from..=last`, if every one is held.
    pub(crate) fn get(&self, from: u64, last: u64) -> Option<Vec<Entry>> {
        if from > last {
            return None;
        }
        let entries = self.held();
        let first = entries.front()?.log_id.index;
        let start = usize::try_from(from.checked_sub(first)?).ok()?;
        let end = usize::try_from(last - first).ok()?;
        if end >= entries.len() {
            return None;
        }
        Some(entries.range(start..=end).cloned().collect())
    }

    /// Checks invariants 1 and 2.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let entries = self.held();
        assert!(entries.len() <= CAPACITY, "invariant 2: {}", entries.len());
        for pair in entries.iter().collect::<Vec<_>>().windows(2) {
            assert_eq!(
                pair[0].log_id.index + 1,
                pair[1].log_id.index,
                "invariant 1: consecutive"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::entry::RaftEntry;

    use super::{CAPACITY, RecentEntries};
    use crate::raft::types::{Entry, TypeConfig};

    fn entry(term: u64, index: u64) -> Entry {
        Entry::new_blank(openraft::testing::log_id::<TypeConfig>(term, 1, index))
    }

    fn indexes(entries: &[Entry]) -> Vec<(u64, u64)> {
        entries
            .iter()
            .map(|entry| (entry.log_id.leader_id.term, entry.log_id.index))
            .collect()
    }

    #[test]
    fn a_range_held_whole_is_read_back_and_one_partly_held_is_not() {
        let recent = RecentEntries::default();
        recent.appended(vec![entry(1, 5), entry(1, 6), entry(1, 7)]);
        recent.check();
        assert_eq!(
            indexes(&recent.get(5, 7).unwrap()),
            [(1, 5), (1, 6), (1, 7)]
        );
        assert_eq!(indexes(&recent.get(6, 6).unwrap()), [(1, 6)]);
        assert!(recent.get(4, 6).is_none(), "4 is not held");
        assert!(recent.get(6, 8).is_none(), "8 is not held");
        assert!(recent.get(7, 6).is_none(), "an empty range");
    }

    #[test]
    fn a_truncate_forgets_what_follows_and_a_new_term_takes_its_place() {
        let recent = RecentEntries::default();
        recent.appended(vec![entry(1, 1), entry(1, 2), entry(1, 3)]);
        recent.forget_after(Some(1));
        recent.appended(vec![entry(2, 2)]);
        recent.check();
        assert_eq!(indexes(&recent.get(1, 2).unwrap()), [(1, 1), (2, 2)]);
        assert!(recent.get(3, 3).is_none());
        recent.forget_after(None);
        assert!(recent.get(1, 1).is_none());
    }

    #[test]
    fn a_purge_forgets_up_to_its_index_and_a_gap_starts_afresh() {
        let recent = RecentEntries::default();
        recent.appended(vec![entry(1, 1), entry(1, 2), entry(1, 3)]);
        recent.forget_upto(2);
        assert!(recent.get(2, 3).is_none());
        assert_eq!(indexes(&recent.get(3, 3).unwrap()), [(1, 3)]);
        recent.appended(vec![entry(1, 10)]);
        recent.check();
        assert!(recent.get(3, 3).is_none(), "a gap drops the older run");
        assert_eq!(indexes(&recent.get(10, 10).unwrap()), [(1, 10)]);
    }

    #[test]
    fn at_most_capacity_entries_are_held() {
        let recent = RecentEntries::default();
        let many: Vec<Entry> = (1..=CAPACITY as u64 + 10)
            .map(|index| entry(1, index))
            .collect();
        recent.appended(many);
        recent.check();
        assert!(recent.get(10, 10).is_none(), "the oldest were dropped");
        let last = CAPACITY as u64 + 10;
        assert_eq!(recent.get(11, last).unwrap().len(), CAPACITY);
    }
}
