//! Writes: puts, deletes and lease ends, each one call at one revision, all or nothing.
//!
//! Every change of a key goes through [`KeySpace::set_entry`], which keeps the byte count and
//! the lease index with the map (the key space's invariants 2 and 3), and through an [`Undo`]
//! list, so a call refused part-way (a txn's third put over a limit) restores every key it
//! wrote, in reverse order, and drops the events it appended.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::limits::KEY_BYTES_MAX_CEILING;
use super::{
    Deleted, Entry, EventKind, KeySelector, KeySpace, KvError, KvEvent, Put, PutResult,
    RESERVED_PREFIX, Writer,
};
use crate::LeaseId;

/// The keys a mutating call changed with what they were, so a refusal part-way through (a txn
/// whose third put is over a limit) restores them in reverse order.
#[derive(Debug, Default)]
pub(super) struct Undo {
    /// Each key written and its entry before the write.
    pub(super) keys: Vec<(String, Option<Entry>)>,
    /// How many events the history had.
    pub(super) history_len: usize,
}

impl KeySpace {
    /// Puts one key at `revision`.
    pub fn put(&mut self, revision: u64, writer: Writer, put: Put) -> Result<PutResult, KvError> {
        self.check_put(writer, &put)?;
        self.mutate(revision, |space, undo| space.put_in(revision, put, undo))
    }

    /// Deletes one key or every key with a prefix at `revision`, with a delete event each.
    pub fn delete(
        &mut self,
        revision: u64,
        writer: Writer,
        selector: &KeySelector,
    ) -> Result<Deleted, KvError> {
        self.check_selector(writer, selector)?;
        self.mutate(revision, |space, undo| {
            Ok(space.delete_in(revision, writer, selector, undo))
        })
    }

    /// Deletes every key bound to the leases that end at `revision` (an expiry or a revoke
    /// entry may end several), returning their delete events: lease by lease in the order
    /// given, each lease's keys in byte order. Reserved keys go too: a lease's end is the
    /// service's doing.
    pub fn end_leases(
        &mut self,
        revision: u64,
        leases: &[LeaseId],
    ) -> Result<Vec<KvEvent>, KvError> {
        self.mutate(revision, |space, undo| {
            for lease in leases {
                let keys = space.by_lease.get(lease).cloned().unwrap_or_default();
                for key in keys {
                    space.remove_in(revision, &key, undo);
                }
            }
            Ok(space.history.since(undo.history_len))
        })
    }

    /// Runs `change` as one mutating call at `revision`: refused whole (restored from the undo
    /// list) when it fails, otherwise the revision is recorded and the history trimmed.
    pub(super) fn mutate<T>(
        &mut self,
        revision: u64,
        change: impl FnOnce(&mut Self, &mut Undo) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        if revision <= self.revision {
            return Err(KvError::RevisionNotIncreasing {
                last: self.revision,
                got: revision,
            });
        }
        let mut undo = Undo {
            keys: Vec::new(),
            history_len: self.history.len(),
        };
        match change(self, &mut undo) {
            Ok(answer) => {
                self.revision = revision;
                self.history.trim(&self.limits);
                Ok(answer)
            }
            Err(refusal) => {
                for (key, entry) in undo.keys.into_iter().rev() {
                    self.set_entry(&key, entry);
                }
                self.history.truncate(undo.history_len);
                Err(refusal)
            }
        }
    }

    /// The checks of a put that need no state: key and value lengths, reserved keys, the
    /// lease's form.
    pub(super) fn check_put(&self, writer: Writer, put: &Put) -> Result<(), KvError> {
        check_key_length(&put.key, self.limits.key_bytes_max)?;
        check_reserved(writer, &put.key)?;
        parse_lease(put.lease.as_deref())?;
        if put.value.len() > self.limits.value_bytes_max as usize {
            return Err(KvError::ValueLength {
                len: put.value.len(),
                max: self.limits.value_bytes_max,
            });
        }
        Ok(())
    }

