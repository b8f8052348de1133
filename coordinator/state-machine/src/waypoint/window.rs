//! Time windows of waypoint reservations: `[start_ms, end_ms)` on the machine's clock.
//!
//! A reservation asks for a window with `start_ms` and `end_ms` (UTC ms since the Unix epoch),
//! both optional: no `start_ms` means from the entry's time, no `end_ms` until released. The
//! machine resolves the window once, with the entry's time ([`Window::resolve`]), and keeps it
//! with the reservation. Two reservations conflict in time when their half-open windows share
//! an instant ([`overlaps`]): one ending at 10:00 and one starting at 10:00 do not conflict. A
//! reservation without a window covers all time, as reservations did before windows existed.
//!
//! A future window is granted at once when nothing conflicts with it: the drone owns that slot
//! from then on, with a token issued at grant time. A held window whose end has passed on the
//! machine's clock is ended by one `Command::ExpireReservations` entry, proposed by the leader's
//! keeper as it proposes lease and wait expiry; the entry decides with its own time only.
//!
//! Invariants (checked by `Waypoints::check_invariants`, as the waypoint invariants 3 and 6):
//! 1. A window is never empty: `end_ms > start_ms` when it has an end.
//! 2. The end indexes list exactly the held and the waiting reservations that have an end,
//!    under that end, so the earliest end is the first entry and the due ones are a prefix.
//!
//! An `ExpireReservations` entry ends exactly the reservations whose end is at or before the
//! machine's clock, holds first, waits second, then the preempted holds whose vacate deadline
//! passed and that a waiter still needs (`preempt.rs`), then grants what became grantable in
//! the same entry; an entry of a stale term ends nothing (the rule of the other expiries). Tested in
//! `waypoint_window_test.rs` and by the model test, which ends windows its own naive way.

use hivekeeper_protocol::{ErrorCode, ResourceKind};
use serde::{Deserialize, Serialize};

use crate::ResourceKey;
use crate::resource::Resource;
use crate::{Ctx, Limits, ReleaseReason, Reply, StateMachine, Text};

/// A resolved time window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// First instant covered, ms since the Unix epoch on the machine's clock.
    pub start_ms: u64,
    /// First instant no longer covered (exclusive end); absent: until released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
}

/// Why a window a request asks for cannot be reserved; its text is the `bad_request`
/// message, naming the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WindowRefused {
    /// The window ended at or before the entry's time.
    #[error(
        "the window is in the past: `end_ms` ({end_ms}) is not after the entry's time ({now_ms})"
    )]
    Past {
        /// The asked end.
        end_ms: u64,
        /// The entry's time.
        now_ms: u64,
    },
    /// The window is longer than `reservation_window_ms_max`.
    #[error("the window is {length_ms} ms long, more than reservation_window_ms_max ({max_ms})")]
    TooLong {
        /// The window's length.
        length_ms: u64,
        /// `reservation_window_ms_max`.
        max_ms: u64,
    },
    /// The window starts further ahead than `reservation_horizon_ms_max`.
    #[error(
        "`start_ms` ({start_ms}) is {ahead_ms} ms ahead of the entry's time ({now_ms}), beyond \
         reservation_horizon_ms_max ({max_ms})"
    )]
    BeyondHorizon {
        /// The window's start.
        start_ms: u64,
        /// How far the start is ahead of the entry's time.
        ahead_ms: u64,
        /// The entry's time.
        now_ms: u64,
        /// `reservation_horizon_ms_max`.
        max_ms: u64,
    },
}

impl Window {
    /// The window a `waypoint.reserve` asks for, checked against the entry's time `now_ms`
    /// and the replicated limits: `Ok(None)` when it gives neither end, and why not when the
    /// window ended already, starts beyond the horizon or is longer than allowed. The empty
    /// window is the wire's check (`validate::window`).
    pub fn resolve(
        start_ms: Option<u64>,
        end_ms: Option<u64>,
        now_ms: u64,
        limits: &Limits,
    ) -> Result<Option<Window>, WindowRefused> {
        if start_ms.is_none() && end_ms.is_none() {
            return Ok(None);
        }
        let start = start_ms.unwrap_or(now_ms);
        if let Some(end) = end_ms {
            if end <= now_ms {
                return Err(WindowRefused::Past {
                    end_ms: end,
                    now_ms,
                });
            }
            let length_ms = end.saturating_sub(start);
            if length_ms > limits.reservation_window_ms_max {
                return Err(WindowRefused::TooLong {
                    length_ms,
                    max_ms: limits.reservation_window_ms_max,
                });
            }
        }
        let ahead_ms = start.saturating_sub(now_ms);
        if ahead_ms > limits.reservation_horizon_ms_max {
            return Err(WindowRefused::BeyondHorizon {
                start_ms: start,
                ahead_ms,
                now_ms,
                max_ms: limits.reservation_horizon_ms_max,
            });
        }
        Ok(Some(Window {
            start_ms: start,
            end_ms,
        }))
    }

    /// Whether this window is what a request with these fields asks for (a same-lease retry
    /// under a new id): the same end, and the same start unless the request leaves it out.
    pub fn asked_by(window: Option<&Window>, asked: AskedWindow) -> bool {
        match window {
            None => asked == AskedWindow::default(),
            Some(window) => {
                let start_matches = asked.start_ms.is_none_or(|start| start == window.start_ms);
                window.end_ms == asked.end_ms && start_matches
            }
        }
    }
}

