//! [`Transport`]: the handle the bridge holds. Starts a backend (the agent endpoint or an
//! external broker's client), routes what the bridge publishes to it and counts what passes
//! through.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use hivekeeper_protocol::Topics;
use tokio::sync::{Mutex, mpsc};
use tracing::{info, warn};

use crate::config::{Config, Mode};
use crate::reply_route::ReplyRoute;
use crate::{MqttError, endpoint, external};

/// Most bytes an MQTT PUBLISH carries besides topic, payload and properties: the fixed header
/// (1 byte and a remaining length of up to 4), the topic's 2-byte length, the packet id and an
/// MQTT 5 property length. [`Transport::publish`] checks against [`Config::packet_bytes_max`]
/// with it, because rumqttc compares the whole packet with its outgoing limit and, when a
/// queued packet exceeds it, drops the connection rather than the packet.
const PUBLISH_OVERHEAD_BYTES: usize = 1 + 4 + 2 + 2 + 1;

/// One message received on `{prefix}/req/+`. The transport does not parse it: the bridge
/// decodes the payload and takes the agent id from the topic (`Topics::parse_request_topic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// The full topic, e.g. `hk/v1/req/drone-1`.
    pub topic: String,
    /// The payload as received, not copied.
    pub payload: Bytes,
    /// Where its answer goes: give it to [`Transport::publish_response`]. The default route
    /// (`{prefix}/rsp/{agent}`) unless an MQTT 5 request named a Response Topic or carried
    /// Correlation Data.
    pub route: ReplyRoute,
}

/// Which listener of the agent endpoint: the main one (`listen`) or the optional second one
/// (`listen_v5`). Both serve MQTT 3.1.1 and 5.0 alike (the version is read from each
/// CONNECT); the names stay from the rumqttd days, when each port served one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttVersion {
    /// The `listen` address.
    V311,
    /// The `listen_v5` address.
    V5,
}

/// One listener of the agent endpoint, as it is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerInfo {
    /// Protocol served.
    pub version: MqttVersion,
    /// Bound address (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    /// Whether TCP_NODELAY is set on every accepted socket (`tcp_nodelay` in the config).
    pub tcp_nodelay: bool,
}

