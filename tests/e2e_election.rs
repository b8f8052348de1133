//! End to end over MQTT in raw JSON, one `hivekeeper serve`: elections (docs/PROTOCOL.md
//! §8.23).
//!
//! - Two agents campaign: the first leads at once with its token, the second waits (no
//!   answer) and is answered with a larger token when the first resigns, in the same entry.
//! - A watch on `$election/`, waiting when the leader resigns, is woken and sees the old
//!   leader's key deleted and the new leader's created at its token; a proclaim is a put of the
//!   same key at a new revision.
//! - A proclaim or resign with a stale token, or by another agent than the leader's, is
//!   `not_holder` and changes nothing; `election.leader` names the leader, `null` when none.
//! - A leader whose lease an operator revokes is told `election.lost`, and the next candidate
//!   leads.

mod common;

use common::{Node, PREFIX, Raw, code};
use serde_json::{Value, json};

/// The token of a grant answering `id`.
fn token(response: &Value, id: &str) -> u64 {
    assert_eq!(response["id"], id, "{response}");
    assert_eq!(response["ok"], true, "{response}");
    response["token"].as_u64().expect("a grant carries a token")
}

/// `(revision, type, create_revision, value)` of each event of a poll's answer.
fn events(answer: &Value) -> Vec<(u64, String, u64, String)> {
    assert_eq!(answer["ok"], true, "{answer}");
    answer["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| {
            assert_eq!(event["kv"]["key"], "$election/hive", "{answer}");
            (
                event["revision"].as_u64().expect("a revision"),
                event["type"].as_str().expect("a type").to_string(),
                event["kv"]["create_revision"].as_u64().expect("a revision"),
                event["kv"]["value"].as_str().expect("a value").to_string(),
            )
        })
        .collect()
}

fn campaign(id: &str, lease: &str, value: &str) -> Value {
    json!({"id": id, "op": "election.campaign", "name": "hive", "lease": lease, "value": value})
}

fn poll(id: &str, after: u64, wait_ms: u64) -> Value {
    json!({"id": id, "op": "watch.poll", "prefix": "$election/", "after": after,
           "wait_ms": wait_ms})
}

