//! Deliberate network faults: cut this node off from chosen peers, in both directions.
//!
//! Production never sets one. The in-process cluster tests use it to put a node in a minority
//! partition (DESIGN.md §6.3) without root, iptables or namespaces. Two kinds:
//! - **cut** ([`NetworkFaults::cut_off`]): this node's calls to the peer fail at once, and its
//!   server drops connections and frames from that peer (a refused connection);
//! - **silenced** ([`NetworkFaults::silence`]): calls to the peer get no answer until their
//!   timeout, and frames from it are dropped without a word (packets lost on the way, as in a
//!   real partition: nothing fails fast).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use crate::raft::NodeId;

/// The peers this node is cut off from. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct NetworkFaults {
    cut: Arc<RwLock<HashSet<NodeId>>>,
    silenced: Arc<RwLock<HashSet<NodeId>>>,
}

impl NetworkFaults {
    /// Cuts this node off from `peers` (added to those already cut).
    pub fn cut_off(&self, peers: impl IntoIterator<Item = NodeId>) {
        self.write().extend(peers);
    }

    /// Silences the links with `peers`: nothing arrives either way, and nothing fails fast.
    pub fn silence(&self, peers: impl IntoIterator<Item = NodeId>) {
        self.silenced
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(peers);
    }

    /// Whether traffic with `peer` is silenced.
    pub fn is_silenced(&self, peer: NodeId) -> bool {
        self.silenced
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&peer)
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.write().clear();
        self.silenced
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// Whether traffic with `peer` is cut.
    pub fn is_cut(&self, peer: NodeId) -> bool {
        // A poisoned lock only means a writer panicked mid-`extend`; the set is still a set.
        self.cut
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&peer)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<NodeId>> {
        self.cut
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