/// Counters of the transport since start, for the node's metrics. A snapshot: each field is
/// read separately, so two fields can be a message apart. The `Endpoint:` fields stay 0 with
/// an external broker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages from `{prefix}/req/+` handed to the inbound queue.
    pub inbound_received_total: u64,
    /// Messages dropped because the inbound queue was full (the bridge is behind).
    pub inbound_dropped_total: u64,
    /// Messages dropped because their topic was not UTF-8 (never from a conforming broker).
    pub inbound_invalid_total: u64,
    /// Messages written to agents (endpoint) or handed to the broker (external).
    pub outbound_published_total: u64,
    /// [`Transport::publish`] calls refused because the outbound queue was full (external mode).
    pub outbound_rejected_total: u64,
    /// Successful connections: agents accepted by the endpoint, or ConnAcks from an external broker (reconnects are this minus one).
    pub connects_total: u64,
    /// Connection errors seen by the external client (each followed by a backoff delay).
    pub connection_errors_total: u64,
    /// Endpoint: sockets closed at accept because `connections_max` connections were open.
    pub connections_refused_total: u64,
    /// Endpoint: sockets closed at accept by the connect-rate limit.
    pub connects_rate_limited_total: u64,
    /// Endpoint: CONNECTs answered with a refusal (bad client id, unsupported protocol, credentials, shutting down).
    pub connects_refused_total: u64,
    /// Endpoint: sockets that sent no complete CONNECT within `connect_packet_timeout_ms`.
    pub connect_timeouts_total: u64,
    /// Endpoint with TLS: sockets closed because the TLS handshake failed or did not finish
    /// within `connect_packet_timeout_ms` (a plaintext client, an unknown or missing client
    /// certificate, a client certificate without a CN).
    pub tls_handshake_failures_total: u64,
    /// Endpoint: sockets closed by the peer before a complete CONNECT.
    pub connects_abandoned_total: u64,
    /// Endpoint: connections closed because the same client id connected again.
    pub takeovers_total: u64,
    /// Endpoint: connections closed after 1.5 x their keepalive without a packet.
    pub keepalive_timeouts_total: u64,
    /// Endpoint: connections closed because their outbound queue overflowed with responses or a write did not finish within `write_timeout_ms`.
    pub slow_consumer_disconnects_total: u64,
    /// Endpoint: connections closed because the codec refused a packet.
    pub malformed_packets_total: u64,
    /// Endpoint: connections closed because a packet exceeded `packet_bytes_max`.
    pub packets_too_large_total: u64,
    /// Endpoint: connections closed for a packet out of place (first packet not CONNECT, a second CONNECT, ...).
    pub protocol_errors_total: u64,
    /// Endpoint: PUBLISHes outside the agent's own request topic (or naming another Response Topic): refused, never routed.
    pub publishes_refused_total: u64,
    /// Endpoint: subscription filters other than the agent's own response and event topics: refused.
    pub subscribes_refused_total: u64,
    /// Endpoint: events dropped by an agent's full queue (events yield to responses).
    pub events_dropped_total: u64,
    /// Endpoint: messages for an agent that is not connected or not subscribed to the topic (dropped, as a broker would).
    pub outbound_unrouted_total: u64,
    /// Endpoint: messages over an MQTT 5 client's Maximum Packet Size (dropped).
    pub outbound_too_large_total: u64,
    /// Whether the broker connection is up (external) or the endpoint is listening.
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
    pub(crate) connections_refused_total: AtomicU64,
    pub(crate) connects_rate_limited_total: AtomicU64,
    pub(crate) connects_refused_total: AtomicU64,
    pub(crate) connect_timeouts_total: AtomicU64,
    pub(crate) tls_handshake_failures_total: AtomicU64,
    pub(crate) connects_abandoned_total: AtomicU64,
    pub(crate) takeovers_total: AtomicU64,
    pub(crate) keepalive_timeouts_total: AtomicU64,
    pub(crate) slow_consumer_disconnects_total: AtomicU64,
    pub(crate) malformed_packets_total: AtomicU64,
    pub(crate) packets_too_large_total: AtomicU64,
    pub(crate) protocol_errors_total: AtomicU64,
    pub(crate) publishes_refused_total: AtomicU64,
    pub(crate) subscribes_refused_total: AtomicU64,
    pub(crate) events_dropped_total: AtomicU64,
    pub(crate) outbound_unrouted_total: AtomicU64,
    pub(crate) outbound_too_large_total: AtomicU64,
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
            connections_refused_total: self.connections_refused_total.load(Ordering::Relaxed),
            connects_rate_limited_total: self.connects_rate_limited_total.load(Ordering::Relaxed),
            connects_refused_total: self.connects_refused_total.load(Ordering::Relaxed),
            connect_timeouts_total: self.connect_timeouts_total.load(Ordering::Relaxed),
            tls_handshake_failures_total: self.tls_handshake_failures_total.load(Ordering::Relaxed),
            connects_abandoned_total: self.connects_abandoned_total.load(Ordering::Relaxed),
            takeovers_total: self.takeovers_total.load(Ordering::Relaxed),
            keepalive_timeouts_total: self.keepalive_timeouts_total.load(Ordering::Relaxed),
            slow_consumer_disconnects_total: self
                .slow_consumer_disconnects_total
                .load(Ordering::Relaxed),
            malformed_packets_total: self.malformed_packets_total.load(Ordering::Relaxed),
            packets_too_large_total: self.packets_too_large_total.load(Ordering::Relaxed),
            protocol_errors_total: self.protocol_errors_total.load(Ordering::Relaxed),
            publishes_refused_total: self.publishes_refused_total.load(Ordering::Relaxed),
            subscribes_refused_total: self.subscribes_refused_total.load(Ordering::Relaxed),
            events_dropped_total: self.events_dropped_total.load(Ordering::Relaxed),
            outbound_unrouted_total: self.outbound_unrouted_total.load(Ordering::Relaxed),
            outbound_too_large_total: self.outbound_too_large_total.load(Ordering::Relaxed),
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
    /// Handled, and the sender is over its rate: read nothing more from it for this long.
    Pause(Duration),
}

