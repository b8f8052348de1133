//! [`Agent`]: one MQTT connection to the service and the request loop on top of it.
//!
//! A request's life (`Agent::call`):
//!
//! ```text
//!  id = {boot}-{n}; pending[id] = oneshot
//!  ┌▶ Connect: wait for a subscribed link ───────────────(deadline)──▶ Err(Disconnected)
//!  │   │ publish (caller's task, QoS 1)
//!  │  Attempt: wait for the response ──── ok / refusal ─────────────▶ Ok / Err(typed)
//!  │   │ attempt timeout, link lost, `unavailable` or `rate_limited`
//!  │  Pause: jittered backoff (a late response still completes it) ─(deadline)──▶ Err(Timeout)
//!  └───┘ resend the SAME id: the service answers it with the first outcome
//! ```
//!
//! A response can arrive in any phase: it is the same oneshot throughout, so a late answer to
//! attempt 1 completes the request even while attempt 2 is in flight.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rumqttc::{AsyncClient, QoS};
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tracing::debug;

use hivekeeper_protocol::kv::WATCH_WAIT_MS_DEFAULT;
use hivekeeper_protocol::validate::REQUEST_BYTES_MAX;
use hivekeeper_protocol::{
    ErrorCode, Event, Op, Request, ResourceKind, Response, Success, Topics, UnexpectedReply,
};

use crate::backoff::Backoff;
use crate::config::{AgentConfig, BrokerAddr};
use crate::connection::{self, Connection, Counters, Link, REQUEST_CHANNEL_CAPACITY, Shared};
use crate::error::AgentError;
use crate::hold_watch::Acquiring;
use crate::request_id::RequestIds;
use crate::session::{Session, SessionOptions, SessionState};

/// A connected agent: one MQTT connection (client id = agent id) to one broker of the list at a
/// time, polled by its own task, and the request loop on top.
///
/// Cheap to clone (an `Arc`); every clone is the same connection. The connection task stops
/// when the last clone is dropped (sessions and guards hold clones, so that is after them).
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    /// The validated configuration.
    config: Arc<AgentConfig>,
    /// The parsed broker list, for [`Agent::broker`].
    brokers: Vec<BrokerAddr>,
    /// `{prefix}/req/{agent}`, computed once.
    request_topic: String,
    /// rumqttc's handle to the event loop's request channel; publishes go through it from the
    /// caller's task, never from the connection task.
    client: AsyncClient,
    /// The pending map, link state, events and counters shared with the connection task.
    shared: Arc<Shared>,
    /// Source of request ids.
    ids: RequestIds,
    /// The connection task, aborted when the agent is dropped.
    connection: JoinHandle<()>,
}

impl Drop for AgentInner {
    fn drop(&mut self) {
        // Nobody can send a request any more: stop polling. The broker sees the socket close.
        self.connection.abort();
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("agent_id", &self.inner.config.agent_id)
            .field("link", &*self.inner.shared.link.borrow())
            .finish()
    }
}

/// Counters since [`Agent::connect`], for tests and for an application's own metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// MQTT connections accepted (ConnAck), the first one included.
    pub connects_total: u64,
    /// Connection attempts or connections that failed; each one moved to the next broker.
    pub connection_errors_total: u64,
    /// Requests sent again under the same id (after a timeout, a lost link or `unavailable`).
    pub resends_total: u64,
    /// Responses whose id no caller was waiting for (a duplicate, or an answer after the
    /// caller gave up), dropped.
    pub responses_unknown_total: u64,
    /// Payloads on the response topic that were not a response, dropped.
    pub responses_undecodable_total: u64,
    /// Payloads on the event topic that were not a known event, ignored.
    pub events_undecodable_total: u64,
    /// Acquires whose caller stopped waiting; a grant that still arrives is released.
    pub requests_abandoned_total: u64,
}

/// How long one request may take: per attempt, and in all (`None`: no limit; the session's
/// loss or the caller's own timeout ends it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    pub attempt: Duration,
    pub total: Option<Duration>,
}

