//! Key space: each op with its exact answer, state and events; paging; leases ending with their
//! keys; reserved keys; every limit; snapshots; and the helpers the other key-space tests share
//! (`kv/txn_test.rs`, `kv/history_test.rs`, `kv/model_test.rs`).

use hivekeeper_protocol::ResourceKind;

use super::{
    Deleted, EventKind, KeySelector, KeySpace, KeyValue, KvError, KvEvent, KvLimits, LeaseId, Put,
    PutResult, RangePage, Txn, TxnOp, Writer,
};

pub(crate) const CLIENT: Writer = Writer::Client;
pub(crate) const SERVICE: Writer = Writer::Service;

pub(crate) fn put(key: &str, value: &str) -> Put {
    Put {
        key: key.to_string(),
        value: value.to_string(),
        lease: None,
        prev_kv: false,
    }
}

pub(crate) fn leased(key: &str, value: &str, lease: u64) -> Put {
    Put {
        lease: Some(LeaseId(lease).to_string()),
        ..put(key, value)
    }
}

pub(crate) fn kv(key: &str, value: &str, create: u64, modified: u64, version: u64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: value.to_string(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease: None,
    }
}

pub(crate) fn put_event(revision: u64, kv: KeyValue) -> KvEvent {
    KvEvent {
        revision,
        kind: EventKind::Put,
        kv,
    }
}

pub(crate) fn delete_event(revision: u64, kv: KeyValue) -> KvEvent {
    KvEvent {
        revision,
        kind: EventKind::Delete,
        kv,
    }
}

pub(crate) fn key(key: &str) -> KeySelector {
    KeySelector::Key(key.to_string())
}

pub(crate) fn prefix(prefix: &str) -> KeySelector {
    KeySelector::Prefix(prefix.to_string())
}

pub(crate) fn no_holds(_: ResourceKind, _: &str, _: u64) -> bool {
    false
}

/// A key space holding `keys`, put one per revision from 1, with invariants checked.
pub(crate) fn space_with(limits: KvLimits, keys: &[(&str, &str)]) -> KeySpace {
    let mut space = KeySpace::new(limits);
    for (revision, (key, value)) in (1..).zip(keys) {
        space
            .put(revision, SERVICE, put(key, value))
            .expect("within the limits");
    }
    space.check_invariants().expect("invariants hold");
    space
}

/// Every event the history keeps.
pub(crate) fn history(space: &KeySpace) -> Vec<KvEvent> {
    space
        .events_after(space.compact_revision(), &prefix(""), usize::MAX)
        .expect("at the compaction, not before")
        .events
}

/// A panic with the refusal when `result` is not one.
pub(crate) fn refused<T: std::fmt::Debug>(result: Result<T, KvError>) -> KvError {
    result.expect_err("refused")
}

// ----- put and get -------------------------------------------------------------------------

#[test]
fn a_put_creates_a_key_at_its_revision_with_version_one() {
    let mut space = KeySpace::default();
    assert_eq!(
        space.put(7, CLIENT, put("hive/config", "v1")),
        Ok(PutResult { prev_kv: None })
    );
    assert_eq!(
        space.get("hive/config"),
        Some(kv("hive/config", "v1", 7, 7, 1))
    );
    assert_eq!(space.get("hive/other"), None);
    assert_eq!(space.revision(), 7);
    assert_eq!(space.bytes(), 13);
    assert_eq!(
        history(&space),
        vec![put_event(7, kv("hive/config", "v1", 7, 7, 1))]
    );
    space.check_invariants().expect("invariants hold");
}

#[test]
fn a_second_put_keeps_create_revision_and_counts_the_version() {
    let mut space = space_with(KvLimits::default(), &[("k", "one")]);
    assert_eq!(
        space.put(
            5,
            CLIENT,
            Put {
                prev_kv: true,
                ..put("k", "two")
            }
        ),
        Ok(PutResult {
            prev_kv: Some(kv("k", "one", 1, 1, 1))
        })
    );
    assert_eq!(
        space.put(9, CLIENT, put("k", "three")),
        Ok(PutResult { prev_kv: None }),
        "prev_kv only when asked"
    );
    assert_eq!(space.get("k"), Some(kv("k", "three", 1, 9, 3)));
    assert_eq!(space.bytes(), 6);
    space.check_invariants().expect("invariants hold");
}

