//! `airspace.query`: which reservations a volume or a route would conflict with, without
//! reserving anything. A planner asks it to pick a free slot.
//!
//! The request gives either `volume` ([`QueryVolume`]: one cylinder, its window optional) or
//! `volumes` (a route's [`Volume`]s, 1 to [`validate::ROUTE_VOLUMES_MAX`]), never both; the
//! answer is a page of [`ConflictInfo`] rows in name order, paged like `admin.resources`
//! (`after`, `limit`, `next_after`). The conflict test is the one a grant uses (space **and**
//! time), applied by the state machine.

use serde::{Deserialize, Serialize};

use crate::Priority;
use crate::request::{Area, Volume};
use crate::validate;

/// Most conflicting reservations in one `airspace.query` page, and the default.
pub const CONFLICT_PAGE_MAX: u32 = 100;

/// Most route volumes listed in one `airspace.query` page: a page stops before the
/// reservation whose conflicting volumes would pass it (but always lists at least one
/// reservation, which has at most 64). About 130 bytes a volume, so a page of 128 volumes and
/// 100 names stays well inside the default 64 KiB MQTT packet.
pub const CONFLICT_PAGE_VOLUMES_MAX: usize = 128;

/// The single cylinder of an `airspace.query`: a [`Volume`] whose window is optional. Without
/// `start_ms` the window starts at the machine's time; without `end_ms` it has no end; without
/// either it is "from now on".
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryVolume {
    /// Latitude of the axis, degrees (WGS84).
    pub lat: f64,
    /// Longitude of the axis, degrees (WGS84).
    pub lon: f64,
    /// Radius, metres.
    pub radius_m: f64,
    /// Bottom of the altitude band, metres.
    pub alt_min_m: f64,
    /// Top of the altitude band, metres.
    pub alt_max_m: f64,
    /// Start of the time window, UTC ms since the Unix epoch; absent: the machine's time.
    pub start_ms: Option<u64>,
    /// End of the time window, exclusive; absent: no end.
    pub end_ms: Option<u64>,
}

impl QueryVolume {
    /// The volume's cylinder.
    pub fn area(&self) -> Area {
        Area::banded(
            self.lat,
            self.lon,
            self.radius_m,
            self.alt_min_m,
            self.alt_max_m,
        )
    }
}

/// What a conflicting reservation is: a waypoint (one cylinder) or a route (volumes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationKind {
    /// A `waypoint.reserve` with geometry.
    Waypoint,
    /// A `route.reserve`.
    Route,
}

/// One held reservation in an `airspace.query` answer, with the part of it that conflicts.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConflictInfo {
    /// The reservation's name (a waypoint name).
    pub name: String,
    /// Waypoint or route.
    pub kind: ReservationKind,
    /// The holding agent. Left out (the empty string, not sent) when an agent other than the
    /// holder asks without the `observer` or `admin` role and authentication is on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent: String,
    /// The lease the reservation is bound to; left out as `agent` is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lease: String,
    /// A waypoint's cylinder.
    pub area: Option<Area>,
    /// A waypoint's window start, ms since the Unix epoch (absent: a waypoint without window,
    /// which holds its cylinder for all time).
    pub start_ms: Option<u64>,
    /// A waypoint's window end, exclusive (absent: no end).
    pub end_ms: Option<u64>,
    /// A route's volumes that conflict with the query, in flight order (the others are left
    /// out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// The positions in the route, from 0, of `volumes`, one for one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_indexes: Vec<u32>,
    /// The reservation's priority, when above routine (absent: 0): a planner with a higher
    /// priority may preempt it rather than pick another slot.
    pub priority: Option<Priority>,
}

/// Checks an `airspace.query`'s fields: exactly one of `volume` and `volumes`, the volume's
/// cylinder in range and its window not empty, the route's volumes as `route.reserve` checks
/// them, an `after` name and a `limit` from 1 to [`CONFLICT_PAGE_MAX`].
pub fn check_query(
    volume: Option<&QueryVolume>,
    volumes: Option<&[Volume]>,
    after: Option<&str>,
    limit: Option<u32>,
) -> Result<(), validate::InvalidField> {
    match (volume, volumes) {
        (None, None) => {
            return Err(
                "give `volume` (one cylinder) or `volumes` (a route of 1 to 64 volumes)".into(),
            );
        }
        (Some(_), Some(_)) => {
            return Err("give `volume` or `volumes`, not both".into());
        }
        (Some(volume), None) => {
            volume
                .area()
                .check_ranges()
                .and_then(|()| validate::window(volume.start_ms, volume.end_ms))
                .map_err(|reason| format!("`volume`: {reason}"))?;
        }
        (None, Some(volumes)) => validate::volumes(volumes)?,
    }
    if let Some(after) = after {
        validate::name("after", after)?;
    }
    match limit {
        Some(limit) if limit == 0 || limit > CONFLICT_PAGE_MAX => {
            Err(format!("`limit` is {limit}, it must be from 1 to {CONFLICT_PAGE_MAX}").into())
        }
        _ => Ok(()),
    }
}
