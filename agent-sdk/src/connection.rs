//! The connection task: polls the rumqttc event loop, (re)subscribes, fails over, and routes
//! what arrives. It never publishes.
//!
//! ```text
//!  broker list ─▶ EventLoop::poll() ─┬─ ConnAck ──▶ SUBSCRIBE rsp+evt (pushed to `pending`)
//!      ▲                             ├─ SubAck  ──▶ link = ready, epoch + 1
//!      │ next broker,                ├─ Publish rsp/{agent} ─▶ pending map[id] ─▶ oneshot
//!      │ jittered backoff            ├─ Publish evt/{agent} ─▶ broadcast<Event>
//!      └──────────────────── Err ────┘              (unknown id, undecodable: dropped, counted)
//!                                 └─ final? (CONNACK refusing the credentials, a TLS mismatch)
//!                                      ─▶ `refused`: `Agent::connect` returns it at once
//! ```
//!
//! A failure is final when only another configuration can fix it ([`verdict`]): the broker's
//! CONNACK refused the credentials, or TLS showed a mismatch (the broker expects TLS, does
//! not speak it, requires a client certificate, refused ours, or is not trusted). Whether a
//! plaintext port that answered garbage speaks TLS (or a TLS handshake that was closed met a
//! plaintext port) is asked on a connection of its own ([`settle`]). The task goes on
//! retrying either way; only `connect` stops waiting.
//!
//! Why it never publishes: rumqttc's request channel is drained only by `poll()`, so a publish
//! awaited inside the polling task deadlocks once the channel is full (rumqtt#1025, #263,
//! #910). Callers publish from their own tasks. The one packet this task must send, the
//! SUBSCRIBE after each ConnAck, goes into the event loop's own `pending` queue, which `poll()`
//! sends before anything in the channel: no channel, no deadlock, and the subscription always
//! precedes the requests that wait for its responses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_tls::rustls::{self, AlertDescription, CertificateError, ClientConfig};
use rumqttc::{
    ConnectReturnCode, ConnectionError, Event as MqttEvent, EventLoop, MqttOptions, NetworkOptions,
    Packet, QoS, Request as MqttRequest, StateError, Subscribe, SubscribeFilter,
    SubscribeReasonCode, TlsConfiguration, Transport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, broadcast, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use hivekeeper_protocol::{Event, Response, validate};

use crate::backoff::Backoff;
use crate::config::{AgentConfig, BrokerAddr};
use crate::error::{AgentError, CredentialsRefusal, TlsFailure};
use crate::hold_watch::HoldWatches;

/// Largest incoming MQTT packet. Responses are small except `inspect` of a long queue (about
/// 80 bytes a waiter), so this is far above rumqttc's 10 KiB default.
const INCOMING_PACKET_BYTES_MAX: usize = 1024 * 1024;
/// Largest outgoing packet: a request is at most 8 KiB (the service refuses more), plus topic.
const OUTGOING_PACKET_BYTES_MAX: usize = validate::REQUEST_BYTES_MAX + 1024;
/// Capacity of rumqttc's request channel. Callers' publishes wait (under their attempt
/// timeout) when it is full, which is the back-pressure we want.
pub(crate) const REQUEST_CHANNEL_CAPACITY: usize = 128;
/// Events kept for slow receivers of [`crate::Agent::events`] before they see `Lagged`.
const EVENT_CHANNEL_CAPACITY: usize = 256;

/// The state of the MQTT link, watched by every request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    /// Connected AND subscribed: a request published now can get its response.
    pub ready: bool,
    /// Counts subscriptions made. A request remembers the epoch it published under; a change
    /// means its response may have been lost with the old connection.
    pub epoch: u64,
    /// Index in the broker list of the current (or last) broker.
    pub broker: usize,
}

/// How long a broker may go on answering `unavailable`, and nothing else, after its first
/// `unavailable` before the agent leaves it for the next one. A node answers `unavailable` only
/// after it has waited for a leader or found itself without a quorum or cut off from the
/// cluster (so the answer is already evidence); this short grace keeps an agent on a broker
/// whose next answer is fine (a one-off refusal during an election) and lets the clients of a
/// cut-off member move within a second of the cut.
pub(crate) const UNAVAILABLE_FAILOVER: Duration = Duration::from_millis(250);

