//! The embedded broker: rumqttd's router and listeners, assembled from its public parts, and
//! the transport's local link into the router.
//!
//! ```text
//!  agents ──TCP──▶ listener thread "hk-mqtt-v4" (own current-thread runtime, rumqttd Server)
//!                        │  (and "hk-mqtt-v5" when configured)
//!                        ▼
//!                  rumqttd router thread ◀── local link "hivekeeper-bridge-<random>"
//!                        │                      ├─ LinkRx ─▶ inbound task ─▶ mpsc<Inbound>
//!                        │                      └─ LinkTx ◀─ outbound thread ◀─ mpsc<Outbound>
//!                        └──▶ agents' subscriptions (rsp/evt)
//! ```
//!
//! Why not `rumqttd::Broker`: assembling `Router` + `Server` + `LinkBuilder` ourselves gives
//! what `Broker` does not:
//! 1. A bind failure comes back as an error from `Server::start` (Broker only logs it on its
//!    thread and, with one listener, returns `Ok(())` as if it had run).
//! 2. Each listener runs on a runtime we own, so shutdown can drop it: the listening socket
//!    and every client socket close and the port is free again. (The router thread cannot be
//!    stopped in rumqttd 0.20, rumqtt#771; it stays, idle.)
//! 3. The local link is built with `dynamic_filters(true)`. rumqttd's router has a path that
//!    disconnects a connection publishing to a topic no filter matches (`NoMatchingFilters`)
//!    unless its filters are dynamic. In 0.20 that path is dead (`DataLog::matches` returns
//!    `Some(vec![])`, so such a publish is silently dropped), but if a later rumqttd makes it
//!    live, answering an agent that never subscribed would disconnect the transport's link
//!    and the service would go deaf. `Broker::link` cannot set the option.
//!
//! A local link only publishes QoS 0 (`LinkTx::publish` hard-codes it) and receives the
//! request filter at QoS 0; both hops are in-process, so nothing is lost on them.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hivekeeper_protocol::Topics;
use rumqttd::local::{LinkBuilder, LinkRx, LinkTx};
use rumqttd::protocol::v4::V4;
use rumqttd::protocol::v5::V5;
use rumqttd::protocol::{Disconnect, DisconnectReasonCode, Packet, Protocol, SubscribeReasonCode};
use rumqttd::{
    ConnectionSettings, LinkType, Notification, Router, RouterConfig, SegmentConfig, Server,
    ServerSettings,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::MqttError;
use crate::config::{Config, EmbeddedConfig};
use crate::listener_nodelay::{self, NodelayOutcome};
use crate::transport::{Counters, Delivery, Inbound, ListenerInfo, MqttVersion, Outbound, deliver};

/// rumqttd's router stops forwarding to a link once 200 notifications wait in its buffer
/// (`MAX_CHANNEL_CAPACITY`); reading that many per pass keeps a pass within one batch.
const ROUTER_OUTGOING_PACKETS_MAX: u64 = 200;
/// Time bound of each shutdown step (inbound task, outbound flush, each listener).
const SHUTDOWN_STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between handing the last responses to the router and closing the listeners, so the
/// router and the connection tasks can write them to the agents' sockets (microseconds of
/// work; nothing reports when it is done). Closing at once would cut them off.
const SHUTDOWN_LINGER: Duration = Duration::from_millis(200);
/// Pause between readiness checks of a starting listener.
const READY_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Time bound of one readiness probe (TCP connect, CONNECT, CONNACK).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The running embedded backend.
pub(crate) struct Running {
    stop_tx: watch::Sender<bool>,
    inbound_task: JoinHandle<()>,
    outbound_thread: std::thread::JoinHandle<()>,
    listeners: Vec<ListenerThread>,
}

/// Starts router, local link and listeners; returns once every listener answers an MQTT
/// CONNECT and the link's subscription to the request filter is acknowledged.
pub(crate) async fn start(
    config: &Config,
    embedded: &EmbeddedConfig,
    topics: &Topics,
    inbound_tx: mpsc::Sender<Inbound>,
    outbound_rx: mpsc::Receiver<Outbound>,
    counters: Arc<Counters>,
) -> Result<(Running, Vec<ListenerInfo>), MqttError> {
    let started = Instant::now();
    let startup_timeout = Duration::from_millis(config.startup_timeout_ms);

    // Bind each address ourselves first: a taken port fails here with a clear error, and
    // port 0 becomes a concrete port we can report and probe. Released just before rumqttd
    // binds; a process grabbing the port in between is caught when `Server::start` fails.
    let mut wanted = vec![(MqttVersion::V311, embedded.listen)];
    if let Some(listen_v5) = embedded.listen_v5 {
        wanted.push((MqttVersion::V5, listen_v5));
    }
    let addrs = reserve_addrs(&wanted)?;

    let router_tx = Router::new(0, router_config(embedded, topics)).spawn();

    // The link first, listeners after: by the time an agent can connect, the request filter
    // exists, so its first request is routed to us (rumqttd drops a publish that no filter
    // matches).
    let link_client_id = format!("hivekeeper-bridge-{:016x}", random_u64());
    let link_router_tx = router_tx.clone();
    let request_filter = topics.request_filter();
    let link_filter = request_filter.clone();
    // `LinkBuilder::build` and `LinkTx::subscribe` block on flume channels: not on a runtime
    // worker.
    let build = tokio::task::spawn_blocking(move || {
        let (mut link_tx, link_rx, _connack) = LinkBuilder::new(&link_client_id, link_router_tx)
            .dynamic_filters(true)
            .build()
            .map_err(|error| format!("connect to the router: {error}"))?;
        link_tx
            .subscribe(link_filter)
            .map_err(|error| format!("subscribe: {error}"))?;
        Ok::<_, String>((link_tx, link_rx))
    });
    let (link_tx, mut link_rx) = match tokio::time::timeout(startup_timeout, build).await {
        Ok(Ok(Ok(link))) => link,
        Ok(Ok(Err(reason))) => return Err(MqttError::LocalLink { reason }),
        Ok(Err(join_error)) => {
            return Err(MqttError::LocalLink {
                reason: format!("link setup task failed: {join_error}"),
            });
        }
        Err(_) => {
            return Err(MqttError::LocalLink {
                reason: format!("router did not accept the link within {startup_timeout:?}"),
            });
        }
    };
    let remaining = startup_timeout.saturating_sub(started.elapsed());
    wait_for_suback(
        &mut link_rx,
        &request_filter,
        &inbound_tx,
        &counters,
        remaining,
    )
    .await?;

    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
    let mut listeners = Vec::new();
    let mut infos = Vec::new();
    for (version, addr) in addrs {
        let settings = server_settings(config, embedded, version, addr);
        let spawned = match version {
            MqttVersion::V311 => spawn_listener(
                version,
                Server::new(settings, router_tx.clone(), V4),
                addr,
                exit_tx.clone(),
            ),
            MqttVersion::V5 => spawn_listener(
                version,
                Server::new(settings, router_tx.clone(), V5),
                addr,
                exit_tx.clone(),
            ),
        };
        let listener = match spawned {
            Ok(listener) => listener,
            Err(error) => {
                stop_listeners(listeners).await;
                return Err(error);
            }
        };
        listeners.push(listener);
        let deadline = started + startup_timeout;
        match wait_until_ready(version, addr, embedded.tcp_nodelay, deadline, &mut exit_rx).await {
            Ok(tcp_nodelay) => infos.push(ListenerInfo {
                version,
                addr,
                tcp_nodelay,
            }),
            Err(error) => {
                stop_listeners(listeners).await;
                return Err(error);
            }
        }
    }
    drop(exit_tx);

    let (stop_tx, stop_rx) = watch::channel(false);
    let outbound_counters = counters.clone();
    let outbound_thread = std::thread::Builder::new()
        .name("hk-mqtt-out".to_string())
        .spawn(move || run_outbound(outbound_rx, link_tx, &outbound_counters));
    let outbound_thread = match outbound_thread {
        Ok(thread) => thread,
        Err(source) => {
            stop_listeners(listeners).await;
            return Err(MqttError::Spawn {
                what: "embedded broker outbound thread",
                source,
            });
        }
    };
    Counters::add(&counters.connects_total);
    counters.connected.store(true, Ordering::Relaxed);
    let inbound_task = tokio::spawn(run_inbound(link_rx, inbound_tx, counters, stop_rx, exit_rx));
    info!(listeners = ?infos, filter = %request_filter, "embedded MQTT broker running");
    Ok((
        Running {
            stop_tx,
            inbound_task,
            outbound_thread,
            listeners,
        },
        infos,
    ))
}

impl Running {
    /// Stops receiving, flushes queued publishes into the router and disconnects the link,
    /// lingers so the router can write them out, then closes the listeners (and with them
    /// every client connection).
    pub(crate) async fn shutdown(
        self,
        outbound_tx: &mpsc::Sender<Outbound>,
    ) -> Result<(), MqttError> {
        let mut unfinished = Vec::new();

        let _ = self.stop_tx.send(true);
        let mut inbound_task = self.inbound_task;
        if tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, &mut inbound_task)
            .await
            .is_err()
        {
            inbound_task.abort();
            unfinished.push("inbound task".to_string());
        }

        // The stop marker queues behind every publish already accepted, so those go out first.
        match tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, outbound_tx.send(Outbound::Stop)).await {
            // Ok(Err): the publisher already ended (router gone); nothing left to flush.
            Ok(_) => {
                if !join_thread(self.outbound_thread).await {
                    unfinished.push("outbound publisher".to_string());
                }
            }
            Err(_) => unfinished.push("outbound queue (still full)".to_string()),
        }
        tokio::time::sleep(SHUTDOWN_LINGER).await;

        for listener in self.listeners {
            let addr = listener.addr;
            if !listener.stop().await {
                unfinished.push(format!("listener {addr}"));
            }
        }

        if unfinished.is_empty() {
            Ok(())
        } else {
            Err(MqttError::Shutdown {
                reason: format!(
                    "{} did not stop within {SHUTDOWN_STEP_TIMEOUT:?}",
                    unfinished.join(", ")
                ),
            })
        }
    }
}

