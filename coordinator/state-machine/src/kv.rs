//! The key space: keys with revisions, leases and an event history that a watch resumes from.
//!
//! Pure and deterministic like the rest of the machine: the revision of every change is given
//! by the caller (the machine's next fencing token, `kv/ops.rs`), keys are kept in a
//! `BTreeMap` so ranges come out in byte order, and nothing reads a clock. A mutating call is all or nothing: a refused one ([`KvError`]) leaves the keys, the
//! history and the revision exactly as they were (a txn records an undo list and rolls back).
//!
//! ```text
//!  put / delete / txn / end_leases (revision = next token, strictly increasing)
//!    ├─ refused ─▶ Err(KvError), nothing changed
//!    └─ keys ─▶ one KvEvent per key written, appended to the history at that revision
//!                  └─ history over its bounds ─▶ oldest whole revisions dropped,
//!                                                compact_revision moves up
//!  get / range            ─▶ the keys now, in byte order, paged by `after`
//!  events_after(after, ..) ─▶ WatchPage { events, next, progress } or Compacted
//! ```
//!
//! Semantics, decided here once:
//! - A put to a new key sets `create_revision = mod_revision = revision`, `version = 1`; to an
//!   existing key it keeps `create_revision`, sets `mod_revision` and adds one to `version`.
//!   The put's lease replaces the key's (a put without a lease unbinds it, as in etcd). The
//!   caller checks that the lease is alive; the key space only indexes it.
//! - A delete event carries the key as it was just before the delete (value, revisions,
//!   version, lease), so a watcher learns what went away without asking; the event's own
//!   `revision` is the delete's, always after the carried `mod_revision`.
//! - Keys starting with `$` are the service's: a [`Writer::Client`] put or delete of one is
//!   refused ([`KvError::Reserved`]), and a client's prefix delete that spans them (the empty
//!   prefix) leaves them alone. Reads see them.
//!
//! The wire shapes (keys, selectors, puts, compares, txn ops and their results, events) are
//! the protocol's (`hivekeeper_protocol::kv`), declared once there; a key's lease is its wire
//! id there and a [`LeaseId`] here.
//!
//! Layout: this file holds the key space, the reads and the invariants; `kv/write.rs` the puts,
//! deletes and lease ends with their undo; `kv/txn.rs` txns; `kv/history.rs` the event history
//! and watch pages; `kv/limits.rs` the bounds and refusals; `kv/ops.rs` the machine's `kv.*`
//! ops, which give each change its revision from the fencing-token counter.
//!
//! Invariants (checked by [`KeySpace::check_invariants`]):
//! 1. Every key is 1 to [`KEY_BYTES_MAX_CEILING`] bytes; `1 <= create_revision <= mod_revision
//!    <= revision` and `version >= 1`.
//! 2. The lease index lists exactly the keys bound to each lease, no lease with none.
//! 3. `bytes` is the sum of the keys' and values' lengths.
//! 4. The history (`kv/history.rs`, its invariants) holds events in non-decreasing revision
//!    order, all after `compact_revision` and at most `revision`, within its bounds.
//! 5. The history is complete: every key changed after `compact_revision` has the put event of
//!    its `mod_revision` in the history.
//! 6. The bounds keep [`KvLimits::validate`]'s rules.
//!
//! The bounds on what is stored (`keys_max`, `bytes_max`, `keys_per_lease_max`,
//! `key_bytes_max`, `value_bytes_max`) are checked at admission: a put that would pass one is
//! refused with nothing changed. A `Configure` that lowers one takes nothing back, so the keys
//! stored before it may stay past it, and no invariant asserts them against it. The history's
//! bounds are the exception: lowering one compacts the history at once
//! ([`KeySpace::configure`]), so invariant 4 holds after every entry.

mod history;
mod limits;
pub(crate) mod ops;
mod txn;
mod write;

#[cfg(test)]
mod history_test;
#[cfg(test)]
mod limits_test;
#[cfg(test)]
mod model_test;
#[cfg(test)]
mod ops_test;
#[cfg(test)]
mod txn_test;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::{InvariantViolation, LeaseId};
use history::History;
pub use history::{Compacted, Cursor};
use hivekeeper_protocol::kv::{ANSWER_BYTES_MAX, json_len};
pub use hivekeeper_protocol::kv::{
    Compare, CompareOp, CompareTarget, Delete, Deleted, EventKind, Get, Holder, KeySelector,
    KeyValue, KvEvent, Put, PutResult, RESERVED_PREFIX, RangePage, TXN_COMPARES_MAX, TXN_OPS_MAX,
    TxnOp, TxnResult, WatchPage,
};
pub use limits::{
    KEY_BYTES_MAX_CEILING, KV_LIMITS_DEFAULT, KvError, KvLimits, KvLimitsError,
    VALUE_BYTES_MAX_CEILING,
};
pub use txn::{Txn, TxnOutcome};
use write::Undo;

