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
//!
//! ```text
//!  Service::start(NodeConfig, mqtt Config)
//!    ├─ Node::start: data dir (redb), Raft, actors ── outbound ──┐
//!    ├─ Transport::start: agent endpoint or external broker      │
//!    ├─ bridge::run(transport, inbound, node, outbound) ◀───────┘
//!    └─ counters copied into `metrics` once a second (no-ops without a recorder)
//!  Service::shutdown: transport, bridge, node, in that order
//! ```

pub mod service;

pub use service::{Service, ServiceError};
