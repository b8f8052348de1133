//! The bridge: the node's side of the MQTT transport. MQTT requests in, the node's answers
//! out: decode, submit, publish; the node owns each request's lifecycle (pending requests,
//! `wait_ms` deadlines, the waiters gauge), so a request's final answer is published from
//! wherever the node produces it. The transport knows nothing of the node: it is given
//! [`Bridge`] as its handler and, with authentication on, [`NodeAuthenticator`].
//!
//! ```text
//!  Inbound{agent, payload, route}, on the task that received it (an endpoint connection's
//!  task, the external client's event loop): Bridge::handle
//!        ─▶ Request::decode ──(bad: error response with the precise code, along its route)
//!        ─▶ node.submit(agent, request, respond)   (a write enters the proposer's queue now,
//!                                                   in arrival order)
//!              respond(response) ─▶ publish_response(route)   (called by the node, once):
//!                                   {prefix}/rsp/{agent}, or the MQTT 5 Response Topic with
//!                                   its Correlation Data
//!  Outbound::Respond ─▶ {prefix}/rsp/{agent}   (a queued request not pending here: its route
//!                      is unknown, so the default one)       [publish_outbound, a task]
//!  Outbound::Notify  ─▶ publish_event {prefix}/evt/{agent}   (lease.expired, lock.lost, ...;
//!                      events yield to responses: `Transport::publish_event`)
//!  Outbound::Disconnect ─▶ Transport::disconnect   (account removed or secret rotated)
//! ```
//!
//! # Metrics
//! - `hivekeeper_mqtt_bad_requests_total{code}`: decode errors.
//! - `hivekeeper_mqtt_publish_failed_total`: responses and events the transport refused.
//!
//! The transport counts its own traffic (`hivekeeper_mqtt::transport_metrics`); requests,
//! their durations, fence checks and waiters are counted by the node
//! (`hivekeeper_coordinator::node::metrics`), where their answers are produced.

use std::future::Future;
use std::pin::Pin;

use hivekeeper_coordinator::node::{AuthError, NodeHandle, Outbound, Respond, Submitted};
use hivekeeper_mqtt::{
    AuthRefused, Authenticator, Flow, Inbound, InboundHandler, MqttError, ReplyRoute, Transport,
};
use hivekeeper_protocol::{ErrorCode, Event, Request, Response, Role};
use metrics::{counter, describe_counter};
use tokio::sync::mpsc;

/// Messages that could not be decoded into a request, by `code` (counter).
pub const MQTT_BAD_REQUESTS_TOTAL: &str = "hivekeeper_mqtt_bad_requests_total";
/// Responses and events the transport refused to publish (counter).
pub const MQTT_PUBLISH_FAILED_TOTAL: &str = "hivekeeper_mqtt_publish_failed_total";

/// Gives the bridge's and the transport's metrics their help texts. Call once, after the
/// recorder is installed.
pub fn describe_metrics() {
    hivekeeper_mqtt::transport_metrics::describe();
    describe_counter!(
        MQTT_BAD_REQUESTS_TOTAL,
        "Messages answered with a decode error, by code (bad_request, unknown_op, too_large)."
    );
    describe_counter!(
        MQTT_PUBLISH_FAILED_TOTAL,
        "Responses and events not published: the transport's queue was full or closed (the \
         agent retries)."
    );
}

/// What one request's payload is, once read.
#[derive(Debug, PartialEq)]
enum Decoded {
    /// Undecodable: answered with this error at once. Boxed: a `Response` carries every op's
    /// result fields (over 400 bytes), and a refusal is the rare case.
    Refused(Box<Response>),
    /// A request to submit.
    Request(Request),
}

/// Reads one request's payload.
fn decode(payload: &[u8]) -> Decoded {
    match Request::decode(payload) {
        Ok(request) => Decoded::Request(request),
        Err(error) => {
            counter!(MQTT_BAD_REQUESTS_TOTAL, "code" => error.code.as_str()).increment(1);
            Decoded::Refused(Box::new(error.to_response()))
        }
    }
}

/// The transport's handler: decodes every request and submits it to the node, on the task that
/// received it (no hop through a bridge task).
#[derive(Clone)]
pub struct Bridge {
    /// The node requests are submitted to.
    node: NodeHandle,
}

