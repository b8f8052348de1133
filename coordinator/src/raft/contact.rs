//! When each peer last answered one of this node's Raft RPCs: the leader's view of which
//! members it can reach (`hivekeeper_raft_peer_reachable`, the names in a `no quorum` error).
//!
//! ```text
//!  TcpPeer::call (append entries, heartbeat, vote, snapshot chunk) ─ an answer ─▶ answered(peer)
//!  metrics exporter, quorum check ─▶ silent_for(peer): time since that answer
//! ```
//!
//! openraft 0.9.25 keeps the same facts per peer (its `clock_progress`) but exports only the
//! quorum's (`millis_since_quorum_ack`), so the network records its own. Any answer counts, a
//! refusal too: the peer is up and talking. Only a leader sends to every peer every heartbeat,
//! so only a leader's record is current; a follower's ages.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::types::NodeId;

/// The last answer from each peer. Shared by the network's clients and the node's readers.
#[derive(Debug, Default)]
pub struct PeerContact {
    /// When each peer last answered; a peer never heard from is absent.
    answered_at: Mutex<HashMap<NodeId, Instant>>,
}

impl PeerContact {
    /// `peer` answered a call just now.
    pub(crate) fn answered(&self, peer: NodeId) {
        self.lock().insert(peer, Instant::now());
    }

    /// How long since `peer` last answered; `None` if it never did (since this process
    /// started).
    pub fn silent_for(&self, peer: NodeId) -> Option<Duration> {
        self.lock().get(&peer).map(Instant::elapsed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Instant>> {
        // A poisoned map only means a writer panicked mid-insert; the times are still times.
        self.answered_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_peer_is_silent_since_its_last_answer() {
        let contact = PeerContact::default();
        assert_eq!(contact.silent_for(2), None);
        contact.answered(2);
        tokio::time::advance(Duration::from_millis(120)).await;
        assert_eq!(contact.silent_for(2), Some(Duration::from_millis(120)));
        contact.answered(2);
        assert_eq!(contact.silent_for(2), Some(Duration::ZERO));
        assert_eq!(contact.silent_for(3), None);
    }
}
