//! [`KvCache`]: a local copy of every key with a prefix, kept in step with the service: a read
//! of the prefix at revision R, then a watch from R whose changes are applied to a `BTreeMap`.
//!
//! ```text
//!  KvCache::start ─▶ kv.get_prefix(P) ─▶ map, revision R
//!        follower task: watch(P).after(R)
//!          Changes { revision, events } ─▶ apply all under one lock ─▶ revision
//!          Progress { revision }        ─▶ revision
//!          Err(Compacted)               ─▶ read P again, replace the map, watch from its revision
//!          Err(other)                   ─▶ kept; the map stays as it was ([`KvCache::error`])
//! ```
//!
//! A read of several pages is not one snapshot (each page is read at its own revision), so an
//! event older than the key the map holds is skipped: a put whose `mod_revision` is not newer,
//! a delete older than the key's `mod_revision`. Applying the watch from the first page's
//! revision then brings every key to its latest state, never back.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use hivekeeper_protocol::KeyValue;
use hivekeeper_protocol::kv::{EventKind, KvEvent};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::backoff::Backoff;
use crate::error::AgentError;
use crate::kv::Kv;
use crate::watch::WatchItem;

/// A local map of the keys with one prefix, following the service; see the module doc.
///
/// Dropping it stops the follower task.
#[derive(Debug)]
pub struct KvCache {
    /// The map and its revision, written by the follower task only.
    state: Arc<RwLock<CacheState>>,
    /// The revision the map reflects, each time it moves: for [`KvCache::wait_for`].
    revision: watch::Receiver<u64>,
    /// The follower task, aborted on drop.
    follower: JoinHandle<()>,
}

/// The map and how far it is known to be current.
#[derive(Debug, Default, Clone)]
struct CacheState {
    /// The keys, by name.
    kvs: BTreeMap<String, KeyValue>,
    /// Every change up to this revision is in `kvs`.
    revision: u64,
    /// The refusal that stopped the follower, if one did.
    error: Option<AgentError>,
}

/// The map as it was at one revision, from [`KvCache::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSnapshot {
    /// Every change up to this revision is in `kvs`.
    pub revision: u64,
    /// The keys, by name.
    pub kvs: BTreeMap<String, KeyValue>,
}

impl Drop for KvCache {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

impl KvCache {
    /// Reads every key with `prefix` through `kv`, then follows it in a task of its own.
    /// Returns once the first read is in the map; its errors are the read's.
    pub async fn start(kv: &Kv, prefix: impl Into<String>) -> Result<KvCache, AgentError> {
        let prefix = prefix.into();
        let read = kv.get_prefix(prefix.clone()).await?;
        let mut state = CacheState {
            revision: read.revision,
            ..CacheState::default()
        };
        state.kvs = read
            .kvs
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        let state = Arc::new(RwLock::new(state));
        let (revision_tx, revision) = watch::channel(read.revision);
        let follower = Follower {
            kv: kv.clone(),
            prefix,
            state: Arc::clone(&state),
            revision: revision_tx,
        };
        let follower = tokio::spawn(follower.run());
        Ok(KvCache {
            state,
            revision,
            follower,
        })
    }

    /// The key as the cache holds it.
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.read().kvs.get(key).cloned()
    }

    /// The revision the map reflects: every change up to it is applied.
    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    /// A copy of the map and the revision it reflects, taken together.
    pub fn snapshot(&self) -> CacheSnapshot {
        let state = self.read();
        CacheSnapshot {
            revision: state.revision,
            kvs: state.kvs.clone(),
        }
    }

    /// The refusal that stopped following, if one did (a permission or a bad prefix): the
    /// map stays as it was then.
    pub fn error(&self) -> Option<AgentError> {
        self.read().error.clone()
    }

