//! The node's metrics: leases and resources, updated by the fan-out from the events of applied
//! entries (never inside the state machine, which stays pure), plus the lease keeper's
//! keepalive counter. Calls go to the `metrics` facade; `hivekeeper serve` installs the
//! Prometheus recorder and calls [`describe`] once.
//!
//! ```text
//!  Applied::Entry { reply, events, replayed } ─▶ FanOut ─▶ NodeMetrics::entry
//!     counters, histograms: entries applied for the first time only (not `replayed`)
//!     gauges: every entry, replayed or not (they mirror state, not activity)
//!  LeaseKeeper: a keepalive answered `Ttl` ─▶ hivekeeper_leases_keepalives_total
//!              an expiry the machine refused ─▶ hivekeeper_leases_expiry_refused_total
//!              every keepalive on a known deadline ─▶ hivekeeper_leases_keepalive_ttl_used_ratio
//! ```
//!
//! # What counts, and why
//! - Counters and histograms count what this process applied for the first time. Entries
//!   re-applied at start (`replayed`) happened before the restart; counting them again would
//!   show a burst of old activity on every restart (Prometheus already sees the reset).
//! - `hivekeeper_leases_active` is read from the machine (`StateMachine::lease_count`) whenever an
//!   entry granted or ended a lease, when a snapshot is installed and at start: always the
//!   machine's own number, snapshots included.
//! - `hivekeeper_dedup_agents` is read from the machine after every entry (a length, under the
//!   lock the applier just released), so it follows the sweeps of idle agents too.
//! - `hivekeeper_resource_held{kind}` is kept from `Granted` / `Released` events, replayed ones
//!   included, by fencing token and lease (each grant has its own pair: the members of a
//!   barrier's round share its token; a multi-lock's pair is on each of its locks, so it is
//!   counted once a lock). The machine has no public count of holds, so holds
//!   restored from a snapshot at start, or installed by one, are not counted until a later
//!   entry grants them again; a release of such a hold is ignored rather than driving the
//!   gauge below zero.
//! - `hivekeeper_resource_waiters{kind}` is kept by the MQTT bridge, which alone knows a queued
//!   request's kind (an applied `Queued` reply carries neither kind nor request id).
//! - Labels are the resource kind, never the resource name, to keep cardinality bounded.

use std::collections::{HashMap, HashSet};

