//! Errors at the boundary of `raft/`: opening a data directory, starting openraft, proposing.
//!
//! One enum, [`RaftError`], for callers. Inside the module the storage layer uses
//! [`StoreError`], which is `Clone` because the group-commit writer hands one failed transaction's
//! error to every request that was in it; it converts into openraft's `StorageError` at the
//! trait boundary and into `RaftError` at ours.

use std::path::PathBuf;

use hivekeeper_segment_log::SegmentLogError;
use openraft::error::{ClientWriteError, ForwardToLeader, InitializeError, LinearizableReadError};

use super::types::{NodeId, StorageError, TypeConfig};

/// Everything that can go wrong at the boundary of `raft/`.
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// The data directory could not be created or entered.
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data file could not be opened or created (permissions, a path through a regular
    /// file, a full disk).
    #[error("cannot open {path}: {source}")]
    Io {
        /// The data file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data file exists but redb cannot read it: not a redb file, or damaged.
    #[error("{path} is not a readable redb data file (corrupt, or not Hivekeeper's): {reason}")]
    Corrupt {
        /// The data file.
        path: PathBuf,
        /// redb's explanation.
        reason: String,
    },
    /// The data file is a redb database, but not one Hivekeeper wrote.
    #[error("{path} is a redb database but not a Hivekeeper data file: {reason}")]
    Foreign {
        /// The data file.
        path: PathBuf,
        /// What is missing or unexpected.
        reason: String,
    },
    /// The data file is open elsewhere (another process, or a handle in this one not shut down).
    #[error("{path} is already open by another process or another node handle")]
    InUse {
        /// The data file.
        path: PathBuf,
    },
    /// The data directory belongs to another node.
    #[error("{path} belongs to node {found}, refusing to open it as node {expected}")]
    WrongNode {
        /// The data file.
        path: PathBuf,
        /// The node id asked for.
        expected: NodeId,
        /// The node id recorded in the file.
        found: NodeId,
    },
    /// The data file was written by a newer (or unknown) on-disk format.
    #[error(
        "{path} has data format {found}; this build reads format {supported} (and migrates \
         format 1)"
    )]
    Format {
        /// The data file.
        path: PathBuf,
        /// The format recorded in the file.
        found: u32,
        /// The format this build reads and writes.
        supported: u32,
    },
    /// The Raft log's directory (`raft-log/`) does not fit the data file: missing beside a
    /// format-2 file, or holding entries beside a new one.
    #[error("Raft log directory {path}: {reason}")]
    LogDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The latest snapshot stored in the data file cannot be restored.
    #[error("the snapshot stored in {path} cannot be restored: {reason}")]
    Snapshot {
        /// The data file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Reading or writing the data file failed.
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    /// The Raft configuration is inconsistent.
    #[error("raft config: {0}")]
    Config(String),
    /// A thread or task of the store could not be started or stopped.
    #[error("{0}")]
    Runtime(String),
    /// openraft stopped (storage failure, shutdown, or panic); the node must restart.
    #[error("raft stopped: {0}")]
    Fatal(String),
    /// This node is not the leader; the proposal must go to `leader` (if one is known).
    #[error("not the leader (leader: {})", leader_name.as_deref().unwrap_or("none known"))]
    NotLeader {
        /// The current leader, when this node knows it.
        leader: Option<NodeId>,
        /// Its member name (`--name`), when this node knows it, for people.
        leader_name: Option<String>,
    },
    /// openraft refused the request for another reason (membership change in progress, ...).
    #[error("raft refused the request: {0}")]
    Refused(String),
    /// More commands than one entry may carry.
    #[error("{commands} commands in one entry, at most {max} allowed")]
    BatchTooLarge {
        /// Commands offered.
        commands: usize,
        /// The bound, [`super::BATCH_MAX`].
        max: usize,
    },
    /// A member to add does not answer on its peer port, or someone else does: nothing was
    /// proposed.
    #[error(
        "nothing answers as member {name} at {addr} (its peer port): {reason}. Nothing was \
         changed: start {name} first (hivekeeper serve --name {name} --initial-cluster \
         {name}={addr} --initial-cluster-state existing), then add it"
    )]
    MemberUnreachable {
        /// The member's name.
        name: String,
        /// The address it was to be reached at.
        addr: String,
        /// What the dial or the hello said.
        reason: String,
    },
    /// The name is a member already, at another address.
    #[error(
        "{name} is a member already, at {known_addr}, not {addr}: remove it first \
         (hivekeeper member remove {name}), then add it at its new address"
    )]
    MemberElsewhere {
        /// The member's name.
        name: String,
        /// The address asked for.
        addr: String,
        /// The address the membership records.
        known_addr: String,
    },
    /// The member's build cannot apply the cluster's version (it agreed on an older peer
    /// protocol version in its hello): added, it would stop at the first entry it cannot
    /// apply.
    #[error(
        "{name} runs a build that applies cluster version {version} at most, and the cluster \
         is at version {cluster_version}: nothing was changed; run this release on {name} \
         first, then add it"
    )]
    MemberTooOld {
        /// The member's name.
        name: String,
        /// The peer protocol version it agreed on: the highest cluster version it applies.
        version: u32,
        /// The cluster's version.
        cluster_version: u32,
    },
    /// A learner did not catch up in time, so it was not made a voter: it stays a learner
    /// (it does not vote, the quorum is unchanged).
    #[error(
        "{name} did not catch up within {timeout_ms} ms ({}, at most {lag_entries_max} \
         allowed), so it was not made a voter: it is left as a learner, which does not vote. \
         Remove it with `hivekeeper member remove {name}`, or run `member add` again once it \
         keeps up", lag_entries.map_or_else(|| "it has not answered the leader yet".to_string(),
         |lag| format!("{lag} entries behind")),
    )]
    LearnerBehind {
        /// The member's name.
        name: String,
        /// How far behind it was at the end, if it answered at all.
        lag_entries: Option<u64>,
        /// The bound.
        lag_entries_max: u64,
        /// How long the leader waited.
        timeout_ms: u64,
    },
    /// This node leads but no quorum of voters acknowledged it within an election timeout:
    /// nothing it does can commit until enough of them are back.
    #[error(
        "no quorum: this leader has not heard from a majority of its {voters} voters for \
         {ack_age_ms} ms (more than the {timeout_ms} ms election timeout){}; nothing can \
         commit until enough members are back", if unreachable.is_empty() { String::new() }
         else { format!("; unreachable: {}", unreachable.join(", ")) },
    )]
    NoQuorum {
        /// The voters of the membership.
        voters: usize,
        /// Time since a quorum last acknowledged this leader, ms.
        ack_age_ms: u64,
        /// The bound: the longest election timeout, ms.
        timeout_ms: u64,
        /// The voters that have not answered within the election timeout, by name.
        unreachable: Vec<String>,
    },
    /// This member does not lead, knows no leader, and too few voters have talked with it
    /// lately to make a majority (`quorum.rs`, rule 4): it is cut off from the cluster, and
    /// another member may well serve the request now.
    #[error(
        "cut off: member {member} knows no leader, and only {in_touch} of the {voters} voters \
         (itself counted when it votes) have talked with it within {timeout_ms} ms, short of a \
         majority; retry on another member"
    )]
    CutOff {
        /// This member's name.
        member: String,
        /// The voters in touch within the bound (this member counted when it votes).
        in_touch: usize,
        /// The voters of the membership.
        voters: usize,
        /// The bound: the longest election timeout plus two heartbeat intervals, ms.
        timeout_ms: u64,
    },
    /// Waiting for a Raft condition took longer than allowed.
    #[error("timed out after {timeout_ms} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        timeout_ms: u64,
    },
}

