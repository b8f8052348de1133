//! The cluster version (`cluster_version.rs`): raised by its command, never lowered, left out
//! of the snapshot at the initial version, and the gate of ops above it.

use hivekeeper_protocol::{CLUSTER_VERSION_INITIAL, ErrorCode, Op};

use super::cluster_version::admit_needing;
use super::test_support::*;
use super::{CLUSTER_VERSION_SUPPORTED, Command, Error, LogMeta, Reply, StateMachine, admit};

fn raise(version: u32) -> Command {
    Command::RaiseClusterVersion { version }
}

#[test]
fn a_new_machine_is_at_the_initial_version_and_its_snapshot_does_not_say_so() {
    let mut h = Harness::new();
    h.lease("a", 1_000);
    assert_eq!(h.sm.cluster_version(), CLUSTER_VERSION_INITIAL);
    let snapshot = String::from_utf8(h.sm.snapshot()).expect("JSON");
    assert!(!snapshot.contains("cluster_version"), "{snapshot}");
}

#[test]
fn a_raise_raises_and_a_lower_one_changes_nothing() {
    let mut h = Harness::new();
    assert_eq!(h.apply(raise(2)), (Reply::Done, vec![]));
    assert_eq!(h.sm.cluster_version(), 2);
    assert_eq!(h.apply(raise(1)), (Reply::Done, vec![]));
    assert_eq!(h.sm.cluster_version(), 2);
    // The raised version is replicated state: the snapshot carries it, and a restore keeps it.
    let snapshot = h.sm.snapshot();
    assert!(
        String::from_utf8_lossy(&snapshot).contains("\"cluster_version\":2"),
        "{}",
        String::from_utf8_lossy(&snapshot)
    );
    let restored = StateMachine::restore(&snapshot).expect("restores");
    assert_eq!(restored.cluster_version(), 2);
    assert_eq!(restored.snapshot(), snapshot);
}

/// A raise past what this build applies stops the member before anything moves.
#[test]
fn a_raise_past_this_build_is_an_error_that_changes_nothing() {
    let mut h = Harness::new();
    h.lease("a", 1_000);
    let before = h.sm.snapshot();
    let meta = LogMeta {
        index: h.index + 1,
        term: h.term,
        now_ms: h.now_ms + 5,
    };
    let error =
        h.sm.apply(meta, raise(CLUSTER_VERSION_SUPPORTED + 1))
            .expect_err("unknown to this build");
    assert!(matches!(
        error,
        Error::ClusterVersionUnsupported { version, supported }
            if version == CLUSTER_VERSION_SUPPORTED + 1 && supported == CLUSTER_VERSION_SUPPORTED
    ));
    assert_eq!(h.sm.snapshot(), before);
}

/// A snapshot of a cluster past this build's version is refused, not applied on.
#[test]
fn a_snapshot_past_this_build_is_refused() {
    let h = Harness::new();
    let mut snapshot: serde_json::Value = serde_json::from_slice(&h.sm.snapshot()).expect("JSON");
    snapshot["state"]["cluster_version"] = (CLUSTER_VERSION_SUPPORTED + 1).into();
    let bytes = serde_json::to_vec(&snapshot).expect("JSON");
    assert!(matches!(
        StateMachine::restore(&bytes),
        Err(Error::SnapshotInvariant(_))
    ));
}

/// Every op of this build is declared at the initial version: none needs an upgraded cluster
/// yet. An op declared `since = N` is refused below N, naming both versions.
#[test]
fn the_gate_refuses_what_needs_a_higher_version_naming_both() {
    let op = Op::AdminStatus {};
    assert_eq!(op.cluster_version_needed(), CLUSTER_VERSION_INITIAL);
    assert_eq!(admit(&op, CLUSTER_VERSION_INITIAL), Ok(()));
    assert_eq!(admit_needing("kv.lease_put", 2, 2), Ok(()));
    assert_eq!(admit_needing("kv.lease_put", 2, 3), Ok(()));
    let refused = admit_needing("kv.lease_put", 2, 1).expect_err("above the cluster's");
    assert_eq!(
        refusal(&refused),
        (
            ErrorCode::Unavailable,
            "kv.lease_put needs cluster version 2, and the cluster is at version 1 until every \
             member runs a build that supports it"
        )
    );
}
