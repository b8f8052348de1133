//! `admin.snapshot`: the snapshots a leader keeps while operators read them page by page.
//!
//! ```text
//!  admin.snapshot {}               ─▶ RaftHandle::applied_state (read-index, one copy of the
//!                                     machine at its applied index) ─▶ snapshot() bytes, off
//!                                     the async workers ─▶ pin(index) ─▶ page at offset 0
//!  admin.snapshot {index, offset}  ─▶ pinned(index)? ─▶ the page at offset
//!                                  └─ not kept (expired, evicted, or another leader): refused
//!                                     `bad_request`, the reader starts again without `index`
//! ```
//!
//! Every page of one `index` is cut from the same bytes, so the pages together are the state at
//! one applied log index, however many entries are applied while they are read.
//!
//! Invariants:
//! 1. At most [`PINNED_MAX`] snapshots are kept; pinning another evicts the least recently
//!    read. Memory is bounded by that many states.
//! 2. A snapshot not read for [`PINNED_IDLE`] is dropped at the next pin or read.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_protocol::ErrorCode;
use hivekeeper_protocol::validate::SNAPSHOT_PAGE_BYTES_DEFAULT;
use tokio::time::Instant;

use super::NodeError;
use crate::answer::Answer;
use crate::backup::PinnedSnapshot;
use crate::raft::{RaftError, RaftHandle};
use crate::state_machine::Reply;

/// Most snapshots a leader keeps at once (two operators backing up at the same time, or one
/// retrying while its abandoned read is still kept).
pub(super) const PINNED_MAX: usize = 2;

/// How long a snapshot is kept after its last page was read: far longer than between two
/// pages of one reader, short enough that an abandoned read frees its memory soon.
pub(super) const PINNED_IDLE: Duration = Duration::from_secs(60);

/// One kept snapshot and when it was last read.
struct Pinned {
    /// The snapshot, shared with the pages being cut from it.
    snapshot: Arc<PinnedSnapshot>,
    /// The last pin or read.
    used: Instant,
}

/// The snapshots this node keeps for `admin.snapshot` readers.
#[derive(Default)]
pub(crate) struct KeptSnapshots {
    /// Least recently used first; at most [`PINNED_MAX`].
    pinned: Mutex<Vec<Pinned>>,
}

impl KeptSnapshots {
    /// Answers `admin.snapshot` on this node (the leader): a new snapshot's first page without
    /// `index`, else the page at `offset` of the kept snapshot at `index`.
    pub(super) async fn page(
        &self,
        raft: &RaftHandle,
        index: Option<u64>,
        offset: Option<u64>,
        page_bytes_max: Option<u32>,
    ) -> Result<Answer, NodeError> {
        let page_bytes = page_bytes_max.unwrap_or(SNAPSHOT_PAGE_BYTES_DEFAULT) as usize;
        let snapshot = match index {
            None => self.take(raft).await?,
            Some(index) => match self.pinned(index) {
                Some(snapshot) => snapshot,
                None => {
                    return Ok(Reply::refused(
                        ErrorCode::BadRequest,
                        format!(
                            "admin.snapshot: no snapshot at index {index} is kept on this leader \
                             (it is dropped {} s after its last page, or the leader changed): \
                             start again without `index`",
                            PINNED_IDLE.as_secs()
                        ),
                    )
                    .into());
                }
            },
        };
        Ok(match snapshot.page(offset.unwrap_or(0), page_bytes) {
            Ok(page) => Answer::Snapshot(Box::new(page)),
            Err(error) => {
                Reply::refused(ErrorCode::BadRequest, format!("admin.snapshot: {error}")).into()
            }
        })
    }

    /// A new snapshot of the state applied here after a read-index round, kept.
    async fn take(&self, raft: &RaftHandle) -> Result<Arc<PinnedSnapshot>, NodeError> {
        let state = raft.applied_state().await?;
        let (index, term) = (state.index, state.term);
        // Serializing a large machine takes milliseconds of CPU: keep it off the async workers.
        let bytes = tokio::task::spawn_blocking(move || state.machine.snapshot())
            .await
            .map_err(|error| RaftError::Runtime(format!("serializing a snapshot: {error}")))?;
        let snapshot = Arc::new(PinnedSnapshot::new(index, term, bytes));
        tracing::info!(
            log_index = index,
            term,
            bytes = snapshot.len(),
            "snapshot taken for an online backup"
        );
        self.pin(snapshot.clone());
        Ok(snapshot)
    }

    /// Keeps `snapshot` (invariants 1 and 2).
    fn pin(&self, snapshot: Arc<PinnedSnapshot>) {
        let now = Instant::now();
        let mut pinned = self.lock();
        pinned.retain(|kept| {
            kept.snapshot.index != snapshot.index && now.duration_since(kept.used) < PINNED_IDLE
        });
        while pinned.len() >= PINNED_MAX {
            pinned.remove(0);
        }
        pinned.push(Pinned {
            snapshot,
            used: now,
        });
    }

    /// The kept snapshot at `index`, marked read now.
    fn pinned(&self, index: u64) -> Option<Arc<PinnedSnapshot>> {
        let now = Instant::now();
        let mut pinned = self.lock();
        pinned.retain(|kept| now.duration_since(kept.used) < PINNED_IDLE);
        let at = pinned
            .iter()
            .position(|kept| kept.snapshot.index == index)?;
        let mut kept = pinned.remove(at);
        kept.used = now;
        let snapshot = kept.snapshot.clone();
        pinned.push(kept);
        Some(snapshot)
    }

    /// The list; a panic elsewhere cannot leave it half-changed (each change is one `Vec`
    /// operation), so a poisoned lock is used as is.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pinned>> {
        self.pinned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The indexes kept, least recently read first (tests).
    #[cfg(test)]
    fn kept(&self) -> Vec<u64> {
        self.lock().iter().map(|kept| kept.snapshot.index).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(index: u64) -> Arc<PinnedSnapshot> {
        Arc::new(PinnedSnapshot::new(index, 1, vec![1, 2, 3]))
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_read_is_evicted_and_idle_ones_expire() {
        let kept = KeptSnapshots::default();
        kept.pin(snapshot(10));
        kept.pin(snapshot(20));
        assert_eq!(kept.kept(), [10, 20]);
        // Reading 10 makes 20 the least recently read: a third pin evicts 20.
        assert!(kept.pinned(10).is_some());
        kept.pin(snapshot(30));
        assert_eq!(kept.kept(), [10, 30]);
        assert!(kept.pinned(20).is_none());
        // Pinning an index again replaces it rather than keeping two.
        kept.pin(snapshot(30));
        assert_eq!(kept.kept(), [10, 30]);
        // Idle past PINNED_IDLE: gone at the next read.
        tokio::time::advance(PINNED_IDLE - Duration::from_secs(1)).await;
        assert!(kept.pinned(30).is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(kept.pinned(10).is_none());
        assert_eq!(kept.kept(), [30]);
    }
}
