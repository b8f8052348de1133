//! The grid's time index against a naive scan: busy cells (far more entries than
//! `SMALL_CELL`, so the binary searches run), windows of every kind (ended, open, none, long
//! ones removed so the bound shrinks), queries of every kind. The model test covers the grid
//! through the machine, but its cells rarely hold more than a few entries.

use hivekeeper_protocol::Area;

use super::geo::{M_PER_DEG, areas_conflict};
use super::grid::{Entry, Grid};
use super::window::{Window, overlaps};
use crate::LeaseId;

/// A small deterministic generator (a 64-bit LCG): the same cases on every run and platform.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }

    /// A window: none, open from a start, or `[start, start + length)`, within a day.
    fn window(&mut self) -> Option<Window> {
        let start_ms = self.next(86_400_000);
        match self.next(10) {
            0 => None,
            1 => Some(Window {
                start_ms,
                end_ms: None,
            }),
            // Mostly short slots, sometimes a long one.
            kind => {
                let length_ms = if kind == 2 {
                    1 + self.next(43_200_000)
                } else {
                    1 + self.next(600_000)
                };
                Some(Window {
                    start_ms,
                    end_ms: Some(start_ms + length_ms),
                })
            }
        }
    }
}

/// A 3 m cylinder `north_m` metres north of a fixed point: a few cells' worth of them.
fn area(north_m: f64) -> Area {
    Area {
        lat: 51.5 + north_m / M_PER_DEG,
        lon: -0.1,
        radius_m: 3.0,
        alt_min_m: None,
        alt_max_m: None,
    }
}

/// What the grid proposes and `visit` keeps, against every filed entry checked by hand.
fn assert_finds(
    grid: &Grid<(u64, u32)>,
    filed: &[((u64, u32), Entry)],
    query: (Area, Option<Window>),
) {
    let (query_area, query_window) = query;
    let mut found = Vec::new();
    grid.find_conflict(&query_area, query_window.as_ref(), |key, _| {
        found.push(*key);
        false
    });
    found.sort_unstable();
    let mut expected: Vec<(u64, u32)> = filed
        .iter()
        .filter(|(_, entry)| {
            overlaps(query_window.as_ref(), entry.window.as_ref())
                && areas_conflict(&query_area, &entry.area)
        })
        .map(|(key, _)| *key)
        .collect();
    expected.sort_unstable();
    assert_eq!(found, expected, "query {query_area:?} in {query_window:?}");
}

#[test]
fn busy_cells_find_exactly_what_a_scan_finds_as_entries_come_and_go() {
    let mut rng = Lcg(18);
    let mut grid: Grid<(u64, u32)> = Grid::default();
    let mut filed: Vec<((u64, u32), Entry)> = Vec::new();
    for seq in 0..400u64 {
        let entry = Entry {
            area: area(rng.next(30) as f64),
            lease: LeaseId(seq % 7),
            window: rng.window(),
        };
        grid.insert((seq, 0), entry);
        filed.push(((seq, 0), entry));
    }
    grid.check()
        .expect("the grid's invariants hold after the inserts");
    for round in 0..6 {
        for _ in 0..50 {
            let query = (area(rng.next(30) as f64), rng.window());
            assert_finds(&grid, &filed, query);
        }
        // Remove the longest windows first (the cells' bounds shrink), then some at random.
        filed.sort_by_key(|(_, entry)| {
            std::cmp::Reverse(
                entry
                    .window
                    .and_then(|window| window.end_ms.map(|end_ms| end_ms - window.start_ms)),
            )
        });
        let removed: Vec<_> = filed.drain(..10).collect();
        for _ in 0..20 {
            let at = rng.next(filed.len() as u64) as usize;
            let (key, entry) = filed.swap_remove(at);
            assert_eq!(
                grid.remove(&key, &entry.area, entry.window.as_ref()),
                Some(entry)
            );
        }
        for (key, entry) in removed {
            assert_eq!(
                grid.remove(&key, &entry.area, entry.window.as_ref()),
                Some(entry)
            );
        }
        grid.check()
            .unwrap_or_else(|broken| panic!("round {round}: {broken}"));
    }
    // What is left, filed again from nothing, is the same grid (the index is derived).
    let mut rebuilt: Grid<(u64, u32)> = Grid::default();
    for (key, entry) in &filed {
        rebuilt.insert(*key, *entry);
    }
    assert_eq!(rebuilt, grid);
}
