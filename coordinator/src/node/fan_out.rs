//! Event fan-out: turns what applied entries did into work for the rest of the node — final
//! answers for the waits component, notices for the front door, lease bookkeeping for the
//! keeper, and the node's lease and resource metrics. No domain logic: the state machine
//! already decided everything; this only routes.
//!
//! ```text
//!  sm worker (openraft) ─ Applied ─▶ FanOut::applied, on the same task, in log order
//!     reply to an agent's command ─▶ Waits::replied   (answered at once, or Queued)
//!     Event::Respond             ─▶ Waits::deferred  (else Outbound::Respond: not pending here)
//!     LeaseExpired/Revoked, lost ─▶ Outbound::Notify  ─▶ front door (evt topic)
//!     Preempted                  ─▶ Outbound::Notify  (reservation.preempted)
//!     PreemptionWithdrawn        ─▶ Outbound::Notify  (reservation.preemption_withdrawn)
//!     AccountChanged (rotated,   ─▶ Outbound::Disconnect ─▶ front door closes its connections
//!       removed)
//!     LeaseGranted / LeaseEnded  ─▶ LeaseKeeper (cast)
//!     every event                ─▶ NodeMetrics (waiters: the machine's count, read when an
//!                                   entry queued or answered a waiter)
//! ```
//!
//! It runs where the answer is produced, on openraft's state-machine worker right after the
//! apply (the machine unlocked), so an answer goes to its agent with no channel or task in
//! between. Everything here is non-blocking: map updates, metric updates, channel sends.
//!
//! Entries re-applied at start (`replayed`) feed the keeper but answer and tell nobody: their
//! answers, if any, went out before the restart, and an agent that missed one retries the same
//! request id and gets it from the dedup memory.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use hivekeeper_protocol::{Event as Notice, KeySelector, LostReason, ResourceKind};
use ractor::ActorRef;
use tokio::sync::mpsc;

use super::Outbound;
use super::lease_keeper::KeeperMsg;
use super::metrics::NodeMetrics;
use super::waits::Waits;
use super::watches::Watches;
use crate::raft::{Applied, AppliedSink, Origin, RaftHandle};
use crate::state_machine::{
    AccountChange, Event, LeaseEnd, ReleaseReason, Reply, ResourceKey, StateMachine, Text,
};

/// Most key changes one look of [`FanOut::key_space_changed`] matches against the waiting polls;
/// past it every poll is woken instead.
const WAKE_EVENTS_MAX: usize = 4_096;

/// The fan-out: the node's [`AppliedSink`].
pub(crate) struct FanOut {
    /// Final answers of requests pending here.
    waits: Arc<Waits>,
    /// The lease keeper, told of leases granted and ended.
    keeper: ActorRef<KeeperMsg>,
    /// To the front door: notices, and final answers of requests not pending here. Unbounded:
    /// fed at the apply rate and drained by the front door, which only queues into its
    /// transport's own bounded queue.
    outbound: mpsc::UnboundedSender<Outbound>,
    /// Read for `hivekeeper_leases_active` (weak: Raft holds this sink).
    raft: Weak<RaftHandle>,
    /// The gauges' bookkeeping; only the sm worker calls in, so the lock is never contended.
    metrics: Mutex<NodeMetrics>,
    /// The `watch.poll`s waiting here, woken by the key changes of applied entries.
    watches: Arc<Watches>,
    /// The key space's revision the watches were last told of.
    kv_seen: Mutex<u64>,
}

impl FanOut {
    /// The fan-out for a node, with its gauges set from the machine as it is now.
    pub(crate) fn new(
        waits: Arc<Waits>,
        keeper: ActorRef<KeeperMsg>,
        outbound: mpsc::UnboundedSender<Outbound>,
        watches: Arc<Watches>,
        raft: &Arc<RaftHandle>,
    ) -> FanOut {
        let kv_seen = raft.query(|sm| sm.key_space().revision()).unwrap_or(0);
        let fan_out = FanOut {
            waits,
            keeper,
            outbound,
            raft: Arc::downgrade(raft),
            metrics: Mutex::new(NodeMetrics::new()),
            watches,
            kv_seen: Mutex::new(kv_seen),
        };
        fan_out.refresh_leases_active();
        fan_out.refresh_waiters();
        fan_out.refresh_dedup_agents();
        fan_out
    }

    /// Reads the machine for a gauge. `None` while the node stops (Raft gone) or when the read
    /// failed: the gauge stays as it was, a metric is not worth stopping the node for.
    fn read<T>(&self, gauge: &str, read: impl FnOnce(&StateMachine) -> T) -> Option<T> {
        let raft = self.raft.upgrade()?;
        raft.query(read)
            .inspect_err(
                |error| tracing::warn!(%error, gauge, "could not read the machine for a gauge"),
            )
            .ok()
    }