/// rumqttd's router configuration: bounded per-filter logs, a larger one for requests.
fn router_config(embedded: &EmbeddedConfig, topics: &Topics) -> RouterConfig {
    let mut custom_segment = HashMap::new();
    custom_segment.insert(
        topics.request_filter(),
        SegmentConfig {
            max_segment_size: embedded.request_segment_bytes_max,
            max_segment_count: embedded.request_segment_count_max,
        },
    );
    RouterConfig {
        // One more slot for the transport's own link.
        max_connections: embedded.connections_max + 1,
        max_outgoing_packet_count: ROUTER_OUTGOING_PACKETS_MAX,
        max_segment_size: embedded.segment_bytes_max,
        max_segment_count: embedded.segment_count_max,
        custom_segment: Some(custom_segment),
        initialized_filters: None,
        shared_subscriptions_strategy: Default::default(),
    }
}

fn server_settings(
    config: &Config,
    embedded: &EmbeddedConfig,
    version: MqttVersion,
    addr: SocketAddr,
) -> ServerSettings {
    ServerSettings {
        name: format!("hk-mqtt-{}", version_label(version)),
        listen: addr,
        tls: None,
        // No pause between accepts: a fleet reconnecting at once should get in quickly.
        next_connection_delay_ms: 0,
        connections: ConnectionSettings {
            connection_timeout_ms: embedded.connect_packet_timeout_ms,
            // rumqttd compares this with the packet's remaining length and drops the
            // connection when it is larger, before reading the packet.
            max_payload_size: config.packet_bytes_max,
            max_inflight_count: embedded.inflight_max,
            auth: None,
            external_auth: None,
            // Clients keep rumqttd's default: a publish to a topic nobody subscribes to is
            // dropped (rumqttd 0.20) instead of creating a new log per topic, so a client
            // cannot grow the broker's memory by inventing topics.
            dynamic_filters: false,
        },
    }
}

