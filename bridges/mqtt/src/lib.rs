//! # hivekeeper-mqtt: the MQTT transport
//!
//! Moves bytes between MQTT and the rest of the node, and knows nothing of the coordinator:
//! everything published on `{prefix}/req/{agent}` comes out of a bounded queue as an
//! [`Inbound`] (topic, payload and [`ReplyRoute`], not parsed), and [`Transport`] puts
//! responses on `{prefix}/rsp/{agent}` (or an MQTT 5 request's Response Topic, with its
//! Correlation Data: [`Transport::publish_response`]) and events on `{prefix}/evt/{agent}`.
//! The bridge built on top decodes requests (`Request::decode`), submits them to the node and
//! publishes what the node answers along each request's route; the node keeps each request
//! until its final answer.
//!
//! Two backends behind one handle (DESIGN.md §4):
//! - **agent endpoint** (embedded, the default): Hivekeeper's own MQTT 3.1.1/5.0 server on
//!   127.0.0.1:1883, serving only Hivekeeper's topics (a connection is an agent);
//! - **external**: a rumqttc client of an existing broker (Mosquitto, EMQX, ...), for general
//!   pub/sub or a broker cluster.
//!
//! ```text
//!                      ┌──────────────────── hivekeeper-mqtt ─────────────────────────┐
//!  agents ──MQTT──▶ endpoint connection task ──try_send──▶ mpsc<Inbound> ──▶ bridge
//!                   (or external: rumqttc poll task)       (full: drop + count)
//!  agents ◀──MQTT── endpoint connection task ◀── agent's own queue ◀── Transport::publish*
//!                   (or external: publish task ◀── mpsc<Outbound>)         ◀── bridge
//!                      └────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Delivery guarantees, in short: a request is acknowledged (PUBACK) when it is in the
//! inbound queue (endpoint) or by the broker (external), not by the node, so a request
//! dropped past that point (inbound queue full, node crash) gets no response; a response can
//! be lost with an agent's connection. Both are recovered the same way: the agent retries
//! with the same request id and gets the remembered outcome (DESIGN.md §2, "Retries are
//! safe").
//!
//! # Layout
//! - [`bridge`]: decode, submit to the node, publish its answers and events ([`bridge::run`]).
//! - [`config`]: [`Config`] with one [`DEFAULTS`] and `validate()`; [`Mode`] picks
//!   [`EmbeddedConfig`] (the endpoint) or [`ExternalConfig`].
//! - `transport`: [`Transport`] (start, publish, stats, shutdown), [`Inbound`], [`Stats`],
//!   [`ListenerInfo`].
//! - `reply_route`: [`ReplyRoute`], where one request's answer goes.
//! - `endpoint`: the agent endpoint (its own module doc lists its invariants and layout).
//! - `external`: the rumqttc event loop in its own task, re-subscribe on every ConnAck,
//!   jittered reconnect backoff.
//! - `error`: [`MqttError`], the one error type of this crate.

pub mod bridge;
pub mod config;
mod endpoint;
mod error;
mod external;
mod reply_route;
mod transport;

pub use config::{Config, DEFAULTS, EmbeddedConfig, ExternalConfig, Mode};
pub use endpoint::Authenticator;
pub use error::MqttError;
pub use reply_route::ReplyRoute;
pub use transport::{Flow, Inbound, InboundHandler, ListenerInfo, MqttVersion, Stats, Transport};

/// The payload type of [`Inbound`] and [`Transport::publish`].
pub use bytes::Bytes;
/// The wire protocol this transport carries, re-exported for the bridge.
pub use hivekeeper_protocol as protocol;
