//! The bridge: MQTT requests in, the node's answers out. Decode, submit, publish; the node owns
//! each request's lifecycle (pending requests, `wait_ms` deadlines, the waiters gauge), so a
//! request's final answer is published from wherever the node produces it.
//!
//! ```text
//!  Inbound{topic, payload, route}, on the task that received it (an endpoint connection's
//!  task, the external client's event loop: `Transport::deliver_to`)
//!        ─▶ agent id from topic ──(bad: counted, dropped)
//!        ─▶ Request::decode ──(bad: error response with the precise code, along its route)
//!        ─▶ node.submit(agent, request, respond)   (a write enters the proposer's queue now,
//!                                                   in arrival order)
//!              respond(response) ─▶ publish_response(route)   (called by the node, once):
//!                                   {prefix}/rsp/{agent}, or the MQTT 5 Response Topic with
//!                                   its Correlation Data
//!  Outbound::Respond ─▶ {prefix}/rsp/{agent}   (a queued request not pending here: its route
//!                      is unknown, so the default one)
//!  Outbound::Notify  ─▶ publish_event {prefix}/evt/{agent}   (lease.expired, lock.lost, ...;
//!                      events yield to responses: `Transport::publish_event`)
//!  Outbound::Disconnect ─▶ Transport::disconnect   (account removed or secret rotated)
//! ```
//!
//! # Metrics
//! - `hivekeeper_mqtt_bad_requests_total{code}`, `hivekeeper_mqtt_bad_topics_total`: decode
//!   errors and messages on a topic that names no agent.
//! - `hivekeeper_mqtt_publish_failed_total`: responses and events the transport refused.
//!
//! Requests, their durations, fence checks and waiters are counted by the node
//! (`hivekeeper_coordinator::node::metrics`), where their answers are produced.

use hivekeeper_coordinator::node::{NodeHandle, Outbound, Respond, Submitted};
use hivekeeper_protocol::{ErrorCode, Request, Response, Topics};
use metrics::{counter, describe_counter};
use tokio::sync::mpsc;

use crate::{Flow, Inbound, ReplyRoute, Transport};

/// Messages that could not be decoded into a request, by `code` (counter).
pub const MQTT_BAD_REQUESTS_TOTAL: &str = "hivekeeper_mqtt_bad_requests_total";
/// Messages on a topic that names no valid agent (counter).
pub const MQTT_BAD_TOPICS_TOTAL: &str = "hivekeeper_mqtt_bad_topics_total";
/// Responses and events the transport refused to publish (counter).
pub const MQTT_PUBLISH_FAILED_TOTAL: &str = "hivekeeper_mqtt_publish_failed_total";

/// Gives the bridge's metrics their help texts. Call once, after the recorder is installed.
pub fn describe_metrics() {
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
}

/// What one inbound message is, once read.
#[derive(Debug, PartialEq)]
enum Decoded {
    /// On a topic that names no agent: nobody to answer.
    NoAgent,
    /// Undecodable: answered with this error at once.
    Refused {
        /// The agent to answer.
        agent: String,
        /// The error response. Boxed: a `Response` carries every op's result fields (over
        /// 400 bytes), and a refusal is the rare case.
        response: Box<Response>,
    },
    /// A request to submit.
    Request {
        /// The asking agent.
        agent: String,
        /// Its request.
        request: Request,
    },
}

/// Reads one inbound message: the agent from its topic, the request from its payload.
fn decode(topics: &Topics, inbound: &Inbound) -> Decoded {
    let agent = match topics.parse_request_topic(&inbound.topic) {
        Ok(agent) => agent.to_string(),
        Err(error) => {
            counter!(MQTT_BAD_TOPICS_TOTAL).increment(1);
            let topic = &inbound.topic;
            tracing::debug!(%topic, %error, "message on a topic that names no agent: dropped");
            return Decoded::NoAgent;
        }
    };
    match Request::decode(&inbound.payload) {
        Ok(request) => Decoded::Request { agent, request },
        Err(error) => {
            counter!(MQTT_BAD_REQUESTS_TOTAL, "code" => error.code.as_str()).increment(1);
            Decoded::Refused {
                agent,
                response: Box::new(error.to_response()),
            }
        }
    }
}

/// Runs the bridge until the transport stops. Installs the handler that decodes and submits
/// every request on the task that received it (no hop through a bridge task), and spawns the
/// publisher of the node's outbound stream, which ends with it.
pub async fn run(
    transport: Transport,
    mut inbound: mpsc::Receiver<Inbound>,
    node: NodeHandle,
    outbound: mpsc::UnboundedReceiver<Outbound>,
) {
    // Exported from the start, so a dashboard shows 0 rather than "no data" for a counter that
    // should never move.
    counter!(MQTT_PUBLISH_FAILED_TOTAL).increment(0);
    // Every code `Request::decode` refuses with.
    for code in [
        ErrorCode::BadRequest,
        ErrorCode::UnknownOp,
        ErrorCode::TooLarge,
    ] {
        counter!(MQTT_BAD_REQUESTS_TOTAL, "code" => code.as_str()).increment(0);
    }
    let publisher = tokio::spawn(publish_outbound(transport.clone(), outbound));
    let handler = {
        let transport = transport.clone();
        move |message: Inbound| handle(&transport, &node, message)
    };
    transport.deliver_to(std::sync::Arc::new(handler), &mut inbound);
    // Nothing more is queued; the receiver ends when the transport stops.
    while inbound.recv().await.is_some() {}
    publisher.abort();
}

