//! `waypoint.reserve`, and the reservation both it and `route.reserve` make: granted now,
//! queued FIFO among the requests it conflicts with, or refused (the module rules, `mod.rs`).
//!
//! Invariants (the waypoint invariants 1, 2 and 4, which a reservation keeps):
//! 1. A request is granted only when nothing held conflicts with it and no waiter of another
//!    lease ahead of it in the queue order does; otherwise it waits, or is refused.
//! 2. A lease's second request for a name it holds or waits for takes nothing new: the same
//!    ask is answered with its hold or takes its wait over, another is refused.

use std::collections::BTreeSet;
use std::sync::Arc;

use hivekeeper_protocol::{Area, ErrorCode, Priority, ResourceKind};

use super::{Ask, AskedWindow, Pending, Reservation, Window, shapes};
use crate::ResourceKey;
use crate::fifo;
use crate::grant::{Acquire, Claim};
use crate::{Ctx, Decision, Limits, Reply, StateMachine, Text};

impl StateMachine {
    /// `waypoint.reserve` of a cylinder (or none), a window's ends as the request gave them,
    /// and a priority.
    pub(crate) fn waypoint_reserve(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: &str,
        area: Option<Area>,
        asked: AskedWindow,
        priority: Priority,
    ) -> Decision {
        let window = Window::resolve(asked.start_ms, asked.end_ms, ctx.now_ms, &self.limits)
            .map_err(|message| {
                Reply::refused(
                    ErrorCode::BadRequest,
                    format!("waypoint.reserve: {message}"),
                )
            })?;
        let ask = Ask {
            area,
            window,
            volumes: Vec::new(),
            asked,
            priority,
        };
        self.reserve(ctx, acquire, name, ask)
    }

    /// A reservation (a waypoint's or a route's) whose fields are valid: granted now, queued
    /// or refused (`Err`, nothing changed), as the module's rules say.
    pub(crate) fn reserve(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: &str,
        ask: Ask,
    ) -> Decision {
        let claim = self.core.claim(&acquire)?;
        let (agent, lease, wait_ms) = (claim.agent, claim.lease, claim.wait_ms);
        let name: Text = Arc::from(name);
        let key = ResourceKey::new(ResourceKind::Waypoint, &name);
        if let Some(answer) = self.asked_again(ctx, &key, &claim, &ask) {
            return answer;
        }
        self.core.holds_quota(agent, &self.limits)?;
        self.resources_full()?;
        let shapes = shapes(ask.area, ask.window, &ask.volumes);
        let head_start_ms =
            u64::from(ask.priority.level()).saturating_mul(self.limits.reservation_aging_ms);
        let place = (
            i128::from(ctx.now_ms) - i128::from(head_start_ms),
            ctx.index,
        );
        if !self.waypoints.blocked(Some(&name), &shapes, lease, place) {
            let hold = self.core.grant_now(ctx, &key, lease, agent, 1);
            let token = hold.token;
            let reservation = Reservation {
                hold,
                area: ask.area,
                window: ask.window,
                volumes: ask.volumes,
                priority: ask.priority,
                vacate_by_ms: None,
            };
            self.waypoints.insert_held(name, reservation);
            // A new hold of a priority as high as a preemptor's, in its way, ends that
            // preemption (`preempt.rs`).
            self.waypoints
                .preempt(ctx, self.limits.reservation_vacate_ms);
            return Ok(Reply::Granted { token });
        }
        if wait_ms == Some(0) {
            let noun = ask.noun();
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!("{noun} {name:?} conflicts with a held or earlier waiting reservation"),
            ));
        }
        self.core.waits_quota(lease, &self.limits)?;
        self.waypoint_queue_full(&name)?;
        let waiter = self.core.enqueue(ctx, &key, &claim, 1);
        let pending = Pending {
            name,
            waiter,
            area: ask.area,
            window: ask.window,
            volumes: ask.volumes,
            priority: ask.priority,
            head_start_ms,
        };
        self.waypoints.index.add_waiter(ctx.index, &pending);
        self.waypoints.waiters.insert(ctx.index, pending);
        // A request in the way only of lower priorities preempts them; one queued ahead of
        // others may end their preemption (`preempt.rs`).
        self.waypoints
            .preempt(ctx, self.limits.reservation_vacate_ms);
        Ok(Reply::Queued)
    }

    /// The answer to a lease that asks again for a reservation it holds or waits for (under a
    /// new request id): its hold, or its wait taken over, when it asks for the same; a refusal
    /// otherwise (invariant 2). `None` when the lease neither holds nor waits for `key`.
    fn asked_again(
        &mut self,
        ctx: &mut Ctx,
        key: &ResourceKey,
        claim: &Claim<'_>,
        ask: &Ask,
    ) -> Option<Decision> {
        let (lease, name, noun) = (claim.lease, &key.name, ask.noun());
        if let Some(held) = self.waypoints.held.get(name)
            && held.hold.lease == lease
        {
            // The same request: the reservation it already has. Other geometry, another
            // window or other volumes would tell the agent it holds airspace it does not, so
            // it must release first (as a semaphore re-acquire with other permits must).
            return Some(if ask.matches(held.area, held.window, &held.volumes) {
                Ok(Reply::Granted {
                    token: held.hold.token,
                })
            } else {
                Err(Reply::refused(
                    ErrorCode::BadRequest,
                    format!(
                        "lease {lease} already holds {noun} {name:?} with other geometry, another \
                         window or other volumes; release it (or amend a route) before \
                         reserving it again"
                    ),
                ))
            });
        }
        if !self.core.is_waiting(lease, key) {
            return None;
        }
        let old_id = self.core.waiting_id(lease, key).to_string();
        let Some(pending) = self.waypoints.pending_mut(name, lease) else {
            let refusal = self
                .core
                .already_waiting(lease, key, "a reservation not found");
            return Some(Err(refusal));
        };
        if !ask.matches(pending.area, pending.window, &pending.volumes) {
            let what = "other geometry, another window or other volumes";
            return Some(Err(self.core.already_waiting(lease, key, what)));
        }
        if claim.wait_ms == Some(0) {
            return Some(Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!(
                    "{noun} {name:?} conflicts with a held or earlier waiting reservation (this \
                     lease already waits for it, request id {old_id:?})"
                ),
            )));
        }
        pending.waiter.request_id = claim.request_id.to_string();
        self.core.take_over_wait(ctx, key, claim);
        Some(Ok(Reply::Queued))
    }

    /// Refuses a waiter more on `name` past `waiters_per_resource_max`, or on every waypoint
    /// past `waypoint_waiters_max`.
    fn waypoint_queue_full(&self, name: &str) -> Result<(), Reply> {
        let limits: &Limits = &self.limits;
        let on_name = self
            .waypoints
            .index
            .waiting_by_name
            .get(name)
            .map_or(0, BTreeSet::len);
        fifo::full("waypoint", name, on_name, limits)?;
        let waiting = self.waypoints.waiters.len();
        if waiting < limits.waypoint_waiters_max as usize {
            return Ok(());
        }
        let message = format!("{waiting} waypoint reservations are waiting, the limit");
        Err(Reply::refused(ErrorCode::ResourceExhausted, message))
    }
}
