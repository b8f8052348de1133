//! [`Transport`]: the handle the bridge holds. Starts a backend (embedded or external), owns
//! the outbound queue and counts what passes through.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use hivekeeper_protocol::Topics;
use tokio::sync::{Mutex, mpsc};
use tracing::{info, warn};

use crate::config::{Config, Mode};
use crate::{MqttError, embedded, external};

/// Most bytes an MQTT PUBLISH carries besides topic and payload: the fixed header (1 byte and
/// a remaining length of up to 4), the topic's 2-byte length, the packet id and an MQTT 5
/// property length. [`Transport::publish`] checks against [`Config::packet_bytes_max`] with
/// it, because rumqttc compares the whole packet with its outgoing limit and, when a queued
/// packet exceeds it, drops the connection rather than the packet.
const PUBLISH_OVERHEAD_BYTES: usize = 1 + 4 + 2 + 2 + 1;

/// One message received on `{prefix}/req/+`. The transport does not parse it: the bridge
/// decodes the payload and takes the agent id from the topic (`Topics::parse_request_topic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// The full topic, e.g. `hk/v1/req/drone-1`.
    pub topic: String,
    /// The payload as received, not copied.
    pub payload: Bytes,
}

/// The MQTT protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttVersion {
    /// MQTT 3.1.1 (rumqttd's "v4").
    V311,
    /// MQTT 5.
    V5,
}

/// One listener of the embedded broker, as it is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerInfo {
    /// Protocol served.
    pub version: MqttVersion,
    /// Bound address (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    /// Whether TCP_NODELAY was read back as set on the listening socket (so accepted sockets
    /// inherit it). `false` when disabled in the config or when it could not be set; the
    /// reason is logged at start.
    pub tcp_nodelay: bool,
}

/// Counters of the transport since start, for the node's metrics. A snapshot: each field is
/// read separately, so two fields can be a message apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages from `{prefix}/req/+` handed to the inbound queue.
    pub inbound_received_total: u64,
    /// Messages dropped because the inbound queue was full (the bridge is behind).
    pub inbound_dropped_total: u64,
    /// Messages dropped because their topic was not UTF-8 (never from a conforming broker).
    pub inbound_invalid_total: u64,
    /// Messages handed to the broker by the outbound side.
    pub outbound_published_total: u64,
    /// [`Transport::publish`] calls refused because the outbound queue was full.
    pub outbound_rejected_total: u64,
    /// Successful connections to the broker: 1 for the embedded link, one per ConnAck for an
    /// external broker (so reconnects are this minus one).
    pub connects_total: u64,
    /// Connection errors seen by the external client (each followed by a backoff delay).
    pub connection_errors_total: u64,
    /// Times the embedded broker paused the transport's link because 200 messages were
    /// waiting, and the link woke it again (`Notification::Unschedule`).
    pub link_unschedules_total: u64,
    /// Whether the broker connection is up right now.
    pub connected: bool,
}

/// Live counters shared by the backend tasks; [`Stats`] is their snapshot.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) inbound_received_total: AtomicU64,
    pub(crate) inbound_dropped_total: AtomicU64,
    pub(crate) inbound_invalid_total: AtomicU64,
    pub(crate) outbound_published_total: AtomicU64,
    pub(crate) outbound_rejected_total: AtomicU64,
    pub(crate) connects_total: AtomicU64,
    pub(crate) connection_errors_total: AtomicU64,
    pub(crate) link_unschedules_total: AtomicU64,
    pub(crate) connected: AtomicBool,
    /// Set while the inbound queue is full, so the drop is logged once per episode rather than
    /// once per message.
    pub(crate) inbound_dropping: AtomicBool,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Stats {
        Stats {
            inbound_received_total: self.inbound_received_total.load(Ordering::Relaxed),
            inbound_dropped_total: self.inbound_dropped_total.load(Ordering::Relaxed),
            inbound_invalid_total: self.inbound_invalid_total.load(Ordering::Relaxed),
            outbound_published_total: self.outbound_published_total.load(Ordering::Relaxed),
            outbound_rejected_total: self.outbound_rejected_total.load(Ordering::Relaxed),
            connects_total: self.connects_total.load(Ordering::Relaxed),
            connection_errors_total: self.connection_errors_total.load(Ordering::Relaxed),
            link_unschedules_total: self.link_unschedules_total.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
        }
    }
}