impl RaftError {
    /// A copy for a second receiver of the same failure (one read-index round answers many
    /// requests). The variants the node layer tells apart are copied exactly; the others keep
    /// their message.
    pub(crate) fn duplicate(&self) -> RaftError {
        match self {
            RaftError::NotLeader {
                leader,
                leader_name,
            } => RaftError::NotLeader {
                leader: *leader,
                leader_name: leader_name.clone(),
            },
            RaftError::Fatal(reason) => RaftError::Fatal(reason.clone()),
            RaftError::Store(error) => RaftError::Store(error.clone()),
            RaftError::Timeout { what, timeout_ms } => RaftError::Timeout {
                what,
                timeout_ms: *timeout_ms,
            },
            other => RaftError::Refused(other.to_string()),
        }
    }
}

/// openraft's answer that another node leads (or none is known), as ours.
fn not_leader(forward: ForwardToLeader<TypeConfig>) -> RaftError {
    RaftError::NotLeader {
        leader: forward.leader_id,
        leader_name: forward.leader_node.map(|member| member.name),
    }
}

/// What a failed read-index round (`ensure_linearizable`) means for the node.
pub(crate) fn check_is_leader_error(
    error: openraft::error::RaftError<TypeConfig, LinearizableReadError<TypeConfig>>,
) -> RaftError {
    match error {
        openraft::error::RaftError::APIError(LinearizableReadError::ForwardToLeader(forward)) => {
            not_leader(forward)
        }
        openraft::error::RaftError::APIError(other) => RaftError::Refused(other.to_string()),
        openraft::error::RaftError::Fatal(fatal) => fatal.into(),
    }
}

