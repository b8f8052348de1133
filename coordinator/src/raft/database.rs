//! The data directory behind a node: the redb file, the Raft log's segment log beside it, their
//! identity record, opening (with the format-1 migration), reading and closing.
//!
//! ```text
//!  data_dir/
//!    hivekeeper.redb   redb: identity, vote, committed, last purged, snapshot (written rarely)
//!    raft-log/         hivekeeper-segment-log: the Raft log's entries, one pwrite + one
//!      LOCK              fdatasync per batch (docs/BENCHMARKS.md, "Durable append")
//!      00000000000000000001.seg ...
//! ```
//!
//! The redb file's tables:
//!
//! | table      | key              | value (JSON unless noted)                                  |
//! |------------|------------------|------------------------------------------------------------|
//! | `meta`     | `identity`       | [`Identity`]: product, format version, node id             |
//! |            | `vote`           | the last saved vote                                        |
//! |            | `committed`      | the last committed log id (written lazily, see `writer.rs`)|
//! |            | `last_purged`    | the log id the log was purged up to, inclusive             |
//! | `snapshot` | `meta`           | the latest snapshot's openraft `SnapshotMeta`              |
//! |            | `data`           | its bytes: `StateMachine::snapshot()` (JSON)               |
//! | `log`      | log index (u64)  | format 1 only: one openraft entry (JSON); format 2 keeps   |
//! |            |                  | the entries in `raft-log/`, the same JSON, one per record  |
//!
//! Every write goes through the one writer thread (`writer.rs`); this file opens both stores,
//! checks the identity record, migrates a format-1 directory and serves reads.
//!
//! Opening a format-1 directory migrates it (crash-safe by its order): any `raft-log/` left
//! beside a format-1 file is an interrupted migration and is deleted; the `log` table's rows
//! are copied into a fresh segment log and synced; then ONE redb transaction deletes the `log`
//! table and writes format 2. A crash before that commit leaves a format-1 file (redone at the
//! next open), after it a complete format-2 directory.
//!
//! Invariants:
//! 1. A file that redb cannot read, a redb file without Hivekeeper's identity, another node's
//!    file, or a newer format is refused with a [`RaftError`] naming the file; opening never
//!    panics on bad input (redb checks every page's checksum at open, the segment log every
//!    record's CRC).
//! 2. The identity record is written in the same transaction that creates the tables, and (in
//!    a fresh directory) only once `raft-log/` exists, so a format-2 file always has one beside
//!    it: a format-2 file without `raft-log/` is refused, not taken for an empty log.
//! 3. Log entries are contiguous from `last_purged + 1` (or from the first entry) to the last
//!    entry: appends, truncations and purges never leave a hole. The segment log may still
//!    hold entries at or below `last_purged` (it drops whole segments); reads clamp them. A
//!    purge past the log's end that did not complete is finished at open (`finish_purge`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use hivekeeper_segment_log::{SegmentLog, SegmentLogConfig};

use redb::{
    Database, DatabaseError, Durability, ReadTransaction, ReadableDatabase, ReadableTable,
    StorageError as RedbStorageError, TableDefinition,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::error::{RaftError, StoreError};
use super::types::{LogId, NodeId, SnapshotMeta};

/// The name of the data file inside a data directory.
pub const DATA_FILE_NAME: &str = "hivekeeper.redb";

/// The name of the Raft log's directory (a segment log) inside a data directory.
pub const LOG_DIR_NAME: &str = "raft-log";

/// Bytes of `log` rows copied per segment-log write during the format-1 migration, so memory
/// stays bounded whatever the log's size.
const MIGRATION_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// Version of the on-disk layout described at the top of this file. Format 1 (everything in
/// the redb file) is migrated when opened; any other is refused.
///
/// It covers the JSON inside the rows too: log entries (`Proposal`s of the state machine's
/// `Command`s, whose requests have the wire's shape) and snapshots (`StateMachine::snapshot`).
/// Golden bytes written by format 1 pin both (`tests/data_format.rs` here,
/// `state-machine/tests/format.rs`); a change that breaks them needs a new format and a
/// migration. Format 2 moved the entries, unchanged, from the `log` table to `raft-log/`.
pub const DATA_FORMAT: u32 = 2;

/// The format whose directories this build migrates to [`DATA_FORMAT`] when it opens them.
const DATA_FORMAT_MIGRATED: u32 = 1;

/// The value of [`Identity::product`]: tells a Hivekeeper file from any other redb file.
const PRODUCT: &str = "hivekeeper";

/// Log entries by index (format 1 only; read once, by the migration).
const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
/// Identity, vote, committed and purge records.
pub(crate) const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
/// The latest snapshot: `meta` and `data`.
pub(crate) const SNAPSHOT: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("snapshot");

pub(crate) const KEY_IDENTITY: &str = "identity";
pub(crate) const KEY_VOTE: &str = "vote";
pub(crate) const KEY_COMMITTED: &str = "committed";
pub(crate) const KEY_LAST_PURGED: &str = "last_purged";
pub(crate) const KEY_SNAPSHOT_META: &str = "meta";
pub(crate) const KEY_SNAPSHOT_DATA: &str = "data";

/// Who a data file belongs to, written once when the file is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Always `"hivekeeper"`.
    pub product: String,
    /// The on-disk layout version ([`DATA_FORMAT`] when written by this build).
    pub format: u32,
    /// The node the file belongs to; a node never opens another node's log.
    pub node_id: NodeId,
}

