//! # The agent endpoint: Hivekeeper's own MQTT 3.1.1/5.0 server
//!
//! It serves only Hivekeeper's topics, so it needs no general routing: a connection *is* an
//! agent (client id = agent id), a request goes from the connection's task straight to the
//! transport's handler with that agent id, and an answer goes from `Transport::publish*`
//! straight into that agent's own bounded queue, which the same task writes out. General pub/sub stays available through
//! an external broker (`Mode::External`).
//!
//! ```text
//!   agent ──TCP (TCP_NODELAY)──▶ accept loop ── limits: connections_max, connect rate ──┐
//!                                  (one per listener)                                 spawn
//!                                             [TLS handshake, on the connection's task] ▼
//!   agent ◀──────────────────────────────────────────────────────────────▶ connection task
//!       CONNECT → CONNACK; SUBSCRIBE own rsp/evt → SUBACK; PINGREQ → PINGRESP;              │
//!       PUBLISH {prefix}/req/{self} → Inlet::deliver(agent, payload, route) ──▶ handler; PUBACK
//!                                                                                        │
//!   Transport::publish / publish_response / publish_event ──▶ Registry[agent].queue ──────┘
//!                                          (no agent or no subscription: dropped, counted)
//! ```
//!
//! Invariants:
//! 1. A client publishes only on `{prefix}/req/{its id}` and subscribes only to
//!    `{prefix}/rsp/{its id}` and `{prefix}/evt/{its id}`; anything else is refused (3.1.1:
//!    acknowledged and dropped or SUBACK 0x80; 5.0: reason 0x87) and never routed.
//! 2. Nothing is routed between clients: the only messages a client receives are the
//!    transport's publishes to its own topics.
//! 3. One connection per client id: a new CONNECT with the id of a connected client takes
//!    over (the old connection is closed, 5.0 reason 0x8E).
//! 4. Every control packet is answered by the connection's own task, so a PINGRESP never
//!    waits behind another client's work (DESIGN.md §7).
//! 5. Per connection, memory is bounded: the read buffer by `packet_bytes_max`, the outbound
//!    queue by `connection_queue_max` (events dropped first, a slow consumer disconnected),
//!    QoS state by `inflight_max`. Nothing outlives the connection.
//! 6. Bad input closes that connection only, counted; it never panics the server.
//!
//! Every refusal and disconnect is counted where it happens, as a `hivekeeper_endpoint_*`
//! counter (`crate::transport_metrics`).
//!
//! # Layout
//! - `codec`: rumqttc's 3.1.1 and 5.0 codecs behind the few packets a server reads and writes.
//! - `connection`: one connection's task.
//! - `handshake`: a new connection's CONNECT: read, refused or accepted.
//! - `registry`: client id → connection, takeover.
//! - `queue`: the per-connection outbound queue and its slow-consumer policy.
//! - `limits`: the connect-rate token bucket.
//! - `credentials`: the hook where a CONNECT's identity is checked ([`Authenticator`]).
//! - `tls`: the TLS handshake of an accepted socket (`mode.tls_cert`, mutual TLS with
//!   `mode.client_ca`: the certificate's CN must be the client id).

mod codec;
mod connection;
mod credentials;
mod handshake;

pub use credentials::{AuthRefused, Authenticator};
mod limits;
mod queue;
mod registry;
mod tls;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hivekeeper_protocol::Topics;
use metrics::{counter, gauge};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::{Config, EmbeddedConfig};
use crate::transport::{Inlet, ListenerInfo, MqttVersion};
use crate::transport_metrics::{
    CONNECTED, ENDPOINT_CONNECTIONS_REFUSED_TOTAL, ENDPOINT_CONNECTS_RATE_LIMITED_TOTAL,
    ENDPOINT_EVENTS_DROPPED_TOTAL, ENDPOINT_OUTBOUND_UNROUTED_TOTAL,
};
use crate::{MqttError, transport_metrics};
use limits::ConnectRate;
use queue::{Class, OutMessage, Push};
use registry::Registry;
use tls::EndpointTls;