use hivekeeper_protocol::{Op, Priority, ResourceKind, Response};
use metrics::{
    Counter, Gauge, Histogram, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

use crate::state_machine::{Event, LeaseEnd, LeaseId, ReleaseReason, ResourceKey};

/// Live leases (gauge).
pub const LEASES_ACTIVE: &str = "hivekeeper_leases_active";
/// Agents the replicated retry memory remembers (`StateMachine::dedup_agent_count`).
pub const DEDUP_AGENTS: &str = "hivekeeper_dedup_agents";
/// The cluster version this member applied (`StateMachine::cluster_version`), gauge.
pub const CLUSTER_VERSION: &str = "hivekeeper_cluster_version";
/// Keys in the key space (gauge).
pub const KV_KEYS: &str = "hivekeeper_kv_keys";
/// Bytes of the keys and values in the key space (gauge).
pub const KV_BYTES: &str = "hivekeeper_kv_bytes";
/// Key changes applied: one per key put or deleted (counter).
pub const KV_EVENTS_TOTAL: &str = "hivekeeper_kv_events_total";
/// The revision at and before which the watch history was dropped (gauge).
pub const KV_COMPACT_REVISION: &str = "hivekeeper_kv_compact_revision";
/// `watch.poll`s waiting on this member (gauge).
pub const WATCH_POLLS_PENDING: &str = "hivekeeper_watch_polls_pending";
/// Leases granted (counter).
pub const LEASES_GRANTED_TOTAL: &str = "hivekeeper_leases_granted_total";
/// Leases ended, `reason` = `revoked` | `expired` | `admin_revoked` (counter).
pub const LEASES_ENDED_TOTAL: &str = "hivekeeper_leases_ended_total";
/// Keepalives that moved a lease's deadline (counter).
pub const LEASES_KEEPALIVES_TOTAL: &str = "hivekeeper_leases_keepalives_total";
/// Lease expiries the leader proposed that the machine applied but refused, each lease
/// counted once per refusal (counter): the machine's clock is behind the leader's (a leader
/// clock that went back, or a member whose clock is slow), `clock.rs` in the state machine.
/// The keeper backs each off (100 ms doubling to 5 s); a steady rise means clocks disagree.
pub const LEASES_EXPIRY_REFUSED_TOTAL: &str = "hivekeeper_leases_expiry_refused_total";
/// The fraction of its TTL a lease had used up when a keepalive arrived (histogram, a ratio):
/// time since the previous renewal (or grant, or the leader taking office) over the TTL. The
/// SDK keeps alive every TTL/3, so a healthy swarm sits near 0.33; values near 1 mean agents
/// are about to lose their leases, and values of 1 or more are keepalives that arrived too late
/// (refused, the lease is being expired).
pub const LEASES_KEEPALIVE_TTL_USED_RATIO: &str = "hivekeeper_leases_keepalive_ttl_used_ratio";
/// Bucket bounds of [`LEASES_KEEPALIVE_TTL_USED_RATIO`]: tenths, with detail near the end.
pub const TTL_USED_RATIO_BUCKETS: [f64; 12] =
    [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.5];
/// Grants of locks, semaphores and waypoints, immediate or from the queue, by `kind`.
pub const RESOURCE_GRANTS_TOTAL: &str = "hivekeeper_resource_grants_total";
/// Grants from the queue in the same entry that released the resource, by `kind`.
pub const RESOURCE_HANDOVERS_TOTAL: &str = "hivekeeper_resource_handovers_total";
/// Holds that ended, by `kind` and `reason` = `released` | `lease_ended` | `window_ended` |
/// `preempted`.
pub const RESOURCE_RELEASES_TOTAL: &str = "hivekeeper_resource_releases_total";
/// Waypoint reservations and routes preempted by a request of a higher priority (each told
/// `reservation.preempted` with a vacate deadline), by the preemptor's `priority` (counter).
pub const RESERVATIONS_PREEMPTED_TOTAL: &str = "hivekeeper_reservations_preempted_total";
/// Vacate deadlines dropped because no waiting request needed the reservation's airspace any
/// more (each holder told `reservation.preemption_withdrawn`) (counter).
pub const PREEMPTIONS_WITHDRAWN_TOTAL: &str = "hivekeeper_reservation_preemptions_withdrawn_total";
/// Time from queueing to grant, 0 for an immediate grant, by `kind` (histogram).
pub const RESOURCE_WAIT_SECONDS: &str = "hivekeeper_resource_wait_seconds";
/// Time a hold lasted, by `kind` (histogram).
pub const RESOURCE_HOLD_SECONDS: &str = "hivekeeper_resource_hold_seconds";
/// Holds now, by `kind` (gauge).
pub const RESOURCE_HELD: &str = "hivekeeper_resource_held";
/// Queued requests not answered yet, by `kind` (gauge: the machine's count, read by the
/// fan-out when an entry queues or answers a waiter).
pub const RESOURCE_WAITERS: &str = "hivekeeper_resource_waiters";
/// Final answers to decoded requests, by `op` and `code` (counter).
pub const REQUESTS_TOTAL: &str = "hivekeeper_requests_total";
/// Submission to final answer, by `op` (histogram).
pub const REQUEST_DURATION_SECONDS: &str = "hivekeeper_request_duration_seconds";
/// `fence.check` answers, by `result` = `valid` | `stale` (counter).
pub const FENCE_CHECKS_TOTAL: &str = "hivekeeper_fence_checks_total";

/// Every resource kind, for the per-kind gauges.
const KINDS: [ResourceKind; ResourceKind::ALL.len()] = ResourceKind::ALL;

/// Gives every metric of the node its help text. Call once, after the recorder is installed.
pub fn describe() {
    crate::raft::metrics::describe();
    describe_counter!(
        REQUESTS_TOTAL,
        "Final answers to requests, by op and code (ok or the error code); a queued request is \
         counted when its deferred answer is given."
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "From submitting a request to its final answer (a queued request's includes its time \
         in the queue), by op."
    );
    describe_counter!(
        FENCE_CHECKS_TOTAL,
        "fence.check answers, by result: valid (held right now) or stale (a protected \
         resource was shown a token that is no longer held)."
    );
    describe_gauge!(LEASES_ACTIVE, "Leases alive in the state machine.");
    describe_gauge!(
        CLUSTER_VERSION,
        "The cluster version this member applied: the feature level every member's build supports."
    );
    describe_gauge!(KV_KEYS, "Keys in the key space.");
    describe_gauge!(KV_BYTES, "Bytes of the keys and values in the key space.");
    describe_counter!(
        KV_EVENTS_TOTAL,
        "Key changes applied on this member: one per key put or deleted."
    );
    describe_gauge!(
        KV_COMPACT_REVISION,
        "The revision at and before which watch events are no longer kept."
    );
    describe_gauge!(
        WATCH_POLLS_PENDING,
        "watch.poll requests waiting on this member."
    );
    describe_gauge!(
        DEDUP_AGENTS,
        "Agents whose recent outcomes the state machine remembers for retries (bounded by \
         dedup_agents_max; agents without a live lease leave after dedup_idle_ms)."
    );
    describe_counter!(LEASES_GRANTED_TOTAL, "Leases granted.");
    describe_counter!(
        LEASES_ENDED_TOTAL,
        "Leases ended, by reason (revoked by their agent, expired, or admin_revoked by an operator)."
    );
    describe_counter!(
        LEASES_KEEPALIVES_TOTAL,
        "Keepalives that moved a lease's deadline (answered on the leader)."
    );
    describe_counter!(
        LEASES_EXPIRY_REFUSED_TOTAL,
        "Lease expiries proposed by this leader that the machine refused as not yet due (its \
         clock is behind the leader's); each is retried with backoff."
    );
    describe_histogram!(
        LEASES_KEEPALIVE_TTL_USED_RATIO,
        "Fraction of the TTL used since the previous renewal when a keepalive arrived (about \
         0.33 with the SDK; 1 or more: too late)."
    );
    describe_counter!(
        RESOURCE_GRANTS_TOTAL,
        "Locks, semaphore permits and waypoints granted, at once or from the queue, by kind."
    );
    describe_counter!(
        RESOURCE_HANDOVERS_TOTAL,
        "Grants to a waiter in the same log entry that released the resource, by kind."
    );
    describe_counter!(
        RESOURCE_RELEASES_TOTAL,
        "Holds ended, by kind and reason (released by the holder, its lease ended, its window \
         ended, or preempted and not released by its vacate deadline)."
    );
    describe_counter!(
        RESERVATIONS_PREEMPTED_TOTAL,
        "Waypoint reservations and routes preempted by a higher priority (told to vacate by a \
         deadline), by the preemptor's priority."
    );
    describe_counter!(
        PREEMPTIONS_WITHDRAWN_TOTAL,
        "Vacate deadlines dropped because no waiting request needed the preempted reservation's \
         airspace any more (the holder keeps it)."
    );
    describe_resources();
}

/// The per-kind resource metrics' help texts.
fn describe_resources() {
    describe_histogram!(
        RESOURCE_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Time a grant waited in the queue (0 when granted at once), by kind, machine clock."
    );
    describe_histogram!(
        RESOURCE_HOLD_SECONDS,
        metrics::Unit::Seconds,
        "How long a hold lasted, by kind, machine clock."
    );
    describe_gauge!(RESOURCE_HELD, "Holds now, by kind.");
    describe_gauge!(
        RESOURCE_WAITERS,
        "Requests queued on a resource and not answered yet, by kind (the state machine's \
         count; the same on every member)."
    );
}

/// The label value of a kind.
pub fn kind_label(kind: ResourceKind) -> &'static str {
    kind.as_str()
}