/// What the connection task shares with the request side.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Callers waiting for a response, by request id. The router removes an entry when it
    /// delivers; a caller that gives up removes its own.
    pub pending: Mutex<HashMap<String, oneshot::Sender<Response>>>,
    /// Decoded events, for sessions and for the application.
    pub events: broadcast::Sender<Event>,
    /// The held grants waiting for their `*.lost` event ([`crate::Guard::ended`]).
    pub hold_watches: Arc<HoldWatches>,
    /// The link state; requests wait on it.
    pub link: watch::Sender<Link>,
    /// Counters, for tests and for an application's own metrics.
    pub counters: Counters,
    /// The last connection failure that only another configuration can fix (a CONNACK
    /// refusing the credentials, a TLS mismatch); [`crate::Agent::connect`] returns it at once.
    pub refused: watch::Sender<Option<AgentError>>,
    /// Since when the current connection (its epoch) has answered only `unavailable`.
    unavailable_since: Mutex<Option<(u64, Instant)>>,
    /// Tells the connection task to leave the current broker.
    move_on: Notify,
}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared {
            pending: Mutex::new(HashMap::new()),
            events: broadcast::channel(EVENT_CHANNEL_CAPACITY).0,
            hold_watches: Arc::default(),
            link: watch::Sender::new(Link {
                ready: false,
                epoch: 0,
                broker: 0,
            }),
            counters: Counters::default(),
            refused: watch::Sender::new(None),
            unavailable_since: Mutex::new(None),
            move_on: Notify::new(),
        }
    }

    /// A request sent under link `epoch` was answered `unavailable`. The first such answer
    /// arms a timer: if the same connection has answered nothing else when it fires,
    /// [`UNAVAILABLE_FAILOVER`] later, the connection task is told to try the next broker (a
    /// member cut off from the majority answers `unavailable` to everything, and stays
    /// connected). Timed rather than checked at the next answer, which the request's backoff
    /// could put off well past the grace.
    pub(crate) fn unavailable(self: &Arc<Self>, epoch: u64) {
        let first = {
            let mut since = self
                .unavailable_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match *since {
                Some((at_epoch, _)) if at_epoch == epoch => return,
                _ => {
                    let first = (epoch, Instant::now());
                    *since = Some(first);
                    first
                }
            }
        };
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(first.1 + UNAVAILABLE_FAILOVER).await;
            let mut since = shared
                .unavailable_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Still the same run of `unavailable` on the same connection: leave it.
            if *since == Some(first) && shared.link.borrow().epoch == first.0 {
                *since = None;
                shared.move_on.notify_one();
            }
        });
    }

    /// Any other answer: the broker's node reaches a leader.
    pub(crate) fn answered(&self) {
        *self
            .unavailable_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The pending map. A panic while holding the lock cannot leave the map inconsistent
    /// (every critical section is a single insert or remove), so poisoning is ignored.
    pub(crate) fn pending(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Response>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Monotonic counters of what the connection and the requests did.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub connects: AtomicU64,
    pub connection_errors: AtomicU64,
    pub resends: AtomicU64,
    pub responses_unknown: AtomicU64,
    pub responses_undecodable: AtomicU64,
    pub events_undecodable: AtomicU64,
    pub requests_abandoned: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The MQTT options for one broker. Rebuilt on every failover: rumqttc keeps the address in
/// its options, and the event loop's `mqtt_options` field is public so they can be replaced
/// between connections.
/// With `tls`, the connection is TLS and the broker's certificate must name `broker.host`.
pub(crate) fn mqtt_options(
    config: &AgentConfig,
    broker: &BrokerAddr,
    tls: Option<&Arc<ClientConfig>>,
) -> MqttOptions {
    let mut options = MqttOptions::new(config.agent_id.clone(), broker.host.clone(), broker.port);
    if let Some(tls) = tls {
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
            tls.clone(),
        )));
    }
    options
        .set_keep_alive(Duration::from_secs(config.mqtt_keepalive_s))
        // A clean session: the SDK resends by request id itself, and a broker-side session
        // would only replay stale requests after a failover.
        .set_clean_session(true)
        .set_max_packet_size(INCOMING_PACKET_BYTES_MAX, OUTGOING_PACKET_BYTES_MAX)
        .set_request_channel_capacity(REQUEST_CHANNEL_CAPACITY);
    if let Some(secret) = &config.secret {
        // Username = the agent id: the service checks it equals the client id.
        options.set_credentials(config.agent_id.clone(), secret.expose());
    }
    options
}