/// A key's state without its name (the map holds the name once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The value.
    value: String,
    /// See [`KeyValue::create_revision`].
    create_revision: u64,
    /// See [`KeyValue::mod_revision`].
    mod_revision: u64,
    /// See [`KeyValue::version`].
    version: u64,
    /// See [`KeyValue::lease`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease: Option<LeaseId>,
}

impl Entry {
    fn to_kv(&self, key: &str) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: self.lease.map(|lease| lease.to_string()),
        }
    }
}

/// Who writes: a client may not write the reserved `$` keys, the service may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// An agent's request.
    Client,
    /// The service itself (its own bookkeeping under `$`).
    Service,
}

/// The key space: the keys, their lease index and the event history.
///
/// Serialized as its limits, revision, keys and history; the lease index and byte count are
/// derived and rebuilt when it is read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "KeySpaceData")]
pub struct KeySpace {
    /// The bounds, replicated with the state.
    limits: KvLimits,
    /// The revision of the last accepted mutating call (0 before any): every change carries a
    /// later one.
    revision: u64,
    /// The keys in byte order.
    keys: BTreeMap<String, Entry>,
    /// The events of the recent revisions.
    history: History,
    /// Keys by lease, so a lease's end finds its keys without a scan. Derived.
    #[serde(skip)]
    by_lease: BTreeMap<LeaseId, BTreeSet<String>>,
    /// Bytes of all keys and values alive. Derived.
    #[serde(skip)]
    bytes: u64,
}

/// The serialized part of a [`KeySpace`].
#[derive(Deserialize)]
struct KeySpaceData {
    /// [`KeySpace::limits`].
    limits: KvLimits,
    /// [`KeySpace::revision`].
    revision: u64,
    /// The keys, from which the lease index and byte count are rebuilt.
    keys: BTreeMap<String, Entry>,
    /// The history, whose byte count is rebuilt.
    history: History,
}

impl From<KeySpaceData> for KeySpace {
    fn from(data: KeySpaceData) -> Self {
        let mut space = KeySpace {
            limits: data.limits,
            revision: data.revision,
            keys: BTreeMap::new(),
            history: data.history,
            by_lease: BTreeMap::new(),
            bytes: 0,
        };
        for (key, entry) in data.keys {
            space.set_entry(&key, Some(entry));
        }
        space
    }
}

impl Default for KeySpace {
    fn default() -> Self {
        KeySpace::new(KvLimits::default())
    }
}

impl KeySpace {
    /// An empty key space with these bounds, at revision 0.
    pub fn new(limits: KvLimits) -> Self {
        KeySpace {
            limits,
            revision: 0,
            keys: BTreeMap::new(),
            history: History::default(),
            by_lease: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// The bounds.
    pub fn limits(&self) -> &KvLimits {
        &self.limits
    }

    /// Replaces the bounds (a `Configure` entry's `kv`, already validated). They bound the
    /// writes that come after: no key is taken back. The history is the exception, trimmed to
    /// the new bounds at once (the oldest whole revisions dropped, `compact_revision` moving
    /// up), so every member and every snapshot holds the same window from this entry on.
    pub fn configure(&mut self, limits: KvLimits) {
        self.limits = limits;
        self.history.trim(&self.limits);
    }

    /// The revision of the last accepted mutating call (0 before any).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every event at or before this revision has been dropped from the history.
    pub fn compact_revision(&self) -> u64 {
        self.history.compact_revision()
    }

    /// How many keys are alive.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Bytes of all keys and values alive.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// How many events the history keeps.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// Whether nothing was ever written and the bounds are the defaults: such a key space is
    /// left out of the machine's snapshot, whose bytes stay those of a machine without keys.
    pub fn is_unused(&self) -> bool {
        self.revision == 0 && self.limits == KvLimits::default()
    }

    /// The leases some key is bound to, in id order.
    pub fn leases(&self) -> impl Iterator<Item = LeaseId> + '_ {
        self.by_lease.keys().copied()
    }

    /// The keys bound to `lease`, in byte order.
    pub fn lease_keys(&self, lease: LeaseId) -> impl Iterator<Item = &str> + '_ {
        self.by_lease
            .get(&lease)
            .into_iter()
            .flat_map(|keys| keys.iter().map(String::as_str))
    }