    /// Sets `hivekeeper_resource_waiters` from the machine's own count, when an entry queued
    /// or answered a waiter (its `Queued` and `Respond` events), or the machine was replaced.
    /// Read from the machine rather than summed from events, so it is right from the first
    /// entry whatever was applied before the fan-out was installed (a restart's replay).
    fn refresh_waiters(&self) {
        if let Some(counts) = self.read("waiters", |sm| sm.waiter_counts()) {
            self.metrics().waiters(|kind| counts.get(kind));
        }
    }

    /// Sets `hivekeeper_leases_active` from the machine: a scan of the leases, done only when
    /// an entry granted or ended one, or the machine was replaced.
    fn refresh_leases_active(&self) {
        if let Some(active) = self.read("leases_active", |sm| sm.lease_count()) {
            self.metrics().leases_active(active);
        }
    }

    /// Sets `hivekeeper_dedup_agents` from the machine after every entry (a length: it changes
    /// with most entries, and with the sweeps of idle agents), and `hivekeeper_cluster_version`
    /// (one number, read under the same lock).
    fn refresh_dedup_agents(&self) {
        let read = self.read("dedup_agents", |sm| {
            (sm.dedup_agent_count(), sm.cluster_version())
        });
        if let Some((agents, cluster_version)) = read {
            let metrics = self.metrics();
            metrics.dedup_agents(agents);
            metrics.cluster_version(cluster_version);
        }
    }

    fn metrics(&self) -> std::sync::MutexGuard<'_, NodeMetrics> {
        self.metrics.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the keeper; it is gone only while the node stops.
    fn keeper(&self, message: KeeperMsg) {
        let _ = self.keeper.cast(message);
    }

    /// Tells the front door; it is gone only while the node stops.
    fn outbound(&self, outbound: Outbound) {
        let _ = self.outbound.send(outbound);
    }
}

impl AppliedSink for FanOut {
    fn applied(&self, applied: Applied) {
        let (origin, reply, events, replayed) = match applied {
            Applied::Entry {
                origin,
                reply,
                events,
                replayed,
                ..
            } => (origin, reply, events, replayed),
            Applied::SnapshotInstalled { last_log_index } => {
                self.snapshot_installed(last_log_index);
                return;
            }
        };
        self.refresh_gauges_for_entry(&events, replayed);
        self.key_space_changed();
        if let Some(origin) = &origin
            && !replayed
        {
            self.waits.replied(origin, reply);
        }
        for event in events {
            if let Some(notice) = self.route_event(event, replayed)
                && !replayed
            {
                self.outbound(notice);
            }
        }
        self.watches.tick_applied();
    }
}

impl FanOut {
    /// After a snapshot from the leader replaced the machine: the keeper resyncs its leases
    /// and every gauge is read again, since no entry's events say what changed.
    fn snapshot_installed(&self, last_log_index: Option<u64>) {
        // A follower too far behind (the leader purged the entries it lacks) catches up
        // from the leader's snapshot: worth a line in the log.
        tracing::info!(?last_log_index, "installed a snapshot from the leader");
        self.keeper(KeeperMsg::Resync);
        self.metrics().snapshot_installed();
        self.refresh_leases_active();
        self.refresh_waiters();
        self.refresh_dedup_agents();
        self.key_space_changed();
        self.watches.wake_all();
        self.watches.tick_applied();
    }

    /// After an entry that changed keys: sets the key space's gauges, counts its new events,
    /// and tells the waiting watches of the changes since they were last told (the events after
    /// the revision seen, from the key space's history). Every poll is woken instead, to read
    /// again, when the changes cannot all be told: some were dropped from the history, or
    /// there are more than one look covers. A read of one number when no key changed.
    fn key_space_changed(&self) {
        let mut seen = self.kv_seen();
        let anyone = self.watches.pending() > 0;
        let every_key = KeySelector::Prefix(String::new());
        let changed = self.read("key_space", |sm| {
            let space = sm.key_space();
            let revision = space.revision();
            (revision > *seen).then(|| {
                let gauges = (
                    space.key_count(),
                    space.bytes(),
                    space.compact_revision(),
                    space.events_count_after(*seen),
                );
                let events = anyone.then(|| space.events_after(*seen, &every_key, WAKE_EVENTS_MAX));
                (revision, gauges, events)
            })
        });
        let Some(Some((revision, (keys, bytes, compact_revision, new_events), events))) = changed
        else {
            return;
        };
        *seen = revision;
        self.metrics()
            .key_space(keys, bytes, compact_revision, new_events);
        match events {
            None => {}
            Some(Ok(page)) if page.progress.is_some() => self.watches.changed(&page.events),
            Some(_) => self.watches.wake_all(),
        }
    }

