//! Snapshots: built from the state machine's bytes, stored durably, the log purged behind
//! them; at restart the latest snapshot is restored and the entries after it replayed, giving
//! a state identical byte for byte. A snapshot that does not restore is an error at open.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_snapshot
//! ```

mod raft_support;

use hivekeeper_coordinator::raft::{self, RaftConfig, RaftError, RaftHandle};
use raft_support::{WAIT, WAIT_S, lease_grant, request, tempdir, within};

/// Opens a node in `dir`, initializes it and waits until it leads.
async fn start(dir: &std::path::Path, config: &RaftConfig) -> RaftHandle {
    raft_support::start_single(dir, config).await
}

/// Agent `drone-{n}` takes a lease and the lock `pad-{n}`: two entries.
async fn lease_and_lock(node: &RaftHandle, n: u32) -> u64 {
    let (agent, lock) = (format!("drone-{n}"), format!("pad-{n}"));
    raft_support::lease_and_lock(node, &agent, &lock, 60_000)
        .await
        .1
}

fn state_bytes(node: &RaftHandle) -> Vec<u8> {
    node.query(|machine| machine.snapshot()).expect("readable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_purges_the_log_and_a_restart_restores_it_then_replays_the_rest() {
    let dir = tempdir();
    let config = RaftConfig {
        snapshot_every_entries: 0, // only when triggered
        entries_kept_after_snapshot: 0,
        ..RaftConfig::DEFAULTS
    };
    let node = start(dir.path(), &config).await;
    for n in 0..20 {
        lease_and_lock(&node, n).await;
    }
    // A batch before the snapshot: the restored machine's position is then ahead of the
    // snapshot's log index, and the entries replayed after it must still land where they did.
    let batch: Vec<_> = (100..110)
        .map(|n| request(&format!("drone-{n}"), "grant", lease_grant(60_000)))
        .collect();
    within(WAIT_S, "a batch", node.propose_batch(batch))
        .await
        .expect("batch committed");
    let snapshot_index = within(WAIT_S, "snapshot", node.snapshot_now(WAIT))
        .await
        .expect("a snapshot is built")
        .expect("it covers the applied entries");
    let applied = node
        .metrics()
        .last_applied
        .expect("entries were applied")
        .index;
    assert_eq!(snapshot_index, applied);
    let purged = within(
        WAIT_S,
        "purge",
        node.wait_for(WAIT, "the log purged behind the snapshot", move |metrics| {
            metrics.purged.map(|log_id| log_id.index) == Some(snapshot_index)
        }),
    )
    .await
    .expect("openraft purges behind the snapshot");
    assert!(purged.purged.is_some());
    let status = within(WAIT_S, "log status", node.log_status())
        .await
        .expect("the log is readable");
    assert_eq!(status.last_purged_index, Some(snapshot_index));
    assert_eq!(status.last_index, Some(snapshot_index));
    assert_eq!(status.entries, 0, "every entry is behind the snapshot");

    // Entries after the snapshot: replayed from the log at restart.
    let mut last_token = 0;
    for n in 20..30 {
        last_token = lease_and_lock(&node, n).await;
    }
    // And one entry of ten commands: its positions run ahead of the log index, and the replay
    // after the restored snapshot must place them exactly as the first time.
    let batch: Vec<_> = (30..40)
        .map(|n| request(&format!("drone-{n}"), "grant", lease_grant(60_000)))
        .collect();
    within(WAIT_S, "a batch", node.propose_batch(batch))
        .await
        .expect("batch committed");
    last_token = lease_and_lock(&node, 40).await.max(last_token);
    let before = state_bytes(&node);
    let status = within(WAIT_S, "log status", node.log_status())
        .await
        .expect("readable");
    assert_eq!(
        status.entries, 23,
        "eleven leases, eleven locks and one batch after the snapshot"
    );
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");

    let (node, _applied) = within(WAIT_S, "reopen", raft::open(dir.path(), 1, &config))
        .await
        .expect("reopens");
    assert_eq!(
        state_bytes(&node),
        before,
        "snapshot plus replayed entries give the state before the restart, byte for byte"
    );
    // openraft publishes its metrics from its own task, shortly after `open` returns.
    within(
        WAIT_S,
        "the stored snapshot in the metrics",
        node.wait_for(WAIT, "the stored snapshot", move |metrics| {
            metrics.snapshot.map(|log_id| log_id.index) == Some(snapshot_index)
        }),
    )
    .await
    .expect("the stored snapshot is the one openraft starts from");
    within(WAIT_S, "initialize", node.initialize_single_node())
        .await
        .expect("no-op");
    within(WAIT_S, "leader", node.wait_for_leader(WAIT))
        .await
        .expect("leader");
    let token = lease_and_lock(&node, 50).await;
    assert!(
        token > last_token,
        "tokens increase across snapshot and restart"
    );
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_policy_builds_snapshots_and_purges_on_its_own() {
    let dir = tempdir();
    let config = RaftConfig {
        snapshot_every_entries: 10,
        entries_kept_after_snapshot: 5,
        ..RaftConfig::DEFAULTS
    };
    let node = start(dir.path(), &config).await;
    for n in 0..15 {
        lease_and_lock(&node, n).await;
    }
    let metrics = within(
        WAIT_S,
        "automatic snapshot and purge",
        node.wait_for(WAIT, "a snapshot and a purge", |metrics| {
            metrics.snapshot.is_some() && metrics.purged.is_some()
        }),
    )
    .await
    .expect("the policy snapshots every 10 entries");
    let snapshot_index = metrics.snapshot.expect("checked").index;
    let purged_index = metrics.purged.expect("checked").index;
    assert!(snapshot_index >= 10);
    assert_eq!(
        purged_index + 5,
        snapshot_index,
        "five entries are kept behind the snapshot"
    );
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_stored_snapshot_is_an_error_at_open_not_a_panic() {
    let dir = tempdir();
    let config = RaftConfig {
        snapshot_every_entries: 0,
        ..RaftConfig::DEFAULTS
    };
    let node = start(dir.path(), &config).await;
    lease_and_lock(&node, 0).await;
    within(WAIT_S, "snapshot", node.snapshot_now(WAIT))
        .await
        .expect("a snapshot is built");
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");

    // Damage the stored snapshot's bytes (valid redb, invalid state).
    let path = dir.path().join(raft::DATA_FILE_NAME);
    {
        let db = redb::Database::create(&path).expect("the file is a redb database");
        let txn = db.begin_write().expect("write");
        {
            let table: redb::TableDefinition<'_, &str, &[u8]> =
                redb::TableDefinition::new("snapshot");
            let mut table = txn.open_table(table).expect("snapshot table");
            table
                .insert("data", br#"{"format":1,"state":"not a state"}"#.as_slice())
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let opened = within(WAIT_S, "reopen", raft::open(dir.path(), 1, &config)).await;
    match opened {
        Err(error @ RaftError::Snapshot { .. }) => {
            let message = error.to_string();
            assert!(message.contains("hivekeeper.redb"), "{message}");
        }
        Err(other) => panic!("expected a snapshot error, got {other}"),
        Ok(_) => panic!("a corrupt snapshot must not open"),
    }
    // The failed open released the file: after a repair-free retry it still fails cleanly.
    assert!(matches!(
        within(WAIT_S, "reopen again", raft::open(dir.path(), 1, &config)).await,
        Err(RaftError::Snapshot { .. })
    ));
}