/// What to do when the caller of an acquire stops waiting before the answer: the request may
/// still be queued at the service and granted later, so a grant that arrives must be released
/// (while the lease lives; its end releases everything anyway).
#[derive(Debug)]
pub(crate) struct Abandon {
    /// How to undo the grant.
    pub undo: Undo,
    /// The session's state: waiting ends with the lease.
    pub session: watch::Receiver<SessionState>,
}

/// The request that undoes a grant nobody waits for any more.
#[derive(Debug)]
pub(crate) enum Undo {
    /// This op, whatever the grant answered (a release, a barrier's leave).
    Send(Op),
    /// `election.resign` of the election `name`, with the token the campaign's answer carries.
    Resign {
        /// The election's name.
        name: String,
    },
}

impl Undo {
    /// The op that undoes the grant `success` answered, when it can be built.
    fn op(self, success: Success) -> Option<Op> {
        match self {
            Undo::Send(op) => Some(op),
            Undo::Resign { name } => {
                let token = hivekeeper_protocol::Granted::try_from(success).ok()?.token;
                Some(Op::ElectionResign { name, token })
            }
        }
    }
}

impl Agent {
    /// Validates `config`, starts the connection task and waits until the first broker that
    /// answers has accepted the agent's subscriptions (at most `request_deadline_ms`).
    ///
    /// Must be called inside a tokio runtime. Fails with [`AgentError::Config`] on a bad
    /// configuration, at once with [`AgentError::CredentialsRefused`] or [`AgentError::Tls`]
    /// when a broker's answer shows the configuration cannot work (its CONNACK refused the
    /// credentials; it expects TLS, requires a client certificate or is not trusted), and with
    /// [`AgentError::Unreachable`] when no broker accepted in time.
    pub async fn connect(config: AgentConfig) -> Result<Agent, AgentError> {
        config.validate()?;
        let brokers = config.broker_addrs()?;
        let tls = config.tls_client_config()?;
        let topics =
            Topics::new(&config.topic_prefix).map_err(|e| AgentError::Config(e.message))?;
        let config = Arc::new(config);
        let mut rng = fastrand::Rng::new();
        let first = config.broker_order.first(brokers.len(), &mut rng);
        let (client, mut eventloop) = AsyncClient::new(
            connection::mqtt_options(&config, &brokers[first], tls.as_ref()),
            REQUEST_CHANNEL_CAPACITY,
        );
        eventloop.set_network_options(connection::network_options(&config));
        let shared = Arc::new(Shared::new());
        let mut link = shared.link.subscribe();
        let mut refused = shared.refused.subscribe();
        let task = tokio::spawn(
            Connection {
                eventloop,
                config: config.clone(),
                brokers: brokers.clone(),
                broker: first,
                rng,
                tls,
                response_topic: topics.response(&config.agent_id),
                event_topic: topics.event(&config.agent_id),
                shared: shared.clone(),
            }
            .run(),
        );
        let agent = Agent {
            inner: Arc::new(AgentInner {
                request_topic: topics.request(&config.agent_id),
                config: config.clone(),
                brokers,
                client,
                shared,
                ids: RequestIds::new(),
                connection: task,
            }),
        };
        let waited_ms = config.request_deadline_ms;
        let connected = async {
            tokio::select! {
                ready = link.wait_for(|link| link.ready) => ready.ok().map(|_| ()).ok_or(None),
                refused = refused.wait_for(Option::is_some) => {
                    Err(refused.ok().and_then(|refused| refused.clone()))
                }
            }
        };
        match timeout(Duration::from_millis(waited_ms), connected).await {
            Ok(Ok(())) => Ok(agent),
            // A refusal only another configuration can fix: at once, not after the deadline.
            Ok(Err(Some(refused))) => Err(refused),
            _ => Err(AgentError::Unreachable {
                brokers: config.brokers.join(", "),
                waited_ms,
            }),
        }
    }

    /// The agent id.
    pub fn agent_id(&self) -> &str {
        &self.inner.config.agent_id
    }