/// Every way a lease ends, for `hivekeeper_leases_ended_total{reason}`.
const LEASE_ENDS: [LeaseEnd; 3] = [LeaseEnd::Revoked, LeaseEnd::Expired, LeaseEnd::AdminRevoked];

/// A lease end's place in [`LEASE_ENDS`].
fn lease_end_slot(reason: LeaseEnd) -> usize {
    LEASE_ENDS
        .iter()
        .position(|end| *end == reason)
        .unwrap_or(0)
}

/// The `reason` label of a lease's end.
fn lease_end_label(reason: LeaseEnd) -> &'static str {
    match reason {
        LeaseEnd::Revoked => "revoked",
        LeaseEnd::Expired => "expired",
        LeaseEnd::AdminRevoked => "admin_revoked",
    }
}

/// Every way a hold ends, for `hivekeeper_resource_releases_total{kind,reason}`.
const RELEASE_REASONS: [ReleaseReason; 5] = [
    ReleaseReason::Released,
    ReleaseReason::LeaseEnded,
    ReleaseReason::WindowEnded,
    ReleaseReason::Preempted,
    ReleaseReason::MaxHold,
];

/// A hold end's place in [`RELEASE_REASONS`].
fn release_reason_slot(reason: ReleaseReason) -> usize {
    RELEASE_REASONS
        .iter()
        .position(|end| *end == reason)
        .unwrap_or(0)
}

