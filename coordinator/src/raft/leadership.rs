//! One leadership watch for the whole node: what openraft's metrics say about who leads, reduced
//! to the few facts the node layer acts on, and published only when one of them changes.
//!
//! ```text
//!  openraft metrics watch ─▶ follow(): Leadership { term, leader, ready, stopped }
//!                                      │ send_if_modified (only on a change)
//!                                      ▼
//!         lease keeper (ready?), limits configurer (took office?), failure report (stopped?),
//!         the shared broker's notice publisher (leading?)
//! ```
//!
//! Before this, four tasks watched openraft's metrics each on their own, and each woke for
//! every metrics change (every applied entry) to compute the same two booleans.

use tokio::sync::watch;

use super::metrics_watch::MetricsWatch;
use super::types::{NodeId, RaftMetrics};

/// What this node knows about leadership, as one value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leadership {
    /// The current term.
    pub term: u64,
    /// The leader this node knows of in `term`.
    pub leader: Option<NodeId>,
    /// Whether this node is a *ready* leader: it leads and has applied an entry of its own
    /// term, so everything committed before its term is in its state machine. Only a ready
    /// leader keeps lease deadlines and configures limits.
    pub ready: bool,
    /// Set when Raft stopped on its own (a storage error, a panic in apply), with the reason;
    /// a shutdown we asked for is not reported here.
    pub stopped: Option<String>,
}

/// Whether node `me` is a ready leader according to `metrics` (see [`Leadership::ready`]).
pub(crate) fn is_ready_leader(metrics: &RaftMetrics, me: NodeId) -> bool {
    metrics.current_leader == Some(me)
        && metrics
            .last_applied
            .is_some_and(|id| id.leader_id.term == metrics.current_term)
}

/// The leadership that `metrics` describe for node `me`; a leader other than `me` is not known
/// while `searching` (this node campaigned and has not heard from it since, `election.rs`).
fn leadership_of(metrics: &RaftMetrics, me: NodeId, searching: bool) -> Leadership {
    let stopped = match &metrics.running_state {
        Ok(()) => None,
        Err(openraft::error::Fatal::Stopped) => None,
        Err(fatal) => Some(format!("Raft stopped: {fatal}")),
    };
    Leadership {
        term: metrics.current_term,
        leader: metrics
            .current_leader
            .filter(|leader| *leader == me || !searching),
        ready: is_ready_leader(metrics, me),
        stopped,
    }
}

/// Starts the task that follows `raft`'s metrics and returns the watch it publishes. The task
/// ends when Raft shuts down (its metrics watch closes); the last value stays readable.
pub(crate) fn follow(
    mut metrics: MetricsWatch,
    mut searching: watch::Receiver<bool>,
    me: NodeId,
) -> watch::Receiver<Leadership> {
    let first = leadership_of(
        &metrics.borrow_and_update(),
        me,
        *searching.borrow_and_update(),
    );
    let (publish, leadership) = watch::channel(first);
    tokio::spawn(async move {
        // Only the metrics closing ends the task. The flag's sender is the election clock's,
        // whose last handles openraft's core and the election driver hold: it closes in the
        // same instant as Raft stopping, and `select!` polls ready branches in random order.
        // Ending on the flag's closing lost the last metrics one time in two when the task
        // woke late (a busy machine), so a storage error that stopped Raft was never
        // published and the node never exited (e2e_full_disk). A closed flag keeps its last
        // value; the metrics' `changed()` yields their last value before it reports closing.
        let mut searching_open = true;
        loop {
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { break },
                changed = searching.changed(), if searching_open => {
                    searching_open = changed.is_ok();
                }
            }
            let now = leadership_of(
                &metrics.borrow_and_update(),
                me,
                *searching.borrow_and_update(),
            );
            publish.send_if_modified(|current| {
                let changed = *current != now;
                if changed {
                    *current = now;
                }
                changed
            });
        }
        // The metrics closed. openraft's core publishes how it ended (`running_state`: an
        // error, or `Stopped` when asked to) before it drops them (`RaftCore::main`); a core
        // task that panicked drops them with `Ok(())` still in place. That is a stop too, or
        // the node would wait for a failure report that never comes.
        if metrics.borrow().running_state.is_ok() {
            publish.send_modify(|current| {
                current
                    .stopped
                    .get_or_insert_with(|| ENDED_UNREPORTED.to_string());
            });
        }
    });
    leadership
}

