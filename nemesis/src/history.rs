//! What the workloads saw: one record per hold, per fenced write, per lease, per request, per
//! key operation and per election, barrier, hold-time or read-write lock request, each
//! watcher's streams, with the times the client invoked it and saw it complete; and when the
//! clock faults were.
//!
//! Every time is microseconds on the nemesis's own monotonic clock since the run began
//! ([`Timeline::now_us`]); the report adds the wall-clock time of that start, so a record can
//! be matched with the members' logs. Records are appended by the workload tasks under one
//! mutex (a few thousand per minute: no contention worth a lock-free log).

use std::sync::{Arc, Mutex, PoisonError};

use hivekeeper_checker::barrier::BarrierOp;
use hivekeeper_checker::election::ElectionOp;
use hivekeeper_checker::hold_time::{ClockFault, LockOp, Lost};
use hivekeeper_checker::recipe::LeaseAlive;
use hivekeeper_checker::rw_lock::RwOp;
use hivekeeper_checker::watch::Watcher;
use serde::Serialize;
use tokio::time::Instant;

use crate::keys::{FinalRead, KeyOp};

/// The run's clock.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    start: Instant,
}

impl Timeline {
    /// A clock starting now.
    pub fn start() -> Timeline {
        Timeline {
            start: Instant::now(),
        }
    }

    /// Microseconds since the start.
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// How a hold ended, as its holder saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HoldEnd {
    /// The release was acknowledged: the hold ended somewhere in `[invoke_us, complete_us]`.
    Released {
        /// When the release was sent.
        invoke_us: u64,
        /// When its acknowledgement arrived.
        complete_us: u64,
    },
    /// The service said the hold was already gone (`not_holder`, `lease_not_found`, the session
    /// expired): it ended at some point after the grant, at the latest by `observed_us`.
    Lost {
        /// When the holder learnt it.
        observed_us: u64,
    },
    /// No answer (a timeout, the run ended): the hold ended at some point after
    /// `invoke_us`, if at all before the end of the run.
    Unknown {
        /// When the holder last tried to release it (or the run's end).
        invoke_us: u64,
    },
}

/// One grant of a lock or a semaphore permit.
#[derive(Debug, Clone, Serialize)]
pub struct Hold {
    /// The lock or semaphore.
    pub resource: String,
    /// The holder (agent id).
    pub agent: String,
    /// The fencing token of the grant.
    pub token: u64,
    /// When the acquire was sent.
    pub invoke_us: u64,
    /// When the grant arrived.
    pub granted_us: u64,
    /// How and when it ended.
    pub end: HoldEnd,
}

/// One write to the fenced store, or a refused read (which ends the increment).
#[derive(Debug, Clone, Serialize)]
pub struct Write {
    /// The register (named like its lock).
    pub register: String,
    /// The writer.
    pub agent: String,
    /// The token it read and wrote with.
    pub token: u64,
    /// The value it had read under the same grant; `None` when the read itself was refused.
    pub read_value: Option<u64>,
    /// The value the store held when the write arrived.
    pub current_value: u64,
    /// Whether the store took it (its token was above every token it had seen).
    pub accepted: bool,
    /// When it arrived.
    pub at_us: u64,
}

/// One lease of the lease workload: the keepalives it got acknowledged and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseLife {
    /// The agent.
    pub agent: String,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Send time of the last keepalive (or the grant) the service acknowledged.
    pub last_ack_invoke_us: u64,
    /// When the client learnt the lease was gone (`lease_not_found`), if it did.
    pub ended_observed_us: Option<u64>,
}

/// One acquire as a client waited for it, whatever its outcome: the availability figures.
#[derive(Debug, Clone, Serialize)]
pub struct Wait {
    /// The client.
    pub agent: String,
    /// The member it was connected to when it sent the request (`None`: reconnecting, or not
    /// known). Not its home: a client that failed over stays where it went.
    pub member: Option<usize>,
    /// When it was sent.
    pub invoke_us: u64,
    /// When the client had its answer (a grant or an error).
    pub complete_us: u64,
    /// `granted`, or the error's code or kind.
    pub outcome: String,
    /// The error's full text, for outcomes a well-formed request should never get
    /// (`bad_request`, `internal`, `other`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One ask of a sentinel (a raw client pinned to one member) and its answer.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// The member asked (0-based, n1 first).
    pub member: usize,
    /// When the ask was sent (or found the link down).
    pub invoke_us: u64,
    /// When its answer arrived, or the ask gave up.
    pub complete_us: u64,
    /// `ok`, the error's code (`unavailable`, ...), `timeout` (no answer within 1 s) or
    /// `disconnected` (no link to the member: not sent).
    pub outcome: String,
}

/// One `inspect` of the semaphore: its queue, head first, as the service showed it at some
/// point between `invoke_us` and `complete_us` (a linearizable read).
#[derive(Debug, Clone, Serialize)]
pub struct QueueView {
    /// When the inspect was sent.
    pub invoke_us: u64,
    /// When its answer arrived.
    pub complete_us: u64,
    /// The waiting agents, head first.
    pub waiters: Vec<String>,
}

/// Everything recorded in one run.
#[derive(Debug, Default, Serialize)]
pub struct History {
    /// Holds of the mutex workload (the fenced register's locks).
    pub lock_holds: Vec<Hold>,
    /// Holds of the semaphore workload.
    pub sem_holds: Vec<Hold>,
    /// Writes to the fenced store.
    pub writes: Vec<Write>,
    /// Leases of the lease workload.
    pub leases: Vec<LeaseLife>,
    /// Every acquire's wait.
    pub waits: Vec<Wait>,
    /// The semaphore's queue, seen by an observer every 100 ms.
    pub queue_views: Vec<QueueView>,
    /// Every sentinel's asks and their answers.
    pub sentinel: Vec<Answer>,
    /// Every operation of the keys workload.
    pub key_ops: Vec<KeyOp>,
    /// The linearizable read of the keys after the keys workload stopped.
    pub final_read: Option<FinalRead>,
    /// The watch workload's watchers and their streams.
    pub watchers: Vec<Watcher>,
    /// Every request of the election workload and its observer.
    pub election_ops: Vec<ElectionOp>,
    /// Every request of the barrier workload.
    pub barrier_ops: Vec<BarrierOp>,
    /// Acknowledged keepalives of the election and barrier agents' leases, sent after a
    /// refusal that said the lease held nothing any more.
    pub leases_alive: Vec<LeaseAlive>,
    /// Election, barrier, hold-time and read-write lock requests answered in a way a well-formed request never
    /// should (`bad_request`, `internal`, an unreadable answer), described.
    pub recipe_errors: Vec<String>,
    /// Every request of the hold-time workload (lock-delay and max-hold).
    pub hold_time_ops: Vec<LockOp>,
    /// The `lock.lost` events the hold-time agents were told.
    pub lost_events: Vec<Lost>,
    /// Every request of the read-write lock workload, and its leases' lapses and ends.
    pub rw_lock_ops: Vec<RwOp>,
    /// The `lock.lost` events the read-write lock agents were told.
    pub rw_lock_lost: Vec<Lost>,
    /// The spans in which a clock fault may have moved the service's clock (from each clock
    /// fault's injection until a second after the cluster had recovered from it).
    pub clock_faults: Vec<ClockFault>,
}

/// The history, shared by the workload tasks.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<History>>,
}

impl Recorder {
    /// Appends under the lock (a panicked workload task leaves the records it made usable).
    pub fn with<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The records, once every workload stopped.
    pub fn take(&self) -> History {
        self.with(std::mem::take)
    }
}
