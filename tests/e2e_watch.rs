//! End to end over MQTT in raw JSON: `watch.poll` (docs/PROTOCOL.md §8.22.5).
//!
//! - A poll answers the events after its cursor at once, in revision order, puts and deletes
//!   (a delete carries the key as it was), and moves the cursor past changes of other keys.
//! - With nothing newer it waits `wait_ms` and answers no events and `progress`; a change that
//!   comes while it waits answers it at once.
//! - A txn's events and the keys of an ending lease come whole, even past `max_events`.
//! - A revision too large for one answer (a prefix delete of 700 keys) comes in fragments,
//!   polled on with `after_key`, every key once; a key page stops within one packet.
//! - Bad input is `bad_request`; the 65th pending poll of one agent is `resource_exhausted`; a
//!   cursor below the kept history is `compacted` with `compact_revision`.
//! - The history's bounds are `[kv]` settings: a restart with a lower one makes the node
//!   propose it, which compacts the history at once.
//! - In a cluster a follower serves a poll itself and is woken by a write made elsewhere.

mod common;

use std::time::{Duration, Instant};

use common::cluster::ProcessCluster;
use common::{Node, Raw, code};
use serde_json::{Value, json};

fn poll(id: &str, selector: (&str, &str), after: u64, wait_ms: u64) -> Value {
    let (field, name) = selector;
    json!({"id": id, "op": "watch.poll", field: name, "after": after, "wait_ms": wait_ms})
}

fn revision(response: &Value) -> u64 {
    assert_eq!(response["ok"], true, "{response}");
    response["revision"].as_u64().expect("a revision")
}

async fn put(raw: &mut Raw, id: &str, key: &str, value: &str) -> u64 {
    revision(
        &raw.call(json!({"id": id, "op": "kv.put", "key": key, "value": value}))
            .await,
    )
}

/// `(revision, type, key, value)` of each event of a poll's answer.
fn events(answer: &Value) -> Vec<(u64, String, String, String)> {
    assert_eq!(answer["ok"], true, "{answer}");
    answer["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| {
            (
                event["revision"].as_u64().expect("a revision"),
                event["type"].as_str().expect("a type").to_string(),
                event["kv"]["key"].as_str().expect("a key").to_string(),
                event["kv"]["value"].as_str().expect("a value").to_string(),
            )
        })
        .collect()
}

fn next(answer: &Value) -> u64 {
    answer["next"].as_u64().expect("next")
}

