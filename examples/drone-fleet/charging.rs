//! The drones' recharge after each mission: a charging bay and a charger taken together, as one
//! multi-lock.
//!
//! ```text
//!  drone, its mission flown and its pad released:
//!   pick a random bay and a random charger ─▶ lock_all([bay-b, charger-c]): one grant, one token
//!   plug in (the bay and the charger each fenced by that token) ─▶ charge 20–60 ms
//!   unplug ─▶ release both at once (lock.release_all)
//!   --chaos: some drones crash while charging: their lease expires, the pair goes to the next
//!            in line, and the bay and the charger refuse the rebooted drone's stale token
//! ```
//!
//! Why a multi-lock: every charger's cable reaches every bay, and there are fewer chargers than
//! drones, so drones contend for both. Taken one lock at a time, a drone holding `bay-1` while
//! it waits for `charger-0` and another holding `charger-0` while it waits for `bay-1` would
//! wait for each other for ever (and a longer ring of such drones closes the same way), unless
//! every drone took its locks in one agreed order. `lock_all` asks for both in one request: the
//! service grants them all at once with one token, or queues the request FIFO as a unit while
//! it holds neither, so no order of names can deadlock.

use std::fmt;

use hdrhistogram::Histogram;
use hivekeeper_agent::{AgentError, Guard, LockMode, Resource, Session, Wait};
use tokio::time::Instant;

use crate::fleet::{Shared, Tally, jitter};
use crate::world::{Stale, World};

/// How long a drone charges, ms, lowest and highest: a stand-in for minutes.
const CHARGE_MS: (u64, u64) = (20, 60);

/// The charging rack; [`ChargingConfig::default`] is the scenario the example's doc describes.
#[derive(Debug, Clone)]
pub struct ChargingConfig {
    /// Charging bays, locks `bay-0`, `bay-1`, ...
    pub bays: usize,
    /// Chargers, locks `charger-0`, ...: fewer than drones, so drones queue for them.
    pub chargers: usize,
}

impl Default for ChargingConfig {
    fn default() -> Self {
        ChargingConfig {
            bays: 6,
            chargers: 4,
        }
    }
}

/// A charging bay and a charger, held together under one token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pair {
    /// The bay's index.
    bay: usize,
    /// The charger's index.
    charger: usize,
}

impl Pair {
    /// Any bay with any charger: every cable reaches every bay.
    fn random(config: &ChargingConfig) -> Pair {
        Pair {
            bay: fastrand::usize(0..config.bays),
            charger: fastrand::usize(0..config.chargers),
        }
    }

    /// The names of the two locks, bay first.
    fn names(&self) -> [String; 2] {
        [
            format!("bay-{}", self.bay),
            format!("charger-{}", self.charger),
        ]
    }

    /// Takes both locks as one multi-lock, waiting as `wait` says: the one place where drones
    /// and ground crews take a pair.
    pub(crate) async fn take(&self, session: &Session, wait: Wait) -> Result<Guard, AgentError> {
        let resource = Resource::lock_all(self.names(), LockMode::Exclusive);
        session.acquire(resource, wait).await
    }

    /// `drone` plugs into the bay and the charger under the multi-lock's `token`.
    pub(crate) fn plug_in(&self, world: &World, drone: &str, token: u64) -> Result<(), Stale> {
        let [bay, charger] = self.names();
        world.plug_in(&bay, &charger, drone, token)
    }

    /// The drone holding `token` unplugs (or crashes plugged in, leaving a wreck).
    pub(crate) fn unplug(&self, world: &World, token: u64, crashed: bool) {
        let [bay, charger] = self.names();
        world.leave(&[&bay, &charger], token, crashed);
    }
}

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [bay, charger] = self.names();
        write!(f, "{bay} + {charger}")
    }
}

/// What one drone's recharges did.
#[derive(Debug, Default)]
pub(crate) struct ChargingTally {
    /// Recharges done to the end (unplugged and released).
    charges: u64,
    /// Wait for each pair, from the request to the grant, µs.
    wait_us: Vec<u64>,
}

impl ChargingTally {
    pub(crate) fn merge(&mut self, from: ChargingTally) {
        self.charges += from.charges;
        self.wait_us.extend(from.wait_us);
    }
}

/// What the recharges did, and what went wrong.
#[derive(Debug)]
pub struct ChargingSummary {
    /// Recharges done to the end.
    pub charges: u64,
    /// Wait for the pair, from the request to the grant, µs.
    pub wait_us: Histogram<u64>,
    /// A bay or charger with a live occupant when another drone plugged in: a violation.
    pub overlaps: u64,
}

impl ChargingSummary {
    /// The summary of the merged `tally` and the world's count of overlaps.
    pub(crate) fn new(tally: &ChargingTally, world: &World) -> ChargingSummary {
        ChargingSummary {
            charges: tally.charges,
            wait_us: crate::fleet::wait_histogram(&tally.wait_us),
            overlaps: world
                .charging_overlaps
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// The drone `me` takes a random pair, waiting in the service's queue while the run has time
/// left, and plugs in; `None` if the run's time ran out or something failed (recorded).
pub(crate) async fn plug_in(
    shared: &Shared,
    session: &Session,
    me: &str,
    tally: &mut Tally,
) -> Option<(Pair, Guard)> {
    let pair = Pair::random(&shared.config.charging);
    let asked = Instant::now();
    let deadline_left = shared.deadline.saturating_duration_since(asked);
    let guard = match pair.take(session, Wait::AtMost(deadline_left)).await {
        Ok(guard) => guard,
        Err(AgentError::WaitTimeout) => return None,
        Err(error) => {
            tally.errors.push(format!("{me} takes {pair}: {error}"));
            return None;
        }
    };
    let waited = asked.elapsed().as_micros().try_into().unwrap_or(u64::MAX);
    tally.charging.wait_us.push(waited);
    if let Err(stale) = pair.plug_in(&shared.world, me, guard.token()) {
        let what = format!("{me}: {pair}");
        shared.token_refused(tally, &what, guard.token(), stale);
        release(me, pair, guard, tally).await;
        return None;
    }
    Some((pair, guard))
}

/// The drone `me`, plugged into `pair`, charges holding the multi-lock's guard, unplugs and
/// releases both locks together.
pub(crate) async fn charge(shared: &Shared, me: &str, pair: Pair, guard: Guard, tally: &mut Tally) {
    tokio::time::sleep(jitter(CHARGE_MS.0, CHARGE_MS.1)).await;
    pair.unplug(&shared.world, guard.token(), false);
    if release(me, pair, guard, tally).await {
        tally.charging.charges += 1;
        shared.progress.tick();
    }
}

/// Releases `pair` (`lock.release_all`); whether it went through (a failure is recorded).
async fn release(me: &str, pair: Pair, guard: Guard, tally: &mut Tally) -> bool {
    match guard.release().await {
        Ok(()) => true,
        Err(error) => {
            tally.errors.push(format!("{me} releases {pair}: {error}"));
            false
        }
    }
}
