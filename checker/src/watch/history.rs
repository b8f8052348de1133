//! What a watch workload records: the committed writes it learned of, and each watcher's
//! streams of poll answers.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What an event did to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The key was created or changed.
    Put,
    /// The key was deleted.
    Delete,
}

/// A change of one key at one revision: a committed write of the history, or an event a
/// watcher received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The revision of the entry that made the change; a txn's changes share one.
    pub revision: u64,
    /// Put or delete.
    pub kind: EventKind,
    /// The key changed.
    pub key: String,
    /// The value put; `None` for a delete, or for a put whose value was not recorded.
    pub value: Option<String>,
}

/// Which keys a watcher follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// Exactly this key.
    Key(String),
    /// Every key that starts with this prefix, byte-wise.
    Prefix(String),
}

impl Selector {
    /// Whether the watcher should receive changes of `key`.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            Selector::Key(selected) => key == selected,
            Selector::Prefix(prefix) => key.starts_with(prefix.as_str()),
        }
    }
}

/// One watcher: one selector followed through one or more streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watcher {
    /// The name reports give it.
    pub id: String,
    /// The keys it follows.
    pub selector: Selector,
    /// Its streams in order. A stream continues across reconnects and failovers (the client
    /// polls again from its cursor); only a compacted answer ends one, after which the watcher
    /// re-reads with `kv.get` and starts a new stream from that read's revision.
    pub streams: Vec<Stream>,
}

/// The poll answers a watcher received from one starting cursor on, whatever member served them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// The cursor the stream started from: events with a revision above it were asked for.
    pub after: u64,
    /// The answers with events or a bookmark, in the order received.
    pub batches: Vec<Batch>,
    /// `Some(compact_revision)` when the stream ended with a `compacted` answer.
    pub compacted: Option<u64>,
}

/// One poll answer: the events it carried and its bookmark.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Batch {
    /// The events, in the order the answer listed them.
    pub events: Vec<Event>,
    /// The answer's `progress` (or `next`): the revision up to which the server says nothing
    /// matching remains undelivered. The client resumes from it.
    pub progress: Option<u64>,
}

/// Input the watch checker cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WatchInputError {
    /// The history holds two different changes of one key at one revision.
    #[error("the history has two different changes of key {key:?} at revision {revision}")]
    ConflictingHistory {
        /// The revision.
        revision: u64,
        /// The key.
        key: String,
    },
    /// Two watchers share a name, which would make reports ambiguous.
    #[error("two watchers are named {id:?}")]
    DuplicateWatcher {
        /// The name.
        id: String,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, &self.value) {
            (EventKind::Put, Some(value)) => {
                write!(f, "put {:?}={value:?} @{}", self.key, self.revision)
            }
            (EventKind::Put, None) => write!(f, "put {:?} @{}", self.key, self.revision),
            (EventKind::Delete, _) => write!(f, "delete {:?} @{}", self.key, self.revision),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Key(key) => write!(f, "key {key:?}"),
            Selector::Prefix(prefix) => write!(f, "prefix {prefix:?}"),
        }
    }
}
