//! # hivekeeper-agent: the agent SDK (not built yet)
//!
//! This crate will hold the Rust agent SDK on rumqttc (sessions with automatic keepalive, lock,
//! permit and reservation guards carrying fencing tokens, backoff with jitter, broker
//! failover); the single-node issue builds it. It depends on `hivekeeper-protocol` only, never
//! on the coordinator, so an agent never compiles openraft.
//!
//! ```text
//!  Agent ──publish Request──▶ hk/v1/req/{agent}
//!        ◀──Response/Event─── hk/v1/rsp/{agent}, hk/v1/evt/{agent}
//! ```

pub use hivekeeper_protocol as protocol;