    /// The configuration the agent runs with.
    pub fn config(&self) -> &AgentConfig {
        &self.inner.config
    }

    /// The broker the agent is connected and subscribed to right now, as `host:port`; `None`
    /// while it is reconnecting.
    pub fn broker(&self) -> Option<String> {
        let link = *self.inner.shared.link.borrow();
        link.ready
            .then(|| self.inner.brokers[link.broker].to_string())
    }

    /// Counters since connect.
    pub fn stats(&self) -> AgentStats {
        let c = &self.inner.shared.counters;
        let read = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        AgentStats {
            connects_total: read(&c.connects),
            connection_errors_total: read(&c.connection_errors),
            resends_total: read(&c.resends),
            responses_unknown_total: read(&c.responses_unknown),
            responses_undecodable_total: read(&c.responses_undecodable),
            events_undecodable_total: read(&c.events_undecodable),
            requests_abandoned_total: read(&c.requests_abandoned),
        }
    }

    /// Every event the service sends this agent from now on (`lease.expired`, `lock.lost`,
    /// ...). Sessions already react to their own `lease.expired`; this is for the application.
    /// Events are a courtesy and can be missed (for instance while reconnecting); a receiver
    /// that falls 256 events behind gets `Lagged`.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.shared.events.subscribe()
    }

    /// Registers an acquire of `names`, before its request goes, so that the grant's `*.lost`
    /// reaches its guard even when it follows the grant at once ([`crate::Guard::ended`]).
    pub(crate) fn acquiring(&self, kind: ResourceKind, names: Vec<String>) -> Acquiring {
        self.inner.shared.hold_watches.acquiring(kind, names)
    }

    /// Takes a lease of `ttl_ms` and keeps it alive in the background: see [`Session`].
    ///
    /// `ttl_ms` must be more than twice `keepalive_margin_ms` and within the service's TTL
    /// range (by default 500 ms to 1 h).
    pub async fn session(&self, ttl_ms: u64) -> Result<Session, AgentError> {
        self.session_with(ttl_ms, SessionOptions::default()).await
    }

    /// [`Agent::session`], the lease granted as `options` say (a lock-delay).
    pub async fn session_with(
        &self,
        ttl_ms: u64,
        options: SessionOptions,
    ) -> Result<Session, AgentError> {
        Session::grant(self.clone(), ttl_ms, options).await
    }

    /// Sends one request and waits for its final response, resending the same id on timeouts,
    /// lost connections and `unavailable` or `rate_limited` answers, with jittered exponential
    /// backoff.
    ///
    /// Patience depends on the op. Ordinary ops wait `request_timeout_ms` per attempt and
    /// `request_deadline_ms` in all. An acquire or a `watch.poll` with `wait_ms: n` waits up
    /// to `n` plus those.
    /// An acquire without `wait_ms` waits without deadline (the service answers it only when
    /// it is granted or its lease ends) and re-sends its id every `wait_resend_ms` in case the
    /// grant was lost; cancel it by dropping the future, or use [`Session::lock`], which also
    /// gives up when the session is lost.
    ///
    /// Every refusal except `unavailable` and `rate_limited` is returned at once (see
    /// [`AgentError`]). Dropping the future stops the resends; a response that still arrives is
    /// dropped and counted.
    pub async fn request(&self, op: Op) -> Result<Success, AgentError> {
        let patience = self.patience_for(&op);
        self.call(op, patience, None).await
    }

    /// [`Agent::request`], its answer read as the shape `T` that `op` gets, e.g.
    /// `agent.request_as::<Granted>(op)` for an acquire; another shape is
    /// [`AgentError::Malformed`], naming what came instead.
    pub async fn request_as<T>(&self, op: Op) -> Result<T, AgentError>
    where
        T: TryFrom<Success, Error = UnexpectedReply>,
    {
        Ok(T::try_from(self.request(op).await?)?)
    }

    /// The configured request timeout.
    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.request_timeout_ms)
    }

    /// How patient a request for `op` is; see [`Agent::request`].
    pub(crate) fn patience_for(&self, op: &Op) -> Patience {
        let config = &self.inner.config;
        let request_timeout = self.request_timeout();
        let request_deadline = Duration::from_millis(config.request_deadline_ms);
        let wait_resend = Duration::from_millis(config.wait_resend_ms);
        let acquires = op.queues();
        // The service holds a poll up to its `wait_ms`: each attempt waits that long plus the
        // usual timeout before the same id is resent (or sent to the next broker).
        if let Op::WatchPoll { wait_ms, .. } = op {
            let wait = Duration::from_millis(wait_ms.unwrap_or(WATCH_WAIT_MS_DEFAULT));
            return Patience {
                attempt: wait + request_timeout,
                total: Some(wait + request_deadline),
            };
        }
        match (acquires, op.wait_ms()) {
            // Queued until granted or the lease ends: no deadline. The per-attempt wait is
            // only the resend period, and a resend of a queued id takes no second slot.
            (true, None) => Patience {
                attempt: wait_resend,
                total: None,
            },
            // The service answers by `wait_ms` at the latest (grant or `timeout`).
            (true, Some(wait_ms)) if wait_ms > 0 => {
                let wait = Duration::from_millis(wait_ms);
                Patience {
                    attempt: wait.min(wait_resend) + request_timeout,
                    total: Some(wait + request_deadline),
                }
            }
            _ => Patience {
                attempt: request_timeout,
                total: Some(request_deadline),
            },
        }
    }

    /// The request loop (see the module doc). `abandon` says how to undo a grant that arrives
    /// after the caller stopped waiting.
    pub(crate) async fn call(
        &self,
        op: Op,
        patience: Patience,
        abandon: Option<Abandon>,
    ) -> Result<Success, AgentError> {
        let op_name = op.name();
        let id = self.inner.ids.next();
        let payload = encoded(Request { id: id.clone(), op })?;
        let mut reply = PendingReply::register(self.clone(), id, abandon);
        let started = Instant::now();
        let deadline = patience.total.map(|total| started + total);
        let mut link = self.inner.shared.link.subscribe();
        let mut backoff = Backoff::new(
            Duration::from_millis(self.inner.config.backoff_first_ms),
            Duration::from_millis(self.inner.config.backoff_cap_ms),
        );
        let mut attempts = 0u64;
        let mut phase = Phase::Connect;
        loop {
            let wake = match phase {
                Phase::Connect => wait(&mut reply, &mut link, Want::Ready, deadline).await,
                Phase::Attempt { epoch, until } => {
                    wait(&mut reply, &mut link, Want::LossOf(epoch), Some(until)).await
                }
                Phase::Pause { until } => {
                    wait(&mut reply, &mut link, Want::Nothing, Some(until)).await
                }
            };
            phase = match wake {
                Wake::Reply(response) => match response.outcome {
                    Ok(success) => {
                        self.inner.shared.answered();
                        return Ok(success);
                    }
                    // Both change nothing and pass: no leader yet, or this agent is over its
                    // request rate. The same id again after a jittered pause; a broker whose
                    // node keeps answering `unavailable` is left for the next one.
                    Err(body)
                        if matches!(body.code, ErrorCode::Unavailable | ErrorCode::RateLimited) =>
                    {
                        if body.code == ErrorCode::Unavailable {
                            self.inner.shared.unavailable(link.borrow().epoch);
                        }
                        debug!(id = %reply.id, code = %body.code, "resending after a pause");
                        reply.rearm();
                        self.pause(&mut backoff, deadline)
                    }
                    Err(body) => {
                        self.inner.shared.answered();
                        return Err(AgentError::from_service(body));
                    }
                },
                Wake::Ready(epoch) => {
                    attempts += 1;
                    if attempts > 1 {
                        Counters::bump(&self.inner.shared.counters.resends);
                        debug!(id = %reply.id, attempts, op = op_name, "resending the same id");
                    }
                    let until = min_deadline(Instant::now() + patience.attempt, deadline);
                    let publish = self.inner.client.publish(
                        self.inner.request_topic.as_str(),
                        QoS::AtLeastOnce,
                        false,
                        payload.clone(),
                    );
                    match timeout_at(until, publish).await {
                        Ok(Ok(())) => {}
                        // The request channel is closed: the connection task is gone.
                        Ok(Err(_)) => return Err(AgentError::Disconnected),
                        // The channel stayed full for the whole attempt: it lapses below.
                        Err(_) => {}
                    }
                    Phase::Attempt { epoch, until }
                }
                Wake::Lapsed | Wake::LinkLost => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        let waited_ms = started.elapsed().as_millis() as u64;
                        return Err(if link.borrow().ready {
                            AgentError::Timeout {
                                op: op_name,
                                waited_ms,
                            }
                        } else {
                            AgentError::Disconnected
                        });
                    }
                    match phase {
                        Phase::Attempt { .. } => self.pause(&mut backoff, deadline),
                        Phase::Connect | Phase::Pause { .. } => Phase::Connect,
                    }
                }
                Wake::Closed => return Err(AgentError::Disconnected),
            };
        }
    }

    /// The next pause of a request's backoff, cut at its deadline.
    fn pause(&self, backoff: &mut Backoff, deadline: Option<Instant>) -> Phase {
        Phase::Pause {
            until: min_deadline(Instant::now() + backoff.next_delay(), deadline),
        }
    }

    /// The shared state, for the session and guard modules.
    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }
}

