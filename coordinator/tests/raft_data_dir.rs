//! Opening a data directory that is not right for this node is a clear error naming the path,
//! never a panic and never a silent overwrite: garbage in the data file, a redb file of another
//! program, another node's data, a newer data format, a file already open, a directory that
//! cannot be created or written, a Raft log (`raft-log/`) missing beside its data file or
//! damaged in the middle.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_data_dir
//! ```

mod raft_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hivekeeper_coordinator::raft::{
    self, DATA_FILE_NAME, LOG_DIR_NAME, RaftConfig, RaftError, RaftHandle, StoreError,
};
use hivekeeper_segment_log::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use raft_support::{WAIT_S, tempdir, within};

async fn open(dir: &Path, node_id: u64) -> Result<RaftHandle, RaftError> {
    within(
        WAIT_S,
        "open",
        raft::open(dir, node_id, &RaftConfig::DEFAULTS),
    )
    .await
    .map(|(node, _applied)| node)
}

/// Opens `dir` as `node_id` and shuts the node down again, creating the data file.
async fn create(dir: &Path, node_id: u64) {
    let node = open(dir, node_id).await.expect("a fresh directory opens");
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
}

fn expect_error(opened: Result<RaftHandle, RaftError>) -> RaftError {
    match opened {
        Ok(_) => panic!("the data directory must be refused"),
        Err(error) => error,
    }
}