/// What a node needs from its file before openraft starts.
pub(crate) struct Loaded {
    /// The last committed log id saved, so openraft re-applies the log up to it at start.
    pub committed: Option<LogId>,
    /// The latest snapshot, if one was ever built or installed.
    pub snapshot: Option<(SnapshotMeta, Vec<u8>)>,
    /// The log id the log was purged up to, so reads clamp the entries a purge left behind.
    pub last_purged: Option<LogId>,
}

/// The open database and segment log, shared by the readers and the writer thread, and closed
/// explicitly at shutdown so the directory can be reopened at once (both lock their files while
/// open).
pub(crate) struct Db {
    /// The data file, for error messages.
    pub path: PathBuf,
    /// `None` once closed. Readers clone the `Arc` for the length of one read.
    database: RwLock<Option<Arc<Database>>>,
    /// The Raft log's entries; `None` once closed. Only the writer thread takes the write lock,
    /// for `write`, `truncate_from` and `purge_upto`; its `sync` and every read take the read
    /// lock, so a read never waits for an fdatasync (`writer.rs`).
    log: RwLock<Option<SegmentLog>>,
}

/// The redb page cache of a file opened for a tool (backup restore, inspection) rather than a
/// node, whose cache is `[node.raft] cache_mib`: the log is purged behind snapshots and the
/// state machine lives in memory, so the hot set is the log's tail and one snapshot. redb's
/// default is 1 GiB.
pub(crate) const TOOL_CACHE_BYTES: usize = 64 * 1024 * 1024;

impl Db {
    /// Opens (or creates) the data directory's file and Raft log, checks the identity and
    /// migrates a format-1 directory (see the module doc). Blocking: call it off the async
    /// runtime's workers (it reads the whole file and log to verify checksums and may fsync).
    pub(crate) fn open(
        data_dir: &Path,
        node_id: NodeId,
        cache_bytes: usize,
        log_config: SegmentLogConfig,
    ) -> Result<(Db, Loaded), RaftError> {
        let path = data_dir.join(DATA_FILE_NAME);
        let log_dir = data_dir.join(LOG_DIR_NAME);
        let database = redb::Builder::new()
            .set_check_integrity_on_open(true)
            .set_cache_size(cache_bytes)
            .create(&path)
            .map_err(|error| open_error(&path, error))?;
        let log = match check_identity(&path, &database, node_id)? {
            Found::Fresh => {
                let log = open_log(&log_dir, log_config)?;
                if let Some(last) = log.last_index() {
                    return Err(RaftError::LogDir {
                        path: log_dir,
                        reason: format!(
                            "it holds entries up to {last} beside a new, empty {DATA_FILE_NAME}: \
                             move it away or restore the data file"
                        ),
                    });
                }
                create_tables(&database, node_id)?;
                log
            }
            Found::Format(DATA_FORMAT_MIGRATED) => migrate(&path, &database, &log_dir, log_config)?,
            Found::Format(_) => {
                if !log_dir.is_dir() {
                    return Err(RaftError::LogDir {
                        path: log_dir,
                        reason: format!(
                            "it is missing, but {DATA_FILE_NAME} (format {DATA_FORMAT}) keeps \
                             its log entries there: restore it, or start from an empty data \
                             directory"
                        ),
                    });
                }
                open_log(&log_dir, log_config)?
            }
        };
        if let Some(torn) = log.recovered() {
            tracing::warn!(
                ?torn,
                "cut a torn write off the end of the Raft log (never acknowledged)"
            );
        }
        let db = Db {
            path: path.clone(),
            database: RwLock::new(Some(Arc::new(database))),
            log: RwLock::new(Some(log)),
        };
        let loaded = db.load().map_err(|error| match error {
            StoreError::Decode {
                what: "snapshot meta",
                reason,
            } => RaftError::Snapshot { path, reason },
            other => RaftError::Store(other),
        })?;
        db.finish_purge(loaded.last_purged)
            .map_err(RaftError::Store)?;
        Ok((db, loaded))
    }

