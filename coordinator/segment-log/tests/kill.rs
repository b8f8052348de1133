//! A writer process killed with SIGKILL mid-stream loses no acknowledged entry: the test binary
//! runs itself as a child that appends batches and prints each acknowledged index, kills it at
//! a varying point, and reopens the log (sled's crash-test approach, `exit(9)` by another name).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hivekeeper_segment_log::{SegmentLog, SegmentLogConfig};

/// Set in the child's environment: the log directory it appends to.
const CHILD_DIR: &str = "SEGMENT_LOG_KILL_CHILD_DIR";

/// 4 KiB segments, so kills land around segment rolls too.
const CONFIG: SegmentLogConfig = SegmentLogConfig {
    segment_bytes: 4096,
};

fn payload(index: u64) -> Vec<u8> {
    let mut bytes = index.to_le_bytes().to_vec();
    bytes.resize(8 + (index % 97) as usize, (index % 251) as u8);
    bytes
}

/// The child: append batches of 1-3 entries until killed (or a bound is reached), printing
/// `acked N` after each append returns.
fn child(dir: &Path) {
    let mut log = SegmentLog::open(dir, CONFIG).expect("the child opens the log");
    let started = Instant::now();
    for round in 0..20_000u64 {
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
        let first = log.next_index().unwrap_or(1);
        let last = first + round % 3;
        log.append((first..=last).map(|index| (index, payload(index))))
            .expect("the child appends");
        println!("acked {last}");
    }
}

#[test]
fn a_killed_writer_loses_no_acknowledged_entry() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut acknowledged = 0u64;
    for (round, kill_after) in [5u64, 37, 120, 1, 64, 250].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "a_killed_writer_loses_no_acknowledged_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the child starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(index) = line.strip_prefix("acked ").and_then(|n| n.parse().ok()) {
                    let _: Result<(), _> = tx.send(index);
                }
            }
        });
        let mut seen = 0u64;
        while seen < kill_after {
            let index: u64 = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the child acknowledges appends");
            acknowledged = acknowledged.max(index);
            seen += 1;
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("the child is reaped");
        reader.join().expect("the reader ends at EOF");
        // Lines already in the pipe when the child died were acknowledged too.
        while let Ok(index) = rx.try_recv() {
            acknowledged = acknowledged.max(index);
        }
        let log = SegmentLog::open(dir.path(), CONFIG).expect("the log reopens after a kill");
        log.check_invariants().expect("invariants hold");
        let last = log.last_index().expect("entries survive");
        assert!(
            last >= acknowledged,
            "round {round}: acknowledged {acknowledged}, the log ends at {last}"
        );
        let entries = log.read(..).expect("reads");
        assert_eq!(entries.len() as u64, last, "round {round}: no hole from 1");
        for (index, bytes) in entries {
            assert_eq!(bytes, payload(index), "round {round}: entry {index}");
        }
        acknowledged = last;
    }
}
