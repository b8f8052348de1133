//! The `kv.*` ops through `apply` and `query`: exact replies, the shared revision space, lease
//! ends, holder compares, retries and snapshots.

use hivekeeper_protocol::kv::{
    Compare, CompareOp, CompareTarget, Delete, Deleted, Get, Holder, KeySelector, KeyValue, Put,
    PutResult, RangePage, TxnOp, TxnResult,
};
use hivekeeper_protocol::{ErrorCode, KvDeleted, KvPage, KvPutDone, KvTxnDone, ResourceKind};

use crate::test_support::*;
use crate::test_support::{kv_put as put, refusal as refused};
use crate::{Reply, StateMachine};

/// The revision an entry at `index` gives its first change.
fn rev(index: u64) -> u64 {
    index << 16
}

fn get_key(key: &str) -> Op {
    Op::KvGet {
        key: Some(key.into()),
        prefix: None,
        after: None,
        limit: None,
        serializable: None,
    }
}

fn get_prefix(prefix: &str, after: Option<&str>, limit: Option<u32>) -> Op {
    Op::KvGet {
        key: None,
        prefix: Some(prefix.into()),
        after: after.map(str::to_string),
        limit,
        serializable: None,
    }
}

fn kv(key: &str, value: &str, create: u64, modified: u64, version: u64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease: None,
    }
}

#[test]
fn a_put_answers_its_revision_and_the_previous_key_when_asked() {
    let mut h = Harness::new();
    assert_eq!(
        h.reply("a", put("cfg/a", "1")),
        Reply::KvPut(KvPutDone {
            revision: rev(1),
            prev_kv: None
        })
    );
    let again = Op::KvPut {
        key: "cfg/a".into(),
        value: "2".into(),
        lease: None,
        prev_kv: Some(true),
    };
    assert_eq!(
        h.reply("a", again),
        Reply::KvPut(KvPutDone {
            revision: rev(2),
            prev_kv: Some(kv("cfg/a", "1", rev(1), rev(1), 1)),
        })
    );
    assert_eq!(
        h.sm.query("b", &get_key("cfg/a")),
        Reply::KvPage(KvPage {
            revision: rev(2),
            kvs: vec![kv("cfg/a", "2", rev(1), rev(2), 2)],
            next_after: None,
        })
    );
    assert_eq!(h.sm.revision(), rev(2));
}

#[test]
fn a_prefix_get_pages_in_byte_order_and_a_missing_key_answers_no_kvs() {
    let mut h = Harness::new();
    for key in ["p/b", "p/a", "q", "p/c"] {
        h.reply("a", put(key, "v"));
    }
    assert_eq!(
        h.sm.query("a", &get_prefix("p/", None, Some(2))),
        Reply::KvPage(KvPage {
            revision: rev(4),
            kvs: vec![
                kv("p/a", "v", rev(2), rev(2), 1),
                kv("p/b", "v", rev(1), rev(1), 1)
            ],
            next_after: Some("p/b".into()),
        })
    );
    assert_eq!(
        h.sm.query("a", &get_prefix("p/", Some("p/b"), Some(2))),
        Reply::KvPage(KvPage {
            revision: rev(4),
            kvs: vec![kv("p/c", "v", rev(4), rev(4), 1)],
            next_after: None,
        })
    );
    assert_eq!(
        h.sm.query("a", &get_key("nope")),
        Reply::KvPage(KvPage {
            revision: rev(4),
            kvs: vec![],
            next_after: None,
        })
    );
}

#[test]
fn a_delete_counts_its_keys_and_spares_the_reserved_ones() {
    let mut h = Harness::new();
    h.reply("a", put("p/a", "1"));
    h.reply("a", put("p/b", "1"));
    let prefix = Op::KvDelete {
        key: None,
        prefix: Some("p/".into()),
    };
    assert_eq!(
        h.reply("a", prefix),
        Reply::KvDeleted(KvDeleted {
            revision: rev(3),
            deleted: 2
        })
    );
    let missing = Op::KvDelete {
        key: Some("p/a".into()),
        prefix: None,
    };
    assert_eq!(
        h.reply("a", missing),
        Reply::KvDeleted(KvDeleted {
            revision: rev(4),
            deleted: 0
        })
    );
    let reserved = h.reply("a", put("$svc", "x"));
    let (code, message) = refused(&reserved);
    assert_eq!(code, ErrorCode::BadRequest);
    assert!(message.contains("reserved"), "{message}");
    assert_eq!(h.sm.revision(), rev(4), "a refusal takes no revision");
}

