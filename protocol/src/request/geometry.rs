//! The geometry a waypoint or route reservation asks for: a route's 4D volumes as the wire
//! gives them, and a reservation's validated cylinder.

use serde::{Deserialize, Serialize};

/// One 4D volume of a route: a vertical cylinder, an altitude band and a time window
/// `[start_ms, end_ms)`, every field required.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
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
    /// Start of the time window, UTC ms since the Unix epoch.
    pub start_ms: u64,
    /// End of the time window, exclusive.
    pub end_ms: u64,
}

impl Volume {
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

/// The validated geometry of a waypoint reservation: a vertical cylinder.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Area {
    /// Latitude of the axis, degrees.
    pub lat: f64,
    /// Longitude of the axis, degrees.
    pub lon: f64,
    /// Radius, metres.
    pub radius_m: f64,
    /// Bottom of the altitude band, metres; `None` when unbounded below.
    pub alt_min_m: Option<f64>,
    /// Top of the altitude band, metres; `None` when unbounded above.
    pub alt_max_m: Option<f64>,
}

impl Area {
    /// A cylinder bounded below and above: a volume's, whose band always has both ends.
    pub fn banded(lat: f64, lon: f64, radius_m: f64, alt_min_m: f64, alt_max_m: f64) -> Area {
        Area {
            lat,
            lon,
            radius_m,
            alt_min_m: Some(alt_min_m),
            alt_max_m: Some(alt_max_m),
        }
    }
}
