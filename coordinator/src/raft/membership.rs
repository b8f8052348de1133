//! Membership changes, etcd's learner promotion as the model: a member is added only once it
//! has shown it can keep up, and a member that is down can still be removed.
//!
//! ```text
//!  add_member(n4 at addr, catch_up)
//!    1. already a voter at addr? ─▶ done (a retry)      at another addr? ─▶ MemberElsewhere
//!    2. dial addr, hello to n4 ─ nothing / someone else answers ─▶ MemberUnreachable
//!                                                        (nothing proposed, nothing changed)
//!       its build applies less than the cluster version (the hello's) ─▶ MemberTooOld
//!    3. add_learner(n4)          (a learner does not vote: the quorum is unchanged)
//!    4. wait ≤ catch_up.timeout_ms until n4 matched the learner entry and is at most
//!       catch_up.lag_entries_max entries behind the leader's log
//!         ─ not in time ─▶ LearnerBehind (n4 stays a learner: `member remove n4`, or add again)
//!    5. change_membership(AddVoterIds n4)   (joint consensus; n4 votes from here on)
//!
//!  remove_member(n2)  ─▶ change_membership(RemoveVoters | RemoveNodes)
//!    needs a majority of the old and of the new voters, never n2 itself: works with n2 down
//! ```
//!
//! Why the checks: openraft adds a voter at any address it is given. A typo would make a
//! phantom a voter, so a three-member cluster would need three of four votes and lose its
//! quorum at the next failure.

use std::collections::BTreeSet;
use std::time::Duration;

use super::error::RaftError;
use super::transport::TransportError;
use super::types::{Member, NodeId, RaftMetrics};
use super::{MemberInfo, RaftHandle};

/// How close a learner must come, and how soon, before it is made a voter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// How long the leader waits for the learner to catch up before it refuses to promote it.
    pub timeout_ms: u64,
    /// How many entries behind the leader's last log entry the learner may be and still count
    /// as caught up (entries written while it catches up keep coming).
    pub lag_entries_max: u64,
}

impl CatchUp {
    /// The defaults: within 10 s, at most 100 entries behind. A fresh member receives the
    /// latest snapshot and the log after it; on a LAN that takes well under a second for a
    /// state of tens of MB, so 10 s leaves room for a busy leader without letting a member
    /// that cannot keep up vote.
    pub const DEFAULTS: CatchUp = CatchUp {
        timeout_ms: 10_000,
        lag_entries_max: 100,
    };
}

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp::DEFAULTS
    }
}

/// How far learner (or follower) `id` is behind the leader's log, per the leader's `metrics`,
/// if it has matched the leader's log at `at_least` or later; `None` on a node that does not
/// lead, for an unknown id, or while `id` has not matched `at_least` yet.
pub(crate) fn lag_entries(metrics: &RaftMetrics, id: NodeId, at_least: u64) -> Option<u64> {
    let matched = metrics.replication.as_ref()?.get(&id)?.as_ref()?.index;
    if matched < at_least {
        return None;
    }
    Some(super::metrics::entries_behind(
        metrics.last_log_index,
        Some(matched),
    ))
}

impl RaftHandle {
    /// Adds `member` as voter `id` once it has caught up as a learner (see the module doc).
    /// Must run on the leader. Returns the member as the membership now records it.
    pub async fn add_member(
        &self,
        id: NodeId,
        member: Member,
        catch_up: CatchUp,
    ) -> Result<MemberInfo, RaftError> {
        let known = self.members().into_iter().find(|info| info.id == id);
        if let Some(known) = &known {
            if known.member.addr != member.addr {
                return Err(RaftError::MemberElsewhere {
                    name: member.name,
                    addr: member.addr,
                    known_addr: known.member.addr.clone(),
                });
            }
            if known.voter {
                return Ok(known.clone());
            }
        }
        self.dialler
            .probe(id, &member.name, &member.addr)
            .await
            .map_err(|error| RaftError::MemberUnreachable {
                name: member.name.clone(),
                addr: member.addr.clone(),
                reason: probe_failure(error),
            })?;
        self.check_member_applies_cluster_version(id, &member.name)?;
        // A learner already (an earlier add that did not catch up): wait again, from now.
        let since = match known {
            Some(_) => self.metrics().last_log_index.unwrap_or(0),
            None => {
                self.membership_settled().await;
                let added = self.raft.add_learner(id, member.clone(), false).await?;
                added.log_id.index
            }
        };
        let me = self.node_id;
        let lag_max = catch_up.lag_entries_max;
        let waited = self
            .wait_for(
                Duration::from_millis(catch_up.timeout_ms),
                "a learner to catch up",
                move |m| {
                    m.current_leader != Some(me)
                        || lag_entries(m, id, since).is_some_and(|lag| lag <= lag_max)
                },
            )
            .await;
        let metrics = self.metrics();
        let caught_up =
            waited.is_ok() && lag_entries(&metrics, id, since).is_some_and(|lag| lag <= lag_max);
        if !caught_up {
            if metrics.current_leader != Some(me) {
                return Err(RaftError::NotLeader {
                    leader: metrics.current_leader,
                    leader_name: metrics
                        .current_leader
                        .map(|leader| self.member_name(leader)),
                });
            }
            return Err(RaftError::LearnerBehind {
                name: member.name,
                lag_entries: lag_entries(&metrics, id, 0),
                lag_entries_max: lag_max,
                timeout_ms: catch_up.timeout_ms,
            });
        }
        let change = openraft::ChangeMembers::AddVoterIds(BTreeSet::from([id]));
        self.membership_settled().await;
        self.raft.change_membership(change, false).await?;
        Ok(MemberInfo {
            id,
            member,
            voter: true,
        })
    }

