//! Routes: a whole flight as one intent of 1 to 64 4D volumes, each a cylinder, an altitude band
//! and a time window.
//!
//! A route is a waypoint reservation whose shapes are its volumes: it has a name in the
//! waypoint namespace, one hold and one token, and it conflicts with another lease's
//! reservation when any of its volumes conflicts with any of the other's shapes in space and
//! time (`Waypoints::blocked`). So `route.reserve` is granted all or nothing in one entry, and
//! queued FIFO as a unit among the requests it conflicts with; two drones that take their
//! routes' legs in a different order cannot deadlock, because neither holds a leg while it
//! waits for another. `route.release` is `waypoint.release` of its name. A route ends by itself
//! when its last volume's window ends (`window.rs`): its volumes are held until then, so a
//! drone that has flown a leg frees it early with `route.amend`.
//!
//! `route.amend` replaces a held route's volumes in one entry: granted at once, with the same
//! hold and token, when no other lease's held reservation conflicts with the new volumes and
//! no waiting request of another lease conflicts with a new volume that is not **kept**, that
//! is, not wholly inside one of the old volumes in space and time (`shape_within`);
//! otherwise `would_block`, the old route untouched. A waiter in the way of a kept volume is
//! in the way of the old volume around it, so it already waits for this route, and keeping
//! the volume takes nothing from it: so a drone frees the legs it has flown, or shortens a
//! leg, even while others queue for its airspace; an extension (new airspace or time) still
//! goes behind the requests that asked for it first. It never waits (a route that waited would
//! have given up its old volumes or held both). What the old volumes blocked is granted in
//! the same entry when the new ones no longer block it.
//!
//! Invariants (checked by `Waypoints::check_invariants` with the waypoint invariants, which
//! hold for every volume):
//! 1. A route has volumes and no cylinder or window of its own; every volume's cylinder is in
//!    the wire's ranges and its window is non-empty (waypoint invariants 5 and 6).
//! 2. No volume of a held route conflicts with another lease's held shape (waypoint
//!    invariant 1), and a waiting route is blocked (waypoint invariant 2).

use hivekeeper_protocol::{ErrorCode, Priority, Volume};

use super::geo::area_within;
use super::window::within;
use super::{Ask, AskedWindow, Shape, Window, shapes};
use crate::grant::Acquire;
use crate::resource::Resource;
use crate::{Ctx, Decision, Reply, StateMachine, Text};

/// Whether shape `inner` (a cylinder in its window) lies wholly inside `outer`, in space and
/// in time: whatever conflicts with `inner` conflicts with `outer`.
fn shape_within(inner: &Shape, outer: &Shape) -> bool {
    within(inner.1.as_ref(), outer.1.as_ref()) && area_within(&inner.0, &outer.0)
}

impl StateMachine {
    /// Each volume's window against the entry's time and the limits, as `waypoint.reserve`
    /// checks one window; the refusal names the op and the volume (also `airspace.query`'s).
    pub(super) fn check_volume_windows(
        &self,
        op: &str,
        volumes: &[Volume],
        now_ms: u64,
    ) -> Result<(), Reply> {
        for (i, volume) in volumes.iter().enumerate() {
            let (start_ms, end_ms) = (Some(volume.start_ms), Some(volume.end_ms));
            Window::resolve(start_ms, end_ms, now_ms, &self.limits).map_err(|message| {
                Reply::refused(
                    ErrorCode::BadRequest,
                    format!("{op}: volume {i}: {message}"),
                )
            })?;
        }
        Ok(())
    }

    /// `route.reserve`: the route as one reservation (module docs).
    pub(crate) fn route_reserve(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: &str,
        volumes: Vec<Volume>,
        priority: Priority,
    ) -> Decision {
        self.check_volume_windows("route.reserve", &volumes, ctx.now_ms)?;
        let ask = Ask {
            area: None,
            window: None,
            volumes,
            asked: AskedWindow::default(),
            priority,
        };
        self.reserve(ctx, acquire, name, ask)
    }

    /// `route.amend`: the held route's volumes replaced at once, keeping its token, or
    /// refused (`Err`: `would_block` when it conflicts) and nothing changed (module docs).
    pub(crate) fn route_amend(
        &mut self,
        ctx: &mut Ctx,
        agent: &Text,
        name: &str,
        lease: &str,
        volumes: Vec<Volume>,
        priority: Priority,
    ) -> Decision {
        self.check_volume_windows("route.amend", &volumes, ctx.now_ms)?;
        let lease = self.core.live_lease(agent, lease)?;
        let Some(held) = self
            .waypoints
            .held
            .get(name)
            .filter(|held| held.hold.lease == lease)
        else {
            let message = format!("lease {lease} does not hold route {name:?}");
            return Err(Reply::refused(ErrorCode::NotHolder, message));
        };
        if held.volumes.is_empty() {
            let message =
                format!("waypoint {name:?} is not a route; release it and reserve a route instead");
            return Err(Reply::refused(ErrorCode::BadRequest, message));
        }
        let new_shapes = shapes(None, None, &volumes);
        let old_shapes = held.shapes();
        let fresh: Vec<Shape> = new_shapes
            .iter()
            .filter(|new| !old_shapes.iter().any(|old| shape_within(new, old)))
            .cloned()
            .collect();
        let waypoints = &self.waypoints;
        if waypoints.held_conflict(None, &new_shapes, lease, |_| true)
            || waypoints.waiter_ahead(None, &fresh, lease, (i128::MAX, u64::MAX))
        {
            return Err(Reply::refused(
                ErrorCode::WouldBlock,
                format!(
                    "route {name:?}: the new volumes conflict with a held or earlier waiting \
                     reservation; the old route is kept"
                ),
            ));
        }
        let (name, mut reservation) = self
            .waypoints
            .held
            .remove_entry(name)
            .expect("looked up above");
        self.waypoints.index.remove_held(&name, &reservation);
        self.waypoints
            .removed
            .push((name.clone(), reservation.shapes()));
        reservation.volumes = volumes;
        reservation.priority = priority;
        let token = reservation.hold.token;
        self.waypoints.insert_held(name, reservation);
        self.waypoints
            .settle(ctx, &mut self.core, &[], &self.limits);
        Ok(Reply::Granted { token })
    }
}
