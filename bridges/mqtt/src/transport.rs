//! [`Transport`]: the handle the service holds. Starts a backend (the agent endpoint or an
//! external broker's client) that hands every request to the [`InboundHandler`] it was given,
//! and routes what the service publishes to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hivekeeper_protocol::Topics;
use metrics::gauge;
use tokio::sync::{Mutex, mpsc};
use tracing::info;

use crate::config::{Config, Mode};
use crate::reply_route::ReplyRoute;
use crate::{MqttError, endpoint, external, transport_metrics};

/// Most bytes an MQTT PUBLISH carries besides topic, payload and properties: the fixed header
/// (1 byte and a remaining length of up to 4), the topic's 2-byte length, the packet id and an
/// MQTT 5 property length. [`Transport::publish`] checks against [`Config::packet_bytes_max`]
/// with it, because rumqttc compares the whole packet with its outgoing limit and, when a
/// queued packet exceeds it, drops the connection rather than the packet.
const PUBLISH_OVERHEAD_BYTES: usize = 1 + 4 + 2 + 2 + 1;

/// One request received from an agent on its request topic (`{prefix}/req/{agent}`). The
/// transport does not parse the payload: the handler decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// The agent that sent it: the authenticated client id of its connection on the agent
    /// endpoint, or the last level of the topic with an external broker.
    pub agent: String,
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

/// The node's side of the transport: takes every request the transport receives, on the task
/// that received it (an endpoint connection's task, so a request goes from its socket straight
/// to the node; the external client's event loop). It must not block: the service's handler
/// decodes and submits to the node, whose every step is a non-blocking send. `transport` is
/// the transport the request came through, to answer along [`Inbound::route`].
pub trait InboundHandler: Send + Sync + 'static {
    /// Takes one request; says whether to go on reading from its sender's connection.
    fn handle(&self, transport: &Transport, inbound: Inbound) -> Flow;
}

/// What the handler asks of the connection a message came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on reading.
    Continue,
    /// The sender is over its request rate: read nothing more from it for this long. The
    /// agent endpoint obeys (backpressure: the flooder's own TCP window fills); the external
    /// broker's one connection carries every agent, so the external client drops that agent's
    /// requests until then instead.
    Pause(Duration),
}

/// Where the backends hand received requests: the handler, with the transport to answer
/// through. Cloned into every endpoint connection and the external client's event loop.
#[derive(Clone)]
pub(crate) struct Inlet {
    /// The handler [`Transport::start`] was given.
    handler: Arc<dyn InboundHandler>,
    /// The transport, passed to the handler with each request.
    transport: Transport,
}

impl Inlet {
    /// Hands one request from `agent` to the handler.
    pub(crate) fn deliver(&self, agent: String, payload: Bytes, route: ReplyRoute) -> Flow {
        let inbound = Inbound {
            agent,
            payload,
            route,
        };
        self.handler.handle(&self.transport, inbound)
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
    listeners: Vec<ListenerInfo>,
    /// Filled once the backend runs; taken by [`Transport::shutdown`].
    backend: Mutex<Option<Backend>>,
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
            .finish()
    }
}

impl Transport {
    /// Validates `config`, starts the agent endpoint (embedded mode: its listeners are bound
    /// when this returns) or connects to the external broker and subscribes `{prefix}/req/+`,
    /// and returns once requests can flow. Every request received from then on goes to
    /// `handler`, on the task that received it, until [`Transport::shutdown`].
    pub async fn start(
        config: Config,
        handler: Arc<dyn InboundHandler>,
    ) -> Result<Transport, MqttError> {
        Transport::start_with(config, handler, None).await
    }

    /// [`Transport::start`], with authentication when `authenticator` is given: the agent
    /// endpoint then accepts a CONNECT only with the agent's credentials
    /// ([`Authenticator`](crate::Authenticator)). An external broker checks its own clients
    /// (its password file and ACLs), so there it is not used.
    pub async fn start_with(
        config: Config,
        handler: Arc<dyn InboundHandler>,
        authenticator: Option<Arc<dyn crate::Authenticator>>,
    ) -> Result<Transport, MqttError> {
        config.validate()?;
        let topics = config.topics()?;
        transport_metrics::export_at_zero();
        // The transport exists before its backend serves: the handler answers through it
        // from the first request on.
        let new = |outbound, listeners| Transport {
            inner: Arc::new(Inner {
                topics: topics.clone(),
                packet_bytes_max: config.packet_bytes_max,
                outbound,
                closed: AtomicBool::new(false),
                listeners,
                backend: Mutex::new(None),
            }),
        };
        let (transport, backend) = match &config.mode {
            Mode::Embedded(embedded_config) => {
                let bound =
                    endpoint::bind(&config, embedded_config, &topics, authenticator).await?;
                let transport = new(
                    OutboundPath::Endpoint(bound.shared()),
                    bound.listeners().to_vec(),
                );
                let inlet = Inlet {
                    handler,
                    transport: transport.clone(),
                };
                (transport, Backend::Endpoint(bound.serve(inlet)))
            }
            Mode::External(external_config) => {
                let (outbound_tx, outbound_rx) = mpsc::channel(config.outbound_capacity);
                let transport = new(OutboundPath::External(outbound_tx), Vec::new());
                let inlet = Inlet {
                    handler,
                    transport: transport.clone(),
                };
                let running =
                    external::start(&config, external_config, &topics, inlet, outbound_rx).await?;
                (transport, Backend::External(running))
            }
        };
        *transport.inner.backend.lock().await = Some(backend);
        Ok(transport)
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
    /// `hivekeeper_endpoint_outbound_unrouted_total`), as with any broker. External broker:
    /// queued for the publish task, QoS 1.
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
    ///   ([`MqttError::OutboundFull`], counted in `hivekeeper_endpoint_events_dropped_total`),
    ///   and a
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

    /// Stops the transport. Endpoint: closes the listeners (the port is free again), then
    /// every connection writes what its queue holds, says goodbye (MQTT 5: DISCONNECT 0x8B)
    /// and closes. External: flushes the queued messages and leaves the broker with an MQTT
    /// DISCONNECT. The handler gets nothing more. Idempotent; later publishes get
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
        gauge!(transport_metrics::CONNECTED).set(0.0);
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
}
