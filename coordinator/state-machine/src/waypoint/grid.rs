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
//! Time (issue 18, part 6): within a cell, entries are ordered by window start, windows with
//! an end first, then those without one (no window at all files at start 0), and each cell
//! keeps its longest window with an end (`span_ms_max`). A query window `[start, end)` can
//! only overlap an entry that starts before `end` and ends after `start`; an ended entry ends
//! at most `span_ms_max` after its start, so only starts in `[start - span_ms_max, end)` are
//! read (one B-tree range), and of the open entries only starts before `end` (a second one).
//! A busy cell (a pad reserved slot after slot all day, a corridor used every few minutes)
//! then costs the few windows near the query's, not the day's.
//!
//! Why a start order with a per-cell bound rather than time buckets in the key: a window may be
//! anything from a millisecond to the configured maximum (24 h by default, and a `Configure`
//! may lower it while longer windows are held) or have no end at all, so fixed buckets would
//! either file a long window many times or read many empty buckets; the start order needs
//! neither, and the bound is a function of the cell's entries alone. `span_ms_max` is kept
//! exact (recomputed from the cell when its longest window leaves: a cell holds a few entries),
//! so a rebuilt grid equals the maintained one, which is how `check_invariants` verifies it
//! (waypoint invariants 3 and 8, and [`Grid::check`]).
//!
//! Memory: every entry of every cell lives in **one** B-tree keyed by (cell, ended or open,
//! start, key), so a cell of one entry costs that entry's share of a node, not a node of its
//! own (a B-tree per cell cost a 1.4 KB leaf for each one-entry cell: about 1,400 bytes a held
//! volume in the city bench, docs/BENCHMARKS.md). The cells' bounds live in a second, small map.
//!
//! The grid only proposes candidates; `window::overlaps` and `geo::areas_conflict` decide, for
//! the grant, the amend and `airspace.query` alike. Iteration follows the B-trees' order
//! (level, row, column, then start and key), never a hash: replicas visit candidates alike.
//!
//! Longitude cells shrink towards the poles, so the longitude reach is derived from the
//! haversine bound `sin(dλ/2) ≤ sin(d/2R) / cos(φmax)`; near a pole, or across the
//! antimeridian, the query widens to every longitude or splits in two ranges.
//!
//! Invariants (checked by [`Grid::check`], from `Waypoints::check_invariants`):
//! 1. Every entry is filed under the cell of its cylinder (`cell_of`), and `per_level` counts
//!    the entries of each level.
//! 2. An entry whose window has an end is filed as ended under its window's start; any other
//!    as open, under its window's start, or 0 without a window.
//! 3. Exactly the cells with entries have a [`CellTime`], whose counts are the cell's ended
//!    and open entries and whose `span_ms_max` is exactly its longest ended window
//!    (`end - start`; 0 without one).

use std::collections::BTreeMap;
use std::ops::{Bound, RangeInclusive};
use std::sync::LazyLock;

use hivekeeper_protocol::Area;

use super::geo::{EARTH_RADIUS_M, M_PER_DEG, areas_conflict};
use super::window::{Window, overlaps};
use crate::{LeaseId, Text};

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

/// A key the grid files entries under: ordered, with a least value, so that a cell's time
/// range can start at `(start_ms, least)`.
pub trait GridKey: Ord + Clone {
    /// The least key: every key is at least this.
    fn least() -> Self;
}

/// The least name, made once: a range bound clones it rather than allocating.
static LEAST_NAME: LazyLock<Text> = LazyLock::new(|| Text::from(""));

impl GridKey for (Text, u32) {
    fn least() -> Self {
        (LEAST_NAME.clone(), 0)
    }
}

impl GridKey for (u64, u32) {
    fn least() -> Self {
        (0, 0)
    }
}

/// A cell: level, row, column.
type CellKey = (u8, i32, i32);

/// Where an entry is filed: its cell, whether its window is open (has no end: `true` sorts
/// after the ended ones), its window's start, and its key.
type Filed<K> = (CellKey, bool, u64, K);

/// A cell's time summary (invariant 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CellTime {
    /// The longest ended window filed in the cell, ms.
    span_ms_max: u64,
    /// Entries with an ended window.
    ended: u32,
    /// Entries without an end.
    open: u32,
}

/// Where a window files an entry within its cell: open or not, its start, and its length
/// when it has an end.
fn time_key(window: Option<&Window>) -> (bool, u64, Option<u64>) {
    match window {
        None => (true, 0, None),
        Some(window) => {
            let span = window
                .end_ms
                .map(|end_ms| end_ms.saturating_sub(window.start_ms));
            (span.is_none(), window.start_ms, span)
        }
    }
}

/// Cylinders by cell, window start and key (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Grid<K: Ord> {
    /// Every entry, by (cell, open, start, key).
    entries: BTreeMap<Filed<K>, Entry>,
    /// The cells with entries, with their time summary.
    cells: BTreeMap<CellKey, CellTime>,
    /// Entries per level, so empty levels are skipped.
    per_level: [u32; LEVELS],
}

