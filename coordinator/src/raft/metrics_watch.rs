//! openraft's metrics watch, read in place by every reader of this node: the election driver,
//! the leadership follower, the metrics exporter and the handle's views. openraft changes its
//! metrics several times an entry; a task of ours that copied each change onto a watch of its
//! own cost a wake-up and a clone of the metrics per change, on every member.

use futures_util::FutureExt;
use openraft::async_runtime::WatchReceiver;
use openraft::type_config::alias::WatchReceiverOf;
use tokio::sync::watch::Ref;

use super::{RaftMetrics, TypeConfig};

/// A reader of openraft's metrics watch.
#[derive(Clone)]
pub struct MetricsWatch(WatchReceiverOf<TypeConfig, RaftMetrics>);

/// openraft dropped its metrics' sender: Raft has stopped, and the last value stays readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Raft has stopped: its metrics watch is closed")]
pub struct MetricsClosed;

impl MetricsWatch {
    /// A reader of `raft`'s metrics.
    pub fn of(raft: &super::Raft) -> MetricsWatch {
        MetricsWatch(raft.metrics())
    }

    /// The metrics now.
    pub fn borrow(&self) -> Ref<'_, RaftMetrics> {
        self.0.borrow_watched()
    }

    /// The metrics now, marked seen.
    pub fn borrow_and_update(&mut self) -> Ref<'_, RaftMetrics> {
        self.0.borrow_and_update()
    }

    /// Waits for a value not seen yet, and marks it seen. A last value published before the
    /// watch closed is yielded before the closing is reported.
    pub async fn changed(&mut self) -> Result<(), MetricsClosed> {
        self.0.changed().await.map_err(|_| MetricsClosed)
    }

    /// Without waiting: `Ok(true)` (and the value marked seen) when a value not seen yet is
    /// there, `Ok(false)` when none is, `Err` when the watch closed with nothing new.
    pub fn take_change(&mut self) -> Result<bool, MetricsClosed> {
        match self.0.changed().now_or_never() {
            Some(Ok(())) => Ok(true),
            Some(Err(_)) => Err(MetricsClosed),
            None => Ok(false),
        }
    }

    /// Waits until `condition` holds on the metrics (checked on the value now first) and
    /// returns them.
    pub async fn wait_for(
        &mut self,
        condition: impl Fn(&RaftMetrics) -> bool,
    ) -> Result<RaftMetrics, MetricsClosed> {
        loop {
            {
                let now = self.borrow_and_update();
                if condition(&now) {
                    return Ok(now.clone());
                }
            }
            self.changed().await?;
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A metrics watch fed by a test instead of openraft.

    use openraft::async_runtime::{Watch, WatchSender};
    use openraft::type_config::alias::{WatchOf, WatchSenderOf};

    use super::{MetricsWatch, RaftMetrics, TypeConfig};

    /// The sending side of a test's metrics watch.
    pub(crate) struct MetricsSender(WatchSenderOf<TypeConfig, RaftMetrics>);

    impl MetricsSender {
        /// Publishes `metrics`; `false` when no reader is left.
        pub(crate) fn send(&self, metrics: RaftMetrics) -> bool {
            self.0.send(metrics).is_ok()
        }

        /// Changes the published metrics in place and tells the readers.
        pub(crate) fn send_modify(&self, modify: impl FnOnce(&mut RaftMetrics)) {
            self.0.send_if_modified(|metrics| {
                modify(metrics);
                true
            });
        }

        /// The metrics published now.
        pub(crate) fn borrow(&self) -> RaftMetrics {
            self.0.borrow_watched().clone()
        }
    }

    /// A metrics watch starting at `first`.
    pub(crate) fn channel(first: RaftMetrics) -> (MetricsSender, MetricsWatch) {
        let (sender, receiver) = WatchOf::<TypeConfig>::channel(first);
        (MetricsSender(sender), MetricsWatch(receiver))
    }
}
