//! # hivekeeper-mqtt: the MQTT transport
//!
//! Moves bytes between MQTT agents and the [`InboundHandler`] it is given, and knows nothing
//! of the node: every request published on `{prefix}/req/{agent}` goes to the handler as an
//! [`Inbound`] (the agent, the payload not parsed, and its [`ReplyRoute`]) on the task that
//! received it, and [`Transport`] puts responses on `{prefix}/rsp/{agent}` (or an MQTT 5
//! request's Response Topic, with its Correlation Data: [`Transport::publish_response`]) and
//! events on `{prefix}/evt/{agent}`. The service (the `hivekeeper` package's `bridge`) is the
//! handler: it decodes requests, submits them to the node and publishes what the node answers
//! along each request's route; the node keeps each request until its final answer. With
//! authentication on, the service also gives the endpoint an [`Authenticator`].
//!
//! Two backends behind one handle (DESIGN.md §4):
//! - **agent endpoint** (embedded, the default): Hivekeeper's own MQTT 3.1.1/5.0 server on
//!   127.0.0.1:1883, serving only Hivekeeper's topics (a connection is an agent: the agent of
//!   a request is its connection's client id);
//! - **external**: a rumqttc client of an existing broker (Mosquitto, EMQX, ...), for general
//!   pub/sub or a broker cluster (the agent of a request is read from its topic).
//!
//! ```text
//!              ┌───────────────────────── hivekeeper-mqtt ─────────────────────────┐
//!  agents ─MQTT─▶ endpoint connection task ──Inbound{agent, payload, route}──▶ InboundHandler
//!                 (or external: rumqttc poll task,          on the receiving    (the service:
//!                  agent read from the topic)               task                 decode, submit)
//!  agents ◀─MQTT─ endpoint connection task ◀── agent's own queue ◀─┐
//!                 (or external: publish task ◀── mpsc<Outbound>) ◀─┴─ Transport::publish*
//!              └───────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Delivery guarantees, in short: a request is acknowledged (PUBACK) once the handler has
//! taken it (endpoint) or by the broker (external), not by the node's log, so a request lost
//! past that point (node crash) gets no response; a response can be lost with an agent's
//! connection. Both are recovered the same way: the agent retries with the same request id
//! and gets the remembered outcome (DESIGN.md §2, "Retries are safe").
//!
//! Every counter and gauge is recorded with `metrics` where its event happens; their names
//! are in [`transport_metrics`].
//!
//! # Layout
//! - [`config`]: [`Config`] with one [`DEFAULTS`] and `validate()`; [`Mode`] picks
//!   [`EmbeddedConfig`] (the endpoint) or [`ExternalConfig`].
//! - `transport`: [`Transport`] (start, publish, shutdown), [`InboundHandler`] (the node's
//!   side), [`Inbound`], [`Flow`], [`ListenerInfo`].
//! - `reply_route`: [`ReplyRoute`], where one request's answer goes.
//! - `endpoint`: the agent endpoint (its own module doc lists its invariants and layout);
//!   [`Authenticator`] and [`AuthRefused`], the credentials hook the service fills.
//! - `external`: the rumqttc event loop in its own task, re-subscribe on every ConnAck,
//!   jittered reconnect backoff, the agent read from each request's topic; the members of a
//!   cluster behind one broker read requests through a shared subscription
//!   ([`ExternalConfig::as_member`]).
//! - [`transport_metrics`]: the metric names, and their export at 0 at start.
//! - `error`: [`MqttError`], the one error type of this crate.

pub mod config;
#[cfg(test)]
mod config_test;
mod endpoint;
mod error;
mod external;
mod reply_route;
mod transport;
pub mod transport_metrics;

pub use config::{Config, DEFAULTS, EmbeddedConfig, ExternalConfig, Mode};
pub use endpoint::{AuthRefused, Authenticator};
pub use error::MqttError;
pub use reply_route::ReplyRoute;
pub use transport::{Flow, Inbound, InboundHandler, ListenerInfo, MqttVersion, Transport};

/// The payload type of [`Inbound`] and [`Transport::publish`].
pub use bytes::Bytes;
/// The wire protocol this transport carries (its topics), re-exported for the service.
pub use hivekeeper_protocol as protocol;