impl<K: Ord> Default for Grid<K> {
    fn default() -> Self {
        Grid {
            entries: BTreeMap::new(),
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

impl<K: GridKey> Grid<K> {
    /// Files a cylinder under `key`.
    pub fn insert(&mut self, key: K, entry: Entry) {
        let cell = cell_of(&entry.area);
        let (open, start_ms, span_ms) = time_key(entry.window.as_ref());
        self.per_level[usize::from(cell.0)] += 1;
        let time = self.cells.entry(cell).or_default();
        match span_ms {
            Some(span_ms) => {
                time.ended += 1;
                time.span_ms_max = time.span_ms_max.max(span_ms);
            }
            None => time.open += 1,
        }
        self.entries.insert((cell, open, start_ms, key), entry);
    }

    /// Removes the cylinder filed under `key` with this area and window.
    pub fn remove(&mut self, key: K, area: &Area, window: Option<&Window>) -> Option<Entry> {
        let cell = cell_of(area);
        let (open, start_ms, span_ms) = time_key(window);
        let entry = self.entries.remove(&(cell, open, start_ms, key))?;
        self.per_level[usize::from(cell.0)] -= 1;
        let time = self
            .cells
            .get_mut(&cell)
            .expect("a cell with an entry has its time summary");
        match span_ms {
            Some(span_ms) => {
                time.ended -= 1;
                if span_ms == time.span_ms_max {
                    time.span_ms_max = Self::span_ms_max(&self.entries, cell);
                }
            }
            None => time.open -= 1,
        }
        if time.ended == 0 && time.open == 0 {
            self.cells.remove(&cell);
        }
        Some(entry)
    }

    /// The longest ended window filed in `cell` (0 without one), read from the entries.
    fn span_ms_max(entries: &BTreeMap<Filed<K>, Entry>, cell: CellKey) -> u64 {
        let least = K::least();
        entries
            .range((
                Bound::Included((cell, false, 0, least.clone())),
                Bound::Excluded((cell, true, 0, least)),
            ))
            .filter_map(|(_, entry)| time_key(entry.window.as_ref()).2)
            .max()
            .unwrap_or(0)
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
        let (query_start_ms, query_end_ms) = match window {
            None => (0, None),
            Some(window) => (window.start_ms, window.end_ms),
        };
        let least = K::least();
        // The end of a cell's range of ended (`open` false) or open windows: starts before the
        // query's end; without one, the end of that part of the cell.
        let before_end = |cell: CellKey, open: bool| match (query_end_ms, open) {
            (Some(end_ms), _) => Bound::Excluded((cell, open, end_ms, least.clone())),
            (None, false) => Bound::Excluded((cell, true, 0, least.clone())),
            (None, true) => {
                let next_cell = (cell.0, cell.1, cell.2 + 1);
                Bound::Excluded((next_cell, false, 0, least.clone()))
            }
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
                    for (&cell, time) in self.cells.range(first..=last) {
                        // Only windows that start before the query's end and, ended ones, can
                        // still be running at its start (module docs).
                        let ended = (time.ended > 0).then(|| {
                            let from_ms = query_start_ms.saturating_sub(time.span_ms_max);
                            let from = Bound::Included((cell, false, from_ms, least.clone()));
                            self.entries.range((from, before_end(cell, false)))
                        });
                        let open = (time.open > 0).then(|| {
                            let from = Bound::Included((cell, true, 0, least.clone()));
                            self.entries.range((from, before_end(cell, true)))
                        });
                        let candidates = ended.into_iter().flatten();
                        let candidates = candidates.chain(open.into_iter().flatten());
                        for ((_, _, _, key), entry) in candidates {
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
    /// cell's time summary.
    pub fn check(&self) -> Result<(), String> {
        let mut per_level = [0u32; LEVELS];
        let mut cells: BTreeMap<CellKey, CellTime> = BTreeMap::new();
        for ((cell, open, start_ms, _), entry) in &self.entries {
            if cell_of(&entry.area) != *cell {
                return Err(format!(
                    "a grid entry at {:?} is filed in cell {cell:?}, not its own {:?}",
                    entry.area,
                    cell_of(&entry.area)
                ));
            }
            let (is_open, start, span) = time_key(entry.window.as_ref());
            if (is_open, start) != (*open, *start_ms) {
                return Err(format!(
                    "a grid entry with window {:?} is filed at start {start_ms} (open: {open})",
                    entry.window
                ));
            }
            per_level[usize::from(cell.0)] += 1;
            let time = cells.entry(*cell).or_default();
            match span {
                Some(span_ms) => {
                    time.ended += 1;
                    time.span_ms_max = time.span_ms_max.max(span_ms);
                }
                None => time.open += 1,
            }
        }
        if cells != self.cells {
            return Err(format!(
                "the grid's cell summaries {:?} are not what its entries imply, {cells:?}",
                self.cells
            ));
        }
        if per_level != self.per_level {
            return Err(format!(
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
