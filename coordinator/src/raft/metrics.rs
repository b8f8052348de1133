//! Raft metrics: a task that follows openraft's metrics watch and exports what it says, plus
//! the commit index openraft hands the log store.
//!
//! ```text
//!  raft.metrics() watch ──changed (at most one look per 50 ms), or every second──▶
//!     Observed::observe(m, committed, quorum)
//!     gauges:   term, is_leader, has_quorum, last_log / commit / applied / snapshot index,
//!               apply lag, log entries, time since the leader's last quorum ack
//!     on the leader, per peer (label `peer` = member name): reachable, lag in entries
//!     counters: elections (term rose), leader changes (another leader seen), snapshots
//!               (snapshot index moved: built here or installed from the leader)
//! ```
//!
//! openraft changes its metrics several times per entry (appended, flushed, committed, applied);
//! a look per change cost a wake-up of this task, a clone of the metrics and a dozen gauge
//! updates each, about 4% of a busy member's CPU. Looks are therefore at least
//! [`MIN_LOOK_INTERVAL`] apart, unless the term or the leader changed or a quorum lapse (below)
//! comes sooner: a gauge is at most that much behind, far below any scrape interval, and the
//! changes in between are coalesced by the watch.
//!
//! The counters count what this process *observed*: the watch keeps only the latest value, so
//! a leader that changed and changed back between two looks counts as none. Elections count
//! the rise of the term, so two terms started between two looks count as two. They start from the first observation (a
//! restart's persisted term is not a new election). The periodic look catches the commit
//! index, which moves without a watch notification.

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge};

use super::{LogId, Quorum, RaftHandle, RaftMetrics};

/// The current Raft term (gauge).
pub const RAFT_TERM: &str = "hivekeeper_raft_term";
/// 1 on the leader, 0 elsewhere (gauge).
pub const RAFT_IS_LEADER: &str = "hivekeeper_raft_is_leader";
/// Index of the last entry in this node's log (gauge).
pub const RAFT_LAST_LOG_INDEX: &str = "hivekeeper_raft_last_log_index";
/// Index of the last entry known committed (gauge).
pub const RAFT_COMMIT_INDEX: &str = "hivekeeper_raft_commit_index";
/// Index of the last entry applied to the state machine (gauge).
pub const RAFT_APPLIED_INDEX: &str = "hivekeeper_raft_applied_index";
/// Committed entries not applied yet (gauge).
pub const RAFT_APPLY_LAG_ENTRIES: &str = "hivekeeper_raft_apply_lag_entries";
/// Entries in the log, those purged behind a snapshot excluded (gauge).
pub const RAFT_LOG_ENTRIES: &str = "hivekeeper_raft_log_entries";
/// Last index covered by the latest snapshot (gauge).
pub const RAFT_SNAPSHOT_INDEX: &str = "hivekeeper_raft_snapshot_index";
/// 1 while this node is backed by a quorum (a leader acknowledged by a majority within the
/// election timeout, a follower that knows a leader), 0 otherwise (gauge).
pub const RAFT_HAS_QUORUM: &str = "hivekeeper_raft_has_quorum";
/// On the leader, per peer (`peer` = member name): 1 if it answered within the election
/// timeout (gauge).
pub const RAFT_PEER_REACHABLE: &str = "hivekeeper_raft_peer_reachable";
/// On the leader, per peer (`peer` = member name): entries of the leader's log the peer has
/// not matched yet (gauge).
pub const RAFT_PEER_LAG_ENTRIES: &str = "hivekeeper_raft_peer_lag_entries";
/// On the leader: time since a quorum last acknowledged it (gauge, seconds; absent elsewhere).
pub const RAFT_QUORUM_ACK_AGE_SECONDS: &str = "hivekeeper_raft_quorum_ack_age_seconds";
/// Term increases observed: elections started somewhere in the cluster (counter).
pub const RAFT_ELECTIONS_TOTAL: &str = "hivekeeper_raft_elections_total";
/// Times this node saw a different leader than the one before (counter).
pub const RAFT_LEADER_CHANGES_TOTAL: &str = "hivekeeper_raft_leader_changes_total";
/// Times the snapshot index moved: a snapshot built or installed (counter).
pub const RAFT_SNAPSHOTS_TOTAL: &str = "hivekeeper_raft_snapshots_total";
/// The writer's syncs to disk, by `store` = `log` (the segment log's fdatasync of a batch of
/// entries) | `redb` (the commit of the vote, snapshot and index file) (histogram, seconds).
pub const DISK_SYNC_SECONDS: &str = "hivekeeper_disk_sync_seconds";

