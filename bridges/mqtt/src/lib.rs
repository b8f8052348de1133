//! # hivekeeper-mqtt: the MQTT bridge (not built yet)
//!
//! This crate will hold the embedded rumqttd broker and the bridge between the MQTT topics of
//! protocol v1 (`hivekeeper-protocol`) and the coordinator; the single-node issue builds it.
//! Until then it only re-exports the protocol it will speak, so the workspace layout is final.
//!
//! ```text
//!  hk/v1/req/{agent} ──▶ bridge: decode, validate, correlate ──▶ coordinator node
//!  hk/v1/rsp/{agent} ◀── one final response per request id  ◀──┘
//!  hk/v1/evt/{agent} ◀── events (lease.expired, lock.lost, ...)
//! ```

pub use hivekeeper_protocol as protocol;
