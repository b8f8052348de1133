//! End to end over MQTT in raw JSON, one `hivekeeper serve`: the keys (docs/PROTOCOL.md §8.22).
//!
//! - `kv.put` answers its revision (and `prev_kv` when asked); a same-id retry gets the first
//!   answer and takes no second revision; a leased put needs the sender's live lease
//!   (`lease_not_found`, `forbidden`); a reserved or oversized key is `bad_request`.
//! - `kv.get` of a key and of a prefix, paged in byte order, linearizable and serializable;
//!   `key` with `prefix` is `bad_request`.
//! - `kv.delete` of a prefix counts its keys; revoking a lease deletes its keys.
//! - `kv.txn` runs its success or failure branch; a holder compare is true while the lock's
//!   token holds it; 65 compares are `bad_request`.
//! - Revisions and fencing tokens share one increasing space.
//! - In a cluster, a linearizable `kv.get` on a follower sees a put made through another
//!   member at once; on a member cut off from every other a serializable one still answers,
//!   a linearizable one is `unavailable`.

mod common;

use common::cluster::ProcessCluster;
use common::{Node, Raw, code};
use serde_json::{Value, json};

/// The revision of a successful kv answer.
fn revision(response: &Value) -> u64 {
    assert_eq!(response["ok"], true, "{response}");
    response["revision"]
        .as_u64()
        .unwrap_or_else(|| panic!("a revision: {response}"))
}

/// The `bad_request` message of `response`.
fn bad_request(response: &Value) -> &str {
    assert_eq!(code(response), Some("bad_request"), "{response}");
    response["error"]["message"].as_str().expect("a message")
}

