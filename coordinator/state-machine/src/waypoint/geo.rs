//! Geometry of waypoint reservations: great-circle distance and altitude bands.
//!
//! All trigonometry goes through `libm`, a pure-Rust port of musl's libm, never through `std`'s
//! `sin`/`cos`, which call the platform's C library: two replicas on different platforms must
//! decide a borderline conflict the same way, or their states diverge.

use hivekeeper_protocol::Area;

use super::window::bound_within;

/// Mean Earth radius (IUGG), metres. The sphere is exact enough for separations of metres to
/// kilometres (the ellipsoid differs by under 0.5%), and it is what makes the bounds in
/// `grid.rs` simple.
pub const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// Metres of great-circle distance per degree along a meridian.
pub const M_PER_DEG: f64 = EARTH_RADIUS_M * std::f64::consts::PI / 180.0;

/// Great-circle (haversine) distance between two points, metres.
pub fn distance_m(lat_a: f64, lon_a: f64, lat_b: f64, lon_b: f64) -> f64 {
    let (phi_a, phi_b) = (lat_a.to_radians(), lat_b.to_radians());
    let half_dphi = (phi_b - phi_a) / 2.0;
    let half_dlambda = (lon_b - lon_a).to_radians() / 2.0;
    let h = libm::pow(libm::sin(half_dphi), 2.0)
        + libm::cos(phi_a) * libm::cos(phi_b) * libm::pow(libm::sin(half_dlambda), 2.0);
    2.0 * EARTH_RADIUS_M * libm::asin(libm::sqrt(h.clamp(0.0, 1.0)))
}

/// Whether two altitude bands share any altitude. Bands are closed: a band ending at 10 m and
/// one starting at 10 m overlap, the safe reading when two aircraft could both be at 10 m.
pub fn bands_overlap(a: &Area, b: &Area) -> bool {
    let below = |max: Option<f64>, min: Option<f64>| match (max, min) {
        (Some(max), Some(min)) => max < min,
        _ => false,
    };
    !below(a.alt_max_m, b.alt_min_m) && !below(b.alt_max_m, a.alt_min_m)
}

/// Whether two cylinders conflict: their axes are closer than the sum of their radii (strictly:
/// two 3 m pads exactly 6 m apart do not conflict) and their altitude bands overlap.
pub fn areas_conflict(a: &Area, b: &Area) -> bool {
    let reach_m = a.radius_m + b.radius_m;
    // Cheap exact rejection first: a great-circle distance is at least the latitude difference.
    if (a.lat - b.lat).abs() * M_PER_DEG >= reach_m {
        return false;
    }
    bands_overlap(a, b) && distance_m(a.lat, a.lon, b.lat, b.lon) < reach_m
}

/// How much closer than touching a cylinder must stay to count as inside another
/// ([`area_within`]): 1 mm, far above the haversine's rounding (nanometres at these
/// distances), so that rounding can never make a shape inside another conflict with
/// something the other does not.
const WITHIN_MARGIN_M: f64 = 0.001;

/// Whether cylinder `inner` lies wholly inside `outer`: the same cylinder, or an axis close
/// enough that `inner`'s edge stays within `outer`'s (by [`WITHIN_MARGIN_M`]), and an altitude
/// band within `outer`'s (an open end only inside an open end). Then every cylinder that
/// conflicts with `inner` conflicts with `outer` too: the great-circle distance obeys the
/// triangle inequality.
pub fn area_within(inner: &Area, outer: &Area) -> bool {
    let band_within = bound_within(outer.alt_min_m, inner.alt_min_m, |outer, inner| {
        outer <= inner
    }) && bound_within(outer.alt_max_m, inner.alt_max_m, |outer, inner| {
        inner <= outer
    });
    band_within
        && (inner == outer
            || distance_m(inner.lat, inner.lon, outer.lat, outer.lon)
                + inner.radius_m
                + WITHIN_MARGIN_M
                <= outer.radius_m)
}
