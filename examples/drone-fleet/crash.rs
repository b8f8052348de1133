//! The fleet under `--chaos`: some drones crash, on their pad (even ones) or while charging
//! after a mission (odd ones). A crashed drone's runtime dies: its keepalives stop and nothing
//! is released. A ground crew queues for its pad, or its bay and charger, and is granted once
//! the crashed lease expires (the reclaim); then the rebooted drone's stale token is refused
//! by the place (a fence rejection), as it must be.

use std::sync::Arc;
use std::time::Duration;

use hivekeeper_agent::{Agent, AgentError, Guard, Session, Wait};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use crate::charging::Pair;
use crate::fleet::{Shared, Tally, connect, drone, pad_name, take_pad};
use crate::world::{Stale, World, bump};

/// One crash and what followed.
#[derive(Debug, Clone)]
pub struct Reclaim {
    /// The crashed drone.
    pub drone: String,
    /// Its pad, or the bay and charger it was plugged into.
    pub place: String,
    /// From the crash (its keepalives stop) to the ground crew's grant of the place.
    pub reclaim_ms: u64,
    /// Whether the place refused the rebooted drone's stale token, as it must.
    pub stale_token_refused: bool,
}

/// Where a drone crashed: on its pad, or plugged into a bay and a charger.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place {
    /// On the pad of this index, mid-landing.
    Pad(usize),
    /// Plugged into this bay and charger, after a mission.
    Charging(Pair),
}

impl Place {
    /// Takes the place as a drone does, waiting as `wait` says.
    async fn take(&self, session: &Session, wait: Wait) -> Result<Guard, AgentError> {
        match self {
            Place::Pad(pad) => take_pad(session, *pad, wait).await,
            Place::Charging(pair) => pair.take(session, wait).await,
        }
    }

    /// `who` lands on it or plugs in, under `token`.
    fn occupy(&self, world: &World, who: &str, token: u64) -> Result<(), Stale> {
        match self {
            Place::Pad(pad) => world.land(&pad_name(*pad), who, token),
            Place::Charging(pair) => pair.plug_in(world, who, token),
        }
    }

    /// The holder of `token` leaves it (or crashes there, leaving a wreck).
    fn vacate(&self, world: &World, token: u64, crashed: bool) {
        match self {
            Place::Pad(pad) => world.leave(&[&pad_name(*pad)], token, crashed),
            Place::Charging(pair) => pair.unplug(world, token, crashed),
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Pad(pad) => f.write_str(&pad_name(*pad)),
            Place::Charging(pair) => pair.fmt(f),
        }
    }
}

/// A crash in progress: the ground crew's cue.
#[derive(Debug)]
pub(crate) struct Crash {
    /// The crashed drone.
    drone: String,
    /// Where it crashed.
    place: Place,
    /// The token it held there, which the place must refuse once the drone reboots.
    token: u64,
    /// When its keepalives stopped.
    at: Instant,
}

/// When a drone crashes, and whom it tells.
pub(crate) struct CrashPlan<'a> {
    /// The mission it crashes on.
    pub(crate) mission: usize,
    /// Plugged in after the mission instead of on its pad.
    pub(crate) while_charging: bool,
    /// The ground crews' cue.
    pub(crate) crashes: &'a UnboundedSender<Crash>,
}

impl CrashPlan<'_> {
    /// The drone `me` crashes at `place`, leaving a wreck, and cues a ground crew. Nothing is
    /// released and no revoke is sent: the guard and session are leaked, and the caller ends
    /// the runtime that runs their keepalives.
    pub(crate) fn crash(
        &self,
        shared: &Shared,
        me: &str,
        place: Place,
        guard: Guard,
        session: Session,
    ) {
        place.vacate(&shared.world, guard.token(), true);
        let _ = self.crashes.send(Crash {
            drone: me.to_string(),
            place,
            token: guard.token(),
            at: Instant::now(),
        });
        std::mem::forget(guard);
        std::mem::forget(session);
    }
}

/// A drone on its own single-threaded runtime that crashes on its second mission, on its pad
/// (even `index`) or while charging after it (odd `index`). Its agent
/// and session are created on that runtime, so their connection and keepalive tasks run there;
/// after the crash the runtime is dropped, which ends those tasks without sending anything
/// (the MQTT socket just closes, as when a process dies).
pub(crate) fn crashing_drone(
    shared: Arc<Shared>,
    index: usize,
    crashes: UnboundedSender<Crash>,
) -> Tally {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return Tally::failed(format!("drone-{index}: no runtime: {error}"));
        }
    };
    let plan = CrashPlan {
        mission: 1.min(shared.config.missions_per_drone.saturating_sub(1)),
        while_charging: index % 2 == 1,
        crashes: &crashes,
    };
    let tally = runtime.block_on(async {
        match connect(&shared, index).await {
            Ok(session) => drone(&shared, session, index, Some(plan)).await,
            Err(error) => Tally::failed(format!("{error:#}")),
        }
    });
    drop(runtime);
    tally
}

/// Waits in the queue of the crashed drone's place until its lease expires, then checks the
/// place refuses the crashed drone's token once it "reboots".
pub(crate) async fn ground_crew(shared: &Shared, crash: Crash) -> anyhow::Result<Reclaim> {
    let id = format!("crew-{}", crash.drone);
    let agent = Agent::connect(shared.agent_config(&id)).await?;
    let session = agent.session(shared.config.ttl_ms).await?;
    let place = crash.place;
    // Bounded: the crashed lease expires after its TTL; three TTLs is a broken service.
    let wait = Duration::from_millis(3 * shared.config.ttl_ms);
    let guard = place.take(&session, Wait::AtMost(wait)).await?;
    let reclaim_ms = crash.at.elapsed().as_millis() as u64;
    place
        .occupy(&shared.world, &id, guard.token())
        .map_err(|stale| {
            bump(&shared.world.violations);
            anyhow::anyhow!(
                "{place} refused the crew's token {} (highest {})",
                guard.token(),
                stale.highest_token
            )
        })?;
    // The crashed drone reboots and tries to finish with its old token.
    let stale_token_refused = place
        .occupy(&shared.world, &crash.drone, crash.token)
        .is_err();
    if !stale_token_refused {
        bump(&shared.world.violations);
    }
    place.vacate(&shared.world, guard.token(), false);
    guard.release().await?;
    Ok(Reclaim {
        drone: crash.drone,
        place: place.to_string(),
        reclaim_ms,
        stale_token_refused,
    })
}
