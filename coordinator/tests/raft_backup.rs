//! Online backup in Raft's terms: the state taken from a running leader at one applied index,
//! through a backup file, seeds a new node that starts on exactly that state, elects itself in
//! a later term, expires leases (its term is not older than the state's) and grants higher
//! tokens than every restored one. A data directory that holds anything is refused, and so is a
//! state that does not restore.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_backup
//! ```

mod raft_support;

use hivekeeper_coordinator::backup::{self, BackupError, BackupFile, Seat};
use hivekeeper_coordinator::raft::{RaftConfig, RaftHandle};
use hivekeeper_coordinator::{Command, Reply};
use raft_support::{WAIT_S, lease_and_lock, start_single, stop, tempdir, within};

async fn start(dir: &std::path::Path) -> RaftHandle {
    start_single(dir, &RaftConfig::DEFAULTS).await
}

async fn propose(node: &RaftHandle, command: Command) -> Reply {
    within(WAIT_S, "a proposal", node.propose(command))
        .await
        .expect("committed")
        .reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_node_starts_on_the_state_and_goes_on_from_it() {
    let source_dir = tempdir();
    let source = start(source_dir.path()).await;
    // drone-a's lease is short: the new node must be able to expire it.
    let (lease_a, token_a) = lease_and_lock(&source, "drone-a", "pad-1", 500).await;
    let (_, token_b) = lease_and_lock(&source, "drone-b", "pad-2", 60_000).await;
    let taken = within(WAIT_S, "applied state", source.applied_state())
        .await
        .expect("the leader's state");
    let state = taken.machine.snapshot();
    assert_eq!(
        state,
        source
            .query(|machine| machine.snapshot())
            .expect("readable"),
        "nothing was applied since: the copy is the state"
    );
    assert!(taken.index >= 5 && taken.term >= 1, "{taken:?}");
    stop(source).await;

    // Through the file format, as `snapshot save` / `restore` do.
    let file = BackupFile {
        index: taken.index,
        term: taken.term,
        state,
    };
    let file = BackupFile::decode(&file.encode()).expect("reads back");
    let restored_dir = tempdir();
    let data_dir = restored_dir.path().join("data");
    let restored = backup::restore(&file, &data_dir, &Seat::single_node(1))
        .expect("an empty directory is seeded");
    assert_eq!(
        (restored.index, restored.leases, restored.resources),
        (taken.index, 2, 2)
    );

    let node = start(&data_dir).await;
    assert_eq!(
        node.query(|machine| machine.snapshot()).expect("readable"),
        file.state,
        "the new node starts on exactly the saved state"
    );
    let metrics = node.metrics();
    assert!(
        metrics.current_term > taken.term,
        "the new cluster elects in a later term than the state's: {} after {}",
        metrics.current_term,
        taken.term
    );
    assert_eq!(
        node.log_status().await.expect("status").last_purged_index,
        Some(taken.index)
    );
    // Tokens go on above every restored one.
    let (_, token_c) = lease_and_lock(&node, "drone-c", "pad-3", 60_000).await;
    assert!(token_c > token_a.max(token_b), "{token_c} after {token_b}");
    // An expiry proposed in the new cluster's term is not stale (the machine ignores expiries
    // from terms older than the newest it applied, and the state came from an older cluster):
    // once its 500 ms have run on the machine's clock, drone-a's restored lease ends, and its
    // lock with it.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let expire = Command::ExpireLeases {
        term: node.metrics().current_term,
        leases: vec![lease_a],
    };
    assert_eq!(
        propose(&node, expire).await,
        Reply::Expired {
            leases: vec![lease_a]
        }
    );
    assert_eq!(
        node.query(|machine| machine.resource_count())
            .expect("readable"),
        2,
        "pad-1 is free, pad-2 and pad-3 held"
    );
    stop(node).await;
    // A restart opens the seeded directory as any other.
    let again = start(&data_dir).await;
    assert_eq!(
        again
            .query(|machine| machine.lease_count())
            .expect("readable"),
        2,
        "drone-b's restored lease and drone-c's new one"
    );
    stop(again).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_with_anything_in_it_or_a_bad_state_is_refused() {
    let source_dir = tempdir();
    let source = start(source_dir.path()).await;
    lease_and_lock(&source, "drone-a", "pad-1", 60_000).await;
    let taken = source.applied_state().await.expect("state");
    stop(source).await;
    let file = BackupFile {
        index: taken.index,
        term: taken.term,
        state: taken.machine.snapshot(),
    };

    // A directory holding anything at all, even a stray file, is refused and left alone.
    let dir = tempdir();
    std::fs::write(dir.path().join("notes.txt"), "mine").expect("write");
    let error = backup::restore(&file, dir.path(), &Seat::single_node(1)).unwrap_err();
    assert!(
        matches!(error, BackupError::DataDirNotEmpty { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .ends_with("a restore seeds a new, empty data directory only (move it away, or give another --data-dir)"),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).expect("still there"),
        "mine"
    );
    // The live data directory of a node is refused the same way.
    let error = backup::restore(&file, source_dir.path(), &Seat::single_node(1)).unwrap_err();
    assert!(
        matches!(error, BackupError::DataDirNotEmpty { .. }),
        "{error:?}"
    );

    // A state that does not restore, though its file checks out (another build's format).
    let text = String::from_utf8(file.state.clone()).expect("JSON");
    assert!(text.starts_with(r#"{"format":1,"#), "{text}");
    let bad = BackupFile {
        state: text
            .replacen(r#"{"format":1,"#, r#"{"format":2,"#, 1)
            .into_bytes(),
        ..file.clone()
    };
    let empty = tempdir();
    let error = backup::restore(&bad, empty.path(), &Seat::single_node(1)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the state in the file cannot be restored: snapshot is unreadable: format 2 is not the \
         supported format 1"
    );
    assert_eq!(std::fs::read_dir(empty.path()).expect("dir").count(), 0);

    // A member restored for a cluster it is not in.
    let seat = Seat {
        node_id: 7,
        members: Seat::single_node(1).members,
    };
    let error = backup::restore(&file, empty.path(), &seat).unwrap_err();
    assert_eq!(
        error.to_string(),
        "node 7 is not one of the members it is restored for"
    );
}
