//! The handle's reads of this node's own view, none of which proposes or waits for a quorum
//! round: who leads, the members, whether a quorum backs this node, and the local state (the
//! machine as applied here, the log's bounds, the committed index, the writer's counters).

use std::time::Duration;

use super::{
    ApplyPanic, LogStatus, MemberInfo, Node, NodeId, Quorum, RaftError, RaftHandle, RaftMetrics,
    WriterStats, members_of, name_in, quorum,
};
use crate::raft::transport::PEER_PROTOCOL_VERSION;
use crate::state_machine::StateMachine;

impl RaftHandle {
    /// Whether this node leads now, as far as it knows (a deposed leader may not know yet:
    /// its proposals then fail to commit, and its reads fail read-index).
    pub fn is_leader(&self) -> bool {
        self.metrics.borrow().current_leader == Some(self.node_id)
    }

    /// The leader this node knows of, with its membership entry (its address): the one the
    /// leadership watch names (`leadership.rs`: not one this node campaigned against).
    pub fn leader(&self) -> Option<(NodeId, Node)> {
        let leader = self.leadership.borrow().leader?;
        let metrics = self.metrics.borrow();
        let member = metrics
            .membership_config
            .membership()
            .get_node(&leader)?
            .clone();
        Some((leader, member))
    }

    /// The members as this node knows them: id, name and address, and whether each votes
    /// (a learner being caught up does not).
    pub fn members(&self) -> Vec<MemberInfo> {
        members_of(&self.metrics.borrow())
    }

    /// The highest cluster version every voter and learner can apply: this build's, lowered
    /// to the peer protocol version each other member agreed on in its latest hello with this
    /// node (`transport/version.rs`: a build's peer protocol version is the highest cluster
    /// version it applies). `None` while a member was never reached from here.
    pub fn cluster_version_every_member_applies(&self) -> Option<u32> {
        let versions = &self.dialler.versions;
        self.members()
            .iter()
            .filter(|info| info.id != self.node_id)
            .try_fold(PEER_PROTOCOL_VERSION, |lowest, info| {
                Some(lowest.min(versions.of(info.id)?))
            })
    }

    /// Whether this node is backed by a quorum now (see `quorum.rs` for the rules).
    pub fn quorum(&self) -> Quorum {
        let metrics = self.metrics.borrow();
        let leading_for = self.leader_since.leading_for(&metrics);
        let mut quorum = quorum::quorum_of(&metrics, leading_for, self.quorum_timeout, |peer| {
            self.contact.silent_for(peer)
        });
        // Rule 2: a follower knows a leader only as the leadership watch does.
        if !quorum.leading && self.leadership.borrow().leader.is_none() {
            quorum.has_quorum = false;
        }
        quorum
    }

    /// The name operators know node `id` by (`--name`, e.g. `n2`), for log lines and errors;
    /// the number itself for an id outside the membership this node knows (a removed member,
    /// a stranger dialling the peer port).
    pub fn member_name(&self, id: NodeId) -> String {
        name_in(&self.metrics.borrow(), id)
    }

    /// `Err(NoQuorum)` at once when this node leads without a quorum: nothing it proposes or
    /// confirms can commit until enough voters are back, so a request should not wait for
    /// its commit timeout to learn that. `Err(CutOff)` when it knows no leader and too few
    /// voters have talked with it lately (`quorum.rs`, rule 4): its requests could only wait
    /// for a leader it cannot hear. `Ok` elsewhere (a follower forwards, and a candidate in
    /// touch with the others waits for the election as before).
    pub fn check_quorum(&self) -> Result<(), RaftError> {
        // On every request: the common answers without allocating or locking.
        {
            let metrics = self.metrics.borrow();
            match metrics.current_leader {
                Some(leader) if leader == self.node_id => {
                    let acknowledged = quorum::quorum_ack_age_ms(&metrics)
                        .is_some_and(|age_ms| Duration::from_millis(age_ms) <= self.quorum_timeout);
                    if acknowledged {
                        return Ok(());
                    }
                }
                _ => {
                    // The leader this node follows, as the leadership watch knows it (a member
                    // searching for one after a campaign knows none, whatever the metrics say).
                    let leader_known = self.leadership.borrow().leader.is_some();
                    let cut_off =
                        quorum::cut_off_of(&metrics, leader_known, self.cut_off_timeout, |peer| {
                            self.contact.out_of_touch_for(peer)
                        });
                    let Some((in_touch, voters)) = cut_off else {
                        return Ok(());
                    };
                    // Named from the metrics in hand: a second borrow of the watch while
                    // this one is held could deadlock behind a waiting writer.
                    return Err(RaftError::CutOff {
                        member: name_in(&metrics, self.node_id),
                        in_touch,
                        voters,
                        timeout_ms: u64::try_from(self.cut_off_timeout.as_millis())
                            .unwrap_or(u64::MAX),
                    });
                }
            }
        }
        let quorum = self.quorum();
        if !quorum.leading || quorum.has_quorum {
            return Ok(());
        }
        Err(RaftError::NoQuorum {
            voters: quorum.voters,
            ack_age_ms: quorum.ack_age_ms.unwrap_or(0),
            timeout_ms: quorum.timeout_ms,
            unreachable: quorum.unreachable,
        })
    }

    /// When peer `id` last answered one of this node's Raft calls (only a leader calls every
    /// peer, so only a leader's answer is current).
    pub fn peer_silent_for(&self, id: NodeId) -> Option<Duration> {
        self.contact.silent_for(id)
    }

    /// The panic that stopped this node's state machine, if an apply panicked (Raft stops
    /// then; `hivekeeper serve` exits with
    /// [`EXIT_APPLY_PANICKED`](super::EXIT_APPLY_PANICKED)).
    pub fn apply_panic(&self) -> Option<ApplyPanic> {
        self.state_machine.apply_panic()
    }

    /// Reads the machine as applied on this node so far. Not linearizable: a follower may lag
    /// and a deposed leader may not know it yet; call [`RaftHandle::confirm_leadership`] first
    /// for a linearizable read.
    pub fn query<T>(&self, read: impl FnOnce(&StateMachine) -> T) -> Result<T, RaftError> {
        Ok(self.state_machine.read(read)?)
    }

    /// The log's bounds on disk.
    pub async fn log_status(&self) -> Result<LogStatus, RaftError> {
        Ok(self.log_store.status().await?)
    }

    /// openraft's current metrics (term, leader, last applied, snapshot, purged).
    pub fn metrics(&self) -> RaftMetrics {
        self.metrics.borrow().clone()
    }

    /// The last log index openraft reported committed (durable on a majority), `None` before
    /// the first commit: the value it hands the log store (`save_committed`), kept in memory
    /// by the writer.
    pub fn committed_index(&self) -> Option<u64> {
        self.store.committed().map(|log_id| log_id.index)
    }

    /// What the storage writer has done (transactions, requests, entries).
    pub fn writer_stats(&self) -> WriterStats {
        self.store.stats()
    }
}
