//! The world of the drone-fleet scenario: the protected resources (each pad, charging bay and
//! charger and the gateway config remember the highest fencing token they have seen and refuse
//! a lower one) and the counters of what must never happen (two drones on one pad, bay or
//! charger, nine sensors on an eight-slot gateway, a live holder with an older token than a
//! previous holder).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// A protected spot (a pad, a charging bay, a charger): the highest token it has seen, and who
/// is on it.
#[derive(Debug, Default)]
struct Spot {
    /// The highest token it has seen: a lower one is refused.
    highest_token: u64,
    /// `(drone, token, crashed)`.
    occupant: Option<(String, u64, bool)>,
    /// The last drone that arrived, to count handovers.
    last_drone: Option<String>,
}

/// What a drone found on the spots it was let onto.
#[derive(Debug, Default)]
struct Arrival {
    /// Spots where a live occupant was still there.
    overlaps: u64,
    /// Whether another drone was the last on any of them.
    handover: bool,
}

/// Why a pad or the config refused a token.
#[derive(Debug)]
pub(crate) struct Stale {
    /// The highest token the resource has seen.
    pub(crate) highest_token: u64,
}

/// The protected resources and the counters of what they saw.
#[derive(Debug, Default)]
pub(crate) struct World {
    /// Every pad, charging bay and charger, by name (`pad-3`, `bay-1`, `charger-0`).
    spots: Mutex<HashMap<String, Spot>>,
    /// Sensors in the gateway now.
    gateway_occupancy: AtomicU64,
    /// The most sensors ever in the gateway at once.
    pub(crate) gateway_occupancy_max: AtomicU64,
    /// The gateway's slots: more sensors than this at once is a violation.
    gateway_permits: u64,
    /// `(highest token, holder now)` of the gateway configuration.
    config: Mutex<(u64, Option<String>)>,
    /// Tokens refused as stale.
    pub(crate) fence_rejections: AtomicU64,
    /// A live holder of a pad or the config still there when the next one arrived.
    pub(crate) double_occupancy: AtomicU64,
    /// A live holder of a charging bay or a charger still there when the next one plugged in.
    pub(crate) charging_overlaps: AtomicU64,
    /// Mutual-exclusion violations: too many in the gateway, or a stale token accepted.
    pub(crate) violations: AtomicU64,
    /// Landings on a pad by a drone other than the last one there.
    pub(crate) handovers: AtomicU64,
}