/// What the outbound queue carries to the backend's publisher.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// Publish this message.
    Publish {
        /// Topic name.
        topic: String,
        /// Payload.
        payload: Bytes,
    },
    /// Publish what was queued before, then stop: sent by [`Transport::shutdown`], so queued
    /// responses are flushed rather than dropped.
    Stop,
}

/// What happened to one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// In the inbound queue.
    Queued,
    /// Dropped and counted (queue full or topic not UTF-8).
    Dropped,
    /// The inbound receiver is gone: nobody will ever read, the backend may stop receiving.
    ReceiverGone,
}

/// Hands one received message to the inbound queue without waiting: a full queue drops the
/// message (counted) so the broker link never stalls behind a slow bridge.
pub(crate) fn deliver(
    inbound_tx: &mpsc::Sender<Inbound>,
    counters: &Counters,
    topic: String,
    payload: Bytes,
) -> Delivery {
    match inbound_tx.try_send(Inbound { topic, payload }) {
        Ok(()) => {
            Counters::add(&counters.inbound_received_total);
            if counters.inbound_dropping.swap(false, Ordering::Relaxed) {
                info!(
                    dropped_total = counters.inbound_dropped_total.load(Ordering::Relaxed),
                    "inbound queue has room again"
                );
            }
            Delivery::Queued
        }
        Err(mpsc::error::TrySendError::Full(message)) => {
            Counters::add(&counters.inbound_dropped_total);
            if !counters.inbound_dropping.swap(true, Ordering::Relaxed) {
                warn!(
                    topic = %message.topic,
                    capacity = inbound_tx.max_capacity(),
                    "inbound queue full: the bridge is behind, dropping requests until it \
                     catches up (agents retry with the same id)"
                );
            }
            Delivery::Dropped
        }
        Err(mpsc::error::TrySendError::Closed(_)) => Delivery::ReceiverGone,
    }
}

/// The running backend, taken out by [`Transport::shutdown`].
enum Backend {
    Embedded(embedded::Running),
    External(external::Running),
}

struct Inner {
    topics: Topics,
    packet_bytes_max: usize,
    outbound_tx: mpsc::Sender<Outbound>,
    /// Set at the start of shutdown so a publish racing it gets [`MqttError::Closed`] instead
    /// of queueing behind the stop marker and vanishing.
    closed: AtomicBool,
    counters: Arc<Counters>,
    listeners: Vec<ListenerInfo>,
    backend: Mutex<Option<Backend>>,
}

