//! Offline checkers for histories recorded against Hivekeeper's keys and recipes: is what the
//! clients saw possible for a correct, linearizable key-value store, did every watcher get what
//! etcd's watch guarantees promise, did elections and barriers keep their rules, did lock-delay
//! and max-hold hold locks back and end them on time, and did no exclusive holder of a
//! read-write lock share it? The nemesis records a history under faults; these functions judge
//! it. They are pure: no clock but the timestamps in the history, no I/O, no randomness.
//!
//! ```text
//!  nemesis workload ──records──> Vec<Operation> ──linearizability::check──> Verdict
//!                   └─records──> Vec<Event> + Vec<Watcher> ──watch::check──> Vec<Violation>
//! ```
//!
//! # Layout
//! - `linearizability`: the history types (`Operation`, `Input`, `Outcome`, `Reply`), the
//!   per-key register model and the search, `check(&history, &budget) -> Verdict`.
//! - `watch`: the recorded writes and watcher streams (`Event`, `Watcher`, `Stream`, `Batch`),
//!   the guarantees (`Rule`) and `check(&history, &watchers) -> Vec<Violation>`.
//! - `election`, `barrier`: the recipes' records (`ElectionOp`, `BarrierOp`) and their rules
//!   (one leader per name in real time, the token fences; nobody passes a barrier early or is
//!   dropped, rounds in order), each `check(&ops, &alive) -> Vec<Violation<Rule>>`; `recipe`:
//!   what they share (`Answer`, `LeaseAlive`, `Violation`). Their module docs give the rules.
//! - `hold_time`: lock requests on leases with a lock-delay and holds with a max-hold (`LockOp`,
//!   `Lost`) and their rules (no grant while an older holder lives or inside its lock-delay
//!   window, no max-hold ended early, no hold taken from a live lease), sound under clock
//!   faults (`ClockFault` spans excuse the parts measured on the service's clock),
//!   `check(&ops, &lost, &faults) -> Outcome`.
//! - `rw_lock`: read-write lock and multi-lock requests (`RwOp`: acquires in a `Mode`,
//!   downgrades, releases) and their rules (no exclusive holder beside anyone, shared holders
//!   together, a downgraded hold shared from its downgrade, tokens in grant order), sound under
//!   every fault class (no bound on the service's clock), `check(&ops) -> Outcome`.
//!
//! # Linearizability
//! An operation is a put, get, delete or compare-and-set (a txn with one compare, on the value
//! or on the `mod_revision`, and one put) on one key, with the client's call and return times
//! on one clock and the reply, or `Unknown` when the client never learned the outcome. The
//! history is linearizable when some total order of its operations respects real time (an
//! operation that returned before another was called comes first) and replays through the
//! model giving every known reply. An `Unknown` operation has no return time: it took effect
//! once, anywhere after its call, or never.
//!
//! The model is a register per key: its value and `mod_revision`, and a lower bound on the
//! store's one revision counter. A write's recorded revision must exceed every revision placed
//! before it; a read's `mod_revision` must be its value's write revision; a reply revision of an
//! operation that wrote nothing must not be below one placed before it. Revisions are optional
//! per reply: without them only values are checked.
//!
//! Keys are checked one at a time, since a history of independent objects is linearizable
//! exactly when each object's part is (P-compositionality). Within a key the search is Wing and
//! Gong's, with Lowe's just-in-time linearization and Porcupine's cache of (set of operations
//! placed, model state): an operation is placed as soon as it may be, and a configuration met
//! twice is explored once.
//!
//! **Complexity.** Deciding linearizability is NP-complete in general. With the cache, the work
//! on one key is bounded by the number of distinct configurations, which is about `n · 2^c · s`
//! (a set placed is fixed up to the operations pending around its frontier), where
//! `n` is the number of operations, `c` the most operations pending at one instant (an
//! `Unknown` one stays pending to the end) and `s` the model states that reach one set, each
//! step costing `O(n / 64)` for the set. A few thousand operations per key at a concurrency of
//! ten or so take milliseconds; a burst of many concurrent writers, or many `Unknown` writes,
//! grows as `2^c`. `Budget` caps the steps (and optionally the wall time) per key and turns the
//! overrun into `Verdict::Unknown` rather than a hang.
//!
//! # Watch guarantees
//! The history is the committed writes the workload learned of (successful replies and a final
//! read); each watcher is a selector (a key or a prefix) and its streams: the answers it got
//! from a starting cursor on, across reconnects and failovers, until a `compacted` answer ends
//! the stream and the watcher starts a new one from a fresh read. Each answer is a batch of
//! events with an optional bookmark (`progress`). The checks, as etcd names them:
//! - **ordered**: event revisions never decrease within a stream;
//! - **unique**: no (revision, key) reaches a watcher twice, in any of its streams;
//! - **reliable**: every matching write of the history between a stream's start and the cursor
//!   it reached (its last event or bookmark) arrived, no gap;
//! - **atomic**: a revision's matching events (a txn, a lease's keys) come in one answer, all
//!   of them;
//! - **bookmarkable**: a bookmark is never below the cursor reached, and no event at or below
//!   a bookmark arrives after it;
//! - **resumable**: a stream yields only events after its starting cursor, and `compacted` only
//!   while its cursor is below the compacted revision; the other rules hold across the answers
//!   of every member that served the stream;
//! - **consistent**: an event matches the selector, the history's write at that revision and
//!   key, and every other watcher's copy.
//!
//! The watch check is linear: `O(H log H + E + S · H)` for `H` writes, `E` events received and
//! `S` streams (each stream scans the history range it covered once).
//!
//! # Limits
//! Revisions are checked per key, so an anomaly visible only across keys (two keys' writes
//! sharing one revision outside a txn) is not found. Multi-key txns and range reads are outside
//! the linearizability model; watch histories may hold them. A write missing from the watch
//! history cannot be found missing from a watcher.

pub mod barrier;
pub mod election;
pub mod hold_time;
pub mod linearizability;
pub mod recipe;
pub mod rw_lock;
pub mod watch;
