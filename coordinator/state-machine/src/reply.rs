//! What the machine answers: to an entry's proposer, or to a read ([`Reply`]).

use hivekeeper_protocol::{
    AccountInfo, ConflictInfo, ErrorCode, HolderInfo, KvDeleted, KvPage, KvPutDone, KvTxnDone,
    LeaderInfo, LeaseInfo, ResourceInfo, Role, WaiterInfo,
};
use serde::{Deserialize, Serialize};

use crate::{LeaseId, Text};

/// The machine's answer to the entry's proposer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// `lease.grant` succeeded.
    Lease {
        /// The new lease.
        lease: LeaseId,
        /// Its TTL.
        ttl_ms: u64,
    },
    /// `lease.keepalive`: the lease exists and belongs to the agent.
    Ttl {
        /// The lease's TTL.
        ttl_ms: u64,
    },
    /// The resource is granted.
    Granted {
        /// The grant's fencing token.
        token: u64,
    },
    /// A release or revoke succeeded, or a command was carried out.
    Done,
    /// The request waits in a queue; its final answer will be an [`Event::Respond`].
    Queued,
    /// `fence.check`.
    Fence {
        /// Newest token held on the resource now, 0 when free.
        current: u64,
        /// Whether the checked token is held now.
        valid: bool,
    },
    /// `inspect`.
    Inspect {
        /// The semaphore's capacity (semaphores only).
        limit: Option<u32>,
        /// Holders, in token order.
        holders: Vec<HolderInfo>,
        /// Waiters, in queue order.
        waiters: Vec<WaiterInfo>,
        /// Barriers only: the count of the round filling now, when one fills.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u32>,
        /// Barriers only: how many members of passed rounds wait in `barrier.leave` for the
        /// rest of their round, when any do (`holders` lists the members that have not left).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leaving: Option<u32>,
    },
    /// `ExpireLeases`: the leases that ended (stale or unknown ones are skipped).
    Expired {
        /// Leases expired by this entry.
        leases: Vec<LeaseId>,
    },
    /// `ExpireWaits`: how many waits ended (0 for a stale term or when none was due).
    WaitsExpired {
        /// Waits answered `timeout` by this entry.
        count: u64,
    },
    /// `ExpireReservations`: how many reservations ended (held ones released, waiting ones
    /// answered `timeout`); 0 for a stale term or when none was due.
    ReservationsEnded {
        /// Reservations ended by this entry.
        count: u64,
    },
    /// `ExpireHoldTimes`: how many holds its max-hold ended and how many lock-delays ended (0
    /// and 0 for a stale term or when none was due).
    HoldTimesEnded {
        /// Holds ended because their `max_hold_ms` ran out.
        max_holds: u64,
        /// Locks whose lock-delay ended (each granted to its head waiter, or forgotten).
        lock_delays: u64,
    },
    /// `CancelWait` (legacy): whether a waiter was cancelled (false when the grant won).
    Cancelled {
        /// True if the waiter was still queued and is now answered `timeout`.
        cancelled: bool,
    },
    /// The request was refused; nothing changed.
    Refused {
        /// Why, as a wire error code.
        code: ErrorCode,
        /// Detail for a human.
        message: String,
    },
    /// `admin.leases`: one page of live leases.
    Leases {
        /// Leases in id order; the node adds `remaining_ms` from its keeper's deadlines.
        leases: Vec<LeaseInfo>,
        /// Present when more leases follow: the `after` of the next page.
        next_after: Option<String>,
    },
    /// `admin.resources`: one page of resources held or waited for.
    Resources {
        /// Resources in (kind, name) order, with their counts.
        resources: Vec<ResourceInfo>,
        /// Present when more follow: the `after` (`kind/name`) of the next page.
        next_after: Option<String>,
    },
    /// `airspace.query`: one page of the held reservations that conflict.
    Conflicts {
        /// Reservations in name order, each with its conflicting shapes; the node leaves out
        /// other agents' `agent` and `lease` for the `agent` role.
        conflicts: Vec<ConflictInfo>,
        /// Present when more follow: the `after` (a name) of the next page.
        next_after: Option<String>,
    },
    /// `admin.agent.add`, `admin.agent.rotate`: the account as it now is. The node answers
    /// the secret only when `secret_hash` is the hash it made for this request, so a same-id
    /// retry (answered from the dedup memory) never gets a secret it cannot know.
    Account {
        /// The account's agent id.
        agent: Text,
        /// Its role.
        role: Role,
        /// The hash the entry stored (never sent on the wire).
        secret_hash: String,
    },
    /// `admin.agent.list`: one page of accounts.
    Accounts {
        /// Accounts in name order, without hashes.
        accounts: Vec<AccountInfo>,
        /// Present when more accounts follow: the `after` of the next page.
        next_after: Option<String>,
    },
    /// `kv.put`: its revision and, when asked, the key before it.
    KvPut(KvPutDone),
    /// `kv.get`: a page of keys with the machine's revision.
    KvPage(KvPage),
    /// `kv.delete`: its revision and how many keys went.
    KvDeleted(KvDeleted),
    /// `kv.txn`: its revision, which branch ran and that branch's results.
    KvTxn(KvTxnDone),
    /// `election.leader`: who leads, or `None` when nobody does.
    Leader {
        /// The leader's agent, value and token.
        leader: Option<LeaderInfo>,
    },
    /// `barrier.enter`: the round filled; `barrier.leave`: every member of the round left.
    BarrierPassed {
        /// The round's generation (`barrier.rs`).
        generation: u64,
    },
}

/// What an op's handler decided, a write's or a read's: `Err` is a refusal, with nothing
/// changed, so a check's refusal returns with `?`; `Ok` is any other answer. `apply` and
/// `query` answer either.
pub(crate) type Decision = Result<Reply, Reply>;

impl Reply {
    /// A refusal with `code` and a message for a human.
    pub fn refused(code: ErrorCode, message: impl Into<String>) -> Reply {
        Reply::Refused {
            code,
            message: message.into(),
        }
    }
}
