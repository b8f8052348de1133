//! When a follower starts an election: Hivekeeper's own election timer, in place of openraft's.
//!
//! ```text
//!  peer server: AppendEntries / InstallSnapshot accepted, vote granted ─▶ ElectionClock::heard()
//!  TcpPeer::vote: refused by a voter with a longer log ─▶ ElectionClock::refused_by_longer_log()
//!                                                                              │
//!  election driver task: sleeps until `due` ◀──────────────────────────────────┘
//!    due = heard + (retrying its own election ? 0 : lease) + jitter (+ smaller-log backoff
//!          while behind); a sole voter elects itself at once
//!    at `due`, still not leading and a voter ─▶ raft.trigger().elect()  (openraft votes)
//!      └─ an error: logged once per kind (WARN), counted; the driver keeps going (the
//!         silence restarts, so it tries again after its jitter); it ends only with Raft
//! ```
//!
//! openraft decides *that* a node is elected; this module decides only *when* a follower asks.
//! openraft's own timer (`RaftCore::handle_tick_election`) is off: it checks only on its tick,
//! and in openraft 0.9 it also kept its smaller-log backoff across terms and drew its random
//! timeout once per process, which made about one failover in ten take about 600 ms
//! (docs/BENCHMARKS.md, "Failover"). This driver keeps three properties itself, whatever the
//! openraft version:
//! 1. **The smaller-log backoff holds only while behind.** A candidate refused by a voter with
//!    a longer log waits an extra `2 × election_timeout_max` before its next election, so that
//!    the voter with the longer log can win; the backoff ends as soon as this node's log
//!    reaches the longer one, so a member that lost one election that way does not carry the
//!    wait into later terms (openraft 0.10 applies its own backoff the same way,
//!    databendlabs/openraft#2087).
//! 2. **The jitter is drawn afresh whenever the node hears from a leader**, as in the Raft
//!    paper, so two followers whose timeouts happen to be close do not split their votes at
//!    every failover they share.
//! 3. **The driver sleeps until the exact time.** A check on openraft's tick (every 1.5
//!    heartbeat intervals, 75 ms by default) would add up to 75 ms to every election.
//!
//! The lease stays openraft's: a voter refuses a candidate while it heard from a live leader
//! within openraft's `election_timeout_max` (`Engine::handle_vote_req`), and a follower that
//! knows a leader waits that lease out before its jitter, so the silence before an election is
//! the configured window (201–300 ms by default; [`super::RaftConfig::openraft_election_timeouts_ms`]).
//! Safety does not depend on any of this: openraft counts the votes.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::error::Fatal;
use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics_watch::MetricsWatch;
use super::types::{LogId, NodeId, Raft, TypeConfig, Vote};

/// Whether the driver's elections start with a Pre-Vote round (see [`drive`]).
const PRE_VOTE: bool = true;

/// What the election timer knows, shared by the peer server, the network and the driver.
#[derive(Debug)]
pub struct ElectionClock {
    /// The timing the driver applies.
    timing: ElectionTiming,
    state: Mutex<ClockState>,
    /// True from this node's campaign until it hears from a leader again: the leader it knew is
    /// then no longer one it can reach. With Pre-Vote a node cut off from the majority keeps
    /// its term, so openraft's metrics go on naming the old leader; the leadership watch
    /// (`leadership.rs`) forgets it on this flag instead of on a change of term.
    searching: watch::Sender<bool>,
}

#[derive(Debug, Clone, Copy)]
struct ClockState {
    /// The last time this node heard from a leader it follows, granted a vote, campaigned, was
    /// deposed, or started.
    heard: Instant,
    /// This silence period's random part of the timeout, drawn when `heard` moved.
    jitter: Duration,
    /// The longest log a voter refused us with, if it is longer than ours was.
    greater_log: Option<LogId>,
    /// Whether this node campaigned since it last heard from a leader.
    campaigned: bool,
}

/// The durations the election timer works with, from openraft's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionTiming {
    /// How long a follower that knows a leader waits before its jitter: openraft's leader
    /// lease, during which the other voters refuse any candidate.
    pub lease: Duration,
    /// The jitter's range (openraft's `election_timeout_min..election_timeout_max`).
    pub jitter_min: Duration,
    pub jitter_max: Duration,
    /// Added while this node's log is below one a voter refused it with, so the member with
    /// the longer log (the one that can win) campaigns first.
    pub smaller_log_backoff: Duration,
}

