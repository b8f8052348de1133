//! Event fan-out: turns what applied entries did into work for the rest of the node — deferred
//! answers and notices for the bridge, lease bookkeeping for the keeper. No domain logic: the
//! state machine already decided everything; this only routes.
//!
//! Entries re-applied at start (`replayed`) feed the keeper but send nothing to agents: their
//! answers, if any, went out before the restart, and an agent that missed one retries the same
//! request id and gets it from the dedup memory.
//!
//! It also keeps the node's lease and resource metrics (`metrics.rs`): counters and histograms
//! from entries applied for the first time, gauges from every entry.

use std::sync::Arc;

use hivekeeper_protocol::{Event as Notice, ResourceKind};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;

use super::Outbound;
use super::lease_keeper::KeeperMsg;
use super::metrics::NodeMetrics;
use crate::raft::{Applied, RaftHandle};
use crate::state_machine::{Event, LeaseEnd, ReleaseReason};

/// Messages of the fan-out.
pub enum FanOutMsg {
    /// One applied entry (or a snapshot install).
    Applied(Applied),
}

/// The fan-out's behaviour.
pub struct FanOut;

/// Arguments.
pub struct FanOutArgs {
    /// The lease keeper, told of leases granted and ended.
    pub keeper: ActorRef<KeeperMsg>,
    /// To the bridge. Unbounded: it is fed at the apply rate and drained by the bridge's
    /// publisher, which only queues into the MQTT client's own bounded queue.
    pub outbound: mpsc::UnboundedSender<Outbound>,
    /// Read for `hivekeeper_leases_active`, the machine's own count of live leases.
    pub raft: Arc<RaftHandle>,
}

/// The fan-out's state: its arguments and the metrics' bookkeeping (no domain state).
pub struct FanOutState {
    /// The lease keeper.
    keeper: ActorRef<KeeperMsg>,
    /// To the bridge.
    outbound: mpsc::UnboundedSender<Outbound>,
    /// Read for the live-lease gauge.
    raft: Arc<RaftHandle>,
    /// The holds behind `hivekeeper_resource_held`.
    metrics: NodeMetrics,
}

impl FanOutState {
    /// Sets `hivekeeper_leases_active` from the machine: a scan of the leases, done only when
    /// an entry granted or ended one, or the machine was replaced. A failed read leaves the
    /// gauge as it was: a metric is not worth stopping the node for.
    fn refresh_leases_active(&self) {
        match self.raft.query(|sm| sm.lease_count()) {
            Ok(active) => NodeMetrics::leases_active(active),
            Err(error) => tracing::warn!(%error, "could not count the live leases for metrics"),
        }
    }
}

impl Actor for FanOut {
    type Msg = FanOutMsg;
    type State = FanOutState;
    type Arguments = FanOutArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: FanOutArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let state = FanOutState {
            keeper: args.keeper,
            outbound: args.outbound,
            raft: args.raft,
            metrics: NodeMetrics::new(),
        };
        state.refresh_leases_active();
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let FanOutMsg::Applied(applied) = message;
        let (events, replayed) = match applied {
            Applied::Entry {
                events, replayed, ..
            } => (events, replayed),
            Applied::SnapshotInstalled { last_log_index } => {
                // A follower too far behind (the leader purged the entries it lacks) catches up
                // from the leader's snapshot: worth a line in the log.
                tracing::info!(?last_log_index, "installed a snapshot from the leader");
                state.keeper.cast(KeeperMsg::Resync)?;
                state.metrics.snapshot_installed();
                state.refresh_leases_active();
                return Ok(());
            }
        };
        if state.metrics.entry(&events, replayed) {
            state.refresh_leases_active();
        }
        for event in events {
            let outbound = match event {
                Event::LeaseGranted { lease, ttl_ms, .. } => {
                    state
                        .keeper
                        .cast(KeeperMsg::LeaseGranted { lease, ttl_ms })?;
                    None
                }
                Event::LeaseEnded {
                    agent,
                    lease,
                    reason,
                } => {
                    state.keeper.cast(KeeperMsg::LeaseEnded { lease })?;
                    // The owner asked for its own revoke, so it is told only of the others.
                    let lease = lease.to_string();
                    let event = match reason {
                        LeaseEnd::Expired => Some(Notice::LeaseExpired { lease }),
                        LeaseEnd::AdminRevoked => Some(Notice::LeaseRevoked { lease }),
                        LeaseEnd::Revoked => None,
                    };
                    event.map(|event| Outbound::Notify { agent, event })
                }
                Event::Released {
                    key,
                    agent,
                    token,
                    reason: ReleaseReason::LeaseEnded,
                    ..
                } => {
                    let name = key.name.to_string();
                    let event = match key.kind {
                        ResourceKind::Lock => Notice::LockLost { name, token },
                        ResourceKind::Sem => Notice::SemLost { name, token },
                        ResourceKind::Waypoint => Notice::WaypointLost { name, token },
                    };
                    Some(Outbound::Notify { agent, event })
                }
                Event::Respond {
                    agent,
                    request_id,
                    reply,
                    ..
                } => Some(Outbound::Respond {
                    agent,
                    request_id,
                    reply,
                }),
                Event::Granted { .. } | Event::Released { .. } | Event::Queued { .. } => None,
            };
            if let Some(outbound) = outbound
                && !replayed
            {
                // The bridge is gone only while the node shuts down.
                let _ = state.outbound.send(outbound);
            }
        }
        Ok(())
    }
}
