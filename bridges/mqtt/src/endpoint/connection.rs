//! One connection's task: CONNECT, then reading packets, answering them (PUBACK, SUBACK,
//! PINGRESP, ... all written by this task, never behind anyone else's work), handing requests
//! to the transport's handler, and writing what the agent's outbound queue holds.
//!
//! ```text
//!  socket ──read──▶ codec::decode ──▶ handle ──PUBLISH on own req──▶ Inlet::deliver ─▶ handler
//!    ▲                                  │ acks, PINGRESP, SUBACK
//!    │                                  ▼
//!    └──write (bounded by write_timeout)── wbuf ◀── drain ◀── OutQueue ◀── Transport::publish*
//! ```
//!
//! Each loop turn: move queued messages into the write buffer (as many as the QoS 1 window
//! allows), write it, then wait for whichever comes first: bytes from the socket, a queued
//! message, the keepalive deadline, a takeover or shutdown.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use metrics::counter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use super::Shared;
use super::codec::{
    self, Connect, DecodeError, DisconnectReason, EncodeError, Incoming, Outgoing, Qos, Version,
};
use super::handshake::{ConnectFailure, connect_refusal, read_connect, refuse_connect};
use super::queue::OutMessage;
use super::registry::{Client, NOT_SUBSCRIBED};
use crate::reply_route::ReplyRoute;
use crate::transport::{Flow, Inlet};
use crate::transport_metrics::{
    ENDPOINT_ABANDONED_TOTAL, ENDPOINT_CONNECT_TIMEOUTS_TOTAL, ENDPOINT_CONNECTS_ABANDONED_TOTAL,
    ENDPOINT_CONNECTS_REFUSED_TOTAL, ENDPOINT_CONNECTS_TOTAL, ENDPOINT_KEEPALIVE_TIMEOUTS_TOTAL,
    ENDPOINT_MALFORMED_PACKETS_TOTAL, ENDPOINT_OUTBOUND_TOO_LARGE_TOTAL,
    ENDPOINT_OUTBOUND_UNROUTED_TOTAL, ENDPOINT_PACKETS_TOO_LARGE_TOTAL,
    ENDPOINT_PROTOCOL_ERRORS_TOTAL, ENDPOINT_PUBLISHES_REFUSED_TOTAL,
    ENDPOINT_SLOW_CONSUMER_DISCONNECTS_TOTAL, ENDPOINT_SUBSCRIBES_REFUSED_TOTAL,
    ENDPOINT_TAKEOVERS_TOTAL, MESSAGES_IN_TOTAL, MESSAGES_OUT_TOTAL,
};

/// Write buffer size past which the drain stops to write before taking more.
const WRITE_BATCH_BYTES: usize = 64 * 1024;
/// Time bound of the last words (a 5.0 DISCONNECT, the final flush) on a closing connection.
pub(super) const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a revoked connection waits, after its last words, for the client to answer them
/// (the PUBACK of its `lease.revoked` notice) before the socket closes: a client that reads
/// the close together with the notice may drop the notice (rumqttc does).
const REVOKED_LINGER: Duration = Duration::from_millis(500);
/// Initial read buffer: a CONNECT or a request fits.
const READ_BUFFER_BYTES: usize = 1024;

/// How long a connection may be silent before what it sends next is looked behind for the
/// end of the connection ([`abandoned`]).
const SILENCE_LOOK_BEHIND: Duration = Duration::from_secs(1);