/// Takes one received message on the task that read it (a connection's task, the external
/// client's event loop). It must not block: the bridge's handler decodes and submits to the
/// node, whose every step is a non-blocking send.
pub type InboundHandler = Arc<dyn Fn(Inbound) -> Flow + Send + Sync>;

/// What the handler asks of the connection a message came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on reading.
    Continue,
    /// The sender is over its request rate: read nothing more from it for this long. The
    /// agent endpoint obeys (backpressure: the flooder's own TCP window fills); the external
    /// broker's one connection carries every agent, so it ignores this.
    Pause(Duration),
}

/// Where the backends hand received messages: the bounded inbound queue, until a handler is
/// installed ([`Transport::deliver_to`]), then that handler, called on the receiving task.
#[derive(Clone)]
pub(crate) struct Inlet {
    /// The queue, read by whoever holds the receiver until a handler takes over.
    tx: mpsc::Sender<Inbound>,
    /// The handler, once installed; read-locked by every delivery, write-locked once.
    handler: Arc<RwLock<Option<InboundHandler>>>,
}

impl Inlet {
    /// An inlet on a queue of `capacity`, and the queue's receiver.
    fn new(capacity: usize) -> (Inlet, mpsc::Receiver<Inbound>) {
        let (tx, rx) = mpsc::channel(capacity);
        let inlet = Inlet {
            tx,
            handler: Arc::default(),
        };
        (inlet, rx)
    }
}

/// Fills `slot` with `handler` after handing it what `inbound` holds, with deliveries held back
/// meanwhile (the write lock): what was queued is handled first, in order.
fn install(
    slot: &RwLock<Option<InboundHandler>>,
    handler: InboundHandler,
    inbound: &mut mpsc::Receiver<Inbound>,
) {
    let mut slot = slot
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    while let Ok(queued) = inbound.try_recv() {
        handler(queued);
    }
    *slot = Some(handler);
}

/// Hands one received message to the handler, or to the inbound queue without waiting: a full
/// queue drops the message (counted) so the broker link never stalls behind a slow bridge.
pub(crate) fn deliver(
    inlet: &Inlet,
    counters: &Counters,
    topic: String,
    payload: Bytes,
    route: ReplyRoute,
) -> Delivery {
    let inbound = Inbound {
        topic,
        payload,
        route,
    };
    {
        let handler = inlet
            .handler
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handler) = handler.as_ref() {
            Counters::add(&counters.inbound_received_total);
            return match handler(inbound) {
                Flow::Continue => Delivery::Queued,
                Flow::Pause(wait) => Delivery::Pause(wait),
            };
        }
    }
    let inbound_tx = &inlet.tx;
    match inbound_tx.try_send(inbound) {
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
    Endpoint(endpoint::Running),
    External(external::Running),
}

/// Where publishes go.
enum OutboundPath {
    /// Straight into the agent's own queue on the endpoint.
    Endpoint(Arc<endpoint::Shared>),
    /// Through the transport's queue to the external client's publish task.
    External(mpsc::Sender<Outbound>),
}

struct Inner {
    topics: Topics,
    packet_bytes_max: usize,
    outbound: OutboundPath,
    /// Set at the start of shutdown so a publish racing it gets [`MqttError::Closed`] instead
    /// of queueing behind the stop marker and vanishing.
    closed: AtomicBool,
    counters: Arc<Counters>,
    listeners: Vec<ListenerInfo>,
    backend: Mutex<Option<Backend>>,
    /// The inlet's handler slot, filled by [`Transport::deliver_to`].
    handler: Arc<RwLock<Option<InboundHandler>>>,
}