fn version_label(version: MqttVersion) -> &'static str {
    match version {
        MqttVersion::V311 => "v4",
        MqttVersion::V5 => "v5",
    }
}

/// Binds every address (all at once, so two port-0 requests get different ports), reads the
/// real addresses and releases them.
fn reserve_addrs(
    wanted: &[(MqttVersion, SocketAddr)],
) -> Result<Vec<(MqttVersion, SocketAddr)>, MqttError> {
    let mut held = Vec::with_capacity(wanted.len());
    for &(version, addr) in wanted {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|error| listen_error(addr, &error))?;
        let bound = listener
            .local_addr()
            .map_err(|error| listen_error(addr, &error))?;
        held.push((version, bound, listener));
    }
    Ok(held
        .into_iter()
        .map(|(version, bound, _listener)| (version, bound))
        .collect())
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

/// Waits for the router's SubAck to the request filter. Anything forwarded meanwhile (a
/// retained request) is delivered, not lost.
async fn wait_for_suback(
    link_rx: &mut LinkRx,
    filter: &str,
    inbound_tx: &mpsc::Sender<Inbound>,
    counters: &Counters,
    remaining: Duration,
) -> Result<(), MqttError> {
    let wait = async {
        loop {
            let notification = link_rx.next().await.map_err(|error| MqttError::LocalLink {
                reason: format!("router closed the link before the SubAck: {error}"),
            })?;
            match notification {
                Some(Notification::DeviceAck(ack)) => {
                    if let Packet::SubAck(suback, _) = Packet::from(ack) {
                        let granted = suback.return_codes.iter().all(|code| {
                            matches!(
                                code,
                                SubscribeReasonCode::QoS0
                                    | SubscribeReasonCode::QoS1
                                    | SubscribeReasonCode::QoS2
                                    | SubscribeReasonCode::Success(_)
                            )
                        });
                        return if granted {
                            Ok(())
                        } else {
                            Err(MqttError::SubscribeRefused {
                                filter: filter.to_string(),
                            })
                        };
                    }
                }
                Some(Notification::Forward(forward)) => {
                    forward_to_inbound(
                        inbound_tx,
                        counters,
                        forward.publish.topic,
                        forward.publish.payload,
                    );
                }
                Some(Notification::Unschedule) => {
                    link_rx.wake().await.map_err(|error| MqttError::LocalLink {
                        reason: format!("wake: {error}"),
                    })?;
                }
                Some(_) | None => {}
            }
        }
    };
    tokio::time::timeout(remaining, wait)
        .await
        .map_err(|_| MqttError::LocalLink {
            reason: format!("no SubAck for {filter} from the router within {remaining:?}"),
        })?
}

