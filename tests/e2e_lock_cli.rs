//! `hivekeeper lock` against a real node.
//!
//! - `lock NAME -- sh -c 'echo $HIVEKEEPER_LOCK_TOKEN'` runs the command holding the lock and
//!   prints a token; the command's exit code is passed through.
//! - Two exclusive `lock` commands on one name run their commands one after the other (each
//!   appends start and end lines to a file: no interleaving); two `--shared` ones overlap.
//! - `--max-hold-ms` ends the hold under a command that runs on: it gets SIGTERM, the reason
//!   is on stderr and the exit code is 1.
//! - Without a command, `lock` prints the token and holds the lock until SIGTERM, then
//!   releases it.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{CliRun, Node, agent, eventually, inspect_lock, run_cli};

/// The `lock` command's arguments against `node`: `lock NAME FLAGS --brokers B -- sh -c SCRIPT`.
fn lock_args(node: &Node, name: &str, flags: &[&str], script: &str) -> Vec<String> {
    let mut args = vec!["lock".to_string(), name.to_string()];
    args.extend(flags.iter().map(|flag| flag.to_string()));
    args.push("--brokers".into());
    args.push(format!("127.0.0.1:{}", node.mqtt_port()));
    args.extend(["--", "sh", "-c", script].map(String::from));
    args
}

async fn run(args: &[String]) -> CliRun {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_cli(&args).await
}

/// A script that appends `start ID` and, after a pause, `end ID` to `file`; with `meet`, it
/// waits (at most 10 s) to see `meet` start lines before its end, so two shared holders can
/// prove they overlapped.
fn start_end_script(file: &Path, id: &str, meet: Option<usize>) -> String {
    let file = file.display();
    let wait = match meet {
        Some(count) => format!(
            "for i in $(seq 100); do [ $(grep -c start {file}) -ge {count} ] && break; \
             sleep 0.1; done"
        ),
        None => "sleep 0.5".into(),
    };
    format!("echo start {id} >> {file}; {wait}; echo end {id} >> {file}")
}

/// Runs two `lock` commands on one name at once; the file's lines when both are done.
async fn two_at_once(node: &Node, flags: &[&str], meet: Option<usize>) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("log");
    let first = lock_args(node, "door", flags, &start_end_script(&file, "a", meet));
    let second = lock_args(node, "door", flags, &start_end_script(&file, "b", meet));
    let (first, second) = tokio::join!(run(&first), run(&second));
    for run in [&first, &second] {
        assert!(run.success, "{}", run.stderr);
    }
    std::fs::read_to_string(&file)
        .expect("the commands wrote their lines")
        .lines()
        .map(|line| line.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_runs_a_command_with_the_token_and_passes_its_exit_code_through() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let printed = run(&lock_args(
        &node,
        "pad-3",
        &[],
        "echo $HIVEKEEPER_LOCK_NAME $HIVEKEEPER_LOCK_TOKEN",
    ))
    .await;
    assert!(printed.success, "{}", printed.stderr);
    let (name, token) = printed
        .stdout
        .trim()
        .split_once(' ')
        .expect("the name and the token");
    assert_eq!(name, "pad-3");
    let token: u64 = token.parse().expect("a numeric token");
    assert!(token > 0);

    let failed = run(&lock_args(&node, "pad-3", &["--shared"], "exit 7")).await;
    assert_eq!(failed.code, Some(7), "{}", failed.stderr);
    // Released on the way out: a try finds the lock free.
    let free = run(&lock_args(&node, "pad-3", &["--wait-ms", "0"], "true")).await;
    assert!(free.success, "{}", free.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_holders_take_turns_and_shared_ones_overlap() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let exclusive = two_at_once(&node, &[], None).await;
    assert_eq!(
        exclusive,
        ["start", "end", "start", "end"],
        "no interleaving"
    );
    let shared = two_at_once(&node, &["--shared"], Some(2)).await;
    assert_eq!(
        shared,
        ["start", "start", "end", "end"],
        "both held it at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_hold_stops_the_command_and_fails() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let started = Instant::now();
    // `exec`: the SIGTERM reaches the sleep itself, whose end closes the output pipes.
    let stopped = run(&lock_args(
        &node,
        "pump",
        &["--max-hold-ms", "500"],
        "exec sleep 20",
    ))
    .await;
    assert_eq!(stopped.code, Some(1), "{}", stopped.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the command was stopped, not waited for: {:?}",
        started.elapsed()
    );
    assert!(
        stopped.stderr.contains("max-hold of 500 ms ran out"),
        "{}",
        stopped.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_command_lock_prints_the_token_and_holds_until_sigterm() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let observer = agent("observer", node.mqtt_port()).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hivekeeper"))
        .args(["lock", "gate", "--brokers"])
        .arg(format!("127.0.0.1:{}", node.mqtt_port()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hivekeeper runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = common::within(20, "the token line", line)
        .await
        .expect("the reader")
        .expect("a line");
    let token: u64 = line.trim().parse().expect("the token alone");
    let (holders, _) = inspect_lock(&observer, "gate").await;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].token, token);

    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill(1) runs");
    assert!(sent.success());
    let status = common::within(
        20,
        "lock exits",
        tokio::task::spawn_blocking(move || child.wait()),
    )
    .await
    .expect("the waiter")
    .expect("an exit status");
    assert!(status.success(), "{status:?}");
    eventually(20, "the lock is free", || async {
        inspect_lock(&observer, "gate").await.0.is_empty()
    })
    .await;
}