#[test]
fn a_kv_revision_and_a_grant_token_share_one_increasing_space() {
    let mut h = Harness::new();
    let lease = h.lease("a", 5_000);
    let token = Harness::token(&h.reply("a", lock_acquire("l", &lease, None)));
    assert_eq!(token, rev(2));
    let Reply::KvPut(done) = h.reply("a", put("k", "v")) else {
        panic!("a put")
    };
    assert_eq!(done.revision, rev(3));
    assert!(done.revision > token);
    let token = Harness::token(&h.reply("a", lock_acquire("m", &lease, None)));
    assert_eq!(token, rev(4));
}

#[test]
fn a_leased_put_needs_the_agents_live_lease() {
    let mut h = Harness::new();
    let lease = h.lease("a", 5_000);
    let leased = |lease: &str| Op::KvPut {
        key: "presence/a".into(),
        value: "up".into(),
        lease: Some(lease.into()),
        prev_kv: None,
    };
    assert_eq!(
        refused(&h.reply("a", leased("00000000000000ff"))).0,
        ErrorCode::LeaseNotFound
    );
    assert_eq!(
        refused(&h.reply("b", leased(&lease))).0,
        ErrorCode::Forbidden
    );
    assert_eq!(
        h.reply("a", leased(&lease)),
        Reply::KvPut(KvPutDone {
            revision: rev(4),
            prev_kv: None
        })
    );
    let Reply::KvPage(page) = h.sm.query("a", &get_key("presence/a")) else {
        panic!("a page")
    };
    assert_eq!(page.kvs[0].lease.as_deref(), Some(lease.as_str()));
}

#[test]
fn a_lease_end_deletes_its_keys_in_the_same_entry_at_a_fresh_revision() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let leased = |key: &str, lease: &str| Op::KvPut {
        key: key.into(),
        value: "up".into(),
        lease: Some(lease.into()),
        prev_kv: None,
    };
    h.reply("a", leased("presence/a", &a));
    h.reply("b", leased("presence/b", &b));
    h.reply("a", put("config", "kept"));
    h.reply("a", Op::LeaseRevoke { lease: a.clone() });
    let revoked_at = rev(h.index);
    assert_eq!(h.sm.revision(), revoked_at);
    let Reply::KvPage(page) = h.sm.query("a", &get_prefix("", None, None)) else {
        panic!("a page")
    };
    let keys: Vec<&str> = page.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["config", "presence/b"]);
    // An expiry and an operator's revoke end keys the same way.
    h.now_ms += 10_000;
    h.expire(&[&b]);
    let Reply::KvPage(page) = h.sm.query("a", &get_prefix("presence/", None, None)) else {
        panic!("a page")
    };
    assert_eq!(page.kvs, vec![]);
    assert_eq!(h.sm.revision(), rev(h.index));
}

#[test]
fn a_lease_end_without_keys_takes_no_revision() {
    let mut h = Harness::new();
    let lease = h.lease("a", 5_000);
    h.reply("a", Op::LeaseRevoke { lease });
    assert_eq!(h.sm.revision(), 0);
}

#[test]
fn a_txn_runs_its_success_branch_when_every_compare_holds_and_failure_otherwise() {
    let mut h = Harness::new();
    h.reply("a", put("counter", "1"));
    let txn = |version: u64| Op::KvTxn {
        compare: vec![Compare::Key {
            key: "counter".into(),
            op: CompareOp::Eq,
            target: CompareTarget::Version(version),
        }],
        success: vec![
            TxnOp::Put(Put {
                key: "counter".into(),
                value: "2".into(),
                lease: None,
                prev_kv: true,
            }),
            TxnOp::Delete(Delete::from(KeySelector::Key("gone".into()))),
        ],
        failure: vec![TxnOp::Get(Get::new(
            KeySelector::Key("counter".into()),
            None,
            None,
        ))],
    };
    assert_eq!(
        h.reply("a", txn(1)),
        Reply::KvTxn(KvTxnDone {
            revision: rev(2),
            succeeded: true,
            results: vec![
                TxnResult::Put(PutResult {
                    prev_kv: Some(kv("counter", "1", rev(1), rev(1), 1))
                }),
                TxnResult::Delete(Deleted { deleted: 0 }),
            ],
        })
    );
    assert_eq!(
        h.reply("a", txn(1)),
        Reply::KvTxn(KvTxnDone {
            revision: rev(3),
            succeeded: false,
            results: vec![TxnResult::Get(RangePage {
                kvs: vec![kv("counter", "2", rev(1), rev(2), 2)],
                next_after: None,
            })],
        })
    );
}