/// A window's ends as a request gave them, before [`Window::resolve`]: what a retry is matched
/// on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AskedWindow {
    /// `start_ms` as given; absent: from the entry's time.
    pub start_ms: Option<u64>,
    /// `end_ms` as given; absent: until released.
    pub end_ms: Option<u64>,
}

/// Whether two reservations' windows share an instant. `None` covers all time.
pub fn overlaps(a: Option<&Window>, b: Option<&Window>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return true;
    };
    let before = |end: Option<u64>, start: u64| end.is_some_and(|end| end <= start);
    !before(a.end_ms, b.start_ms) && !before(b.end_ms, a.start_ms)
}

/// Whether window `inner` lies within `outer` (`None` covers all time): every window that
/// overlaps `inner` overlaps `outer` too.
pub fn within(inner: Option<&Window>, outer: Option<&Window>) -> bool {
    bound_within(outer, inner, |outer, inner| {
        outer.start_ms <= inner.start_ms
            && bound_within(outer.end_ms, inner.end_ms, |outer, inner| inner <= outer)
    })
}

/// Whether a bound `inner` lies within `outer`, `None` being open (no bound): an open outer
/// bound contains anything, an open inner one only an open one, and two bounds are compared
/// by `inside(outer, inner)`. Window ends and altitude bands (`geo::area_within`) alike.
pub fn bound_within<T>(outer: Option<T>, inner: Option<T>, inside: impl Fn(T, T) -> bool) -> bool {
    match (outer, inner) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(outer), Some(inner)) => inside(outer, inner),
    }
}

impl super::Waypoints {
    /// The earliest end of a held or waiting reservation, or vacate deadline of a preempted
    /// one (`preempt.rs`), if any.
    pub fn end_next_ms(&self) -> Option<u64> {
        let held = self.index.held_ends.first().map(|(end_ms, _)| *end_ms);
        let waiting = self.index.waiting_ends.first().map(|(end_ms, _)| *end_ms);
        let vacate = self.vacate_next_ms();
        held.into_iter().chain(waiting).chain(vacate).min()
    }
}

impl StateMachine {
    /// The earliest end of a reservation's window, or vacate deadline of a preempted one, in
    /// the state, ms on the machine's clock: the leader proposes
    /// [`crate::Command::ExpireReservations`] once its clock reaches it.
    pub fn reservation_end_next_ms(&self) -> Option<u64> {
        self.waypoints.end_next_ms()
    }

    /// Whether an `ExpireReservations` stamped `stamp_ms` is worth proposing: as for
    /// [`StateMachine::wait_expiry_due`], with the earliest window end as the deadline.
    pub fn reservation_expiry_due(&self, stamp_ms: u64) -> bool {
        self.expiry_due(self.reservation_end_next_ms(), stamp_ms)
    }

    /// Ends the held reservation `name` (its holder's lease, whoever it is) for `reason`.
    fn end_held(&mut self, ctx: &mut Ctx, name: &Text, reason: ReleaseReason) {
        let lease = self.waypoints.held[name].hold.lease;
        let hold = self
            .waypoints
            .take_hold(name, lease)
            .expect("the end indexes list held reservations");
        let key = ResourceKey::new(ResourceKind::Waypoint, name);
        self.core.release(ctx, &key, &hold, reason);
    }

    /// `ExpireReservations { term }`: ends every held reservation whose window's end has
    /// passed on the machine's clock (released, reason `window_ended`) or whose vacate
    /// deadline has (reason `preempted`, `preempt.rs`), answers every waiting one whose end
    /// passed before its grant `timeout`, then grants what became grantable, all in this
    /// entry. A stale term does nothing, as for the other expiries (invariant 2).
    pub(crate) fn expire_reservations(&mut self, ctx: &mut Ctx, term: u64) -> Reply {
        if term < self.term_max {
            return Reply::ReservationsEnded { count: 0 };
        }
        let now_ms = ctx.now_ms;
        let held_due: Vec<(u64, Text)> = self
            .waypoints
            .index
            .held_ends
            .iter()
            .take_while(|(end_ms, _)| *end_ms <= now_ms)
            .cloned()
            .collect();
        let waiting_due: Vec<(u64, u64)> = self
            .waypoints
            .index
            .waiting_ends
            .iter()
            .take_while(|(end_ms, _)| *end_ms <= now_ms)
            .copied()
            .collect();
        for (_, name) in &held_due {
            self.end_held(ctx, name, ReleaseReason::WindowEnded);
        }
        for (end_ms, seq) in &waiting_due {
            let pending = &self.waypoints.waiters[seq];
            let key = ResourceKey::new(ResourceKind::Waypoint, &pending.name);
            let waiter = &pending.waiter;
            let (agent, request_id) = (waiter.agent.clone(), waiter.request_id.clone());
            let message =
                format!("the reservation's window ended at {end_ms} before it could be granted");
            self.remove_waiter(ctx, &key, &agent, &request_id, ErrorCode::Timeout, &message);
        }
        // Last, the preempted reservations whose vacate deadline passed, if a waiter still
        // needs them now that the windows above ended (a preemptor whose own window ended
        // in this entry needs nothing: its holders keep their reservations, `preempt.rs`).
        let vacated = self.waypoints.vacate_due_needed(now_ms);
        for name in &vacated {
            self.end_held(ctx, name, ReleaseReason::Preempted);
        }
        self.waypoints
            .settle(ctx, &mut self.core, &[], &self.limits);
        let count = held_due.len() + waiting_due.len() + vacated.len();
        Reply::ReservationsEnded {
            count: u64::try_from(count).expect("a count of reservations fits in u64"),
        }
    }
}
