//! When each peer last answered one of this node's Raft RPCs, and when each last sent this
//! node a frame: the leader's view of which members it can reach
//! (`hivekeeper_raft_peer_reachable`, the names in a `no quorum` error), and a follower's view
//! of whether it is cut off from the cluster (`quorum.rs`, rule 4).
//!
//! ```text
//!  TcpPeer::call (append entries, heartbeat, vote, snapshot chunk) ─ an answer ─▶ answered(peer)
//!  transport server: a frame from a welcomed peer ─────────────────────────────▶ heard(peer)
//!  metrics exporter, quorum check ─▶ silent_for(peer): time since that answer
//!  cut-off check                  ─▶ out_of_touch_for(peer): since either
//! ```
//!
//! openraft exports when each peer last acknowledged it only on a leader (its `heartbeat`
//! metrics), so the network records its own, on every member. Any answer counts, a refusal too:
//! the peer is up and talking. Only a leader sends to every peer every heartbeat, so only a
//! leader's record of answers is current; a follower hears from its leader instead (every
//! heartbeat), and from the other members when they campaign or answer its own campaign.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::types::NodeId;

/// The last answer from each peer, and the last frame from each. Shared by the network's clients,
/// the transport server and the node's readers.
#[derive(Debug)]
pub struct PeerContact {
    /// When each peer last answered; a peer never heard from is absent.
    answered_at: Mutex<HashMap<NodeId, Instant>>,
    /// When each peer last sent this node a frame (a heartbeat, an append, a vote request, a
    /// forwarded request); a peer that never did is absent.
    heard_at: Mutex<HashMap<NodeId, Instant>>,
    /// When this record was made (the node's start): a peer never heard from has been out of
    /// touch since then.
    started: Instant,
}

impl Default for PeerContact {
    fn default() -> Self {
        PeerContact {
            answered_at: Mutex::default(),
            heard_at: Mutex::default(),
            started: Instant::now(),
        }
    }
}

impl PeerContact {
    /// `peer` answered a call just now.
    pub(crate) fn answered(&self, peer: NodeId) {
        lock(&self.answered_at).insert(peer, Instant::now());
    }

    /// `peer` sent this node a frame just now.
    pub(crate) fn heard(&self, peer: NodeId) {
        lock(&self.heard_at).insert(peer, Instant::now());
    }

    /// How long since `peer` last answered; `None` if it never did (since this process
    /// started).
    pub fn silent_for(&self, peer: NodeId) -> Option<Duration> {
        lock(&self.answered_at).get(&peer).map(Instant::elapsed)
    }

    /// How long since `peer` last talked with this node either way (answered a call or sent
    /// a frame); since this node started if it never did.
    pub(crate) fn out_of_touch_for(&self, peer: NodeId) -> Duration {
        let answered = lock(&self.answered_at).get(&peer).copied();
        let heard = lock(&self.heard_at).get(&peer).copied();
        answered.max(heard).unwrap_or(self.started).elapsed()
    }
}

fn lock(
    map: &Mutex<HashMap<NodeId, Instant>>,
) -> std::sync::MutexGuard<'_, HashMap<NodeId, Instant>> {
    // A poisoned map only means a writer panicked mid-insert; the times are still times.
    map.lock().unwrap_or_else(PoisonError::into_inner)
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

    #[tokio::test(start_paused = true)]
    async fn a_peer_is_out_of_touch_since_it_last_talked_either_way_or_since_the_start() {
        let contact = PeerContact::default();
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(contact.out_of_touch_for(2), Duration::from_millis(500));
        contact.heard(2);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(contact.out_of_touch_for(2), Duration::from_millis(100));
        assert_eq!(contact.silent_for(2), None, "hearing is not an answer");
        contact.answered(2);
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(contact.out_of_touch_for(2), Duration::from_millis(30));
        assert_eq!(contact.out_of_touch_for(3), Duration::from_millis(630));
    }
}