#[test]
fn a_holder_compare_holds_while_the_token_holds_the_lock() {
    let mut h = Harness::new();
    let lease = h.lease("a", 5_000);
    let token = Harness::token(&h.reply("a", lock_acquire("gw", &lease, None)));
    let fenced = |token: u64| Op::KvTxn {
        compare: vec![Compare::Holder {
            holder: Holder {
                kind: ResourceKind::Lock,
                name: "gw".into(),
            },
            token,
        }],
        success: vec![TxnOp::Put(Put {
            key: "mission".into(),
            value: "go".into(),
            lease: None,
            prev_kv: false,
        })],
        failure: vec![],
    };
    let Reply::KvTxn(done) = h.reply("a", fenced(token)) else {
        panic!("a txn")
    };
    assert!(done.succeeded);
    let Reply::KvTxn(done) = h.reply("a", fenced(token + 1)) else {
        panic!("a txn")
    };
    assert!(!done.succeeded, "another token does not hold the lock");
    h.reply("a", lock_release("gw", &lease));
    let Reply::KvTxn(done) = h.reply("a", fenced(token)) else {
        panic!("a txn")
    };
    assert!(!done.succeeded, "a released token holds nothing");
}

#[test]
fn a_txn_put_under_a_lease_of_another_agent_is_forbidden_and_changes_nothing() {
    let mut h = Harness::new();
    let lease = h.lease("a", 5_000);
    let txn = Op::KvTxn {
        compare: vec![],
        success: vec![],
        failure: vec![TxnOp::Put(Put {
            key: "k".into(),
            value: "v".into(),
            lease: Some(lease),
            prev_kv: false,
        })],
    };
    assert_eq!(refused(&h.reply("b", txn)).0, ErrorCode::Forbidden);
    assert_eq!(h.sm.revision(), 0);
}

#[test]
fn a_full_key_space_is_resource_exhausted() {
    let mut h = Harness::new();
    h.sm.kv = crate::KeySpace::new(crate::KvLimits {
        keys_max: 1,
        ..crate::KvLimits::default()
    });
    h.reply("a", put("a", "1"));
    let full = h.reply("a", put("b", "1"));
    let (code, message) = refused(&full);
    assert_eq!(code, ErrorCode::ResourceExhausted);
    assert_eq!(message, "kv.put: 1 keys exist, the limit");
}

#[test]
fn a_retried_put_gets_its_first_answer_and_no_second_revision() {
    let mut h = Harness::new();
    let first = h.send_as("a", "p1", put("k", "v")).0;
    let again = h.send_as("a", "p1", put("k", "v")).0;
    assert_eq!(again, first);
    assert_eq!(h.sm.revision(), rev(1));
    let Reply::KvPage(page) = h.sm.query("a", &get_key("k")) else {
        panic!("a page")
    };
    assert_eq!(page.kvs[0].version, 1);
}

#[test]
fn keys_survive_a_snapshot_and_an_unused_key_space_is_left_out_of_it() {
    let mut h = Harness::new();
    let before = String::from_utf8(h.sm.snapshot()).expect("json");
    assert!(!before.contains("\"kv\""), "{before}");
    let lease = h.lease("a", 5_000);
    h.reply(
        "a",
        Op::KvPut {
            key: "presence/a".into(),
            value: "up".into(),
            lease: Some(lease.clone()),
            prev_kv: None,
        },
    );
    h.reply("a", put("config", "1"));
    let restored = StateMachine::restore(&h.sm.snapshot()).expect("restores");
    assert_eq!(restored.snapshot(), h.sm.snapshot());
    assert_eq!(restored.revision(), h.sm.revision());
    assert_eq!(
        restored.query("a", &get_prefix("", None, None)),
        h.sm.query("a", &get_prefix("", None, None))
    );
    // The restored machine still deletes the lease's keys when it ends.
    h.sm = restored;
    h.reply("a", Op::LeaseRevoke { lease });
    let Reply::KvPage(page) = h.sm.query("a", &get_prefix("", None, None)) else {
        panic!("a page")
    };
    assert_eq!(page.kvs.len(), 1);
}

/// A watch page's bookmark is the machine's revision, grants included: an idle watcher's
/// cursor moves with the service, and a cursor ahead of the replica is kept, never moved back.
#[test]
fn a_watch_bookmark_is_the_machines_revision_and_never_goes_back() {
    let mut h = Harness::new();
    h.reply("a", put("cfg/a", "1"));
    let lease = h.lease("a", 5_000);
    let granted = Harness::token(&h.reply("a", lock_acquire("gw", &lease, None)));
    assert_eq!(h.sm.revision(), granted, "the grant is the newest revision");
    let cfg = KeySelector::Prefix("cfg/".into());

    let page = h.sm.watch(0, &cfg, 10).expect("kept");
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].revision, rev(1));
    assert_eq!((page.next, page.progress), (granted, Some(granted)));

    let idle = h.sm.watch(granted, &cfg, 10).expect("kept");
    assert!(idle.events.is_empty());
    assert_eq!((idle.next, idle.progress), (granted, Some(granted)));

    let ahead = granted + 1_000;
    let behind = h.sm.watch(ahead, &cfg, 10).expect("kept");
    assert_eq!((behind.next, behind.progress), (ahead, Some(ahead)));
}