/// Whether what was just read after a silence was abandoned by its client: the connection is
/// already closed right behind it (end of stream, no DISCONNECT among the packets). That is
/// what a client leaves behind when it gave up on this member (a paused process, a partition
/// healing) and resent its requests elsewhere; the kernel kept the bytes and the close until
/// this process read them. Handling those requests now would put a stale copy in the log after
/// the agent moved on, past what the retry memory keeps of it, so they are dropped unanswered
/// (never acknowledged: MQTT lets a receiver drop them). A client that ends with DISCONNECT
/// meant what it sent, and is served.
fn abandoned<S: AsyncRead + Unpin>(
    stream: &mut S,
    rbuf: &mut BytesMut,
    version: Version,
    shared: &Shared,
) -> bool {
    let look = std::pin::pin!(stream.read_buf(rbuf));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    if !matches!(
        std::future::Future::poll(look, &mut context),
        std::task::Poll::Ready(Ok(0))
    ) {
        return false;
    }
    let mut packets = rbuf.clone();
    while let Ok(Some(packet)) =
        codec::decode(version, &mut packets, shared.settings.packet_bytes_max)
    {
        if matches!(packet, Incoming::Disconnect) {
            return false;
        }
    }
    counter!(ENDPOINT_ABANDONED_TOTAL).increment(1);
    debug!("a connection closed right behind what it sent after a silence: dropped unhandled");
    true
}
/// A buffer grown past this (one large packet or batch) is given back once empty, so an idle
/// agent costs its small buffers again, not its largest moment.
const BUFFER_KEEP_BYTES: usize = 16 * 1024;

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The client sent DISCONNECT or closed its socket.
    Client,
    /// A read or write failed (reset, broken pipe).
    Io,
    /// Another connection with the same client id took over.
    TakenOver,
    /// The agent's account was removed or its secret rotated.
    Revoked,
    /// The endpoint is shutting down.
    Shutdown,
    /// Nothing received for 1.5 × the keepalive.
    KeepAliveTimeout,
    /// The outbound queue overflowed with responses, or a write did not finish in time.
    SlowConsumer,
    /// The codec refused a packet.
    Malformed,
    /// A packet over `packet_bytes_max`.
    TooLarge,
    /// A packet the protocol forbids here (a second CONNECT, a CONNACK, ...).
    ProtocolError,
    /// More unacknowledged QoS 2 publishes than the Receive Maximum the endpoint gave.
    ReceiveMaximumExceeded,
}

impl End {
    /// Counts the end in its endpoint metric, for the ends that have one.
    fn count(self) {
        match self {
            End::KeepAliveTimeout => counter!(ENDPOINT_KEEPALIVE_TIMEOUTS_TOTAL).increment(1),
            End::SlowConsumer => counter!(ENDPOINT_SLOW_CONSUMER_DISCONNECTS_TOTAL).increment(1),
            End::Malformed => counter!(ENDPOINT_MALFORMED_PACKETS_TOTAL).increment(1),
            End::TooLarge => counter!(ENDPOINT_PACKETS_TOO_LARGE_TOTAL).increment(1),
            End::ProtocolError | End::ReceiveMaximumExceeded => {
                counter!(ENDPOINT_PROTOCOL_ERRORS_TOTAL).increment(1);
            }
            End::Client | End::Io | End::TakenOver | End::Revoked | End::Shutdown => {}
        }
    }

    /// The 5.0 DISCONNECT reason sent for this end, if any.
    fn disconnect_reason(self) -> Option<DisconnectReason> {
        match self {
            End::Client | End::Io => None,
            End::TakenOver => Some(DisconnectReason::SessionTakenOver),
            End::Revoked => Some(DisconnectReason::NotAuthorized),
            End::Shutdown => Some(DisconnectReason::ShuttingDown),
            End::KeepAliveTimeout => Some(DisconnectReason::KeepAliveTimeout),
            End::SlowConsumer => Some(DisconnectReason::QuotaExceeded),
            End::Malformed => Some(DisconnectReason::Malformed),
            End::TooLarge => Some(DisconnectReason::PacketTooLarge),
            End::ProtocolError => Some(DisconnectReason::ProtocolError),
            End::ReceiveMaximumExceeded => Some(DisconnectReason::ReceiveMaximumExceeded),
        }
    }
}

