//! [`Service`]: one node with its MQTT transport and the bridge between them.
//!
//! `hivekeeper serve` wraps this with configuration loading, the Prometheus endpoint and
//! signal handling; the `drone-fleet` example starts it in-process on a temporary data dir.
//! Both therefore run the same assembly, in the same order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hivekeeper_coordinator::node::{Node, NodeConfig, NodeError};
use hivekeeper_mqtt::{Authenticator, Mode, MqttError, Transport};
use tokio::task::JoinHandle;

use crate::bridge::{self, Bridge, NodeAuthenticator};
use crate::shared_broker;

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
    /// The MQTT transport (embedded broker or external client), with the [`Bridge`] as its
    /// handler: requests go from the receiving task straight into the node.
    transport: Transport,
    /// The task publishing the node's notices and the answers of requests not pending here
    /// ([`bridge::publish_outbound`], or [`shared_broker::publish_outbound`] for a member
    /// behind a broker shared with the other members).
    publisher: JoinHandle<()>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("listeners", &self.transport.listeners())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Starts the node, then the transport with the bridge as its handler, then the publisher
    /// of the node's outbound stream. A member of a cluster with an external broker shares it
    /// with the other members (`ExternalConfig::as_member`, [`shared_broker`]). The caller has
    /// validated both configs (and installed a metrics recorder first, if it wants metrics:
    /// without one the metric updates are no-ops).
    pub async fn start(
        node: NodeConfig,
        mqtt: hivekeeper_mqtt::Config,
    ) -> Result<Service, ServiceError> {
        let data_dir = node.data_dir.display().to_string();
        let auth_enabled = node.auth_enabled;
        let mut mqtt = mqtt;
        // The members of a cluster behind one external broker share it (`shared_broker`).
        let shared_broker = match (&node.cluster, &mqtt.mode) {
            (Some(cluster), Mode::External(external)) => {
                mqtt.mode = Mode::External(external.clone().as_member(&cluster.name));
                let election = Duration::from_millis(node.raft.election_timeout_ms_max);
                Some(election * shared_broker::REPLAY_ELECTIONS)
            }
            _ => None,
        };
        let (node, outbound) = Node::start(node)
            .await
            .map_err(|source| ServiceError::Node { data_dir, source })?;
        // With authentication on, the agent endpoint checks each CONNECT with the node.
        let authenticator = auth_enabled
            .then(|| Arc::new(NodeAuthenticator(node.handle())) as Arc<dyn Authenticator>);
        let handler = Arc::new(Bridge::new(node.handle()));
        let transport = match Transport::start_with(mqtt, handler, authenticator).await {
            Ok(transport) => transport,
            Err(error) => {
                let _ = node.shutdown().await;
                return Err(ServiceError::Mqtt(error));
            }
        };
        let publisher = match shared_broker {
            Some(replay_window) => tokio::spawn(shared_broker::publish_outbound(
                transport.clone(),
                outbound,
                node.handle(),
                replay_window,
            )),
            None => tokio::spawn(bridge::publish_outbound(transport.clone(), outbound)),
        };
        Ok(Service {
            node,
            transport,
            publisher,
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

    /// The node's handle (the web console's backend).
    pub fn node_handle(&self) -> hivekeeper_coordinator::node::NodeHandle {
        self.node.handle()
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

    /// Stops the transport (no more requests, queued answers flushed), then the publisher
    /// (nothing more can be published), then the node.
    pub async fn shutdown(self) -> Result<(), ServiceError> {
        let _ = self.transport.shutdown().await;
        self.publisher.abort();
        self.node.shutdown().await.map_err(ServiceError::Stop)
    }
}
