//! A hierarchical grid of cells over latitude and longitude, with time inside each cell, so a
//! conflict check costs the reservations whose cells **and** windows can overlap, not the
//! whole map.
//!
//! Space: each cylinder is filed at the finest level whose cell is at least as wide as its
//! radius (level 0 cells are 2^-13 degrees, about 13.6 m of latitude; each level doubles;
//! level 10 covers the 10 km maximum radius). A query at level L only needs cells within the
//! query's radius plus level L's cell width (the largest radius filed there), which is a
//! handful of cells per non-empty level whatever the mix of small and large reservations.
//!
//! Time: a cell keeps its entries sorted by window start, windows with an
//! end first, then those without one (no window at all files at start 0), and its longest
//! window with an end (`span_ms_max`). A query window `[start, end)` can only overlap an entry
//! that starts before `end` and ends after `start`; an ended entry ends at most `span_ms_max`
//! after its start, so only ended starts in `[start - span_ms_max, end)` and open starts
//! before `end` are read, found by binary search. A busy cell (a pad reserved slot after slot
//! all day, a corridor used every few minutes) then costs the few windows near the query's,
//! not the day's.
//!
//! Why a start order with a per-cell bound rather than time buckets in the key: a window may be
//! anything from a millisecond to the configured maximum (24 h by default, and a `Configure`
//! may lower it while longer windows are held) or have no end at all, so fixed buckets would
//! either file a long window many times or read many empty buckets; the start order needs
//! neither, and the bound is a function of the cell's entries alone. `span_ms_max` is kept
//! exact (recomputed from the cell when its longest window leaves), so a rebuilt grid equals
//! the maintained one, which is how `check_invariants` verifies it (waypoint invariants 3 and
//! 8, and [`Grid::check`]).
//!
//! Memory and cost: a cell's entries are a sorted vector exactly as long as the cell, so a cell
//! of one entry costs that entry rather than a B-tree node, and a query reads a cell's
//! candidates contiguously after one binary search, with no second tree descent (the layouts
//! measured against it are in docs/BENCHMARKS.md, "Routes"). Filing or removing an
//! entry moves the cell's later entries, linear in the cell's size; cells are 13.6 m to 11 km
//! wide by the radius filed, so a cell holds thousands only when thousands of reservations of
//! one place and size are held at once.
//!
//! The grid only proposes candidates; `window::overlaps` and `geo::areas_conflict` decide, for
//! the grant, the amend and `airspace.query` alike. Iteration follows the cells' B-tree order
//! (level, row, column) and each cell's (open, start, key) order, never a hash: replicas visit
//! candidates alike.
//!
//! Longitude cells shrink towards the poles, so the longitude reach is derived from the
//! haversine bound `sin(dλ/2) ≤ sin(d/2R) / cos(φmax)`; near a pole, or across the
//! antimeridian, the query widens to every longitude or splits in two ranges.
//!
//! Invariants (checked by [`Grid::check`], from `Waypoints::check_invariants`):
//! 1. Every entry is in the cell of its cylinder (`cell_of`), no cell is empty, and
//!    `per_level` counts the entries of each level.
//! 2. A cell's entries are strictly in (open, start, key) order: open when the window has no
//!    end (or there is no window), start the window's (0 without one).
//! 3. A cell's `span_ms_max` is exactly its longest ended window (`end - start`; 0 without
//!    one).

use crate::InvariantViolation;
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

/// Entries up to which a cell is read whole rather than searched by time (most cells of a
/// spread-out sky hold one or two).
const SMALL_CELL: usize = 8;

/// A cell: level, row, column.
type CellKey = (u8, i32, i32);

/// Where a window files an entry within its cell: open (no end: `true` sorts after the ended
/// ones) or not, and its start (0 without a window).
fn time_key(window: Option<&Window>) -> (bool, u64) {
    match window {
        None => (true, 0),
        Some(window) => (window.end_ms.is_none(), window.start_ms),
    }
}

/// An ended window's length, ms; `None` for an open one or none.
fn span_ms(window: Option<&Window>) -> Option<u64> {
    let window = window?;
    window
        .end_ms
        .map(|end_ms| end_ms.saturating_sub(window.start_ms))
}

/// One cell's entries (module docs).
#[derive(Debug, Clone, PartialEq)]
struct Cell<K> {
    /// The entries, sorted by (open, start, key): a vector exactly as long as needed, so a
    /// cell of one entry costs that entry.
    entries: Vec<(K, Entry)>,
    /// The longest ended window among them, ms (exact; 0 without one).
    span_ms_max: u64,
}

impl<K: Ord> Cell<K> {
    /// Where `(open, start)` begins among the entries.
    fn first_at(&self, at: (bool, u64)) -> usize {
        self.entries
            .partition_point(|(_, entry)| time_key(entry.window.as_ref()) < at)
    }

    /// The position of `key` filed at `at`, or where it would go.
    fn find(&self, at: (bool, u64), key: &K) -> Result<usize, usize> {
        self.entries.binary_search_by(|(filed, entry)| {
            (time_key(entry.window.as_ref()), filed).cmp(&(at, key))
        })
    }