fn event(revision: u64, kind: &str, key: &str, value: &str) -> (u64, String, String, String) {
    (revision, kind.into(), key.into(), value.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_answers_changes_after_its_cursor_and_waits_for_the_next() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut writer = Raw::connect(port, "watch-writer").await;
    let mut watcher = Raw::connect(port, "watch-watcher").await;
    let hive = ("prefix", "hive/");

    let a = put(&mut writer, "p1", "hive/a", "1").await;
    let b = put(&mut writer, "p2", "hive/b", "2").await;
    let other = put(&mut writer, "p3", "other/x", "3").await;

    // Everything after 0, at once; the cursor moves past the other key's change too.
    let first = watcher.call(poll("w1", hive, 0, 0)).await;
    assert_eq!(
        events(&first),
        vec![
            event(a, "put", "hive/a", "1"),
            event(b, "put", "hive/b", "2")
        ]
    );
    assert_eq!(next(&first), other, "{first}");
    assert_eq!(first["progress"], json!(other), "{first}");

    // Nothing newer: it waits wait_ms, then answers a bookmark.
    let started = Instant::now();
    let idle = watcher.call(poll("w2", hive, next(&first), 300)).await;
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    assert_eq!(
        idle,
        json!({"id": "w2", "ok": true, "events": [], "next": other, "progress": other})
    );

    // A change while it waits answers it at once.
    watcher
        .send(poll("w3", hive, other, 20_000).to_string())
        .await;
    assert_eq!(watcher.try_next(300).await, None, "the poll waits");
    let c = put(&mut writer, "p4", "hive/c", "4").await;
    let woken = watcher.next(5).await;
    assert_eq!(woken["id"], "w3", "{woken}");
    assert_eq!(events(&woken), vec![event(c, "put", "hive/c", "4")]);

    // A delete's event carries the key as it was; one key's watch sees only that key.
    let deleted = revision(
        &writer
            .call(json!({"id": "d1", "op": "kv.delete", "key": "hive/a"}))
            .await,
    );
    let one_key = watcher.call(poll("w4", ("key", "hive/a"), c, 0)).await;
    assert_eq!(
        events(&one_key),
        vec![event(deleted, "delete", "hive/a", "1")]
    );
    assert_eq!(one_key["events"][0]["kv"]["mod_revision"], json!(a));

    // A txn's changes are one revision and come whole, past max_events.
    let txn = writer
        .call(json!({"id": "t1", "op": "kv.txn", "success": [
            {"put": {"key": "hive/t1", "value": "x"}},
            {"put": {"key": "hive/t2", "value": "y"}}]}))
        .await;
    let txn = revision(&txn);
    let whole = watcher
        .call(
            json!({"id": "w5", "op": "watch.poll", "prefix": "hive/t", "after": deleted,
                     "max_events": 1, "wait_ms": 0}),
        )
        .await;
    assert_eq!(
        events(&whole),
        vec![
            event(txn, "put", "hive/t1", "x"),
            event(txn, "put", "hive/t2", "y")
        ]
    );

    // The keys of an ending lease go at one revision, with their delete events.
    let lease = writer.grant("l1", 10_000).await;
    for (id, key) in [("p5", "presence/a"), ("p6", "presence/b")] {
        let put = writer
            .call(json!({"id": id, "op": "kv.put", "key": key, "value": "up", "lease": lease}))
            .await;
        revision(&put);
    }
    let before = revision(
        &writer
            .call(json!({"id": "g1", "op": "kv.get", "prefix": "presence/"}))
            .await,
    );
    writer
        .send(json!({"id": "l2", "op": "lease.revoke", "lease": lease}).to_string())
        .await;
    let gone = watcher
        .call(poll("w6", ("prefix", "presence/"), before, 5_000))
        .await;
    let gone = events(&gone);
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert!(
        gone.iter()
            .all(|(revision, kind, ..)| *revision == gone[0].0 && kind == "delete")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_polls_are_refused_and_pending_polls_are_bounded_per_agent() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut watcher = Raw::connect(port, "watch-bounded").await;

    for bad in [
        json!({"id": "b1", "op": "watch.poll", "after": 0}),
        json!({"id": "b2", "op": "watch.poll", "key": "a", "prefix": "a", "after": 0}),
        json!({"id": "b3", "op": "watch.poll", "key": "a", "after": -1}),
        json!({"id": "b4", "op": "watch.poll", "key": "a", "after": 0, "max_events": 0}),
        json!({"id": "b5", "op": "watch.poll", "key": "a", "after": 0, "wait_ms": 60_001}),
        json!({"id": "b6", "op": "watch.poll", "key": "", "after": 0}),
    ] {
        let refused = watcher.call(bad.clone()).await;
        assert_eq!(code(&refused), Some("bad_request"), "{bad} -> {refused}");
    }

    for index in 0..64 {
        let id = format!("p{index}");
        watcher
            .send(poll(&id, ("key", "quiet"), 0, 3_000).to_string())
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = watcher.call(poll("p64", ("key", "quiet"), 0, 0)).await;
    assert_eq!(code(&refused), Some("resource_exhausted"), "{refused}");
    for _ in 0..64 {
        let idle = watcher.next(10).await;
        assert_eq!(idle["events"], json!([]), "{idle}");
    }
    let again = watcher.call(poll("p65", ("key", "quiet"), 0, 0)).await;
    assert_eq!(
        again["ok"], true,
        "the bound frees with the answers: {again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_below_the_kept_history_is_compacted() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut writer = Raw::connect(port, "watch-compactor").await;
    let first = put(&mut writer, "p0", "bulk/first", "0").await;
    // 160 txns of 64 puts: 10,240 events, past the 10,000 the history keeps.
    for round in 0..160 {
        let puts: Vec<Value> = (0..64)
            .map(|key| json!({"put": {"key": format!("bulk/{key:02}"), "value": "v"}}))
            .collect();
        let id = format!("t{round}");
        let answer = writer
            .call(json!({"id": id, "op": "kv.txn", "success": puts}))
            .await;
        revision(&answer);
    }
    let compacted = writer.call(poll("w1", ("prefix", "bulk/"), first, 0)).await;
    assert_eq!(code(&compacted), Some("compacted"), "{compacted}");
    let compact_revision = compacted["error"]["compact_revision"]
        .as_u64()
        .expect("compact_revision");
    assert!(compact_revision > first, "{compacted}");
    let resumed = writer
        .call(poll("w2", ("prefix", "bulk/"), compact_revision, 0))
        .await;
    assert_eq!(
        resumed["ok"], true,
        "a cursor at the compact revision is served: {resumed}"
    );
}

/// `[kv]` bounds are proposed through the log at start: a lower `history_events_max`
/// compacts the history kept so far (whole revisions, the oldest first), and a lower
/// `key_bytes_max` refuses a longer key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_kv_bounds_are_proposed_and_a_lower_history_bound_compacts() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let config = dir.path().join("kv.toml");
    std::fs::write(&config, "[kv]\n").expect("write the config");
    let config_arg = config.to_str().expect("a UTF-8 temp path");
    let mut node = Node::start_with_args(&dir.path().join("data"), &["--config", config_arg]).await;
    let mut writer = Raw::connect(node.mqtt_port(), "kv-bounds-writer").await;
    let mut revisions = Vec::new();
    for key in ["a", "b", "c", "d", "e"] {
        revisions.push(
            put(
                &mut writer,
                &format!("p-{key}"),
                &format!("hist/{key}"),
                "v",
            )
            .await,
        );
    }
    let all = writer
        .call(poll("w0", ("prefix", "hist/"), revisions[0], 0))
        .await;
    assert_eq!(events(&all).len(), 4, "the default history keeps them all");
    drop(writer);

    std::fs::write(&config, "[kv]\nhistory_events_max = 2\nkey_bytes_max = 8\n")
        .expect("rewrite the config");
    node.restart().await;
    let mut writer = Raw::connect(node.mqtt_port(), "kv-bounds-writer-2").await;
    let compacted = writer
        .call(poll("w1", ("prefix", "hist/"), revisions[0], 0))
        .await;
    assert_eq!(code(&compacted), Some("compacted"), "{compacted}");
    assert_eq!(
        compacted["error"]["compact_revision"], revisions[2],
        "the two newest revisions kept: {compacted}"
    );
    let kept = writer
        .call(poll("w2", ("prefix", "hist/"), revisions[2], 0))
        .await;
    let kept: Vec<u64> = events(&kept).iter().map(|event| event.0).collect();
    assert_eq!(kept, revisions[3..].to_vec());

    let long = writer
        .call(json!({"id": "p-long", "op": "kv.put", "key": "hist/long", "value": "v"}))
        .await;
    assert_eq!(code(&long), Some("bad_request"), "{long}");
    assert_eq!(
        long["error"]["message"], "kv.put: key is 9 bytes, it must be 1 to 8",
        "{long}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_serves_a_poll_and_is_woken_by_a_write_made_elsewhere() {
    let cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let ports = cluster.mqtt_ports();
    let follower = (leader + 1) % ports.len();
    let mut writer = Raw::connect(ports[leader], "watch-writer").await;
    let mut watcher = Raw::connect(ports[follower], "watch-follower").await;

    let start = put(&mut writer, "p1", "hive/config", "rate=2").await;
    watcher
        .send(poll("w1", ("key", "hive/config"), start, 20_000).to_string())
        .await;
    assert_eq!(watcher.try_next(300).await, None, "the poll waits");
    let changed = put(&mut writer, "p2", "hive/config", "rate=5").await;
    let woken = watcher.next(5).await;
    assert_eq!(
        events(&woken),
        vec![event(changed, "put", "hive/config", "rate=5")]
    );
}

/// A prefix delete of 700 keys makes one revision of about 90 KiB of events: more than one
/// MQTT packet carries. It comes in fragments (`next_key`), each polled on with `after_key`,
/// every key exactly once and in key order, and then the later revisions as usual. A `kv.get`
/// of the 700 keys comes in pages that each fit a packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_too_large_for_one_answer_comes_in_fragments() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut writer = Raw::connect(port, "frag-writer").await;
    let mut watcher = Raw::connect(port, "frag-watcher").await;
    let fleet = ("prefix", "fleet/");
    let names: Vec<String> = (0..700)
        .map(|i| format!("fleet/drone-{i:04}/status"))
        .collect();
    for (batch, chunk) in names.chunks(50).enumerate() {
        let puts: Vec<Value> = chunk
            .iter()
            .map(|key| json!({"put": {"key": key, "value": "up"}}))
            .collect();
        let answer = writer
            .call(json!({"id": format!("t{batch}"), "op": "kv.txn", "success": puts}))
            .await;
        assert_eq!(answer["succeeded"], true, "{answer}");
    }
    let mut next_after: Option<String> = None;
    let mut pages = 0;
    let mut read = 0;
    loop {
        let mut get = json!({"id": format!("g{pages}"), "op": "kv.get", "prefix": "fleet/"});
        if let Some(from) = &next_after {
            get["after"] = json!(from);
        }
        let page = writer.call(get).await;
        assert_eq!(page["ok"], true, "{page}");
        pages += 1;
        read += page["kvs"].as_array().expect("kvs").len();
        next_after = page["next_after"].as_str().map(str::to_string);
        if next_after.is_none() {
            break;
        }
        assert!(pages < 10, "paging ends");
    }
    assert_eq!(read, 700, "every key read once");
    assert!(
        pages >= 2,
        "the keys take more than one packet: {pages} pages"
    );

    let before = put(&mut writer, "m", "marker", "x").await;
    let deleted = writer
        .call(json!({"id": "d", "op": "kv.delete", "prefix": "fleet/"}))
        .await;
    assert_eq!(deleted["deleted"], 700, "{deleted}");
    let late = put(&mut writer, "late", "fleet/late", "y").await;

    let mut request = poll("w0", fleet, before, 0);
    let mut keys: Vec<String> = Vec::new();
    let mut fragments = 0;
    for round in 0..20 {
        let answer = watcher.call(request.clone()).await;
        let got = events(&answer);
        match answer["next_key"].as_str() {
            Some(next_key) => {
                fragments += 1;
                assert_eq!(next(&answer), revision(&deleted) - 1, "{answer}");
                assert_eq!(got.last().map(|e| e.2.as_str()), Some(next_key));
                keys.extend(got.into_iter().map(|(_, kind, key, _)| {
                    assert_eq!(kind, "delete");
                    key
                }));
                request = poll(&format!("w{}", round + 1), fleet, next(&answer), 0);
                request["after_key"] = json!(next_key);
            }
            None => {
                let (rest, later): (Vec<_>, Vec<_>) = got
                    .into_iter()
                    .partition(|event| event.0 == revision(&deleted));
                keys.extend(rest.into_iter().map(|event| event.2));
                assert_eq!(later, vec![event(late, "put", "fleet/late", "y")]);
                break;
            }
        }
    }
    assert!(fragments >= 1, "the revision came in fragments");
    assert_eq!(keys, names, "every deleted key once, in key order");
}
