//! Snapshots: the whole replicated state as bytes, and back.
//!
//! The bytes are JSON of the state with a format number. Deterministic by construction: every
//! map is written in key order (`BTreeMap`s, and the hash maps through [`sorted`]), derived
//! indexes are left out and rebuilt, and floats round-trip exactly (`serde_json`'s
//! `float_roundtrip`). So one state always gives the same bytes, and two replicas fed the same
//! log give equal snapshots — which the model test checks. `tests/format.rs` pins the layout
//! against a snapshot written by data format 1.
//!
//! Invariants:
//! 1. `restore(snapshot(s))` has the same snapshot as `s`, and passes `check_invariants()`.
//! 2. A restored machine keeps its applied index, token counter and clock, so tokens keep
//!    increasing and lease ids are never reused after a restore.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use serde::{Deserialize, Serialize, Serializer};

use super::max_hold::HoldEnds;
use super::quota::Usage;
use super::wait_deadline::WaitDeadlines;
use super::waiting::WaiterCounts;
use super::{Error, StateMachine};

/// Serializes a hash map in key order, so the bytes do not depend on the hasher's seed or on
/// the order of insertion. Hash maps hold the name-keyed state because lookups are what the
/// apply path does most; nothing in the machine iterates them to make a decision.
pub fn sorted<S, K, V, H>(map: &HashMap<K, V, H>, serializer: S) -> Result<S::Ok, S::Error>
where
    S: Serializer,
    K: Ord + Serialize,
    V: Serialize,
    H: BuildHasher,
{
    map.iter().collect::<BTreeMap<_, _>>().serialize(serializer)
}

/// Version of the snapshot layout; a reader refuses any other.
pub const SNAPSHOT_FORMAT: u32 = 1;

#[derive(Serialize)]
struct SnapshotRef<'a> {
    format: u32,
    state: &'a StateMachine,
}

#[derive(Deserialize)]
struct SnapshotOwned {
    format: u32,
    state: StateMachine,
}

impl StateMachine {
    /// The whole state as bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&SnapshotRef {
            format: SNAPSHOT_FORMAT,
            state: self,
        })
        .expect("the state is plain data with string map keys and always serializes")
    }

    /// Reads a snapshot taken by [`StateMachine::snapshot`], rebuilding the derived indexes and
    /// checking every invariant, so a corrupt snapshot is refused rather than applied on.
    pub fn restore(bytes: &[u8]) -> Result<StateMachine, Error> {
        let snapshot: SnapshotOwned = serde_json::from_slice(bytes).map_err(Error::Snapshot)?;
        if snapshot.format != SNAPSHOT_FORMAT {
            return Err(Error::SnapshotFormat {
                found: snapshot.format,
                supported: SNAPSHOT_FORMAT,
            });
        }
        let mut state = snapshot.state;
        state.limits.validate().map_err(Error::SnapshotLimits)?;
        state.core.dedup.set_limits(&state.limits);
        state.waypoints.rebuild_index();
        state.core.deadlines = WaitDeadlines::rebuild(&state.core.waiting);
        state.core.waiters_per_kind = WaiterCounts::rebuild(&state.core.waiting);
        state.core.usage = Usage::rebuild(&state.core.leases);
        state.lock_delays.flag(&mut state.locks);
        let occupancy = state.occupancy().map_err(Error::SnapshotInvariant)?;
        state.core.hold_ends = HoldEnds::rebuild(&occupancy.hold_ends);
        state.core.enforce_dedup(&state.limits);
        state.check_invariants().map_err(Error::SnapshotInvariant)?;
        Ok(state)
    }
}