    /// Finishes a purge past the log's end that did not complete (invariant 3): the purged id
    /// became durable in redb, then making the log continue after it failed (a full disk
    /// refusing the new segment, or a crash). The log then ends at or before the purged id,
    /// and the next append, at the purged index + 1, would not follow its last entry; so it
    /// continues after the purged id now, as the purge would have made it.
    fn finish_purge(&self, last_purged: Option<LogId>) -> Result<(), StoreError> {
        let Some(purged) = last_purged else {
            return Ok(());
        };
        self.with_log_mut(|log| {
            if log.next_index().is_some_and(|next| next > purged.index) {
                return Ok(());
            }
            tracing::warn!(
                purged = purged.index,
                log_next = log.next_index(),
                "finishing a purge of the Raft log that did not complete: it continues after \
                 the purged entries"
            );
            log.purge_upto(purged.index).map_err(StoreError::from)
        })
    }

    /// Runs `read` on the Raft log under its read lock (never behind an fdatasync: `sync` takes
    /// the read lock too).
    pub(crate) fn with_log<T>(
        &self,
        read: impl FnOnce(&SegmentLog) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let log = self.log.read().unwrap_or_else(PoisonError::into_inner);
        read(log.as_ref().ok_or(StoreError::Closed)?)
    }

    /// Runs `change` on the Raft log under its write lock (the writer thread only).
    pub(crate) fn with_log_mut<T>(
        &self,
        change: impl FnOnce(&mut SegmentLog) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut log = self.log.write().unwrap_or_else(PoisonError::into_inner);
        change(log.as_mut().ok_or(StoreError::Closed)?)
    }

    /// Closes the Raft log (releasing its LOCK file); later reads answer `Closed`.
    pub(crate) fn close_log(&self) {
        drop(
            self.log
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }

    /// The database, unless closed.
    pub(crate) fn database(&self) -> Result<Arc<Database>, StoreError> {
        self.database
            .read()
            .map_err(|_| StoreError::Closed)?
            .clone()
            .ok_or(StoreError::Closed)
    }

    /// Begins a read transaction (sees every commit that returned before it).
    pub(crate) fn read(&self) -> Result<ReadTransaction, StoreError> {
        self.database()?.begin_read().map_err(StoreError::redb)
    }

    /// Takes the database out so no new reader can start; the caller closes it once the last
    /// reader has let go.
    pub(crate) fn take(&self) -> Option<Arc<Database>> {
        self.database.write().ok().and_then(|mut slot| slot.take())
    }

    fn load(&self) -> Result<Loaded, StoreError> {
        let txn = self.read()?;
        let meta = txn.open_table(META).map_err(StoreError::redb)?;
        let committed = get_json(&meta, KEY_COMMITTED, "committed log id")?;
        let last_purged = get_json(&meta, KEY_LAST_PURGED, "last purged log id")?;
        let snapshot_table = txn.open_table(SNAPSHOT).map_err(StoreError::redb)?;
        let snapshot_meta: Option<SnapshotMeta> =
            get_json(&snapshot_table, KEY_SNAPSHOT_META, "snapshot meta")?;
        let snapshot = match snapshot_meta {
            None => None,
            Some(snapshot_meta) => {
                let data = snapshot_table
                    .get(KEY_SNAPSHOT_DATA)
                    .map_err(StoreError::redb)?
                    .map(|data| data.value().to_vec())
                    .ok_or_else(|| StoreError::Decode {
                        what: "snapshot meta",
                        reason: "snapshot metadata without snapshot data".into(),
                    })?;
                Some((snapshot_meta, data))
            }
        };
        Ok(Loaded {
            committed,
            snapshot,
            last_purged,
        })
    }
}

/// Reads and decodes a JSON record, `None` when absent.
pub(crate) fn get_json<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
    what: &'static str,
) -> Result<Option<T>, StoreError> {
    let Some(bytes) = table.get(key).map_err(StoreError::redb)? else {
        return Ok(None);
    };
    serde_json::from_slice(bytes.value())
        .map(Some)
        .map_err(|error| StoreError::Decode {
            what,
            reason: error.to_string(),
        })
}

