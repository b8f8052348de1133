//! Data format 1 stays readable: a log entry written by the build at commit 4e87a8e (when the
//! log stored the wire `Request`; the state machine now has request types of its own with the
//! same serde shape) decodes, re-encodes to the same bytes and applies; and a format-1 data
//! directory (everything in the redb file) migrates to format 2 (the entries in `raft-log/`,
//! the same JSON per record) keeping every entry, the vote and the snapshot, also when an
//! earlier migration was interrupted.
//!
//! `tests/data/log-entry-format1.json` is one row of the `log` table as that build wrote it
//! (`serde_json` of an openraft `Entry` whose payload is a `Proposal` of 14 commands: every
//! command kind, writes of every resource kind, optional fields present and absent). It is
//! never regenerated: a failure here means the on-disk format of an entry changed, which needs a
//! new [`DATA_FORMAT`] and a migration. Format 2 stores these bytes unchanged, one per record. The state machine crate's `tests/format.rs` checks a longer
//! log and a snapshot the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hivekeeper_coordinator::raft::{
    DATA_FILE_NAME, DATA_FORMAT, Entry, Identity, LOG_DIR_NAME, LogId, Member, Proposal,
    RaftConfig, SnapshotMeta, Storage, StoredMembership, TypeConfig, Vote,
};
use hivekeeper_coordinator::{Command, StateMachine};
use hivekeeper_segment_log::SegmentLog;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{Membership, RaftLogReader};
use redb::{ReadableDatabase, TableDefinition};

const LOG_ENTRY: &[u8] = include_bytes!("data/log-entry-format1.json");

fn proposal(entry: &Entry) -> &Proposal {
    match &entry.payload {
        openraft::EntryPayload::Normal(proposal) => proposal,
        other => panic!("the golden entry is a normal one, got {other:?}"),
    }
}

#[test]
fn a_format1_log_entry_decodes_and_encodes_to_the_same_bytes() {
    assert_eq!(
        DATA_FORMAT, 2,
        "format 2 keeps format 1's entry bytes: a new format needs its own migration test"
    );
    let entry: Entry = serde_json::from_slice(LOG_ENTRY).expect("a format 1 log entry decodes");
    assert_eq!(entry.log_id.index, 42);
    assert_eq!(proposal(&entry).commands.len(), 14);
    let encoded = serde_json::to_vec(&entry).expect("entries encode");
    assert!(
        encoded == LOG_ENTRY,
        "the log entry JSON changed shape:\n{}",
        String::from_utf8_lossy(&encoded)
    );
}

#[test]
fn a_format1_log_entry_applies() {
    let entry: Entry = serde_json::from_slice(LOG_ENTRY).expect("a format 1 log entry decodes");
    let proposal = proposal(&entry);
    let mut machine = StateMachine::default();
    let mut granted = 0;
    for command in &proposal.commands {
        let meta = proposal.meta(&entry.log_id, machine.applied_index());
        let (reply, _) = machine
            .apply(meta, command.clone())
            .expect("positions increase");
        if let Err(broken) = machine.check_invariants() {
            panic!("invariant broken after {command:?}: {broken}");
        }
        if let (Command::Request { .. }, hivekeeper_coordinator::Reply::Lease { .. }) =
            (command, &reply)
        {
            granted += 1;
        }
    }
    assert_eq!(granted, 1, "the entry's one lease.grant is granted");
    assert_eq!(machine.applied_index(), 42 + 13);
}

/// The format-1 tables, as the build before format 2 declared them.
const LOG_V1: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
const META_V1: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const SNAPSHOT_V1: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("snapshot");

/// The node the format-1 directory belongs to.
const NODE: u64 = 7;

/// What a format-1 directory holds, to compare after the migration.
struct Format1 {
    /// The `log` table's rows: the golden entry at 42, then copies of it at 43..=50.
    rows: Vec<(u64, Vec<u8>)>,
    /// The purged id (41), the committed id (45), the vote and the snapshot (at 41).
    last_purged: LogId,
    committed: LogId,
    vote: Vote,
    snapshot_meta: SnapshotMeta,
    snapshot_data: Vec<u8>,
}