/// Waits until `name`'s election has `count` candidates, as `inspect` shows them.
async fn candidates(raw: &mut Raw, count: usize) {
    for attempt in 0..100 {
        let inspected = raw
            .inspect(&format!("i{attempt}"), "election", "hive")
            .await;
        if inspected["waiters"].as_array().map(Vec::len) == Some(count) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the election never had {count} candidates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_elect_hand_over_and_a_watch_follows_the_leader() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut a = Raw::connect(port, "el-a").await;
    let mut b = Raw::connect(port, "el-b").await;
    let mut w = Raw::connect(port, "el-w").await;
    b.subscribe(&format!("{PREFIX}/evt/el-b")).await;

    let none = w
        .call(json!({"id": "l0", "op": "election.leader", "name": "hive"}))
        .await;
    assert_eq!(none, json!({"id": "l0", "ok": true, "leader": null}));
    let start = w
        .call(json!({"id": "g0", "op": "kv.get", "prefix": "$election/"}))
        .await;
    let start = start["revision"].as_u64().expect("a revision");

    // The first campaign leads at once; the second waits.
    let lease_a = a.grant("la", 30_000).await;
    let lease_b = b.grant("lb", 30_000).await;
    let first = token(&a.call(campaign("c1", &lease_a, "10.0.0.1")).await, "c1");
    b.send(campaign("c2", &lease_b, "10.0.0.2").to_string())
        .await;
    candidates(&mut w, 1).await;
    assert_eq!(
        b.try_next(200).await,
        None,
        "a candidate is answered when it leads"
    );
    let leader = w
        .call(json!({"id": "l1", "op": "election.leader", "name": "hive"}))
        .await;
    assert_eq!(
        leader,
        json!({"id": "l1", "ok": true,
               "leader": {"agent": "el-a", "value": "10.0.0.1", "token": first}})
    );

    // The watch sees the first leader's key, created at its token.
    let seen = w.call(poll("w1", start, 0)).await;
    assert_eq!(
        events(&seen),
        vec![(first, "put".into(), first, "10.0.0.1".into())]
    );
    let after_first = seen["next"].as_u64().expect("next");

    // A waiting watch is woken by the resign, which hands over in the same entry.
    w.send(poll("w2", after_first, 10_000).to_string()).await;
    assert_eq!(w.try_next(200).await, None, "nothing changed yet");
    let resigned = a
        .call(json!({"id": "r1", "op": "election.resign", "name": "hive", "token": first}))
        .await;
    assert_eq!(resigned, json!({"id": "r1", "ok": true}));
    let second = token(&b.next(10).await, "c2");
    assert!(second > first, "{second} after {first}");
    let woken = w.next(10).await;
    assert_eq!(woken["id"], "w2", "{woken}");
    assert_eq!(
        events(&woken),
        vec![
            (second - 1, "delete".into(), first, "10.0.0.1".into()),
            (second, "put".into(), second, "10.0.0.2".into()),
        ],
        "the old key goes at a revision of its own, the new leader's is created at its token"
    );

    // Stale and foreign tokens change nothing.
    let stale = a
        .call(
            json!({"id": "p1", "op": "election.proclaim", "name": "hive", "token": first,
                     "value": "10.0.0.1"}),
        )
        .await;
    assert_eq!(code(&stale), Some("not_holder"), "{stale}");
    let foreign = a
        .call(
            json!({"id": "p2", "op": "election.proclaim", "name": "hive", "token": second,
                     "value": "10.0.0.1"}),
        )
        .await;
    assert_eq!(code(&foreign), Some("not_holder"), "{foreign}");
    let stale_resign = a
        .call(json!({"id": "r2", "op": "election.resign", "name": "hive", "token": first}))
        .await;
    assert_eq!(code(&stale_resign), Some("not_holder"), "{stale_resign}");
    let unchanged = w.call(poll("w3", second, 0)).await;
    assert_eq!(events(&unchanged), vec![], "{unchanged}");

    // The leader's proclaim: the same key at a new revision.
    let proclaimed = b
        .call(
            json!({"id": "p3", "op": "election.proclaim", "name": "hive", "token": second,
                     "value": "10.0.0.22"}),
        )
        .await;
    let revision = proclaimed["revision"].as_u64().expect("a revision");
    assert_eq!(
        proclaimed,
        json!({"id": "p3", "ok": true, "revision": revision})
    );
    let put = w.call(poll("w4", second, 0)).await;
    assert_eq!(
        events(&put),
        vec![(revision, "put".into(), second, "10.0.0.22".into())]
    );

    // An operator revokes the leader's lease: it is told, and the next candidate leads.
    let lease_a2 = a.grant("la2", 30_000).await;
    a.send(campaign("c3", &lease_a2, "10.0.0.3").to_string())
        .await;
    candidates(&mut w, 1).await;
    let revoked = w
        .call(json!({"id": "x1", "op": "admin.revoke", "lease": lease_b}))
        .await;
    assert_eq!(revoked, json!({"id": "x1", "ok": true}));
    let third = token(&a.next(10).await, "c3");
    assert!(third > revision);
    let mut told = Vec::new();
    while told.len() < 2 {
        told.push(b.next_event(10).await.1);
    }
    assert!(
        told.contains(&json!({"event": "election.lost", "name": "hive", "token": second})),
        "{told:?}"
    );
    let leader = w
        .call(json!({"id": "l2", "op": "election.leader", "name": "hive"}))
        .await;
    assert_eq!(leader["leader"]["token"], third, "{leader}");
    let key = w
        .call(json!({"id": "g1", "op": "kv.get", "key": "$election/hive"}))
        .await;
    assert_eq!(
        key["kvs"],
        json!([{"key": "$election/hive", "value": "10.0.0.3", "create_revision": third,
                "mod_revision": third, "version": 1}])
    );
}
