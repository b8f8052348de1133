//! A hierarchical grid of cells over latitude and longitude, so a conflict check costs the
//! neighbourhood of a reservation, not the whole map.
//!
//! Each cylinder is filed at the finest level whose cell is at least as wide as its radius
//! (level 0 cells are 2^-13 degrees, about 13.6 m of latitude; each level doubles; level 10
//! covers the 10 km maximum radius). A query at level L only needs cells within the query's
//! radius plus level L's cell width (the largest radius filed there), which is a handful of
//! cells per non-empty level whatever the mix of small and large reservations. The grid only
//! proposes candidates; `geo::areas_conflict` decides.
//!
//! Longitude cells shrink towards the poles, so the longitude reach is derived from the
//! haversine bound `sin(dλ/2) ≤ sin(d/2R) / cos(φmax)`; near a pole, or across the
//! antimeridian, the query widens to every longitude or splits in two ranges.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use hivekeeper_protocol::Area;

use super::geo::{EARTH_RADIUS_M, M_PER_DEG, areas_conflict};
use super::window::{Window, overlaps};
use crate::LeaseId;

/// Width of a level-0 cell, degrees (a power of two, so `x / width` is exact scaling).
const BASE_CELL_DEG: f64 = 1.0 / 8192.0;
/// Levels 0..LEVELS; the last one's cells are wider than the largest radius accepted.
const LEVELS: usize = 11;

/// What the grid files for each cylinder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    /// The cylinder.
    pub area: Area,
    /// The lease it belongs to (a lease's own reservations never block it).
    pub lease: LeaseId,
    /// Its time window (`None`: all time): a cylinder is a conflict only in its window.
    pub window: Option<Window>,
}

/// Cylinders by `(level, row, column)` cell, then by key.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid<K: Ord> {
    cells: BTreeMap<(u8, i32, i32), BTreeMap<K, Entry>>,
    per_level: [u32; LEVELS],
}

impl<K: Ord> Default for Grid<K> {
    fn default() -> Self {
        Grid {
            cells: BTreeMap::new(),
            per_level: [0; LEVELS],
        }
    }
}

fn cell_deg(level: usize) -> f64 {
    BASE_CELL_DEG * (1u32 << level) as f64
}

fn level_for(radius_m: f64) -> usize {
    (0..LEVELS)
        .find(|&level| cell_deg(level) * M_PER_DEG >= radius_m)
        .unwrap_or(LEVELS - 1)
}

fn cell_index(degrees: f64, level: usize) -> i32 {
    (degrees / cell_deg(level)).floor() as i32
}

fn cell_of(area: &Area) -> (u8, i32, i32) {
    let level = level_for(area.radius_m);
    (
        level as u8,
        cell_index(area.lat, level),
        cell_index(area.lon, level),
    )
}

impl<K: Ord + Clone> Grid<K> {
    /// Files a cylinder under `key`.
    pub fn insert(&mut self, key: K, entry: Entry) {
        let cell = cell_of(&entry.area);
        self.per_level[cell.0 as usize] += 1;
        self.cells.entry(cell).or_default().insert(key, entry);
    }

    /// Removes the cylinder filed under `key` with this area.
    pub fn remove(&mut self, key: &K, area: &Area) -> Option<Entry> {
        let cell = cell_of(area);
        let entries = self.cells.get_mut(&cell)?;
        let entry = entries.remove(key)?;
        if entries.is_empty() {
            self.cells.remove(&cell);
        }
        self.per_level[cell.0 as usize] -= 1;
        Some(entry)
    }

    /// Calls `visit` for every filed cylinder that conflicts with `area` in `window` (space and
    /// time), in a deterministic order, until it returns true; returns whether it did.
    pub fn find_conflict(
        &self,
        area: &Area,
        window: Option<&Window>,
        mut visit: impl FnMut(&K, &Entry) -> bool,
    ) -> bool {
        for level in 0..LEVELS {
            if self.per_level[level] == 0 {
                continue;
            }
            let reach_m = area.radius_m + cell_deg(level) * M_PER_DEG;
            let (rows, cols) = search_window(area, reach_m, level);
            for row in rows {
                for col_range in &cols {
                    let first = (level as u8, row, *col_range.start());
                    let last = (level as u8, row, *col_range.end());
                    for entries in self.cells.range(first..=last).map(|(_, entries)| entries) {
                        for (key, entry) in entries {
                            // The windows first: two integer comparisons that clear most
                            // candidates of a busy sky before any trigonometry.
                            if overlaps(window, entry.window.as_ref())
                                && areas_conflict(area, &entry.area)
                                && visit(key, entry)
                            {
                                return true;
                            }
                        }
                    }
                }
            }
        }
        false
    }
}

/// Rows and column ranges of the cells at `level` that may hold a point closer than `reach_m`
/// to the area's axis.
fn search_window(
    area: &Area,
    reach_m: f64,
    level: usize,
) -> (RangeInclusive<i32>, Vec<RangeInclusive<i32>>) {
    // A tiny widening absorbs rounding in the subtraction below; the grid may over-propose,
    // never under-propose.
    let dlat = reach_m / M_PER_DEG * (1.0 + 1e-9) + 1e-9;
    let rows = cell_index(area.lat - dlat, level)..=cell_index(area.lat + dlat, level);
    let phi_max = (area.lat.abs() + dlat).min(90.0).to_radians();
    let ratio = libm::sin(reach_m / (2.0 * EARTH_RADIUS_M)) / libm::cos(phi_max);
    let all = || vec![cell_index(-180.0, level)..=cell_index(180.0, level)];
    if !(0.0..1.0).contains(&ratio) {
        return (rows, all());
    }
    let dlon = (2.0 * libm::asin(ratio)).to_degrees() * (1.0 + 1e-9) + 1e-9;
    if dlon >= 180.0 {
        return (rows, all());
    }
    let (lo, hi) = (area.lon - dlon, area.lon + dlon);
    let span = |from: f64, to: f64| cell_index(from, level)..=cell_index(to, level);
    let cols = if lo < -180.0 {
        vec![span(lo + 360.0, 180.0), span(-180.0, hi)]
    } else if hi > 180.0 {
        vec![span(lo, 180.0), span(-180.0, hi - 360.0)]
    } else {
        vec![span(lo, hi)]
    };
    (rows, cols)
}
