//! What the node answers a request with: the state machine's [`Reply`], or an answer only the
//! node can give: from Raft, not from the replicated state (`admin.status`, `admin.snapshot`),
//! or from this member's own replica after a wait (`watch.poll`).
//!
//! The peer wire carries answers between members (a follower forwards `admin.snapshot` to the
//! leader). Its MessagePack form of a machine reply is the reply's own, as before node-only
//! answers had a type of their own: `Machine` is untagged, so `Status` and `Snapshot` are read
//! first and everything else is a [`Reply`].

use hivekeeper_protocol::{NodeStatus, SnapshotPage, WatchPage};
use serde::{Deserialize, Serialize};

use crate::state_machine::Reply;

/// A final answer of the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    /// `admin.status`: this node's view of Raft. Boxed: large and rare.
    Status(Box<NodeStatus>),
    /// `admin.snapshot`: one page of a snapshot the leader keeps. Boxed: large and rare.
    Snapshot(Box<SnapshotPage>),
    /// `watch.poll`: a page of events from this member's replica.
    Watch(WatchPage),
    /// `watch.poll` below the oldest kept event: re-read and resume after `compact_revision`.
    Compacted {
        /// The oldest revision a watch may resume after.
        compact_revision: u64,
    },
    /// Everything the state machine decides or reads.
    #[serde(untagged)]
    Machine(Reply),
}

impl From<Reply> for Answer {
    fn from(reply: Reply) -> Self {
        Answer::Machine(reply)
    }
}

impl Answer {
    /// The answer with `change` applied to the machine's reply; a node's own answer as it is.
    pub fn map_reply(self, change: impl FnOnce(Reply) -> Reply) -> Answer {
        match self {
            Answer::Machine(reply) => Answer::Machine(change(reply)),
            other => other,
        }
    }
}
