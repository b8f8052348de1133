//! # hivekeeper: the service, assembled
//!
//! The library half of the root package: what `hivekeeper serve` runs, as a value other code
//! can start too. The `hivekeeper` binary (`src/main.rs`) and the examples (`examples/`, e.g.
//! `drone-fleet`, which runs an embedded node in-process by default) use the same assembly,
//! so an example exercises exactly what an operator runs.
//!
//! # Layout
//! - [`service`]: [`Service`]: a node, its MQTT transport and the bridge between them, started
//!   and stopped in the right order.
//! - [`bridge`]: the node's side of the transport: [`bridge::Bridge`] (the transport's handler:
//!   decode, submit, answer along the request's route), [`bridge::publish_outbound`] (the
//!   node's notices) and [`bridge::NodeAuthenticator`] (the endpoint's credentials check).
//! - [`console_backend`]: the web console's backend over the node (`hivekeeper-console`).
//! - [`shared_broker`]: what a cluster's member publishes when the members share one external
//!   broker (the leader publishes the notices; a new leader republishes the recent ones).
//!
//! ```text
//!  Service::start(NodeConfig, mqtt Config)
//!    ├─ Node::start: data dir (redb), Raft, actors ── outbound ───────────┐
//!    ├─ Transport::start_with(config, Bridge(node), NodeAuthenticator)    │
//!    │    every request ─▶ Bridge::handle on its receiving task ─▶ node   │
//!    └─ bridge::publish_outbound(transport, outbound) ◀───────────────────┘
//!       (shared_broker::publish_outbound for a member behind a shared broker)
//!  Metrics are recorded where they happen (no-ops without a recorder).
//!  Service::shutdown: transport, publisher, node, in that order
//! ```

pub mod bridge;
pub mod console_backend;
pub mod service;
pub mod shared_broker;

pub use service::{Service, ServiceError};