/// The handle to a running MQTT transport. Cheap to clone: every clone publishes through the
/// same backend, and [`Transport::shutdown`] on any clone stops it for all.
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
    /// Validates `config`, starts the agent endpoint (embedded mode: its listeners are bound
    /// when this returns) or connects to the external broker and subscribes `{prefix}/req/+`,
    /// and returns once requests can flow: the handle and the receiver of every request.
    ///
    /// The receiver yields `None` once the transport has stopped ([`Transport::shutdown`]).
    pub async fn start(config: Config) -> Result<(Transport, mpsc::Receiver<Inbound>), MqttError> {
        Transport::start_with(config, None).await
    }

    /// [`Transport::start`], with authentication when `authenticator` is given: the agent
    /// endpoint then accepts a CONNECT only with the agent's credentials
    /// ([`Authenticator`](crate::Authenticator)). An external broker checks its own clients
    /// (its password file and ACLs), so there it is not used.
    pub async fn start_with(
        config: Config,
        authenticator: Option<Arc<dyn crate::Authenticator>>,
    ) -> Result<(Transport, mpsc::Receiver<Inbound>), MqttError> {
        config.validate()?;
        let topics = config.topics()?;
        let counters = Arc::new(Counters::default());
        let (inbound_tx, inbound_rx) = Inlet::new(config.inbound_capacity);
        let handler = inbound_tx.handler.clone();
        let (backend, outbound, listeners) = match &config.mode {
            Mode::Embedded(embedded_config) => {
                let (running, shared, listeners) = endpoint::start(
                    &config,
                    embedded_config,
                    &topics,
                    inbound_tx,
                    counters.clone(),
                    authenticator,
                )
                .await?;
                (
                    Backend::Endpoint(running),
                    OutboundPath::Endpoint(shared),
                    listeners,
                )
            }
            Mode::External(external_config) => {
                let (outbound_tx, outbound_rx) = mpsc::channel(config.outbound_capacity);
                let running = external::start(
                    &config,
                    external_config,
                    &topics,
                    inbound_tx,
                    outbound_rx,
                    counters.clone(),
                )
                .await?;
                (
                    Backend::External(running),
                    OutboundPath::External(outbound_tx),
                    Vec::new(),
                )
            }
        };
        let transport = Transport {
            inner: Arc::new(Inner {
                topics,
                packet_bytes_max: config.packet_bytes_max,
                outbound,
                closed: AtomicBool::new(false),
                counters,
                listeners,
                backend: Mutex::new(Some(backend)),
                handler,
            }),
        };
        Ok((transport, inbound_rx))
    }

    /// From now on hands every received message to `handler`, on the task that received it
    /// (a connection's task on the endpoint: a request goes from its socket's task straight
    /// into the node), instead of the inbound queue. Messages already queued go to `handler`
    /// first, in order, with deliveries held back meanwhile, so no agent's requests are
    /// reordered. `inbound` is the receiver [`Transport::start`] returned; it still yields
    /// `None` once the transport has stopped.
    pub fn deliver_to(&self, handler: InboundHandler, inbound: &mut mpsc::Receiver<Inbound>) {
        install(&self.inner.handler, handler, inbound);
    }

    /// Closes `agent`'s connection to the agent endpoint, if it has one (its account was
    /// removed or its secret rotated). Returns whether one was closed; always `false` with an
    /// external broker, whose clients this service does not hold.
    pub fn disconnect(&self, agent: &str) -> bool {
        match &self.inner.outbound {
            OutboundPath::Endpoint(shared) => shared.disconnect(agent),
            OutboundPath::External(_) => false,
        }
    }

    /// Publishes one message (a response on `{prefix}/rsp/{agent}` or an event on
    /// `{prefix}/evt/{agent}`) and returns at once; it never waits for a socket or a broker.
    ///
    /// Agent endpoint: the message goes into the agent's own bounded queue and its connection
    /// writes it at the QoS the agent subscribed with (at most 1). An agent that is not
    /// connected or not subscribed to the topic does not get it (counted in
    /// [`Stats::outbound_unrouted_total`]), as with any broker. External broker: queued for the
    /// publish task, QoS 1.
    ///
    /// Either way a lost response is recovered by the agent retrying the same request id,
    /// which returns the remembered outcome (DESIGN.md §2).
    ///
    /// Errors: [`MqttError::OutboundFull`] when the message was not queued (external: the
    /// transport's queue is full; endpoint: the agent is a slow consumer whose queue
    /// overflowed, and it is being disconnected), [`MqttError::InvalidTopic`],
    /// [`MqttError::PayloadTooLarge`], [`MqttError::Closed`] after shutdown.
    pub fn publish(
        &self,
        topic: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<(), MqttError> {
        self.send(topic.into(), payload.into(), None, 0)
    }

    /// Publishes the response to one request along its [`ReplyRoute`] (from
    /// [`Inbound::route`]): on `{prefix}/rsp/{agent}` by default, or on the MQTT 5 Response
    /// Topic with the request's Correlation Data. Otherwise as [`Transport::publish`].
    pub fn publish_response(
        &self,
        route: &ReplyRoute,
        agent: &str,
        payload: impl Into<Bytes>,
    ) -> Result<(), MqttError> {
        let topic = match route.response_topic() {
            Some(topic) => topic.to_string(),
            None => self.inner.topics.response(agent),
        };
        self.send(topic, payload.into(), route.correlation_data().cloned(), 0)
    }

    /// Like [`Transport::publish`], for an event. Events yield to responses when an agent or
    /// the transport falls behind, because events are a courtesy (docs/PROTOCOL.md: an agent
    /// learns of a lost lease from its next keepalive too) and a mass expiry must not crowd
    /// out the answers to keepalives:
    /// - agent endpoint: an event that finds the agent's queue half full is dropped
    ///   ([`MqttError::OutboundFull`], counted in [`Stats::events_dropped_total`]), and a
    ///   response evicts a queued event before it would overflow the queue;
    /// - external broker: refused once the transport's queue is three quarters full, so the
    ///   last quarter stays for responses.
    pub fn publish_event(
        &self,
        topic: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<(), MqttError> {
        let reserved = match &self.inner.outbound {
            OutboundPath::Endpoint(_) => 0,
            OutboundPath::External(outbound_tx) => outbound_tx.max_capacity() / 4,
        };
        self.send(topic.into(), payload.into(), None, reserved)
    }

    /// Checks and routes one message; on the external path, queues it if more than
    /// `reserved` slots are free.
    fn send(
        &self,
        topic: String,
        payload: Bytes,
        correlation_data: Option<Bytes>,
        reserved: usize,
    ) -> Result<(), MqttError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(MqttError::Closed);
        }
        check_topic_name(&topic)?;
        let properties = correlation_data.as_ref().map_or(0, |data| data.len() + 3);
        let bytes = topic.len() + payload.len() + properties + PUBLISH_OVERHEAD_BYTES;
        if bytes > self.inner.packet_bytes_max {
            return Err(MqttError::PayloadTooLarge {
                topic,
                bytes,
                bytes_max: self.inner.packet_bytes_max,
            });
        }
        let outbound_tx = match &self.inner.outbound {
            OutboundPath::Endpoint(shared) => {
                return shared.route(topic, payload, correlation_data);
            }
            OutboundPath::External(outbound_tx) => outbound_tx,
        };
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

    /// The largest response payload [`Transport::publish_response`] takes for `agent` along
    /// `route` (its topic and Correlation Data count against the packet limit).
    pub fn response_payload_bytes_max(&self, route: &ReplyRoute, agent: &str) -> usize {
        let topic_len = match route.response_topic() {
            Some(topic) => topic.len(),
            None => self.inner.topics.response(agent).len(),
        };
        self.inner
            .packet_bytes_max
            .saturating_sub(topic_len + route.overhead_bytes() + PUBLISH_OVERHEAD_BYTES)
    }

    /// The topics under the configured prefix.
    pub fn topics(&self) -> &Topics {
        &self.inner.topics
    }

    /// The agent endpoint's listeners as bound (empty in external mode).
    pub fn listeners(&self) -> &[ListenerInfo] {
        &self.inner.listeners
    }

    /// Agents connected to the endpoint now (connections past CONNACK); `None` with an
    /// external broker, which alone knows its clients.
    pub fn connected_clients(&self) -> Option<u64> {
        match &self.inner.outbound {
            OutboundPath::Endpoint(shared) => Some(shared.connected() as u64),
            OutboundPath::External(_) => None,
        }
    }

    /// A snapshot of the transport's counters.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// Stops the transport. Endpoint: closes the listeners (the port is free again), then
    /// every connection writes what its queue holds, says goodbye (MQTT 5: DISCONNECT 0x8B)
    /// and closes. External: flushes the queued messages and leaves the broker with an MQTT
    /// DISCONNECT. Then the inbound receiver yields `None`. Idempotent; later publishes get
    /// [`MqttError::Closed`].
    pub async fn shutdown(&self) -> Result<(), MqttError> {
        self.inner.closed.store(true, Ordering::Release);
        let Some(backend) = self.inner.backend.lock().await.take() else {
            return Ok(());
        };
        let result = match (backend, &self.inner.outbound) {
            (Backend::Endpoint(running), _) => running.shutdown().await,
            (Backend::External(running), OutboundPath::External(outbound_tx)) => {
                running.shutdown(outbound_tx).await
            }
            // `start` never pairs the external backend with the endpoint's path.
            (Backend::External(_), OutboundPath::Endpoint(_)) => Ok(()),
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
/// (MQTT 3.1.1 §4.7). Checked before anything is queued, so a bad name is the caller's
/// error at once rather than a dropped connection later.
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
    fn a_handler_gets_the_queued_messages_first_then_every_delivery_in_order() {
        let counters = Counters::default();
        let (inlet, mut inbound_rx) = Inlet::new(8);
        let deliver_one = |topic: &str| {
            deliver(
                &inlet,
                &counters,
                topic.into(),
                Bytes::from_static(b"{}"),
                ReplyRoute::default(),
            )
        };
        assert_eq!(deliver_one("a"), Delivery::Queued);
        assert_eq!(deliver_one("b"), Delivery::Queued);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handler: InboundHandler = {
            let seen = seen.clone();
            Arc::new(move |inbound: Inbound| {
                seen.lock().expect("test lock").push(inbound.topic);
                Flow::Continue
            })
        };
        install(&inlet.handler, handler, &mut inbound_rx);
        assert_eq!(deliver_one("c"), Delivery::Queued);
        assert_eq!(*seen.lock().expect("test lock"), ["a", "b", "c"]);
        assert!(inbound_rx.try_recv().is_err(), "nothing is queued any more");
        assert_eq!(counters.inbound_received_total.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_full_inbound_queue_drops_and_counts_then_recovers() {
        let counters = Counters::default();
        let (inbound_tx, mut inbound_rx) = Inlet::new(1);
        let payload = Bytes::from_static(b"{}");
        assert_eq!(
            deliver(
                &inbound_tx,
                &counters,
                "a".into(),
                payload.clone(),
                ReplyRoute::default()
            ),
            Delivery::Queued
        );
        assert_eq!(
            deliver(
                &inbound_tx,
                &counters,
                "b".into(),
                payload.clone(),
                ReplyRoute::default()
            ),
            Delivery::Dropped
        );
        assert!(counters.inbound_dropping.load(Ordering::Relaxed));
        assert_eq!(inbound_rx.try_recv().expect("first is queued").topic, "a");
        assert_eq!(
            deliver(
                &inbound_tx,
                &counters,
                "c".into(),
                payload.clone(),
                ReplyRoute::default()
            ),
            Delivery::Queued
        );
        assert!(!counters.inbound_dropping.load(Ordering::Relaxed));
        let stats = counters.snapshot();
        assert_eq!(stats.inbound_received_total, 2);
        assert_eq!(stats.inbound_dropped_total, 1);
        drop(inbound_rx);
        assert_eq!(
            deliver(
                &inbound_tx,
                &counters,
                "d".into(),
                payload,
                ReplyRoute::default()
            ),
            Delivery::ReceiverGone
        );
    }
}