/// Encodes a record as JSON. The records are plain data (ids, votes, openraft metadata), so this
/// cannot fail.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("raft records are plain data and always serialize")
}

/// Turns redb's open error into one that names the file and says what to do.
fn open_error(path: &Path, error: DatabaseError) -> RaftError {
    let path = path.to_path_buf();
    match error {
        DatabaseError::DatabaseAlreadyOpen => RaftError::InUse { path },
        // redb reports a file that is not a redb database ("magic number mismatch") as an I/O
        // error of kind InvalidData: that is corruption, not a permission or disk problem.
        DatabaseError::Storage(RedbStorageError::Io(source))
            if source.kind() == std::io::ErrorKind::InvalidData =>
        {
            RaftError::Corrupt {
                path,
                reason: source.to_string(),
            }
        }
        DatabaseError::Storage(RedbStorageError::Io(source)) => RaftError::Io { path, source },
        DatabaseError::UpgradeRequired(version) => RaftError::Corrupt {
            path,
            reason: format!("redb file format {version} needs an upgrade this build cannot do"),
        },
        other => RaftError::Corrupt {
            path,
            reason: other.to_string(),
        },
    }
}

/// What [`check_identity`] found.
enum Found {
    /// A new file: no tables yet.
    Fresh,
    /// A Hivekeeper file of this node, in this format (one this build reads).
    Format(u32),
}

/// Checks the identity record and the tables, writing nothing.
fn check_identity(path: &Path, database: &Database, node_id: NodeId) -> Result<Found, RaftError> {
    let foreign = |reason: String| RaftError::Foreign {
        path: path.to_path_buf(),
        reason,
    };
    let store = |error: StoreError| RaftError::Store(error);
    let txn = database
        .begin_read()
        .map_err(|error| store(StoreError::redb(error)))?;
    let tables: Vec<String> = txn
        .list_tables()
        .map_err(|error| store(StoreError::redb(error)))?
        .map(|table| redb::TableHandle::name(&table).to_string())
        .collect();
    let ours = [
        redb::TableHandle::name(&LOG).to_string(),
        redb::TableHandle::name(&META).to_string(),
        redb::TableHandle::name(&SNAPSHOT).to_string(),
    ];
    if let Some(other) = tables.iter().find(|name| !ours.contains(name)) {
        return Err(foreign(format!("it has a table {other:?}")));
    }
    if tables.is_empty() {
        return Ok(Found::Fresh);
    }
    let meta = txn
        .open_table(META)
        .map_err(|error| foreign(format!("its meta table is not Hivekeeper's: {error}")))?;
    let found: Option<Identity> = get_json(&meta, KEY_IDENTITY, "identity record")
        .map_err(|error| foreign(error.to_string()))?;
    let Some(identity) = found else {
        return Err(foreign("it has no identity record".to_string()));
    };
    if identity.product != PRODUCT {
        return Err(foreign(format!("it belongs to {:?}", identity.product)));
    }
    if identity.format != DATA_FORMAT && identity.format != DATA_FORMAT_MIGRATED {
        return Err(RaftError::Format {
            path: path.to_path_buf(),
            found: identity.format,
            supported: DATA_FORMAT,
        });
    }
    if identity.node_id != node_id {
        return Err(RaftError::WrongNode {
            path: path.to_path_buf(),
            expected: node_id,
            found: identity.node_id,
        });
    }
    txn.open_table(SNAPSHOT)
        .map_err(|error| foreign(format!("its snapshot table is not Hivekeeper's: {error}")))?;
    if identity.format == DATA_FORMAT_MIGRATED {
        txn.open_table(LOG)
            .map_err(|error| foreign(format!("its log table is not Hivekeeper's: {error}")))?;
    }
    Ok(Found::Format(identity.format))
}