    /// The entries a query window `[start_ms, end_ms)` can overlap: ended windows that start
    /// in `[start_ms - span_ms_max, end_ms)`, open ones that start before `end_ms`.
    fn candidates(&self, start_ms: u64, end_ms: Option<u64>) -> impl Iterator<Item = &(K, Entry)> {
        let all = self.entries.len();
        if all <= SMALL_CELL {
            // A few entries: the window check clears them faster than four binary searches.
            return self.entries.iter().chain(&self.entries[all..]);
        }
        let from_ms = start_ms.saturating_sub(self.span_ms_max);
        let ended_end = end_ms.map_or((true, 0), |end_ms| (false, end_ms));
        let open_end = end_ms.map_or(self.entries.len(), |end_ms| self.first_at((true, end_ms)));
        let ended = self.first_at((false, from_ms))..self.first_at(ended_end);
        let open = self.first_at((true, 0))..open_end;
        self.entries[ended].iter().chain(&self.entries[open])
    }
}

/// Cylinders by cell, then by window start and key (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Grid<K> {
    /// The cells with entries.
    cells: BTreeMap<CellKey, Cell<K>>,
    /// Entries per level, so empty levels are skipped.
    per_level: [u32; LEVELS],
}

impl<K> Default for Grid<K> {
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

fn cell_of(area: &Area) -> CellKey {
    let level = level_for(area.radius_m);
    (
        level as u8,
        cell_index(area.lat, level),
        cell_index(area.lon, level),
    )
}

impl<K: Ord> Grid<K> {
    /// Files a cylinder under `key`.
    pub fn insert(&mut self, key: K, entry: Entry) {
        let cell_key = cell_of(&entry.area);
        self.per_level[usize::from(cell_key.0)] += 1;
        let cell = self.cells.entry(cell_key).or_insert_with(|| Cell {
            entries: Vec::new(),
            span_ms_max: 0,
        });
        if let Some(span_ms) = span_ms(entry.window.as_ref()) {
            cell.span_ms_max = cell.span_ms_max.max(span_ms);
        }
        let at = time_key(entry.window.as_ref());
        let position = match cell.find(at, &key) {
            Ok(position) | Err(position) => position,
        };
        // Exactly one more: the vector stays as long as the cell (module docs, memory).
        cell.entries.reserve_exact(1);
        cell.entries.insert(position, (key, entry));
    }

    /// Removes the cylinder filed under `key` with this area and window.
    pub fn remove(&mut self, key: &K, area: &Area, window: Option<&Window>) -> Option<Entry> {
        let cell_key = cell_of(area);
        let cell = self.cells.get_mut(&cell_key)?;
        let position = cell.find(time_key(window), key).ok()?;
        let (_, entry) = cell.entries.remove(position);
        self.per_level[usize::from(cell_key.0)] -= 1;
        if cell.entries.is_empty() {
            self.cells.remove(&cell_key);
            return Some(entry);
        }
        if span_ms(window) == Some(cell.span_ms_max) {
            // The longest window left: the bound shrinks to the longest still filed (exact,
            // so a rebuilt grid is equal).
            cell.span_ms_max = cell
                .entries
                .iter()
                .filter_map(|(_, entry)| span_ms(entry.window.as_ref()))
                .max()
                .unwrap_or(0);
        }
        if cell.entries.capacity() >= 2 * cell.entries.len() + 4 {
            cell.entries.shrink_to_fit();
        }
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
        // The query's window as a start and an end: no window is all time.
        let (start_ms, end_ms) = match window {
            None => (0, None),
            Some(window) => (window.start_ms, window.end_ms),
        };
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
                    for cell in self.cells.range(first..=last).map(|(_, cell)| cell) {
                        for (key, entry) in cell.candidates(start_ms, end_ms) {
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

    /// Invariants 1 to 3 (module docs): where each entry is filed, the level counts and each
    /// cell's order and time bound.
    pub fn check(&self) -> Result<(), InvariantViolation> {
        let mut per_level = [0u32; LEVELS];
        for (cell_key, cell) in &self.cells {
            if cell.entries.is_empty() {
                return Err(violation!("grid cell {cell_key:?} is empty but kept"));
            }
            let mut span_ms_max = 0;
            for (_, entry) in &cell.entries {
                if cell_of(&entry.area) != *cell_key {
                    return Err(violation!(
                        "a grid entry at {:?} is filed in cell {cell_key:?}, not its own {:?}",
                        entry.area,
                        cell_of(&entry.area)
                    ));
                }
                span_ms_max = span_ms_max.max(span_ms(entry.window.as_ref()).unwrap_or(0));
            }
            let ordered = cell.entries.windows(2).all(|pair| {
                let [(key_a, a), (key_b, b)] = pair else {
                    return true;
                };
                (time_key(a.window.as_ref()), key_a) < (time_key(b.window.as_ref()), key_b)
            });
            if !ordered {
                return Err(violation!(
                    "grid cell {cell_key:?} is not strictly in (open, start, key) order"
                ));
            }
            if span_ms_max != cell.span_ms_max {
                return Err(violation!(
                    "grid cell {cell_key:?} bounds its windows at {} ms, its longest is \
                     {span_ms_max} ms",
                    cell.span_ms_max
                ));
            }
            per_level[usize::from(cell_key.0)] += u32::try_from(cell.entries.len())
                .expect("a cell holds fewer entries than the machine's bounds");
        }
        if per_level != self.per_level {
            return Err(violation!(
                "the grid counts {:?} entries per level, it holds {per_level:?}",
                self.per_level
            ));
        }
        Ok(())
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
