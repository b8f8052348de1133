//! The bridge: MQTT requests in, node answers out. Decodes and validates each request, hands it
//! to the node, publishes exactly one final response per request id (at once, or when a queued
//! request is granted, times out or loses its lease), and publishes events.
//!
//! ```text
//!  Inbound{topic, payload} ─▶ agent id from topic ──(bad: counted, dropped: no one to answer)
//!        ─▶ Request::decode ──(bad: error response with the precise code)
//!        ─▶ node.submit_ordered(agent, request)  (a write enters the proposer's queue now,
//!           in arrival order) ─▶ task: await its reply
//!              ├ final reply ─▶ publish {prefix}/rsp/{agent}
//!              ├ Queued      ─▶ (wait_ms = n > 0) timer n ms ─▶ node.cancel_wait
//!              └ NodeError   ─▶ publish `unavailable` (the agent retries the same id)
//!  Outbound::Respond ─▶ publish {prefix}/rsp/{agent}    (a queued request's final answer)
//!  Outbound::Notify  ─▶ publish {prefix}/evt/{agent}    (lease.expired, lock.lost, ...)
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hivekeeper_coordinator::node::{NodeError, NodeHandle, Outbound};
use hivekeeper_coordinator::state_machine::Reply;
use hivekeeper_protocol::{ErrorCode, Request, Response};
use tokio::sync::mpsc;

use crate::{Inbound, Transport};

/// What the bridge counted, for metrics and tests.
#[derive(Debug, Default)]
pub struct BridgeStats {
    /// Messages on a topic that names no valid agent (dropped).
    pub bad_topics: AtomicU64,
    /// Requests answered with a decode error (`bad_request`, `unknown_op`, `too_large`).
    pub bad_requests: AtomicU64,
    /// Requests handed to the node.
    pub submitted: AtomicU64,
    /// Answers the node could not give (`unavailable`).
    pub unavailable: AtomicU64,
    /// Publishes the transport refused (its queue full or closed).
    pub publish_failed: AtomicU64,
}

/// Runs the bridge until the inbound stream ends (transport shut down). Spawns the outbound
/// publisher, which ends when the node's outbound stream ends.
pub async fn run(
    transport: Transport,
    mut inbound: mpsc::Receiver<Inbound>,
    node: NodeHandle,
    mut outbound: mpsc::UnboundedReceiver<Outbound>,
    stats: Arc<BridgeStats>,
) {
    let publisher = {
        let (transport, stats) = (transport.clone(), stats.clone());
        tokio::spawn(async move {
            while let Some(message) = outbound.recv().await {
                let (topic, payload) = match message {
                    Outbound::Respond {
                        agent,
                        request_id,
                        reply,
                    } => match reply.to_response(&request_id) {
                        Some(response) => (transport.topics().response(&agent), response.encode()),
                        None => continue,
                    },
                    Outbound::Notify { agent, event } => {
                        (transport.topics().event(&agent), event.encode())
                    }
                };
                publish(&transport, &stats, topic, payload);
            }
        })
    };
    while let Some(Inbound { topic, payload }) = inbound.recv().await {
        let agent = match transport.topics().parse_request_topic(&topic) {
            Ok(agent) => agent.to_string(),
            Err(error) => {
                stats.bad_topics.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%topic, %error, "message on a topic that names no agent: dropped");
                continue;
            }
        };
        let request = match Request::decode(&payload) {
            Ok(request) => request,
            Err(error) => {
                stats.bad_requests.fetch_add(1, Ordering::Relaxed);
                let topic = transport.topics().response(&agent);
                publish(&transport, &stats, topic, error.to_response().encode());
                continue;
            }
        };
        stats.submitted.fetch_add(1, Ordering::Relaxed);
        let id = request.id.clone();
        let wait_ms = request.op.wait_ms();
        // Handed to the node here, in arrival order, and only answered in a task: submitting
        // from the task let two requests of one agent reach the log in the opposite order of
        // their arrival (an acquire and the release published right after it: the release was
        // applied first and answered `not_holder`). See `NodeHandle::submit_ordered`.
        let reply = node.submit_ordered(&agent, request);
        let (transport, node, stats) = (transport.clone(), node.clone(), stats.clone());
        tokio::spawn(async move {
            answer(&transport, &node, &stats, agent, id, wait_ms, reply).await;
        });
    }
    publisher.abort();
}

/// Waits for the node's reply to one submitted request and publishes it, or arms its
/// `wait_ms` timer.
async fn answer(
    transport: &Transport,
    node: &NodeHandle,
    stats: &BridgeStats,
    agent: String,
    id: String,
    wait_ms: Option<u64>,
    reply: impl std::future::Future<Output = Result<Reply, NodeError>>,
) {
    let topic = transport.topics().response(&agent);
    let response = match reply.await {
        Ok(reply) => match reply.to_response(&id) {
            Some(response) => response,
            None => {
                // Queued: the final answer comes from the entry that grants, times out or
                // drops it. A finite wait is cancelled through the log when it runs out; if the
                // grant won the race, the cancel does nothing.
                if let Some(wait_ms) = wait_ms.filter(|ms| *ms > 0) {
                    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                    if let Err(error) = node.cancel_wait(&agent, &id).await {
                        // The agent's SDK resends the same id, which re-arms this timer.
                        tracing::warn!(%agent, %id, %error, "could not cancel a timed-out wait");
                    }
                }
                return;
            }
        },
        Err(error) => {
            stats.unavailable.fetch_add(1, Ordering::Relaxed);
            Response::error(Some(id), ErrorCode::Unavailable, error.to_string())
        }
    };
    publish(transport, stats, topic, response.encode());
}

fn publish(transport: &Transport, stats: &BridgeStats, topic: String, payload: Vec<u8>) {
    if let Err(error) = transport.publish(topic, payload) {
        stats.publish_failed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "response or event not published; the agent will retry");
    }
}
