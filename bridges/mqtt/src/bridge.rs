//! The bridge: MQTT requests in, node answers out. Decodes and validates each request, hands it
//! to the node, publishes exactly one final response per request id (at once, or when a queued
//! request is granted, times out or loses its lease), and publishes events.
//!
//! ```text
//!  Inbound{topic, payload, route} ─▶ agent id from topic ──(bad: counted, dropped)
//!        ─▶ Request::decode ──(bad: error response with the precise code)
//!        ─▶ node.submit_ordered(agent, request)  (a write enters the proposer's queue now,
//!           in arrival order) ─▶ task: await its reply
//!              ├ final reply ─▶ publish_response(route): {prefix}/rsp/{agent} or the MQTT 5
//!              │                Response Topic with its Correlation Data
//!              ├ Queued      ─▶ (wait_ms = n > 0) timer n ms ─▶ node.cancel_wait, unless
//!              │                the final answer is published first (the task ends then)
//!              └ NodeError   ─▶ publish `unavailable` (the agent retries the same id)
//!  Outbound::Respond ─▶ publish_response(route kept in `Pending`)  (a queued request's
//!                      final answer)
//!  Outbound::Notify  ─▶ publish_event {prefix}/evt/{agent}    (lease.expired, lock.lost, ...;
//!                      events yield to responses: `Transport::publish_event`)
//! ```
//!
//! # Metrics
//! - `hivekeeper_requests_total{op, code}`: one per final answer published to a decoded
//!   request (`code` is `ok` or the error code). A queued request is counted when its deferred
//!   answer is published, not when it is queued.
//! - `hivekeeper_request_duration_seconds{op}`: from the start of decoding to the final answer,
//!   for a queued request to its deferred answer (so it includes the time in the queue).
//! - `hivekeeper_mqtt_bad_requests_total{code}`, `hivekeeper_mqtt_bad_topics_total`: decode
//!   errors and messages on a topic that names no agent.
//! - `hivekeeper_mqtt_publish_failed_total`: responses and events the transport refused.
//! - `hivekeeper_fence_checks_total{result}`: `fence.check` answers, `valid` or `stale`.
//! - `hivekeeper_resource_waiters{kind}`: requests this bridge saw answered `Queued` and has not
//!   answered finally yet. On a single node that is the machine's waiters; the machine's
//!   applied `Queued` reply carries neither kind nor request id, so the node cannot keep it.
//!
//! A queued request's op, kind and start time wait in [`Pending`] until its deferred answer
//! comes. It is registered before the request is submitted: the deferred answer can reach the
//! publisher before the task that submitted it sees `Queued`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hivekeeper_coordinator::node::metrics::{RESOURCE_WAITERS, kind_label};
use hivekeeper_coordinator::node::{NodeError, NodeHandle, Outbound};
use hivekeeper_coordinator::state_machine::Reply;
use hivekeeper_protocol::{ErrorCode, Op, Request, ResourceKind, Response};
use metrics::{counter, describe_counter, describe_histogram, gauge, histogram};
use tokio::sync::{mpsc, watch};

use crate::{Inbound, ReplyRoute, Transport};

/// Final answers to decoded requests, by `op` and `code` (counter).
pub const REQUESTS_TOTAL: &str = "hivekeeper_requests_total";
/// Decode to final answer, by `op` (histogram).
pub const REQUEST_DURATION_SECONDS: &str = "hivekeeper_request_duration_seconds";
/// Messages that could not be decoded into a request, by `code` (counter).
pub const MQTT_BAD_REQUESTS_TOTAL: &str = "hivekeeper_mqtt_bad_requests_total";
/// Messages on a topic that names no valid agent (counter).
pub const MQTT_BAD_TOPICS_TOTAL: &str = "hivekeeper_mqtt_bad_topics_total";
/// Responses and events the transport refused to publish (counter).
pub const MQTT_PUBLISH_FAILED_TOTAL: &str = "hivekeeper_mqtt_publish_failed_total";
/// `fence.check` answers, by `result` = `valid` | `stale` (counter).
pub const FENCE_CHECKS_TOTAL: &str = "hivekeeper_fence_checks_total";