/// Serves one accepted socket (plain TCP, or TLS after its handshake) until it ends. The
/// CONNECT must arrive by `connect_deadline`. `certificate_cn` is the CN of the client
/// certificate TLS verified (mutual TLS only). Never panics on input; every way out is counted.
pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    mut stream: S,
    certificate_cn: Option<String>,
    connect_deadline: Instant,
) {
    let mut stop = shared.stop_rx.clone();
    let Some(inlet) = shared.inlet() else {
        return;
    };
    let mut rbuf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let connect = tokio::select! {
        connect = tokio::time::timeout_at(
            connect_deadline,
            read_connect(&mut stream, &mut rbuf, shared.settings.packet_bytes_max),
        ) => connect,
        () = stopped(&mut stop) => return,
    };
    let connect = match connect {
        Err(_) => {
            counter!(ENDPOINT_CONNECT_TIMEOUTS_TOTAL).increment(1);
            return;
        }
        Ok(Err(ConnectFailure::Closed)) => {
            counter!(ENDPOINT_CONNECTS_ABANDONED_TOTAL).increment(1);
            return;
        }
        Ok(Err(ConnectFailure::Decode(error))) => {
            refuse_connect(&mut stream, error).await;
            return;
        }
        Ok(Ok(connect)) => connect,
    };
    let version = connect.version;
    let refusal = connect_refusal(&shared, &connect, &stop, certificate_cn.as_deref()).await;
    if let Some(refusal) = refusal {
        counter!(ENDPOINT_CONNECTS_REFUSED_TOTAL).increment(1);
        debug!(client_id = %connect.client_id, ?refusal, "CONNECT refused");
        let mut out = BytesMut::new();
        if codec::encode(version, Outgoing::ConnRefused(refusal), &mut out, None).is_ok() {
            let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, stream.write_all(&out)).await;
        }
        return;
    }

    let client = Arc::new(Client::new(
        shared.registry.next_conn_id(),
        shared.settings.connection_queue_max,
    ));
    if shared
        .registry
        .register(&connect.client_id, client.clone())
        .is_some()
    {
        counter!(ENDPOINT_TAKEOVERS_TOTAL).increment(1);
    }
    counter!(ENDPOINT_CONNECTS_TOTAL).increment(1);
    let mut session = Session::new(&shared, &connect, client.clone(), inlet);
    let end = session.run(&mut stream, &mut rbuf, &mut stop).await;
    shared
        .registry
        .unregister(&connect.client_id, client.conn_id);
    client.queue.close();
    end.count();
    debug!(agent = %connect.client_id, ?end, "connection ended");
    say_last_words(&mut stream, &mut session, version, end).await;
}

/// Closes an ended session's socket after its last words: the queued messages on shutdown or
/// revocation (a removed agent's `lease.revoked` notices), and a 5.0 DISCONNECT with the
/// reason. A revoked connection with messages awaiting their PUBACK then lingers for the
/// client's answer before the close.
async fn say_last_words<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    session: &mut Session,
    version: Version,
    end: End,
) {
    let mut out = BytesMut::new();
    if matches!(end, End::Shutdown | End::Revoked) {
        session.drain(&mut out);
    }
    // Only QoS 1 messages are answered (a PUBACK): with none in flight, written now or before,
    // there is nothing to wait for, and the connection closes at once.
    let answers_owed = !session.inflight.is_empty();
    if version == Version::V5
        && let Some(reason) = end.disconnect_reason()
    {
        let _ = codec::encode(version, Outgoing::Disconnect(reason), &mut out, None);
    }
    if !out.is_empty() {
        let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, stream.write_all(&out)).await;
    }
    if end == End::Revoked && answers_owed {
        let mut answer = [0u8; 64];
        let _ = tokio::time::timeout(REVOKED_LINGER, stream.read(&mut answer)).await;
    }
    let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, stream.shutdown()).await;
}

/// A connected agent's state, owned by its task.
struct Session {
    shared: Arc<Shared>,
    client: Arc<Client>,
    /// Where this agent's requests go.
    inlet: Inlet,
    version: Version,
    /// The agent: the client id its CONNECT was accepted with.
    agent: String,
    /// `{prefix}/req/{agent}`: the only topic this agent may publish on.
    request_topic: String,
    /// `{prefix}/rsp/{agent}`.
    response_topic: String,
    /// `{prefix}/evt/{agent}`.
    event_topic: String,
    /// 1.5 × the client's keepalive; `None` when it asked for none.
    keepalive_timeout: Option<Duration>,
    /// QoS 1 messages sent and not yet acknowledged, by packet id.
    inflight: HashSet<u16>,
    /// Most unacknowledged QoS 1 messages to this client.
    inflight_max: usize,
    next_pkid: u16,
    /// The client's QoS 2 publishes delivered and awaiting PUBREL, by packet id.
    awaiting_release: HashSet<u16>,
    /// The client's Maximum Packet Size (5.0).
    client_packet_max: Option<u32>,
    /// The client asked for a session that outlives the connection (5.0 Session Expiry
    /// Interval > 0): the CONNACK says 0, none is kept.
    session_expiry_asked: bool,
    /// The agent is over its request rate until then: nothing more is read or handled from
    /// its connection meanwhile (backpressure: its TCP window fills, so a flooder is paced to
    /// its rate instead of costing the node a refusal per request at full speed).
    paused_until: Option<Instant>,
}

