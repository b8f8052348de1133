//! Key space: each op with its exact answer, state and events; paging; txns and their
//! atomicity; leases ending with their keys; the bounded history and watch pages; reserved
//! keys; every limit; snapshots; and a model test of random ops against a naive map and history.

use hivekeeper_protocol::ResourceKind;

use super::{
    Compacted, Compare, CompareOp, CompareTarget, Deleted, EventKind, Holder, KeySelector,
    KeySpace, KeyValue, KvError, KvEvent, KvLimits, LeaseId, Put, PutResult, RangePage,
    TXN_COMPARES_MAX, TXN_OPS_MAX, Txn, TxnOp, TxnOutcome, TxnResult, WatchPage, Writer,
};

const CLIENT: Writer = Writer::Client;
const SERVICE: Writer = Writer::Service;

fn put(key: &str, value: &str) -> Put {
    Put {
        key: key.to_string(),
        value: value.to_string(),
        lease: None,
        prev_kv: false,
    }
}

fn leased(key: &str, value: &str, lease: u64) -> Put {
    Put {
        lease: Some(LeaseId(lease)),
        ..put(key, value)
    }
}

fn kv(key: &str, value: &str, create: u64, modified: u64, version: u64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: value.to_string(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease: None,
    }
}

fn put_event(revision: u64, kv: KeyValue) -> KvEvent {
    KvEvent {
        revision,
        kind: EventKind::Put,
        kv,
    }
}

fn delete_event(revision: u64, kv: KeyValue) -> KvEvent {
    KvEvent {
        revision,
        kind: EventKind::Delete,
        kv,
    }
}

fn key(key: &str) -> KeySelector {
    KeySelector::Key(key.to_string())
}

fn prefix(prefix: &str) -> KeySelector {
    KeySelector::Prefix(prefix.to_string())
}

fn no_holds(_: ResourceKind, _: &str, _: u64) -> bool {
    false
}

