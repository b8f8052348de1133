//! The connected agents, by client id: where `Transport::publish*` finds an agent's queue,
//! and where a second connection with the same client id takes over the first.
//!
//! Invariants:
//! 1. At most one registered connection per client id; registering a second one kicks the
//!    first (MQTT 3.1.1 §3.1.4, 5.0 §3.1.4: session takeover).
//! 2. A connection removes only its own entry (matched by `conn_id`), so an old connection
//!    ending after a takeover never removes its successor.
//! 3. Nothing outlives a connection: its entry, queue and subscriptions go with it.
//!
//! `hivekeeper_mqtt_clients_connected` is set here, from the map's length, at each change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::gauge;
use tokio::sync::Notify;

use super::codec::Qos;
use super::queue::{Class, OutQueue};
use crate::transport_metrics::CLIENTS_CONNECTED;

/// No subscription, in [`Client::rsp_qos`] and [`Client::evt_qos`].
pub(crate) const NOT_SUBSCRIBED: u8 = u8::MAX;

/// One connected agent, shared between its connection task and the publishers.
#[derive(Debug)]
pub(crate) struct Client {
    /// Unique per accepted connection: tells a successor from its predecessor.
    pub(crate) conn_id: u64,
    /// Messages waiting to be written to the socket.
    pub(crate) queue: OutQueue,
    /// QoS granted on `{prefix}/rsp/{agent}`, or [`NOT_SUBSCRIBED`].
    pub(crate) rsp_qos: AtomicU8,
    /// QoS granted on `{prefix}/evt/{agent}`, or [`NOT_SUBSCRIBED`].
    pub(crate) evt_qos: AtomicU8,
    /// Set, then `kick` notified, when another connection took this client id over.
    pub(crate) taken_over: AtomicBool,
    /// Set, then `kick` notified, when the agent's account was removed or its secret rotated:
    /// the connection flushes what is queued for it (its `lease.revoked` notices) and closes.
    pub(crate) revoked: AtomicBool,
    /// Wakes the connection task to end it (takeover).
    pub(crate) kick: Notify,
}

impl Client {
    /// A fresh client entry with nothing subscribed.
    pub(crate) fn new(conn_id: u64, queue_capacity: usize) -> Client {
        Client {
            conn_id,
            queue: OutQueue::new(queue_capacity),
            rsp_qos: AtomicU8::new(NOT_SUBSCRIBED),
            evt_qos: AtomicU8::new(NOT_SUBSCRIBED),
            taken_over: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            kick: Notify::new(),
        }
    }

    /// Ends the connection: sets `why` (its `taken_over` or `revoked`), closes its queue and
    /// wakes its task.
    fn end(&self, why: &AtomicBool) {
        why.store(true, Ordering::Release);
        self.queue.close();
        self.kick.notify_one();
    }

    /// The QoS granted on the topic of `class`, `None` if not subscribed.
    pub(crate) fn granted(&self, class: Class) -> Option<Qos> {
        let slot = match class {
            Class::Response => &self.rsp_qos,
            Class::Event => &self.evt_qos,
        };
        match slot.load(Ordering::Acquire) {
            NOT_SUBSCRIBED => None,
            qos => Some(qos),
        }
    }
}

/// Client id → connection.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    clients: Mutex<HashMap<String, Arc<Client>>>,
    next_conn_id: AtomicU64,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Client>>> {
        // Each critical section is one insert, lookup or remove: never left torn.
        self.clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new connection id.
    pub(crate) fn next_conn_id(&self) -> u64 {
        self.next_conn_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers `client` under `client_id`; kicks and returns the connection it replaces.
    pub(crate) fn register(&self, client_id: &str, client: Arc<Client>) -> Option<Arc<Client>> {
        let previous = self.change(|clients| clients.insert(client_id.to_string(), client));
        if let Some(previous) = &previous {
            previous.end(&previous.taken_over);
        }
        previous
    }

    /// Removes and closes `client_id`'s connection, whose credentials are no longer good (no
    /// successor, unlike a takeover). Returns whether it was connected.
    pub(crate) fn kick(&self, client_id: &str) -> bool {
        let removed = self.change(|clients| clients.remove(client_id));
        if let Some(client) = &removed {
            client.end(&client.revoked);
        }
        removed.is_some()
    }

    /// Applies `change` to the map under the lock, and exports its new length.
    fn change<T>(&self, change: impl FnOnce(&mut HashMap<String, Arc<Client>>) -> T) -> T {
        let mut clients = self.lock();
        let result = change(&mut clients);
        export_len(&clients);
        result
    }

    /// Removes `client_id` if it is still connection `conn_id` (invariant 2).
    pub(crate) fn unregister(&self, client_id: &str, conn_id: u64) {
        self.change(|clients| {
            if clients
                .get(client_id)
                .is_some_and(|client| client.conn_id == conn_id)
            {
                clients.remove(client_id);
            }
        });
    }

    /// The connection of `client_id`, if connected.
    pub(crate) fn get(&self, client_id: &str) -> Option<Arc<Client>> {
        self.lock().get(client_id).cloned()
    }

    /// Connected clients now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Sets the connected-clients gauge; called under the lock, so the last change sets it last.
fn export_len(clients: &HashMap<String, Arc<Client>>) {
    #[allow(clippy::cast_precision_loss)] // far below 2^53 connections
    gauge!(CLIENTS_CONNECTED).set(clients.len() as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_takeover_kicks_the_old_connection_and_its_end_keeps_the_new_one() {
        let registry = Registry::default();
        let old = Arc::new(Client::new(registry.next_conn_id(), 8));
        let new = Arc::new(Client::new(registry.next_conn_id(), 8));
        assert!(registry.register("drone-1", old.clone()).is_none());
        let replaced = registry
            .register("drone-1", new.clone())
            .expect("the old one is replaced");
        assert_eq!(replaced.conn_id, old.conn_id);
        assert!(old.taken_over.load(Ordering::Acquire));
        registry.unregister("drone-1", old.conn_id);
        assert_eq!(
            registry.get("drone-1").expect("still registered").conn_id,
            new.conn_id
        );
        registry.unregister("drone-1", new.conn_id);
        assert_eq!(registry.len(), 0);
    }
}
