//! What an `uncontended` agent acquires (`--resource`): its own lock, or its own waypoint, or
//! its own 12-volume route, so that the three costs over MQTT can be compared on one machine
//! (the target: a route reserve within 20% of a single waypoint reserve). Agents are a
//! kilometre apart, so no two of them ever conflict, and a route's window covers the whole run.

use std::time::{SystemTime, UNIX_EPOCH};

use clap::ValueEnum;
use hivekeeper_agent::protocol::Volume;
use hivekeeper_agent::{Geometry, Priority, Resource, TimeWindow};
use hivekeeper_state_machine::M_PER_DEG as METRES_PER_DEGREE;

/// Where agent 0 is; agent `i` is `i mod 100` km east and `i / 100` km north of it.
const ORIGIN: (f64, f64) = (47.0, 8.0);
/// Volumes of a route: 12, a typical flight plan's legs.
pub const ROUTE_VOLUMES: usize = 12;
/// How long a route's window lasts from the start of the run: longer than any bench run.
const ROUTE_WINDOW_MS: u64 = 3_600_000;

/// The resource each agent acquires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ResourceShape {
    /// `lock.acquire` / `lock.release`.
    Lock,
    /// `waypoint.reserve` of a 10 m cylinder, 0–120 m, no window.
    Waypoint,
    /// `route.reserve` of 12 cylinders 50 m apart, 0–120 m, a window over the whole run.
    Route,
}

impl ResourceShape {
    /// Agent `i`'s resource, named `name`.
    pub fn resource(self, name: String, i: usize) -> Resource {
        let (lat, lon) = place(i, 0.0);
        match self {
            ResourceShape::Lock => Resource::lock(name),
            ResourceShape::Waypoint => Resource::Waypoint {
                name,
                geometry: Some(Geometry {
                    lat,
                    lon,
                    radius_m: 10.0,
                    alt_min_m: Some(0.0),
                    alt_max_m: Some(120.0),
                }),
                window: TimeWindow::default(),
                priority: Priority::ROUTINE,
            },
            ResourceShape::Route => {
                let start_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_millis() as u64);
                let volumes = (0..ROUTE_VOLUMES)
                    .map(|leg| {
                        let (lat, lon) = place(i, leg as f64 * 50.0);
                        Volume {
                            lat,
                            lon,
                            radius_m: 20.0,
                            alt_min_m: 0.0,
                            alt_max_m: 120.0,
                            start_ms,
                            end_ms: start_ms + ROUTE_WINDOW_MS,
                        }
                    })
                    .collect();
                Resource::Route {
                    name,
                    volumes,
                    priority: Priority::ROUTINE,
                }
            }
        }
    }
}

/// Agent `i`'s place, `east_m` further east.
fn place(i: usize, east_m: f64) -> (f64, f64) {
    let metres_per_degree_lon = METRES_PER_DEGREE * ORIGIN.0.to_radians().cos();
    let (north_m, east_km) = ((i / 100) as f64 * 1_000.0, (i % 100) as f64);
    (
        ORIGIN.0 + north_m / METRES_PER_DEGREE,
        ORIGIN.1 + (east_km * 1_000.0 + east_m) / metres_per_degree_lon,
    )
}