    fn kv_seen(&self) -> std::sync::MutexGuard<'_, u64> {
        self.kv_seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Updates the gauges one applied entry moved: the counters from its events, the active
    /// leases when it granted or ended one, the dedup memory's agents always, and the waiters
    /// when it queued or answered one.
    fn refresh_gauges_for_entry(&self, events: &[Event], replayed: bool) {
        if self.metrics().entry(events, replayed) {
            self.refresh_leases_active();
        }
        self.refresh_dedup_agents();
        if events
            .iter()
            .any(|event| matches!(event, Event::Queued { .. } | Event::Respond { .. }))
        {
            self.refresh_waiters();
        }
    }

    /// Routes one event of an applied entry: tells the keeper of leases granted and ended, and
    /// returns what the front door should send for it (a notice, a deferred answer not
    /// pending here, a disconnect), if anything. The caller sends it unless the entry is
    /// replayed.
    fn route_event(&self, event: Event, replayed: bool) -> Option<Outbound> {
        match event {
            Event::LeaseGranted { lease, ttl_ms, .. } => {
                self.keeper(KeeperMsg::LeaseGranted { lease, ttl_ms });
                None
            }
            Event::LeaseEnded {
                agent,
                lease,
                reason,
            } => {
                self.keeper(KeeperMsg::LeaseEnded { lease });
                // The owner asked for its own revoke, so it is told only of the others.
                let lease = lease.to_string();
                let event = match reason {
                    LeaseEnd::Expired => Some(Notice::LeaseExpired { lease }),
                    LeaseEnd::AdminRevoked => Some(Notice::LeaseRevoked { lease }),
                    LeaseEnd::Revoked => None,
                };
                event.map(|event| Outbound::Notify { agent, event })
            }
            // Taken away: its lease ended, it was preempted and not released by its vacate
            // deadline, or its max-hold ran out (the one reason the notice names). A route is
            // told `waypoint.lost` too (it is a waypoint reservation of several volumes).
            Event::Released {
                key,
                agent,
                token,
                reason:
                    reason @ (ReleaseReason::LeaseEnded
                    | ReleaseReason::Preempted
                    | ReleaseReason::MaxHold),
                ..
            } => lost(&key, token, reason).map(|event| Outbound::Notify { agent, event }),
            Event::Preempted {
                key,
                agent,
                token,
                vacate_by_ms,
                priority,
                route,
                ..
            } => {
                let event = Notice::ReservationPreempted {
                    name: key.name.to_string(),
                    token,
                    kind: reservation_kind(route),
                    vacate_by_ms,
                    priority,
                };
                Some(Outbound::Notify { agent, event })
            }
            Event::PreemptionWithdrawn {
                key,
                agent,
                token,
                route,
                ..
            } => {
                let event = Notice::ReservationPreemptionWithdrawn {
                    name: key.name.to_string(),
                    token,
                    kind: reservation_kind(route),
                };
                Some(Outbound::Notify { agent, event })
            }
            Event::Respond {
                agent,
                request_id,
                reply,
                ..
            } if !replayed => self.deferred_answer(agent, request_id, reply),
            Event::AccountChanged {
                agent,
                change: AccountChange::Rotated | AccountChange::Removed,
            } => Some(Outbound::Disconnect { agent }),
            Event::AccountChanged {
                change: AccountChange::Added,
                ..
            }
            | Event::Respond { .. }
            | Event::Queued { .. }
            | Event::Granted { .. }
            | Event::Released { .. } => None,
        }
    }

    /// A queued request's final answer (an `Event::Respond`): to its waiter if it is pending
    /// here, else returned as a response for the front door to publish (its request came
    /// before this process started, or through another member).
    fn deferred_answer(&self, agent: Text, request_id: String, reply: Reply) -> Option<Outbound> {
        let origin = Origin {
            agent: agent.to_string(),
            request_id,
        };
        self.waits
            .deferred(&origin, reply)
            .and_then(|reply| crate::response::reply_response(&origin.request_id, &reply))
            .map(|response| Outbound::Respond {
                agent,
                response: Box::new(response),
            })
    }
}

/// The notice of a hold taken away for `reason`: `*.lost` of its kind, naming the reason when
/// it is the hold's max-hold (the lease's end and a preemption go without one); none for a
/// barrier's member, which protects nothing it could lose: its lease's own end (and the
/// answer to a leave it waited in) tells it.
fn lost(key: &ResourceKey, token: u64, reason: ReleaseReason) -> Option<Notice> {
    let name = key.name.to_string();
    let reason = (reason == ReleaseReason::MaxHold).then_some(LostReason::MaxHold);
    Some(match key.kind {
        ResourceKind::Lock => Notice::LockLost {
            name,
            token,
            reason,
        },
        ResourceKind::Sem => Notice::SemLost {
            name,
            token,
            reason,
        },
        ResourceKind::Waypoint => Notice::WaypointLost { name, token },
        ResourceKind::Election => Notice::ElectionLost { name, token },
        ResourceKind::Barrier => return None,
    })
}

/// A reservation notice's `kind`: what its name is.
fn reservation_kind(route: bool) -> String {
    if route { "route" } else { "waypoint" }.to_string()
}