    /// The keys starting with `prefix`, in byte order.
    pub fn keys_with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.keys
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .map(|(key, _)| key.as_str())
            .take_while(move |key| key.starts_with(prefix))
    }

    /// One key.
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.keys.get(key).map(|entry| entry.to_kv(key))
    }

    /// Up to `limit` keys starting with `prefix` and after `after` (exclusive), in byte order,
    /// and no more than [`ANSWER_BYTES_MAX`] of them as JSON, so the page fits one MQTT packet.
    /// A `limit` of 0 is read as 1, and the first key comes whatever its size, so every page
    /// makes progress.
    pub fn range(&self, prefix: &str, after: Option<&str>, limit: usize) -> RangePage {
        let limit = limit.max(1);
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut kvs: Vec<KeyValue> = Vec::new();
        let mut bytes = 0;
        let mut more = false;
        for (key, entry) in self
            .keys
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
        {
            let kv = entry.to_kv(key);
            let size = json_len(&kv);
            if kvs.len() == limit || (!kvs.is_empty() && bytes + size > ANSWER_BYTES_MAX) {
                more = true;
                break;
            }
            bytes += size;
            kvs.push(kv);
        }
        let next_after = more.then(|| kvs.last().map(|kv| kv.key.clone())).flatten();
        RangePage { kvs, next_after }
    }

    /// The events after `cursor` that `selector` names, at most `max_events` of them unless
    /// one revision alone has more, a revision's events split only when they alone pass
    /// `ANSWER_BYTES_MAX` (`history.rs`); see [`WatchPage`]. `Compacted` when events after
    /// the cursor have been dropped.
    pub fn events_after<'a>(
        &self,
        cursor: impl Into<Cursor<'a>>,
        selector: &KeySelector,
        max_events: usize,
    ) -> Result<WatchPage, Compacted> {
        self.history
            .page(cursor.into(), selector, max_events, self.revision)
    }

    /// How many kept events have a revision above `after` (for a count of changes; a watch
    /// reads them with [`Self::events_after`]).
    pub fn events_count_after(&self, after: u64) -> usize {
        self.history.count_after(after)
    }

    /// Checks the invariants in the module doc.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mut bytes = 0u64;
        let mut by_lease: BTreeMap<LeaseId, BTreeSet<String>> = BTreeMap::new();
        if let Err(error) = self.limits.validate() {
            return Err(violation!("kv invariant 6: {error}"));
        }
        for (key, entry) in &self.keys {
            if key.is_empty() || key.len() > KEY_BYTES_MAX_CEILING as usize {
                return Err(violation!(
                    "kv invariant 1: key {key:?} has {} bytes",
                    key.len()
                ));
            }
            let revisions_ordered = 1 <= entry.create_revision
                && entry.create_revision <= entry.mod_revision
                && entry.mod_revision <= self.revision;
            if !revisions_ordered || entry.version == 0 {
                return Err(violation!(
                    "kv invariant 1: key {key:?} has create {} mod {} version {} at revision {}",
                    entry.create_revision,
                    entry.mod_revision,
                    entry.version,
                    self.revision
                ));
            }
            bytes += (key.len() + entry.value.len()) as u64;
            if let Some(lease) = entry.lease {
                by_lease.entry(lease).or_default().insert(key.clone());
            }
            if entry.mod_revision > self.history.compact_revision()
                && !self.history.has_put(key, entry.mod_revision)
            {
                return Err(violation!(
                    "kv invariant 5: key {key:?} changed at {} after compaction at {}, and its \
                     put event is missing",
                    entry.mod_revision,
                    self.history.compact_revision()
                ));
            }
        }
        if by_lease != self.by_lease {
            return Err(violation!(
                "kv invariant 2: the lease index is not the keys' leases"
            ));
        }
        if bytes != self.bytes {
            return Err(violation!(
                "kv invariant 3: {bytes} bytes alive, counted {}",
                self.bytes
            ));
        }
        self.history.check_invariants(self.revision, &self.limits)
    }
}