/// How often the gauges are refreshed without a watch notification (the commit index).
const REFRESH: Duration = Duration::from_secs(1);
/// The least time between two looks woken by the watch.
const MIN_LOOK_INTERVAL: Duration = Duration::from_millis(50);

/// Gives every Raft metric its help text. Called by the node's `metrics::describe`.
pub fn describe() {
    describe_gauge!(RAFT_TERM, "The current Raft term.");
    describe_histogram!(
        DISK_SYNC_SECONDS,
        metrics::Unit::Seconds,
        "The writer's syncs to disk, by store: log (one fdatasync of the segment log per batch \
         of entries) or redb (a commit of the vote, snapshot and index file). An entry is \
         acknowledged only after its sync."
    );
    for store in ["log", "redb"] {
        let _ = metrics::histogram!(DISK_SYNC_SECONDS, "store" => store);
    }
    describe_gauge!(RAFT_IS_LEADER, "1 on the leader, 0 elsewhere.");
    describe_gauge!(
        RAFT_HAS_QUORUM,
        "1 while backed by a quorum: on the leader, a majority of the voters acknowledged it \
         within the election timeout; on a follower, it knows a leader. 0: requests fail."
    );
    describe_gauge!(
        RAFT_PEER_REACHABLE,
        "On the leader, per peer: 1 if it answered within the election timeout (values on a \
         member that no longer leads are its last as leader)."
    );
    describe_gauge!(
        RAFT_PEER_LAG_ENTRIES,
        "On the leader, per peer: entries of the leader's log it has not matched yet."
    );
    describe_gauge!(
        RAFT_LAST_LOG_INDEX,
        "Index of the last entry in this node's log."
    );
    describe_gauge!(
        RAFT_COMMIT_INDEX,
        "Index of the last entry this node knows committed (durable on a majority)."
    );
    describe_gauge!(RAFT_APPLIED_INDEX, "Index of the last entry applied here.");
    describe_gauge!(
        RAFT_APPLY_LAG_ENTRIES,
        "Committed entries not applied yet here: a slow state machine when it stays up."
    );
    describe_gauge!(
        RAFT_LOG_ENTRIES,
        "Entries in the log since the last purge (last log index minus purged index)."
    );
    describe_gauge!(
        RAFT_SNAPSHOT_INDEX,
        "Last log index covered by the latest snapshot."
    );
    describe_gauge!(
        RAFT_QUORUM_ACK_AGE_SECONDS,
        metrics::Unit::Seconds,
        "On the leader: time since a quorum last acknowledged it (leadership at risk when \
         it nears the election timeout)."
    );
    describe_counter!(
        RAFT_ELECTIONS_TOTAL,
        "Term increases this node observed (each starts an election)."
    );
    describe_counter!(
        RAFT_LEADER_CHANGES_TOTAL,
        "Times this node saw a leader other than the previous one."
    );
    describe_counter!(
        RAFT_SNAPSHOTS_TOTAL,
        "Times the snapshot index moved here (a snapshot built or installed)."
    );
}

