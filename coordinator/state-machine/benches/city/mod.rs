//! The city of routes, the routes' target scenario, shared by the `apply` and `memory` benches:
//! 10,000 routes of 12 4D volumes over a 20 km square, 0 to 120 m, each volume with its route's
//! 1-hour window.
//!
//! The square is a 100 x 100 grid of cells 200 m apart; the route of a cell has 12 volumes
//! 15 m apart eastwards, radius 5 m, all in the route's hour. `hour` spreads neighbouring
//! cells over four hours (the `apply` bench's busy variant stacks them on fewer cells).

use hivekeeper_protocol::Volume;
use hivekeeper_state_machine::M_PER_DEG;

/// Cells per side of the square.
pub const CELLS: usize = 100;
/// Distance between neighbouring cells, metres (100 cells: a 20 km square).
pub const CELL_M: f64 = 200.0;
/// Volumes in a route.
pub const LEGS: usize = 12;
/// Distance between a route's successive volumes, metres.
pub const LEG_M: f64 = 15.0;
/// One hour, ms: each volume's window.
pub const HOUR_MS: u64 = 3_600_000;
/// The square's south-west corner.
const LAT0: f64 = 51.5;
const LON0: f64 = -0.1;

/// The hour (0 to 3) the city's route in cell (row, col) flies in.
pub fn hour(row: usize, col: usize) -> u64 {
    ((row + col) % 4) as u64
}

/// The 12 volumes of the route in cell (row, col), in the hour from `start_ms`.
pub fn route_volumes(row: usize, col: usize, start_ms: u64) -> Vec<Volume> {
    let north_m = row as f64 * CELL_M;
    let lat = LAT0 + north_m / M_PER_DEG;
    let m_per_deg_lon = M_PER_DEG * lat.to_radians().cos();
    (0..LEGS)
        .map(|leg| {
            let east_m = col as f64 * CELL_M + leg as f64 * LEG_M;
            Volume {
                lat,
                lon: LON0 + east_m / m_per_deg_lon,
                radius_m: 5.0,
                alt_min_m: 0.0,
                alt_max_m: 120.0,
                start_ms,
                end_ms: start_ms + HOUR_MS,
            }
        })
        .collect()
}
