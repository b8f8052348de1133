//! What the log carries: where an entry sits and when it was stamped ([`LogMeta`]), and what
//! it asks the machine to do ([`Command`]).

use serde::{Deserialize, Serialize};

use crate::{AgentRequest, KvLimits, LeaseId, Limits};

/// Where an entry sits in the Raft log and when the leader stamped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// The command's position in the log. Strictly increasing; the source of lease ids and
    /// tokens. With one command per entry it is the entry's log index; when one entry carries a
    /// batch, the raft layer numbers its commands `max(log index, last applied + 1)` onwards, a
    /// function of the log alone, so every replica numbers them alike.
    pub index: u64,
    /// The term of the leader that appended the entry.
    pub term: u64,
    /// The leader's wall clock when it proposed the entry, ms since the Unix epoch. The machine
    /// does not take it as the time: its clock moves by the stamp's advance over the previous
    /// entry's stamp, never backwards and at most `lease_ttl_ms_max` at once (`clock.rs`).
    pub now_ms: u64,
}

/// What a log entry asks the machine to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// A write request from an agent (the node converts the wire request at its edge).
    Request {
        /// The agent, from the request topic.
        agent: String,
        /// The request.
        request: AgentRequest,
    },
    /// The leader found these leases past their deadline. Ignored when `term` is older than a
    /// term already applied: a deposed leader can never revoke.
    ExpireLeases {
        /// The proposing leader's term.
        term: u64,
        /// The leases to expire.
        leases: Vec<LeaseId>,
    },
    /// Legacy: what nodes proposed when a waiter's `wait_ms` ran out, before wait deadlines
    /// were replicated. No node proposes it now ([`Command::ExpireWaits`] replaced it); an
    /// old log's entry still applies as it did: the named waiter is cancelled unless it was
    /// granted first.
    CancelWait {
        /// The waiting agent.
        agent: String,
        /// The id of the waiting request.
        request_id: String,
    },
    /// The leader found waits past their deadline: ends every wait whose `deadline_ms` has
    /// passed on the machine's clock (none other, whatever the proposer believed), each
    /// answered `timeout` through [`Event::Respond`]. Ignored when `term` is older than a term
    /// already applied, like [`Command::ExpireLeases`] (`wait_deadline.rs`).
    ExpireWaits {
        /// The proposing leader's term.
        term: u64,
    },
    /// The leader found a reservation's window end passed: ends every held reservation whose
    /// `end_ms` has passed on the machine's clock and answers `timeout` to every waiting one
    /// whose end passed first (none other, whatever the proposer believed). Ignored when `term`
    /// is older than a term already applied, like [`Command::ExpireWaits`]
    /// (`waypoint/window.rs`).
    ExpireReservations {
        /// The proposing leader's term.
        term: u64,
    },
    /// The leader found a hold-time deadline passed: ends every hold whose `max_hold_ms` ran
    /// out and every lock-delay that passed on the machine's clock (none other, whatever the
    /// proposer believed), granting what became grantable in this entry. Ignored when `term`
    /// is older than a term already applied, like [`Command::ExpireWaits`] (`hold_time.rs`).
    ExpireHoldTimes {
        /// The proposing leader's term.
        term: u64,
    },
    /// Replace the replicated limits.
    Configure {
        /// The new limits; they bound what comes after, nothing already granted is taken back.
        limits: Limits,
        /// The key space's new bounds, or `None` to keep those in force. Like `limits` they
        /// bound what comes after, but lowering a history bound compacts the history at once
        /// (`KeySpace::configure`). Absent from the bytes when `None`, so an entry that leaves
        /// them alone (every entry written before they could be set) reads and writes as
        /// before.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kv: Option<KvLimits>,
    },
    /// The leader found every member's build able to apply cluster version `version`: raises
    /// the cluster's to it, never lowers it (`cluster_version.rs`). Never from an agent.
    RaiseClusterVersion {
        /// The version every member's build applies.
        version: u32,
    },
}

impl Command {
    /// What the command is, for logs: the op's wire name for an agent's request
    /// (`"lock.acquire"`), the command's own for the node's (`"expire_leases"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Request { request, .. } => request.op.name(),
            Command::ExpireLeases { .. } => "expire_leases",
            Command::CancelWait { .. } => "cancel_wait",
            Command::ExpireWaits { .. } => "expire_waits",
            Command::ExpireReservations { .. } => "expire_reservations",
            Command::ExpireHoldTimes { .. } => "expire_hold_times",
            Command::Configure { .. } => "configure",
            Command::RaiseClusterVersion { .. } => "raise_cluster_version",
        }
    }
}
