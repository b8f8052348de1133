//! The world of the drone-fleet scenario: the protected resources (each pad and the gateway
//! config remember the highest fencing token they have seen and refuse a lower one) and the
//! counters of what must never happen (two drones on one pad, nine sensors on an eight-slot
//! gateway, a live holder with an older token than a previous holder).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// A protected pad: the highest token it has seen, and who stands on it.
#[derive(Debug, Default)]
struct Pad {
    /// The highest token it has seen: a lower one is refused.
    highest_token: u64,
    /// `(drone, token, crashed)`.
    occupant: Option<(String, u64, bool)>,
    /// The last drone that landed, to count handovers.
    last_drone: Option<String>,
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
    /// Every pad, by name.
    pads: Mutex<HashMap<String, Pad>>,
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
    /// A live holder still there when the next one arrived.
    pub(crate) double_occupancy: AtomicU64,
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
        let mut pads = locked(&self.pads);
        let pad = pads.entry(pad.to_string()).or_default();
        if token <= pad.highest_token {
            bump(&self.fence_rejections);
            return Err(Stale {
                highest_token: pad.highest_token,
            });
        }
        if let Some((_, _, crashed)) = &pad.occupant
            && !crashed
        {
            bump(&self.double_occupancy);
        }
        if pad.last_drone.as_deref().is_some_and(|last| last != drone) {
            bump(&self.handovers);
        }
        pad.highest_token = token;
        pad.occupant = Some((drone.to_string(), token, false));
        pad.last_drone = Some(drone.to_string());
        Ok(())
    }

    /// The drone holding `token` leaves `pad` (or crashes on it, leaving a wreck).
    pub(crate) fn leave(&self, pad: &str, token: u64, crashed: bool) {
        let mut pads = locked(&self.pads);
        let Some(pad) = pads.get_mut(pad) else { return };
        if let Some((_, held, wreck)) = &mut pad.occupant
            && *held == token
        {
            if crashed {
                *wreck = true;
            } else {
                pad.occupant = None;
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
