//! The peer protocol's version: which versions a build speaks, how two members agree on one
//! in the hello, and what this node learnt of each peer's build that way.
//!
//! ```text
//!  dialler: Hello { cluster, from, to, versions: {min, max} }   (absent from builds before it)
//!  server:  Agreed { version: highest common }                   a dialler that sent a range
//!           Welcome                                              a dialler that sent none (= 1)
//!           Refused("... speaks 1..=2, member n2 speaks 3..=4") no common version
//! ```
//!
//! A build's version is also the highest cluster version it can apply
//! ([`hivekeeper_state_machine::CLUSTER_VERSION_SUPPORTED`]): a member that agreed on version
//! N with the leader runs a build that applies every command of cluster version N, which is
//! what the leader needs to know before it raises the cluster's version
//! (`node/cluster_version.rs`). So one number is bumped per change of the peer protocol or of
//! the data format, and every build keeps speaking its predecessor's version (N-1 → N).
//!
//! Invariants:
//! 1. Two members agree on the highest version both speak, or on none and say why, naming
//!    both ranges; a hello without a range speaks exactly [`PEER_PROTOCOL_UNVERSIONED`].
//! 2. A peer's recorded version is the one agreed on its latest hello with this node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::raft::NodeId;

/// The peer protocol version of this build: the highest it speaks, and the highest cluster
/// version it applies. Raised by every change to the peer protocol or the data format that
/// an older build cannot read; docs/OPERATIONS.md, "Upgrading one member at a time".
pub const PEER_PROTOCOL_VERSION: u32 = hivekeeper_state_machine::CLUSTER_VERSION_SUPPORTED;

/// The oldest version this build speaks: every build speaks its predecessor's, so members can
/// be upgraded one at a time.
pub const PEER_PROTOCOL_VERSION_MIN: u32 = PEER_PROTOCOL_UNVERSIONED;

/// The version of a hello without a range: every build before versions were negotiated.
pub const PEER_PROTOCOL_UNVERSIONED: u32 = 1;

/// The versions one member speaks, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRange {
    /// The oldest.
    pub min: u32,
    /// The newest.
    pub max: u32,
}

impl VersionRange {
    /// What this build speaks.
    pub const OURS: VersionRange = VersionRange {
        min: PEER_PROTOCOL_VERSION_MIN,
        max: PEER_PROTOCOL_VERSION,
    };

    /// What a hello's `versions` says: a hello without one is of a build before versions.
    pub fn of_hello(versions: Option<VersionRange>) -> VersionRange {
        versions.unwrap_or(VersionRange {
            min: PEER_PROTOCOL_UNVERSIONED,
            max: PEER_PROTOCOL_UNVERSIONED,
        })
    }

    /// Whether `version` is in the range.
    pub fn contains(self, version: u32) -> bool {
        (self.min..=self.max).contains(&version)
    }
}

impl std::fmt::Display for VersionRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..={}", self.min, self.max)
    }
}

/// Why two members share no peer protocol version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no common peer protocol version: member {me} speaks {ours}, member {peer} speaks {theirs}; \
     upgrade one member at a time from the previous release (docs/OPERATIONS.md)"
)]
pub struct NoCommonVersion {
    /// The member that found out.
    pub me: String,
    /// What it speaks.
    pub ours: VersionRange,
    /// The other member.
    pub peer: String,
    /// What that one speaks.
    pub theirs: VersionRange,
}

/// The highest version in both `ours` and `theirs` (invariant 1); `me` and `peer` are the two
/// members' names, for the refusal.
pub fn negotiate(
    ours: VersionRange,
    theirs: VersionRange,
    me: &str,
    peer: &str,
) -> Result<u32, NoCommonVersion> {
    let highest = ours.max.min(theirs.max);
    if highest >= ours.min.max(theirs.min) {
        Ok(highest)
    } else {
        Err(NoCommonVersion {
            me: me.to_string(),
            ours,
            peer: peer.to_string(),
            theirs,
        })
    }
}

/// The version this node agreed on with each peer it dialled (invariant 2). Cheap to clone;
/// clones share the record.
#[derive(Debug, Clone, Default)]
pub struct PeerVersions(Arc<Mutex<HashMap<NodeId, u32>>>);

impl PeerVersions {
    /// This node and `peer` agreed on `version` just now.
    pub(crate) fn agreed(&self, peer: NodeId, version: u32) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer, version);
    }

    /// The version last agreed with `peer`; `None` for a peer never reached.
    pub fn of(&self, peer: NodeId) -> Option<u32> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(min: u32, max: u32) -> VersionRange {
        VersionRange { min, max }
    }

    #[test]
    fn the_highest_common_version_is_agreed() {
        assert_eq!(negotiate(range(1, 2), range(1, 2), "n1", "n2"), Ok(2));
        assert_eq!(negotiate(range(1, 2), range(2, 3), "n1", "n2"), Ok(2));
        assert_eq!(negotiate(range(2, 3), range(1, 2), "n1", "n2"), Ok(2));
        assert_eq!(negotiate(range(1, 5), range(3, 3), "n1", "n2"), Ok(3));
    }

    /// An older build's hello has no range: it speaks version 1, which this build speaks.
    #[test]
    fn a_hello_without_a_range_is_version_one_and_still_welcome() {
        let theirs = VersionRange::of_hello(None);
        assert_eq!(theirs, range(1, 1));
        assert_eq!(negotiate(VersionRange::OURS, theirs, "n1", "n2"), Ok(1));
        assert_eq!(VersionRange::OURS, range(1, PEER_PROTOCOL_VERSION));
        assert_eq!(PEER_PROTOCOL_VERSION, 2);
    }

    #[test]
    fn disjoint_ranges_are_refused_naming_both() {
        let refused = negotiate(range(3, 4), range(1, 2), "n1", "n2").expect_err("disjoint");
        assert_eq!(
            refused.to_string(),
            "no common peer protocol version: member n1 speaks 3..=4, member n2 speaks 1..=2; \
             upgrade one member at a time from the previous release (docs/OPERATIONS.md)"
        );
        assert!(negotiate(range(1, 2), range(3, 4), "n1", "n2").is_err());
    }

    #[test]
    fn the_record_keeps_the_latest_agreement() {
        let versions = PeerVersions::default();
        assert_eq!(versions.of(2), None);
        versions.agreed(2, 2);
        versions.clone().agreed(2, 1);
        assert_eq!(versions.of(2), Some(1));
    }
}
