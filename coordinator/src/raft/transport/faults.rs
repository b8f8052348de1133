//! Deliberate network faults: cut this node off from chosen peers, in both directions.
//!
//! Production never sets one. The in-process cluster tests use it to put a node in a minority
//! partition (DESIGN.md §6.3) without root, iptables or namespaces: this node's calls to a
//! cut-off peer fail at once, and its server drops connections and frames from that peer.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use crate::raft::NodeId;

/// The peers this node is cut off from. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct NetworkFaults {
    cut: Arc<RwLock<HashSet<NodeId>>>,
}

impl NetworkFaults {
    /// Cuts this node off from `peers` (added to those already cut).
    pub fn cut_off(&self, peers: impl IntoIterator<Item = NodeId>) {
        self.write().extend(peers);
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.write().clear();
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