impl From<openraft::error::Fatal<TypeConfig>> for RaftError {
    fn from(fatal: openraft::error::Fatal<TypeConfig>) -> Self {
        RaftError::Fatal(fatal.to_string())
    }
}

impl From<openraft::error::RaftError<TypeConfig>> for RaftError {
    fn from(error: openraft::error::RaftError<TypeConfig>) -> Self {
        match error {
            openraft::error::RaftError::APIError(never) => match never {},
            openraft::error::RaftError::Fatal(fatal) => fatal.into(),
        }
    }
}

impl From<openraft::error::RaftError<TypeConfig, ClientWriteError<TypeConfig>>> for RaftError {
    fn from(error: openraft::error::RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Self {
        match error {
            openraft::error::RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
                not_leader(forward)
            }
            openraft::error::RaftError::APIError(other) => RaftError::Refused(other.to_string()),
            openraft::error::RaftError::Fatal(fatal) => fatal.into(),
        }
    }
}

impl From<openraft::error::RaftError<TypeConfig, InitializeError<TypeConfig>>> for RaftError {
    fn from(error: openraft::error::RaftError<TypeConfig, InitializeError<TypeConfig>>) -> Self {
        match error {
            openraft::error::RaftError::APIError(other) => RaftError::Refused(other.to_string()),
            openraft::error::RaftError::Fatal(fatal) => fatal.into(),
        }
    }
}

/// A storage failure inside `raft/`. Cheap to clone: one failed group commit answers every
/// request it carried with the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// redb failed (I/O, corruption, a commit that did not complete).
    #[error("redb: {0}")]
    Redb(String),
    /// A system call on the Raft log failed (a full disk is `ENOSPC` here, in `reason`).
    #[error("Raft log: {path}: {operation}: {reason}")]
    LogIo {
        /// The segment file or the log's directory.
        path: PathBuf,
        /// What the log was doing ("fdatasync of an append", "preallocating a segment", ...).
        operation: &'static str,
        /// The operating system's error.
        reason: String,
    },
    /// A record of the Raft log that is not its torn tail failed its check: the node refuses
    /// to start rather than drop the acknowledged entries after it.
    #[error(
        "Raft log: {path}: damaged record at byte {offset}: {damage}; refusing to start, since \
         dropping it would drop the entries after it"
    )]
    LogCorrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the damaged record's header in that file.
        offset: u64,
        /// What is wrong with it (a CRC mismatch, an index out of place, ...).
        damage: String,
    },
    /// Any other refusal of the Raft log (a gap between segments, a foreign file among them,
    /// an append out of order, a log that failed earlier and was not reopened).
    #[error("Raft log: {0}")]
    Log(String),
    /// A stored record could not be decoded.
    #[error("stored {what} is unreadable: {reason}")]
    Decode {
        /// Which record.
        what: &'static str,
        /// serde's explanation.
        reason: String,
    },
    /// An earlier commit failed; the writer refuses everything after it (a failed fsync is
    /// never retried: the page cache may already have dropped the data, see "fsyncgate").
    #[error("the store failed earlier and accepts no more writes: {0}")]
    Failed(String),
    /// A thread panicked while it held the state machine; its state cannot be trusted.
    #[error("the state machine lock is poisoned: an apply panicked")]
    Poisoned,
    /// The store was closed (shutdown) before the request was carried out.
    #[error("the store is closed")]
    Closed,
    /// The state machine panicked applying an entry: the node stops (a fatal stop, exit code
    /// [`super::EXIT_APPLY_PANICKED`] from `hivekeeper serve`), and the machine, maybe half
    /// changed, is read no more.
    #[error("{0}")]
    ApplyPanicked(ApplyPanic),
    /// The state machine refused an entry (a broken log: every replica refuses it alike).
    #[error("applying log entry {log_id}: {reason}")]
    Apply {
        /// The entry's log id, `T{term}-N{leader node}-{index}`.
        log_id: String,
        /// The machine's error.
        reason: String,
    },
    /// A snapshot builder was asked for a second snapshot (openraft uses each one once).
    #[error("this snapshot builder was already used")]
    BuilderUsed,
    /// A blocking task of the store could not be joined (it panicked or was cancelled).
    #[error("a storage task failed: {0}")]
    Runtime(String),
}