/// Gives the bridge's metrics their help texts. Call once, after the recorder is installed.
pub fn describe_metrics() {
    describe_counter!(
        REQUESTS_TOTAL,
        "Final answers to decoded requests, by op and code (ok or the error code); a queued \
         request is counted when its deferred answer is published."
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "From decoding a request to publishing its final answer (a queued request's includes \
         its time in the queue), by op."
    );
    describe_counter!(
        MQTT_BAD_REQUESTS_TOTAL,
        "Messages answered with a decode error, by code (bad_request, unknown_op, too_large)."
    );
    describe_counter!(
        MQTT_BAD_TOPICS_TOTAL,
        "Messages on a request topic that names no valid agent (dropped)."
    );
    describe_counter!(
        MQTT_PUBLISH_FAILED_TOTAL,
        "Responses and events not published: the transport's queue was full or closed (the \
         agent retries)."
    );
    describe_counter!(
        FENCE_CHECKS_TOTAL,
        "fence.check answers, by result: valid (held right now) or stale (a protected \
         resource was shown a token that is no longer held)."
    );
}

/// A request that may be queued, until its final answer is published.
struct Pending {
    /// The op's wire name, the `op` label.
    op: &'static str,
    /// The resource kind it waits on, the waiters gauge's label.
    kind: ResourceKind,
    /// When its decoding started.
    started: Instant,
    /// Whether it was answered `Queued` (and so counted in the waiters gauge).
    queued: bool,
    /// Where its final answer goes (the MQTT 5 Response Topic and Correlation Data of the
    /// send that registered it, or the default route).
    route: ReplyRoute,
    /// Dropped with the entry, when the final answer is published: that wakes the tasks
    /// holding a receiver (waiting out this request's `wait_ms`), so they end with the request
    /// instead of sleeping out the whole wait after a grant.
    answered: watch::Sender<()>,
}

/// Requests that may be queued, by agent and request id. Bounded by what the node admits:
/// an entry leaves with the request's final answer.
type PendingMap = Arc<Mutex<HashMap<(String, String), Pending>>>;

/// The resource kind of an op that can be queued.
fn queueable_kind(op: &Op) -> Option<ResourceKind> {
    match op {
        Op::LockAcquire { .. } => Some(ResourceKind::Lock),
        Op::SemAcquire { .. } => Some(ResourceKind::Sem),
        Op::WaypointReserve { .. } => Some(ResourceKind::Waypoint),
        _ => None,
    }
}

/// The `code` label of a response: `ok` or the error code.
fn code_label(response: &Response) -> &'static str {
    match &response.outcome {
        Ok(_) => "ok",
        Err(error) => error.code.as_str(),
    }
}

/// Counts one final answer.
fn count_answer(op: &'static str, started: Instant, response: &Response) {
    counter!(REQUESTS_TOTAL, "op" => op, "code" => code_label(response)).increment(1);
    histogram!(REQUEST_DURATION_SECONDS, "op" => op).record(started.elapsed().as_secs_f64());
}