fn log_id(index: u64) -> LogId {
    openraft::testing::log_id::<TypeConfig>(3, NODE, index)
}

/// Writes a data directory the way format 1 did: one redb file with the `log`, `meta` and
/// `snapshot` tables, entries 42..=50 above a purge at 41, a vote, a committed id and a
/// snapshot at 41.
fn write_format1(data_dir: &Path) -> Format1 {
    let golden: Entry = serde_json::from_slice(LOG_ENTRY).expect("the golden entry decodes");
    let mut rows = vec![(42, LOG_ENTRY.to_vec())];
    for index in 43..=50 {
        let mut entry = golden.clone();
        entry.log_id.index = index;
        rows.push((index, serde_json::to_vec(&entry).expect("encodes")));
    }
    let members = BTreeMap::from([(
        NODE,
        Member {
            name: "n7".into(),
            addr: String::new(),
        },
    )]);
    let membership =
        Membership::new(vec![BTreeSet::from([NODE])], members).expect("a valid membership");
    let format1 = Format1 {
        rows,
        last_purged: log_id(41),
        committed: log_id(45),
        vote: Vote::new(3, NODE),
        snapshot_meta: SnapshotMeta {
            last_log_id: Some(log_id(41)),
            last_membership: StoredMembership::new(Some(log_id(41)), membership),
        },
        snapshot_data: StateMachine::default().snapshot(),
    };
    std::fs::create_dir_all(data_dir).expect("mkdir");
    let db = redb::Database::create(data_dir.join(DATA_FILE_NAME)).expect("redb");
    let txn = db.begin_write().expect("write");
    {
        let mut log = txn.open_table(LOG_V1).expect("log");
        for (index, row) in &format1.rows {
            log.insert(index, row.as_slice()).expect("insert");
        }
        let mut meta = txn.open_table(META_V1).expect("meta");
        let identity = Identity {
            product: "hivekeeper".into(),
            format: 1,
            node_id: NODE,
        };
        meta.insert("identity", json(&identity).as_slice())
            .expect("insert");
        meta.insert("vote", json(&format1.vote).as_slice())
            .expect("insert");
        meta.insert("committed", json(&format1.committed).as_slice())
            .expect("insert");
        meta.insert("last_purged", json(&format1.last_purged).as_slice())
            .expect("insert");
        let mut snapshot = txn.open_table(SNAPSHOT_V1).expect("snapshot");
        snapshot
            .insert("meta", json(&format1.snapshot_meta).as_slice())
            .expect("insert");
        snapshot
            .insert("data", format1.snapshot_data.as_slice())
            .expect("insert");
    }
    txn.commit().expect("commit");
    format1
}

/// A record's JSON, as format 1 stored it.
fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("records encode")
}

/// Opens the directory as node 7 and checks it holds exactly what `format1` wrote: every
/// entry's bytes, the purged id, the vote and the snapshot. Closes it again.
async fn assert_holds(data_dir: &Path, format1: &Format1) {
    let storage = Storage::open(data_dir, NODE, &RaftConfig::DEFAULTS)
        .await
        .expect("the directory opens");
    let mut log_store = storage.log_store.clone();
    let entries = log_store
        .try_get_log_entries(0..100)
        .await
        .expect("the entries read");
    let bytes: Vec<(u64, Vec<u8>)> = entries
        .iter()
        .map(|entry| {
            (
                entry.log_id.index,
                serde_json::to_vec(entry).expect("encodes"),
            )
        })
        .collect();
    assert!(bytes == format1.rows, "the entries came through unchanged");
    let state = log_store.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id, Some(format1.last_purged));
    assert_eq!(state.last_log_id, Some(log_id(50)));
    assert_eq!(
        log_store.read_vote().await.expect("vote"),
        Some(format1.vote)
    );
    assert_eq!(
        log_store.read_committed().await.expect("committed"),
        Some(format1.committed)
    );
    let mut state_machine = storage.state_machine.clone();
    let snapshot = state_machine
        .get_current_snapshot()
        .await
        .expect("the snapshot reads")
        .expect("there is a snapshot");
    assert_eq!(snapshot.meta, format1.snapshot_meta);
    assert!(snapshot.snapshot.get_ref() == &format1.snapshot_data);
    storage.close().await.expect("closes");
}