/// [`Leadership::stopped`] when openraft's metrics closed without saying how its core ended.
const ENDED_UNREPORTED: &str =
    "Raft stopped: its core task ended without reporting why (a panic inside openraft?)";

#[cfg(test)]
mod tests {
    use openraft::error::Fatal;

    use super::super::metrics_watch::testing::channel as metrics_channel;
    use super::super::types::TypeConfig;
    use super::*;

    /// Follows a node whose Raft stops with `running_state` while the election clock's
    /// `searching` flag closes with it, both before the task runs (as on a busy machine), and
    /// returns the stop the watch published last.
    async fn stop_seen_by_the_watch(
        running_state: Result<(), Fatal<TypeConfig>>,
    ) -> Option<String> {
        let (metrics_tx, metrics) = metrics_channel(RaftMetrics::new_initial(1));
        let (searching_tx, searching) = watch::channel(false);
        let mut leadership = follow(metrics, searching, 1);
        // The task starts and waits on both channels.
        tokio::task::yield_now().await;
        let mut last = metrics_tx.borrow();
        last.state = openraft::ServerState::Shutdown;
        last.running_state = running_state;
        assert!(metrics_tx.send(last), "the task holds a receiver");
        drop((metrics_tx, searching_tx));
        // The task ends once the metrics are closed; its last value stays.
        while leadership.changed().await.is_ok() {}
        leadership.borrow().stopped.clone()
    }

    /// A full disk stops openraft's core; its last metrics say why, and in the same instant
    /// the election clock's `searching` flag closes (the core and the election driver held
    /// the clock's last handles). The watch must still publish the stop, or the node never
    /// exits (`tests/e2e_full_disk.rs` hangs then): a task that took either ready branch at
    /// random would, on the flag's, end without reading the last metrics. Many rounds, so that
    /// each coin flip has its chance to go wrong.
    #[tokio::test(flavor = "current_thread")]
    async fn raft_stopping_is_published_when_the_election_flag_closes_with_it() {
        let error = openraft::StorageError::<TypeConfig>::from_io_error(
            openraft::ErrorSubject::Logs,
            openraft::ErrorVerb::Write,
            std::io::Error::other("No space left on device"),
        );
        let expected = format!("Raft stopped: {error}");
        for round in 0..64 {
            let stopped = stop_seen_by_the_watch(Err(Fatal::StorageError(error.clone()))).await;
            assert_eq!(stopped.as_deref(), Some(expected.as_str()), "round {round}");
        }
    }

    /// openraft's core task ended without publishing how (it panicked: its metrics are dropped
    /// with `running_state` still `Ok`): the node must hear of it as of any other stop.
    #[tokio::test(flavor = "current_thread")]
    async fn a_core_that_ends_without_a_word_is_published_as_stopped() {
        let (metrics_tx, metrics) = metrics_channel(RaftMetrics::new_initial(1));
        let (_searching_tx, searching) = watch::channel(false);
        let mut leadership = follow(metrics, searching, 1);
        tokio::task::yield_now().await;
        drop(metrics_tx);
        while leadership.changed().await.is_ok() {}
        assert_eq!(
            leadership.borrow().stopped.as_deref(),
            Some(ENDED_UNREPORTED)
        );
    }

    /// A stop we asked for (`Fatal::Stopped`) is not a failure.
    #[tokio::test(flavor = "current_thread")]
    async fn a_requested_stop_is_not_published_as_a_failure() {
        assert_eq!(stop_seen_by_the_watch(Err(Fatal::Stopped)).await, None);
    }
}