/// Time bound for the connections to flush and close at shutdown.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after an accept error (out of file descriptors, say) before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The settings a connection reads, copied out of the config once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Largest packet accepted (remaining length).
    pub(crate) packet_bytes_max: usize,
    /// Time for a new socket to deliver its CONNECT.
    pub(crate) connect_packet_timeout_ms: u64,
    /// Messages one connection's outbound queue holds.
    pub(crate) connection_queue_max: usize,
    /// Unacknowledged QoS 1 messages to one client, and its QoS 2 receive maximum.
    pub(crate) inflight_max: usize,
    /// Time bound of one socket write.
    pub(crate) write_timeout_ms: u64,
    /// Set TCP_NODELAY on accepted sockets.
    pub(crate) tcp_nodelay: bool,
    /// Most live connections.
    pub(crate) connections_max: usize,
}

/// What the accept loops, the connection tasks and the transport share.
pub(crate) struct Shared {
    pub(crate) topics: Topics,
    pub(crate) settings: Settings,
    pub(crate) registry: Registry,
    /// Where requests go: set before the first accept, taken at shutdown (it holds the
    /// transport, which holds this: the cycle ends there).
    inlet: Mutex<Option<Inlet>>,
    /// `true` once shutdown began.
    pub(crate) stop_rx: watch::Receiver<bool>,
    /// Connection tasks alive (accepted, not yet ended), for `connections_max` and shutdown.
    live: AtomicUsize,
    /// Notified whenever a connection task ends.
    ended: Notify,
    connect_rate: ConnectRate,
    /// Checks CONNECT credentials; `None` with authentication off.
    pub(crate) authenticator: Option<Arc<dyn Authenticator>>,
    /// TLS, when `mode.tls_cert` is set: every socket handshakes before its CONNECT.
    tls: Option<EndpointTls>,
}

impl Shared {
    /// A clone of the inlet, or `None` once shutdown took it.
    pub(crate) fn inlet(&self) -> Option<Inlet> {
        self.inlet
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Closes `agent`'s connection, if it has one (its account was removed or its secret
    /// rotated). Returns whether one was closed.
    pub(crate) fn disconnect(&self, agent: &str) -> bool {
        self.registry.kick(agent)
    }

    /// Queues one message for an agent: `topic` must be its response or event topic.
    /// Dropped and counted when the agent is not connected or not subscribed there (as a
    /// broker would); refused with [`MqttError::OutboundFull`] when its queue policy drops
    /// it (an event under pressure, or a slow consumer's overflow, which disconnects it).
    pub(crate) fn route(
        &self,
        topic: String,
        payload: Bytes,
        correlation_data: Option<Bytes>,
    ) -> Result<(), MqttError> {
        let prefix = self.topics.prefix();
        let rest = topic
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('/'));
        let (class, agent) = match rest.and_then(|rest| rest.split_once('/')) {
            Some(("rsp", agent)) => (Class::Response, agent.to_string()),
            Some(("evt", agent)) => (Class::Event, agent.to_string()),
            _ => {
                return Err(MqttError::InvalidTopic {
                    topic,
                    reason: "the agent endpoint delivers only to {prefix}/rsp/{agent} and \
                             {prefix}/evt/{agent}",
                });
            }
        };
        let Some(client) = self.registry.get(&agent) else {
            counter!(ENDPOINT_OUTBOUND_UNROUTED_TOTAL).increment(1);
            return Ok(());
        };
        if client.granted(class).is_none() {
            counter!(ENDPOINT_OUTBOUND_UNROUTED_TOTAL).increment(1);
            return Ok(());
        }
        let capacity = self.settings.connection_queue_max;
        match client.queue.push(OutMessage {
            topic,
            payload,
            correlation_data,
            class,
        }) {
            Push::Queued => Ok(()),
            Push::QueuedEvictingEvent => {
                counter!(ENDPOINT_EVENTS_DROPPED_TOTAL).increment(1);
                Ok(())
            }
            Push::EventDropped => {
                counter!(ENDPOINT_EVENTS_DROPPED_TOTAL).increment(1);
                Err(MqttError::OutboundFull {
                    topic: format!("{prefix}/evt/{agent}"),
                    capacity: capacity / 2,
                })
            }
            Push::Overflow => Err(MqttError::OutboundFull {
                topic: format!("{prefix}/rsp/{agent}"),
                capacity,
            }),
            // The connection is ending: as if it were gone already.
            Push::Closed => {
                counter!(ENDPOINT_OUTBOUND_UNROUTED_TOTAL).increment(1);
                Ok(())
            }
        }
    }
}