/// Socket options, kept by the event loop across failovers.
pub(crate) fn network_options(config: &AgentConfig) -> NetworkOptions {
    let mut options = NetworkOptions::new();
    // Without it one request/response pair waits ~44 ms for Nagle + delayed ACK (DESIGN §7).
    options.set_tcp_nodelay(true);
    options.set_connection_timeout(config.connect_timeout_s);
    options
}

/// Everything the connection task needs; moved into it.
pub(crate) struct Connection {
    pub eventloop: EventLoop,
    pub config: Arc<AgentConfig>,
    pub brokers: Vec<BrokerAddr>,
    /// The index of the broker the event loop is set to reach now.
    pub broker: usize,
    /// Draws the next broker ([`AgentConfig::broker_order`]).
    pub rng: fastrand::Rng,
    /// TLS to every broker ([`AgentConfig::tls_ca`]), read once at connect.
    pub tls: Option<Arc<ClientConfig>>,
    pub response_topic: String,
    pub event_topic: String,
    pub shared: Arc<Shared>,
}

impl Connection {
    /// Polls until the agent is dropped (which aborts this task) or rumqttc reports that every
    /// client handle is gone.
    pub(crate) async fn run(mut self) {
        let mut broker = self.broker;
        let mut backoff = Backoff::new(
            Duration::from_millis(self.config.backoff_first_ms),
            Duration::from_millis(self.config.backoff_cap_ms),
        );
        loop {
            // `None`: leave this broker. The connection is dropped below, so whatever poll()
            // was doing goes with it.
            let polled = tokio::select! {
                polled = self.eventloop.poll() => Some(polled),
                () = self.shared.move_on.notified(), if self.brokers.len() > 1 => None,
            };
            let failure = match polled {
                None => Some(format!(
                    "it answered only unavailable for {} ms (its node reaches no leader)",
                    UNAVAILABLE_FAILOVER.as_millis()
                )),
                Some(Ok(MqttEvent::Incoming(Packet::ConnAck(_)))) => {
                    Counters::bump(&self.shared.counters.connects);
                    info!(broker = %self.brokers[broker], "connected; subscribing");
                    // No reconnect event exists (rumqttc#250) and the session is clean, so
                    // every ConnAck needs a new subscription.
                    let subscribe = Subscribe::new_many([
                        SubscribeFilter::new(self.response_topic.clone(), QoS::AtLeastOnce),
                        SubscribeFilter::new(self.event_topic.clone(), QoS::AtLeastOnce),
                    ]);
                    self.eventloop
                        .pending
                        .push_back(MqttRequest::Subscribe(subscribe));
                    None
                }
                Some(Ok(MqttEvent::Incoming(Packet::SubAck(ack)))) => {
                    if ack
                        .return_codes
                        .iter()
                        .any(|code| matches!(code, SubscribeReasonCode::Failure))
                    {
                        Some("the broker refused the subscription".to_string())
                    } else {
                        backoff.reset();
                        self.shared.link.send_modify(|link| {
                            link.ready = true;
                            link.epoch += 1;
                            link.broker = broker;
                        });
                        None
                    }
                }
                Some(Ok(MqttEvent::Incoming(Packet::Publish(publish)))) => {
                    self.route(&publish.topic, &publish.payload);
                    None
                }
                Some(Ok(_)) => None,
                Some(Err(ConnectionError::RequestsDone)) => return,
                Some(Err(e)) => {
                    let why = e.to_string();
                    let verdict = verdict(&self.brokers[broker], &e, self.tls.is_some());
                    // `e` is not `Sync`: it must be gone before the probe is awaited.
                    drop(e);
                    if let Some(refused) = settle(&self.brokers[broker], verdict).await {
                        self.shared.refused.send_replace(Some(refused));
                    }
                    Some(why)
                }
            };
            if let Some(why) = failure {
                self.shared.link.send_modify(|link| link.ready = false);
                Counters::bump(&self.shared.counters.connection_errors);
                // Drop the connection (a refused subscription leaves it open) and move to the
                // next broker after a jittered pause: `poll()` would retry at once.
                self.eventloop.clean();
                let delay = backoff.next_delay();
                let failed = broker;
                broker = self
                    .config
                    .broker_order
                    .after(failed, self.brokers.len(), &mut self.rng);
                warn!(
                    broker = %self.brokers[failed],
                    next = %self.brokers[broker],
                    delay_ms = delay.as_millis() as u64,
                    "connection failed: {why}"
                );
                tokio::time::sleep(delay).await;
                self.eventloop.mqtt_options =
                    mqtt_options(&self.config, &self.brokers[broker], self.tls.as_ref());
            }
        }
    }