/// Writes a fresh file's tables and identity record (format [`DATA_FORMAT`]) in one durable
/// transaction (invariant 2: the caller has created `raft-log/` first).
fn create_tables(database: &Database, node_id: NodeId) -> Result<(), RaftError> {
    let mut txn = database.begin_write().map_err(StoreError::redb)?;
    txn.set_durability(Durability::Immediate)
        .map_err(StoreError::redb)?;
    {
        let mut meta = txn.open_table(META).map_err(StoreError::redb)?;
        write_identity(&mut meta, node_id)?;
        txn.open_table(SNAPSHOT).map_err(StoreError::redb)?;
    }
    txn.commit().map_err(StoreError::redb)?;
    Ok(())
}

/// Writes the identity record of format [`DATA_FORMAT`].
fn write_identity(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    node_id: NodeId,
) -> Result<(), StoreError> {
    let identity = Identity {
        product: PRODUCT.to_string(),
        format: DATA_FORMAT,
        node_id,
    };
    meta.insert(KEY_IDENTITY, to_json(&identity).as_slice())
        .map_err(StoreError::redb)?;
    Ok(())
}

/// Opens (or creates) the Raft log; damage is an error naming the segment and offset.
fn open_log(log_dir: &Path, config: SegmentLogConfig) -> Result<SegmentLog, RaftError> {
    SegmentLog::open(log_dir, config).map_err(|error| RaftError::Store(error.into()))
}

/// Moves a format-1 file's `log` table into a fresh `raft-log/` (module doc: the order that
/// makes it crash-safe) and returns the open log.
fn migrate(
    path: &Path,
    database: &Database,
    log_dir: &Path,
    log_config: SegmentLogConfig,
) -> Result<SegmentLog, RaftError> {
    if log_dir.exists() {
        tracing::warn!(
            dir = %log_dir.display(),
            "an interrupted migration to data format {DATA_FORMAT} left a Raft log; redoing it"
        );
        std::fs::remove_dir_all(log_dir).map_err(|source| RaftError::Io {
            path: log_dir.to_path_buf(),
            source,
        })?;
    }
    let mut log = open_log(log_dir, log_config)?;
    let (copied, last_purged) = {
        let txn = database.begin_read().map_err(StoreError::redb)?;
        let table = txn.open_table(LOG).map_err(StoreError::redb)?;
        let meta = txn.open_table(META).map_err(StoreError::redb)?;
        let last_purged: Option<LogId> = get_json(&meta, KEY_LAST_PURGED, "last purged log id")?;
        let mut batch: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut batch_bytes = 0;
        let mut copied = 0u64;
        for row in table.iter().map_err(StoreError::redb)? {
            let (index, row) = row.map_err(StoreError::redb)?;
            batch_bytes += row.value().len();
            batch.push((index.value(), row.value().to_vec()));
            copied += 1;
            if batch_bytes >= MIGRATION_BATCH_BYTES {
                log.write(batch.drain(..)).map_err(StoreError::from)?;
                batch_bytes = 0;
            }
        }
        log.write(batch).map_err(StoreError::from)?;
        (copied, last_purged)
    };
    if let (None, Some(purged)) = (log.last_index(), last_purged) {
        // An empty log continues after the purged entries, as the old table did.
        log.purge_upto(purged.index).map_err(StoreError::from)?;
    }
    log.sync().map_err(StoreError::from)?;
    let mut txn = database.begin_write().map_err(StoreError::redb)?;
    txn.set_durability(Durability::Immediate)
        .map_err(StoreError::redb)?;
    let identity: Identity = {
        let meta = txn.open_table(META).map_err(StoreError::redb)?;
        get_json(&meta, KEY_IDENTITY, "identity record")?.ok_or_else(|| RaftError::Foreign {
            path: path.to_path_buf(),
            reason: "it has no identity record".into(),
        })?
    };
    txn.delete_table(LOG).map_err(StoreError::redb)?;
    {
        let mut meta = txn.open_table(META).map_err(StoreError::redb)?;
        write_identity(&mut meta, identity.node_id)?;
    }
    txn.commit().map_err(StoreError::redb)?;
    tracing::info!(
        entries = copied,
        dir = %log_dir.display(),
        "migrated the Raft log from data format {DATA_FORMAT_MIGRATED} to {DATA_FORMAT}"
    );
    Ok(log)
}
