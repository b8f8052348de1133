//! `airspace.query`: which held reservations a cylinder or a route would conflict with, a page at a
//! time, without reserving anything.
//!
//! The query's shapes are tested against the held reservations by the grant's own test:
//! `Grid::find_conflict` over the held index, the function `Waypoints::blocked` calls, which
//! keeps a filed shape when the windows overlap (`window::overlaps`, half-open) and the
//! cylinders conflict (`geo::areas_conflict`). A query has no name and no lease, so the two
//! other parts of `blocked` do not apply: a same-name conflict needs a name, and a lease's own
//! reservations never block it, whereas a query lists every holder's, the asker's own too.
//! Waiting requests are not listed: they hold no airspace (a reserve may still queue behind
//! one, FIFO, and is then told `would_block` or waits).
//!
//! The query's window is resolved as a reservation's is (`Window::resolve`, against the
//! machine's clock and the replicated limits): a window in the past, too long or too far ahead
//! is `bad_request` naming the bound, and a `volume` without a window means from the machine's
//! time on, with no end. Before the machine has applied its first entry it holds nothing and
//! has no time: every well-formed query is answered with no conflicts. The machine's time is the last applied entry's, so on an idle service
//! a reservation that ended since is still listed until its `ExpireReservations` entry, the
//! safe side for a planner.
//!
//! Invariants (a read; tested in `waypoint_query_test.rs`):
//! 1. Reading changes nothing.
//! 2. A held reservation is listed exactly when one of its shapes conflicts with one of the
//!    query's by the grant's test, and then with exactly its conflicting shapes (a route's
//!    volumes with their positions).
//! 3. A page lists reservations in name order (bytes), after `after`, at most `limit` of them
//!    and, past the first, at most [`CONFLICT_PAGE_VOLUMES_MAX`] route volumes; `next_after`
//!    is the last one's name and is present exactly when more conflicting reservations follow.

use std::collections::{BTreeMap, BTreeSet};

use hivekeeper_protocol::airspace::{
    CONFLICT_PAGE_MAX, CONFLICT_PAGE_VOLUMES_MAX, ConflictInfo, QueryVolume, ReservationKind,
    check_query,
};
use hivekeeper_protocol::{ErrorCode, Volume};

use super::{Reservation, Shape, Waypoints, Window, shapes};
use crate::{Decision, Reply, StateMachine, Text};

impl Waypoints {
    /// Every held reservation named after `after` with a shape that conflicts with one of
    /// `query` by the grant's test, by name, with the numbers of its conflicting shapes
    /// (invariant 2).
    fn held_conflicts(
        &self,
        query: &[Shape],
        after: Option<&str>,
    ) -> BTreeMap<Text, BTreeSet<u32>> {
        let mut found: BTreeMap<Text, BTreeSet<u32>> = BTreeMap::new();
        for (area, window) in query {
            self.index
                .held
                .find_conflict(area, window.as_ref(), |(name, number), _| {
                    if after.is_none_or(|after| &**name > after) {
                        found.entry(name.clone()).or_default().insert(*number);
                    }
                    false
                });
        }
        found
    }
}

/// The answer's row for a held reservation and the numbers of its conflicting shapes.
fn conflict_info(name: &str, reservation: &Reservation, numbers: &BTreeSet<u32>) -> ConflictInfo {
    let hold = &reservation.hold;
    let mut info = ConflictInfo {
        name: name.to_string(),
        kind: ReservationKind::Waypoint,
        agent: hold.agent.to_string(),
        lease: hold.lease.to_string(),
        area: None,
        start_ms: None,
        end_ms: None,
        volumes: Vec::new(),
        volume_indexes: Vec::new(),
        priority: (!reservation.priority.is_routine()).then_some(reservation.priority),
    };
    if reservation.volumes.is_empty() {
        info.area = reservation.area;
        info.start_ms = reservation.window.map(|window| window.start_ms);
        info.end_ms = reservation.window.and_then(|window| window.end_ms);
    } else {
        info.kind = ReservationKind::Route;
        for &number in numbers {
            info.volumes.push(reservation.volumes[number as usize]);
            info.volume_indexes.push(number);
        }
    }
    info
}

impl StateMachine {
    /// `airspace.query` (module docs): one page of the held reservations that conflict with
    /// `volume` or `volumes`. Bad fields are `bad_request` naming the problem, as the wire
    /// decoder words them.
    pub(crate) fn airspace_query(
        &self,
        volume: Option<&QueryVolume>,
        volumes: Option<&[Volume]>,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Decision {
        let refused = |message: String| {
            Reply::refused(ErrorCode::BadRequest, format!("airspace.query: {message}"))
        };
        check_query(volume, volumes, after, limit).map_err(|message| refused(message.into()))?;
        if self.now_ms == 0 {
            // No entry applied yet: nothing is held, and the machine's clock (0) would put
            // every real window beyond the horizon, refusing every query to a fresh node.
            return Ok(Reply::Conflicts {
                conflicts: Vec::new(),
                next_after: None,
            });
        }
        let query: Vec<Shape> = match (volume, volumes) {
            (Some(volume), _) => {
                let window =
                    Window::resolve(volume.start_ms, volume.end_ms, self.now_ms, &self.limits)
                        .map_err(|message| refused(format!("`volume`: {message}")))?;
                // Without a window: from the machine's time on.
                let window = window.unwrap_or(Window {
                    start_ms: self.now_ms,
                    end_ms: None,
                });
                vec![(volume.area(), Some(window))]
            }
            (None, volumes) => {
                let volumes = volumes.unwrap_or_default();
                self.check_volume_windows("airspace.query", volumes, self.now_ms)?;
                shapes(None, None, volumes)
            }
        };
        let found = self.waypoints.held_conflicts(&query, after);
        let limit = limit.unwrap_or(CONFLICT_PAGE_MAX) as usize;
        let mut conflicts: Vec<ConflictInfo> = Vec::new();
        let mut volumes_listed = 0usize;
        let mut more = false;
        for (name, numbers) in &found {
            let reservation = &self.waypoints.held[name];
            let row_volumes = if reservation.volumes.is_empty() {
                0
            } else {
                numbers.len()
            };
            let full = conflicts.len() >= limit
                || (!conflicts.is_empty()
                    && volumes_listed + row_volumes > CONFLICT_PAGE_VOLUMES_MAX);
            if full {
                more = true;
                break;
            }
            volumes_listed += row_volumes;
            conflicts.push(conflict_info(name, reservation, numbers));
        }
        let next_after = more
            .then(|| conflicts.last().map(|last| last.name.clone()))
            .flatten();
        Ok(Reply::Conflicts {
            conflicts,
            next_after,
        })
    }
}
