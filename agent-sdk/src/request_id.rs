//! Request ids: `{boot}-{n}`, unique per agent across process restarts.
//!
//! The service remembers recent outcomes by `(agent, request id)` and answers a repeated id
//! with the first outcome. So an id must never repeat for a different request, not even after
//! a restart of the agent process under the same agent id: a restarted drone counting from 1
//! again would be answered with its previous life's outcomes. The `boot` part is 64 random
//! bits drawn once per [`crate::Agent`] (from the OS-seeded keys of std's `RandomState`, mixed
//! with the wall clock and the process id); `n` counts up from 1. Ids are 18 to 37 bytes, far
//! below the protocol's 128.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hands out request ids for one agent.
#[derive(Debug)]
pub(crate) struct RequestIds {
    /// 16 hex digits, fixed for this agent's life.
    boot: String,
    /// The next counter value.
    next: AtomicU64,
}

impl RequestIds {
    pub(crate) fn new() -> RequestIds {
        RequestIds {
            boot: format!("{:016x}", boot_nonce()),
            next: AtomicU64::new(1),
        }
    }

    /// A fresh id. Thread-safe; never the same twice for this value.
    pub(crate) fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.boot)
    }
}

/// 64 bits that differ between agent instances with overwhelming probability.
fn boot_nonce() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    let wall_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    hasher.write_u128(wall_ns);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_unique_and_differ_between_instances() {
        let a = RequestIds::new();
        let b = RequestIds::new();
        let first = a.next();
        let second = a.next();
        assert_ne!(first, second);
        assert!(
            first.ends_with("-1") && second.ends_with("-2"),
            "{first} {second}"
        );
        assert_ne!(a.boot, b.boot, "two instances share no id");
        assert!(hivekeeper_protocol::validate::request_id(&first).is_ok());
    }
}