/// The request's payload. The service answers an oversized payload `too_large` without reading
/// its id, so that answer could not be matched to the request: it is refused here instead,
/// naming the sizes.
fn encoded(request: Request) -> Result<Vec<u8>, AgentError> {
    let payload = request.encode();
    if payload.len() > REQUEST_BYTES_MAX {
        return Err(AgentError::Service {
            code: ErrorCode::TooLarge,
            message: format!(
                "the {} request is {} bytes, more than the {REQUEST_BYTES_MAX} the service \
                 accepts; nothing was sent (split it, or send less)",
                request.op.name(),
                payload.len()
            ),
        });
    }
    Ok(payload)
}

/// Where a request is in its loop.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a subscribed connection.
    Connect,
    /// Published under link `epoch`; waiting for the response until `until`.
    Attempt { epoch: u64, until: Instant },
    /// Backing off before the next attempt.
    Pause { until: Instant },
}

/// What a phase waits for on the link.
#[derive(Debug, Clone, Copy)]
enum Want {
    Ready,
    LossOf(u64),
    Nothing,
}

/// Why a wait ended.
#[derive(Debug)]
enum Wake {
    /// The final response (or `unavailable`). Boxed: a response has room for every op's
    /// result fields (`admin.*` included), which would make every other wake that large.
    Reply(Box<Response>),
    /// The link is subscribed, under this epoch.
    Ready(u64),
    /// The link the attempt was published on went down or was replaced.
    LinkLost,
    /// The phase's time ran out.
    Lapsed,
    /// The connection side is gone.
    Closed,
}

