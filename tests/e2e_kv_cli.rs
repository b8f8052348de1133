//! `hivekeeper kv get | put | del | txn | watch` against a real node: the answers with
//! `--json` (the wire's shapes, one JSON line each) and the readable lines without.

mod common;

use common::{Node, run_cli};
use serde_json::{Value, json};

/// `hivekeeper kv ARGS --brokers 127.0.0.1:PORT`; it must succeed.
async fn kv(port: u16, args: &[&str]) -> String {
    let broker = format!("127.0.0.1:{port}");
    let mut all = vec!["kv"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--brokers", &broker]);
    let run = run_cli(&all).await;
    assert!(run.success, "hivekeeper {all:?} failed:\n{}", run.stderr);
    run.stdout
}

/// One JSON line per answer or event.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_put_get_del_txn_and_watch_print_the_answers() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();

    let put = &json_lines(&kv(port, &["put", "hive/rate", "10", "--json"]).await)[0];
    let first = put["revision"].as_u64().expect("a revision");
    let again = kv(port, &["put", "hive/rate", "20", "--prev-kv", "--json"]).await;
    assert_eq!(json_lines(&again)[0]["prev_kv"]["value"], "10");
    kv(port, &["put", "hive/mode", "survey"]).await;

    let page = &json_lines(&kv(port, &["get", "--prefix", "hive/", "--json"]).await)[0];
    let keys: Vec<&str> = page["kvs"]
        .as_array()
        .expect("kvs")
        .iter()
        .map(|kv| kv["key"].as_str().expect("a key"))
        .collect();
    assert_eq!(keys, ["hive/mode", "hive/rate"]);
    let readable = kv(port, &["get", "hive/rate"]).await;
    assert!(readable.starts_with("hive/rate = 20 (mod "), "{readable}");

    // A txn from a file: the counter's increment from version 2.
    let file = dir.path().join("txn.json");
    let txn = json!({
        "compare": [{"key": "hive/rate", "target": "version", "op": "==", "value": 2}],
        "success": [{"put": {"key": "hive/rate", "value": "21"}}],
        "failure": [{"get": {"key": "hive/rate"}}],
    });
    std::fs::write(&file, txn.to_string()).expect("the txn file");
    let path = file.to_str().expect("a UTF-8 path");
    let done = &json_lines(&kv(port, &["txn", "--file", path, "--json"]).await)[0];
    assert_eq!(done["succeeded"], true, "{done}");
    let again = kv(port, &["txn", "--file", path]).await;
    assert!(again.starts_with("failed at revision "), "{again}");
    assert!(again.contains("hive/rate = 21"), "{again}");

    let deleted = &json_lines(&kv(port, &["del", "hive/mode", "--json"]).await)[0];
    assert_eq!(deleted["deleted"], 1);

    // Every change from the first put on, as JSON lines, in revision order.
    let first = first.to_string();
    let watched = kv(
        port,
        &[
            "watch", "--prefix", "hive/", "--rev", &first, "--count", "5", "--json",
        ],
    )
    .await;
    let events: Vec<(String, String)> = json_lines(&watched)
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().expect("a type").to_string();
            (kind, e["kv"]["key"].as_str().expect("a key").to_string())
        })
        .collect();
    let want = [
        ("put", "hive/rate"),
        ("put", "hive/rate"),
        ("put", "hive/mode"),
        ("put", "hive/rate"),
        ("delete", "hive/mode"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(kind, key)| (kind.to_string(), key.to_string()))
        .collect();
    assert_eq!(events, want);
    let readable = kv(
        port,
        &["watch", "hive/mode", "--rev", &first, "--count", "2"],
    )
    .await;
    let lines: Vec<&str> = readable.lines().collect();
    assert!(
        lines.len() == 2
            && lines[0].ends_with(" PUT hive/mode = survey")
            && lines[1].ends_with(" DELETE hive/mode"),
        "{readable}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_get_needs_a_key_or_a_prefix() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let broker = format!("127.0.0.1:{}", node.mqtt_port());
    let run = run_cli(&["kv", "get", "--brokers", &broker]).await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("give a KEY or --prefix P"),
        "{}",
        run.stderr
    );
}
