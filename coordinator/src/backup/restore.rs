//! `hivekeeper snapshot restore`: a new member's data directory from a backup file, offline.
//!
//! ```text
//!  BackupFile (checked: magic, version, length, checksum)
//!    ─▶ StateMachine::restore(state)      every invariant checked: a bad state is refused here,
//!                                          not by the new cluster at its first start
//!    ─▶ the data directory is absent or empty, or refused
//!    ─▶ raft::seed_data_dir(dir, member, members, Seed { index, term, state })
//! ```
//!
//! Every member of the new cluster is restored from the same file with the same member list
//! (`raft/seed.rs` says why), so they start from one log position and one membership.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{BackupError, BackupFile};
use crate::ConfigError;
use crate::node::ClusterConfig;
use crate::raft::{self, Member, NodeId, Seed};
use crate::state_machine::StateMachine;

/// Which member a restored data directory is for, and who the new cluster's voters are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    /// The member's node id (derived from its `--name`; a single node's id otherwise).
    pub node_id: NodeId,
    /// Every voter of the new cluster by id, the same on every member (a single node: itself,
    /// with an empty name and address).
    pub members: BTreeMap<NodeId, Member>,
}

impl Seat {
    /// A single node (`serve` without `--name`) whose `[node] node_id` is `node_id` (1 by
    /// default, [`crate::node::NodeConfig::defaults`]), alone, with the empty name and address a single node's
    /// membership has.
    pub fn single_node(node_id: NodeId) -> Seat {
        Seat {
            node_id,
            members: BTreeMap::from([(node_id, Member::default())]),
        }
    }

    /// Member `cluster.name` of a cluster of `cluster.initial_cluster`; an error names a
    /// malformed list or a name missing from it.
    pub fn member(cluster: &ClusterConfig) -> Result<Seat, ConfigError> {
        cluster.me()?;
        Ok(Seat {
            node_id: cluster.node_id(),
            members: cluster.members()?,
        })
    }
}

/// What a restore put into a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The log index the state was taken at.
    pub index: u64,
    /// The term of that entry.
    pub term: u64,
    /// The state's bytes.
    pub state_bytes: usize,
    /// Leases in the state.
    pub leases: usize,
    /// Resources in use in the state.
    pub resources: usize,
}

/// Checks `file`'s state and seeds `data_dir` with it for `seat`. Blocking (it fsyncs).
pub fn restore(file: &BackupFile, data_dir: &Path, seat: &Seat) -> Result<Restored, BackupError> {
    if !seat.members.contains_key(&seat.node_id) {
        return Err(BackupError::NotAMember {
            node_id: seat.node_id,
        });
    }
    let machine = StateMachine::restore(&file.state).map_err(|error| BackupError::State {
        reason: error.to_string(),
    })?;
    if let Some(entry) = first_entry(data_dir)? {
        return Err(BackupError::DataDirNotEmpty {
            path: data_dir.to_path_buf(),
            entry,
        });
    }
    let seed = Seed {
        index: file.index,
        term: file.term,
        state: &file.state,
    };
    raft::seed_data_dir(data_dir, seat.node_id, &seat.members, seed).map_err(BackupError::Seed)?;
    Ok(Restored {
        index: file.index,
        term: file.term,
        state_bytes: file.state.len(),
        leases: machine.lease_count(),
        resources: machine.resource_count(),
    })
}

/// The first entry of `dir`, `None` when it is absent or empty.
fn first_entry(dir: &Path) -> Result<Option<PathBuf>, BackupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(BackupError::DataDir {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    match entries.into_iter().next() {
        None => Ok(None),
        Some(Ok(entry)) => Ok(Some(entry.path())),
        Some(Err(source)) => Err(BackupError::DataDir {
            path: dir.to_path_buf(),
            source,
        }),
    }
}