/// A key space holding `keys`, put one per revision from 1, with invariants checked.
fn space_with(limits: KvLimits, keys: &[(&str, &str)]) -> KeySpace {
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
fn history(space: &KeySpace) -> Vec<KvEvent> {
    space
        .events_after(space.compact_revision(), &prefix(""), usize::MAX)
        .expect("at the compaction, not before")
        .events
}

/// A panic with the refusal when `result` is not one.
fn refused<T: std::fmt::Debug>(result: Result<T, KvError>) -> KvError {
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
    assert_eq!(space.get("a").and_then(|kv| kv.lease), Some(LeaseId(200)));
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
        failure: vec![TxnOp::Delete(key("$x"))],
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

// ----- txn ---------------------------------------------------------------------------------

fn compare(key: &str, op: CompareOp, target: CompareTarget) -> Compare {
    Compare::Key {
        key: key.to_string(),
        op,
        target,
    }
}

#[test]
fn a_txn_whose_compares_hold_runs_its_success_branch_in_one_revision() {
    let mut space = space_with(KvLimits::default(), &[("counter", "1"), ("old", "x")]);
    let txn = Txn {
        compare: vec![
            compare("counter", CompareOp::Eq, CompareTarget::Value("1".into())),
            compare("counter", CompareOp::Eq, CompareTarget::Version(1)),
            compare("counter", CompareOp::Lt, CompareTarget::ModRevision(2)),
        ],
        success: vec![
            TxnOp::Put(Put {
                prev_kv: true,
                ..put("counter", "2")
            }),
            TxnOp::Delete(key("old")),
            TxnOp::Get {
                selector: prefix(""),
                after: None,
                limit: 10,
            },
        ],
        failure: vec![TxnOp::Delete(key("counter"))],
    };
    let outcome = space.txn(5, CLIENT, txn, &no_holds).expect("accepted");
    assert_eq!(
        outcome,
        TxnOutcome {
            succeeded: true,
            results: vec![
                TxnResult::Put(PutResult {
                    prev_kv: Some(kv("counter", "1", 1, 1, 1))
                }),
                TxnResult::Delete(Deleted { deleted: 1 }),
                TxnResult::Get(RangePage {
                    kvs: vec![kv("counter", "2", 1, 5, 2)],
                    next_after: None,
                }),
            ],
        },
        "the get sees the branch's earlier writes"
    );
    let events: Vec<KvEvent> = history(&space).into_iter().skip(2).collect();
    assert_eq!(
        events,
        vec![
            put_event(5, kv("counter", "2", 1, 5, 2)),
            delete_event(5, kv("old", "x", 2, 2, 1)),
        ]
    );
    space.check_invariants().expect("invariants hold");
}

#[test]
fn a_txn_whose_compare_fails_runs_its_failure_branch() {
    let mut space = space_with(KvLimits::default(), &[("counter", "1")]);
    let txn = Txn {
        compare: vec![
            compare("counter", CompareOp::Eq, CompareTarget::Value("1".into())),
            compare("counter", CompareOp::Gt, CompareTarget::Version(1)),
        ],
        success: vec![TxnOp::Put(put("counter", "2"))],
        failure: vec![TxnOp::Get {
            selector: key("counter"),
            after: None,
            limit: 1,
        }],
    };
    let outcome = space.txn(2, CLIENT, txn, &no_holds).expect("accepted");
    assert_eq!(
        outcome,
        TxnOutcome {
            succeeded: false,
            results: vec![TxnResult::Get(RangePage {
                kvs: vec![kv("counter", "1", 1, 1, 1)],
                next_after: None,
            })],
        }
    );
    assert_eq!(space.get("counter"), Some(kv("counter", "1", 1, 1, 1)));
    assert_eq!(history(&space).len(), 1);
    assert_eq!(space.revision(), 2);
}

#[test]
fn an_empty_compare_list_holds() {
    let mut space = KeySpace::default();
    let txn = Txn {
        success: vec![TxnOp::Put(put("a", "1"))],
        ..Txn::default()
    };
    let outcome = space.txn(1, CLIENT, txn, &no_holds).expect("accepted");
    assert!(outcome.succeeded);
    assert_eq!(space.get("a"), Some(kv("a", "1", 1, 1, 1)));
}

#[test]
fn a_txn_refused_part_way_undoes_its_earlier_ops() {
    let limits = KvLimits {
        keys_max: 3,
        ..KvLimits::default()
    };
    let mut space = space_with(limits, &[("a", "1"), ("b", "2")]);
    let before = space.clone();
    let txn = Txn {
        compare: vec![],
        success: vec![
            TxnOp::Put(put("a", "changed")),
            TxnOp::Delete(key("b")),
            TxnOp::Put(put("c", "3")),
            TxnOp::Put(put("d", "4")),
            TxnOp::Put(put("e", "5")),
        ],
        failure: vec![],
    };
    assert_eq!(
        refused(space.txn(3, CLIENT, txn, &no_holds)),
        KvError::KeysFull { max: 3 }
    );
    assert_eq!(
        space, before,
        "keys, lease index, bytes, history and revision restored"
    );
    space.check_invariants().expect("invariants hold");
}

#[test]
fn a_refused_txn_restores_lease_bindings() {
    let limits = KvLimits {
        bytes_max: 8,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, leased("a", "1", 7)).expect("put");
    let before = space.clone();
    let txn = Txn {
        success: vec![
            TxnOp::Put(leased("a", "2", 8)),
            TxnOp::Put(leased("b", "2", 8)),
            TxnOp::Put(put("c", "too long")),
        ],
        ..Txn::default()
    };
    assert_eq!(
        refused(space.txn(2, CLIENT, txn, &no_holds)),
        KvError::BytesFull { bytes: 13, max: 8 }
    );
    assert_eq!(space, before);
    assert_eq!(space.lease_keys(LeaseId(7)).collect::<Vec<_>>(), ["a"]);
    assert_eq!(space.lease_keys(LeaseId(8)).count(), 0);
}

#[test]
fn a_missing_key_compares_as_version_zero_and_an_absent_value() {
    let mut space = space_with(KvLimits::default(), &[("present", "v")]);
    let cases = [
        (CompareOp::Eq, CompareTarget::Version(0), true),
        (CompareOp::Lt, CompareTarget::Version(1), true),
        (CompareOp::Eq, CompareTarget::CreateRevision(0), true),
        (CompareOp::Gt, CompareTarget::ModRevision(0), false),
        (CompareOp::Eq, CompareTarget::Lease(None), true),
        (CompareOp::Ne, CompareTarget::Lease(Some(LeaseId(1))), true),
        (CompareOp::Ne, CompareTarget::Value(String::new()), true),
        (CompareOp::Eq, CompareTarget::Value(String::new()), false),
        (CompareOp::Lt, CompareTarget::Value("z".into()), false),
        (CompareOp::Gt, CompareTarget::Value(String::new()), false),
    ];
    for (revision, (op, target, expected)) in (2..).zip(cases) {
        let txn = Txn {
            compare: vec![compare("missing", op, target.clone())],
            ..Txn::default()
        };
        let outcome = space
            .txn(revision, CLIENT, txn, &no_holds)
            .expect("accepted");
        assert_eq!(outcome.succeeded, expected, "missing key {op:?} {target:?}");
    }
}

#[test]
fn values_compare_in_byte_order_and_leases_by_id() {
    let mut space = KeySpace::default();
    space.put(1, CLIENT, leased("k", "b", 5)).expect("put");
    let cases = [
        (CompareOp::Gt, CompareTarget::Value("a".into()), true),
        (CompareOp::Gt, CompareTarget::Value("B".into()), true),
        (CompareOp::Lt, CompareTarget::Value("ba".into()), true),
        (CompareOp::Ne, CompareTarget::Value("b".into()), false),
        (CompareOp::Eq, CompareTarget::Lease(Some(LeaseId(5))), true),
        (CompareOp::Gt, CompareTarget::Lease(None), true),
        (CompareOp::Lt, CompareTarget::Lease(Some(LeaseId(6))), true),
        (CompareOp::Eq, CompareTarget::CreateRevision(1), true),
    ];
    for (revision, (op, target, expected)) in (2..).zip(cases) {
        let txn = Txn {
            compare: vec![compare("k", op, target.clone())],
            ..Txn::default()
        };
        let outcome = space
            .txn(revision, CLIENT, txn, &no_holds)
            .expect("accepted");
        assert_eq!(outcome.succeeded, expected, "{op:?} {target:?}");
    }
}

#[test]
fn a_holder_compare_asks_the_caller() {
    let mut space = KeySpace::default();
    let holds = |kind: ResourceKind, name: &str, token: u64| {
        kind == ResourceKind::Lock && name == "mission" && token == 7 << 16
    };
    let fenced = |token: u64| Txn {
        compare: vec![Compare::Holder {
            holder: Holder {
                kind: ResourceKind::Lock,
                name: "mission".to_string(),
            },
            token,
        }],
        success: vec![TxnOp::Put(put("mission/state", "landing"))],
        failure: vec![],
    };
    let stale = space
        .txn(1, CLIENT, fenced(6 << 16), &holds)
        .expect("accepted");
    assert_eq!(
        stale,
        TxnOutcome {
            succeeded: false,
            results: vec![]
        }
    );
    assert_eq!(space.get("mission/state"), None);
    let held = space
        .txn(2, CLIENT, fenced(7 << 16), &holds)
        .expect("accepted");
    assert!(held.succeeded);
    assert_eq!(
        space.get("mission/state").map(|kv| kv.value),
        Some("landing".to_string())
    );
}

#[test]
fn a_txn_is_bounded_in_compares_and_ops() {
    let mut space = KeySpace::default();
    let compares =
        vec![compare("k", CompareOp::Eq, CompareTarget::Version(0)); TXN_COMPARES_MAX + 1];
    let txn = Txn {
        compare: compares.clone(),
        ..Txn::default()
    };
    assert_eq!(
        refused(space.txn(1, CLIENT, txn, &no_holds)),
        KvError::TxnCompares { count: 65, max: 64 }
    );
    let gets = |count: usize| {
        (0..count)
            .map(|_| TxnOp::Get {
                selector: key("k"),
                after: None,
                limit: 1,
            })
            .collect::<Vec<_>>()
    };
    let txn = Txn {
        failure: gets(TXN_OPS_MAX + 1),
        ..Txn::default()
    };
    assert_eq!(
        refused(space.txn(1, CLIENT, txn, &no_holds)),
        KvError::TxnOps { count: 65, max: 64 },
        "a branch that would not run is bounded too"
    );
    let txn = Txn {
        compare: compares[..TXN_COMPARES_MAX].to_vec(),
        success: gets(TXN_OPS_MAX),
        failure: gets(TXN_OPS_MAX),
    };
    let outcome = space.txn(1, CLIENT, txn, &no_holds).expect("at the bounds");
    assert_eq!(outcome.results.len(), 64);
}

#[test]
fn a_txn_branch_writes_each_key_once() {
    let mut space = KeySpace::default();
    let txn = |ops: Vec<TxnOp>| Txn {
        success: ops,
        ..Txn::default()
    };
    let twice = txn(vec![TxnOp::Put(put("a", "1")), TxnOp::Put(put("a", "2"))]);
    let duplicate = KvError::TxnDuplicateKey {
        key: "a".to_string(),
    };
    assert_eq!(refused(space.txn(1, CLIENT, twice, &no_holds)), duplicate);
    let covered = txn(vec![TxnOp::Put(put("a", "1")), TxnOp::Delete(prefix(""))]);
    assert_eq!(refused(space.txn(1, CLIENT, covered, &no_holds)), duplicate);
    let deletes = txn(vec![TxnOp::Delete(prefix("a")), TxnOp::Delete(key("ab"))]);
    space
        .txn(1, CLIENT, deletes, &no_holds)
        .expect("deletes may overlap");
    let other_branch = Txn {
        success: vec![TxnOp::Put(put("a", "1"))],
        failure: vec![TxnOp::Put(put("a", "2"))],
        ..Txn::default()
    };
    space
        .txn(2, CLIENT, other_branch, &no_holds)
        .expect("one branch runs");
}

#[test]
fn a_txn_checks_every_key_and_value_of_both_branches_first() {
    let mut space = KeySpace::default();
    let txn = Txn {
        compare: vec![compare(
            &"k".repeat(513),
            CompareOp::Eq,
            CompareTarget::Version(0),
        )],
        ..Txn::default()
    };
    assert_eq!(
        refused(space.txn(1, CLIENT, txn, &no_holds)),
        KvError::KeyLength { len: 513, max: 512 }
    );
    let txn = Txn {
        failure: vec![TxnOp::Put(put("k", &"v".repeat(9000)))],
        ..Txn::default()
    };
    assert_eq!(
        refused(space.txn(1, CLIENT, txn, &no_holds)),
        KvError::ValueLength {
            len: 9000,
            max: 8192
        }
    );
}

#[test]
fn a_compare_has_the_wire_shape() {
    let compare = compare("k", CompareOp::Ne, CompareTarget::ModRevision(3));
    let json = serde_json::to_string(&compare).expect("serializes");
    assert_eq!(
        json,
        r#"{"key":"k","op":"!=","target":"mod_revision","value":3}"#
    );
    let back: Compare = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, compare);
    let holder = r#"{"holder":{"kind":"lock","name":"m"},"token":65536}"#;
    let parsed: Compare = serde_json::from_str(holder).expect("deserializes");
    assert_eq!(
        parsed,
        Compare::Holder {
            holder: Holder {
                kind: ResourceKind::Lock,
                name: "m".to_string()
            },
            token: 65536
        }
    );
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
        lease: Some(LeaseId(lease)),
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

// ----- history and watch pages -------------------------------------------------------------

/// Revisions 1 to 4: `a` (1), `b/1` and `b/2` by txn (2), `a` again (3), `b/1` deleted (4).
fn watched() -> KeySpace {
    let mut space = KeySpace::default();
    space.put(1, CLIENT, put("a", "1")).expect("put");
    let txn = Txn {
        success: vec![TxnOp::Put(put("b/1", "x")), TxnOp::Put(put("b/2", "y"))],
        ..Txn::default()
    };
    space.txn(2, CLIENT, txn, &no_holds).expect("txn");
    space.put(3, CLIENT, put("a", "2")).expect("put");
    space.delete(4, CLIENT, &key("b/1")).expect("delete");
    space
}

#[test]
fn a_watch_page_holds_the_matching_events_after_the_cursor() {
    let space = watched();
    assert_eq!(
        space.events_after(1, &key("a"), 10),
        Ok(WatchPage {
            events: vec![put_event(3, kv("a", "2", 1, 3, 2))],
            next: 4,
            progress: Some(4),
        }),
        "nothing else matched up to 4: the cursor moves to it"
    );
    assert_eq!(
        space.events_after(0, &prefix("b/"), 10),
        Ok(WatchPage {
            events: vec![
                put_event(2, kv("b/1", "x", 2, 2, 1)),
                put_event(2, kv("b/2", "y", 2, 2, 1)),
                delete_event(4, kv("b/1", "x", 2, 2, 1)),
            ],
            next: 4,
            progress: Some(4),
        })
    );
}

#[test]
fn an_idle_watch_gets_progress_and_no_events() {
    let space = watched();
    let page = space.events_after(4, &prefix(""), 10);
    assert_eq!(
        page,
        Ok(WatchPage {
            events: vec![],
            next: 4,
            progress: Some(4)
        })
    );
    let page = space.events_after(0, &key("nothing"), 10);
    assert_eq!(
        page,
        Ok(WatchPage {
            events: vec![],
            next: 4,
            progress: Some(4)
        })
    );
}

#[test]
fn a_cursor_ahead_of_the_key_space_never_goes_backwards() {
    let space = watched();
    let page = space.events_after(9, &prefix(""), 10);
    assert_eq!(
        page,
        Ok(WatchPage {
            events: vec![],
            next: 9,
            progress: Some(9)
        })
    );
}

#[test]
fn a_full_page_stops_between_revisions_and_says_where() {
    let space = watched();
    let first = space.events_after(0, &prefix(""), 2).expect("page");
    assert_eq!(
        first,
        WatchPage {
            events: vec![put_event(1, kv("a", "1", 1, 1, 1))],
            next: 1,
            progress: None,
        },
        "revision 2's two events do not fit beside revision 1's: they wait for the next page"
    );
    let second = space
        .events_after(first.next, &prefix(""), 2)
        .expect("page");
    assert_eq!(
        second,
        WatchPage {
            events: vec![
                put_event(2, kv("b/1", "x", 2, 2, 1)),
                put_event(2, kv("b/2", "y", 2, 2, 1)),
            ],
            next: 2,
            progress: None,
        }
    );
    let third = space
        .events_after(second.next, &prefix(""), 2)
        .expect("page");
    assert_eq!(
        third,
        WatchPage {
            events: vec![
                put_event(3, kv("a", "2", 1, 3, 2)),
                delete_event(4, kv("b/1", "x", 2, 2, 1)),
            ],
            next: 4,
            progress: Some(4),
        },
        "a page that reaches the end is a bookmark too"
    );
}

#[test]
fn a_revision_larger_than_max_events_comes_whole() {
    let space = watched();
    let page = space.events_after(1, &prefix(""), 1).expect("page");
    assert_eq!(page.events.len(), 2);
    assert!(page.events.iter().all(|event| event.revision == 2));
    assert_eq!((page.next, page.progress), (2, None));
    let page = space.events_after(1, &prefix(""), 0).expect("page");
    assert_eq!(
        page.events.len(),
        2,
        "even with max_events 0 a page makes progress"
    );
}

#[test]
fn only_the_matching_events_of_a_revision_count_against_max_events() {
    let space = watched();
    let page = space.events_after(1, &key("b/2"), 1).expect("page");
    assert_eq!(
        page,
        WatchPage {
            events: vec![put_event(2, kv("b/2", "y", 2, 2, 1))],
            next: 4,
            progress: Some(4),
        }
    );
}

#[test]
fn the_history_drops_the_oldest_whole_revisions_past_history_events_max() {
    let limits = KvLimits {
        history_events_max: 3,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, put("a", "1")).expect("put");
    let txn = Txn {
        success: vec![TxnOp::Put(put("b", "1")), TxnOp::Put(put("c", "1"))],
        ..Txn::default()
    };
    space.txn(2, CLIENT, txn, &no_holds).expect("txn");
    assert_eq!((space.history_len(), space.compact_revision()), (3, 0));
    space.put(3, CLIENT, put("a", "2")).expect("put");
    assert_eq!(
        space.compact_revision(),
        1,
        "revision 1 alone is dropped: 3 events left"
    );
    space.put(4, CLIENT, put("a", "3")).expect("put");
    assert_eq!(
        space.compact_revision(),
        2,
        "revision 2's two events go together, never one of them"
    );
    assert_eq!(
        history(&space)
            .iter()
            .map(|event| event.revision)
            .collect::<Vec<_>>(),
        [3, 4]
    );
    assert_eq!(
        space.events_after(1, &prefix(""), 10),
        Err(Compacted {
            compact_revision: 2
        })
    );
    let page = space
        .events_after(2, &prefix(""), 10)
        .expect("at the compaction is served");
    assert_eq!(page.events.len(), 2);
    space.check_invariants().expect("invariants hold");
}

#[test]
fn the_history_is_bounded_in_bytes() {
    let limits = KvLimits {
        history_bytes_max: 10,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, put("a", "1234")).expect("put");
    space.put(2, CLIENT, put("b", "1234")).expect("put");
    assert_eq!(space.compact_revision(), 0);
    space.put(3, CLIENT, put("c", "1")).expect("put");
    assert_eq!(space.compact_revision(), 1);
    assert_eq!(space.history_len(), 2);
    space.check_invariants().expect("invariants hold");
}

#[test]
fn a_revision_over_the_bounds_alone_is_compacted_whole() {
    let limits = KvLimits {
        history_events_max: 2,
        ..KvLimits::default()
    };
    let mut space = space_with(limits, &[("a", "1"), ("b", "2"), ("c", "3")]);
    assert_eq!(
        space.delete(4, CLIENT, &prefix("")),
        Ok(Deleted { deleted: 3 })
    );
    assert_eq!((space.history_len(), space.compact_revision()), (0, 4));
    assert_eq!(
        space.events_after(3, &prefix(""), 10),
        Err(Compacted {
            compact_revision: 4
        })
    );
    assert_eq!(
        space.events_after(4, &prefix(""), 10),
        Ok(WatchPage {
            events: vec![],
            next: 4,
            progress: Some(4)
        })
    );
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