/// A [`StoreError`] with the storage operation it failed, as openraft 0.10's storage traits
/// want it: inside a `std::io::Error`.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {source}")]
pub struct StorageFailure {
    /// What openraft asked for (`write logs`, `read vote`, ...).
    pub operation: &'static str,
    /// What went wrong.
    pub source: StoreError,
}

/// A panic inside `StateMachine::apply`, caught at the store boundary: which entry, which
/// command, and the panic's message. The same log replays the same panic on every replica and
/// at every restart (the machine is deterministic), so this names the entry to report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the state machine panicked applying log entry {log_id} (command {command_index} of the \
     entry, {command}): {message}"
)]
pub struct ApplyPanic {
    /// The entry's log id in openraft's form, `T{term}-N{leader node}-{index}`.
    pub log_id: String,
    /// The command's position inside the entry (a batch holds several), from 0.
    pub command_index: usize,
    /// What the command was (`Command::kind`: an op name, or `expire_leases` ...).
    pub command: &'static str,
    /// The panic's message.
    pub message: String,
}

impl From<SegmentLogError> for StoreError {
    fn from(error: SegmentLogError) -> Self {
        match error {
            SegmentLogError::Io {
                path,
                operation,
                source,
            } => StoreError::LogIo {
                path,
                operation,
                reason: source.to_string(),
            },
            SegmentLogError::Corrupt {
                path,
                offset,
                damage,
            } => StoreError::LogCorrupt {
                path,
                offset,
                damage: damage.to_string(),
            },
            other => StoreError::Log(other.to_string()),
        }
    }
}

impl StoreError {
    /// Wraps any redb error.
    pub(crate) fn redb(error: impl std::fmt::Display) -> Self {
        StoreError::Redb(error.to_string())
    }

    /// Converts into openraft's storage error for a log write.
    pub(crate) fn write_logs(self) -> StorageError {
        self.during("write logs")
    }

    /// Converts into openraft's storage error for a log read.
    pub(crate) fn read_logs(self) -> StorageError {
        self.during("read logs")
    }

    /// Converts into openraft's storage error for a vote write.
    pub(crate) fn write_vote(self) -> StorageError {
        self.during("write vote")
    }

    /// Converts into openraft's storage error for a vote read.
    pub(crate) fn read_vote(self) -> StorageError {
        self.during("read vote")
    }

    /// Converts into openraft's storage error for a state-machine read.
    pub(crate) fn read_state_machine(self) -> StorageError {
        self.during("read state machine")
    }

    /// Converts into openraft's storage error for applying an entry.
    pub(crate) fn apply(self) -> StorageError {
        self.during("apply")
    }

    /// Converts into openraft's storage error for a snapshot write.
    pub(crate) fn write_snapshot(self) -> StorageError {
        self.during("write snapshot")
    }

    /// Converts into openraft's storage error for a snapshot read.
    pub(crate) fn read_snapshot(self) -> StorageError {
        self.during("read snapshot")
    }

    fn during(self, operation: &'static str) -> StorageError {
        std::io::Error::other(StorageFailure {
            operation,
            source: self,
        })
    }
}