/// Locks the pending map; a panic while it was held cannot leave it half-updated (every
/// critical section is one insert, lookup or remove), so a poisoned lock is used as is.
fn lock(pending: &PendingMap) -> std::sync::MutexGuard<'_, HashMap<(String, String), Pending>> {
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the bridge until the inbound stream ends (transport shut down). Spawns the outbound
/// publisher, which ends when the node's outbound stream ends.
pub async fn run(
    transport: Transport,
    mut inbound: mpsc::Receiver<Inbound>,
    node: NodeHandle,
    mut outbound: mpsc::UnboundedReceiver<Outbound>,
) {
    // Exported from the start, so a dashboard shows 0 rather than "no data" for a counter that
    // should never move.
    counter!(MQTT_PUBLISH_FAILED_TOTAL).increment(0);
    let pending: PendingMap = Arc::default();
    let publisher = {
        let (transport, pending) = (transport.clone(), pending.clone());
        tokio::spawn(async move {
            while let Some(message) = outbound.recv().await {
                match message {
                    Outbound::Respond {
                        agent,
                        request_id,
                        reply,
                    } => match reply.to_response(&request_id) {
                        Some(response) => {
                            let key = (agent.to_string(), request_id);
                            // Absent when it was queued before this process started: its
                            // op, start and route are unknown, so it is not counted and goes
                            // to the default route.
                            let route = match lock(&pending).remove(&key) {
                                Some(waiter) => {
                                    if waiter.queued {
                                        gauge!(RESOURCE_WAITERS, "kind" => kind_label(waiter.kind))
                                            .decrement(1.0);
                                    }
                                    count_answer(waiter.op, waiter.started, &response);
                                    waiter.route
                                }
                                None => ReplyRoute::default(),
                            };
                            published(respond(&transport, &route, &key.0, &response));
                        }
                        None => continue,
                    },
                    // Events yield to responses when the queue runs full (see
                    // `Transport::publish_event`).
                    Outbound::Notify { agent, event } => {
                        let topic = transport.topics().event(&agent);
                        published(transport.publish_event(topic, event.encode()));
                    }
                }
            }
        })
    };
    while let Some(Inbound {
        topic,
        payload,
        route,
    }) = inbound.recv().await
    {
        let started = Instant::now();
        let agent = match transport.topics().parse_request_topic(&topic) {
            Ok(agent) => agent.to_string(),
            Err(error) => {
                counter!(MQTT_BAD_TOPICS_TOTAL).increment(1);
                tracing::debug!(%topic, %error, "message on a topic that names no agent: dropped");
                continue;
            }
        };
        let request = match Request::decode(&payload) {
            Ok(request) => request,
            Err(error) => {
                counter!(MQTT_BAD_REQUESTS_TOTAL, "code" => error.code.as_str()).increment(1);
                published(transport.publish_response(&route, &agent, error.to_response().encode()));
                continue;
            }
        };
        let id = request.id.clone();
        let wait_ms = request.op.wait_ms();
        let op = request.op.name();
        let queueable = queueable_kind(&request.op);
        // A resend of a request still pending keeps the first one's start, and its task ends
        // with the first one's answer too.
        let answered = queueable.map(|kind| {
            lock(&pending)
                .entry((agent.clone(), id.clone()))
                .or_insert_with(|| Pending {
                    op,
                    kind,
                    started,
                    queued: false,
                    route: route.clone(),
                    answered: watch::channel(()).0,
                })
                .answered
                .subscribe()
        });
        // Handed to the node here, in arrival order, and only answered in a task: submitting
        // from the task let two requests of one agent reach the log in the opposite order of
        // their arrival (an acquire and the release published right after it: the release was
        // applied first and answered `not_holder`). See `NodeHandle::submit_ordered`.
        // Boxed, like `cancel_wait` in `answer`: the task is moved into place at spawn and at
        // every stage change, and with these futures inline it was 12,776 bytes (the forwarding
        // and read-index paths); boxed, 1,416. Copying it was 6% of a node's samples under
        // 10,000 agents' keepalives (of 9.9% in memmove; 3.5% after).
        let reply = Box::pin(node.submit_ordered(&agent, request));
        let (transport, node) = (transport.clone(), node.clone());
        let asked = Asked {
            agent,
            route,
            id,
            op,
            started,
            wait_ms,
            answered,
            pending: pending.clone(),
        };
        tokio::spawn(async move {
            answer(&transport, &node, asked, reply).await;
        });
    }
    publisher.abort();
}

/// One submitted request, as its answering task needs it.
struct Asked {
    /// The asking agent.
    agent: String,
    /// Where its answer goes.
    route: ReplyRoute,
    /// Its request id.
    id: String,
    /// The op's wire name.
    op: &'static str,
    /// When its decoding started.
    started: Instant,
    /// Its `wait_ms`, if an acquire or reserve.
    wait_ms: Option<u64>,
    /// Closed when the request's final answer is published; `Some` when the op can be queued
    /// (then it has an entry in `pending`).
    answered: Option<watch::Receiver<()>>,
    /// Where a queueable request waits for its deferred answer.
    pending: PendingMap,
}

