//! # hivekeeper-coordinator: the replicated core
//!
//! Every lease, lock, permit and reservation decision is made by the pure, deterministic state
//! machine (`hivekeeper-state-machine`, re-exported as [`state_machine`]), which each Raft
//! replica applies in log order. This crate wraps it: Raft (openraft, on redb) and the node's
//! actors (ractor) carry bytes and time, never decisions, and [`wire`] converts between the
//! wire protocol and the machine's types.
//!
//! ```text
//!  bridge (MQTT) ──Request──▶ wire::command / wire::read
//!                                   │ write: Command      read: ReadOp (read-index first)
//!                                   ▼
//!            leader stamps LogMeta { index, term, now_ms }
//!                                   │ Raft log (commit on a majority)
//!                                   ▼
//!            StateMachine::apply(meta, Command) ──▶ (Reply, Vec<Event>)
//!                  │                                   │       └─▶ node: deferred responses,
//!                  │                                   │           lost/expired notices,
//!                  │                                   │           lease keeper, metrics
//!                  │                                   └─▶ the proposer's answer ─▶ wire::response
//!                  └─ snapshot() / restore(): the whole state as bytes
//! ```
//!
//! # Layout
//! - [`state_machine`]: the pure machine (its own crate), one file per concept (lease, lock,
//!   semaphore, waypoint, FIFO queues, dedup, snapshot), each opening with its invariants.
//! - [`wire`]: wire `Request` to the machine's `Command` or `ReadOp`, and `Reply` to the wire
//!   `Response`.
//! - [`raft`]: the openraft adapter: log, vote and snapshots on redb (written by one
//!   group-commit writer thread, fsync before acknowledge), the state machine behind openraft,
//!   and [`raft::open`] to start a node from its data directory.
//! - [`node`]: the ractor actors around Raft (proposer with batching, lease keeper, event
//!   fan-out, under one supervisor) and [`node::NodeHandle`], what the MQTT bridge calls;
//!   in a cluster a follower forwards to the leader.
//! - [`transport`]: TCP between nodes, for openraft's RPCs and forwarded requests.

pub mod node;
pub mod raft;
pub mod transport;
pub mod wire;

pub use hivekeeper_state_machine as state_machine;

pub use state_machine::{
    Command, Error, Event, LeaseEnd, LeaseId, Limits, LogMeta, ReleaseReason, Reply, ResourceKey,
    StateMachine,
};