#[test]
fn prev_kv_of_a_new_key_is_none() {
    let mut space = KeySpace::default();
    let answer = space.put(
        1,
        CLIENT,
        Put {
            prev_kv: true,
            ..put("k", "v")
        },
    );
    assert_eq!(answer, Ok(PutResult { prev_kv: None }));
}

#[test]
fn a_put_replaces_or_removes_the_lease_binding() {
    let mut space = KeySpace::default();
    space.put(1, CLIENT, leased("a", "1", 100)).expect("put");
    space.put(2, CLIENT, leased("b", "1", 100)).expect("put");
    assert_eq!(
        space.lease_keys(LeaseId(100)).collect::<Vec<_>>(),
        ["a", "b"]
    );
    space.put(3, CLIENT, leased("a", "2", 200)).expect("put");
    assert_eq!(space.lease_keys(LeaseId(100)).collect::<Vec<_>>(), ["b"]);
    assert_eq!(space.lease_keys(LeaseId(200)).collect::<Vec<_>>(), ["a"]);
    space.put(4, CLIENT, put("b", "2")).expect("put");
    assert_eq!(space.lease_keys(LeaseId(100)).count(), 0);
    assert_eq!(
        space.get("a").and_then(|kv| kv.lease),
        Some(LeaseId(200).to_string())
    );
    assert_eq!(space.get("b").and_then(|kv| kv.lease), None);
    space.check_invariants().expect("invariants hold");
}

#[test]
fn a_revision_not_after_the_last_is_refused_and_changes_nothing() {
    let mut space = space_with(KvLimits::default(), &[("a", "1"), ("b", "2")]);
    let before = space.clone();
    assert_eq!(
        refused(space.put(2, CLIENT, put("c", "3"))),
        KvError::RevisionNotIncreasing { last: 2, got: 2 }
    );
    assert_eq!(
        refused(space.delete(1, CLIENT, &key("a"))),
        KvError::RevisionNotIncreasing { last: 2, got: 1 }
    );
    assert_eq!(
        refused(space.end_leases(0, &[LeaseId(1)])),
        KvError::RevisionNotIncreasing { last: 2, got: 0 }
    );
    assert_eq!(space, before);
}

#[test]
fn a_refused_put_leaves_the_revision_where_it_was() {
    let mut space = KeySpace::default();
    refused(space.put(4, CLIENT, put("", "v")));
    assert_eq!(space.revision(), 0);
    space.put(3, CLIENT, put("k", "v")).expect("3 is after 0");
}

// ----- range -------------------------------------------------------------------------------

#[test]
fn range_pages_a_prefix_in_byte_order() {
    let keys = [
        ("b", "4"),
        ("ab", "2"),
        ("a", "1"),
        ("abc", "3"),
        ("aZ", "0"),
    ];
    let space = space_with(KvLimits::default(), &keys);
    let page = space.range("a", None, 2);
    assert_eq!(
        page,
        RangePage {
            kvs: vec![kv("a", "1", 3, 3, 1), kv("aZ", "0", 5, 5, 1)],
            next_after: Some("aZ".to_string()),
        },
        "`Z` (0x5a) sorts before `b` (0x62)"
    );
    let page = space.range("a", Some("aZ"), 2);
    assert_eq!(
        page,
        RangePage {
            kvs: vec![kv("ab", "2", 2, 2, 1), kv("abc", "3", 4, 4, 1)],
            next_after: None,
        },
        "exactly `limit` left: no next page"
    );
    assert_eq!(space.range("a", Some("abc"), 2).kvs, vec![]);
    assert_eq!(space.range("c", None, 10).kvs, vec![]);
}

#[test]
fn range_with_after_before_the_prefix_starts_at_the_prefix() {
    let space = space_with(KvLimits::default(), &[("a", "1"), ("b", "2"), ("ba", "3")]);
    let keys = |page: RangePage| page.kvs.into_iter().map(|kv| kv.key).collect::<Vec<_>>();
    assert_eq!(keys(space.range("b", Some("a"), 10)), ["b", "ba"]);
    assert_eq!(keys(space.range("b", Some("b"), 10)), ["ba"]);
    assert_eq!(keys(space.range("", None, 10)), ["a", "b", "ba"]);
}

#[test]
fn range_with_limit_zero_returns_one_key() {
    let space = space_with(KvLimits::default(), &[("a", "1"), ("b", "2")]);
    let page = space.range("", None, 0);
    assert_eq!(page.kvs, vec![kv("a", "1", 1, 1, 1)]);
    assert_eq!(page.next_after, Some("a".to_string()));
}

