//! The node: the components that do a Hivekeeper node's I/O and orchestration around Raft and
//! the pure state machine, and own every request's lifecycle from submission to its one final
//! answer. No domain logic lives here: decisions are the state machine's; this layer batches
//! proposals, keeps lease deadlines and commit deadlines, proposes expiry as the leader,
//! routes applied events and bounds its ingress.
//!
//! # How a request flows (one page; docs/ARCHITECTURE.md draws the threads)
//!
//! ```text
//!  front door: decode ─▶ NodeHandle::submit(agent, request, respond) ─┐  agent's rate, then
//!                                                                     │  a leader without a
//!                                                                     │  quorum: `unavailable`
//!                                                                     │  at once; ingress permit
//!                                                                     │  (own lane: keepalives)
//!   write ─▶ Waits::register ─▶ Proposer::write ─▶ task: batch ─▶ Raft (append, fsync, commit)
//!                                                          │
//!   sm worker: StateMachine::apply ─▶ FanOut (same task) ─┬─ reply ─▶ Waits ─▶ respond ─▶ publish
//!                                                         ├─ Event::Respond (a queued request's
//!                                                         │   grant/timeout) ─▶ Waits ─▶ respond
//!                                                         ├─ notices ─▶ Outbound ─▶ front door
//!                                                         └─ LeaseGranted/Ended ─▶ LeaseKeeper
//!   Waits timer: no commit in time ─▶ `unavailable`
//!   keepalive ─▶ task: read-index (RaftHandle) ─▶ LeaseKeeper (deadline = now + TTL) ─▶ respond
//!   fence.check / inspect / admin reads ─▶ task: read-index ─▶ StateMachine::query ─▶ respond
//!   LeaseKeeper tick (leader) ─▶ overdue leases ─▶ Proposer::propose: ExpireLeases { term }
//!                             ─▶ a replicated wait deadline passed ─▶ ExpireWaits { term }
//!                             ─▶ a reservation window's end passed ─▶ ExpireReservations { term }
//!                                (or a preempted reservation's vacate deadline: the same entry)
//!                             ─▶ a max-hold or a lock-delay ended ─▶ ExpireHoldTimes { term }
//! ```
//!
//! In a cluster, a follower's proposer forwards its batches of agents' writes to the leader,
//! and a follower's keepalives and reads are forwarded too (`forward.rs`); the peer server
//! answers what other nodes forward here. Only agents' requests cross the peer port, by the
//! types: the node's own commands (`proposer::NodeCommand`) are proposed only by a leader and
//! have no encoding on the peer wire. A queued request's `wait_ms` is a deadline in the
//! replicated state, so no node times a wait itself and a new leader loses none. A follower's pending writes are answered by whichever comes first, the
//! leader's forwarded reply or this node applying the entry; deferred answers and notices come
//! from this node's own applied entries: every replica applies the same log, so an agent hears
//! them from whichever node it is connected to.
//!
//! # Layout
//! - `start.rs`: [`Node`]: start and shutdown.
//! - `auth.rs`: account secrets, [`NodeHandle::authenticate`], the role check in `submit`, and
//!   the first `admin` account.
//! - `handle.rs`: [`NodeHandle`]: submit, the reads.
//! - `membership.rs`: `admin.member.add` / `.remove`, one at a time, once per request id.
//! - `snapshot.rs`: `admin.snapshot`: the snapshots a leader keeps while they are read page
//!   by page (online backup).
//! - `health.rs`: [`Health`]: what `/health` and `/ready` answer.
//! - `waits.rs`: pending requests and their commit deadlines; final answers.
//! - `proposer.rs`: the task that batches agents' writes and the node's own commands into log
//!   entries; `batch_hold.rs`: when it holds a batch open for the requests about to follow.
//! - `fan_out.rs`: applied entries to waits, front door, keeper and metrics.
//! - `lease_keeper.rs`: the actor around `lessor.rs`, the sans-I/O keepalive deadlines on the
//!   leader; lease and wait expiry proposals.
//! - `supervisor.rs`: starts the keeper linked, watches the tasks; any failure stops the node.
//! - `forward.rs`: forwarding to the leader.
//! - `audit.rs`: the INFO line of each operator action (who, what, on what, outcome).
//! - `cluster_version.rs`: the leader raises the cluster version once every member's build
//!   supports it; ops above it are refused at submit.
//! - `cluster_watch.rs`: when this leader loses its quorum or this member is cut off, every
//!   pending request answered `unavailable` at once, and a WARN line; WARN when it is back;
//!   INFO on membership changes.
//! - `rate.rs`: the request rate per agent (`rate_limited`), checked at submit.
//! - `metrics.rs`: request, lease and resource metrics (names and help texts).
//! - `config.rs`: [`NodeConfig`]. `cluster.rs`: [`ClusterConfig`]. `error.rs`: [`NodeError`].

mod audit;
mod auth;
mod batch_hold;
mod cluster;
mod cluster_version;
mod cluster_watch;
mod config;
mod error;
mod fan_out;
mod forward;
mod handle;
mod health;
mod lease_keeper;
mod lessor;
mod membership;
pub mod metrics;
mod proposer;
mod rate;
mod snapshot;
mod start;
mod supervisor;
mod waits;
mod watches;

use hivekeeper_protocol::Response;

use crate::state_machine::Text;
pub use auth::{
    ADMIN_ACCOUNT, ADMIN_SECRET_FILE, ARGON2_M_COST_KIB, ARGON2_P_COST, ARGON2_T_COST, AuthError,
    SECRET_BYTES, hash_secret, new_secret, verify_secret,
};
pub use cluster::{ClusterConfig, ClusterState};
pub use config::NodeConfig;
pub use error::NodeError;
pub use handle::{NodeHandle, Submitted};
pub use health::{Health, READY_APPLY_LAG_ENTRIES_MAX};
pub use start::Node;
pub use waits::Respond;

/// What the node sends its front door besides the answers it gives through [`Respond`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// The final answer to a queued request that is not pending on this node (it was queued
    /// before this process started, or through another member): published on the agent's
    /// response topic all the same.
    Respond {
        /// The agent to answer.
        agent: Text,
        /// The answer (boxed: a response is large, and these are rare).
        response: Box<Response>,
    },
    /// An unsolicited event for an agent (`lease.expired`, `lock.lost`, ...).
    Notify {
        /// The agent to tell.
        agent: Text,
        /// What happened.
        event: hivekeeper_protocol::Event,
    },
    /// Close the agent's connections: its account was removed, or its secret rotated, so the
    /// credentials they were opened with are no longer good. A front door that does not hold
    /// the connections (an external broker's clients) does nothing.
    Disconnect {
        /// The agent.
        agent: Text,
    },
}
