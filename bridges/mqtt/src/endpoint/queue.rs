//! The per-connection outbound queue and its policy for slow consumers.
//!
//! Invariants:
//! 1. At most `capacity` messages wait for one connection; memory per agent is bounded.
//! 2. Events never hold more than half of the queue: an event that finds it half full is
//!    dropped (counted), so responses always have room to queue behind events.
//! 3. A response that finds the queue full evicts the oldest queued event; if every slot
//!    holds a response the agent is a slow consumer: the queue closes and the connection is
//!    disconnected (counted). The bound is stated in [`crate::EmbeddedConfig::connection_queue_max`].
//! 4. Once closed, nothing more is queued.

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::Notify;

/// Whether a message answers a request or is an unsolicited event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// On `{prefix}/rsp/{agent}`: one per request, never dropped before events.
    Response,
    /// On `{prefix}/evt/{agent}`: a courtesy (PROTOCOL.md), dropped first under pressure.
    Event,
}

/// One message waiting for a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutMessage {
    /// Topic name.
    pub(crate) topic: String,
    /// Payload.
    pub(crate) payload: Bytes,
    /// MQTT 5 Correlation Data to echo (a response to a request that carried it).
    pub(crate) correlation_data: Option<Bytes>,
    /// Response or event.
    pub(crate) class: Class,
}

/// What [`OutQueue::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Push {
    /// Queued.
    Queued,
    /// Queued after evicting an older event (invariant 3).
    QueuedEvictingEvent,
    /// An event dropped: the queue is half full (invariant 2).
    EventDropped,
    /// The queue was full of responses: it is now closed and the connection goes.
    Overflow,
    /// The queue was closed already (the connection is ending).
    Closed,
}

#[derive(Debug, Default)]
struct State {
    messages: VecDeque<OutMessage>,
    closed: bool,
    /// Closed by a slow-consumer overflow (invariant 3), not by the connection ending.
    overflowed: bool,
}

/// A bounded queue of messages for one connection, filled by `Transport::publish*` from any
/// task and drained by the connection's own task.
#[derive(Debug)]
pub(crate) struct OutQueue {
    state: Mutex<State>,
    /// Wakes the connection task when a message is queued or the queue closes.
    pub(crate) ready: Notify,
    capacity: usize,
}

impl OutQueue {
    /// An empty queue holding at most `capacity` messages (at least 2).
    pub(crate) fn new(capacity: usize) -> OutQueue {
        OutQueue {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            capacity: capacity.max(2),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section is a push, a pop or a flag: a panic cannot leave it torn.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `message` under the policy in the module doc.
    pub(crate) fn push(&self, message: OutMessage) -> Push {
        let outcome = {
            let mut state = self.lock();
            if state.closed {
                return Push::Closed;
            }
            let len = state.messages.len();
            match message.class {
                Class::Event if len >= self.capacity / 2 => return Push::EventDropped,
                Class::Event => {
                    state.messages.push_back(message);
                    Push::Queued
                }
                Class::Response if len < self.capacity => {
                    state.messages.push_back(message);
                    Push::Queued
                }
                Class::Response => {
                    let oldest_event = state
                        .messages
                        .iter()
                        .position(|queued| queued.class == Class::Event);
                    match oldest_event {
                        Some(index) => {
                            state.messages.remove(index);
                            state.messages.push_back(message);
                            Push::QueuedEvictingEvent
                        }
                        None => {
                            state.closed = true;
                            state.overflowed = true;
                            state.messages.clear();
                            Push::Overflow
                        }
                    }
                }
            }
        };
        self.ready.notify_one();
        outcome
    }

    /// Takes the oldest message, if any.
    pub(crate) fn pop(&self) -> Option<OutMessage> {
        self.lock().messages.pop_front()
    }

    /// Whether a slow-consumer overflow closed the queue.
    pub(crate) fn overflowed(&self) -> bool {
        self.lock().overflowed
    }

    /// Closes the queue: later pushes get [`Push::Closed`]; queued messages stay for a final
    /// flush.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// Messages waiting now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().messages.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(class: Class, n: u8) -> OutMessage {
        OutMessage {
            topic: "hk/v1/rsp/a".to_string(),
            payload: Bytes::from(vec![n]),
            correlation_data: None,
            class,
        }
    }

    #[test]
    fn events_take_at_most_half_and_responses_evict_them() {
        let queue = OutQueue::new(4);
        assert_eq!(queue.push(message(Class::Event, 1)), Push::Queued);
        assert_eq!(queue.push(message(Class::Event, 2)), Push::Queued);
        assert_eq!(queue.push(message(Class::Event, 3)), Push::EventDropped);
        assert_eq!(queue.push(message(Class::Response, 4)), Push::Queued);
        assert_eq!(queue.push(message(Class::Response, 5)), Push::Queued);
        assert_eq!(queue.len(), 4);
        assert_eq!(
            queue.push(message(Class::Response, 6)),
            Push::QueuedEvictingEvent
        );
        assert_eq!(
            queue.pop().expect("queued").payload[0],
            2,
            "event 1 was evicted"
        );
    }

    #[test]
    fn a_queue_full_of_responses_overflows_and_closes() {
        let queue = OutQueue::new(2);
        assert_eq!(queue.push(message(Class::Response, 1)), Push::Queued);
        assert_eq!(queue.push(message(Class::Response, 2)), Push::Queued);
        assert_eq!(queue.push(message(Class::Response, 3)), Push::Overflow);
        assert!(queue.overflowed());
        assert_eq!(queue.push(message(Class::Response, 4)), Push::Closed);
        assert!(queue.pop().is_none());
    }
}
