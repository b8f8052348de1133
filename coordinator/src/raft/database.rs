//! The redb file behind a node: its tables, its identity record, opening, reading and closing.
//!
//! One file, `data_dir/hivekeeper.redb`, holds everything a node persists:
//!
//! | table      | key              | value (JSON unless noted)                                  |
//! |------------|------------------|------------------------------------------------------------|
//! | `log`      | log index (u64)  | one openraft entry; the command inside is the wire JSON    |
//! | `meta`     | `identity`       | [`Identity`]: product, format version, node id             |
//! |            | `vote`           | the last saved vote                                        |
//! |            | `committed`      | the last committed log id (written lazily, see `writer.rs`)|
//! |            | `last_purged`    | the log id the log was purged up to, inclusive             |
//! | `snapshot` | `meta`           | the latest snapshot's openraft `SnapshotMeta`              |
//! |            | `data`           | its bytes: `StateMachine::snapshot()` (JSON)               |
//!
//! Every write goes through the one writer thread (`writer.rs`); this file opens the database,
//! checks the identity record and serves reads.
//!
//! Invariants:
//! 1. A file that redb cannot read, a redb file without Hivekeeper's identity, another node's
//!    file, or a newer format is refused with a [`RaftError`] naming the file; opening never
//!    panics on bad input (redb checks every page's checksum at open).
//! 2. The identity record is written in the same transaction that creates the tables, so a
//!    Hivekeeper file always has one.
//! 3. `log` keys are contiguous from `last_purged + 1` (or from the first entry) to the last
//!    entry: appends, truncations and purges never leave a hole.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

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

/// Version of the on-disk layout described at the top of this file. A reader refuses any other.
///
/// It covers the JSON inside the rows too: log entries (`Proposal`s of the state machine's
/// `Command`s, whose requests have the wire's shape) and snapshots (`StateMachine::snapshot`).
/// Golden bytes written by format 1 pin both (`tests/data_format.rs` here,
/// `state-machine/tests/format.rs`); a change that breaks them needs a new format and a
/// migration.
pub const DATA_FORMAT: u32 = 1;

/// The value of [`Identity::product`]: tells a Hivekeeper file from any other redb file.
const PRODUCT: &str = "hivekeeper";

/// Log entries by index.
pub(crate) const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
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
}

/// The open database, shared by the readers and the writer thread, and closed explicitly at
/// shutdown so the file can be reopened at once (redb locks it while open).
pub(crate) struct Db {
    /// The data file, for error messages.
    pub path: PathBuf,
    /// `None` once closed. Readers clone the `Arc` for the length of one read.
    database: RwLock<Option<Arc<Database>>>,
}

/// The redb page cache of a file opened for a tool (backup restore, inspection) rather than a
/// node, whose cache is `[node.raft] cache_mib`: the log is purged behind snapshots and the
/// state machine lives in memory, so the hot set is the log's tail and one snapshot. redb's
/// default is 1 GiB.
pub(crate) const TOOL_CACHE_BYTES: usize = 64 * 1024 * 1024;

impl Db {
    /// Opens (or creates) the data file and checks its identity. Blocking: call it off the
    /// async runtime's workers (it reads the whole file to verify checksums and may fsync).
    pub(crate) fn open(
        path: &Path,
        node_id: NodeId,
        cache_bytes: usize,
    ) -> Result<(Db, Loaded), RaftError> {
        let database = redb::Builder::new()
            .set_check_integrity_on_open(true)
            .set_cache_size(cache_bytes)
            .create(path)
            .map_err(|error| open_error(path, error))?;
        check_identity(path, &database, node_id)?;
        let db = Db {
            path: path.to_path_buf(),
            database: RwLock::new(Some(Arc::new(database))),
        };
        let loaded = db.load().map_err(|error| match error {
            StoreError::Decode {
                what: "snapshot meta",
                reason,
            } => RaftError::Snapshot {
                path: path.to_path_buf(),
                reason,
            },
            other => RaftError::Store(other),
        })?;
        Ok((db, loaded))
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

/// Checks the identity record, writing it (with the tables) into a fresh file.
fn check_identity(path: &Path, database: &Database, node_id: NodeId) -> Result<(), RaftError> {
    let foreign = |reason: String| RaftError::Foreign {
        path: path.to_path_buf(),
        reason,
    };
    let store = |error: StoreError| RaftError::Store(error);
    let mut txn = database
        .begin_write()
        .map_err(|error| store(StoreError::redb(error)))?;
    txn.set_durability(Durability::Immediate)
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
    let fresh = tables.is_empty();
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|error| foreign(format!("its meta table is not Hivekeeper's: {error}")))?;
        let found: Option<Identity> = get_json(&meta, KEY_IDENTITY, "identity record")
            .map_err(|error| foreign(error.to_string()))?;
        match found {
            Some(identity) => {
                if identity.product != PRODUCT {
                    return Err(foreign(format!("it belongs to {:?}", identity.product)));
                }
                if identity.format != DATA_FORMAT {
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
            }
            None if fresh => {
                let identity = Identity {
                    product: PRODUCT.to_string(),
                    format: DATA_FORMAT,
                    node_id,
                };
                meta.insert(KEY_IDENTITY, to_json(&identity).as_slice())
                    .map_err(|error| store(StoreError::redb(error)))?;
            }
            None => return Err(foreign("it has no identity record".to_string())),
        }
        txn.open_table(LOG)
            .map_err(|error| foreign(format!("its log table is not Hivekeeper's: {error}")))?;
        txn.open_table(SNAPSHOT)
            .map_err(|error| foreign(format!("its snapshot table is not Hivekeeper's: {error}")))?;
    }
    txn.commit()
        .map_err(|error| store(StoreError::redb(error)))?;
    Ok(())
}