    /// A named key is 1 to [`KEY_BYTES_MAX_CEILING`] bytes, and a client's is not reserved.
    /// The wire's bound, not `key_bytes_max`: that one bounds the keys a put writes, and a key
    /// written before it was lowered can still be read, compared and deleted.
    pub(super) fn check_key(&self, writer: Writer, key: &str) -> Result<(), KvError> {
        self.check_key_length(key)?;
        check_reserved(writer, key)
    }

    /// A named key is 1 to [`KEY_BYTES_MAX_CEILING`] bytes (see [`Self::check_key`]).
    pub(super) fn check_key_length(&self, key: &str) -> Result<(), KvError> {
        check_key_length(key, KEY_BYTES_MAX_CEILING)
    }

    /// A selector's key or prefix is within the length bound; a client's does not name only
    /// reserved keys (a prefix starting with `$`). The empty prefix is allowed: it spans the
    /// reserved keys, which a client's delete leaves alone.
    pub(super) fn check_selector(
        &self,
        writer: Writer,
        selector: &KeySelector,
    ) -> Result<(), KvError> {
        match selector {
            KeySelector::Key(key) => self.check_key(writer, key),
            KeySelector::Prefix(prefix) => {
                self.check_prefix_length(prefix)?;
                check_reserved(writer, prefix)
            }
        }
    }

    /// A prefix is at most [`KEY_BYTES_MAX_CEILING`] bytes (see [`Self::check_key`]).
    pub(super) fn check_prefix_length(&self, prefix: &str) -> Result<(), KvError> {
        let max = KEY_BYTES_MAX_CEILING;
        if prefix.len() > max as usize {
            return Err(KvError::PrefixLength {
                len: prefix.len(),
                max,
            });
        }
        Ok(())
    }

    /// A checked put inside a mutating call: the capacity bounds, then the write and its event.
    pub(super) fn put_in(
        &mut self,
        revision: u64,
        put: Put,
        undo: &mut Undo,
    ) -> Result<PutResult, KvError> {
        let limits = &self.limits;
        let old = self.keys.get(&put.key);
        if old.is_none() && self.keys.len() >= limits.keys_max as usize {
            return Err(KvError::KeysFull {
                max: limits.keys_max,
            });
        }
        let old_bytes = old.map_or(0, |entry| put.key.len() + entry.value.len());
        let bytes = self.bytes - old_bytes as u64 + (put.key.len() + put.value.len()) as u64;
        if bytes > limits.bytes_max {
            return Err(KvError::BytesFull {
                bytes,
                max: limits.bytes_max,
            });
        }
        let lease = parse_lease(put.lease.as_deref())?;
        if let Some(lease) = lease
            && old.is_none_or(|entry| entry.lease != Some(lease))
            && self.by_lease.get(&lease).map_or(0, BTreeSet::len)
                >= limits.keys_per_lease_max as usize
        {
            return Err(KvError::LeaseKeysFull {
                lease,
                max: limits.keys_per_lease_max,
            });
        }
        let want_prev = put.prev_kv;
        let (key, prev) = self.write_in(revision, put.key, put.value, lease, undo);
        let prev_kv = want_prev
            .then(|| prev.as_ref().map(|entry| entry.to_kv(key)))
            .flatten();
        Ok(PutResult { prev_kv })
    }