    /// Waits until the map reflects `revision` (e.g. a put's), or the follower stopped.
    pub async fn wait_for(&self, revision: u64) -> Result<(), AgentError> {
        let mut changes = self.revision.clone();
        if changes.wait_for(|seen| *seen >= revision).await.is_ok() {
            return Ok(());
        }
        // The follower is gone: it stored why before it ended.
        Err(self.error().unwrap_or(AgentError::Disconnected))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The task that keeps the map in step.
struct Follower {
    kv: Kv,
    prefix: String,
    state: Arc<RwLock<CacheState>>,
    revision: watch::Sender<u64>,
}

impl Follower {
    /// Watches from the map's revision; on `compacted` reads again and watches on; ends on any
    /// other refusal (the watch retries connection losses itself).
    async fn run(self) {
        loop {
            let after = self.state_revision();
            let mut watch = self.kv.watch_prefix(self.prefix.clone()).after(after);
            let error = loop {
                match watch.next().await {
                    Some(Ok(item)) => self.apply(item),
                    Some(Err(error)) => break error,
                    None => return,
                }
            };
            if let AgentError::Compacted { compact_revision } = error {
                debug!(prefix = %self.prefix, compact_revision, "cache compacted: reading again");
                self.reread().await;
                continue;
            }
            warn!(prefix = %self.prefix, %error, "cache stopped following");
            // Stored before the task ends and drops the sender, which wakes `wait_for`.
            self.write().error = Some(error);
            return;
        }
    }

    /// Reads the prefix until a read succeeds and replaces the map with it.
    async fn reread(&self) {
        let config = self.kv.agent().config();
        let mut backoff = Backoff::new(
            Duration::from_millis(config.backoff_first_ms),
            Duration::from_millis(config.backoff_cap_ms),
        );
        loop {
            match self.kv.get_prefix(self.prefix.clone()).await {
                Ok(read) => {
                    let mut state = self.write();
                    state.kvs = read
                        .kvs
                        .into_iter()
                        .map(|kv| (kv.key.clone(), kv))
                        .collect();
                    state.revision = read.revision;
                    drop(state);
                    self.revision.send_replace(read.revision);
                    return;
                }
                Err(error) => {
                    debug!(%error, "cache re-read failed; again after a pause");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Applies one revision's changes (or a bookmark) under one lock, so a snapshot never
    /// shows half a txn.
    fn apply(&self, item: WatchItem) {
        let mut state = self.write();
        if let WatchItem::Changes { events, .. } = &item {
            for event in events {
                apply_event(&mut state.kvs, event);
            }
        }
        state.revision = state.revision.max(item.revision());
        let revision = state.revision;
        drop(state);
        self.revision.send_replace(revision);
    }

    fn state_revision(&self) -> u64 {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .revision
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CacheState> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One change applied to the map, unless the map already holds a newer state of the key
/// (see the module doc).
fn apply_event(kvs: &mut BTreeMap<String, KeyValue>, event: &KvEvent) {
    let held = kvs.get(&event.kv.key).map(|kv| kv.mod_revision);
    match event.kind {
        EventKind::Put => {
            if held.is_none_or(|held| held < event.kv.mod_revision) {
                kvs.insert(event.kv.key.clone(), event.kv.clone());
            }
        }
        EventKind::Delete => {
            if held.is_some_and(|held| held <= event.revision) {
                kvs.remove(&event.kv.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, mod_revision: u64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: 1,
            mod_revision,
            version: 1,
            lease: None,
        }
    }

    fn event(kind: EventKind, kv: KeyValue) -> KvEvent {
        KvEvent {
            revision: kv.mod_revision,
            kind,
            kv,
        }
    }

    #[test]
    fn puts_and_deletes_apply_in_order() {
        let mut kvs = BTreeMap::new();
        apply_event(&mut kvs, &event(EventKind::Put, kv("a", "1", 5)));
        apply_event(&mut kvs, &event(EventKind::Put, kv("a", "2", 6)));
        assert_eq!(kvs.get("a").map(|kv| kv.value.as_str()), Some("2"));
        apply_event(&mut kvs, &event(EventKind::Delete, kv("a", "2", 7)));
        assert!(kvs.is_empty());
    }

    #[test]
    fn a_replayed_change_older_than_the_key_held_is_skipped() {
        // A later page of the first read already showed the key at revision 9.
        let mut kvs = BTreeMap::from([("a".to_string(), kv("a", "new", 9))]);
        apply_event(&mut kvs, &event(EventKind::Put, kv("a", "old", 6)));
        apply_event(&mut kvs, &event(EventKind::Delete, kv("a", "old", 7)));
        assert_eq!(kvs.get("a").map(|kv| kv.value.as_str()), Some("new"));
        // And the put of revision 9 itself, replayed, leaves it as it is.
        apply_event(&mut kvs, &event(EventKind::Put, kv("a", "new", 9)));
        assert_eq!(kvs.get("a").map(|kv| kv.mod_revision), Some(9));
    }
}
