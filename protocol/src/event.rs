//! Unsolicited events on `hk/v1/evt/{agent}`: `{"event": "<name>", ...fields}`.
//!
//! Events tell an agent that something it had is gone. They are a courtesy, not the safety
//! mechanism: an agent that missed one still holds a stale token, which a fenced resource
//! rejects (DESIGN.md §5.2).

use serde::{Deserialize, Serialize};

use crate::priority::Priority;

/// One event.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum Event {
    /// The lease expired: its keepalives stopped for longer than its TTL.
    #[serde(rename = "lease.expired")]
    LeaseExpired {
        /// The lease that ended.
        lease: String,
    },
    /// An operator ended the lease (`admin.revoke`); everything it held is gone.
    #[serde(rename = "lease.revoked")]
    LeaseRevoked {
        /// The lease that ended.
        lease: String,
    },
    /// A lock was taken away because its lease ended, or because its `max_hold_ms` ran out.
    #[serde(rename = "lock.lost")]
    LockLost {
        /// The lock's name.
        name: String,
        /// The token of the hold that ended.
        token: u64,
        /// Why, when it is not the lease's end; absent: the lease ended.
        reason: Option<LostReason>,
    },
    /// Semaphore permits were taken away because their lease ended, or because their
    /// `max_hold_ms` ran out.
    #[serde(rename = "sem.lost")]
    SemLost {
        /// The semaphore's name.
        name: String,
        /// The token of the hold that ended.
        token: u64,
        /// As for `lock.lost`.
        reason: Option<LostReason>,
    },
    /// A waypoint reservation (or a route) was taken away because its lease ended, or because
    /// it was preempted and not released by its `vacate_by_ms`.
    #[serde(rename = "waypoint.lost")]
    WaypointLost {
        /// The waypoint's name.
        name: String,
        /// The token of the reservation that ended.
        token: u64,
    },
    /// A request of a higher priority needs the airspace of this reservation (a waypoint's or a
    /// whole route's). The holder should vacate and release it by `vacate_by_ms`; at that time
    /// the service ends it (the holder is then told `waypoint.lost`, and its token no longer
    /// passes `fence.check`). Sent once per reservation, however many requests preempt it.
    #[serde(rename = "reservation.preempted")]
    ReservationPreempted {
        /// The reservation's name (a waypoint's or a route's).
        name: String,
        /// The token of the preempted reservation.
        token: u64,
        /// `waypoint` or `route`: what `name` is.
        kind: String,
        /// When the service ends the reservation unless it is released first, UTC ms since the
        /// Unix epoch on the service's clock: the preempting entry's time plus the configured
        /// `reservation_vacate_ms`.
        vacate_by_ms: u64,
        /// The priority of the request that preempts it (higher than the reservation's).
        priority: Priority,
    },
    /// The vacate deadline of a `reservation.preempted` is dropped, because no waiting request
    /// needs this reservation's airspace any more (the preempting request timed out, was
    /// cancelled or its lease ended, a request of its priority now stands before it, or the
    /// reservation was amended out of its way). The holder keeps the reservation, with its
    /// token, and need not vacate. A later preemption sends `reservation.preempted` again, with
    /// a new deadline.
    #[serde(rename = "reservation.preemption_withdrawn")]
    ReservationPreemptionWithdrawn {
        /// The reservation's name (a waypoint's or a route's).
        name: String,
        /// The reservation's token, which it keeps.
        token: u64,
        /// `waypoint` or `route`: what `name` is.
        kind: String,
    },
    /// The agent no longer leads an election, because its lease ended; the next candidate, if
    /// any, leads in the same log entry.
    #[serde(rename = "election.lost")]
    ElectionLost {
        /// The election's name.
        name: String,
        /// The token of the leadership that ended.
        token: u64,
    },
}

/// Why a hold was taken away, in a `lock.lost` or `sem.lost`, when it was not its lease's end
/// (which the event says by having no `reason`, as it did before reasons existed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostReason {
    /// The acquire's `max_hold_ms` ran out: the hold ended at its grant time plus that much,
    /// on the service's clock, whether or not its lease lived.
    MaxHold,
}

impl Event {
    /// The event as JSON bytes, ready to publish.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an event is plain data and always serializes")
    }

    /// Parses an event payload (the SDK's side).
    pub fn decode(payload: &[u8]) -> Result<Event, serde_json::Error> {
        serde_json::from_slice(payload)
    }
}
