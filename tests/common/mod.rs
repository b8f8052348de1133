//! Support for the end-to-end tests, one file per concept:
//! - [`node`]: real `hivekeeper serve` processes ([`Node`]), killed when dropped;
//! - [`cluster`]: a cluster of them and the history checker;
//! - [`log`]: a child process's output ([`Log`]);
//! - [`raw`]: a raw MQTT client that speaks the wire protocol without the SDK ([`Raw`]);
//! - [`agents`]: SDK agents with test-sized timeouts, `inspect` and queue waits;
//! - [`airspace`]: 4D airspace: times on the service's clock, volumes and routes around a hub,
//!   raw routes, accounts of a node with `--auth`, a node with a short vacate deadline;
//! - [`fifo`]: the FIFO lock scenario both broker modes run;
//! - [`metrics`]: a plain HTTP GET of /metrics and the values in it, and of /health, /ready;
//! - [`cli`]: runs of the `hivekeeper` binary as an admin client ([`CliRun`]).
//!
//! Free ports, the bounded waits ([`within`], [`eventually`]), the killable TCP proxy and the
//! mosquitto broker come from `hivekeeper-test-support`, shared with the other crates' tests.
//!
//! Everything binds 127.0.0.1 only, on ports the OS picked. Every wait is bounded; every child
//! process is killed when its guard drops, also while a test panics (then its log tail is
//! printed, so a failure shows what the node said).

#![allow(dead_code)] // Each test binary uses a different part of this module.
#![allow(unused_imports)] // Each test binary uses a different part of this module.

pub mod agents;
pub mod airspace;
pub mod cli;
pub mod cluster;
pub mod fifo;
pub mod log;
pub mod metrics;
pub mod node;
pub mod raw;

pub use agents::{
    agent, agent_config, agent_session, fence_check, inspect, inspect_lock, release,
    wait_for_waiters,
};
pub use cli::{CliRun, run_cli, run_cli_as_admin, run_cli_with_env};
pub use fifo::fifo_scenario;
pub use hivekeeper_test_support::{Mosquitto, Proxy, eventually, free_port, free_ports, within};
pub use log::Log;
pub use metrics::{
    http_get, metric, metric_sum, metrics_text, wait_http_status, wait_metric, wait_metric_sum,
};
pub use node::{Mqtt, Node};
pub use raw::{Raw, code, connack};

/// The default topic prefix.
pub const PREFIX: &str = "hk/v1";
