//! The fenced register: a store outside the service, as an application's database would be.
//! Each register is named like the lock that protects it. A holder reads the value with its
//! fencing token, adds one and writes it back with the same token; the store refuses a read or
//! a write whose token is below the highest it has seen for that register, reads included
//! (DESIGN.md §5.4: what fencing is for).
//!
//! Reads are fenced because an unfenced read lets a stale holder (its lease expired while it
//! was paused) write after the next holder read but before that one wrote: the store has not
//! yet seen the higher token, takes the stale write, and the next write loses it. The first
//! nemesis run found exactly that with unfenced reads (3 lost updates in 4,544 writes, each a
//! holder in jeopardy writing late); fencing the read closes it, as a real store must.
//!
//! With a correct service, every accepted write read the value the previous accepted write
//! left (no lost update), and every refused read or write came from a holder whose hold had
//! already ended. The checker verifies both from the [`Write`] records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::history::{Recorder, Timeline, Write};

/// One register's state.
#[derive(Debug, Default, Clone, Copy)]
struct Register {
    value: u64,
    highest_token: u64,
}

/// The store, shared by every writer.
#[derive(Debug, Clone)]
pub struct FencedStore {
    registers: Arc<Mutex<HashMap<String, Register>>>,
    recorder: Recorder,
    timeline: Timeline,
}

impl FencedStore {
    /// An empty store recording into `recorder`.
    pub fn new(recorder: Recorder, timeline: Timeline) -> FencedStore {
        FencedStore {
            registers: Arc::default(),
            recorder,
            timeline,
        }
    }

    /// The registers, under their lock (a panicked workload task leaves them usable).
    fn registers(&self) -> MutexGuard<'_, HashMap<String, Register>> {
        self.registers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The register's value (0 for one never written) for a holder of `token`, or `None` when
    /// a higher token was seen (recorded as a refused write: the increment cannot happen).
    pub fn read(&self, register: &str, agent: &str, token: u64) -> Option<u64> {
        let mut registers = self.registers();
        let entry = registers.entry(register.to_string()).or_default();
        if token >= entry.highest_token {
            entry.highest_token = token;
            return Some(entry.value);
        }
        self.record(register, agent, token, None, entry.value, false);
        None
    }

    /// Writes `read_value + 1` with `token`; whether the store took it.
    pub fn write_increment(
        &self,
        register: &str,
        agent: &str,
        token: u64,
        read_value: u64,
    ) -> bool {
        let mut registers = self.registers();
        let entry = registers.entry(register.to_string()).or_default();
        let current_value = entry.value;
        let accepted = token >= entry.highest_token;
        if accepted {
            entry.highest_token = token;
            entry.value = read_value + 1;
        }
        // Recorded under the store's lock, so the records are in the store's order.
        self.record(
            register,
            agent,
            token,
            Some(read_value),
            current_value,
            accepted,
        );
        accepted
    }

    fn record(
        &self,
        register: &str,
        agent: &str,
        token: u64,
        read_value: Option<u64>,
        current_value: u64,
        accepted: bool,
    ) {
        let write = Write {
            register: register.to_string(),
            agent: agent.to_string(),
            token,
            read_value,
            current_value,
            accepted,
            at_us: self.timeline.now_us(),
        };
        self.recorder.with(|history| history.writes.push(write));
    }

    /// Every register's final value.
    pub fn values(&self) -> HashMap<String, u64> {
        self.registers()
            .iter()
            .map(|(name, r)| (name.clone(), r.value))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_token_is_refused_at_read_and_at_write_and_changes_nothing() {
        let recorder = Recorder::default();
        let store = FencedStore::new(recorder.clone(), Timeline::start());
        // a (token 5) reads; b (token 7) reads; a's late write is refused, b's is taken.
        assert_eq!(store.read("r", "a", 5), Some(0));
        assert_eq!(store.read("r", "b", 7), Some(0));
        assert!(!store.write_increment("r", "a", 5, 0));
        assert!(store.write_increment("r", "b", 7, 0));
        // A read with a lower token is refused too.
        assert_eq!(store.read("r", "c", 6), None);
        assert_eq!(store.read("r", "d", 9), Some(1));
        let accepted: Vec<(bool, Option<u64>)> = recorder
            .take()
            .writes
            .iter()
            .map(|w| (w.accepted, w.read_value))
            .collect();
        assert_eq!(
            accepted,
            vec![(false, Some(0)), (true, Some(0)), (false, None)]
        );
    }
}