/// The handle to a running MQTT transport. Cheap to clone: every clone publishes into the same
/// outbound queue, and [`Transport::shutdown`] on any clone stops it for all.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("prefix", &self.inner.topics.prefix())
            .field("listeners", &self.inner.listeners)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Transport {
    /// Validates `config`, starts the broker (embedded) or connects to it (external),
    /// subscribes `{prefix}/req/+` and returns once requests can flow: the handle and the
    /// receiver of everything published on the request filter.
    ///
    /// The receiver yields `None` once the transport has stopped: after [`Transport::shutdown`],
    /// or if the embedded broker's router or a listener died (logged as an error). A node
    /// treats that as fatal.
    pub async fn start(config: Config) -> Result<(Transport, mpsc::Receiver<Inbound>), MqttError> {
        config.validate()?;
        let topics = config.topics()?;
        let counters = Arc::new(Counters::default());
        let (inbound_tx, inbound_rx) = mpsc::channel(config.inbound_capacity);
        let (outbound_tx, outbound_rx) = mpsc::channel(config.outbound_capacity);
        let (backend, listeners) = match &config.mode {
            Mode::Embedded(embedded_config) => {
                let (running, listeners) = embedded::start(
                    &config,
                    embedded_config,
                    &topics,
                    inbound_tx,
                    outbound_rx,
                    counters.clone(),
                )
                .await?;
                (Backend::Embedded(running), listeners)
            }
            Mode::External(external_config) => {
                let running = external::start(
                    &config,
                    external_config,
                    &topics,
                    inbound_tx,
                    outbound_rx,
                    counters.clone(),
                )
                .await?;
                (Backend::External(running), Vec::new())
            }
        };
        let transport = Transport {
            inner: Arc::new(Inner {
                topics,
                packet_bytes_max: config.packet_bytes_max,
                outbound_tx,
                closed: AtomicBool::new(false),
                counters,
                listeners,
                backend: Mutex::new(Some(backend)),
            }),
        };
        Ok((transport, inbound_rx))
    }

    /// Queues one message for publication (a response on `{prefix}/rsp/{agent}` or an event
    /// on `{prefix}/evt/{agent}`) and returns at once; it never waits for the broker.
    ///
    /// Delivery: QoS 1 to an external broker; QoS 0 into the embedded broker, because a
    /// rumqttd local link can only publish QoS 0. The broker then forwards at the agent's
    /// subscription QoS, and the hop into it is in-process, so nothing is lost there; a
    /// response lost on a dropped agent connection is recovered by the agent retrying the
    /// same request id, which returns the remembered outcome (DESIGN.md §2).
    ///
    /// Errors: [`MqttError::OutboundFull`] when the queue is full (count it; the message was
    /// not queued), [`MqttError::InvalidTopic`], [`MqttError::PayloadTooLarge`],
    /// [`MqttError::Closed`] after shutdown.
    pub fn publish(
        &self,
        topic: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<(), MqttError> {
        self.enqueue(topic.into(), payload.into(), 0)
    }

    /// Like [`Transport::publish`], for an event: refused with [`MqttError::OutboundFull`]
    /// once the queue is three quarters full, so the last quarter stays for responses. A mass
    /// expiry (thousands of `lease.expired` at once) then cannot crowd out the answers to
    /// keepalives, which is what turned an overload into a collapse (docs/BENCHMARKS.md,
    /// "scale"). Events are a courtesy (docs/PROTOCOL.md): an agent learns of a lost lease from
    /// its next keepalive too.
    pub fn publish_event(
        &self,
        topic: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<(), MqttError> {
        let reserved = self.inner.outbound_tx.max_capacity() / 4;
        self.enqueue(topic.into(), payload.into(), reserved)
    }

    /// Queues one message if more than `reserved` slots are free.
    fn enqueue(&self, topic: String, payload: Bytes, reserved: usize) -> Result<(), MqttError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(MqttError::Closed);
        }
        check_topic_name(&topic)?;
        let bytes = topic.len() + payload.len() + PUBLISH_OVERHEAD_BYTES;
        if bytes > self.inner.packet_bytes_max {
            return Err(MqttError::PayloadTooLarge {
                topic,
                bytes,
                bytes_max: self.inner.packet_bytes_max,
            });
        }
        let outbound_tx = &self.inner.outbound_tx;
        let full = |topic| {
            Counters::add(&self.inner.counters.outbound_rejected_total);
            Err(MqttError::OutboundFull {
                topic,
                capacity: outbound_tx.max_capacity() - reserved,
            })
        };
        if outbound_tx.capacity() <= reserved {
            return full(topic);
        }
        match outbound_tx.try_send(Outbound::Publish { topic, payload }) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(Outbound::Publish { topic, .. })) => full(topic),
            Err(_) => Err(MqttError::Closed),
        }
    }

    /// The largest payload one message to `topic` may carry ([`Config::packet_bytes_max`] less
    /// the topic and the PUBLISH header): [`Transport::publish`] refuses more.
    pub fn payload_bytes_max(&self, topic: &str) -> usize {
        self.inner
            .packet_bytes_max
            .saturating_sub(topic.len() + PUBLISH_OVERHEAD_BYTES)
    }

    /// The topics under the configured prefix.
    pub fn topics(&self) -> &Topics {
        &self.inner.topics
    }

    /// The embedded broker's listeners as bound (empty in external mode).
    pub fn listeners(&self) -> &[ListenerInfo] {
        &self.inner.listeners
    }

    /// MQTT clients connected to the embedded broker now (established TCP connections on its
    /// listeners, from the kernel: rumqttd reports none); `None` with an external broker, or
    /// where the kernel's socket table cannot be read.
    pub fn connected_clients(&self) -> Option<u64> {
        let ports: Vec<u16> = self.listeners().iter().map(|l| l.addr.port()).collect();
        if ports.is_empty() {
            return None;
        }
        crate::connections::established_on(&ports)
    }

    /// A snapshot of the transport's counters.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// Stops the transport: flushes the messages already queued for publication, leaves the
    /// broker cleanly (an MQTT DISCONNECT), stops receiving (the inbound receiver then yields
    /// `None`) and, in embedded mode, closes the listeners and every client connection, which
    /// frees the port. Idempotent; later [`Transport::publish`] calls get
    /// [`MqttError::Closed`].
    ///
    /// Limit: rumqttd 0.20 has no way to stop its router thread (rumqtt#771), so after an
    /// embedded shutdown one idle thread remains until the process exits.
    pub async fn shutdown(&self) -> Result<(), MqttError> {
        self.inner.closed.store(true, Ordering::Release);
        let Some(backend) = self.inner.backend.lock().await.take() else {
            return Ok(());
        };
        let result = match backend {
            Backend::Embedded(running) => running.shutdown(&self.inner.outbound_tx).await,
            Backend::External(running) => running.shutdown(&self.inner.outbound_tx).await,
        };
        self.inner
            .counters
            .connected
            .store(false, Ordering::Relaxed);
        info!("MQTT transport stopped");
        result
    }
}

