//! A client of an external broker (Mosquitto, EMQX, ...), on rumqttc.
//!
//! ```text
//!  broker ◀──TCP (TCP_NODELAY)──▶ rumqttc EventLoop ── poll task ──▶ agent from topic ─▶ handler
//!                                      ▲                 │ ConnAck
//!                                      │                 ▼
//!                                 AsyncClient ◀── subscribe task (re-subscribes on every ConnAck)
//!                                      ▲
//!                                      └───────── publish task ◀── mpsc<Outbound>
//! ```
//!
//! Rules from DESIGN.md §7, each with its reason:
//! - The event loop is polled in its own task, and that task never sends through the
//!   `AsyncClient`: a send waits when rumqttc's request channel is full, and only polling
//!   drains it, so a send from the polling task can deadlock (rumqtt#1025). The subscribe and
//!   publish tasks do the sending.
//! - rumqttc has no reconnect event: `poll()` reconnects silently and yields a ConnAck. The
//!   session is clean (a persistent one would replay a backlog of stale requests and, with an
//!   oversized queued message, could loop on reconnect), so the broker forgets the
//!   subscription with the connection: subscribe again after every ConnAck.
//! - `poll()` retries at once after an error: the poll task sleeps an exponential, jittered
//!   delay between attempts (backon), reset only after a connection that lasted.
//! - TCP_NODELAY on: otherwise each request/response waits for a delayed ACK (44 ms measured).
//! - One connection carries every agent, so the agent of a request is the last level of its
//!   topic (`{prefix}/req/{agent}`), read here once; a topic that names no valid agent is
//!   dropped and counted (`hivekeeper_mqtt_bad_topics_total`), since nobody can be answered.
//! - The per-agent request rate is applied before anything is shared: an agent the handler
//!   paused for its rate has its requests dropped in the poll task until the pause ends
//!   (`hivekeeper_mqtt_messages_dropped_total`), see [`Paused`].
//! - The members of a cluster behind one broker subscribe `$share/{group}/{prefix}/req/+`
//!   (`ExternalConfig::share_group`), so the broker hands each request to one of them. A
//!   message delivered through a shared subscription keeps its own topic, so the agent is
//!   read from it as above. MQTT 3.1.1 has no shared subscriptions in its spec, but the
//!   brokers Hivekeeper is used with (Mosquitto 2.0, EMQX, HiveMQ) take `$share` from 3.1.1
//!   clients too, so this client stays on 3.1.1.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use hivekeeper_protocol::Topics;
use metrics::{counter, gauge};
use rumqttc::{
    AsyncClient, Event, EventLoop, MqttOptions, NetworkOptions, Outgoing, Packet, QoS,
    SubscribeReasonCode,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::MqttError;
use crate::config::{Config, ExternalConfig, parse_broker_url};
use crate::reply_route::ReplyRoute;
use crate::transport::{Flow, Inlet, Outbound};
use crate::transport_metrics::{
    BAD_TOPICS_TOTAL, CONNECTED, ENDPOINT_CONNECTS_TOTAL, MESSAGES_DROPPED_TOTAL,
    MESSAGES_IN_TOTAL, MESSAGES_OUT_TOTAL,
};

/// Capacity of rumqttc's own request channel between `AsyncClient` and the event loop. Small:
/// the transport's outbound queue is the real buffer, and this one only smooths the handoff.
const CLIENT_REQUEST_CAPACITY: usize = 64;
/// A connection that lasted this long resets the reconnect backoff. A broker that accepts and
/// drops us at once (two nodes with one client id) keeps backing off instead.
const STABLE_CONNECTION: Duration = Duration::from_secs(10);
/// Time bound of each shutdown step.
const SHUTDOWN_STEP_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the connection stands, as `start` needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LinkState {
    /// Not yet subscribed; the last connection error, if any.
    Connecting { last_error: Option<String> },
    /// The broker acknowledged the request subscription.
    Subscribed,
    /// The broker refused the request subscription.
    Refused,
}

/// The running external backend.
pub(crate) struct Running {
    client: AsyncClient,
    stop_tx: watch::Sender<bool>,
    poll_task: JoinHandle<()>,
    subscribe_task: JoinHandle<()>,
    publish_task: JoinHandle<()>,
}

/// Connects, subscribes the request filter and returns once the broker acknowledged the
/// subscription (so a request published after `start` returns is received).
pub(crate) async fn start(
    config: &Config,
    external: &ExternalConfig,
    topics: &Topics,
    inlet: Inlet,
    outbound_rx: mpsc::Receiver<Outbound>,
) -> Result<Running, MqttError> {
    let (host, port) = parse_broker_url(&external.url)?;
    let mut options = MqttOptions::new(external.client_id.clone(), host, port);
    options
        .set_keep_alive(Duration::from_secs(u64::from(external.keepalive_s)))
        .set_clean_session(true)
        // Incoming: as large as the embedded broker would take, so an oversized request still
        // reaches the handler (a larger one makes rumqttc drop the connection). Outgoing: the
        // same cap `Transport::publish` enforces, so rumqttc never refuses a queued message.
        .set_max_packet_size(config.packet_bytes_max, config.packet_bytes_max);
    if let Some(username) = &external.username {
        options.set_credentials(
            username.clone(),
            external.password.clone().unwrap_or_default(),
        );
    }
    let (client, mut eventloop) = AsyncClient::new(options, CLIENT_REQUEST_CAPACITY);
    let mut network = NetworkOptions::new();
    network.set_tcp_nodelay(true);
    network.set_connection_timeout(external.connect_timeout_s);
    eventloop.set_network_options(network);

    let filter = external.request_filter(topics);
    let (state_tx, mut state_rx) = watch::channel(LinkState::Connecting { last_error: None });
    let (stop_tx, stop_rx) = watch::channel(false);
    let resubscribe = Arc::new(Notify::new());
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(external.reconnect_delay_ms_min))
        .with_max_delay(Duration::from_millis(external.reconnect_delay_ms_max))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();

    let poll_task = tokio::spawn(run_poll(
        eventloop,
        PollContext {
            inlet,
            topics: topics.clone(),
            state_tx,
            resubscribe: resubscribe.clone(),
            stop_rx,
            backoff,
            paused: Paused::default(),
        },
    ));
    let subscribe_task = tokio::spawn(run_subscribe(client.clone(), filter.clone(), resubscribe));
    let publish_task = tokio::spawn(run_publish(client.clone(), outbound_rx));
    let running = Running {
        client,
        stop_tx,
        poll_task,
        subscribe_task,
        publish_task,
    };

    let startup_timeout = Duration::from_millis(config.startup_timeout_ms);
    let waited = tokio::time::timeout(
        startup_timeout,
        state_rx.wait_for(|state| !matches!(state, LinkState::Connecting { .. })),
    )
    .await
    .map(|waited| waited.map(|state| state.clone()));
    let failure = match waited {
        Ok(Ok(LinkState::Subscribed)) => None,
        Ok(Ok(_)) => Some(MqttError::SubscribeRefused {
            filter: filter.clone(),
        }),
        // The poll task ended (cannot happen before stop) or the wait timed out.
        Ok(Err(_)) | Err(_) => {
            let last_error = match &*state_rx.borrow() {
                LinkState::Connecting {
                    last_error: Some(error),
                } => error.clone(),
                _ => "none".to_string(),
            };
            Some(MqttError::BrokerUnreachable {
                url: external.url.clone(),
                waited_ms: config.startup_timeout_ms,
                last_error,
            })
        }
    };
    if let Some(error) = failure {
        running.abort();
        return Err(error);
    }
    info!(url = %external.url, client_id = %external.client_id, %filter, "connected to external MQTT broker");
    Ok(running)
}