/// The `reason` label of a hold's end.
fn release_reason_label(reason: ReleaseReason) -> &'static str {
    match reason {
        ReleaseReason::Released => "released",
        ReleaseReason::LeaseEnded => "lease_ended",
        ReleaseReason::WindowEnded => "window_ended",
        ReleaseReason::Preempted => "preempted",
        ReleaseReason::MaxHold => "max_hold",
    }
}

/// The `result` label of a `fence.check` answer.
fn fence_result_label(valid: bool) -> &'static str {
    if valid { "valid" } else { "stale" }
}

/// Registers every series whose labels are known before anything happens, at 0 (counters)
/// or empty (histograms), so a scrape of a fresh node shows each documented metric and a
/// `rate()` over the first event starts from 0 rather than from nothing. Counters only move
/// up from here; registering again is harmless. A preemptor's priority is 1 to 3 (a routine
/// request preempts nobody).
fn register_series() {
    gauge!(WATCH_POLLS_PENDING).set(0.0);
    counter!(LEASES_KEEPALIVES_TOTAL).increment(0);
    counter!(LEASES_EXPIRY_REFUSED_TOTAL).increment(0);
    let _ = histogram!(LEASES_KEEPALIVE_TTL_USED_RATIO);
    for level in 1..=Priority::EMERGENCY.level() {
        counter!(RESERVATIONS_PREEMPTED_TOTAL, "priority" => level.to_string()).increment(0);
    }
    for valid in [true, false] {
        counter!(FENCE_CHECKS_TOTAL, "result" => fence_result_label(valid)).increment(0);
    }
    // Every op's successes and durations; error codes appear as they are answered.
    for op in Op::NAMES {
        counter!(REQUESTS_TOTAL, "op" => op, "code" => "ok").increment(0);
        let _ = histogram!(REQUEST_DURATION_SECONDS, "op" => op);
    }
}

/// Counts one final answer to a request of `op`, submitted at `started`.
pub(super) fn answered(op: &'static str, started: tokio::time::Instant, response: &Response) {
    let code = match &response.outcome {
        Ok(_) => "ok",
        Err(error) => error.code.as_str(),
    };
    counter!(REQUESTS_TOTAL, "op" => op, "code" => code).increment(1);
    histogram!(REQUEST_DURATION_SECONDS, "op" => op).record(started.elapsed().as_secs_f64());
}

/// Counts one `fence.check` answer.
pub(super) fn fence_checked(valid: bool) {
    counter!(FENCE_CHECKS_TOTAL, "result" => fence_result_label(valid)).increment(1);
}

/// Counts a keepalive that moved a deadline.
pub(super) fn keepalive() {
    counter!(LEASES_KEEPALIVES_TOTAL).increment(1);
}

/// Counts leases whose proposed expiry the machine refused.
pub(super) fn expiry_refused(leases: usize) {
    counter!(LEASES_EXPIRY_REFUSED_TOTAL).increment(u64::try_from(leases).unwrap_or(u64::MAX));
}

