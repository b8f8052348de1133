//! # hivekeeper-state-machine: the coordination state machine
//!
//! Every lease, lock, permit and reservation decision of Hivekeeper is made here, by one pure,
//! deterministic machine that every Raft replica applies in log order. The node
//! (`hivekeeper-coordinator`) carries bytes and time around it and never decides.
//!
//! Pure by construction, not by convention: this crate depends on data types (the protocol's
//! error codes, resource kinds and inspect rows), serde, a hasher, `libm` and `thiserror`,
//! nothing else, so Cargo refuses a tokio, openraft or metrics import here. No clock, no
//! randomness, no I/O: time enters only through [`LogMeta::now_ms`], stamped by the leader into
//! each entry; identity (lease ids, fencing tokens, queue order) comes from [`LogMeta::index`].
//! Two replicas fed the same log end in the same state, byte for byte
//! ([`StateMachine::snapshot`]).
//!
//! ```text
//!  node: wire Request (hivekeeper_protocol::Op) ─┬─▶ Command::Request (writes, through the log)
//!                                                └─▶ query(&Op)      (reads, read-index first)
//!
//!  apply(meta, Command::Request { agent, request: AgentRequest })
//!    ├─ invalid fields ─▶ Reply::Refused { bad_request } (the wire decoder's checks, again)
//!    ├─ retry of a known request id ─▶ dedup: the first outcome, no second queue slot
//!    └─ Op ─▶ lease / lock / semaphore / waypoint / election / barrier / account / kv
//!                    ├─ grant now ─▶ Reply::Granted { token }          + Event::Granted
//!                    ├─ queue     ─▶ Reply::Queued                     + Event::Queued
//!                    │              later, from the entry that grants it, times it out or ends
//!                    │              its lease: Event::Respond { key, .. } (its queue exit)
//!                    └─ refuse    ─▶ Reply::Refused { code, message } (state unchanged)
//!  apply(meta, Command::ExpireLeases { term, leases })   leader only; stale terms ignored
//!  apply(meta, Command::ExpireWaits { term })             leader only; ends the waits whose
//!                                                         deadline_ms (queued at now + wait_ms)
//!                                                         has passed on the machine's clock
//!  apply(meta, Command::ExpireReservations { term })      leader only; ends the reservations
//!                                                         whose window (a route: its last
//!                                                         volume's) end or vacate deadline
//!                                                         (preempted) has passed
//!  apply(meta, Command::ExpireHoldTimes { term })        leader only; ends the holds whose
//!                                                         max_hold_ms ran out and the
//!                                                         lock-delays that passed
//!  apply(meta, Command::CancelWait { agent, request_id }) legacy (old logs), applied as before
//!  apply(meta, Command::Configure { limits, kv })         replicated bounds (kv: the key
//!                                                         space's, lowering a history bound
//!                                                         compacts it)
//!  query(agent, &Op)       keepalive check, fence.check, inspect, admin.leases,
//!                          admin.resources, admin.agent.list, airspace.query, kv.get,
//!                          election.leader: no change
//!  snapshot() / restore()  the whole state as JSON bytes (data format 1)
//!        │
//!        ▼
//!  node: (Reply, Vec<Event>) ─▶ the proposer's answer; deferred responses, lost/expired
//!        notices, the lease keeper, metrics (waiters: +1 Queued, -1 Respond)
//! ```
//!
//! # Layout (one file per concept; each opens with its invariants)
//! - `machine.rs`: [`StateMachine`], its `apply` and `query`, dispatching each command and op to
//!   the concept that decides. `command.rs`: [`LogMeta`] and [`Command`], what the log carries.
//!   `reply.rs`: [`Reply`]. `event.rs`: [`Event`], with why a lease or a hold ended.
//!   `error.rs`: [`Error`] and [`InvariantViolation`].
//! - `request.rs`: [`AgentRequest`], a write as the log carries it: the wire's op, plus the
//!   secret's hash for the account ops.
//! - `clock.rs`: the replicated clock, stepped by each entry's stamp (a jumping leader clock
//!   cannot freeze expiry).
//! - `grant.rs`: holds, waiters and fencing tokens, the bookkeeping every kind shares, in the
//!   state every kind shares (`Core`). `waiting.rs`: the pending-wait index, by agent and
//!   request id, through which a retry finds its queue slot.
//! - `fifo.rs`: queues in arrival order, shared by locks, semaphores, waypoints and barriers.
//! - `lease.rs`: grant, keepalive check, revoke, expiry; a lease's end frees everything.
//! - `wait_deadline.rs`: a queued request's `wait_ms` as a replicated deadline, and its expiry.
//! - `resource.rs`: the `Resource` trait every kind implements (fence, inspect, release, take a
//!   hold or a waiter out, settle, count, check), and the one place a kind maps to its state.
//! - `lock/`, `semaphore.rs`, `waypoint/`, `election.rs`, `barrier.rs`: the five resource
//!   kinds. A lock is held exclusive or shared (`lock/mod.rs`), one at a time or several at
//!   once as a multi-lock, acquired in `acquire.rs` and handed over in `handover.rs`. A
//!   waypoint reservation (`reserve.rs`) has a cylinder (`geo.rs`, indexed in space
//!   and time by `grid.rs` and `index.rs`), a time window (`window.rs`, which also ends
//!   windows), or several 4D volumes when it is a route (`route.rs`), and a priority: a higher
//!   one preempts lower holders with a vacate deadline (`preempt.rs`); `query.rs` answers
//!   `airspace.query` from the same index. An election's leader holds it and its candidates
//!   wait, its leader mirrored as the key `$election/{name}`. A barrier passes a round of
//!   members in the entry where the last arrives and ends it in the entry where the last
//!   leaves.
//! - Hold time: `lock_delay.rs` holds back the locks of a lease that expired or was revoked by
//!   an operator, `max_hold.rs` ends a hold at its grant time plus its `max_hold_ms`, and
//!   `hold_time.rs` applies both deadlines (`ExpireHoldTimes`).
//! - `account.rs`: accounts (agent id, role, secret hash) for authentication.
//! - `dedup.rs`: remembered outcomes for retries. `snapshot.rs`: bytes in and out.
//! - `limits.rs`: the replicated bounds. `quota.rs`: the per-agent ones (leases and holds per
//!   agent, waits per lease) and the per-agent counts they need.
//! - `*_test.rs` beside each concept (with `test_support.rs`); `tests/model.rs` (model-based
//!   property test), `tests/format.rs` (format-1 golden bytes), `benches/apply.rs`.
//! - `resources.rs`: `admin.resources`, the paged list of resources (discovery).
//! - `kv.rs`: the key space, keys with revisions and leases (writes in `kv/write.rs`, txns in
//!   `kv/txn.rs`), and its bounded event history for resumable watches (`kv/history.rs`);
//!   bounds and refusals in `kv/limits.rs`; the `kv.*` ops on the machine in `kv/ops.rs`
//!   (revisions from the token counter, leases, holder compares).

