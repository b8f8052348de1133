//! A lock's mode: `exclusive` (one holder, the default) or `shared` (any number of holders
//! together, none of them exclusive).
//!
//! `lock.acquire` and `lock.acquire_all` take an optional `mode`; absent means exclusive, and an
//! exclusive request, hold or waiter is written without it (in requests, in the log and in
//! `inspect`), so everything written before shared locks existed keeps its bytes. Queueing is
//! strict FIFO whatever the mode: a queued exclusive request blocks every later shared one, so
//! a writer is never starved by a stream of readers (docs/PROTOCOL.md, §8.4).

use serde::{Deserialize, Serialize};

/// How a lock is held or asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// One holder and nobody beside it: the default.
    #[default]
    Exclusive,
    /// Held together with any other shared holders, never beside an exclusive one.
    Shared,
}

impl LockMode {
    /// Whether this is exclusive, the mode left out of the wire and the log.
    pub fn is_exclusive(&self) -> bool {
        *self == LockMode::Exclusive
    }

    /// The mode as the wire writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }

    /// Whether a hold in this mode may be taken beside holds in mode `other`: only shared
    /// beside shared.
    pub fn admits(self, other: LockMode) -> bool {
        self == LockMode::Shared && other == LockMode::Shared
    }
}
