//! The openraft type configuration: what a log entry carries and what applying it answers.
//!
//! Everything openraft-specific that the rest of the crate may name is aliased here, so a move
//! to openraft 0.10 changes this file and its siblings in `raft/`, not the node layer.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::state_machine::{Command, LogMeta, Reply};

/// A node's id in the cluster. Stable for the life of a data directory (checked at open).
pub type NodeId = u64;

/// The openraft `Node` type: a member's name and the address other members reach it at.
pub type Node = Member;

/// A cluster member as the membership records it.
///
/// Serialized like openraft's `BasicNode` plus a `name`, which defaults to empty: a data file
/// written before clusters existed (a single node with `{"addr": ""}`) still reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The node's name (`--name`); its id is derived from it ([`node_id_for`]).
    #[serde(default)]
    pub name: String,
    /// Where peers reach its inter-node transport, `host:port`; empty for a single node.
    pub addr: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.name, self.addr)
    }
}

/// The node id for a member name: 64-bit FNV-1a of the name's bytes, top bit cleared (ids stay
/// positive in every JSON reader), never 0.
///
/// Why a hash: every node computes every member's id from the same `--initial-cluster` list,
/// and a node added later (`hivekeeper member add NAME=ADDR`) gets its id from its name alone,
/// with no id to hand out, type or keep in sync. FNV-1a is fixed forever (unlike the std and
/// foldhash hashers, which may change between versions), so an id never changes under a data
/// directory. Two names colliding in 63 bits is not a practical concern for a few members, and
/// [`crate::node::ClusterConfig::validate`] refuses it anyway.
pub fn node_id_for(name: &str) -> NodeId {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = name.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    (hash & (u64::MAX >> 1)).max(1)
}

/// Most commands one log entry may carry ([`RaftHandle::propose_batch`]). Bounds an entry's
/// size (a few hundred bytes a command, so tens of KiB) and so one fsync's and one
/// replication message's. Positions ([`Proposal::meta`]) grow by one per command whatever the
/// batch size, so tokens (`position << 16`) keep their 2^48 headroom.
///
/// [`RaftHandle::propose_batch`]: super::RaftHandle::propose_batch
pub const BATCH_MAX: usize = 128;

/// The payload of a normal log entry: commands, stamped with the proposing leader's clock.
///
/// Why several commands per entry: one fsync and one replication message carry a whole
/// entry, so one command per entry costs one of each per command. Commands proposed
/// together share the entry, its fsync and its replication. Serialized as JSON in the log; the
/// state machine's requests have the wire's JSON shape, so the log is readable by inspection
/// tools ([`super::DATA_FORMAT`] says what is pinned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// The proposer's wall clock when it proposed the entry, ms since the Unix epoch. Time enters
    /// the state machine only through this field; the machine keeps its own clock monotonic.
    pub now_ms: u64,
    /// What the entry asks the state machine to do, in order (at most [`BATCH_MAX`]).
    pub commands: Vec<Command>,
}

impl Proposal {
    /// The state machine's position for the next command of this entry, after a machine whose
    /// last applied position is `applied_index`: `max(log index, applied_index + 1)`.
    ///
    /// The machine derives lease ids, fencing tokens and waiter order from this index, so it
    /// must strictly increase from command to command and be the same on every replica. With
    /// one command per entry it is exactly the entry's log index (the previous command sat at
    /// an earlier entry). The second and later commands of an entry take the next numbers;
    /// later entries then continue after them, so the position runs ahead of the log index by
    /// the batched commands so far (at most `BATCH_MAX - 1` per entry). It depends only on the
    /// log and on the machine's own applied index, which snapshots carry: deterministic.
    pub fn meta(&self, log_id: &LogId, applied_index: u64) -> LogMeta {
        LogMeta {
            index: log_id.index.max(applied_index.saturating_add(1)),
            term: log_id.leader_id.term,
            now_ms: self.now_ms,
        }
    }
}

/// For openraft's log lines: how many commands, and the stamp.
impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} commands at {} ms", self.commands.len(), self.now_ms)
    }
}

/// What one command did: where the state machine placed it and its reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposed {
    /// The command's position and stamp, as the state machine saw them.
    pub meta: LogMeta,
    /// The state machine's reply.
    pub reply: Reply,
}

openraft::declare_raft_types!(
    /// Hivekeeper's openraft type configuration. The leader id, vote and entry keep openraft's
    /// defaults (`leader_id_adv`: a term and a node id), whose JSON is the 0.9 layout the data
    /// file holds (`tests/data_format.rs`).
    pub TypeConfig:
        D = Proposal,
        // One per command of a normal entry; empty for blank and membership entries.
        R = Vec<Proposed>,
        NodeId = NodeId,
        Node = Node,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log id as Hivekeeper's messages write it, `T{term}-N{leader node}-{index}`, rather than
/// openraft's own `T{term}-N{node}.{index}`, so an error naming an entry keeps one form
/// whichever openraft version wrote the entry.
pub fn log_id_text(log_id: &LogId) -> String {
    format!(
        "T{}-N{}-{}",
        log_id.leader_id.term, log_id.leader_id.node_id, log_id.index
    )
}

/// The bytes of a snapshot, as the state machine builds and installs them.
pub type SnapshotData = Cursor<Vec<u8>>;
/// A running openraft instance with Hivekeeper's types and state machine.
pub type Raft = openraft::Raft<TypeConfig, super::StateMachineStore>;
/// A log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// A log entry's id: leader term and node, and index.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// A persisted vote.
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// Membership with the log id of the entry that set it.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// What a snapshot covers: last log id and membership.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot handed to openraft.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;
/// The error type of openraft's storage traits (0.10: `std::io::Error`).
pub type StorageError = std::io::Error;
/// The metrics openraft publishes on a watch channel.
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: u64) -> LogId {
        openraft::testing::log_id::<TypeConfig>(3, 1, index)
    }

    #[test]
    fn node_ids_are_fixed_by_name() {
        // FNV-1a 64 of "n1" is 0x08b37b07b558d4c0 with the top bit cleared (fixed forever: data dirs record it).
        assert_eq!(node_id_for("n1"), 0x08b3_7b07_b558_d4c0);
        assert_ne!(node_id_for("n1"), node_id_for("n2"));
        assert!(node_id_for("") > 0);
    }

    #[test]
    fn a_member_written_before_names_existed_still_reads() {
        let member: Member = serde_json::from_str(r#"{"addr":""}"#).expect("reads");
        assert_eq!(member, Member::default());
    }

    #[test]
    fn one_command_per_entry_sits_at_the_entrys_log_index() {
        let proposal = Proposal {
            now_ms: 1_000,
            commands: Vec::new(),
        };
        // The previous command sat at an earlier entry: the position is the log index.
        let meta = proposal.meta(&at(7), 5);
        assert_eq!(
            meta,
            LogMeta {
                index: 7,
                term: 3,
                now_ms: 1_000
            }
        );
    }

    #[test]
    fn later_commands_of_an_entry_and_later_entries_run_ahead() {
        let proposal = Proposal {
            now_ms: 1_000,
            commands: Vec::new(),
        };
        // Entry 7 carried three commands (positions 7, 8, 9): entry 8's first command is at 10.
        assert_eq!(proposal.meta(&at(7), 7).index, 8);
        assert_eq!(proposal.meta(&at(7), 8).index, 9);
        assert_eq!(proposal.meta(&at(8), 9).index, 10);
        // Once the log index passes the machine's position again, it is the log index.
        assert_eq!(proposal.meta(&at(20), 10).index, 20);
    }
}
