//! [`HoldWatches`]: the agent's registry of held grants waiting for their `*.lost` event, so
//! that [`crate::Guard::ended`] can tell a hold the service took away, without a task or an
//! event receiver per guard.
//!
//! ```text
//!  acquire sent ──▶ Acquiring{kind, names}     (lost events for those names are kept aside)
//!  granted token ─▶ HoldWatch{kind, names, token}  (takes a kept-aside event for its token)
//!  connection routes lock.lost / sem.lost / waypoint.lost {name, token}
//!      ─▶ every HoldWatch of (kind, name, token): its end := MaxHold or Taken
//!  guard released or dropped ─▶ HoldWatch dropped, its entries removed
//! ```
//!
//! The acquire registers before its request goes, because the service may send the hold's
//! `*.lost` right after the grant, before the guard exists: such an event, for a name some
//! acquire is in flight for, is kept until the last acquire of that name finishes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use hivekeeper_protocol::{Event, LostReason, ResourceKind};

use crate::guard::{HoldEnd, finish};

/// The end a guard records, shared between the guard and the registry.
pub(crate) type HoldEndSender = Arc<watch::Sender<Option<HoldEnd>>>;

/// One resource of one grant: a kind, a name and a token.
type HoldKey = (ResourceKind, String, u64);

/// The agent's registry of holds waiting for their `*.lost` event.
#[derive(Debug, Default)]
pub(crate) struct HoldWatches {
    inner: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    /// The ends of the guards holding each resource under each token (several sessions of one
    /// agent may share a token: one entry can grant several waiters).
    holds: HashMap<HoldKey, Vec<HoldEndSender>>,
    /// How many acquires of each resource are in flight.
    acquiring: HashMap<(ResourceKind, String), usize>,
    /// Lost events for a resource that an acquire is in flight for, and no guard holds yet.
    kept: HashMap<HoldKey, HoldEnd>,
}

impl HoldWatches {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Every critical section leaves the maps consistent, so poisoning is ignored.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers an acquire of `names` of `kind`, before its request goes.
    pub(crate) fn acquiring(self: &Arc<Self>, kind: ResourceKind, names: Vec<String>) -> Acquiring {
        let mut registry = self.registry();
        for name in &names {
            *registry.acquiring.entry((kind, name.clone())).or_default() += 1;
        }
        drop(registry);
        Acquiring {
            watches: self.clone(),
            kind,
            names,
        }
    }

    /// Records a `*.lost` event as the end of the holds it names; ignores every other event.
    pub(crate) fn route(&self, event: &Event) {
        let (kind, name, token, reason) = match event {
            Event::LockLost {
                name,
                token,
                reason,
            } => (ResourceKind::Lock, name, *token, *reason),
            Event::SemLost {
                name,
                token,
                reason,
            } => (ResourceKind::Sem, name, *token, *reason),
            Event::WaypointLost { name, token } => (ResourceKind::Waypoint, name, *token, None),
            _ => return,
        };
        let how = match reason {
            Some(LostReason::MaxHold) => HoldEnd::MaxHold,
            None => HoldEnd::Taken,
        };
        let mut registry = self.registry();
        let key = (kind, name.clone(), token);
        match registry.holds.get(&key) {
            Some(ends) => ends.iter().for_each(|end| finish(end, how)),
            None if registry.acquiring.contains_key(&(kind, name.clone())) => {
                registry.kept.insert(key, how);
            }
            None => {}
        }
    }
}

/// An acquire in flight; [`Acquiring::granted`] turns it into the grant's [`HoldWatch`].
#[derive(Debug)]
pub(crate) struct Acquiring {
    watches: Arc<HoldWatches>,
    kind: ResourceKind,
    names: Vec<String>,
}

