//! The inter-node transport: how Hivekeeper nodes talk to each other over TCP.
//!
//! Two kinds of traffic share one wire format but never one connection:
//! - openraft's RPCs (append entries, vote, snapshot chunks), through
//!   [`crate::raft::TcpNetwork`], one multiplexed connection per peer;
//! - requests a follower forwards to the leader (openraft does not forward writes:
//!   openraft#1716), through a [`PeerPool`] of its own, so a burst of forwarded requests never
//!   queues behind a snapshot chunk and a heartbeat never queues behind them.
//!
//! ```text
//!  caller ─ PeerClient::call(request, timeout) ─▶ connection task (one per client)
//!                                                   │ connect + Hello {cluster, from, to, versions}
//!                                                   │ frames: u32 length | MessagePack Envelope{id, body}
//!                                                   ▼ many calls in flight, answers matched by id
//!  serve(listener): per connection ─ Hello checked ─ per frame a task:
//!      AppendEntries / Vote / InstallSnapshot ─▶ openraft
//!      Propose(commands) / Submit(agent, request) ─▶ ForwardHandler (the node layer)
//! ```
//!
//! Failure handling: a call fails with [`TransportError`] (never hangs: every call has a
//! timeout); a broken connection fails its calls in flight and is re-dialled by the next call,
//! with jittered exponential backoff between failed dials so a dead peer costs a fast error, not
//! a connect storm. [`NetworkFaults`] cuts a node off from chosen peers in both directions: the
//! in-process cluster tests use it to partition a node.
//!
//! Security: with [`PeerTlsFiles`] (`serve --peer-tls-cert --peer-tls-key --peer-ca`) every
//! connection is mutual TLS, and a peer is accepted only if its certificate names a member of
//! the current configuration, inside the handshake, before any frame is read (`tls.rs`).
//!
//! # Layout
//! - `wire.rs`: the frames and the codec. `client.rs`: [`PeerClient`], [`PeerPool`].
//! - `server.rs`: [`serve`] and the [`ForwardHandler`] the node implements.
//! - `tls.rs`: [`PeerTlsFiles`], [`PeerAcceptor`] and the dialler's connector.
//! - `faults.rs`: [`NetworkFaults`].
//! - `version.rs`: the peer protocol's version, agreed in the hello ([`PeerVersions`]).

pub(crate) mod client;
mod faults;
mod server;
pub(crate) mod tls;
mod version;
mod wire;

pub use client::{PeerClient, PeerPool};
pub use faults::NetworkFaults;
pub use server::{ForwardHandler, PeerServer, serve};
pub use tls::{PeerAcceptor, PeerHandshakeError, PeerTlsFiles};
pub use version::{
    NoCommonVersion, PEER_PROTOCOL_VERSION, PEER_PROTOCOL_VERSION_MIN, PeerVersions, VersionRange,
};
pub use wire::{
    AgentWrite, ForwardRefused, HELLO_FRAME_MAX_BYTES, IN_FLIGHT_MAX, PeerRequest, PeerResponse,
    frame_max_bytes,
};

/// Why a call to a peer failed. The caller decides what it means (openraft: unreachable or a
/// network error; a forwarded request: `unavailable`, retried by the agent).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The peer could not be dialled (down, wrong address, or still backing off after a failed
    /// dial).
    #[error("member {peer} at {addr} is unreachable: {reason}")]
    Unreachable {
        /// The peer's member name (`--name`), as operators know it.
        peer: String,
        /// Its address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The peer refused the connection's hello (another cluster, or another node at that
    /// address).
    #[error("member {peer} at {addr} refused the connection: {reason}")]
    Refused {
        /// The peer's member name (`--name`), as operators know it.
        peer: String,
        /// Its address.
        addr: String,
        /// What it said.
        reason: String,
    },
    /// The connection broke while the call was in flight.
    #[error("connection to member {peer} lost: {reason}")]
    Broken {
        /// The peer's member name (`--name`), as operators know it.
        peer: String,
        /// Why.
        reason: String,
    },
    /// No answer within the call's timeout.
    #[error("member {peer} did not answer within {timeout_ms} ms")]
    Timeout {
        /// The peer's member name (`--name`), as operators know it.
        peer: String,
        /// The timeout.
        timeout_ms: u64,
    },
    /// This node is cut off from the peer on purpose ([`NetworkFaults`]).
    #[error("member {peer} is cut off by a network fault")]
    CutOff {
        /// The peer's member name (`--name`), as operators know it.
        peer: String,
    },
    /// A frame could not be encoded or decoded.
    #[error("codec: {0}")]
    Codec(String),
    /// The peer answered a call with an answer of another kind.
    #[error("member {peer} answered with {got}, not {expected}")]
    Unexpected {
        /// The peer's member name (`--name`), as operators know it.
        peer: String,
        /// What the call wanted.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
}