/// Receives everything the router forwards to the link until stopped.
async fn run_inbound(
    mut link_rx: LinkRx,
    inbound_tx: mpsc::Sender<Inbound>,
    counters: Arc<Counters>,
    mut stop_rx: watch::Receiver<bool>,
    mut exit_rx: mpsc::UnboundedReceiver<ListenerExit>,
) {
    loop {
        let notification = tokio::select! {
            biased;
            _ = stop_rx.changed() => break,
            exit = exit_rx.recv() => {
                match exit {
                    Some(exit) => error!(
                        addr = %exit.addr,
                        reason = %exit.reason,
                        "embedded broker listener stopped; the MQTT transport stops receiving"
                    ),
                    None => error!("embedded broker listeners gone; the MQTT transport stops receiving"),
                }
                break;
            }
            next = link_rx.next() => next,
        };
        match notification {
            Err(error) => {
                error!(%error, "embedded router dropped the transport's link; no more requests will arrive");
                break;
            }
            // One wake-up signal can cover notifications an earlier call already took.
            Ok(None) => {}
            Ok(Some(Notification::Forward(forward))) => {
                let delivery = forward_to_inbound(
                    &inbound_tx,
                    &counters,
                    forward.publish.topic,
                    forward.publish.payload,
                );
                if delivery == Delivery::ReceiverGone {
                    info!("inbound receiver dropped; the MQTT transport stops receiving");
                    break;
                }
            }
            // The router paused the link because 200 notifications piled up in its buffer; it
            // forwards nothing more until told the link is ready. Without this the service goes
            // deaf under load (DESIGN.md §7).
            Ok(Some(Notification::Unschedule)) => {
                Counters::add(&counters.link_unschedules_total);
                if let Err(error) = link_rx.wake().await {
                    error!(%error, "cannot wake the embedded router link; no more requests will arrive");
                    break;
                }
            }
            Ok(Some(other)) => debug!(notification = ?other, "link notification ignored"),
        }
    }
    counters.connected.store(false, Ordering::Relaxed);
}

fn forward_to_inbound(
    inbound_tx: &mpsc::Sender<Inbound>,
    counters: &Counters,
    topic: Bytes,
    payload: Bytes,
) -> Delivery {
    match std::str::from_utf8(&topic) {
        Ok(topic) => deliver(inbound_tx, counters, topic.to_string(), payload),
        Err(_) => {
            Counters::add(&counters.inbound_invalid_total);
            Delivery::Dropped
        }
    }
}

