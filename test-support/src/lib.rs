//! # hivekeeper-test-support: what every Hivekeeper test crate shares
//!
//! One implementation of the helpers that the root package's end-to-end tests, the SDK's
//! tests, the MQTT transport's tests and the coordinator's tests all need, instead of a copy
//! in each `tests/common/`. A dev-dependency only (`publish = false`): nothing that ships
//! depends on it. It depends on no Hivekeeper crate but `hivekeeper-loopback` and `hivekeeper-tls`, so any crate of
//! the workspace can use it without a dependency cycle.
//!
//! Everything binds 127.0.0.1 only, on ports the OS picked; every wait is bounded and fails
//! the test with what it waited for; every process or task is killed when its guard drops,
//! also while a test panics.
//!
//! # Layout
//! - [`ports`]: [`free_port`], [`free_ports`] (every listener held until all are picked).
//! - [`wait`]: [`within`] (a future, bounded) and [`eventually`] (a check, polled, bounded).
//! - [`proxy`]: [`Proxy`], a killable TCP proxy: what an agent sees when its node or network
//!   dies.
//! - [`certs`]: [`TestCerts`], development certificates (CA, server, clients, peers).
//! - [`mosquitto`]: [`Mosquitto`], a broker process with a generated config, killed on drop.
//! - [`binary`]: [`hivekeeper_binary`], the workspace's `hivekeeper` beside the running test,
//!   and [`installed`], a system program (Debian's `mosquitto`, `prometheus`).

pub mod binary;
pub mod certs;
pub mod mosquitto;
pub mod ports;
pub mod proxy;
pub mod wait;

pub use binary::{hivekeeper_binary, installed};
pub use certs::TestCerts;
pub use mosquitto::Mosquitto;
pub use ports::{free_port, free_ports};
pub use proxy::Proxy;
pub use wait::{Settled, eventually, within};