/// The identity's format and the tables of the directory's redb file, read directly.
fn format_and_tables(data_dir: &Path) -> (u32, Vec<String>) {
    let db = redb::Database::open(data_dir.join(DATA_FILE_NAME)).expect("opens");
    let txn = db.begin_read().expect("read");
    let tables = txn
        .list_tables()
        .expect("tables")
        .map(|table| redb::TableHandle::name(&table).to_string())
        .collect();
    let meta = txn.open_table(META_V1).expect("meta");
    let identity: Identity = serde_json::from_slice(
        meta.get("identity")
            .expect("reads")
            .expect("an identity")
            .value(),
    )
    .expect("decodes");
    (identity.format, tables)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format1_directory_migrates_keeping_every_entry_the_vote_and_the_snapshot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let format1 = write_format1(dir.path());
    assert_eq!(format_and_tables(dir.path()).0, 1);
    assert_holds(dir.path(), &format1).await;
    let (format, tables) = format_and_tables(dir.path());
    assert_eq!(format, DATA_FORMAT);
    assert_eq!(tables, vec!["meta".to_string(), "snapshot".to_string()]);
    let log = SegmentLog::open(
        &dir.path().join(LOG_DIR_NAME),
        hivekeeper_segment_log::DEFAULTS,
    )
    .expect("the migrated log opens");
    assert!(
        log.read(..).expect("reads") == format1.rows,
        "raft-log/ holds the rows, byte for byte"
    );
    drop(log);
    // Opened again as format 2: the same.
    assert_holds(dir.path(), &format1).await;
}

/// A crash after the copy but before the redb transaction that clears the `log` table and
/// writes format 2 leaves a format-1 file beside a complete `raft-log/`; one after part of the
/// copy, beside a partial one with a torn tail. Either is deleted and the migration redone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_migration_is_redone() {
    for copied in [9usize, 3] {
        let dir = tempfile::tempdir().expect("temp dir");
        let format1 = write_format1(dir.path());
        let log_dir = dir.path().join(LOG_DIR_NAME);
        {
            let mut log =
                SegmentLog::open(&log_dir, hivekeeper_segment_log::DEFAULTS).expect("a log opens");
            log.append(
                format1.rows[..copied]
                    .iter()
                    .map(|(index, row)| (*index, row.as_slice())),
            )
            .expect("the copy");
        }
        if copied < format1.rows.len() {
            // A torn record after the partial copy: garbage past the last whole one.
            let segment = std::fs::read_dir(&log_dir)
                .expect("lists")
                .map(|entry| entry.expect("entry").path())
                .find(|path| path.extension().is_some_and(|ext| ext == "seg"))
                .expect("a segment");
            let mut bytes = std::fs::read(&segment).expect("reads");
            let end = hivekeeper_segment_log::SEGMENT_HEADER_BYTES as usize
                + format1.rows[..copied]
                    .iter()
                    .map(|(_, row)| {
                        row.len() + hivekeeper_segment_log::RECORD_HEADER_BYTES as usize
                    })
                    .sum::<usize>();
            bytes[end..end + 7].copy_from_slice(b"garbage");
            std::fs::write(&segment, bytes).expect("writes");
        }
        assert_eq!(format_and_tables(dir.path()).0, 1, "still format 1");
        assert_holds(dir.path(), &format1).await;
        assert_eq!(format_and_tables(dir.path()).0, DATA_FORMAT);
    }
}