/// One received message: decoded and submitted to the node, which queues a write before
/// `submit` returns, so one agent's pipelined writes (delivered in order by its connection's
/// task) reach the log in the order they were sent.
fn handle(transport: &Transport, node: &NodeHandle, message: Inbound) -> Flow {
    match decode(transport.topics(), &message) {
        Decoded::NoAgent => Flow::Continue,
        Decoded::Refused { agent, response } => {
            respond(transport, &message.route, &agent, &response);
            Flow::Continue
        }
        Decoded::Request { agent, request } => {
            let respond = responder(transport, message.route, &agent);
            match node.submit(&agent, request, respond) {
                Submitted::Taken => Flow::Continue,
                Submitted::OverRate { wait } => Flow::Pause(wait),
            }
        }
    }
}

/// Where the node answers a request from `agent`: along the request's route.
fn responder(transport: &Transport, route: ReplyRoute, agent: &str) -> Respond {
    let transport = transport.clone();
    let agent = agent.to_string();
    Box::new(move |response| respond(&transport, &route, &agent, &response))
}

/// Publishes what the node sends besides answers: notices, and final answers of requests not
/// pending here.
async fn publish_outbound(transport: Transport, mut outbound: mpsc::UnboundedReceiver<Outbound>) {
    while let Some(message) = outbound.recv().await {
        match message {
            Outbound::Respond { agent, response } => {
                respond(&transport, &ReplyRoute::default(), &agent, &response);
            }
            // Events yield to responses when the queue runs full (see
            // `Transport::publish_event`).
            Outbound::Notify { agent, event } => {
                let topic = transport.topics().event(&agent);
                published(transport.publish_event(topic, event.encode()));
            }
            // Its account was removed or its secret rotated (an external broker's clients are
            // the broker's to close).
            Outbound::Disconnect { agent } => {
                if transport.disconnect(&agent) {
                    tracing::info!(%agent, "closed the connection of an agent whose account changed");
                }
            }
        }
    }
}

/// Publishes a response along `route` (`agent`'s response topic by default), cut to fit one
/// packet: an `inspect` of a long queue lists the first holders and waiters that fit and says
/// how many there are (`Response::encode_within`). Refused for its size it would never be
/// answered, since every retry gets the same answer.
fn respond(transport: &Transport, route: &ReplyRoute, agent: &str, response: &Response) {
    let payload = response.encode_within(transport.response_payload_bytes_max(route, agent));
    published(transport.publish_response(route, agent, payload));
}

/// Counts and logs a response or event the transport refused.
fn published(result: Result<(), crate::MqttError>) {
    if let Err(error) = result {
        counter!(MQTT_PUBLISH_FAILED_TOTAL).increment(1);
        tracing::warn!(%error, "response or event not published; the agent will retry");
    }
}

#[cfg(test)]
mod tests {
    use hivekeeper_protocol::{ErrorCode, Op};

    use super::*;

    fn inbound(topic: &str, payload: &str) -> Inbound {
        Inbound {
            topic: topic.to_string(),
            payload: crate::Bytes::copy_from_slice(payload.as_bytes()),
            route: ReplyRoute::default(),
        }
    }

    #[test]
    fn a_request_is_decoded_with_the_agent_of_its_topic() {
        let topics = Topics::default();
        let decoded = decode(
            &topics,
            &inbound(
                "hk/v1/req/drone-7",
                r#"{"id":"r1","op":"lease.grant","ttl_ms":5000}"#,
            ),
        );
        assert_eq!(
            decoded,
            Decoded::Request {
                agent: "drone-7".into(),
                request: Request {
                    id: "r1".into(),
                    op: Op::LeaseGrant { ttl_ms: 5000 },
                },
            }
        );
    }

    #[test]
    fn a_topic_that_names_no_agent_is_dropped() {
        let topics = Topics::default();
        for topic in [
            "hk/v1/req/",
            "hk/v1/req/a/b",
            "hk/v1/rsp/drone-7",
            "other/req/x",
        ] {
            let decoded = decode(
                &topics,
                &inbound(topic, r#"{"id":"r1","op":"lease.grant"}"#),
            );
            assert_eq!(decoded, Decoded::NoAgent, "{topic}");
        }
    }

    #[test]
    fn an_undecodable_request_is_refused_with_its_code_and_id() {
        let topics = Topics::default();
        let cases = [
            ("not json", None, ErrorCode::BadRequest),
            (
                r#"{"id":"r2","op":"lock.steal"}"#,
                Some("r2"),
                ErrorCode::UnknownOp,
            ),
            (
                r#"{"id":"r3","op":"lease.grant"}"#,
                Some("r3"),
                ErrorCode::BadRequest,
            ),
        ];
        for (payload, id, code) in cases {
            let Decoded::Refused { agent, response } =
                decode(&topics, &inbound("hk/v1/req/drone-7", payload))
            else {
                panic!("{payload} should be refused");
            };
            assert_eq!(agent, "drone-7");
            assert_eq!(response.id.as_deref(), id, "{payload}");
            let error = response.outcome.expect_err("an error response");
            assert_eq!(error.code, code, "{payload}");
        }
    }
}