impl Running {
    /// Flushes queued publishes into the client, sends an MQTT DISCONNECT and stops polling.
    pub(crate) async fn shutdown(
        self,
        outbound_tx: &mpsc::Sender<Outbound>,
    ) -> Result<(), MqttError> {
        let mut unfinished = Vec::new();

        let mut publish_task = self.publish_task;
        let flushed = tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, async {
            let _ = outbound_tx.send(Outbound::Stop).await;
            let _ = (&mut publish_task).await;
        })
        .await;
        if flushed.is_err() {
            publish_task.abort();
            unfinished.push("outbound publisher (broker down?)");
        }

        // From here a connection error ends the poll task instead of reconnecting, and a
        // backoff sleep is cut short.
        let _ = self.stop_tx.send(true);
        self.subscribe_task.abort();
        // Goes through rumqttc's request channel, which the poll task is still draining.
        let disconnect_sent =
            tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, self.client.disconnect()).await;
        if !matches!(disconnect_sent, Ok(Ok(()))) {
            debug!("DISCONNECT not queued; closing the connection without it");
        }
        let mut poll_task = self.poll_task;
        if tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, &mut poll_task)
            .await
            .is_err()
        {
            poll_task.abort();
            unfinished.push("event loop");
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

    /// Stops every task at once (failed start).
    fn abort(self) {
        let _ = self.stop_tx.send(true);
        self.poll_task.abort();
        self.subscribe_task.abort();
        self.publish_task.abort();
    }
}