impl Acquiring {
    /// Watches the grant with `token` for its `*.lost`, recording the end in `end` (at once
    /// when that event came before the grant was known).
    pub(crate) fn granted(self, token: u64, end: HoldEndSender) -> HoldWatch {
        let keys: Vec<HoldKey> = self
            .names
            .iter()
            .map(|name| (self.kind, name.clone(), token))
            .collect();
        let mut registry = self.watches.registry();
        for key in &keys {
            if let Some(how) = registry.kept.remove(key) {
                finish(&end, how);
            }
            registry
                .holds
                .entry(key.clone())
                .or_default()
                .push(end.clone());
        }
        drop(registry);
        HoldWatch {
            watches: self.watches.clone(),
            keys,
            end,
        }
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        let mut registry = self.watches.registry();
        for name in &self.names {
            let resource = (self.kind, name.clone());
            let Some(count) = registry.acquiring.get_mut(&resource) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                registry.acquiring.remove(&resource);
                registry
                    .kept
                    .retain(|(kind, kept, _), _| (*kind, kept) != (resource.0, &resource.1));
            }
        }
    }
}

/// A grant watched for its `*.lost`; dropping it stops the watch.
#[derive(Debug)]
pub(crate) struct HoldWatch {
    watches: Arc<HoldWatches>,
    keys: Vec<HoldKey>,
    end: HoldEndSender,
}

impl Drop for HoldWatch {
    fn drop(&mut self) {
        let mut registry = self.watches.registry();
        for key in &self.keys {
            let Some(ends) = registry.holds.get_mut(key) else {
                continue;
            };
            ends.retain(|end| !Arc::ptr_eq(end, &self.end));
            if ends.is_empty() {
                registry.holds.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_lost(name: &str, token: u64, reason: Option<LostReason>) -> Event {
        Event::LockLost {
            name: name.to_string(),
            token,
            reason,
        }
    }

    fn new_end() -> HoldEndSender {
        Arc::new(watch::Sender::new(None))
    }

    #[test]
    fn a_lost_event_after_the_grant_ends_the_hold_of_its_token_only() {
        let watches = Arc::new(HoldWatches::default());
        let names = vec!["a".to_string(), "b".to_string()];
        let (mine, other) = (new_end(), new_end());
        let _mine = watches
            .acquiring(ResourceKind::Lock, names)
            .granted(7, mine.clone());
        let _other = watches
            .acquiring(ResourceKind::Lock, vec!["a".to_string()])
            .granted(8, other.clone());
        watches.route(&Event::SemLost {
            name: "b".to_string(),
            token: 7,
            reason: None,
        });
        assert_eq!(*mine.borrow(), None, "another kind's event");
        watches.route(&lock_lost("b", 7, Some(LostReason::MaxHold)));
        assert_eq!(*mine.borrow(), Some(HoldEnd::MaxHold));
        assert_eq!(*other.borrow(), None);
        watches.route(&lock_lost("a", 8, None));
        assert_eq!(*other.borrow(), Some(HoldEnd::Taken));
    }

    #[test]
    fn a_lost_event_before_the_grant_is_known_is_kept_for_it() {
        let watches = Arc::new(HoldWatches::default());
        let acquiring = watches.acquiring(ResourceKind::Lock, vec!["a".to_string()]);
        watches.route(&lock_lost("a", 7, Some(LostReason::MaxHold)));
        watches.route(&lock_lost("z", 7, None));
        let end = new_end();
        let watch = acquiring.granted(7, end.clone());
        assert_eq!(*end.borrow(), Some(HoldEnd::MaxHold));
        let registry = watches.registry();
        assert!(registry.kept.is_empty(), "taken, and none kept for `z`");
        assert!(registry.acquiring.is_empty());
        drop(registry);
        drop(watch);
        assert!(
            watches.registry().holds.is_empty(),
            "the guard's drop removes it"
        );
    }

    #[test]
    fn kept_events_go_with_the_last_acquire_of_their_resource() {
        let watches = Arc::new(HoldWatches::default());
        let first = watches.acquiring(ResourceKind::Lock, vec!["a".to_string()]);
        let second = watches.acquiring(ResourceKind::Lock, vec!["a".to_string()]);
        watches.route(&lock_lost("a", 3, None));
        drop(first);
        assert_eq!(
            watches.registry().kept.len(),
            1,
            "one acquire still in flight"
        );
        drop(second);
        let registry = watches.registry();
        assert!(registry.kept.is_empty() && registry.acquiring.is_empty());
    }
}