    /// Writes one key with its put event, after every check: created at `revision` when
    /// absent, else its `create_revision` kept and its version one more. Returns the undo
    /// record: the key and what it replaced.
    fn write_in<'u>(
        &mut self,
        revision: u64,
        key: String,
        value: String,
        lease: Option<LeaseId>,
        undo: &'u mut Undo,
    ) -> &'u (String, Option<Entry>) {
        let old = self.keys.get(&key);
        let entry = Entry {
            value,
            create_revision: old.map_or(revision, |entry| entry.create_revision),
            mod_revision: revision,
            version: old.map_or(1, |entry| entry.version + 1),
            lease,
        };
        let kv = entry.to_kv(&key);
        let prev = self.set_entry(&key, Some(entry));
        self.history.push(KvEvent {
            revision,
            kind: EventKind::Put,
            kv,
        });
        undo.keys.push((key, prev));
        undo.keys.last().expect("just pushed")
    }

    /// Writes one of the service's own keys at `revision`, bound to no lease: `Some(value)`
    /// puts it (created anew when absent), `None` deletes it (it exists). Outside the capacity
    /// bounds (`keys_max`, `bytes_max`): the caller bounds what it mirrors (elections: at most
    /// `resources_max`, values checked against `value_bytes_max` at admission), and a
    /// leadership change must never be refused for a full key space.
    pub fn mirror(
        &mut self,
        revision: u64,
        key: &str,
        value: Option<String>,
    ) -> Result<(), KvError> {
        debug_assert!(key.starts_with(RESERVED_PREFIX), "a mirror key is reserved");
        self.mutate(revision, |space, undo| {
            match value {
                Some(value) => {
                    space.write_in(revision, key.to_string(), value, None, undo);
                }
                None => space.remove_in(revision, key, undo),
            }
            Ok(())
        })
    }

    /// A checked delete inside a mutating call.
    pub(super) fn delete_in(
        &mut self,
        revision: u64,
        writer: Writer,
        selector: &KeySelector,
        undo: &mut Undo,
    ) -> Deleted {
        let keys: Vec<String> = match selector {
            KeySelector::Key(key) => self
                .keys
                .contains_key(key)
                .then(|| key.clone())
                .into_iter()
                .collect(),
            KeySelector::Prefix(prefix) => self
                .keys
                .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                .map(|(key, _)| key)
                .take_while(|key| key.starts_with(prefix.as_str()))
                .filter(|key| writer == Writer::Service || !key.starts_with(RESERVED_PREFIX))
                .cloned()
                .collect(),
        };
        for key in &keys {
            self.remove_in(revision, key, undo);
        }
        Deleted {
            deleted: keys.len() as u64,
        }
    }

    /// Removes one existing key with its delete event.
    pub(super) fn remove_in(&mut self, revision: u64, key: &str, undo: &mut Undo) {
        let entry = self
            .set_entry(key, None)
            .expect("the caller found the key in the map");
        self.history.push(KvEvent {
            revision,
            kind: EventKind::Delete,
            kv: entry.to_kv(key),
        });
        undo.keys.push((key.to_string(), Some(entry)));
    }

    /// Sets or removes one key, keeping the byte count and the lease index; returns what it
    /// replaced. Every change of `keys` goes through here (and so does the undo).
    pub(super) fn set_entry(&mut self, key: &str, entry: Option<Entry>) -> Option<Entry> {
        let old = match entry {
            Some(entry) => {
                self.bytes += (key.len() + entry.value.len()) as u64;
                if let Some(lease) = entry.lease {
                    self.by_lease
                        .entry(lease)
                        .or_default()
                        .insert(key.to_string());
                }
                self.keys.insert(key.to_string(), entry)
            }
            None => self.keys.remove(key),
        };
        if let Some(old) = &old {
            self.bytes -= (key.len() + old.value.len()) as u64;
            let now = self.keys.get(key).and_then(|entry| entry.lease);
            if let Some(lease) = old.lease.filter(|lease| Some(*lease) != now) {
                let keys = self
                    .by_lease
                    .get_mut(&lease)
                    .expect("invariant 2: a bound key is in its lease's index");
                keys.remove(key);
                if keys.is_empty() {
                    self.by_lease.remove(&lease);
                }
            }
        }
        old
    }
}

/// A lease named on the wire as its id; `None` for no lease.
pub(super) fn parse_lease(lease: Option<&str>) -> Result<Option<LeaseId>, KvError> {
    lease
        .map(|text| {
            LeaseId::parse(text).ok_or_else(|| KvError::LeaseId {
                lease: text.to_string(),
            })
        })
        .transpose()
}

/// A key is 1 to `max` bytes.
fn check_key_length(key: &str, max: u32) -> Result<(), KvError> {
    if key.is_empty() || key.len() > max as usize {
        return Err(KvError::KeyLength {
            len: key.len(),
            max,
        });
    }
    Ok(())
}

/// A client writes no reserved key (one starting with `$`), nor a prefix of them only.
fn check_reserved(writer: Writer, key: &str) -> Result<(), KvError> {
    if writer == Writer::Client && key.starts_with(RESERVED_PREFIX) {
        return Err(KvError::Reserved {
            key: key.to_string(),
        });
    }
    Ok(())
}
