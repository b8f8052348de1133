//! # hivekeeper-mqtt: the MQTT transport
//!
//! Moves bytes between MQTT and the rest of the node, and knows nothing of the coordinator:
//! everything published on `{prefix}/req/+` comes out of a bounded queue as an [`Inbound`]
//! (topic and payload, not parsed), and [`Transport::publish`] puts responses on
//! `{prefix}/rsp/{agent}` and events on `{prefix}/evt/{agent}`. The bridge built on top
//! decodes requests (`Request::decode`), submits them to the node and publishes what the node
//! answers; the node keeps each request until its final answer.
//!
//! Two backends behind one handle (DESIGN.md §4):
//! - **embedded** (default): rumqttd 0.20 runs in this process, listening on 127.0.0.1:1883;
//!   the transport joins its router through a local link (no TCP).
//! - **external**: a rumqttc client of an existing broker (Mosquitto, EMQX, ...).
//!
//! ```text
//!                      ┌──────────────────── hivekeeper-mqtt ─────────────────────┐
//!  agents ──MQTT──▶ broker ──{prefix}/req/+──▶ receive task ──try_send──▶ mpsc<Inbound> ──▶ bridge
//!  (QoS 1 requests)  (embedded rumqttd: local link,        (full: drop + count)
//!                     external: rumqttc event loop)
//!  agents ◀──MQTT── broker ◀──rsp/evt──────── publish task ◀──try_send── mpsc<Outbound> ◀── bridge
//!                      │  (embedded: QoS 0 via link,        (full: publish() errs at once)
//!                      │   external: QoS 1)
//!                      └────────────────────────────────────────────────────────────┘
//! ```
//!
//! Delivery guarantees, in short: a request is acknowledged (PUBACK) by the broker, not by
//! the bridge, so a request dropped past the broker (inbound queue full, node crash) gets no
//! response; a response can be lost with an agent's connection. Both are recovered the same
//! way: the agent retries with the same request id and gets the remembered outcome
//! (DESIGN.md §2, "Retries are safe").
//!
//! # Layout
//! - [`bridge`]: decode, submit to the node, publish its answers and events ([`bridge::run`]).
//! - [`config`]: [`Config`] with one [`DEFAULTS`] and `validate()`; [`Mode`] picks
//!   [`EmbeddedConfig`] or [`ExternalConfig`].
//! - `transport`: [`Transport`] (start, publish, stats, shutdown), [`Inbound`], [`Stats`],
//!   [`ListenerInfo`].
//! - `embedded`: rumqttd's router, listeners on their own threads, the local link, the
//!   `Unschedule`/`wake` handling, readiness probes.
//! - `external`: the rumqttc event loop in its own task, re-subscribe on every ConnAck,
//!   jittered reconnect backoff.
//! - `listener_nodelay`: TCP_NODELAY on the listening socket rumqttd binds (Linux).
//! - `error`: [`MqttError`], the one error type of this crate.

pub mod bridge;
pub mod config;
mod connections;
mod embedded;
mod error;
mod external;
mod listener_nodelay;
mod transport;

pub use config::{Config, DEFAULTS, EmbeddedConfig, ExternalConfig, Mode};
pub use error::MqttError;
pub use transport::{Inbound, ListenerInfo, MqttVersion, Stats, Transport};

/// The payload type of [`Inbound`] and [`Transport::publish`].
pub use bytes::Bytes;
/// The wire protocol this transport carries, re-exported for the bridge.
pub use hivekeeper_protocol as protocol;