/// Decrements the live count when a connection task ends, even by panic.
struct LiveGuard(Arc<Shared>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_waiters();
    }
}

/// The running endpoint.
pub(crate) struct Running {
    shared: Arc<Shared>,
    stop_tx: watch::Sender<bool>,
    accept_tasks: Vec<JoinHandle<()>>,
}

/// The endpoint with its sockets listening, not yet accepting.
pub(crate) struct Bound {
    shared: Arc<Shared>,
    listeners: Vec<TcpListener>,
    infos: Vec<ListenerInfo>,
    stop_tx: watch::Sender<bool>,
}

/// Binds every listener; returns once the sockets listen. Nothing is accepted before
/// [`Bound::serve`] (connections wait in the backlog meanwhile).
pub(crate) async fn bind(
    config: &Config,
    embedded: &EmbeddedConfig,
    topics: &Topics,
    authenticator: Option<Arc<dyn Authenticator>>,
) -> Result<Bound, MqttError> {
    embedded.warn_ignored_keys();
    // Read and checked before anything is bound: a bad file fails start, naming it.
    let tls = match embedded.tls_files() {
        Some((cert_key, client_ca)) => Some(EndpointTls {
            acceptor: hivekeeper_tls::server_config(&cert_key, client_ca)?.into(),
            mutual: client_ca.is_some(),
        }),
        None => None,
    };
    let mut wanted = vec![(MqttVersion::V311, embedded.listen)];
    if let Some(listen_v5) = embedded.listen_v5 {
        wanted.push((MqttVersion::V5, listen_v5));
    }
    let mut listeners = Vec::with_capacity(wanted.len());
    let mut infos = Vec::with_capacity(wanted.len());
    for (version, addr) in wanted {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|error| listen_error(addr, &error))?;
        let bound = listener
            .local_addr()
            .map_err(|error| listen_error(addr, &error))?;
        infos.push(ListenerInfo {
            version,
            addr: bound,
            tcp_nodelay: embedded.tcp_nodelay,
        });
        listeners.push(listener);
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        topics: topics.clone(),
        settings: Settings {
            packet_bytes_max: config.packet_bytes_max,
            connect_packet_timeout_ms: u64::from(embedded.connect_packet_timeout_ms),
            connection_queue_max: embedded.connection_queue_max,
            inflight_max: embedded.inflight_max,
            write_timeout_ms: embedded.write_timeout_ms,
            tcp_nodelay: embedded.tcp_nodelay,
            connections_max: embedded.connections_max,
        },
        registry: Registry::default(),
        inlet: Mutex::new(None),
        stop_rx,
        live: AtomicUsize::new(0),
        ended: Notify::new(),
        connect_rate: ConnectRate::new(embedded.connect_rate_per_s_max),
        authenticator,
        tls,
    });
    Ok(Bound {
        shared,
        listeners,
        infos,
        stop_tx,
    })
}

impl Bound {
    /// What the transport routes publishes through.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The listeners as bound.
    pub(crate) fn listeners(&self) -> &[ListenerInfo] {
        &self.infos
    }