    /// Waits (at most the quorum timeout) until the latest membership this leader knows is
    /// committed: openraft refuses a change while another is in progress, the first leader's
    /// initial membership included until its first entry commits, and a change asked for just
    /// after an election would otherwise be refused for no reason. If it does not settle,
    /// openraft's refusal says why.
    async fn membership_settled(&self) {
        let _ = self
            .wait_for(self.quorum_timeout, "the membership to commit", |m| {
                m.membership_config.log_id() == m.committed_membership_config.log_id()
            })
            .await;
    }

    /// Removes a member (voter or learner) from the cluster. Must run on the leader; a leader
    /// that removes itself steps down once the change is committed. The member itself takes
    /// no part: the change needs a majority of the voters before and after it, so a member
    /// that is down is removed like any other.
    pub async fn remove_member(&self, id: NodeId) -> Result<(), RaftError> {
        let voter = self
            .members()
            .iter()
            .any(|info| info.id == id && info.voter);
        let ids = BTreeSet::from([id]);
        let change = if voter {
            openraft::ChangeMembers::RemoveVoters(ids)
        } else {
            openraft::ChangeMembers::RemoveNodes(ids)
        };
        self.membership_settled().await;
        let changed = self.raft.change_membership(change, false).await?.log_id;
        // openraft may answer before it publishes the metrics that show the change: wait until
        // they do, so that `members()` right after this returns shows it (a race
        // `tests/cluster.rs` hit, 1 run in about 6). Bounded; the change is committed either way.
        let _ = self
            .wait_for(self.quorum_timeout, "the removal to show", |m| {
                m.membership_config
                    .log_id()
                    .is_some_and(|log_id| log_id >= changed)
            })
            .await;
        Ok(())
    }

    /// After a probe of member `id`: refuses it when its build applies less than the
    /// cluster's version (the version it agreed on in the probe's hello).
    fn check_member_applies_cluster_version(
        &self,
        id: NodeId,
        name: &str,
    ) -> Result<(), RaftError> {
        let cluster_version = self.query(|sm| sm.cluster_version())?;
        match self.dialler.versions.of(id) {
            Some(version) if version < cluster_version => Err(RaftError::MemberTooOld {
                name: name.to_string(),
                version,
                cluster_version,
            }),
            _ => Ok(()),
        }
    }
}

/// What a failed probe says, without the numeric id (the error names the member).
fn probe_failure(error: TransportError) -> String {
    match error {
        TransportError::Unreachable { reason, .. } => reason,
        TransportError::Refused { reason, .. } => {
            format!("something answered but refused: {reason}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn leader_metrics(last_log_index: u64, matched: Option<u64>) -> RaftMetrics {
        let mut metrics = RaftMetrics::new_initial(1);
        metrics.current_leader = Some(1);
        metrics.last_log_index = Some(last_log_index);
        let log_id = |index| openraft::testing::log_id::<crate::raft::TypeConfig>(2, 1, index);
        metrics.replication = Some(BTreeMap::from([
            (1, Some(log_id(last_log_index))),
            (4, matched.map(log_id)),
        ]));
        metrics
    }

    #[test]
    fn a_learner_is_behind_by_the_entries_it_has_not_matched() {
        assert_eq!(
            lag_entries(&leader_metrics(500, Some(430)), 4, 400),
            Some(70)
        );
        assert_eq!(
            lag_entries(&leader_metrics(500, Some(500)), 4, 400),
            Some(0)
        );
    }

    /// A learner that never answered must not look caught up, however short the log: before
    /// this, a phantom at a mistyped address became a voter.
    #[test]
    fn a_learner_that_has_not_matched_its_own_entry_is_not_caught_up() {
        assert_eq!(lag_entries(&leader_metrics(12, None), 4, 11), None);
        assert_eq!(lag_entries(&leader_metrics(12, Some(10)), 4, 11), None);
        assert_eq!(lag_entries(&leader_metrics(12, Some(11)), 4, 11), Some(1));
    }

    #[test]
    fn only_a_leader_knows_a_lag() {
        let mut follower = leader_metrics(12, Some(12));
        follower.replication = None;
        assert_eq!(lag_entries(&follower, 4, 0), None);
        assert_eq!(lag_entries(&leader_metrics(12, Some(12)), 9, 0), None);
    }
}
