//! End to end: key permissions with `hivekeeper serve --auth`, over real processes and real
//! MQTT (docs/SECURITY.md, "Key permissions"). The CLI gives an agent `--kv-read` and
//! `--kv-write` prefixes and lists them; the node refuses, before the log, a key op outside
//! them with `forbidden` naming the account, the key and its prefixes; an observer reads and
//! watches every key and writes none.

mod common;

use std::path::Path;

use common::{Node, Raw, code, run_cli_as_admin};
use serde_json::{Value, json};

/// `agent add NAME ARGS... --json` as the admin: the new secret.
async fn add_agent(port: u16, secret_file: &Path, name: &str, args: &[&str]) -> String {
    let mut all = vec!["agent", "add", name, "--json"];
    all.extend_from_slice(args);
    let added = run_cli_as_admin(port, secret_file, &all).await.json();
    assert_eq!(added["agent"], name, "{added}");
    added["secret"]
        .as_str()
        .expect("the secret, once")
        .to_string()
}

/// Asserts `response` is `forbidden` with a message naming every one of `fragments`.
fn assert_forbidden(response: &Value, fragments: &[&str]) {
    assert_eq!(code(response), Some("forbidden"), "{response}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    for fragment in fragments {
        assert!(message.contains(fragment), "{fragment:?} in {message}");
    }
}

fn put(id: &str, key: &str) -> Value {
    json!({"id": id, "op": "kv.put", "key": key, "value": "v"})
}

fn watch(id: &str, prefix: &str) -> Value {
    json!({"id": id, "op": "watch.poll", "prefix": prefix, "after": 0, "wait_ms": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_keeps_to_its_prefixes_and_an_observer_reads_without_writing() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start_with_args(dir.path(), &["--auth"]).await;
    let (port, secret_file) = (node.mqtt_port(), dir.path().join("admin.secret"));
    let limited = ["--kv-read", "presence/", "--kv-write", "presence/"];
    let drone_secret = add_agent(port, &secret_file, "drone-1", &limited).await;
    let observer = ["--role", "observer"];
    let watcher_secret = add_agent(port, &secret_file, "watcher", &observer).await;
    let listed = run_cli_as_admin(port, &secret_file, &["agent", "list", "--json"])
        .await
        .json();
    assert_eq!(
        listed["accounts"][1],
        json!({"agent": "drone-1", "role": "agent", "kv_read": ["presence/"],
            "kv_write": ["presence/"]}),
        "{listed}"
    );
    assert_eq!(
        listed["accounts"][2],
        json!({"agent": "watcher", "role": "observer"}),
        "{listed}"
    );
    let mut admin = Raw::connect_with(
        port,
        "admin",
        Some(
            std::fs::read_to_string(&secret_file)
                .expect("admin.secret")
                .trim(),
        ),
    )
    .await;
    let seeded = admin.call(put("s1", "cfg/x")).await;
    assert_eq!(seeded["ok"], true, "the admin writes every key: {seeded}");

    let mut drone = Raw::connect_with(port, "drone-1", Some(&drone_secret)).await;
    let inside = drone.call(put("d1", "presence/x")).await;
    assert_eq!(inside["ok"], true, "{inside}");
    assert_forbidden(
        &drone.call(put("d2", "cfg/x")).await,
        &["drone-1", "\"cfg/x\"", "[\"presence/\"]", "write"],
    );
    assert_forbidden(
        &drone.call(watch("d3", "cfg/")).await,
        &["drone-1", "\"cfg/\"", "[\"presence/\"]", "read"],
    );
    let own = drone.call(watch("d4", "presence/")).await;
    assert_eq!(own["ok"], true, "{own}");
    assert_eq!(own["events"][0]["kv"]["key"], "presence/x", "{own}");
    let txn = json!({"id": "d5", "op": "kv.txn", "success": [
        {"put": {"key": "presence/y", "value": "v"}},
        {"delete": {"prefix": "cfg/"}}]});
    assert_forbidden(&drone.call(txn).await, &["drone-1", "\"cfg/\""]);

    let mut watcher = Raw::connect_with(port, "watcher", Some(&watcher_secret)).await;
    for (id, key) in [("o1", "cfg/x"), ("o2", "presence/x"), ("o3", "anything")] {
        assert_forbidden(
            &watcher.call(put(id, key)).await,
            &["watcher", "observer role may write no key"],
        );
    }
    assert_forbidden(
        &watcher
            .call(json!({"id": "o4", "op": "kv.delete", "prefix": ""}))
            .await,
        &["watcher"],
    );
    let read = watcher
        .call(json!({"id": "o5", "op": "kv.get", "key": "cfg/x"}))
        .await;
    assert_eq!(read["kvs"][0]["value"], "v", "{read}");
    let all = watcher.call(watch("o6", "")).await;
    assert_eq!(all["ok"], true, "{all}");
    // The refused writes changed nothing: two puts, one each by the admin and the drone.
    let keys: Vec<&str> = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["kv"]["key"].as_str())
        .collect();
    assert_eq!(keys, ["cfg/x", "presence/x"], "{all}");
}