/// What the poll task needs besides the event loop.
struct PollContext {
    /// Where requests go.
    inlet: Inlet,
    /// To read the agent out of a request's topic.
    topics: Topics,
    state_tx: watch::Sender<LinkState>,
    resubscribe: Arc<Notify>,
    stop_rx: watch::Receiver<bool>,
    backoff: ExponentialBuilder,
    /// Agents over their request rate, whose requests are dropped until their pause ends.
    paused: Paused,
}

/// Agents the handler paused ([`Flow::Pause`]: over their request rate) and when each pause
/// ends. The broker's one connection carries every agent, so it cannot stop reading one of
/// them as an endpoint connection does: instead that agent's requests are dropped here,
/// before they are decoded, submitted or answered, until its bucket has a token again. A
/// flooder then costs a topic parse and a lookup per message, and never fills the shared
/// outbound queue with refusals that would delay every other agent's answers.
#[derive(Debug, Default)]
struct Paused {
    until: HashMap<String, Instant>,
}

impl Paused {
    /// Most agents remembered at once; past it, ended pauses are swept, and a new pause is not
    /// remembered while the map stays full (that agent is refused `rate_limited` per request,
    /// as before).
    const AGENTS_MAX: usize = 4_096;

    /// Whether `agent` is paused at `now`.
    fn holds(&self, agent: &str, now: Instant) -> bool {
        self.until.get(agent).is_some_and(|until| now < *until)
    }

    /// Pauses `agent` until `until`.
    fn pause(&mut self, agent: String, until: Instant) {
        if self.until.len() >= Self::AGENTS_MAX && !self.until.contains_key(&agent) {
            let now = Instant::now();
            self.until.retain(|_, until| now < *until);
            if self.until.len() >= Self::AGENTS_MAX {
                return;
            }
        }
        self.until.insert(agent, until);
    }
}

/// Polls the event loop until stopped: delivers requests, asks for a subscription on every
/// ConnAck, backs off between reconnect attempts.
async fn run_poll(mut eventloop: EventLoop, mut context: PollContext) {
    let mut delays = context.backoff.build();
    let mut connected_at: Option<Instant> = None;
    loop {
        // Not raced against the stop signal: while stopping, polling must go on until the
        // DISCONNECT queued by `shutdown` is written (then `Outgoing::Disconnect` ends the
        // loop). A hung connection is bounded by shutdown's timeout.
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(connack))) => {
                connected_at = Some(Instant::now());
                counter!(ENDPOINT_CONNECTS_TOTAL).increment(1);
                gauge!(CONNECTED).set(1.0);
                info!(
                    session_present = connack.session_present,
                    "MQTT broker connection up; subscribing"
                );
                context.resubscribe.notify_one();
            }
            Ok(Event::Incoming(Packet::SubAck(suback))) => {
                let granted = suback
                    .return_codes
                    .iter()
                    .all(|code| matches!(code, SubscribeReasonCode::Success(_)));
                if granted {
                    debug!(pkid = suback.pkid, "request subscription acknowledged");
                    context.state_tx.send_replace(LinkState::Subscribed);
                } else {
                    error!(codes = ?suback.return_codes, "broker refused the request subscription; no requests will arrive");
                    context.state_tx.send_replace(LinkState::Refused);
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                match context.topics.parse_request_topic(&publish.topic) {
                    Ok(agent) => {
                        let now = Instant::now();
                        if context.paused.holds(agent, now) {
                            counter!(MESSAGES_DROPPED_TOTAL).increment(1);
                            continue;
                        }
                        counter!(MESSAGES_IN_TOTAL).increment(1);
                        let agent = agent.to_string();
                        let flow = context.inlet.deliver(
                            agent.clone(),
                            publish.payload,
                            ReplyRoute::default(),
                        );
                        if let Flow::Pause(wait) = flow {
                            context.paused.pause(agent, now + wait);
                        }
                    }
                    Err(error) => {
                        counter!(MESSAGES_IN_TOTAL).increment(1);
                        counter!(BAD_TOPICS_TOTAL).increment(1);
                        let topic = &publish.topic;
                        debug!(%topic, %error, "message on a topic that names no agent: dropped");
                    }
                }
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                gauge!(CONNECTED).set(0.0);
                break;
            }
            Ok(_) => {}
            Err(error) => {
                gauge!(CONNECTED).set(0.0);
                if *context.stop_rx.borrow() {
                    break;
                }
                if connected_at
                    .take()
                    .is_some_and(|since| since.elapsed() >= STABLE_CONNECTION)
                {
                    delays = context.backoff.build();
                }
                let delay = delays
                    .next()
                    .expect("backoff configured without a maximum number of attempts");
                warn!(%error, delay_ms = delay.as_millis(), "MQTT broker connection error; reconnecting after a delay");
                context.state_tx.send_modify(|state| {
                    if let LinkState::Connecting { last_error } = state {
                        *last_error = Some(error.to_string());
                    }
                });
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stopped(&mut context.stop_rx) => break,
                }
            }
        }
    }
}