/// MQTT topic names (not filters) must be non-empty and free of wildcards and NUL
/// (MQTT 3.1.1 §4.7). rumqttc checks this itself but a rumqttd local link does not, and a
/// wildcard in a published name would corrupt the embedded router's topic matching.
fn check_topic_name(topic: &str) -> Result<(), MqttError> {
    let reason = if topic.is_empty() {
        "an empty topic name"
    } else if topic.contains(['+', '#']) {
        "wildcards + and # are not allowed in a topic name"
    } else if topic.contains('\0') {
        "NUL is not allowed in a topic name"
    } else if topic.len() > usize::from(u16::MAX) {
        "a topic name is at most 65535 bytes"
    } else {
        return Ok(());
    };
    Err(MqttError::InvalidTopic {
        topic: topic.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_with_wildcards_or_empty_are_refused() {
        assert!(check_topic_name("hk/v1/rsp/drone-1").is_ok());
        for bad in ["", "hk/v1/rsp/+", "hk/#", "hk/\0"] {
            assert!(
                matches!(check_topic_name(bad), Err(MqttError::InvalidTopic { .. })),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn a_full_inbound_queue_drops_and_counts_then_recovers() {
        let counters = Counters::default();
        let (inbound_tx, mut inbound_rx) = mpsc::channel(1);
        let payload = Bytes::from_static(b"{}");
        assert_eq!(
            deliver(&inbound_tx, &counters, "a".into(), payload.clone()),
            Delivery::Queued
        );
        assert_eq!(
            deliver(&inbound_tx, &counters, "b".into(), payload.clone()),
            Delivery::Dropped
        );
        assert!(counters.inbound_dropping.load(Ordering::Relaxed));
        assert_eq!(inbound_rx.try_recv().expect("first is queued").topic, "a");
        assert_eq!(
            deliver(&inbound_tx, &counters, "c".into(), payload.clone()),
            Delivery::Queued
        );
        assert!(!counters.inbound_dropping.load(Ordering::Relaxed));
        let stats = counters.snapshot();
        assert_eq!(stats.inbound_received_total, 2);
        assert_eq!(stats.inbound_dropped_total, 1);
        drop(inbound_rx);
        assert_eq!(
            deliver(&inbound_tx, &counters, "d".into(), payload),
            Delivery::ReceiverGone
        );
    }
}
