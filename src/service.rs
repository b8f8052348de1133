//! [`Service`]: one node with its MQTT transport and the bridge between them.
//!
//! `hivekeeper serve` wraps this with configuration loading, the Prometheus endpoint and
//! signal handling; the `drone-fleet` example starts it in-process on a temporary data dir.
//! Both therefore run the same assembly, in the same order.

use std::net::SocketAddr;
use std::time::Duration;

use hivekeeper_coordinator::node::{Node, NodeConfig, NodeError};
use hivekeeper_mqtt::bridge;
use hivekeeper_mqtt::{Authenticator, MqttError, Transport};
use tokio::task::JoinHandle;

/// How long [`Service::shutdown`] waits for the bridge to drain after the transport closed.
const BRIDGE_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the service could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The node did not start (data dir unusable, foreign data file, bad settings).
    #[error("starting the node on data dir {data_dir}")]
    Node {
        /// The data dir the node was given.
        data_dir: String,
        /// What the node reported.
        #[source]
        source: NodeError,
    },
    /// The MQTT side did not start (a taken port, an unreachable external broker). The node
    /// that had started is shut down again before this is returned.
    #[error("starting MQTT")]
    Mqtt(#[source] MqttError),
    /// The node did not stop cleanly.
    #[error("stopping the node")]
    Stop(#[source] NodeError),
}

/// A running node, its transport and its bridge.
pub struct Service {
    /// The node: Raft on redb and its actors.
    node: Node,
    /// The MQTT transport (embedded broker or external client) the bridge publishes through.
    transport: Transport,
    /// The bridge task: decodes requests, submits them, publishes answers and events.
    bridge: JoinHandle<()>,
    /// The task copying the transport's counters into `metrics` once a second.
    exporter: JoinHandle<()>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("listeners", &self.transport.listeners())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Starts the node, then the transport, then the bridge between them. The caller has
    /// validated both configs (and installed a metrics recorder first, if it wants metrics:
    /// without one the metric updates are no-ops).
    pub async fn start(
        node: NodeConfig,
        mqtt: hivekeeper_mqtt::Config,
    ) -> Result<Service, ServiceError> {
        let data_dir = node.data_dir.display().to_string();
        let auth_enabled = node.auth_enabled;
        let (node, outbound) = Node::start(node)
            .await
            .map_err(|source| ServiceError::Node { data_dir, source })?;
        // With authentication on, the agent endpoint checks each CONNECT with the node.
        let authenticator = auth_enabled
            .then(|| std::sync::Arc::new(node.handle()) as std::sync::Arc<dyn Authenticator>);
        let (transport, inbound) = match Transport::start_with(mqtt, authenticator).await {
            Ok(started) => started,
            Err(error) => {
                let _ = node.shutdown().await;
                return Err(ServiceError::Mqtt(error));
            }
        };
        let bridge = tokio::spawn(bridge::run(
            transport.clone(),
            inbound,
            node.handle(),
            outbound,
        ));
        let exporter = tokio::spawn(export_counters(transport.clone()));
        Ok(Service {
            node,
            transport,
            bridge,
            exporter,
        })
    }

    /// The embedded broker's listening addresses, with the real port when port 0 was asked
    /// for; empty with an external broker.
    pub fn mqtt_addrs(&self) -> Vec<SocketAddr> {
        self.transport
            .listeners()
            .iter()
            .map(|listener| listener.addr)
            .collect()
    }

    /// The node's health now (`/health`, `/ready` on the metrics port).
    pub fn health(&self) -> hivekeeper_coordinator::node::Health {
        self.node.handle().health()
    }

    /// Resolves with the reason when an actor of the node fails; the service should then stop.
    pub async fn failed(&self) -> String {
        self.node.failed().await
    }

    /// The panic that stopped the node's state machine, if an apply panicked (`serve` then
    /// exits with [`hivekeeper_coordinator::raft::EXIT_APPLY_PANICKED`]).
    pub fn apply_panic(&self) -> Option<hivekeeper_coordinator::raft::ApplyPanic> {
        self.node.apply_panic()
    }

    /// Stops the transport (no more requests), gives the bridge a moment to drain, then stops
    /// the node.
    pub async fn shutdown(self) -> Result<(), ServiceError> {
        self.exporter.abort();
        let _ = self.transport.shutdown().await;
        let _ = tokio::time::timeout(BRIDGE_DRAIN_TIMEOUT, self.bridge).await;
        self.node.shutdown().await.map_err(ServiceError::Stop)
    }
}

/// How often the connected-clients gauge is updated.
const CLIENTS_SCAN_EVERY: Duration = Duration::from_secs(5);

/// Copies the transport's counters into Prometheus once a second (the transport counts in
/// atomics of its own), and the connected-clients count every [`CLIENTS_SCAN_EVERY`].
/// Everything else is updated where it happens: requests in the bridge, leases and resources
/// in the node's fan-out, Raft in the node's Raft exporter.
///
/// The bridge used to keep a `BridgeStats` of its own, copied here as
/// `hivekeeper_bridge_*_total`: each of those facts already had a name
/// (`hivekeeper_mqtt_bad_requests_total`, `hivekeeper_mqtt_bad_topics_total`,
/// `hivekeeper_requests_total{code="unavailable"}`, the sum of `hivekeeper_requests_total` for
/// the submitted ones), or now has one where it happens (`hivekeeper_mqtt_publish_failed_total`):
/// one name per fact, and the struct is gone.
async fn export_counters(transport: Transport) {
    // With the agent endpoint a message on a topic that names no agent never reaches the
    // bridge (refused as `hivekeeper_endpoint_publishes_refused_total`): export the bridge's
    // counter at 0 so dashboards show 0 rather than "no data".
    metrics::counter!("hivekeeper_mqtt_bad_topics_total").increment(0);
    let mut counters = tokio::time::interval(Duration::from_secs(1));
    let mut clients = tokio::time::interval(CLIENTS_SCAN_EVERY);
    loop {
        tokio::select! {
            _ = counters.tick() => {
                let mqtt = transport.stats();
                metrics::counter!("hivekeeper_mqtt_messages_in_total")
                    .absolute(mqtt.inbound_received_total);
                metrics::counter!("hivekeeper_mqtt_messages_dropped_total")
                    .absolute(mqtt.inbound_dropped_total);
                metrics::counter!("hivekeeper_mqtt_messages_out_total")
                    .absolute(mqtt.outbound_published_total);
                metrics::gauge!("hivekeeper_mqtt_connected")
                    .set(if mqtt.connected { 1.0 } else { 0.0 });
                export_endpoint_counters(&mqtt);
            }
            // The endpoint counts its agents itself (a map length); an external broker's
            // clients are unknown here.
            _ = clients.tick() => {
                if let Some(clients) = transport.connected_clients() {
                    #[allow(clippy::cast_precision_loss)] // far below 2^53 connections
                    metrics::gauge!("hivekeeper_mqtt_clients_connected").set(clients as f64);
                }
            }
        }
    }
}

/// The agent endpoint's refusals and disconnects, as `hivekeeper_endpoint_*_total` (they stay 0
/// with an external broker). One series per fact, named after [`hivekeeper_mqtt::Stats`]'s
/// fields.
fn export_endpoint_counters(mqtt: &hivekeeper_mqtt::Stats) {
    let counters = [
        ("hivekeeper_endpoint_connects_total", mqtt.connects_total),
        (
            "hivekeeper_endpoint_connections_refused_total",
            mqtt.connections_refused_total,
        ),
        (
            "hivekeeper_endpoint_connects_rate_limited_total",
            mqtt.connects_rate_limited_total,
        ),
        (
            "hivekeeper_endpoint_connects_refused_total",
            mqtt.connects_refused_total,
        ),
        (
            "hivekeeper_endpoint_connect_timeouts_total",
            mqtt.connect_timeouts_total,
        ),
        (
            "hivekeeper_endpoint_connects_abandoned_total",
            mqtt.connects_abandoned_total,
        ),
        (
            "hivekeeper_endpoint_tls_handshake_failures_total",
            mqtt.tls_handshake_failures_total,
        ),
        ("hivekeeper_endpoint_takeovers_total", mqtt.takeovers_total),
        (
            "hivekeeper_endpoint_keepalive_timeouts_total",
            mqtt.keepalive_timeouts_total,
        ),
        (
            "hivekeeper_endpoint_slow_consumer_disconnects_total",
            mqtt.slow_consumer_disconnects_total,
        ),
        (
            "hivekeeper_endpoint_malformed_packets_total",
            mqtt.malformed_packets_total,
        ),
        (
            "hivekeeper_endpoint_packets_too_large_total",
            mqtt.packets_too_large_total,
        ),
        (
            "hivekeeper_endpoint_protocol_errors_total",
            mqtt.protocol_errors_total,
        ),
        (
            "hivekeeper_endpoint_publishes_refused_total",
            mqtt.publishes_refused_total,
        ),
        (
            "hivekeeper_endpoint_subscribes_refused_total",
            mqtt.subscribes_refused_total,
        ),
        (
            "hivekeeper_endpoint_events_dropped_total",
            mqtt.events_dropped_total,
        ),
        (
            "hivekeeper_endpoint_outbound_unrouted_total",
            mqtt.outbound_unrouted_total,
        ),
        (
            "hivekeeper_endpoint_outbound_too_large_total",
            mqtt.outbound_too_large_total,
        ),
    ];
    for (name, value) in counters {
        metrics::counter!(name).absolute(value);
    }
}