    /// Starts accepting; every request goes to `inlet`.
    pub(crate) fn serve(self, inlet: Inlet) -> Running {
        let Bound {
            shared,
            listeners,
            infos,
            stop_tx,
        } = self;
        *shared
            .inlet
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(inlet);
        let accept_tasks = listeners
            .into_iter()
            .map(|listener| tokio::spawn(accept_loop(listener, shared.clone())))
            .collect();
        gauge!(CONNECTED).set(1.0);
        gauge!(transport_metrics::CLIENTS_CONNECTED).set(0.0);
        gauge!(transport_metrics::ENDPOINT_CONNECTIONS_MAX)
            .set(shared.settings.connections_max as f64);
        let addrs = infos
            .iter()
            .map(|info| info.addr.to_string())
            .collect::<Vec<_>>()
            .join(" and ");
        let security = match &shared.tls {
            None => "plaintext (no TLS)",
            Some(tls) if tls.mutual => "TLS with client certificates (mutual TLS)",
            Some(_) => "TLS",
        };
        // Every listener reads the version from each CONNECT: both serve 3.1.1 and 5.
        info!("agent endpoint listening on {addrs}: {security}, MQTT 3.1.1 and 5");
        Running {
            shared,
            stop_tx,
            accept_tasks,
        }
    }
}

impl Running {
    /// Stops accepting (the listening sockets close), then tells every connection to flush
    /// its queue, say goodbye (5.0: DISCONNECT 0x8B) and close; waits for them, bounded.
    pub(crate) async fn shutdown(self) -> Result<(), MqttError> {
        for task in &self.accept_tasks {
            task.abort();
        }
        for task in self.accept_tasks {
            let _ = task.await;
        }
        let _ = self.stop_tx.send(true);
        // The connections hold their own clones; the handler is released after them.
        self.shared
            .inlet
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            let ended = self.shared.ended.notified();
            let live = self.shared.live.load(Ordering::Acquire);
            if live == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return Err(MqttError::Shutdown {
                    reason: format!(
                        "{live} agent connections did not close within {SHUTDOWN_TIMEOUT:?}"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Accepts until aborted. A refused socket (over `connections_max` or the connect rate) is
/// closed at once and counted.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // EMFILE and friends: back off briefly instead of spinning.
                warn!(%error, "agent endpoint accept failed; retrying");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        if shared.live.load(Ordering::Acquire) >= shared.settings.connections_max {
            counter!(ENDPOINT_CONNECTIONS_REFUSED_TOTAL).increment(1);
            drop(stream);
            continue;
        }
        if !shared.connect_rate.admit(Instant::now()) {
            counter!(ENDPOINT_CONNECTS_RATE_LIMITED_TOTAL).increment(1);
            drop(stream);
            continue;
        }
        if shared.settings.tcp_nodelay
            && let Err(error) = stream.set_nodelay(true)
        {
            // The peer may already be gone; the connection finds out on its first read.
            tracing::debug!(%error, "TCP_NODELAY not set on an accepted socket");
        }
        shared.live.fetch_add(1, Ordering::AcqRel);
        let guard = LiveGuard(shared.clone());
        tokio::spawn(async move {
            let guard = guard;
            let shared = guard.0.clone();
            // One deadline for the TLS handshake and the CONNECT together.
            let deadline = tokio::time::Instant::now()
                + Duration::from_millis(shared.settings.connect_packet_timeout_ms);
            match &shared.tls {
                None => connection::serve(shared.clone(), stream, None, deadline).await,
                Some(endpoint_tls) => {
                    if let Some((stream, cn)) =
                        tls::handshake(&shared, endpoint_tls, stream, deadline).await
                    {
                        connection::serve(shared.clone(), stream, cn, deadline).await;
                    }
                }
            }
        });
    }
}

fn listen_error(addr: SocketAddr, error: &io::Error) -> MqttError {
    if error.kind() == io::ErrorKind::AddrInUse {
        MqttError::ListenAddrInUse { addr }
    } else {
        MqttError::Listen {
            addr,
            reason: error.to_string(),
        }
    }
}