/// An [`InvariantViolation`] with a formatted text: `violation!("lease {id} is from the future")`.
macro_rules! violation {
    ($($text:tt)*) => {
        $crate::InvariantViolation(format!($($text)*))
    };
}

mod account;
mod barrier;
mod clock;
mod cluster_version;
mod command;
mod dedup;
mod election;
mod error;
mod event;
mod fifo;
mod grant;
mod hold_time;
mod kv;
mod lease;
mod limits;
mod lock;
mod lock_delay;
mod machine;
mod max_hold;
mod quota;
mod reply;
mod request;
mod resource;
mod resources;
mod semaphore;
mod snapshot;
mod wait_deadline;
mod waiting;
mod waypoint;

#[cfg(test)]
mod account_test;
#[cfg(test)]
mod barrier_test;
#[cfg(test)]
mod clock_test;
#[cfg(test)]
mod cluster_version_test;
#[cfg(test)]
mod dedup_test;
#[cfg(test)]
mod election_test;
#[cfg(test)]
mod kv_test;
#[cfg(test)]
mod lease_test;
#[cfg(test)]
mod limits_test;
#[cfg(test)]
mod lock_delay_test;
#[cfg(test)]
mod lock_hold_time_test;
#[cfg(test)]
mod lock_multi_test;
#[cfg(test)]
mod lock_rw_test;
#[cfg(test)]
mod lock_test;
#[cfg(test)]
mod max_hold_test;
#[cfg(test)]
mod quota_test;
#[cfg(test)]
mod request_test;
#[cfg(test)]
mod resources_test;
#[cfg(test)]
mod semaphore_test;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod wait_deadline_test;
#[cfg(test)]
mod waypoint_preempt_test;
#[cfg(test)]
mod waypoint_query_test;
#[cfg(test)]
mod waypoint_route_test;
#[cfg(test)]
mod waypoint_test;
#[cfg(test)]
mod waypoint_window_test;

use std::sync::Arc;

pub use account::{ACCOUNT_PAGE_MAX, ACCOUNTS_MAX, Account, AccountChange, AccountGrant};
pub use cluster_version::{CLUSTER_VERSION_SUPPORTED, ClusterVersion, admit};
pub use command::{Command, LogMeta};
pub use dedup::IDLE_CLOCK_STEP_MS_MAX;
pub use error::{Error, InvariantViolation};
pub use event::{Event, LeaseEnd, ReleaseReason};
pub use kv::{
    Compacted, Compare, CompareOp, CompareTarget, Cursor, Delete, Deleted, EventKind, Get, Holder,
    KEY_BYTES_MAX_CEILING, KV_LIMITS_DEFAULT, KeySelector, KeySpace, KeyValue, KvError, KvEvent,
    KvLimits, KvLimitsError, Put, PutResult, RESERVED_PREFIX, RangePage, TXN_COMPARES_MAX,
    TXN_OPS_MAX, Txn, TxnOp, TxnOutcome, TxnResult, VALUE_BYTES_MAX_CEILING, WatchPage, Writer,
};
pub use lease::{LEASE_PAGE_MAX, LeaseId};
pub use limits::{Limits, LimitsError};
pub use machine::StateMachine;
use reply::Decision;
pub use reply::Reply;
pub use request::{AgentRequest, InvalidRequest};
pub use resource::ResourceKey;
pub use resources::ResourceQuery;
pub use waiting::WaiterCounts;
pub use waypoint::{
    EARTH_RADIUS_M, M_PER_DEG, PREEMPT_CHAIN_MAX, Window, WindowRefused, areas_conflict,
    bands_overlap, distance_m,
};

use machine::Ctx;

/// Shared, cheaply cloned text (agent ids and resource names): one allocation per request, then
/// reference counts for holds, events and indexes.
pub type Text = Arc<str>;

/// Name-keyed state (locks, semaphores, remembered outcomes): hash maps, because lookups by
/// name are most of an apply, with foldhash (several times cheaper than SipHash on short keys,
/// and seeded per process against collision floods). Nothing iterates one of these to make a
/// decision; the snapshot writes them in key order (`snapshot::sorted`), so replicas agree byte
/// for byte whatever their seeds.
pub type NameMap<V> = std::collections::HashMap<Text, V, foldhash::fast::RandomState>;