/// Publishes queued messages through the link, on its own OS thread because `LinkTx::publish`
/// blocks on the router's bounded channel when the router is busy, which must never stall a
/// runtime worker.
fn run_outbound(
    mut outbound_rx: mpsc::Receiver<Outbound>,
    mut link_tx: LinkTx,
    counters: &Counters,
) {
    while let Some(message) = outbound_rx.blocking_recv() {
        match message {
            Outbound::Publish { topic, payload } => match link_tx.publish(topic, payload) {
                Ok(_) => Counters::add(&counters.outbound_published_total),
                Err(error) => {
                    error!(%error, "embedded router gone; outbound publisher stops");
                    return;
                }
            },
            Outbound::Stop => break,
        }
    }
    // Leave the router cleanly, so it drops the link's subscription instead of buffering for a
    // reader that is gone. `LinkTx::send` is an async fn with no await inside (it pushes to a
    // buffer and signals the router): one poll completes it, with no runtime needed, which
    // matters when this thread outlives the runtime that started it.
    let disconnect = Packet::Disconnect(
        Disconnect {
            reason_code: DisconnectReasonCode::NormalDisconnection,
        },
        None,
    );
    let mut send = std::pin::pin!(link_tx.send(disconnect));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match send.as_mut().poll(&mut context) {
        std::task::Poll::Ready(Ok(_)) => {}
        std::task::Poll::Ready(Err(error)) => {
            debug!(%error, "link disconnect not delivered; router already gone");
        }
        std::task::Poll::Pending => warn!("link disconnect did not complete at once; skipped"),
    }
}

/// Why a listener thread ended.
#[derive(Debug)]
struct ListenerExit {
    addr: SocketAddr,
    reason: String,
    addr_in_use: bool,
}

impl ListenerExit {
    fn into_error(self) -> MqttError {
        if self.addr_in_use {
            MqttError::ListenAddrInUse { addr: self.addr }
        } else {
            MqttError::Listen {
                addr: self.addr,
                reason: self.reason,
            }
        }
    }
}

/// Reports a listener thread's end, even when it panics (Drop runs while unwinding).
struct ExitGuard {
    exit_tx: mpsc::UnboundedSender<ListenerExit>,
    addr: SocketAddr,
    /// Set once reported, or when the end was asked for (nothing to report).
    done: bool,
}

impl ExitGuard {
    fn report(&mut self, reason: String, addr_in_use: bool) {
        self.done = true;
        let _ = self.exit_tx.send(ListenerExit {
            addr: self.addr,
            reason,
            addr_in_use,
        });
    }
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        if !self.done {
            self.report(
                "listener thread ended unexpectedly (panic?)".to_string(),
                false,
            );
        }
    }
}

/// A listener's OS thread and the way to stop it.
struct ListenerThread {
    addr: SocketAddr,
    stop_tx: Option<oneshot::Sender<()>>,
    thread: std::thread::JoinHandle<()>,
}

impl ListenerThread {
    /// Stops the listener and waits for its thread; `false` if it did not end in time.
    async fn stop(mut self) -> bool {
        if let Some(stop_tx) = self.stop_tx.take() {
            let _ = stop_tx.send(());
        }
        join_thread(self.thread).await
    }
}

/// Runs one rumqttd `Server` on its own thread and current-thread runtime, as rumqttd's
/// `Broker` does, but with a stop signal and an exit report.
fn spawn_listener<P>(
    version: MqttVersion,
    mut server: Server<P>,
    addr: SocketAddr,
    exit_tx: mpsc::UnboundedSender<ListenerExit>,
) -> Result<ListenerThread, MqttError>
where
    P: Protocol + Clone + Send + 'static,
{
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("hk-mqtt-{}", version_label(version)))
        .spawn(move || {
            let mut guard = ExitGuard {
                exit_tx,
                addr,
                done: false,
            };
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    guard.report(format!("cannot build its runtime: {error}"), false);
                    return;
                }
            };
            runtime.block_on(async {
                tokio::select! {
                    result = server.start(LinkType::Remote) => {
                        let (reason, addr_in_use) = match result {
                            Ok(()) => ("accept loop ended".to_string(), false),
                            Err(error) => describe_listen_error(&error),
                        };
                        guard.report(reason, addr_in_use);
                    }
                    // Asked to stop, or the handle was dropped: either way, stop quietly.
                    _ = stop_rx => guard.done = true,
                }
            });
            // Dropping the runtime cancels the accept loop and every connection task: the
            // listening socket and all client sockets close here, and the port is free.
            drop(runtime);
        })
        .map_err(|source| MqttError::Spawn {
            what: "embedded broker listener thread",
            source,
        })?;
    Ok(ListenerThread {
        addr,
        stop_tx: Some(stop_tx),
        thread,
    })
}

