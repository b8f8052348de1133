//! Txns: compares (missing keys, byte order, holders), the branch that runs, results, one
//! revision for all events, all or nothing, and the bounds.

use hivekeeper_protocol::ResourceKind;

use crate::kv_test::{
    CLIENT, delete_event, history, key, kv, leased, no_holds, prefix, put, put_event, refused,
    space_with,
};
use crate::{
    Compare, CompareOp, CompareTarget, Deleted, Get, Holder, KeySpace, KvError, KvEvent, KvLimits,
    LeaseId, Put, PutResult, RangePage, TXN_COMPARES_MAX, TXN_OPS_MAX, Txn, TxnOp, TxnOutcome,
    TxnResult,
};

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
            TxnOp::Delete(key("old").into()),
            TxnOp::Get(Get::new(prefix(""), None, Some(10))),
        ],
        failure: vec![TxnOp::Delete(key("counter").into())],
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
        failure: vec![TxnOp::Get(Get::new(key("counter"), None, Some(1)))],
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
            TxnOp::Delete(key("b").into()),
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
        (
            CompareOp::Ne,
            CompareTarget::Lease(Some(LeaseId(1).to_string())),
            true,
        ),
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
        (
            CompareOp::Eq,
            CompareTarget::Lease(Some(LeaseId(5).to_string())),
            true,
        ),
        (CompareOp::Gt, CompareTarget::Lease(None), true),
        (
            CompareOp::Lt,
            CompareTarget::Lease(Some(LeaseId(6).to_string())),
            true,
        ),
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
            .map(|_| TxnOp::Get(Get::new(key("k"), None, Some(1))))
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
    let covered = txn(vec![
        TxnOp::Put(put("a", "1")),
        TxnOp::Delete(prefix("").into()),
    ]);
    assert_eq!(refused(space.txn(1, CLIENT, covered, &no_holds)), duplicate);
    let deletes = txn(vec![
        TxnOp::Delete(prefix("a").into()),
        TxnOp::Delete(key("ab").into()),
    ]);
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

/// Gets whose keys would pass one answer's bound make the txn refused whole: its put is not
/// written and the revision does not move, rather than a commit whose answer cannot reach the
/// client.
#[test]
fn a_txn_whose_results_would_not_fit_one_answer_is_refused_whole() {
    let value = "v".repeat(8_000);
    let names: Vec<String> = (0..8).map(|i| format!("big/{i}")).collect();
    let keys: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), value.as_str())).collect();
    let mut space = space_with(KvLimits::default(), &keys);
    let revision = space.revision();
    let gets = names
        .iter()
        .map(|name| TxnOp::Get(Get::new(key(name), None, None)));
    let txn = Txn {
        success: std::iter::once(TxnOp::Put(put("marker", "x")))
            .chain(gets)
            .collect(),
        ..Txn::default()
    };
    let refusal = refused(space.txn(revision + 1, CLIENT, txn, &no_holds));
    assert!(
        matches!(refusal, KvError::TxnResultsTooLarge { bytes, max } if bytes > max),
        "{refusal:?}"
    );
    assert!(space.get("marker").is_none(), "nothing written");
    assert_eq!(space.revision(), revision);
    space.check_invariants().expect("invariants hold");
}