#[test]
fn range_sorts_multibyte_keys_by_their_bytes() {
    let space = space_with(KvLimits::default(), &[("é", "1"), ("z", "2"), ("Z", "3")]);
    let keys: Vec<String> = space
        .range("", None, 10)
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(keys, ["Z", "z", "é"]);
}

// ----- delete ------------------------------------------------------------------------------

#[test]
fn deleting_a_key_records_its_last_state_in_the_event() {
    let mut space = space_with(KvLimits::default(), &[("a", "1"), ("a", "2")]);
    assert_eq!(
        space.delete(6, CLIENT, &key("a")),
        Ok(Deleted { deleted: 1 })
    );
    assert_eq!(space.get("a"), None);
    assert_eq!(space.bytes(), 0);
    assert_eq!(
        history(&space),
        vec![
            put_event(1, kv("a", "1", 1, 1, 1)),
            put_event(2, kv("a", "2", 1, 2, 2)),
            delete_event(6, kv("a", "2", 1, 2, 2)),
        ]
    );
    space.put(8, CLIENT, put("a", "3")).expect("put");
    assert_eq!(
        space.get("a"),
        Some(kv("a", "3", 8, 8, 1)),
        "a key created again starts over"
    );
    space.check_invariants().expect("invariants hold");
}

#[test]
fn deleting_a_missing_key_deletes_nothing_and_makes_no_event() {
    let mut space = space_with(KvLimits::default(), &[("a", "1")]);
    assert_eq!(
        space.delete(2, CLIENT, &key("b")),
        Ok(Deleted { deleted: 0 })
    );
    assert_eq!(history(&space).len(), 1);
    assert_eq!(space.revision(), 2, "an accepted call records its revision");
}

#[test]
fn a_prefix_delete_removes_every_key_under_it_in_one_revision() {
    let keys = [("ab", "1"), ("a", "2"), ("b", "3"), ("aa", "4")];
    let mut space = space_with(KvLimits::default(), &keys);
    assert_eq!(
        space.delete(10, CLIENT, &prefix("a")),
        Ok(Deleted { deleted: 3 })
    );
    let events: Vec<KvEvent> = history(&space).into_iter().skip(4).collect();
    assert_eq!(
        events,
        vec![
            delete_event(10, kv("a", "2", 2, 2, 1)),
            delete_event(10, kv("aa", "4", 4, 4, 1)),
            delete_event(10, kv("ab", "1", 1, 1, 1)),
        ]
    );
    assert_eq!(space.range("", None, 10).kvs, vec![kv("b", "3", 3, 3, 1)]);
    space.check_invariants().expect("invariants hold");
}

// ----- reserved keys -----------------------------------------------------------------------

#[test]
fn a_client_cannot_write_reserved_keys_but_reads_them() {
    let mut space = KeySpace::default();
    let reserved = |key: &str| KvError::Reserved {
        key: key.to_string(),
    };
    assert_eq!(
        refused(space.put(1, CLIENT, put("$members", "x"))),
        reserved("$members")
    );
    space
        .put(2, SERVICE, put("$members", "x"))
        .expect("the service writes `$` keys");
    assert_eq!(
        refused(space.delete(3, CLIENT, &key("$members"))),
        reserved("$members")
    );
    assert_eq!(
        refused(space.delete(3, CLIENT, &prefix("$"))),
        reserved("$")
    );
    assert_eq!(space.get("$members"), Some(kv("$members", "x", 2, 2, 1)));
    assert_eq!(space.range("$", None, 10).kvs.len(), 1);
    space
        .put(4, CLIENT, put("a$", "ok"))
        .expect("only a leading `$` is reserved");
}

#[test]
fn a_client_prefix_delete_of_everything_spares_reserved_keys() {
    let mut space = space_with(
        KvLimits::default(),
        &[("$svc", "1"), ("a", "2"), ("b", "3")],
    );
    assert_eq!(
        space.delete(4, CLIENT, &prefix("")),
        Ok(Deleted { deleted: 2 })
    );
    assert_eq!(
        space.range("", None, 10).kvs,
        vec![kv("$svc", "1", 1, 1, 1)]
    );
    assert_eq!(
        space.delete(5, SERVICE, &prefix("")),
        Ok(Deleted { deleted: 1 })
    );
    assert_eq!(space.key_count(), 0);
}