/// Records how much of its TTL a lease had used when a keepalive arrived at `now`, given the
/// deadline it had (`deadline` = last renewal + TTL, on the keeper's monotonic clock).
pub(super) fn keepalive_ttl_used(
    now: tokio::time::Instant,
    deadline: tokio::time::Instant,
    ttl_ms: u64,
) {
    if ttl_ms == 0 {
        return;
    }
    let ttl_s = ttl_ms as f64 / 1_000.0;
    // Signed: a keepalive after its deadline has used more than the whole TTL.
    let left_s = if deadline >= now {
        (deadline - now).as_secs_f64()
    } else {
        -(now - deadline).as_secs_f64()
    };
    histogram!(LEASES_KEEPALIVE_TTL_USED_RATIO).record((ttl_s - left_s) / ttl_s);
}

/// The gauges' bookkeeping, owned by the fan-out.
#[derive(Debug)]
pub(super) struct NodeMetrics {
    /// The kind and number of the holds seen granted and not yet released, by fencing token
    /// and lease (a token is unique across the machine but for a barrier's round, whose members
    /// share its generation; a multi-lock's pair is on each of its locks):
    /// `hivekeeper_resource_held` is their count per kind, and a release of a hold never seen
    /// granted is ignored.
    holds: HashMap<(u64, LeaseId), (ResourceKind, u32)>,
    /// `holds` counted per kind, in [`KINDS`] order, so a change costs no scan.
    held: [u64; KINDS.len()],
    /// The series the fan-out moves, each looked up in the registry once.
    series: Series,
}

/// Handles of the series the fan-out moves on every entry, looked up in the recorder's registry
/// once: the `metrics` macros build a key (its labels allocated) and look it up on every call,
/// several times an entry.
#[derive(Debug)]
struct Series {
    leases_granted: Counter,
    /// By [`LEASE_ENDS`] order.
    leases_ended: [Counter; LEASE_ENDS.len()],
    leases_active: Gauge,
    dedup_agents: Gauge,
    cluster_version: Gauge,
    kv_keys: Gauge,
    kv_bytes: Gauge,
    kv_compact_revision: Gauge,
    kv_events: Counter,
    preemptions_withdrawn: Counter,
    /// By [`KINDS`] order.
    kinds: [KindSeries; KINDS.len()],
}

/// One resource kind's series.
#[derive(Debug)]
struct KindSeries {
    grants: Counter,
    handovers: Counter,
    /// By [`RELEASE_REASONS`] order.
    releases: [Counter; RELEASE_REASONS.len()],
    wait: Histogram,
    hold: Histogram,
    held: Gauge,
    waiters: Gauge,
}

impl Series {
    /// The handles, from the recorder installed now (a no-op recorder's when none is), with
    /// the counters and the key space's gauges at 0, as [`register_series`] leaves the rest.
    fn register() -> Series {
        let series = Series {
            leases_granted: counter!(LEASES_GRANTED_TOTAL),
            leases_ended: LEASE_ENDS
                .map(|reason| counter!(LEASES_ENDED_TOTAL, "reason" => lease_end_label(reason))),
            leases_active: gauge!(LEASES_ACTIVE),
            dedup_agents: gauge!(DEDUP_AGENTS),
            cluster_version: gauge!(CLUSTER_VERSION),
            kv_keys: gauge!(KV_KEYS),
            kv_bytes: gauge!(KV_BYTES),
            kv_compact_revision: gauge!(KV_COMPACT_REVISION),
            kv_events: counter!(KV_EVENTS_TOTAL),
            preemptions_withdrawn: counter!(PREEMPTIONS_WITHDRAWN_TOTAL),
            kinds: KINDS.map(|kind| {
                let kind = kind_label(kind);
                KindSeries {
                    grants: counter!(RESOURCE_GRANTS_TOTAL, "kind" => kind),
                    handovers: counter!(RESOURCE_HANDOVERS_TOTAL, "kind" => kind),
                    releases: RELEASE_REASONS.map(|reason| {
                        let reason = release_reason_label(reason);
                        counter!(RESOURCE_RELEASES_TOTAL, "kind" => kind, "reason" => reason)
                    }),
                    wait: histogram!(RESOURCE_WAIT_SECONDS, "kind" => kind),
                    hold: histogram!(RESOURCE_HOLD_SECONDS, "kind" => kind),
                    held: gauge!(RESOURCE_HELD, "kind" => kind),
                    waiters: gauge!(RESOURCE_WAITERS, "kind" => kind),
                }
            }),
        };
        let counters = [
            &series.leases_granted,
            &series.kv_events,
            &series.preemptions_withdrawn,
        ];
        for counter in counters.into_iter().chain(&series.leases_ended) {
            counter.increment(0);
        }
        for kind in &series.kinds {
            kind.grants.increment(0);
            kind.handovers.increment(0);
            for releases in &kind.releases {
                releases.increment(0);
            }
        }
        for gauge in [
            &series.kv_keys,
            &series.kv_bytes,
            &series.kv_compact_revision,
        ] {
            gauge.set(0.0);
        }
        series
    }