impl ElectionTiming {
    /// The timing openraft's own timer would use with the openraft configuration made from
    /// `config` (its lease is its `election_timeout_max`, its smaller-log backoff twice that).
    pub fn of(config: &super::RaftConfig) -> ElectionTiming {
        let (low_ms, high_ms) = config.openraft_election_timeouts_ms();
        ElectionTiming {
            lease: Duration::from_millis(high_ms),
            jitter_min: Duration::from_millis(low_ms),
            jitter_max: Duration::from_millis(high_ms),
            smaller_log_backoff: Duration::from_millis(2 * high_ms),
        }
    }

    fn draw_jitter(&self) -> Duration {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let (low, high) = (micros(self.jitter_min), micros(self.jitter_max));
        Duration::from_micros(fastrand::u64(low..=high.max(low)))
    }
}

/// What the driver reads of the node's Raft state to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Whether this node leads.
    pub leading: bool,
    /// Whether it votes in the current membership.
    pub voter: bool,
    /// Whether it is the only voter: it elects itself at once, as openraft's timer does.
    pub sole_voter: bool,
    /// The index of its last log entry.
    pub last_log_index: Option<u64>,
}

impl ElectionClock {
    /// A clock that starts counting silence now.
    pub fn new(timing: ElectionTiming) -> Arc<ElectionClock> {
        Arc::new(ElectionClock {
            timing,
            state: Mutex::new(ClockState {
                heard: Instant::now(),
                jitter: timing.draw_jitter(),
                greater_log: None,
                campaigned: false,
            }),
            searching: watch::Sender::new(false),
        })
    }

    /// The flag "campaigned and not heard from a leader since" (see the field), as it changes.
    pub(crate) fn searching(&self) -> watch::Receiver<bool> {
        self.searching.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This node heard from a leader it accepts, granted a vote, or was deposed: the silence
    /// starts again, with a fresh jitter.
    pub fn heard(&self) {
        self.restart_silence(false);
    }

    /// Starts the silence again with a fresh jitter; `campaigned` says whether it starts
    /// because this node campaigned.
    fn restart_silence(&self, campaigned: bool) {
        let jitter = self.timing.draw_jitter();
        let mut state = self.lock();
        state.heard = Instant::now();
        state.jitter = jitter;
        state.campaigned = campaigned;
        if campaigned {
            state.greater_log = None;
        }
        drop(state);
        self.searching.send_if_modified(|searching| {
            let changed = *searching != campaigned;
            *searching = campaigned;
            changed
        });
    }

    /// A voter refused our vote request and reported `theirs` as its last log id, longer than
    /// `ours` (the one our request carried).
    pub fn refused_by_longer_log(&self, ours: Option<LogId>, theirs: Option<LogId>) {
        if theirs <= ours {
            return;
        }
        let mut state = self.lock();
        if theirs > state.greater_log {
            state.greater_log = theirs;
        }
    }

    /// When this node should campaign, given its standing; `None` while it leads or does not
    /// vote.
    pub fn due(&self, standing: Standing) -> Option<Instant> {
        let state = *self.lock();
        election_due(&self.timing, &state, standing)
    }

    /// The node campaigns now: the silence starts again and the smaller-log backoff is spent
    /// (openraft's own timer clears it at every election too).
    fn campaigned(&self) {
        self.restart_silence(true);
    }
}

/// When a node in `standing` with `clock` should start an election.
///
/// Behind is judged by index only (a log id also orders by term): it only times the backoff,
/// never a vote, and after a leader change the node catches up from the new leader anyway.
fn election_due(
    timing: &ElectionTiming,
    clock: &ClockState,
    standing: Standing,
) -> Option<Instant> {
    if standing.leading || !standing.voter {
        return None;
    }
    if standing.sole_voter && !clock.campaigned {
        // Nobody else can lead (a restarted single node): no silence to wait for. Once it has
        // campaigned, an election still in flight gets its jitter before the next one.
        return Some(clock.heard);
    }
    let mut wait = clock.jitter;
    // Only a node retrying its own failed election skips the lease: the other voters' leases
    // ran out before it first campaigned. After hearing from a leader, after a restart and
    // after being deposed (someone with a higher term is alive), it waits the lease out first,
    // or it would campaign while a live leader is about to reach it and depose that leader.
    if !clock.campaigned {
        wait += timing.lease;
    }
    let behind = clock
        .greater_log
        .is_some_and(|longer| standing.last_log_index < Some(longer.index));
    if behind {
        wait += timing.smaller_log_backoff;
    }
    Some(clock.heard + wait)
}

/// Whether what the driver just read means another node leads, so the silence starts again:
/// this node was deposed, or its vote moved to another node's *committed* vote (watching the
/// vote as well catches a leadership too short for the metrics to show).
///
/// Only a committed vote counts: openraft also adopts the uncommitted vote of a rival
/// candidate from its refusal, and that rival may have a shorter log and never win; taking it
/// for a leader would hold back the member that could win by a whole lease
/// (docs/BENCHMARKS.md, "The rival-vote fix", under "Failover").
fn another_leads(
    me: NodeId,
    was_leading: bool,
    leading: bool,
    seen: Option<Vote>,
    vote: Vote,
) -> bool {
    let deposed = was_leading && !leading;
    let vote_moved_to_a_leader =
        seen.is_some_and(|seen| seen != vote) && vote.leader_id.node_id != me && vote.committed;
    deposed || vote_moved_to_a_leader
}

/// The errors `elect()` returned, by kind: the first of each kind is logged at WARN, the
/// rest only counted (at debug), so a fault that repeats at every election timeout cannot
/// flood the log, and a new kind of failure is still seen.
#[derive(Debug, Default)]
struct ElectErrors {
    /// How many of each kind so far.
    counts: BTreeMap<&'static str, u64>,
}

impl ElectErrors {
    /// The kind of an `elect()` error, for the log and the counts.
    fn kind(error: &Fatal<TypeConfig>) -> &'static str {
        match error {
            Fatal::StorageError(_) => "storage_error",
            Fatal::Panicked => "panicked",
            Fatal::Stopped => "stopped",
        }
    }

