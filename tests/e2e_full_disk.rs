//! A full disk: the node stops with a clear error instead of hanging, and loses nothing it
//! acknowledged.
//!
//! The data dir is a 2 MiB tmpfs mounted in a mount namespace of the test's own
//! (`unshare --mount --map-root-user`: no root needed on the host, and nothing outside the
//! test sees the mount), mostly taken by a filler file. The Raft log's segments are 64 KiB
//! (`[node.raft] log_segment_kib`; 64 MiB by default would not fit at all), so the disk fills
//! when a new segment is preallocated after a few hundred entries. One agent acquires lock
//! after lock until the disk is full. `serve` must then exit non-zero naming the cause; with
//! the filler removed, `serve` starts again on the same data and every lock it acknowledged is
//! still held by the same lease.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Log, Raw, eventually, free_ports};
use serde_json::json;
use tokio::time::Instant;

/// The tmpfs size, and how much of it the filler leaves free for the data file (the empty
/// file takes about 72 KiB).
const TMPFS_KIB: u64 = 2048;
const FREE_KIB: u64 = 320;
/// Bounds on the load that fills the disk.
const REQUESTS_MAX: usize = 20_000;
const FILL_WITHIN: Duration = Duration::from_secs(90);

/// `hivekeeper serve` in its own mount namespace, twice: until the disk is full, then again
/// after the filler is removed. The process group is killed when this drops.
struct Namespaced {
    child: Child,
    log: Log,
}

impl Namespaced {
    fn start(mqtt_port: u16, metrics_port: u16) -> Namespaced {
        let script = r#"
            dir=$(mktemp -d)
            mount -t tmpfs -o size="${TMPFS_KIB}k" tmpfs "$dir" || exit 97
            printf '[node.raft]\nlog_segment_kib = 64\n' > "$dir/hivekeeper.toml"
            dd if=/dev/zero of="$dir/filler" bs=1k count=$((TMPFS_KIB - FREE_KIB)) 2>/dev/null
            "$HK" serve --config "$dir/hivekeeper.toml" --data-dir "$dir/data" \
                --mqtt-listen "127.0.0.1:$MQTT" --metrics-listen "127.0.0.1:$METRICS"
            echo "first serve exited with $?"
            rm "$dir/filler"
            exec "$HK" serve --config "$dir/hivekeeper.toml" --data-dir "$dir/data" \
                --mqtt-listen "127.0.0.1:$MQTT" --metrics-listen "127.0.0.1:$METRICS"
        "#;
        let mut child = Command::new("unshare")
            .args(["--mount", "--map-root-user", "sh", "-c", script])
            .env("HK", env!("CARGO_BIN_EXE_hivekeeper"))
            .env("TMPFS_KIB", TMPFS_KIB.to_string())
            .env("FREE_KIB", FREE_KIB.to_string())
            .env("MQTT", mqtt_port.to_string())
            .env("METRICS", metrics_port.to_string())
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let log = Log::default();
        log.collect(child.stdout.take().expect("piped stdout"));
        log.collect(child.stderr.take().expect("piped stderr"));
        Namespaced { child, log }
    }

    /// Waits until `serve` has said it is ready `times` times in all.
    async fn ready(&mut self, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.log.count("hivekeeper ready") < times {
            if let Ok(Some(status)) = self.child.try_wait() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                panic!(
                    "the namespace exited with {status} (97: tmpfs mount refused; this test \
                     needs `unshare --mount --map-root-user`, as on the CI machine):\n{}",
                    self.log.tail(40)
                );
            }
            assert!(
                Instant::now() < deadline,
                "serve not ready within 30 s:\n{}",
                self.log.tail(40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Namespaced {
    fn drop(&mut self) {
        // The whole group: the shell, and the first serve if the test failed while it ran.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- namespaced serve's log ---\n{}", self.log.tail(60));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_node_with_its_cause_and_loses_nothing_acknowledged() {
    let ports = free_ports(2);
    let (mqtt_port, metrics_port) = (ports[0], ports[1]);
    let mut node = Namespaced::start(mqtt_port, metrics_port);
    node.ready(1).await;

    let mut agent = Raw::connect(mqtt_port, "filler").await;
    // Its subscriptions to the first serve; one more means it is back on the second.
    let subscriptions = agent.subscriptions();
    let lease = agent.grant("g", 600_000).await;
    // Long names fill the log faster; each acquire is its own entry.
    let name = |i: usize| format!("disk/{i:05}/{}", "x".repeat(90));
    let mut acknowledged = Vec::new();
    let started = Instant::now();
    for i in 0..REQUESTS_MAX {
        assert!(
            started.elapsed() < FILL_WITHIN,
            "the disk did not fill within {FILL_WITHIN:?} ({i} requests)"
        );
        let request = json!({"id": format!("a{i}"), "op": "lock.acquire", "name": name(i),
                             "lease": lease, "wait_ms": 0});
        agent.send(request.to_string()).await;
        match agent.try_next(3_000).await {
            Some(answer) if answer["ok"] == true => acknowledged.push(name(i)),
            // The node failing answers nothing, or `unavailable` while it stops.
            Some(answer) => {
                assert_eq!(common::code(&answer), Some("unavailable"), "{answer}");
                break;
            }
            None => break,
        }
    }
    assert!(
        acknowledged.len() > 10,
        "only {} acquires before the disk filled: the filler left too little room",
        acknowledged.len()
    );

    // serve exits on its own, non-zero, and says why.
    let exited = eventually(30, "the first serve exits", || async {
        node.log.find("first serve exited with")
    })
    .await;
    assert!(
        !exited.ends_with("with 0"),
        "a full disk must not look like a clean stop: {exited}"
    );
    let failure = node
        .log
        .find("the node failed")
        .unwrap_or_else(|| panic!("no failure line:\n{}", node.log.tail(40)));
    assert!(
        failure.contains("No space left on device"),
        "the error names the cause: {failure}"
    );

    // Room again: everything acknowledged is still there, held by the same lease. The client
    // reconnects by itself; a request sent before it subscribed again would be answered to
    // nobody.
    node.ready(2).await;
    agent.resubscribed(subscriptions).await;
    for (i, lock) in acknowledged.iter().enumerate() {
        let answer = agent.inspect(&format!("i{i}"), "lock", lock).await;
        assert_eq!(
            answer["holders"][0]["lease"], lease,
            "acknowledged lock {lock} lost after the full disk: {answer}"
        );
    }
    // And the node takes writes again.
    let answer = agent
        .call(
            json!({"id": "after", "op": "lock.acquire", "name": "after-the-disk",
                     "lease": lease, "wait_ms": 0}),
        )
        .await;
    assert_eq!(answer["ok"], true, "{answer}");
}