#[test]
fn a_client_txn_cannot_write_reserved_keys_in_either_branch() {
    let mut space = KeySpace::default();
    let txn = Txn {
        compare: vec![],
        success: vec![TxnOp::Put(put("a", "1"))],
        failure: vec![TxnOp::Delete(key("$x").into())],
    };
    assert_eq!(
        refused(space.txn(1, CLIENT, txn.clone(), &no_holds)),
        KvError::Reserved {
            key: "$x".to_string()
        }
    );
    assert_eq!(space.key_count(), 0);
    let outcome = space
        .txn(1, SERVICE, txn, &no_holds)
        .expect("the service may");
    assert!(outcome.succeeded);
}

// ----- limits ------------------------------------------------------------------------------

#[test]
fn keys_must_be_one_to_key_bytes_max_long() {
    let mut space = KeySpace::default();
    assert_eq!(
        refused(space.put(1, CLIENT, put("", "v"))),
        KvError::KeyLength { len: 0, max: 512 }
    );
    let long = "k".repeat(513);
    assert_eq!(
        refused(space.put(1, CLIENT, put(&long, "v"))),
        KvError::KeyLength { len: 513, max: 512 }
    );
    assert_eq!(
        refused(space.delete(1, CLIENT, &key(&long))),
        KvError::KeyLength { len: 513, max: 512 }
    );
    assert_eq!(
        refused(space.delete(1, CLIENT, &prefix(&long))),
        KvError::PrefixLength { len: 513, max: 512 }
    );
    let multibyte = "é".repeat(257);
    assert_eq!(
        refused(space.put(1, CLIENT, put(&multibyte, "v"))),
        KvError::KeyLength { len: 514, max: 512 },
        "the bound is in bytes, not characters"
    );
    space
        .put(1, CLIENT, put(&"k".repeat(512), "v"))
        .expect("512 bytes is allowed");
}

#[test]
fn values_are_at_most_value_bytes_max_long() {
    let mut space = KeySpace::default();
    let value = "v".repeat(8 * 1024 + 1);
    assert_eq!(
        refused(space.put(1, CLIENT, put("k", &value))),
        KvError::ValueLength {
            len: 8193,
            max: 8192
        }
    );
    space
        .put(1, CLIENT, put("k", &value[1..]))
        .expect("8 KiB is allowed");
    space
        .put(2, CLIENT, put("e", ""))
        .expect("an empty value is allowed");
}

#[test]
fn keys_max_refuses_a_new_key_but_not_an_update() {
    let limits = KvLimits {
        keys_max: 2,
        ..KvLimits::default()
    };
    let mut space = space_with(limits, &[("a", "1"), ("b", "2")]);
    assert_eq!(
        refused(space.put(3, CLIENT, put("c", "3"))),
        KvError::KeysFull { max: 2 }
    );
    space
        .put(4, CLIENT, put("a", "again"))
        .expect("an update adds no key");
    space.delete(5, CLIENT, &key("b")).expect("delete");
    space.put(6, CLIENT, put("c", "3")).expect("room again");
}

#[test]
fn bytes_max_counts_keys_and_values() {
    let limits = KvLimits {
        bytes_max: 10,
        ..KvLimits::default()
    };
    let mut space = space_with(limits, &[("ab", "cdef")]);
    assert_eq!(
        refused(space.put(2, CLIENT, put("gh", "ijklm"))),
        KvError::BytesFull { bytes: 13, max: 10 }
    );
    space
        .put(3, CLIENT, put("ab", "cdefghij"))
        .expect("10 bytes exactly: the old value is freed");
    assert_eq!(space.bytes(), 10);
    assert_eq!(
        refused(space.put(4, CLIENT, put("ab", "cdefghijk"))),
        KvError::BytesFull { bytes: 11, max: 10 }
    );
}

#[test]
fn keys_per_lease_max_bounds_each_lease() {
    let limits = KvLimits {
        keys_per_lease_max: 2,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, leased("a", "1", 9)).expect("put");
    space.put(2, CLIENT, leased("b", "1", 9)).expect("put");
    assert_eq!(
        refused(space.put(3, CLIENT, leased("c", "1", 9))),
        KvError::LeaseKeysFull {
            lease: LeaseId(9),
            max: 2
        }
    );
    space
        .put(4, CLIENT, leased("a", "2", 9))
        .expect("a key the lease already has");
    space
        .put(5, CLIENT, leased("c", "1", 8))
        .expect("another lease");
    space.check_invariants().expect("invariants hold");
}