impl Bridge {
    /// A bridge to `node`. Exports `hivekeeper_mqtt_publish_failed_total` and the bad-request
    /// counter of every code `Request::decode` refuses with at 0, so a dashboard shows 0
    /// rather than "no data" for a counter that should never move.
    pub fn new(node: NodeHandle) -> Bridge {
        counter!(MQTT_PUBLISH_FAILED_TOTAL).increment(0);
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::UnknownOp,
            ErrorCode::TooLarge,
        ] {
            counter!(MQTT_BAD_REQUESTS_TOTAL, "code" => code.as_str()).increment(0);
        }
        Bridge { node }
    }
}

impl InboundHandler for Bridge {
    /// One received request: decoded and submitted to the node, which queues a write before
    /// `submit` returns, so one agent's pipelined writes (delivered in order by its
    /// connection's task) reach the log in the order they were sent.
    fn handle(&self, transport: &Transport, inbound: Inbound) -> Flow {
        let Inbound {
            agent,
            payload,
            route,
        } = inbound;
        match decode(&payload) {
            // Undecodable messages count against the agent's rate too, so a flood of them is
            // paused like any other.
            Decoded::Refused(response) => {
                respond(transport, &route, &agent, &response);
                match self.node.charge_rate(&agent) {
                    Some(wait) => Flow::Pause(wait),
                    None => Flow::Continue,
                }
            }
            Decoded::Request(request) => {
                let respond = responder(transport, route, &agent);
                match self.node.submit(&agent, request, respond) {
                    Submitted::Taken => Flow::Continue,
                    Submitted::OverRate { wait } => Flow::Pause(wait),
                }
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
/// pending here, for a node whose agents are its own (its agent endpoint's, or a broker no
/// other member reads: `shared_broker` has the rules of a shared one). Runs until `outbound`
/// ends (the node stopped) or the task is aborted.
pub async fn publish_outbound(
    transport: Transport,
    mut outbound: mpsc::UnboundedReceiver<Outbound>,
) {
    while let Some(message) = outbound.recv().await {
        match message {
            Outbound::Respond { agent, response } => {
                respond(&transport, &ReplyRoute::default(), &agent, &response);
            }
            // Events yield to responses when the queue runs full (see
            // `Transport::publish_event`).
            Outbound::Notify { agent, event } => publish_notice(&transport, &agent, &event),
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

/// Publishes a notice on `agent`'s event topic.
pub(crate) fn publish_notice(transport: &Transport, agent: &str, event: &Event) {
    let topic = transport.topics().event(agent);
    published(transport.publish_event(topic, event.encode()));
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
fn published(result: Result<(), MqttError>) {
    if let Err(error) = result {
        counter!(MQTT_PUBLISH_FAILED_TOTAL).increment(1);
        tracing::warn!(%error, "response or event not published; the agent will retry");
    }
}

/// The node as the agent endpoint's [`Authenticator`]: secrets are checked against the node's
/// own replica of the accounts ([`NodeHandle::authenticate`], [`NodeHandle::role_of`]).
#[derive(Clone)]
pub struct NodeAuthenticator(pub NodeHandle);

impl Authenticator for NodeAuthenticator {
    fn authenticate<'a>(
        &'a self,
        agent: &'a str,
        secret: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Role, AuthRefused>> + Send + 'a>> {
        Box::pin(async move {
            self.0
                .authenticate(agent, secret)
                .await
                .map_err(|error| match error {
                    AuthError::Unavailable { .. } => AuthRefused::Unavailable(Box::new(error)),
                    AuthError::NoAccount { .. } | AuthError::WrongSecret { .. } => {
                        AuthRefused::Credentials(Box::new(error))
                    }
                })
        })
    }

    fn role_of(&self, agent: &str) -> Role {
        self.0.role_of(agent)
    }
}

#[cfg(test)]
mod tests {
    use hivekeeper_protocol::{ErrorCode, Op};

    use super::*;

    #[test]
    fn a_request_is_decoded() {
        let decoded = decode(br#"{"id":"r1","op":"lease.grant","ttl_ms":5000}"#);
        assert_eq!(
            decoded,
            Decoded::Request(Request {
                id: "r1".into(),
                op: Op::LeaseGrant {
                    ttl_ms: 5000,
                    lock_delay_ms: 0
                },
            })
        );
    }

    #[test]
    fn an_undecodable_request_is_refused_with_its_code_and_id() {
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
            let Decoded::Refused(response) = decode(payload.as_bytes()) else {
                panic!("{payload} should be refused");
            };
            assert_eq!(response.id.as_deref(), id, "{payload}");
            let error = response.outcome.expect_err("an error response");
            assert_eq!(error.code, code, "{payload}");
        }
    }
}