/// Waits for the response, the link change `want`, or `until`, whichever is first.
async fn wait(
    reply: &mut PendingReply,
    link: &mut watch::Receiver<Link>,
    want: Want,
    until: Option<Instant>,
) -> Wake {
    let link_change = async {
        let changed = match want {
            Want::Ready => link
                .wait_for(|l| l.ready)
                .await
                .map(|l| Wake::Ready(l.epoch)),
            Want::LossOf(epoch) => link
                .wait_for(|l| !l.ready || l.epoch != epoch)
                .await
                .map(|_| Wake::LinkLost),
            Want::Nothing => std::future::pending().await,
        };
        changed.unwrap_or(Wake::Closed)
    };
    let lapse = async {
        match until {
            Some(until) => sleep_until(until).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        // A response wins over everything else that is ready at the same time.
        biased;
        wake = reply.recv() => wake,
        wake = link_change => wake,
        () = lapse => Wake::Lapsed,
    }
}

fn min_deadline(at: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(at, |deadline| at.min(deadline))
}

/// A caller's place in the pending map, removed when the caller is done or gives up.
struct PendingReply {
    /// The agent, to reach the pending map and, if abandoned, to send the release.
    agent: Agent,
    /// The request id, the map key.
    id: String,
    /// Where the response arrives; `None` once a response was taken out.
    rx: Option<oneshot::Receiver<Response>>,
    /// How to undo a grant that arrives after the caller left; `None` for non-acquires.
    abandon: Option<Abandon>,
}

impl PendingReply {
    fn register(agent: Agent, id: String, abandon: Option<Abandon>) -> PendingReply {
        let (tx, rx) = oneshot::channel();
        agent.shared().pending().insert(id.clone(), tx);
        PendingReply {
            agent,
            id,
            rx: Some(rx),
            abandon,
        }
    }

    /// After an `unavailable` answer: a fresh slot for the next attempt's answer.
    fn rearm(&mut self) {
        let (tx, rx) = oneshot::channel();
        self.agent.shared().pending().insert(self.id.clone(), tx);
        self.rx = Some(rx);
    }

    /// The response, once. Cancel-safe: dropped before it completes, nothing is consumed.
    async fn recv(&mut self) -> Wake {
        let Some(rx) = self.rx.as_mut() else {
            return std::future::pending().await;
        };
        let received = rx.await;
        self.rx = None;
        match received {
            Ok(response) => Wake::Reply(Box::new(response)),
            Err(_) => Wake::Closed,
        }
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        let shared = self.agent.shared();
        let (Some(rx), Some(plan)) = (self.rx.take(), self.abandon.take()) else {
            shared.pending().remove(&self.id);
            return;
        };
        // An acquire left before its answer. It may still be queued at the service and be
        // granted later: keep listening, and release what arrives.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            shared.pending().remove(&self.id);
            return;
        };
        Counters::bump(&shared.counters.requests_abandoned);
        let agent = self.agent.clone();
        let id = std::mem::take(&mut self.id);
        runtime.spawn(release_if_granted(agent, id, rx, plan));
    }
}