async fn put(raw: &mut Raw, id: &str, key: &str, value: &str) -> u64 {
    let response = raw
        .call(json!({"id": id, "op": "kv.put", "key": key, "value": value}))
        .await;
    let revision = revision(&response);
    assert_eq!(
        response,
        json!({"id": id, "ok": true, "revision": revision})
    );
    revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_put_read_deleted_and_fenced_over_raw_mqtt() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut a = Raw::connect(port, "kv-a").await;
    let mut b = Raw::connect(port, "kv-b").await;

    // kv.put, its prev_kv, and a retry under the same id.
    let first = put(&mut a, "p1", "hive/config", "rate=2").await;
    let replaced = a
        .call(
            json!({"id": "p2", "op": "kv.put", "key": "hive/config", "value": "rate=5",
                     "prev_kv": true}),
        )
        .await;
    let second = revision(&replaced);
    assert!(second > first, "{first} then {second}");
    assert_eq!(
        replaced,
        json!({"id": "p2", "ok": true, "revision": second, "prev_kv": {"key": "hive/config",
            "value": "rate=2", "create_revision": first, "mod_revision": first, "version": 1}})
    );
    let retried = a
        .call(
            json!({"id": "p2", "op": "kv.put", "key": "hive/config", "value": "rate=5",
                     "prev_kv": true}),
        )
        .await;
    assert_eq!(retried, replaced, "a retry gets the first answer");

    // kv.get of one key, linearizable and serializable: the retry took no revision.
    let expected = json!({"key": "hive/config", "value": "rate=5", "create_revision": first,
                          "mod_revision": second, "version": 2});
    for (id, serializable) in [("g1", false), ("g2", true)] {
        let got = b
            .call(json!({"id": id, "op": "kv.get", "key": "hive/config",
                         "serializable": serializable}))
            .await;
        assert_eq!(
            got,
            json!({"id": id, "ok": true, "revision": second, "kvs": [expected]})
        );
    }

    // Leased keys: the lease must be the sender's and alive; revoking it deletes them.
    let lease = a.grant("l1", 10_000).await;
    let leased = |id: &str, key: &str, lease: &str| json!({"id": id, "op": "kv.put", "key": key, "value": "up", "lease": lease});
    let presence = revision(&a.call(leased("p3", "presence/kv-a", &lease)).await);
    assert!(presence > second);
    let unknown = a.call(leased("p4", "presence/x", "00000000000000ff")).await;
    assert_eq!(code(&unknown), Some("lease_not_found"), "{unknown}");
    let foreign = b.call(leased("p5", "presence/kv-b", &lease)).await;
    assert_eq!(code(&foreign), Some("forbidden"), "{foreign}");

    // kv.get of a prefix, paged in byte order.
    put(&mut b, "p6", "presence/kv-b", "up").await;
    let page = b
        .call(json!({"id": "g3", "op": "kv.get", "prefix": "presence/", "limit": 1}))
        .await;
    assert_eq!(page["kvs"][0]["key"], "presence/kv-a", "{page}");
    assert_eq!(page["kvs"][0]["lease"], json!(lease), "{page}");
    assert_eq!(page["next_after"], "presence/kv-a", "{page}");
    let rest = b
        .call(json!({"id": "g4", "op": "kv.get", "prefix": "presence/",
                     "after": "presence/kv-a"}))
        .await;
    assert_eq!(rest["kvs"][0]["key"], "presence/kv-b", "{rest}");
    assert_eq!(rest.get("next_after"), None, "{rest}");

    let revoked = a
        .call(json!({"id": "l2", "op": "lease.revoke", "lease": lease}))
        .await;
    assert_eq!(revoked, json!({"id": "l2", "ok": true}));
    let left = b
        .call(json!({"id": "g5", "op": "kv.get", "prefix": "presence/"}))
        .await;
    let keys: Vec<&str> = left["kvs"]
        .as_array()
        .expect("kvs")
        .iter()
        .map(|kv| kv["key"].as_str().expect("a key"))
        .collect();
    assert_eq!(keys, ["presence/kv-b"], "{left}");

    // kv.delete of a prefix.
    let deleted = b
        .call(json!({"id": "d1", "op": "kv.delete", "prefix": "presence/"}))
        .await;
    let delete_revision = revision(&deleted);
    assert_eq!(
        deleted,
        json!({"id": "d1", "ok": true, "revision": delete_revision, "deleted": 1})
    );

    // kv.txn: a compare on the version picks the branch.
    let txn = |id: &str, version: u64| {
        json!({"id": id, "op": "kv.txn",
               "compare": [{"key": "hive/config", "target": "version", "op": "==",
                            "value": version}],
               "success": [{"put": {"key": "hive/config", "value": "rate=9"}}],
               "failure": [{"get": {"key": "hive/config"}}]})
    };
    let ran = a.call(txn("t1", 2)).await;
    let txn_revision = revision(&ran);
    assert!(txn_revision > delete_revision);
    assert_eq!(
        ran,
        json!({"id": "t1", "ok": true, "revision": txn_revision, "succeeded": true,
               "results": [{"put": {}}]})
    );
    let failed = a.call(txn("t2", 2)).await;
    let failed_revision = revision(&failed);
    assert_eq!(
        failed,
        json!({"id": "t2", "ok": true, "revision": failed_revision, "succeeded": false,
               "results": [{"get": {"kvs": [{"key": "hive/config", "value": "rate=9",
                   "create_revision": first, "mod_revision": txn_revision, "version": 3}]}}]})
    );

    // A write fenced by a lock: true while the token holds it. Tokens and revisions share one
    // increasing space.
    let lock_lease = a.grant("l3", 10_000).await;
    let granted = a
        .call(json!({"id": "a1", "op": "lock.acquire", "name": "mission",
                     "lease": lock_lease}))
        .await;
    let token = granted["token"].as_u64().expect("a token");
    assert!(
        token > failed_revision,
        "token {token} after {failed_revision}"
    );
    let fenced = |id: &str, token: u64| {
        json!({"id": id, "op": "kv.txn",
               "compare": [{"holder": {"kind": "lock", "name": "mission"}, "token": token}],
               "success": [{"put": {"key": "mission/state", "value": "landing"}}]})
    };
    let held = a.call(fenced("t3", token)).await;
    assert_eq!(held["succeeded"], true, "{held}");
    assert!(revision(&held) > token);
    let stale = a.call(fenced("t4", token - 1)).await;
    assert_eq!(stale["succeeded"], false, "{stale}");

    // Bad input: each `bad_request` names its field.
    let reserved = a
        .call(json!({"id": "e1", "op": "kv.put", "key": "$svc/x", "value": "v"}))
        .await;
    assert_eq!(
        bad_request(&reserved),
        "kv.put: `key` \"$svc/x\" is reserved for the service (it starts with `$`): clients \
         may only read it"
    );
    let long = a
        .call(json!({"id": "e2", "op": "kv.put", "key": "k".repeat(513), "value": "v"}))
        .await;
    assert_eq!(
        bad_request(&long),
        "kv.put: `key` is 513 bytes, it must be 1 to 512"
    );
    let both = a
        .call(json!({"id": "e3", "op": "kv.get", "key": "a", "prefix": "a"}))
        .await;
    assert_eq!(
        bad_request(&both),
        "kv.get: give exactly one of `key` and `prefix`"
    );
    let neither = a.call(json!({"id": "e4", "op": "kv.delete"})).await;
    assert_eq!(
        bad_request(&neither),
        "kv.delete: give exactly one of `key` and `prefix`"
    );
    let compare = json!({"key": "a", "target": "version", "op": "==", "value": 0});
    let many = a
        .call(json!({"id": "e5", "op": "kv.txn", "compare": vec![compare; 65]}))
        .await;
    assert_eq!(
        bad_request(&many),
        "kv.txn: `compare` has 65 compares, at most 64 are allowed"
    );
    let twice = a
        .call(json!({"id": "e6", "op": "kv.txn", "success": [
            {"put": {"key": "a", "value": "1"}}, {"put": {"key": "a", "value": "2"}}]}))
        .await;
    assert_eq!(
        bad_request(&twice),
        "kv.txn: txn writes key \"a\" twice in one branch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_reads_keys_linearizably_and_alone_serializably() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let ports = cluster.mqtt_ports();
    let follower = (leader + 1) % ports.len();
    let other = (leader + 2) % ports.len();
    let mut writer = Raw::connect(ports[other], "kv-writer").await;
    let mut reader = Raw::connect(ports[follower], "kv-reader").await;

    let written = put(&mut writer, "w1", "hive/config", "rate=5").await;
    let expected = json!([{"key": "hive/config", "value": "rate=5",
                           "create_revision": written, "mod_revision": written,
                           "version": 1}]);
    let read = reader
        .call(json!({"id": "g1", "op": "kv.get", "key": "hive/config"}))
        .await;
    assert!(revision(&read) >= written, "{read}");
    assert_eq!(
        read["kvs"], expected,
        "a linearizable read sees the put: {read}"
    );

    // A serializable read answers from the reader's own replica, which may still lag the
    // commit (the put needed only the leader and one other member): wait until it has it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let local = reader
            .call(json!({"id": "g0", "op": "kv.get", "key": "hive/config",
                         "serializable": true}))
            .await;
        if local["kvs"] == expected {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the follower's replica never applied the put: {local}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // The reader's member alone: a serializable read still answers from its replica.
    for index in [leader, other] {
        cluster.nodes[index].kill9();
    }
    let alone = reader
        .call(json!({"id": "g2", "op": "kv.get", "key": "hive/config",
                     "serializable": true}))
        .await;
    assert_eq!(alone["kvs"], expected, "{alone}");
    let linearizable = reader
        .call(json!({"id": "g3", "op": "kv.get", "key": "hive/config"}))
        .await;
    assert_eq!(code(&linearizable), Some("unavailable"), "{linearizable}");
}