    /// Records one error; true when it is the first of its kind (the caller logs it).
    fn first_of_its_kind(&mut self, error: &Fatal<TypeConfig>) -> bool {
        let count = self.counts.entry(Self::kind(error)).or_default();
        *count += 1;
        *count == 1
    }
}

/// Runs the election timer of node `me` until openraft shuts down. openraft's own timer must
/// be off (`enable_elect: false` in its configuration).
///
/// Every election starts with a Pre-Vote round (openraft 0.10, `elect(true)`): a node asks
/// whether a quorum would grant it a vote at the next term before it raises its term. A member
/// cut off from the others (a partition, a paused process) therefore keeps its term while it
/// cannot win, and does not depose the live leader with a higher term when it comes back (no
/// term inflation after a partition heals).
pub async fn drive(raft: Raft, metrics: MetricsWatch, me: NodeId, clock: Arc<ElectionClock>) {
    let elect = move || {
        let raft = raft.clone();
        async move { raft.trigger().elect(PRE_VOTE).await }
    };
    drive_with(metrics, me, clock, elect).await;
}

/// [`drive`] with the metrics and the election trigger passed in, so a test can make the
/// trigger fail. An `elect()` error does not end the driver: a node whose trigger failed once
/// would otherwise never campaign again, a follower that could not replace a dead leader. The
/// error is logged (once per kind, [`ElectErrors`]) and the silence restarts, so the next
/// attempt comes after the jitter, not at once. The driver ends when Raft does: its metrics
/// report `Shutdown`, or their sender is gone.
async fn drive_with<F, Fut>(
    mut metrics: MetricsWatch,
    me: NodeId,
    clock: Arc<ElectionClock>,
    mut elect: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Fatal<TypeConfig>>>,
{
    let mut errors = ElectErrors::default();
    let mut was_leading = false;
    let mut seen_vote = None;
    loop {
        let (standing, vote) = {
            let m = metrics.borrow_and_update();
            if m.state == openraft::ServerState::Shutdown {
                return;
            }
            let membership = m.membership_config.membership();
            let voters: Vec<NodeId> = membership.voter_ids().collect();
            let standing = Standing {
                leading: m.current_leader == Some(me) || m.state == openraft::ServerState::Leader,
                voter: voters.contains(&me),
                sole_voter: voters == [me],
                last_log_index: m.last_log_index,
            };
            (standing, m.vote)
        };
        if another_leads(me, was_leading, standing.leading, seen_vote, vote) {
            clock.heard();
        }
        was_leading = standing.leading;
        seen_vote = Some(vote);
        match clock.due(standing) {
            None => {
                // Leading or learning: nothing is due until that changes, and both are read
                // from the metrics (state, leader, membership), so their next change is the
                // time to look again. It polled every 20 ms before, 50 wake-ups a second for
                // the life of a leader.
                if metrics.changed().await.is_err() {
                    return;
                }
            }
            Some(due) if Instant::now() >= due => {
                // The state may have moved since it was read (a vote granted a moment ago):
                // decide again on the fresh one rather than depose a leader just elected.
                if metrics.take_change().unwrap_or(false) {
                    continue;
                }
                clock.campaigned();
                // By name, as every line of ours names members (the id is openraft's).
                let member = super::name_in(&metrics.borrow(), me);
                tracing::info!(
                    %member,
                    "no leader heard within the election timeout: campaigning"
                );
                if let Err(error) = elect().await {
                    if metrics.take_change().is_err() {
                        // Raft is gone (shut down, or stopped by a fatal error it reports
                        // itself): there is nothing left to elect.
                        return;
                    }
                    let kind = ElectErrors::kind(&error);
                    if errors.first_of_its_kind(&error) {
                        tracing::warn!(
                            %member,
                            %error,
                            kind,
                            "could not start an election; retrying after the jitter (further \
                             errors of this kind are logged at debug)"
                        );
                    } else {
                        tracing::debug!(%member, %error, kind, count = errors.counts[kind], "could not start an election");
                    }
                }
            }
            Some(due) => tokio::time::sleep_until(due).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::super::metrics_watch::testing::channel as metrics_channel;
    use super::super::types::RaftMetrics;
    use super::*;

    /// Metrics of node 1, the only voter of its cluster (it elects itself as soon as due).
    fn sole_voter_metrics() -> RaftMetrics {
        let mut metrics = RaftMetrics::new_initial(1);
        let membership = openraft::Membership::new(
            vec![BTreeSet::from([1])],
            BTreeMap::from([(1, super::super::types::Member::default())]),
        )
        .expect("a valid membership");
        metrics.membership_config = Arc::new(openraft::StoredMembership::new(None, membership));
        metrics
    }

    /// An `elect()` error does not end the driver: it keeps trying (after its jitter each time)
    /// and ends only with Raft. A driver that returned at the first error would make one call,
    /// then end, and this test would fail.
    #[tokio::test(start_paused = true)]
    async fn the_election_driver_survives_elect_errors_and_ends_only_with_raft() {
        let (metrics_tx, metrics) = metrics_channel(sole_voter_metrics());
        let calls = Arc::new(AtomicUsize::new(0));
        let elect = {
            let calls = calls.clone();
            move || {
                let call = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    match call {
                        0 | 2 => Err(Fatal::Panicked),
                        1 => Err(Fatal::Stopped),
                        _ => Ok(()),
                    }
                }
            }
        };
        let clock = ElectionClock::new(timing());
        let driver = tokio::spawn(drive_with(metrics, 1, clock, elect));
        // Jitter is at most 150 ms: in 2 s it campaigns again and again, errors or not.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            !driver.is_finished(),
            "the driver ended after an elect() error"
        );
        assert!(
            calls.load(Ordering::SeqCst) >= 10,
            "elect() was called {} times in 2 s",
            calls.load(Ordering::SeqCst)
        );
        // Raft shuts down: the driver ends.
        metrics_tx.send_modify(|metrics| metrics.state = openraft::ServerState::Shutdown);
        tokio::time::timeout(Duration::from_secs(1), driver)
            .await
            .expect("the driver ends once Raft reports Shutdown")
            .expect("the driver did not panic");
    }

    #[test]
    fn elect_errors_are_logged_once_per_kind() {
        let mut errors = ElectErrors::default();
        assert!(errors.first_of_its_kind(&Fatal::Panicked));
        assert!(!errors.first_of_its_kind(&Fatal::Panicked));
        assert!(errors.first_of_its_kind(&Fatal::Stopped));
        assert!(!errors.first_of_its_kind(&Fatal::Panicked));
        assert_eq!(
            errors.counts,
            BTreeMap::from([("panicked", 3), ("stopped", 1)])
        );
    }

    fn timing() -> ElectionTiming {
        ElectionTiming {
            lease: Duration::from_millis(150),
            jitter_min: Duration::from_millis(51),
            jitter_max: Duration::from_millis(150),
            smaller_log_backoff: Duration::from_millis(300),
        }
    }

    fn log_id(index: u64) -> Option<LogId> {
        Some(openraft::testing::log_id::<TypeConfig>(1, 7, index))
    }

    fn follower(last_log_index: u64) -> Standing {
        Standing {
            leading: false,
            voter: true,
            sole_voter: false,
            last_log_index: Some(last_log_index),
        }
    }

    #[test]
    fn a_follower_waits_the_lease_then_its_jitter() {
        let heard = Instant::now();
        let clock = ClockState {
            heard,
            jitter: Duration::from_millis(80),
            greater_log: None,
            campaigned: false,
        };
        assert_eq!(
            election_due(&timing(), &clock, follower(10)),
            Some(heard + Duration::from_millis(230))
        );
        // A candidate whose own election failed: the leases ran out before it campaigned.
        let retrying = ClockState {
            campaigned: true,
            ..clock
        };
        assert_eq!(
            election_due(&timing(), &retrying, follower(10)),
            Some(heard + Duration::from_millis(80))
        );
    }

    #[test]
    fn the_smaller_log_backoff_holds_only_while_behind() {
        let heard = Instant::now();
        let clock = ClockState {
            heard,
            jitter: Duration::from_millis(80),
            greater_log: log_id(20),
            campaigned: false,
        };
        assert_eq!(
            election_due(&timing(), &clock, follower(19)),
            Some(heard + Duration::from_millis(530))
        );
        // Caught up: no backoff (a backoff kept past this point would delay the election by
        // 300 ms).
        assert_eq!(
            election_due(&timing(), &clock, follower(20)),
            Some(heard + Duration::from_millis(230))
        );
    }

    #[test]
    fn a_sole_voter_campaigns_at_once_then_waits_its_jitter() {
        let heard = Instant::now();
        let mut clock = ClockState {
            heard,
            jitter: Duration::from_millis(80),
            greater_log: None,
            campaigned: false,
        };
        let alone = Standing {
            sole_voter: true,
            ..follower(3)
        };
        assert_eq!(election_due(&timing(), &clock, alone), Some(heard));
        clock.campaigned = true;
        assert_eq!(
            election_due(&timing(), &clock, alone),
            Some(heard + Duration::from_millis(80))
        );
    }

    #[test]
    fn only_a_deposition_or_another_committed_leader_restarts_the_silence() {
        let (me, rival) = (1, 2);
        let mine = Vote::new(3, me);
        let rivals = Vote::new(3, rival);
        let elected = Vote::new_committed(4, rival);
        // A rival candidate's uncommitted vote, adopted from its refusal: not a leader.
        assert!(!another_leads(me, false, false, Some(mine), rivals));
        // Another node's committed vote: it leads.
        assert!(another_leads(me, false, false, Some(rivals), elected));
        // Nothing moved.
        assert!(!another_leads(me, false, false, Some(elected), elected));
        // Deposed.
        assert!(another_leads(me, true, false, Some(mine), mine));
        assert!(!another_leads(me, true, true, Some(mine), mine));
    }

    #[test]
    fn a_leader_or_a_learner_never_campaigns() {
        let clock = ClockState {
            heard: Instant::now(),
            jitter: Duration::from_millis(80),
            greater_log: None,
            campaigned: false,
        };
        let leader = Standing {
            leading: true,
            ..follower(1)
        };
        let learner = Standing {
            voter: false,
            ..follower(1)
        };
        assert_eq!(election_due(&timing(), &clock, leader), None);
        assert_eq!(election_due(&timing(), &clock, learner), None);
    }

    #[test]
    fn jitter_is_drawn_within_its_range_and_afresh() {
        let timing = timing();
        let draws: Vec<Duration> = (0..200).map(|_| timing.draw_jitter()).collect();
        assert!(
            draws
                .iter()
                .all(|jitter| (timing.jitter_min..=timing.jitter_max).contains(jitter))
        );
        let distinct: std::collections::BTreeSet<Duration> = draws.into_iter().collect();
        assert!(
            distinct.len() > 100,
            "only {} distinct jitters",
            distinct.len()
        );
    }

    #[test]
    fn only_a_longer_log_records_a_backoff_and_campaigning_clears_it() {
        let clock = ElectionClock::new(timing());
        clock.refused_by_longer_log(log_id(5), log_id(5));
        assert_eq!(clock.lock().greater_log, None);
        clock.refused_by_longer_log(log_id(5), log_id(9));
        clock.refused_by_longer_log(log_id(5), log_id(7));
        assert_eq!(clock.lock().greater_log, log_id(9));
        clock.campaigned();
        assert_eq!(clock.lock().greater_log, None);
    }
}