/// The abandoned acquire's epilogue: wait for its answer while the lease lives; release a
/// grant. Bounded by the lease's life: when the lease ends the service answers the queued
/// request (`lease_not_found`) and the session reports the end.
async fn release_if_granted(
    agent: Agent,
    id: String,
    rx: oneshot::Receiver<Response>,
    mut plan: Abandon,
) {
    let granted = tokio::select! {
        response = rx => match response {
            Ok(Response { outcome: Ok(success), .. }) => Some(success),
            _ => None,
        },
        _ = plan.session.wait_for(|state| state.is_ended()) => None,
    };
    agent.shared().pending().remove(&id);
    let ended = plan.session.borrow().is_ended();
    let Some(release) = granted
        .filter(|_| !ended)
        .and_then(|success| plan.undo.op(success))
    else {
        return;
    };
    debug!(%id, op = release.name(), "releasing the grant of an abandoned acquire");
    if let Err(e) = agent.request(release).await {
        debug!(%id, "release after an abandoned acquire failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use hivekeeper_protocol::{Done, Granted};

    use super::*;

    /// An abandoned campaign is undone by a resign with the token its grant carries; a
    /// release is sent as it is; a grant without a token cannot be resigned.
    #[test]
    fn an_undo_is_built_from_the_grant_it_undoes() {
        let resign = Undo::Resign { name: "gw".into() };
        assert_eq!(
            resign.op(Success::Granted(Granted { token: 42 })),
            Some(Op::ElectionResign {
                name: "gw".into(),
                token: 42
            })
        );
        let resign = Undo::Resign { name: "gw".into() };
        assert_eq!(resign.op(Success::Done(Done {})), None);
        let leave = Op::BarrierLeave {
            name: "survey".into(),
            lease: "11".into(),
            wait_ms: None,
        };
        let send = Undo::Send(leave.clone());
        assert_eq!(send.op(Success::Done(Done {})), Some(leave));
    }
}