    /// Delivers a response to its caller, or an event to the guard it ends (a `*.lost`) and
    /// to the broadcast. Never blocks.
    fn route(&self, topic: &str, payload: &[u8]) {
        let counters = &self.shared.counters;
        if topic == self.response_topic {
            let response = match Response::decode(payload) {
                Ok(response) => response,
                Err(e) => {
                    Counters::bump(&counters.responses_undecodable);
                    warn!("undecodable response dropped: {e}");
                    return;
                }
            };
            let waiter = response
                .id
                .as_deref()
                .and_then(|id| self.shared.pending().remove(id));
            match waiter {
                // The caller may have given up this instant; then the response is simply lost.
                Some(waiter) => {
                    let _ = waiter.send(response);
                }
                None => {
                    Counters::bump(&counters.responses_unknown);
                    debug!(id = ?response.id, outcome = ?response.outcome, "response to no waiting request dropped");
                }
            }
        } else if topic == self.event_topic {
            match Event::decode(payload) {
                // No receiver is fine: nobody is interested right now.
                Ok(event) => {
                    self.shared.hold_watches.route(&event);
                    let _ = self.shared.events.send(event);
                }
                Err(e) => {
                    // Unknown events are to be ignored (PROTOCOL.md §10), but counted.
                    Counters::bump(&counters.events_undecodable);
                    debug!("undecodable event ignored: {e}");
                }
            }
        }
    }
}

/// What a connection failure says about the configuration.
enum Verdict {
    /// Only another configuration can fix it.
    Final(AgentError),
    /// A plaintext connection got an answer that was not MQTT: perhaps a TLS alert.
    MaybeTls,
    /// A TLS handshake ended with the connection closed: perhaps a plaintext MQTT port.
    MaybePlaintext,
    /// It may pass: a broker down, restarting, overloaded.
    MayPass,
}

/// The verdict on `error`, a failed connection to `broker` (over TLS when `tls`).
fn verdict(broker: &BrokerAddr, error: &ConnectionError, tls: bool) -> Verdict {
    if let ConnectionError::ConnectionRefused(code) = error {
        let refusal = match code {
            ConnectReturnCode::BadUserNamePassword => CredentialsRefusal::BadUsernamePassword,
            ConnectReturnCode::NotAuthorized => CredentialsRefusal::NotAuthorized,
            _ => return Verdict::MayPass,
        };
        return Verdict::Final(AgentError::CredentialsRefused {
            broker: broker.to_string(),
            refusal,
        });
    }
    if let Some(failure) = rustls_cause(error).and_then(tls_failure_of) {
        return Verdict::Final(AgentError::Tls {
            broker: broker.to_string(),
            failure,
        });
    }
    let not_mqtt = matches!(
        error,
        ConnectionError::MqttState(StateError::Deserialization(_)) | ConnectionError::NotConnAck(_)
    );
    let closed_in_handshake = matches!(
        error,
        ConnectionError::Tls(rumqttc::TlsError::Io(io)) if matches!(
            io.kind(),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
        )
    );
    match tls {
        false if not_mqtt => Verdict::MaybeTls,
        true if closed_in_handshake => Verdict::MaybePlaintext,
        _ => Verdict::MayPass,
    }
}