/// Resolves once a stop has been asked for (or the sender is gone).
async fn stopped(stop_rx: &mut watch::Receiver<bool>) {
    let _ = stop_rx.wait_for(|stop| *stop).await;
}

/// Subscribes the request filter each time the poll task reports a ConnAck.
async fn run_subscribe(client: AsyncClient, filter: String, resubscribe: Arc<Notify>) {
    loop {
        resubscribe.notified().await;
        if let Err(error) = client.subscribe(filter.clone(), QoS::AtLeastOnce).await {
            // Only when the event loop is gone: nothing left to subscribe for.
            debug!(%error, "subscribe not queued; event loop gone");
            return;
        }
    }
}

/// Moves queued messages into rumqttc's request channel. Waits when that channel is full
/// (broker slow or down), which fills the outbound queue, which makes `publish` fail fast.
async fn run_publish(client: AsyncClient, mut outbound_rx: mpsc::Receiver<Outbound>) {
    while let Some(message) = outbound_rx.recv().await {
        match message {
            Outbound::Publish { topic, payload } => {
                match client
                    .publish_bytes(topic, QoS::AtLeastOnce, false, payload)
                    .await
                {
                    Ok(()) => counter!(MESSAGES_OUT_TOTAL).increment(1),
                    Err(error) => {
                        error!(%error, "rumqttc event loop gone; outbound publisher stops");
                        return;
                    }
                }
            }
            Outbound::Stop => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_agent_is_held_until_its_pause_ends_and_the_map_stays_bounded() {
        let now = Instant::now();
        let mut paused = Paused::default();
        assert!(!paused.holds("drone-1", now));
        paused.pause("drone-1".to_string(), now + Duration::from_millis(5));
        assert!(paused.holds("drone-1", now));
        assert!(!paused.holds("drone-2", now));
        assert!(!paused.holds("drone-1", now + Duration::from_millis(5)));

        // Full of live pauses: a new agent is not remembered, a known one is renewed; once
        // pauses end, they are swept to make room.
        let mut paused = Paused::default();
        let later = now + Duration::from_secs(60);
        for n in 0..Paused::AGENTS_MAX {
            paused.pause(format!("flooder-{n}"), later);
        }
        paused.pause("newcomer".to_string(), later);
        assert!(!paused.holds("newcomer", now));
        paused.pause("flooder-0".to_string(), later + Duration::from_secs(1));
        assert!(paused.holds("flooder-0", later));
        assert_eq!(paused.until.len(), Paused::AGENTS_MAX);
        paused.pause("flooder-1".to_string(), now);
        paused.pause("newcomer".to_string(), later);
        assert!(paused.holds("newcomer", now));
        assert_eq!(paused.until.len(), Paused::AGENTS_MAX);
    }
}
