//! Online backup in Raft's terms: the state at one applied log index, taken out of a running
//! leader, and put into a new member's empty data directory so that a new cluster starts on it.
//!
//! ```text
//!  take (a running leader):
//!    RaftHandle::applied_state ─▶ read-index round (everything committed is applied here)
//!      ─▶ one lock on the machine: a copy of it + the id of the last entry applied into it
//!      ─▶ AppliedState { index, term, machine }   (serialized by the caller, off the lock)
//!
//!  put (offline, `hivekeeper snapshot restore`, the same file on every new member):
//!    seed_data_dir(dir, node_id, members, Seed { index, term, state })
//!      ─▶ a fresh data file (identity) and an empty raft-log/ ─▶ one transaction, fsynced:
//!           snapshot meta: last_log_id = (term, node 0, index), membership = `members`
//!           snapshot data: the state's bytes
//!           last_purged = committed = that log id, vote = (term, node 0, not committed)
//!      ─▶ then the segment log purged up to `index`: empty, continuing at `index + 1`
//! ```
//!
//! Why every new member gets the same seed (etcd's `etcdutl snapshot restore` does the same):
//! a seeded data directory is an initialized Raft node whose log was purged up to the seed, so
//! every member starts from the same snapshot, log id and membership and they agree without a
//! snapshot transfer. openraft's `initialize` is never called on it (the node layer checks
//! `is_initialized` first, which a purged log makes true), so its refusal on non-empty storage
//! does not arise.
//!
//! Why the seed keeps the old cluster's term, in the log id and in the vote: the machine
//! ignores an `ExpireLeases` or `ExpireWaits` proposed in a term older than the newest term it
//! applied (a deposed leader cannot expire), and log ids must increase. With the vote at the
//! seed's term, the new cluster's first election is for the next term, so its entries follow
//! the seed and its expiries count. The vote is for node 0, which is no member (ids derived
//! from names are never 0), so nobody has a vote in the seed's term.
//!
//! Invariants:
//! 1. [`RaftHandle::applied_state`]'s machine is exactly the state after the entry it names,
//!    read after a read-index round: a linearizable snapshot.
//! 2. [`seed_data_dir`] never writes into an existing data file, and writes the whole seed in
//!    one durable transaction: a seeded directory is complete or absent. The empty Raft log is
//!    purged to the seed's index after that transaction (the purged id durable first, as the
//!    writer does it), so it continues where the seed ends; a crash before that leaves an
//!    empty log with no segment, which the first append starts anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use openraft::Membership;
use openraft::type_config::alias::LeaderIdOf;
use openraft::vote::RaftLeaderIdExt;
use redb::Durability;

use super::RaftHandle;
use super::database::{
    DATA_FILE_NAME, Db, KEY_COMMITTED, KEY_LAST_PURGED, KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META,
    KEY_VOTE, META, SNAPSHOT, TOOL_CACHE_BYTES, to_json,
};
use super::error::{RaftError, StoreError};
use super::types::{LogId, Member, NodeId, SnapshotMeta, StoredMembership, Vote};
use crate::state_machine::StateMachine;

/// The replicated state after one applied entry, taken on a leader for a backup.
#[derive(Debug, Clone)]
pub struct AppliedState {
    /// The log index of the last entry applied into `machine` (0 when none was).
    pub index: u64,
    /// That entry's term (0 when none was applied).
    pub term: u64,
    /// A copy of the machine after that entry.
    pub machine: StateMachine,
}

impl RaftHandle {
    /// The state as applied here after a read-index round: this node confirmed with a quorum
    /// that it leads and has applied everything committed before the round, so the copy is a
    /// linearizable snapshot (invariant 1). Errors as [`RaftHandle::confirm_leadership`] does
    /// on a node that does not lead.
    pub async fn applied_state(&self) -> Result<AppliedState, RaftError> {
        self.confirm_leadership().await?;
        let (machine, last_applied) = self.state_machine.applied_copy()?;
        Ok(AppliedState {
            index: last_applied.map_or(0, |log_id| log_id.index),
            term: last_applied.map_or(0, |log_id| log_id.leader_id.term),
            machine,
        })
    }
}

/// What a new member's data directory starts from: a backup's log position and state bytes.
#[derive(Debug, Clone, Copy)]
pub struct Seed<'a> {
    /// The log index the state was taken at.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
    /// `StateMachine::snapshot()` bytes of the state at `index` (checked by the caller).
    pub state: &'a [u8],
}

/// Writes a new data file in `data_dir` for member `node_id` of a new cluster whose voters are
/// `members`, holding `seed` as its latest snapshot (invariant 2). Blocking (it fsyncs): call
/// it off an async runtime's workers. An existing data file is refused, never changed.
pub fn seed_data_dir(
    data_dir: &Path,
    node_id: NodeId,
    members: &BTreeMap<NodeId, Member>,
    seed: Seed<'_>,
) -> Result<(), RaftError> {
    let path = data_dir.join(DATA_FILE_NAME);
    if path.exists() {
        return Err(RaftError::Io {
            path,
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a data file is there already; a restore seeds an empty data directory only",
            ),
        });
    }
    std::fs::create_dir_all(data_dir).map_err(|source| RaftError::DataDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    // The file is closed when `db` is dropped on return (nothing else holds it).
    // The log's segments get the default size; a node configured with smaller ones uses
    // them for every segment after the first (`log_segment_kib`).
    let (db, _loaded) = Db::open(
        data_dir,
        node_id,
        TOOL_CACHE_BYTES,
        hivekeeper_segment_log::DEFAULTS,
    )?;
    write_seed(&db, members, seed)?;
    db.with_log_mut(|log| Ok(log.purge_upto(seed.index)?))?;
    Ok(())
}

/// The seed's records, in one durable transaction.
fn write_seed(
    db: &Db,
    members: &BTreeMap<NodeId, Member>,
    seed: Seed<'_>,
) -> Result<(), RaftError> {
    let leader = LeaderIdOf::<super::types::TypeConfig>::new_committed(seed.term, 0);
    let log_id = LogId::new(leader, seed.index);
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let membership = Membership::new(vec![voters], members.clone()).map_err(|error| {
        RaftError::Refused(format!("the restored membership is not valid: {error}"))
    })?;
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
    };
    let vote = Vote::new(seed.term, 0);
    let database = db.database()?;
    let mut txn = database.begin_write().map_err(StoreError::redb)?;
    txn.set_durability(Durability::Immediate)
        .map_err(StoreError::redb)?;
    {
        let mut records = txn.open_table(META).map_err(StoreError::redb)?;
        insert(&mut records, KEY_VOTE, &to_json(&vote))?;
        insert(&mut records, KEY_LAST_PURGED, &to_json(&log_id))?;
        insert(&mut records, KEY_COMMITTED, &to_json(&log_id))?;
        let mut snapshot = txn.open_table(SNAPSHOT).map_err(StoreError::redb)?;
        insert(&mut snapshot, KEY_SNAPSHOT_META, &to_json(&meta))?;
        insert(&mut snapshot, KEY_SNAPSHOT_DATA, seed.state)?;
    }
    txn.commit().map_err(StoreError::redb)?;
    Ok(())
}

fn insert(
    table: &mut redb::Table<'_, &'static str, &'static [u8]>,
    key: &str,
    value: &[u8],
) -> Result<(), RaftError> {
    table.insert(key, value).map_err(StoreError::redb)?;
    Ok(())
}