/// Starts the exporter; it ends when Raft shuts down (the watch closes) or when aborted.
pub(crate) fn spawn(raft: Arc<RaftHandle>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut watch = raft.metrics.clone();
        let mut refresh = tokio::time::interval(REFRESH);
        let mut seen = Observed::default();
        loop {
            let metrics = watch.borrow_and_update().clone();
            let quorum = raft.quorum();
            seen.observe(&metrics, raft.committed_index(), &quorum);
            let peer_lapse = if quorum.leading {
                export_peers(&raft, &metrics, &quorum)
            } else {
                None
            };
            // openraft's metrics do not change while a cut-off leader's last quorum
            // acknowledgement ages, so the moment the quorum lapses is a wake-up of its own:
            // `has_quorum` drops with `/health`. So is the moment a peer's silence passes the
            // timeout: its reachability comes from the transport's contacts, not from
            // openraft's acknowledgements, and can lapse a few milliseconds after the quorum
            // does (without this wake-up a scrape could see it reachable for up to `REFRESH`
            // after `/health` named it unreachable).
            let lapse = match (quorum_lapse(&quorum), peer_lapse) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let looked = tokio::time::Instant::now();
            tokio::select! {
                changed = watch.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    if !seen.role_changed(&watch.borrow()) {
                        // Never past a lapse: `has_quorum` still drops with `/health`.
                        let next = looked + lapse.map_or(MIN_LOOK_INTERVAL, |lapse| {
                            lapse.min(MIN_LOOK_INTERVAL)
                        });
                        tokio::time::sleep_until(next).await;
                    }
                }
                _ = refresh.tick() => {}
                () = async {
                    match lapse {
                        Some(lapse) => tokio::time::sleep(lapse).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    })
}

/// How long until a leader's quorum lapses (its last acknowledgement gets older than the
/// timeout), if it leads with one now.
fn quorum_lapse(quorum: &Quorum) -> Option<Duration> {
    if !quorum.leading || !quorum.has_quorum {
        return None;
    }
    let age_ms = quorum.ack_age_ms?;
    Some(Duration::from_millis(
        quorum.timeout_ms.saturating_sub(age_ms).saturating_add(1),
    ))
}

/// On the leader: each other member's reachability and lag, labelled by its name. Returns how
/// long until the first peer reachable now would turn unreachable if it stays silent.
fn export_peers(raft: &RaftHandle, m: &RaftMetrics, quorum: &Quorum) -> Option<Duration> {
    let timeout = Duration::from_millis(quorum.timeout_ms);
    let last_log = m.last_log_index;
    let mut first_lapse: Option<Duration> = None;
    for (id, member) in m.membership_config.membership().nodes() {
        if *id == m.id {
            continue;
        }
        let peer = member.name.clone();
        let silent = raft.peer_silent_for(*id);
        let reachable = silent.is_some_and(|silent| silent <= timeout);
        if let Some(silent) = silent.filter(|_| reachable) {
            let lapse = timeout - silent + Duration::from_millis(1);
            first_lapse = Some(first_lapse.map_or(lapse, |first| first.min(lapse)));
        }
        gauge!(RAFT_PEER_REACHABLE, "peer" => peer.clone()).set(if reachable { 1.0 } else { 0.0 });
        let matched = m
            .replication
            .as_ref()
            .and_then(|replication| replication.get(id).copied().flatten())
            .map(|log_id| log_id.index);
        gauge!(RAFT_PEER_LAG_ENTRIES, "peer" => peer).set(entries_behind(last_log, matched) as f64);
    }
    first_lapse
}

/// How many entries up to index `ahead` a reader that reached index `behind` still lacks: a
/// peer's lag behind the leader's last entry, the entries committed but not applied here.
/// openraft's indexes start at 0: with nothing reached, a log holding 0..=n lacks n + 1.
pub fn entries_behind(ahead: Option<u64>, behind: Option<u64>) -> u64 {
    match (ahead, behind) {
        (Some(ahead), Some(behind)) => ahead.saturating_sub(behind),
        (Some(ahead), None) => ahead + 1,
        (None, _) => 0,
    }
}

/// What the last look saw, to count changes.
#[derive(Debug, Default)]
struct Observed {
    /// The term last seen; `None` before the first look.
    term: Option<u64>,
    /// The last leader seen (a leaderless moment does not forget it).
    leader: Option<u64>,
    /// The snapshot index last seen; `None` before the first look.
    snapshot: Option<Option<u64>>,
}

impl Observed {
    /// Whether `m` names another term or leader than the last look: such a look is not
    /// delayed, so `is_leader` and the leader's gauges follow an election at once.
    fn role_changed(&self, m: &RaftMetrics) -> bool {
        self.term != Some(m.current_term)
            || m.current_leader
                .is_some_and(|leader| self.leader != Some(leader))
    }

    /// Exports one look at the metrics.
    fn observe(&mut self, m: &RaftMetrics, committed: Option<u64>, quorum: &Quorum) {
        let index = |log_id: Option<LogId>| log_id.map(|id| id.index);
        let applied = index(m.last_applied);
        let purged = index(m.purged);
        let snapshot = index(m.snapshot);
        let last_log = m.last_log_index;
        let leads = m.current_leader == Some(m.id);
        gauge!(RAFT_TERM).set(m.current_term as f64);
        gauge!(RAFT_IS_LEADER).set(if leads { 1.0 } else { 0.0 });
        gauge!(RAFT_HAS_QUORUM).set(if quorum.has_quorum { 1.0 } else { 0.0 });
        let or_zero = |index: Option<u64>| index.unwrap_or(0) as f64;
        gauge!(RAFT_LAST_LOG_INDEX).set(or_zero(last_log));
        gauge!(RAFT_COMMIT_INDEX).set(or_zero(committed));
        gauge!(RAFT_APPLIED_INDEX).set(or_zero(applied));
        gauge!(RAFT_SNAPSHOT_INDEX).set(or_zero(snapshot));
        gauge!(RAFT_APPLY_LAG_ENTRIES).set(entries_behind(committed, applied) as f64);
        // Indexes start at 0 in openraft: a log holding 0..=n has n + 1 entries.
        gauge!(RAFT_LOG_ENTRIES).set(match (last_log, purged) {
            (Some(last), Some(purged)) => last.saturating_sub(purged) as f64,
            (Some(last), None) => last as f64 + 1.0,
            (None, _) => 0.0,
        });
        if leads && let Some(age_ms) = super::quorum::quorum_ack_age_ms(m) {
            gauge!(RAFT_QUORUM_ACK_AGE_SECONDS).set(age_ms as f64 / 1_000.0);
        }
        if let Some(term) = self.term {
            counter!(RAFT_ELECTIONS_TOTAL).increment(m.current_term.saturating_sub(term));
        }
        if let Some(leader) = m.current_leader {
            if self.term.is_some() && self.leader != Some(leader) {
                counter!(RAFT_LEADER_CHANGES_TOTAL).increment(1);
            }
            self.leader = Some(leader);
        }
        if self.snapshot.is_some_and(|seen| snapshot > seen) {
            counter!(RAFT_SNAPSHOTS_TOTAL).increment(1);
        }
        self.term = Some(m.current_term);
        self.snapshot = Some(snapshot);
        // Exported from the first look, so a dashboard sees 0 rather than nothing.
        counter!(RAFT_ELECTIONS_TOTAL).increment(0);
        counter!(RAFT_LEADER_CHANGES_TOTAL).increment(0);
        counter!(RAFT_SNAPSHOTS_TOTAL).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::entries_behind;

    #[test]
    fn a_reader_lacks_the_entries_it_has_not_reached() {
        assert_eq!(entries_behind(Some(120), Some(120)), 0);
        assert_eq!(entries_behind(Some(120), Some(100)), 20);
        assert_eq!(entries_behind(Some(120), None), 121);
        assert_eq!(entries_behind(None, None), 0);
    }
}