/// rumqttd's server error type is not exported; read it through `std::error::Error`.
fn describe_listen_error(error: &(dyn std::error::Error + 'static)) -> (String, bool) {
    let mut addr_in_use = false;
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(io_error) = current.downcast_ref::<io::Error>() {
            addr_in_use |= io_error.kind() == io::ErrorKind::AddrInUse;
        }
        source = current.source();
    }
    (error.to_string(), addr_in_use)
}

/// Waits until the listener at `addr` answers an MQTT CONNECT, setting TCP_NODELAY on its
/// socket first when asked (so no client is accepted without it). Returns whether
/// TCP_NODELAY is set.
async fn wait_until_ready(
    version: MqttVersion,
    addr: SocketAddr,
    tcp_nodelay: bool,
    deadline: Instant,
    exit_rx: &mut mpsc::UnboundedReceiver<ListenerExit>,
) -> Result<bool, MqttError> {
    let started = Instant::now();
    // None: not wanted or gave up; Some(false): wanted, not yet set; Some(true): set.
    let mut nodelay = tcp_nodelay.then_some(false);
    loop {
        if let Ok(exit) = exit_rx.try_recv() {
            return Err(exit.into_error());
        }
        if Instant::now() >= deadline {
            return Err(MqttError::ListenerNotReady {
                addr,
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        if nodelay == Some(false) {
            match listener_nodelay::set_on_listener(addr) {
                Ok(NodelayOutcome::Set) => nodelay = Some(true),
                Ok(NodelayOutcome::NotListeningYet) => {
                    tokio::time::sleep(READY_POLL_INTERVAL).await;
                    continue;
                }
                Err(error) => {
                    warn!(
                        %addr,
                        %error,
                        "cannot set TCP_NODELAY on the embedded broker's listener; QoS 1 \
                         requests will wait about 40 ms each (Nagle + delayed ACK)"
                    );
                    nodelay = None;
                }
            }
        }
        match probe_connect(version, addr).await {
            Ok(()) => return Ok(nodelay == Some(true)),
            Err(error) => debug!(%addr, %error, "listener not ready yet"),
        }
        tokio::time::sleep(READY_POLL_INTERVAL).await;
    }
}

/// A real MQTT handshake (CONNECT, CONNACK, DISCONNECT): rumqttd logs a bare TCP probe as an
/// error, and only a CONNACK proves the router is serving.
async fn probe_connect(version: MqttVersion, addr: SocketAddr) -> io::Result<()> {
    let timed_out = |_| io::Error::new(io::ErrorKind::TimedOut, "probe timed out");
    let mut stream = tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(timed_out)??;
    stream.set_nodelay(true)?;
    let client_id = format!("hivekeeper-probe-{:016x}", random_u64());
    stream
        .write_all(&connect_packet(version, &client_id))
        .await?;
    // CONNACK: 0x20, remaining length, flags, return/reason code (0 = accepted).
    let mut connack = [0u8; 4];
    tokio::time::timeout(PROBE_TIMEOUT, stream.read_exact(&mut connack))
        .await
        .map_err(timed_out)??;
    if connack[0] != 0x20 || connack[3] != 0x00 {
        return Err(io::Error::other(format!(
            "unexpected CONNACK {connack:02x?}"
        )));
    }
    stream.write_all(&[0xE0, 0x00]).await?;
    Ok(())
}

/// An MQTT CONNECT with a clean session, 10 s keepalive and no credentials.
fn connect_packet(version: MqttVersion, client_id: &str) -> Vec<u8> {
    let (level, properties): (u8, &[u8]) = match version {
        MqttVersion::V311 => (4, &[]),
        // MQTT 5 adds a property length (0: none) after the keepalive.
        MqttVersion::V5 => (5, &[0]),
    };
    let client_id_len = u16::try_from(client_id.len()).expect("probe client ids are short");
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', level, 0x02, 0, 10];
    body.extend_from_slice(properties);
    body.extend_from_slice(&client_id_len.to_be_bytes());
    body.extend_from_slice(client_id.as_bytes());
    let remaining_len = u8::try_from(body.len()).expect("probe CONNECT is under 128 bytes");
    assert!(remaining_len < 128, "one-byte remaining length");
    let mut packet = vec![0x10, remaining_len];
    packet.extend_from_slice(&body);
    packet
}

async fn stop_listeners(listeners: Vec<ListenerThread>) {
    for listener in listeners {
        let _ = listener.stop().await;
    }
}

/// Joins an OS thread without blocking the runtime; `false` if it did not end in time.
async fn join_thread(thread: std::thread::JoinHandle<()>) -> bool {
    let join = tokio::task::spawn_blocking(move || thread.join());
    matches!(
        tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, join).await,
        Ok(Ok(_))
    )
}

/// A random number for client ids, from the standard library's per-process random keys.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_packets_have_the_right_shape() {
        let v4 = connect_packet(MqttVersion::V311, "probe");
        assert_eq!(
            v4,
            [
                0x10, 17, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 10, 0, 5, b'p', b'r', b'o',
                b'b', b'e'
            ]
        );
        let v5 = connect_packet(MqttVersion::V5, "probe");
        assert_eq!(v5[1], 18, "one more byte: the property length");
        assert_eq!(v5[8], 5, "protocol level 5");
        assert_eq!(v5[12], 0, "empty properties");
    }

    /// Stands in for rumqttd's unexported server error: `#[from] io::Error` behind a message.
    #[derive(Debug)]
    struct ServerError(io::Error);

    impl std::fmt::Display for ServerError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "I/O {}", self.0)
        }
    }

    impl std::error::Error for ServerError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_listener_that_loses_the_bind_race_reports_addr_in_use() {
        let addr: SocketAddr = "127.0.0.1:1883".parse().expect("literal address");
        let error = ServerError(io::Error::from(io::ErrorKind::AddrInUse));
        let (reason, addr_in_use) = describe_listen_error(&error);
        assert!(addr_in_use, "{reason}");
        let exit = ListenerExit {
            addr,
            reason,
            addr_in_use,
        };
        assert!(matches!(exit.into_error(), MqttError::ListenAddrInUse { addr: a } if a == addr));

        let denied = ServerError(io::Error::from(io::ErrorKind::PermissionDenied));
        let (reason, addr_in_use) = describe_listen_error(&denied);
        assert!(!addr_in_use);
        let exit = ListenerExit {
            addr,
            reason,
            addr_in_use,
        };
        match exit.into_error() {
            MqttError::Listen { reason, .. } => assert!(reason.starts_with("I/O "), "{reason}"),
            other => panic!("expected Listen, got {other:?}"),
        }
    }

    #[test]
    fn a_panicking_listener_thread_still_reports_its_end() {
        let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
        let addr: SocketAddr = "127.0.0.1:1883".parse().expect("literal address");
        let thread = std::thread::spawn(move || {
            let _guard = ExitGuard {
                exit_tx,
                addr,
                done: false,
            };
            panic!("listener thread dies");
        });
        assert!(thread.join().is_err(), "the thread panicked");
        let exit = exit_rx.try_recv().expect("the guard reported the end");
        assert_eq!(exit.addr, addr);
        assert!(exit.reason.contains("unexpectedly"), "{}", exit.reason);
    }

    #[test]
    fn reserving_a_taken_address_is_addr_in_use() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = taken.local_addr().expect("bound address");
        match reserve_addrs(&[(MqttVersion::V311, addr)]) {
            Err(MqttError::ListenAddrInUse { addr: reported }) => assert_eq!(reported, addr),
            other => panic!("expected ListenAddrInUse, got {other:?}"),
        }
    }

    #[test]
    fn two_port_zero_listeners_get_different_ports() {
        let any = "127.0.0.1:0".parse().expect("literal address");
        let addrs = reserve_addrs(&[(MqttVersion::V311, any), (MqttVersion::V5, any)])
            .expect("loopback ports are available");
        assert_ne!(addrs[0].1.port(), 0);
        assert_ne!(addrs[0].1.port(), addrs[1].1.port());
    }
}