    fn kind(&self, kind: ResourceKind) -> &KindSeries {
        &self.kinds[slot(kind)]
    }
}

/// A kind's place in [`KINDS`]: its place in the declaration, which [`ResourceKind::ALL`]
/// follows.
fn slot(kind: ResourceKind) -> usize {
    kind as usize
}

impl NodeMetrics {
    /// Registers every series at zero ([`Series::register`], [`register_series`]), so they are
    /// exported before the first event.
    pub fn new() -> NodeMetrics {
        register_series();
        let metrics = NodeMetrics {
            holds: HashMap::new(),
            held: [0; KINDS.len()],
            series: Series::register(),
        };
        metrics.publish_held();
        metrics.waiters(|_| 0);
        metrics
    }

    /// Sets `hivekeeper_resource_waiters` to `count(kind)` for every kind.
    pub fn waiters(&self, count: impl Fn(ResourceKind) -> usize) {
        for kind in KINDS {
            self.series.kind(kind).waiters.set(count(kind) as f64);
        }
    }

    /// Accounts for the events of one applied entry. Returns whether a lease was granted or
    /// ended, so the caller refreshes `hivekeeper_leases_active`.
    pub fn entry(&mut self, events: &[Event], replayed: bool) -> bool {
        // A handover is a grant from the queue in the entry that released that resource.
        let released: HashSet<&ResourceKey> = events
            .iter()
            .filter_map(|event| match event {
                Event::Released { key, .. } => Some(key),
                _ => None,
            })
            .collect();
        let mut leases_changed = false;
        let mut held_changed = false;
        for event in events {
            match event {
                Event::LeaseGranted { .. } => {
                    leases_changed = true;
                    if !replayed {
                        self.series.leases_granted.increment(1);
                    }
                }
                Event::LeaseEnded { reason, .. } => {
                    leases_changed = true;
                    if !replayed {
                        self.series.leases_ended[lease_end_slot(*reason)].increment(1);
                    }
                }
                Event::Granted {
                    key,
                    lease,
                    token,
                    waited_ms,
                    queued,
                    ..
                } => {
                    let grant = (*token, *lease);
                    self.holds.entry(grant).or_insert((key.kind, 0)).1 += 1;
                    self.held[slot(key.kind)] += 1;
                    held_changed = true;
                    if !replayed {
                        let series = self.series.kind(key.kind);
                        series.grants.increment(1);
                        if *queued && released.contains(key) {
                            series.handovers.increment(1);
                        }
                        series.wait.record(*waited_ms as f64 / 1_000.0);
                    }
                }
                Event::Released {
                    key,
                    lease,
                    token,
                    held_ms,
                    reason,
                    ..
                } => {
                    let grant = (*token, *lease);
                    if let Some((kind, count)) = self.holds.get_mut(&grant) {
                        self.held[slot(*kind)] -= 1;
                        held_changed = true;
                        *count -= 1;
                        if *count == 0 {
                            self.holds.remove(&grant);
                        }
                    }
                    if !replayed {
                        let series = self.series.kind(key.kind);
                        series.releases[release_reason_slot(*reason)].increment(1);
                        series.hold.record(*held_ms as f64 / 1_000.0);
                    }
                }
                Event::Preempted { priority, .. } => {
                    if !replayed {
                        let priority = priority.to_string();
                        counter!(RESERVATIONS_PREEMPTED_TOTAL, "priority" => priority).increment(1);
                    }
                }
                Event::PreemptionWithdrawn { .. } => {
                    if !replayed {
                        self.series.preemptions_withdrawn.increment(1);
                    }
                }
                Event::Queued { .. } | Event::Respond { .. } | Event::AccountChanged { .. } => {}
            }
        }
        if held_changed {
            self.publish_held();
        }
        leases_changed
    }