const META: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("meta");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_data_file_is_refused() {
    let dir = tempdir();
    let garbage: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::write(dir.path().join(DATA_FILE_NAME), garbage).expect("write garbage");
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::Corrupt { .. }), "{error:?}");
    assert!(error.to_string().contains(DATA_FILE_NAME), "{error}");

    // A text file is refused the same way.
    let dir = tempdir();
    std::fs::write(dir.path().join(DATA_FILE_NAME), "not a database\n").expect("write");
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::Corrupt { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_nodes_data_is_refused() {
    let dir = tempdir();
    create(dir.path(), 1).await;
    let error = expect_error(open(dir.path(), 2).await);
    assert!(
        matches!(
            error,
            RaftError::WrongNode {
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("belongs to node 1"), "{error}");
    // The refusal changed nothing: node 1 still opens it.
    create(dir.path(), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_data_format_is_refused() {
    let dir = tempdir();
    create(dir.path(), 1).await;
    {
        let db = redb::Database::create(dir.path().join(DATA_FILE_NAME)).expect("redb");
        let txn = db.begin_write().expect("write");
        {
            let mut meta = txn.open_table(META).expect("meta");
            let identity = br#"{"product":"hivekeeper","format":99,"node_id":1}"#;
            meta.insert("identity", identity.as_slice())
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let error = expect_error(open(dir.path(), 1).await);
    assert!(
        matches!(error, RaftError::Format { found: 99, .. }),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redb_file_of_another_program_is_refused_and_left_alone() {
    let dir = tempdir();
    let path = dir.path().join(DATA_FILE_NAME);
    {
        let db = redb::Database::create(&path).expect("redb");
        let txn = db.begin_write().expect("write");
        {
            let table: redb::TableDefinition<'_, u64, u64> = redb::TableDefinition::new("orders");
            txn.open_table(table)
                .expect("table")
                .insert(1, 2)
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::Foreign { .. }), "{error:?}");

    // A redb file with a `meta` table of the right type but no identity is foreign too.
    let dir = tempdir();
    {
        let db = redb::Database::create(dir.path().join(DATA_FILE_NAME)).expect("redb");
        let txn = db.begin_write().expect("write");
        txn.open_table(META)
            .expect("meta")
            .insert("something", b"else".as_slice())
            .expect("insert");
        txn.commit().expect("commit");
    }
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::Foreign { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_file_already_open_is_refused() {
    let dir = tempdir();
    let first = open(dir.path(), 1).await.expect("opens");
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::InUse { .. }), "{error:?}");
    within(WAIT_S, "shutdown", first.shutdown())
        .await
        .expect("a clean shutdown");
    // Once shut down, the file opens again at once.
    create(dir.path(), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_cannot_be_made_is_refused() {
    // A path through a regular file: refused even for root.
    let error = expect_error(open(Path::new("/dev/null/hivekeeper"), 1).await);
    assert!(matches!(error, RaftError::DataDir { .. }), "{error:?}");
    assert!(
        error.to_string().contains("/dev/null/hivekeeper"),
        "{error}"
    );

    // The data directory is a regular file.
    let dir = tempdir();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").expect("write");
    let error = expect_error(open(&file, 1).await);
    assert!(matches!(error, RaftError::DataDir { .. }), "{error:?}");

    // The data file's name is taken by a directory.
    let dir = tempdir();
    std::fs::create_dir(dir.path().join(DATA_FILE_NAME)).expect("mkdir");
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::Io { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_directory_is_refused_unless_privileged() {
    let dir = tempdir();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).expect("chmod");
    // Root (as in CI containers) ignores the mode bits: then there is nothing to refuse.
    let privileged = std::fs::write(locked.join("probe"), "x").is_ok();
    let opened = open(&locked.join("node"), 1).await;
    let opened_in_place = open(&locked, 1).await;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    if privileged {
        println!("running privileged: mode 0500 does not stop this user; only checked it opens");
        for node in [opened, opened_in_place] {
            let node = node.expect("a privileged user can open it");
            within(WAIT_S, "shutdown", node.shutdown())
                .await
                .expect("a clean shutdown");
        }
        return;
    }
    let error = expect_error(opened);
    assert!(matches!(error, RaftError::DataDir { .. }), "{error:?}");
    let error = expect_error(opened_in_place);
    assert!(matches!(error, RaftError::Io { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_pages_are_refused_or_harmless_never_a_panic() {
    let dir = tempdir();
    let config = RaftConfig {
        snapshot_every_entries: 0,
        ..RaftConfig::DEFAULTS
    };
    node_with_a_snapshot_and_entries(dir.path(), &config).await;
    let original = std::fs::read(dir.path().join(DATA_FILE_NAME)).expect("read");

    // Flip 64 bytes at the start of every 4 KiB page, one page at a time. redb verifies every
    // page's checksum at open, so a damaged live page is `Corrupt`; a damaged free page is
    // harmless. A panic would surface as a failed join of the task that opened it.
    let (mut refused, mut opened) = (0, 0);
    for offset in (0..original.len()).step_by(4096) {
        let damaged_dir = tempdir();
        let mut bytes = original.clone();
        for byte in &mut bytes[offset..(offset + 64).min(original.len())] {
            *byte ^= 0x5a;
        }
        std::fs::write(damaged_dir.path().join(DATA_FILE_NAME), &bytes).expect("write");
        copy_log(dir.path(), damaged_dir.path());
        let path = damaged_dir.path().to_path_buf();
        let config = config.clone();
        let result = within(
            WAIT_S,
            "open a damaged file",
            tokio::spawn(async move { raft::open(&path, 1, &config).await }),
        )
        .await
        .unwrap_or_else(|panic| panic!("opening with page {offset} damaged panicked: {panic}"));
        match result {
            Ok((node, _applied)) => {
                opened += 1;
                within(WAIT_S, "shutdown", node.shutdown())
                    .await
                    .expect("a clean shutdown");
            }
            Err(RaftError::Corrupt { .. } | RaftError::Snapshot { .. } | RaftError::Fatal(_)) => {
                refused += 1;
            }
            Err(other) => panic!("page {offset} damaged: unexpected error {other:?}"),
        }
    }
    println!("{refused} damaged files refused, {opened} opened (damage in free pages)");
    assert!(refused > 0, "damage to live pages is detected");
}

/// The segment files of a data directory's Raft log, oldest first.
fn segments(data_dir: &Path) -> Vec<std::path::PathBuf> {
    let mut paths: Vec<_> = std::fs::read_dir(data_dir.join(LOG_DIR_NAME))
        .expect("the log directory lists")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    paths.sort();
    paths
}

/// Copies `from`'s Raft log into `to`, each segment cut after its last non-zero byte plus one
/// page of zeros (a preallocated segment is 64 MiB, mostly zeros; a shorter file is a segment
/// of that capacity, and the log continues in a new one when it is full).
fn copy_log(from: &Path, to: &Path) {
    let log_dir = to.join(LOG_DIR_NAME);
    std::fs::create_dir_all(&log_dir).expect("mkdir");
    for segment in segments(from) {
        let mut bytes = std::fs::read(&segment).expect("read");
        let used = bytes
            .iter()
            .rposition(|&byte| byte != 0)
            .map_or(0, |at| at + 1);
        bytes.truncate((used + 4096).min(bytes.len()));
        std::fs::write(log_dir.join(segment.file_name().expect("a name")), bytes).expect("write");
    }
}

/// A record of the Raft log damaged in the middle (valid records after it) is not a torn tail:
/// the node refuses to start, naming the segment file and the byte offset, rather than drop the
/// acknowledged entries after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_crc_in_the_middle_of_the_raft_log_is_refused_naming_the_file() {
    let dir = tempdir();
    node_with_a_snapshot_and_entries(dir.path(), &RaftConfig::DEFAULTS).await;
    let segment = segments(dir.path()).pop().expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    // A payload byte of the first record: its CRC fails, and whole records follow it.
    let record = SEGMENT_HEADER_BYTES;
    bytes[(record + RECORD_HEADER_BYTES + 2) as usize] ^= 0x01;
    std::fs::write(&segment, bytes).expect("write");
    let error = expect_error(open(dir.path(), 1).await);
    match &error {
        RaftError::Store(StoreError::LogCorrupt { path, offset, .. }) => {
            assert_eq!(path, &segment);
            assert_eq!(*offset, record);
        }
        other => panic!("expected a corrupt Raft log, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&segment.display().to_string())
            && message.contains(&format!("damaged record at byte {record}"))
            && message.contains("CRC-32C mismatch")
            && message.contains("refusing to start"),
        "{message}"
    );
}

/// A format-2 data file without its `raft-log/` is refused, never taken for an empty log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_file_without_its_raft_log_is_refused() {
    let dir = tempdir();
    create(dir.path(), 1).await;
    std::fs::remove_dir_all(dir.path().join(LOG_DIR_NAME)).expect("rm");
    let error = expect_error(open(dir.path(), 1).await);
    assert!(matches!(error, RaftError::LogDir { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains(&dir.path().join(LOG_DIR_NAME).display().to_string()),
        "{error}"
    );
}

/// A single node (id 1) in `dir` with 20 leases granted and a snapshot after the 11th, shut
/// down cleanly: a redb file with a snapshot and a Raft log with entries after it.
async fn node_with_a_snapshot_and_entries(dir: &Path, config: &RaftConfig) {
    let node = raft_support::start_single(dir, config).await;
    for n in 0..20 {
        let agent = format!("drone-{n}");
        within(
            WAIT_S,
            "grant",
            node.propose(raft_support::request(
                &agent,
                "g",
                raft_support::lease_grant(60_000),
            )),
        )
        .await
        .expect("committed");
        if n == 10 {
            within(WAIT_S, "snapshot", node.snapshot_now(raft_support::WAIT))
                .await
                .expect("snapshot");
        }
    }
    raft_support::stop(node).await;
}