/// Waits for the node's reply to one submitted request and publishes it, or arms its
/// `wait_ms` timer.
async fn answer(
    transport: &Transport,
    node: &NodeHandle,
    asked: Asked,
    reply: impl std::future::Future<Output = Result<Reply, NodeError>>,
) {
    let Asked {
        agent,
        route,
        id,
        op,
        started,
        wait_ms,
        answered,
        pending,
    } = asked;
    let key = (agent, id);
    let (agent, id) = (&key.0, &key.1);
    let reply = reply.await;
    if let Ok(Reply::Fence { valid, .. }) = &reply {
        let result = if *valid { "valid" } else { "stale" };
        counter!(FENCE_CHECKS_TOTAL, "result" => result).increment(1);
    }
    let response = match reply {
        Ok(reply) => match reply.to_response(id) {
            Some(response) => response,
            None => {
                // Counted as a waiter unless its deferred answer was already published (it
                // then left the pending map) or a resend of it was already counted.
                if let Some(waiter) = lock(&pending).get_mut(&key)
                    && !waiter.queued
                {
                    waiter.queued = true;
                    gauge!(RESOURCE_WAITERS, "kind" => kind_label(waiter.kind)).increment(1.0);
                }
                // Queued: the final answer comes from the entry that grants, times out or
                // drops it. A finite wait is cancelled through the log when it runs out; if the
                // grant won the race, the cancel does nothing. The task ends as soon as the
                // final answer is published: sleeping out every wait after its grant kept one
                // task per grant alive for `wait_ms` (measured: 14,700 tasks, 92 MB, in an 8 s
                // contended run whose acquires waited up to 8 s).
                if let Some(wait_ms) = wait_ms.filter(|ms| *ms > 0) {
                    let timer = tokio::time::sleep(Duration::from_millis(wait_ms));
                    if until_answered(answered, timer).await
                        && let Err(error) = Box::pin(node.cancel_wait(agent, id)).await
                    {
                        // The agent's SDK resends the same id, which re-arms this timer.
                        tracing::warn!(%agent, %id, %error, "could not cancel a timed-out wait");
                    }
                }
                return;
            }
        },
        Err(error) => Response::error(Some(id.clone()), ErrorCode::Unavailable, error.to_string()),
    };
    // Answered now: no deferred answer will come for it, so its pending entry goes, unless
    // that entry is an earlier send of the same id that is queued (this resend was answered at
    // once, say `unavailable`): that one still waits. Each published answer is counted.
    if answered.is_some() {
        let mut pending = lock(&pending);
        if pending.get(&key).is_some_and(|waiter| !waiter.queued) {
            pending.remove(&key);
        }
    }
    count_answer(op, started, &response);
    published(respond(transport, &route, agent, &response));
}

/// Publishes a response, cut to fit one packet: an `inspect` of a long queue lists the first
/// holders and waiters that fit and says how many there are (`Response::encode_within`).
/// Refused for its size it would never be answered, since every retry gets the same answer.
fn respond(
    transport: &Transport,
    route: &ReplyRoute,
    agent: &str,
    response: &Response,
) -> Result<(), crate::MqttError> {
    let payload = response.encode_within(transport.response_payload_bytes_max(route, agent));
    transport.publish_response(route, agent, payload)
}

/// Waits for `timer` unless the request's final answer is published first (its `answered`
/// sender dropped, possibly before this was called). Whether the timer ran out first.
async fn until_answered(
    answered: Option<watch::Receiver<()>>,
    timer: impl std::future::Future<Output = ()>,
) -> bool {
    let Some(mut answered) = answered else {
        timer.await;
        return true;
    };
    tokio::select! {
        // Nothing is ever sent: `changed` only returns when the sender is dropped.
        _ = answered.changed() => false,
        () = timer => true,
    }
}

/// Counts and logs a response or event the transport refused.
fn published(result: Result<(), crate::MqttError>) {
    if let Err(error) = result {
        counter!(MQTT_PUBLISH_FAILED_TOTAL).increment(1);
        tracing::warn!(%error, "response or event not published; the agent will retry");
    }
}