/// The final error of `verdict`, if it has one; a `Maybe` verdict asks the broker.
async fn settle(broker: &BrokerAddr, verdict: Verdict) -> Option<AgentError> {
    let failure = match verdict {
        Verdict::Final(error) => return Some(error),
        Verdict::MaybeTls => TlsFailure::ExpectsTls,
        Verdict::MaybePlaintext => TlsFailure::NotTls,
        Verdict::MayPass => return None,
    };
    let head = first_answer(broker).await?;
    let confirmed = match failure {
        // 0x15: alert, 0x16: handshake; 0x03: the major version of every TLS record.
        TlsFailure::ExpectsTls => matches!(head, [0x15 | 0x16, 0x03]),
        // 0x20: CONNACK (whatever its code).
        _ => head[0] == 0x20,
    };
    confirmed.then(|| AgentError::Tls {
        broker: broker.to_string(),
        failure,
    })
}

/// The rustls error behind a connection failure, if TLS failed: rumqttc wraps it in its own
/// errors, and tokio-rustls in an `io::Error` (whose `source()` skips it, so it is unwrapped
/// by hand).
fn rustls_cause(error: &ConnectionError) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        next = error.source();
    }
    None
}

/// What a TLS error says about the configuration, when it says something final.
fn tls_failure_of(error: &rustls::Error) -> Option<TlsFailure> {
    match error {
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            Some(TlsFailure::CertificateRequired)
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied
            | AlertDescription::DecryptError),
        ) => Some(TlsFailure::CertificateRefused {
            reason: format!("{alert:?}"),
        }),
        rustls::Error::InvalidCertificate(
            cause @ (CertificateError::UnknownIssuer | CertificateError::BadSignature),
        ) => Some(TlsFailure::UnknownCa {
            reason: format!("{cause:?}"),
        }),
        rustls::Error::InvalidCertificate(cause) => Some(TlsFailure::BadCertificate {
            reason: format!("{cause:?}"),
        }),
        _ => None,
    }
}

/// How long the plaintext-versus-TLS probe waits, to connect and for the first bytes.
const TLS_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A minimal MQTT 3.1.1 CONNECT (empty client id, clean session, keepalive 60 s): what a
/// plaintext client sends first.
const PROBE_CONNECT: [u8; 14] = [0x10, 12, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60, 0, 0];

/// The first two bytes `broker` answers a plaintext CONNECT with, on a connection of its own:
/// a TLS record from a port that speaks TLS only, a CONNACK from a plaintext MQTT port. Asked
/// only after a connection failed in a way that suggests the other one.
async fn first_answer(broker: &BrokerAddr) -> Option<[u8; 2]> {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((broker.host.as_str(), broker.port))
            .await
            .ok()?;
        stream.write_all(&PROBE_CONNECT).await.ok()?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await.ok()?;
        Some(head)
    };
    tokio::time::timeout(TLS_PROBE_TIMEOUT, probe)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the connection task was told to leave (consumes the notice).
    async fn told_to_leave(shared: &Shared) -> bool {
        tokio::time::timeout(Duration::ZERO, shared.move_on.notified())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn one_unavailable_and_nothing_else_for_the_grace_leaves_the_broker() {
        let shared = Arc::new(Shared::new());
        shared.link.send_modify(|link| link.epoch = 3);
        shared.unavailable(3);
        tokio::time::sleep(UNAVAILABLE_FAILOVER - Duration::from_millis(1)).await;
        assert!(!told_to_leave(&shared).await, "not before the grace");
        // More `unavailable` within the run do not restart it.
        shared.unavailable(3);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(
            told_to_leave(&shared).await,
            "without waiting for another answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn another_answer_or_a_new_connection_within_the_grace_stays() {
        let shared = Arc::new(Shared::new());
        shared.link.send_modify(|link| link.epoch = 3);
        shared.unavailable(3);
        shared.answered();
        tokio::time::sleep(UNAVAILABLE_FAILOVER * 2).await;
        assert!(!told_to_leave(&shared).await, "answered meanwhile");
        shared.unavailable(3);
        shared.link.send_modify(|link| link.epoch = 4);
        tokio::time::sleep(UNAVAILABLE_FAILOVER * 2).await;
        assert!(
            !told_to_leave(&shared).await,
            "that connection is gone already"
        );
    }
}