    /// The machine was replaced by a snapshot: the holds it carries are unknown here.
    pub fn snapshot_installed(&mut self) {
        self.holds.clear();
        self.held = [0; KINDS.len()];
        self.publish_held();
    }

    /// Sets `hivekeeper_leases_active`.
    pub fn leases_active(&self, count: usize) {
        self.series.leases_active.set(count as f64);
    }

    /// Sets the key space's gauges and counts its new events.
    pub fn key_space(&self, keys: usize, bytes: u64, compact_revision: u64, new_events: usize) {
        self.series.kv_keys.set(keys as f64);
        self.series.kv_bytes.set(bytes as f64);
        self.series.kv_compact_revision.set(compact_revision as f64);
        self.series.kv_events.increment(new_events as u64);
    }

    /// Sets `hivekeeper_watch_polls_pending`.
    pub fn watch_polls_pending(count: usize) {
        gauge!(WATCH_POLLS_PENDING).set(count as f64);
    }

    /// Sets `hivekeeper_dedup_agents`.
    pub fn dedup_agents(&self, count: usize) {
        self.series.dedup_agents.set(count as f64);
    }

    /// Sets `hivekeeper_cluster_version`.
    pub fn cluster_version(&self, version: u32) {
        self.series.cluster_version.set(f64::from(version));
    }

    fn publish_held(&self) {
        for kind in KINDS {
            self.series
                .kind(kind)
                .held
                .set(self.held[slot(kind)] as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::state_machine::{LeaseId, ReleaseReason, ResourceKey};

    #[test]
    fn the_members_of_a_barriers_round_are_held_apart_though_they_share_its_token() {
        let key = ResourceKey::new(ResourceKind::Barrier, &Arc::from("start"));
        let agent: Arc<str> = Arc::from("drone-1");
        let generation = 7 << 16;
        let granted = |lease| Event::Granted {
            key: key.clone(),
            agent: agent.clone(),
            lease: LeaseId(lease),
            token: generation,
            waited_ms: 0,
            queued: false,
        };
        let released = |lease| Event::Released {
            key: key.clone(),
            agent: agent.clone(),
            lease: LeaseId(lease),
            token: generation,
            held_ms: 5,
            reason: ReleaseReason::Released,
        };
        let mut metrics = NodeMetrics::new();
        metrics.entry(&[granted(1), granted(2), granted(3)], false);
        assert_eq!(metrics.held[slot(ResourceKind::Barrier)], 3);
        metrics.entry(&[released(2)], false);
        metrics.entry(&[released(1), released(3), released(3)], false);
        assert_eq!(
            metrics.held,
            [0; KINDS.len()],
            "a release not held is ignored"
        );
    }

    /// A multi-lock's one token is on each of its locks: each is a hold until released.
    #[test]
    fn a_multi_lock_is_one_held_lock_per_lock_until_each_is_released() {
        let lock = |name: &str| ResourceKey::new(ResourceKind::Lock, &Arc::from(name));
        let granted = |name: &str| Event::Granted {
            key: lock(name),
            agent: "m".into(),
            lease: LeaseId(1),
            token: 7 << 16,
            waited_ms: 0,
            queued: false,
        };
        let released = |name: &str| Event::Released {
            key: lock(name),
            agent: "m".into(),
            lease: LeaseId(1),
            token: 7 << 16,
            held_ms: 0,
            reason: ReleaseReason::Released,
        };
        let mut metrics = NodeMetrics::new();
        let locks = slot(ResourceKind::Lock);
        metrics.entry(&[granted("a"), granted("b")], true);
        assert_eq!(metrics.held[locks], 2);
        metrics.entry(&[released("a")], true);
        assert_eq!(metrics.held[locks], 1);
        metrics.entry(&[released("b"), released("b")], true);
        assert_eq!(
            metrics.held,
            [0; KINDS.len()],
            "a release not held is ignored"
        );
        assert!(metrics.holds.is_empty());
    }
}
