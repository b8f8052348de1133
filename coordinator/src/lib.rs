//! # hivekeeper-coordinator: the replicated core
//!
//! Every lease, lock, permit and reservation decision is made by the pure, deterministic state
//! machine (`hivekeeper-state-machine`, re-exported as [`state_machine`]), which each Raft
//! replica applies in log order. This crate wraps it: Raft (openraft; its log on a segment log,
//! its vote and snapshots on redb) and the node's actors (ractor) carry bytes and time, never
//! decisions. The machine takes the wire's own op (`hivekeeper_protocol::Op`); [`response`] turns
//! its answer into the wire's response.
//!
//! ```text
//!  front door ─▶ NodeHandle::submit ─▶ Op::is_write?
//!                                   │ write: Command::Request   read: query(&Op) (read-index first)
//!                                   ▼
//!            leader stamps LogMeta { index, term, now_ms }
//!                                   │ Raft log (commit on a majority)
//!                                   ▼
//!            StateMachine::apply(meta, Command) ──▶ (Reply, Vec<Event>)
//!                  │                                   │       └─▶ node: deferred responses,
//!                  │                                   │           lost/expired notices,
//!                  │                                   │           lease keeper, metrics
//!                  │                                   └─▶ the proposer's answer ─▶ response()
//!                  └─ snapshot() / restore(): the whole state as bytes
//! ```
//!
//! # Layout
//! - [`state_machine`]: the pure machine (its own crate), one file per concept (lease, lock,
//!   semaphore, waypoint, FIFO queues, dedup, snapshot), each opening with its invariants.
//! - [`answer`]: the node's answer, the machine's `Reply` or one only the node gives (status,
//!   snapshot pages); [`response`]: an answer as the wire `Response`.
//! - [`raft`]: the openraft adapter: the log on a segment log (`hivekeeper-segment-log`), vote
//!   and snapshots on redb (both written by one group-commit writer thread, fsync before
//!   acknowledge), the state machine behind openraft, the peer transport, and [`raft::open`] to
//!   start a node from its data directory. Nothing outside it names openraft.
//! - [`node`]: what runs around Raft and owns a request's lifecycle: [`node::NodeHandle`] (what
//!   a front door calls: one request in, one final response out), the waits component
//!   (pending requests and their deadlines), the proposer task (batching), the fan-out (Raft's
//!   applied sink) and the lease keeper actor under a supervisor; in a cluster a follower
//!   forwards to the leader. `docs/ARCHITECTURE.md` draws the whole path.
//! - [`backup`]: online backup: `admin.snapshot`'s pages, the backup file, and restoring a new
//!   member's data directory from one.
//! - [`ConfigError`]: why a node's configuration (Raft timers, membership, limits) was refused.

pub mod answer;
pub mod backup;
mod config_error;
pub mod node;
pub mod raft;
pub mod response;

pub use hivekeeper_state_machine as state_machine;

pub use config_error::ConfigError;
pub use state_machine::{
    AccountChange, Command, Error, Event, LeaseEnd, LeaseId, Limits, LogMeta, ReleaseReason, Reply,
    ResourceKey, StateMachine,
};
