//! # hivekeeper-coordinator: the replicated core
//!
//! Every lease, lock, permit and reservation decision is made here, by one pure, deterministic
//! state machine that each Raft replica applies in log order. Raft (openraft, on redb) and the
//! node's actors (ractor) will wrap it; they carry bytes and time, never decisions.
//!
//! ```text
//!  bridge (MQTT) ──Request──▶ leader stamps LogMeta { index, term, now_ms }
//!                                   │ Raft log (commit on a majority)
//!                                   ▼
//!            StateMachine::apply(meta, Command) ──▶ (Reply, Vec<Event>)
//!                  │                                   │       └─▶ node: deferred responses,
//!                  │                                   │           lost/expired notices,
//!                  │                                   │           lease keeper, metrics
//!                  │                                   └─▶ the proposer's answer
//!                  └─ snapshot() / restore(): the whole state as bytes
//! ```
//!
//! # Layout
//! - [`state_machine`]: the pure machine, one file per concept (lease, lock, semaphore,
//!   waypoint, dedup, snapshot), each opening with its invariants.
//! - `raft/`, `node/`: the openraft adapter and the actors (arrive with the single-node issue).

pub mod state_machine;

pub use state_machine::{
    Command, Error, Event, LeaseEnd, LeaseId, Limits, LogMeta, ReleaseReason, Reply, ResourceKey,
    StateMachine,
};