#[test]
fn the_default_limits_are_the_documented_ones() {
    let limits = KvLimits::default();
    assert_eq!(limits.keys_max, 1_000_000);
    assert_eq!(limits.bytes_max, 256 * 1024 * 1024);
    assert_eq!(limits.keys_per_lease_max, 1_024);
    assert_eq!(limits.key_bytes_max, 512);
    assert_eq!(limits.value_bytes_max, 8 * 1024);
    assert_eq!(limits.history_events_max, 10_000);
    assert_eq!(limits.history_bytes_max, 16 * 1024 * 1024);
}

// ----- leases ------------------------------------------------------------------------------

#[test]
fn a_lease_end_deletes_its_keys_with_their_events_in_that_revision() {
    let mut space = KeySpace::default();
    space
        .put(1, CLIENT, leased("presence/b", "up", 40))
        .expect("put");
    space
        .put(2, CLIENT, leased("presence/a", "up", 40))
        .expect("put");
    space
        .put(3, CLIENT, leased("presence/c", "up", 41))
        .expect("put");
    space
        .put(4, SERVICE, leased("$owner", "x", 42))
        .expect("put");
    space.put(5, CLIENT, put("config", "1")).expect("put");
    let leased_kv = |key: &str, value: &str, revision: u64, lease: u64| KeyValue {
        lease: Some(LeaseId(lease).to_string()),
        ..kv(key, value, revision, revision, 1)
    };
    let events = space
        .end_leases(9, &[LeaseId(42), LeaseId(40), LeaseId(43)])
        .expect("accepted");
    let expected = vec![
        delete_event(9, leased_kv("$owner", "x", 4, 42)),
        delete_event(9, leased_kv("presence/a", "up", 2, 40)),
        delete_event(9, leased_kv("presence/b", "up", 1, 40)),
    ];
    assert_eq!(events, expected);
    assert_eq!(history(&space)[5..], expected[..]);
    let left: Vec<String> = space
        .range("", None, 10)
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(left, ["config", "presence/c"]);
    assert_eq!(space.lease_keys(LeaseId(40)).count(), 0);
    assert_eq!(space.end_leases(10, &[LeaseId(40)]), Ok(vec![]));
    space.check_invariants().expect("invariants hold");
}

// ----- snapshots and invariants ------------------------------------------------------------

#[test]
fn a_key_space_round_trips_through_json_with_its_history() {
    let limits = KvLimits {
        history_events_max: 4,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, leased("a", "1", 3)).expect("put");
    space.put(2, CLIENT, put("b", "2")).expect("put");
    space.put(3, SERVICE, leased("$c", "3", 3)).expect("put");
    space.put(4, CLIENT, put("b", "22")).expect("put");
    space.delete(5, CLIENT, &key("b")).expect("delete");
    let bytes = serde_json::to_vec(&space).expect("serializes");
    let restored: KeySpace = serde_json::from_slice(&bytes).expect("deserializes");
    assert_eq!(
        restored, space,
        "the lease index and byte counts are rebuilt"
    );
    restored.check_invariants().expect("invariants hold");
    assert_eq!(restored.compact_revision(), 1);
    assert_eq!(
        serde_json::to_vec(&restored).expect("serializes"),
        bytes,
        "the same state gives the same bytes"
    );
    assert_eq!(
        restored.lease_keys(LeaseId(3)).collect::<Vec<_>>(),
        ["$c", "a"]
    );
}

#[test]
fn a_corrupt_key_space_breaks_an_invariant() {
    let space = space_with(KvLimits::default(), &[("a", "1"), ("b", "2")]);
    let json = serde_json::to_string(&space).expect("serializes");
    let future = json.replacen(r#""mod_revision":2"#, r#""mod_revision":9"#, 1);
    let broken: KeySpace = serde_json::from_str(&future).expect("deserializes");
    let violation = broken
        .check_invariants()
        .expect_err("mod_revision after the revision");
    assert!(violation.0.contains("kv invariant 1"), "{violation}");
    let no_event = json.replacen(r#""events":[{"#, r#""events":[],"x":[{"#, 1);
    let broken: KeySpace = serde_json::from_str(&no_event).expect("an unknown field is ignored");
    let violation = broken
        .check_invariants()
        .expect_err("the put events are missing");
    assert!(violation.0.contains("kv invariant 5"), "{violation}");
}
