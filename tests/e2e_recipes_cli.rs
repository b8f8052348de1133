//! `hivekeeper elect` and `hivekeeper barrier` against a real node, and `inspect` / `ls` of
//! both kinds.
//!
//! - `elect NAME --value V --json` prints the token when leading and holds the leadership
//!   until Ctrl-C (SIGINT), then resigns; a second `elect` waits in line and leads then;
//!   `elect NAME --listen --json` prints nobody, each leader in order, and nobody again.
//! - `inspect election NAME` shows the leader's value; `ls election` lists the election.
//! - Three `barrier NAME --count 3 --leave --json` pass and leave with one generation; a
//!   `barrier ... -- COMMAND` runs it with the generation in its environment and exits with
//!   its status.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Node, run_cli};
use serde_json::Value;

/// A `hivekeeper` CLI process that runs until it is interrupted, its stdout read line by line.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    what: String,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hivekeeper"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("hivekeeper runs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running {
            child,
            lines,
            what: format!("hivekeeper {}", args.join(" ")),
        }
    }

    /// The next line printed, within 20 s.
    async fn line(&self) -> String {
        let lines = &self.lines;
        tokio::task::block_in_place(|| lines.recv_timeout(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("{}: no line within 20 s ({e})", self.what))
    }

    async fn json(&self) -> Value {
        let line = self.line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Nothing printed for a while.
    fn quiet(&self) {
        let got = self.lines.recv_timeout(Duration::from_millis(800));
        assert!(got.is_err(), "{}: printed {got:?}", self.what);
    }

    /// Ctrl-C, and the exit status, within 20 s.
    fn interrupt(mut self) -> bool {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill(1) runs");
        assert!(sent.success(), "SIGINT to {pid}");
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("{}: still running 20 s after SIGINT", self.what);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `args` and `--brokers broker`.
fn with_broker<'a>(args: &[&'a str], broker: &'a str) -> Vec<&'a str> {
    args.iter().copied().chain(["--brokers", broker]).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leads_until_interrupted_and_listen_prints_each_leader() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let broker = format!("127.0.0.1:{}", node.mqtt_port());
    let with = |args: &[&'static str]| with_broker(args, &broker);

    let listener = Running::start(&with(&["elect", "gw", "--listen", "--json"]));
    assert_eq!(listener.json().await, serde_json::json!({"leader": null}));

    let first = Running::start(&with(&["elect", "gw", "--value", "a", "--json"]));
    let leading = first.json().await;
    let first_token = leading["token"].as_u64().expect("a token");
    assert_eq!(
        (leading["name"].as_str(), leading["value"].as_str()),
        (Some("gw"), Some("a"))
    );
    let seen = listener.json().await;
    assert_eq!(seen["leader"]["token"], first_token, "{seen}");
    assert_eq!(seen["leader"]["value"], "a");
    assert!(
        seen["leader"]["agent"]
            .as_str()
            .is_some_and(|a| a.starts_with("hk-admin-")),
        "{seen}"
    );

    let inspected = run_cli(&with(&["inspect", "election", "gw", "--json"]))
        .await
        .json();
    assert_eq!(inspected["holders"][0]["value"], "a", "{inspected}");
    assert_eq!(inspected["holders"][0]["token"], first_token);
    let listed = run_cli(&with(&["ls", "election", "--json"])).await.json();
    assert_eq!(listed["resources"][0]["name"], "gw", "{listed}");

    let second = Running::start(&with(&["elect", "gw", "--value", "b"]));
    second.quiet();
    assert!(first.interrupt(), "the first leader resigns and exits 0");
    let line = second.line().await;
    let second_token: u64 = line
        .strip_prefix("leading \"gw\" with token ")
        .and_then(|token| token.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(second_token > first_token);
    let seen = listener.json().await;
    assert_eq!(
        (
            seen["leader"]["token"].as_u64(),
            seen["leader"]["value"].as_str()
        ),
        (Some(second_token), Some("b")),
        "the handover is one line: {seen}"
    );
    assert!(second.interrupt());
    assert_eq!(listener.json().await, serde_json::json!({"leader": null}));
    assert!(listener.interrupt());

    // A bad name is refused before anything is sent, naming the cause.
    let long = "n".repeat(300);
    let refused = run_cli(&["elect", long.as_str(), "--brokers", broker.as_str()]).await;
    assert!(!refused.success);
    assert!(refused.stderr.contains("bad_request"), "{}", refused.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_barrier_commands_pass_and_leave_together() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let broker = format!("127.0.0.1:{}", node.mqtt_port());
    let args = [
        "barrier",
        "survey",
        "--count",
        "3",
        "--leave",
        "--json",
        "--brokers",
        &broker,
    ];
    let runs = futures_util::future::join_all((0..3).map(|_| run_cli(&args))).await;
    let mut generations = Vec::new();
    for run in &runs {
        assert!(run.success, "{}", run.stderr);
        let lines: Vec<Value> = run
            .stdout
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 2, "{}", run.stdout);
        assert_eq!(
            (lines[0]["event"].as_str(), lines[1]["event"].as_str()),
            (Some("passed"), Some("left"))
        );
        assert_eq!(lines[0]["generation"], lines[1]["generation"]);
        generations.push(lines[0]["generation"].as_u64().expect("a generation"));
    }
    assert!(
        generations.iter().all(|g| *g == generations[0]),
        "{generations:?}"
    );

    // A command between the two phases sees the generation and gives its status.
    let script = "echo gen=$HIVEKEEPER_BARRIER_GENERATION; exit 3";
    let command = [
        "barrier",
        "phase",
        "--count",
        "2",
        "--brokers",
        &broker,
        "--",
        "sh",
        "-c",
        script,
    ];
    let runs = futures_util::future::join_all((0..2).map(|_| run_cli(&command))).await;
    for run in &runs {
        assert!(!run.success, "the command's status 3 is the exit status");
        let mut lines = run.stdout.lines();
        let passed = lines.next().expect("passed");
        let generation = passed
            .strip_prefix("passed \"phase\" generation ")
            .unwrap_or_else(|| panic!("{}", run.stdout));
        assert_eq!(lines.next(), Some(format!("gen={generation}").as_str()));
        assert_eq!(
            lines.next(),
            Some(format!("left \"phase\" generation {generation}").as_str())
        );
    }

    // Inspect knows barriers: nobody is in one now.
    let inspected = run_cli(&[
        "inspect",
        "barrier",
        "survey",
        "--json",
        "--brokers",
        &broker,
    ])
    .await
    .json();
    assert_eq!(inspected["holders"], serde_json::json!([]), "{inspected}");
    let bad = run_cli(&["barrier", "x", "--count", "0", "--brokers", &broker]).await;
    assert!(
        !bad.success && bad.stderr.contains("--count"),
        "{}",
        bad.stderr
    );
}
