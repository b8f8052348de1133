//! What the watch checker reports: which watcher broke which guarantee, where.

use std::fmt;

use super::history::{Event, Selector};

/// The guarantees, named as etcd's watch documentation names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Events arrive in revision order.
    Ordered,
    /// No event reaches a watcher twice.
    Unique,
    /// No matching event of the history is skipped.
    Reliable,
    /// A revision's matching events arrive together, in one answer.
    Atomic,
    /// A bookmark never goes back, and nothing at or below it arrives after it.
    Bookmarkable,
    /// Resuming from a cursor yields only what follows it, and a compacted answer only when
    /// the cursor is below the compacted revision.
    Resumable,
    /// An event is what was written: it matches the selector, the history and every other
    /// watcher's copy.
    Consistent,
}

/// One broken guarantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The watcher's name.
    pub watcher: String,
    /// The index of the stream in the watcher's streams.
    pub stream: usize,
    /// The index of the answer in the stream, when the violation is in one.
    pub batch: Option<usize>,
    /// The revision concerned.
    pub revision: u64,
    /// The key concerned, when one.
    pub key: Option<String>,
    /// What happened.
    pub kind: ViolationKind,
}

/// What happened, with the values that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViolationKind {
    /// An event below the revision of one received before it.
    OutOfOrder {
        /// The higher revision received earlier.
        previous: u64,
    },
    /// An event received before, at the same revision and key.
    Duplicate {
        /// The stream of the first copy.
        first_stream: usize,
        /// The answer of the first copy.
        first_batch: usize,
    },
    /// A matching write of the history, within the range the stream covered, never arrived.
    Missed {
        /// The cursor the stream reached (its last event or bookmark).
        covered: u64,
    },
    /// The revision's events arrived in two answers.
    SplitRevision {
        /// The answer that carried the revision first.
        first_batch: usize,
    },
    /// Some of the revision's matching events arrived, this one never did.
    PartialRevision,
    /// A bookmark below the cursor already reached.
    BookmarkBackwards {
        /// The cursor reached: the highest earlier bookmark or event revision.
        previous: u64,
    },
    /// An event at or below a bookmark received earlier.
    EventBehindBookmark {
        /// The bookmark.
        bookmark: u64,
    },
    /// An event at or below the cursor the stream started from.
    AtOrBeforeCursor {
        /// The stream's starting cursor.
        after: u64,
    },
    /// A compacted answer although the cursor had reached the compacted revision.
    SpuriousCompaction {
        /// The cursor when the answer came.
        cursor: u64,
    },
    /// An event for a key the selector does not match.
    Unselected {
        /// The watcher's selector.
        selector: Selector,
    },
    /// An event that differs from the history's write of that key at that revision.
    DiffersFromHistory {
        /// What the history holds.
        written: Event,
        /// What arrived.
        received: Event,
    },
    /// An event that differs from another watcher's copy.
    DiffersFromWatcher {
        /// The other watcher.
        other: String,
        /// Its copy.
        theirs: Event,
        /// This watcher's copy.
        ours: Event,
    },
}

impl ViolationKind {
    /// The guarantee this breaks.
    pub fn rule(&self) -> Rule {
        match self {
            ViolationKind::OutOfOrder { .. } => Rule::Ordered,
            ViolationKind::Duplicate { .. } => Rule::Unique,
            ViolationKind::Missed { .. } => Rule::Reliable,
            ViolationKind::SplitRevision { .. } | ViolationKind::PartialRevision => Rule::Atomic,
            ViolationKind::BookmarkBackwards { .. } | ViolationKind::EventBehindBookmark { .. } => {
                Rule::Bookmarkable
            }
            ViolationKind::AtOrBeforeCursor { .. } | ViolationKind::SpuriousCompaction { .. } => {
                Rule::Resumable
            }
            ViolationKind::Unselected { .. }
            | ViolationKind::DiffersFromHistory { .. }
            | ViolationKind::DiffersFromWatcher { .. } => Rule::Consistent,
        }
    }
}

impl Violation {
    /// The guarantee this breaks.
    pub fn rule(&self) -> Rule {
        self.kind.rule()
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Ordered => "ordered",
            Rule::Unique => "unique",
            Rule::Reliable => "reliable",
            Rule::Atomic => "atomic",
            Rule::Bookmarkable => "bookmarkable",
            Rule::Resumable => "resumable",
            Rule::Consistent => "consistent",
        })
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ViolationKind::OutOfOrder { previous } => {
                write!(f, "arrived after an event at revision {previous}")
            }
            ViolationKind::Duplicate {
                first_stream,
                first_batch,
            } => write!(
                f,
                "already received in stream {first_stream} answer {first_batch}"
            ),
            ViolationKind::Missed { covered } => {
                write!(
                    f,
                    "never arrived, though the stream reached revision {covered}"
                )
            }
            ViolationKind::SplitRevision { first_batch } => write!(
                f,
                "the revision's events are split: some came in answer {first_batch}"
            ),
            ViolationKind::PartialRevision => {
                write!(f, "never arrived, though other events of its revision did")
            }
            ViolationKind::BookmarkBackwards { previous } => {
                write!(f, "bookmark below the cursor already reached, {previous}")
            }
            ViolationKind::EventBehindBookmark { bookmark } => {
                write!(f, "arrived after the bookmark {bookmark}")
            }
            ViolationKind::AtOrBeforeCursor { after } => {
                write!(f, "not after the stream's starting cursor {after}")
            }
            ViolationKind::SpuriousCompaction { cursor } => {
                write!(f, "compacted answer although the cursor was at {cursor}")
            }
            ViolationKind::Unselected { selector } => write!(f, "not matched by {selector}"),
            ViolationKind::DiffersFromHistory { written, received } => {
                write!(f, "received {received} but the history wrote {written}")
            }
            ViolationKind::DiffersFromWatcher {
                other,
                theirs,
                ours,
            } => write!(f, "received {ours} but watcher {other:?} received {theirs}"),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "watcher {:?} stream {}", self.watcher, self.stream)?;
        if let Some(batch) = self.batch {
            write!(f, " answer {batch}")?;
        }
        write!(f, ", revision {}", self.revision)?;
        if let Some(key) = &self.key {
            write!(f, " key {key:?}")?;
        }
        write!(f, ": {} broken: {}", self.rule(), self.kind)
    }
}