impl Session {
    fn new(shared: &Arc<Shared>, connect: &Connect, client: Arc<Client>, inlet: Inlet) -> Session {
        let topics = &shared.topics;
        let agent = &connect.client_id;
        let client_window = usize::from(connect.receive_maximum.unwrap_or(u16::MAX)).max(1);
        Session {
            shared: shared.clone(),
            client,
            inlet,
            version: connect.version,
            agent: agent.clone(),
            request_topic: topics.request(agent),
            response_topic: topics.response(agent),
            event_topic: topics.event(agent),
            keepalive_timeout: (connect.keep_alive_s > 0)
                .then(|| Duration::from_millis(u64::from(connect.keep_alive_s) * 1500)),
            inflight: HashSet::new(),
            inflight_max: shared.settings.inflight_max.min(client_window),
            next_pkid: 0,
            awaiting_release: HashSet::new(),
            client_packet_max: connect.max_packet_size,
            session_expiry_asked: connect.session_expiry_s.is_some_and(|s| s > 0),
            paused_until: None,
        }
    }

    /// The receive maximum the endpoint announces and enforces for QoS 2.
    fn receive_maximum(&self) -> u16 {
        u16::try_from(self.shared.settings.inflight_max).unwrap_or(u16::MAX)
    }

    async fn run<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        rbuf: &mut BytesMut,
        stop: &mut watch::Receiver<bool>,
    ) -> End {
        let mut wbuf = BytesMut::new();
        self.write_packet(
            Outgoing::ConnAck {
                packet_bytes_max: self.shared.settings.packet_bytes_max,
                receive_maximum: self.receive_maximum(),
                session_expiry_zeroed: self.session_expiry_asked,
            },
            &mut wbuf,
        );
        // Anything that arrived behind the CONNECT is handled before the first wait.
        if let Some(end) = self.handle_buffered(rbuf, &mut wbuf) {
            return end;
        }
        let write_timeout = Duration::from_millis(self.shared.settings.write_timeout_ms);
        let mut last_received = Instant::now();
        loop {
            let more = self.drain(&mut wbuf);
            if !wbuf.is_empty() {
                match tokio::time::timeout(write_timeout, stream.write_all(&wbuf)).await {
                    Ok(Ok(())) if wbuf.capacity() > BUFFER_KEEP_BYTES => wbuf = BytesMut::new(),
                    Ok(Ok(())) => wbuf.clear(),
                    Ok(Err(_)) => return End::Io,
                    Err(_) => return End::SlowConsumer,
                }
            }
            if self.client.queue.overflowed() {
                return End::SlowConsumer;
            }
            if self.client.taken_over.load(Ordering::Acquire) {
                return End::TakenOver;
            }
            if self.client.revoked.load(Ordering::Acquire) && !more {
                return End::Revoked;
            }
            if more {
                continue;
            }
            if rbuf.is_empty() && rbuf.capacity() > BUFFER_KEEP_BYTES {
                *rbuf = BytesMut::with_capacity(READ_BUFFER_BYTES);
            }
            let keepalive_deadline = self
                .keepalive_timeout
                .map(|timeout| last_received + timeout);
            let paused = self.paused_until;
            let handled = tokio::select! {
                // Over its rate: no reading until the pause ends, then what is buffered first.
                () = sleep_until_or_forever(paused), if paused.is_some() => {
                    self.paused_until = None;
                    self.handle_buffered(rbuf, &mut wbuf)
                }
                read = stream.read_buf(rbuf), if paused.is_none() => match read {
                    Ok(0) => return End::Client,
                    Ok(_) => {
                        let silent = last_received.elapsed() > SILENCE_LOOK_BEHIND;
                        last_received = Instant::now();
                        if silent && abandoned(&mut *stream, rbuf, self.version, &self.shared) {
                            return End::Client;
                        }
                        self.handle_buffered(rbuf, &mut wbuf)
                    }
                    Err(_) => return End::Io,
                },
                () = self.client.queue.ready.notified() => None,
                () = self.client.kick.notified() => None,
                () = sleep_until_or_forever(keepalive_deadline) => return End::KeepAliveTimeout,
                () = stopped(stop) => return End::Shutdown,
            };
            if let Some(end) = handled {
                // Acknowledgements already encoded still go out.
                let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, stream.write_all(&wbuf)).await;
                return end;
            }
        }
    }

    /// Handles every complete packet in `rbuf`, or those before a pause (the rest wait in
    /// `rbuf` until it ends).
    fn handle_buffered(&mut self, rbuf: &mut BytesMut, wbuf: &mut BytesMut) -> Option<End> {
        loop {
            if self.paused_until.is_some() {
                return None;
            }
            let packet =
                match codec::decode(self.version, rbuf, self.shared.settings.packet_bytes_max) {
                    Ok(Some(packet)) => packet,
                    Ok(None) => return None,
                    Err(DecodeError::TooLarge { .. }) => return Some(End::TooLarge),
                    Err(DecodeError::BareDisconnect) => return Some(End::Client),
                    Err(_) => return Some(End::Malformed),
                };
            if let Some(end) = self.handle(packet, wbuf) {
                return Some(end);
            }
        }
    }

    fn handle(&mut self, packet: Incoming, wbuf: &mut BytesMut) -> Option<End> {
        match packet {
            Incoming::Publish(publish) => return self.handle_publish(publish, wbuf),
            Incoming::PubAck(pkid) => {
                self.inflight.remove(&pkid);
            }
            Incoming::PubRel(pkid) => {
                self.awaiting_release.remove(&pkid);
                self.write_packet(Outgoing::PubComp(pkid), wbuf);
            }
            Incoming::Subscribe(pkid, filters) => {
                let codes = filters
                    .into_iter()
                    .map(|(filter, qos)| self.subscribe(&filter, qos))
                    .collect();
                self.write_packet(Outgoing::SubAck(pkid, codes), wbuf);
            }
            Incoming::Unsubscribe(pkid, filters) => {
                let existed = filters
                    .iter()
                    .map(|filter| self.unsubscribe(filter))
                    .collect();
                self.write_packet(Outgoing::UnsubAck(pkid, existed), wbuf);
            }
            Incoming::PingReq => self.write_packet(Outgoing::PingResp, wbuf),
            Incoming::Disconnect => return Some(End::Client),
            Incoming::Unexpected(_) => return Some(End::ProtocolError),
        }
        None
    }

    fn handle_publish(&mut self, publish: codec::Publish, wbuf: &mut BytesMut) -> Option<End> {
        let own_topic = publish.topic.as_deref() == Some(self.request_topic.as_str());
        let own_response_topic = publish
            .response_topic
            .as_deref()
            .is_none_or(|topic| topic == self.response_topic);
        let allowed = own_topic && own_response_topic;
        if !allowed {
            counter!(ENDPOINT_PUBLISHES_REFUSED_TOTAL).increment(1);
        }
        let pkid = publish.pkid;
        match publish.qos {
            2 if allowed && self.awaiting_release.contains(&pkid) => {
                // A resend of a QoS 2 publish already delivered: acknowledge, do not deliver.
                self.write_packet(
                    Outgoing::PubRec {
                        pkid,
                        refused: false,
                    },
                    wbuf,
                );
                return None;
            }
            2 if allowed && self.awaiting_release.len() >= usize::from(self.receive_maximum()) => {
                return Some(End::ReceiveMaximumExceeded);
            }
            _ => {}
        }
        if allowed {
            let route = if publish.response_topic.is_some() || publish.correlation_data.is_some() {
                ReplyRoute::v5(self.response_topic.clone(), publish.correlation_data)
            } else {
                ReplyRoute::default()
            };
            counter!(MESSAGES_IN_TOTAL).increment(1);
            let agent = self.agent.clone();
            if let Flow::Pause(wait) = self.inlet.deliver(agent, publish.payload, route) {
                self.paused_until = Some(Instant::now() + wait);
            }
        }
        match publish.qos {
            0 => {}
            1 => self.write_packet(
                Outgoing::PubAck {
                    pkid,
                    refused: !allowed,
                },
                wbuf,
            ),
            _ => {
                // 3.1.1 has no refusal code: a refused QoS 2 publish runs the whole exchange
                // (PUBREL is answered whatever the id); 5.0's 0x87 ends it at PUBREC.
                if allowed {
                    self.awaiting_release.insert(pkid);
                }
                self.write_packet(
                    Outgoing::PubRec {
                        pkid,
                        refused: !allowed,
                    },
                    wbuf,
                );
            }
        }
        None
    }

    /// The QoS slot of `filter` when it is the agent's own response or event topic.
    fn slot(&self, filter: &str) -> Option<&std::sync::atomic::AtomicU8> {
        if filter == self.response_topic {
            Some(&self.client.rsp_qos)
        } else if filter == self.event_topic {
            Some(&self.client.evt_qos)
        } else {
            None
        }
    }

    /// Grants a subscription to the agent's own response or event topic (at most QoS 1: the
    /// endpoint sends nothing at QoS 2, which §3.8.4 allows), refuses anything else.
    fn subscribe(&self, filter: &str, qos: Qos) -> Option<Qos> {
        let Some(slot) = self.slot(filter) else {
            counter!(ENDPOINT_SUBSCRIBES_REFUSED_TOTAL).increment(1);
            return None;
        };
        let granted = qos.min(1);
        slot.store(granted, Ordering::Release);
        Some(granted)
    }

    /// Drops a subscription; whether there was one.
    fn unsubscribe(&self, filter: &str) -> bool {
        self.slot(filter)
            .is_some_and(|slot| slot.swap(NOT_SUBSCRIBED, Ordering::AcqRel) != NOT_SUBSCRIBED)
    }

    /// Moves queued messages into `wbuf` while the QoS 1 window has room. Whether more are
    /// waiting and could be sent now (the caller writes and comes back without waiting).
    fn drain(&mut self, wbuf: &mut BytesMut) -> bool {
        while self.inflight.len() < self.inflight_max {
            if wbuf.len() >= WRITE_BATCH_BYTES {
                return true;
            }
            let Some(message) = self.client.queue.pop() else {
                return false;
            };
            self.write_message(message, wbuf);
        }
        false
    }

    fn write_message(&mut self, message: OutMessage, wbuf: &mut BytesMut) {
        // Unsubscribed since it was queued: dropped, as a broker would.
        let Some(qos) = self.client.granted(message.class) else {
            counter!(ENDPOINT_OUTBOUND_UNROUTED_TOTAL).increment(1);
            return;
        };
        let pkid = if qos >= 1 { self.allocate_pkid() } else { 0 };
        let packet = Outgoing::Publish {
            topic: message.topic,
            qos: qos.min(1),
            pkid,
            payload: message.payload,
            correlation_data: message.correlation_data,
        };
        let mark = wbuf.len();
        match codec::encode(self.version, packet, wbuf, self.client_packet_max) {
            Ok(()) => {
                if pkid != 0 {
                    self.inflight.insert(pkid);
                }
                counter!(MESSAGES_OUT_TOTAL).increment(1);
            }
            Err(error) => {
                wbuf.truncate(mark);
                if error == EncodeError::TooLarge {
                    counter!(ENDPOINT_OUTBOUND_TOO_LARGE_TOTAL).increment(1);
                } else {
                    debug!(?error, "message not encodable; dropped");
                }
            }
        }
    }

    /// A packet id not in flight (there is always one: the window is below 65,535).
    fn allocate_pkid(&mut self) -> u16 {
        loop {
            self.next_pkid = self.next_pkid.checked_add(1).unwrap_or(1);
            if !self.inflight.contains(&self.next_pkid) {
                return self.next_pkid;
            }
        }
    }

    fn write_packet(&self, packet: Outgoing, wbuf: &mut BytesMut) {
        if let Err(error) = codec::encode(self.version, packet, wbuf, self.client_packet_max) {
            debug!(?error, "control packet not encodable; skipped");
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Resolves once shutdown began (or the endpoint is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