/// The mutex's value, also after a panic of another holder (the counters stay usable).
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts one more.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl World {
    /// A world with nothing on it, whose gateway has `gateway_permits` slots.
    pub(crate) fn new(gateway_permits: u64) -> World {
        World {
            gateway_permits,
            ..World::default()
        }
    }

    /// A drone lands on `pad` with `token`. A token not above the highest seen is refused (a
    /// stale holder). A wreck (crashed occupant) is cleared by a higher token; a live occupant
    /// still there is double occupancy.
    pub(crate) fn land(&self, pad: &str, drone: &str, token: u64) -> Result<(), Stale> {
        let arrival = self.arrive(&[pad], drone, token)?;
        self.double_occupancy
            .fetch_add(arrival.overlaps, Ordering::Relaxed);
        if arrival.handover {
            bump(&self.handovers);
        }
        Ok(())
    }

    /// A drone plugs into `bay` and `charger` with the one token of their multi-lock, as
    /// [`World::land`] does on a pad: both accept the token or neither does, and a live
    /// occupant still on either is a charging overlap.
    pub(crate) fn plug_in(
        &self,
        bay: &str,
        charger: &str,
        drone: &str,
        token: u64,
    ) -> Result<(), Stale> {
        let arrival = self.arrive(&[bay, charger], drone, token)?;
        self.charging_overlaps
            .fetch_add(arrival.overlaps, Ordering::Relaxed);
        Ok(())
    }

    /// `drone` takes every spot of `names` under `token`, or none if any has seen a token as
    /// high (counted as a fence rejection).
    fn arrive(&self, names: &[&str], drone: &str, token: u64) -> Result<Arrival, Stale> {
        let mut spots = locked(&self.spots);
        let highest_token = names
            .iter()
            .filter_map(|name| spots.get(*name))
            .map(|spot| spot.highest_token)
            .max()
            .unwrap_or(0);
        if token <= highest_token {
            bump(&self.fence_rejections);
            return Err(Stale { highest_token });
        }
        let mut arrival = Arrival::default();
        for name in names {
            let spot = spots.entry((*name).to_string()).or_default();
            if let Some((_, _, crashed)) = &spot.occupant
                && !crashed
            {
                arrival.overlaps += 1;
            }
            arrival.handover |= spot.last_drone.as_deref().is_some_and(|last| last != drone);
            spot.highest_token = token;
            spot.occupant = Some((drone.to_string(), token, false));
            spot.last_drone = Some(drone.to_string());
        }
        Ok(arrival)
    }

    /// The drone holding `token` leaves the spots `names` (or crashes on them, leaving a
    /// wreck).
    pub(crate) fn leave(&self, names: &[&str], token: u64, crashed: bool) {
        let mut spots = locked(&self.spots);
        for name in names {
            let Some(spot) = spots.get_mut(*name) else {
                continue;
            };
            if let Some((_, held, wreck)) = &mut spot.occupant
                && *held == token
            {
                if crashed {
                    *wreck = true;
                } else {
                    spot.occupant = None;
                }
            }
        }
    }

    /// A sensor enters the gateway under a permit.
    pub(crate) fn gateway_enter(&self) {
        let now = self.gateway_occupancy.fetch_add(1, Ordering::SeqCst) + 1;
        self.gateway_occupancy_max.fetch_max(now, Ordering::Relaxed);
        if now > self.gateway_permits {
            bump(&self.violations);
        }
    }

    /// A sensor leaves the gateway, giving its permit back.
    pub(crate) fn gateway_leave(&self) {
        self.gateway_occupancy.fetch_sub(1, Ordering::SeqCst);
    }

    /// A reconfiguration starts under the config lock's `token`.
    pub(crate) fn config_begin(&self, sensor: &str, token: u64) -> Result<(), Stale> {
        let mut config = locked(&self.config);
        if token <= config.0 {
            bump(&self.fence_rejections);
            return Err(Stale {
                highest_token: config.0,
            });
        }
        if config.1.is_some() {
            bump(&self.double_occupancy);
        }
        *config = (token, Some(sensor.to_string()));
        Ok(())
    }

    /// The reconfiguration by `sensor` ends.
    pub(crate) fn config_end(&self, sensor: &str) {
        let mut config = locked(&self.config);
        if config.1.as_deref() == Some(sensor) {
            config.1 = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    #[test]
    fn a_pair_accepts_its_token_on_both_spots_or_on_neither() {
        let world = World::default();
        world
            .plug_in("bay-0", "charger-0", "drone-0", 10)
            .expect("fresh spots");
        world.leave(&["bay-0", "charger-0"], 10, false);
        world
            .plug_in("bay-1", "charger-1", "drone-1", 20)
            .expect("fresh spots");
        world.leave(&["bay-1", "charger-1"], 20, false);
        // charger-1 has seen 20: the whole pair is refused, and bay-0 keeps its highest, 10.
        let stale = world
            .plug_in("bay-0", "charger-1", "drone-2", 15)
            .expect_err("charger-1 saw a higher token");
        assert_eq!(stale.highest_token, 20);
        assert_eq!(load(&world.fence_rejections), 1);
        world
            .plug_in("bay-0", "charger-0", "drone-3", 12)
            .expect("bay-0 has seen only 10");
        assert_eq!(load(&world.charging_overlaps), 0);
    }

    #[test]
    fn a_live_occupant_is_an_overlap_and_a_wreck_is_not() {
        let world = World::default();
        world
            .plug_in("bay-0", "charger-0", "drone-0", 10)
            .expect("fresh spots");
        // drone-0 is still plugged into charger-0.
        world
            .plug_in("bay-1", "charger-0", "drone-1", 11)
            .expect("a higher token");
        assert_eq!(load(&world.charging_overlaps), 1);
        // drone-1 crashes plugged in: the next holder clears the wreck without an overlap.
        world.leave(&["bay-1", "charger-0"], 11, true);
        world
            .plug_in("bay-1", "charger-0", "crew", 12)
            .expect("a higher token");
        assert_eq!(load(&world.charging_overlaps), 1);
        assert_eq!(
            load(&world.double_occupancy),
            0,
            "pads are not charging spots"
        );
    }
}
