//! The drone-fleet scenario itself, apart from the command line and the progress bar, so the
//! end-to-end test (`tests/example_drone_fleet.rs`) runs the same code with small counts.
//!
//! ```text
//!  drones (one agent + one 5 s session each)        hive sensors (one agent + session each)
//!   fly ─▶ try-reserve a random pad (wait_ms 0)       sem `gateway` limit 8 ─▶ read ─▶ release
//!          would_block ─▶ 20–40 ms jitter, other pad  a few: FIFO lock `gateway/config`,
//!   land (50–200 ms) on the fenced pad ─▶ release      reconfigure ≤ 200 ms under its token
//!   recharge: a bay and a charger as one multi-lock (`charging.rs`) ─▶ charge ─▶ release both
//!   --chaos: a drone crashes on its pad: its runtime dies, keepalives stop, nothing released
//!            ─▶ ground crew queues for the pad, is granted after the lease expires (reclaim)
//!            ─▶ the rebooted drone's stale token is refused by the pad (fence rejection)
//!            every other crashing drone crashes while charging instead: the same for its pair
//! ```
//!
//! The world (`World`, in `world.rs`) plays the protected resources: each pad and the gateway
//! config remember the highest fencing token they have seen and refuse a lower one, and they
//! count what must never happen (two drones on one pad, bay or charger, nine sensors on an
//! eight-slot gateway, a live holder with an older token than a previous holder).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use hivekeeper::Service;
use hivekeeper_agent::{
    Agent, AgentConfig, AgentError, Geometry, Guard, Resource, Session, TimeWindow, Wait,
};
use hivekeeper_coordinator::node::NodeConfig;
use hivekeeper_mqtt::Mode;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::charging::{self, ChargingConfig, ChargingSummary, ChargingTally};
use crate::crash::{CrashPlan, Place, Reclaim, crashing_drone, ground_crew};
use crate::world::{Stale, World, bump};

/// Metres per degree of latitude on the protocol's sphere (radius 6 371 008.8 m).
pub(crate) const METRES_PER_DEGREE: f64 = 6_371_008.8 * std::f64::consts::PI / 180.0;
/// Where the pads are: a field outside Zürich.
pub(crate) const FIELD_LAT: f64 = 47.3769;
/// See [`FIELD_LAT`].
pub(crate) const FIELD_LON: f64 = 8.5417;
/// Pads per row of the grid.
const PADS_PER_ROW: usize = 5;
/// Distance between neighbouring pads.
const PAD_SPACING_M: f64 = 8.0;
/// Radius each reservation claims: 3 m, so pads 8 m apart never conflict by geometry (8 > 3 + 3)
/// and only the pad's name decides.
const PAD_RADIUS_M: f64 = 3.0;
/// Altitude band a landing drone occupies.
const PAD_ALT_MAX_M: f64 = 30.0;
/// Name of the gateway semaphore and of the lock guarding its configuration.
const GATEWAY: &str = "gateway";
/// See [`GATEWAY`].
const GATEWAY_CONFIG: &str = "gateway/config";

/// What the fleet does; [`FleetConfig::default`] is the scenario the example's doc describes
/// (50 drones on 20 pads recharging on 6 bays with 4 chargers, 200 sensors sharing one gateway).
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Brokers of the service, `host:port`.
    pub brokers: Vec<String>,
    /// Number of drones.
    pub drones: usize,
    /// Number of landing pads.
    pub pads: usize,
    /// Missions each drone flies (each ends with one landing, then one recharge).
    pub missions_per_drone: usize,
    /// The charging bays and chargers the drones recharge on after each mission.
    pub charging: ChargingConfig,
    /// Number of hive sensors.
    pub sensors: usize,
    /// Gateway readings each sensor takes.
    pub readings_per_sensor: usize,
    /// How many of the sensors also reconfigure the gateway.
    pub reconfigurers: usize,
    /// Reconfigurations each of them makes.
    pub reconfigurations_each: usize,
    /// Permits of the gateway semaphore.
    pub gateway_permits: u32,
    /// TTL of every session.
    pub ttl_ms: u64,
    /// How often every session keeps its lease alive (1.5 s for a 5 s TTL by default, under a
    /// third of the TTL).
    pub keepalive_every_ms: u64,
    /// Drones that crash mid-landing (`--chaos`); 0 for a calm run.
    pub crashes: usize,
    /// Every loop stops at this bound even if its count is not reached.
    pub duration_s: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            brokers: vec![hivekeeper_agent::DEFAULT_BROKER.into()],
            drones: 50,
            pads: 20,
            missions_per_drone: 8,
            charging: ChargingConfig::default(),
            sensors: 200,
            readings_per_sensor: 5,
            reconfigurers: 4,
            reconfigurations_each: 3,
            gateway_permits: 8,
            ttl_ms: 5_000,
            keepalive_every_ms: 1_500,
            crashes: 0,
            duration_s: 45,
        }
    }
}

/// Counters a progress bar can read while the fleet runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Landings, recharges and gateway readings done so far.
    pub done: AtomicU64,
}

impl Progress {
    /// How many landings, recharges and readings the fleet will do if nothing is cut short.
    pub fn total(config: &FleetConfig) -> u64 {
        (2 * config.drones * config.missions_per_drone
            + config.sensors * config.readings_per_sensor) as u64
    }

    pub(crate) fn tick(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the run did, and what went wrong.
#[derive(Debug)]
pub struct Summary {
    /// Missions flown to the end (landed and released).
    pub missions: u64,
    /// Landings accepted by a pad.
    pub landings: u64,
    /// Reservation wait, from the first try to the grant, µs.
    pub reservation_wait_us: Histogram<u64>,
    /// `would_block` answers (each followed by a 20–40 ms backoff).
    pub contentions: u64,
    /// Landings on a pad whose previous occupant was another drone.
    pub handovers: u64,
    /// The recharges, each on a bay and a charger held as one multi-lock.
    pub charging: ChargingSummary,
    /// Gateway readings done under a permit.
    pub readings: u64,
    /// Most sensors seen in the gateway at once.
    pub gateway_occupancy_max: u64,
    /// Gateway reconfigurations applied.
    pub reconfigurations: u64,
    /// Crashes and their reclaims.
    pub reclaims: Vec<Reclaim>,
    /// Tokens refused by a pad, a bay, a charger or the gateway config because a higher one
    /// was seen.
    pub fence_rejections: u64,
    /// Two drones on one pad, or two reconfigurations at once.
    pub double_occupancy: u64,
    /// A live holder whose token was not above the previous holder's, or more sensors in the
    /// gateway than it has permits.
    pub mutual_exclusion_violations: u64,
    /// SDK errors other than contention (the run goes on; each is a failed mission or reading).
    pub errors: u64,
    /// Sample messages of those errors (the first few).
    pub error_samples: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Whether the duration bound cut the run short.
    pub cut_short: bool,
}

impl Summary {
    /// Violations of the guarantees: the example fails if this is not zero.
    pub fn violations(&self) -> u64 {
        self.double_occupancy + self.charging.overlaps + self.mutual_exclusion_violations
    }
}

/// A node started in-process on a fresh temporary data dir and a free loopback port: the
/// same assembly as `hivekeeper serve` ([`Service`]). Dropping the `TempDir` after
/// [`Service::shutdown`] removes the data.
pub async fn embedded_node() -> anyhow::Result<(Service, tempfile::TempDir, String)> {
    let data_dir = tempfile::tempdir().context("a temporary data dir")?;
    let node = NodeConfig {
        data_dir: data_dir.path().to_path_buf(),
        ..NodeConfig::default()
    };
    let mut mqtt = hivekeeper_mqtt::Config::default();
    if let Mode::Embedded(embedded) = &mut mqtt.mode {
        // Port 0: the OS picks a free one, read back from the listener.
        embedded.listen = "127.0.0.1:0".parse().expect("a literal socket address");
    }
    let service = Service::start(node, mqtt)
        .await
        .context("starting the embedded node")?;
    let addr = service
        .mqtt_addrs()
        .first()
        .copied()
        .context("the embedded broker has no listener")?;
    Ok((service, data_dir, addr.to_string()))
}

/// Serves the web console of `service` on a free loopback port (read-only: no authentication,
/// no `--insecure`), as `hivekeeper serve` does on its metrics port; returns its address.
/// `data_dir` is the service's, whose files' sizes the cluster view shows.
pub async fn console(service: &Service, data_dir: &std::path::Path) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("a port for the console")?;
    let addr = listener.local_addr().context("the console's port")?;
    let backend = hivekeeper::console_backend::NodeConsole {
        node: service.node_handle(),
        data_dir: data_dir.to_path_buf(),
    };
    let slot = hivekeeper_console::ConsoleSlot::default();
    let _ = slot.set(hivekeeper_console::Console::new(
        backend,
        hivekeeper_console::ConsoleOptions::default(),
    ));
    let not_found: hivekeeper_console::OtherPaths = std::sync::Arc::new(|_, path| {
        hivekeeper_console::ApiError {
            status: hyper::StatusCode::NOT_FOUND,
            code: hivekeeper_protocol::ErrorCode::BadRequest,
            message: format!("{path} is not served here: the console is at /ui"),
        }
        .response()
    });
    tokio::spawn(hivekeeper_console::serve(listener, slot, not_found, None));
    Ok(format!("http://{addr}/ui"))
}

/// What one drone or sensor task reports.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    missions: u64,
    landings: u64,
    pub(crate) charging: ChargingTally,
    readings: u64,
    reconfigurations: u64,
    contentions: u64,
    pub(crate) errors: Vec<String>,
    wait_us: Vec<u64>,
}

impl Tally {
    /// The tally of a task that failed before it began.
    pub(crate) fn failed(error: String) -> Tally {
        Tally {
            errors: vec![error],
            ..Tally::default()
        }
    }
}

/// Everything the tasks share.
pub(crate) struct Shared {
    pub(crate) config: FleetConfig,
    pub(crate) world: World,
    pub(crate) progress: Arc<Progress>,
    pub(crate) deadline: Instant,
}

impl Shared {
    /// The config of agent `id`: the fleet's brokers and keepalive.
    pub(crate) fn agent_config(&self, id: &str) -> AgentConfig {
        AgentConfig {
            agent_id: id.to_string(),
            brokers: self.config.brokers.clone(),
            keepalive_every_ms: Some(self.config.keepalive_every_ms),
            ..AgentConfig::default()
        }
    }

    /// Records that `what` refused a live holder's token: the service's token order is broken.
    pub(crate) fn token_refused(&self, tally: &mut Tally, what: &str, token: u64, stale: Stale) {
        bump(&self.world.violations);
        tally.errors.push(format!(
            "{what} refused live token {token} (highest {})",
            stale.highest_token
        ));
    }
}

/// Runs the fleet against the service at `config.brokers` until every count is done or
/// `duration_s` has passed.
pub async fn run(config: FleetConfig, progress: Arc<Progress>) -> anyhow::Result<Summary> {
    let charging = &config.charging;
    if config.pads == 0 || charging.bays == 0 || charging.chargers == 0 || config.drones == 0 {
        bail!("need at least one pad, bay, charger and drone");
    }
    if config.crashes > config.drones {
        bail!("no more crashes than drones");
    }
    if config.reconfigurers > config.sensors {
        bail!("more reconfigurers than sensors");
    }
    let started = Instant::now();
    let shared = Arc::new(Shared {
        world: World::new(u64::from(config.gateway_permits)),
        deadline: started + Duration::from_secs(config.duration_s),
        progress,
        config,
    });
    let config = &shared.config;

    let sessions = connect_all(&shared).await?;

    let (crash_tx, mut crash_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut crash_threads = Vec::new();
    for i in 0..config.crashes {
        let (shared, crash_tx) = (shared.clone(), crash_tx.clone());
        crash_threads.push(std::thread::spawn(move || {
            crashing_drone(shared, i, crash_tx)
        }));
    }
    let mut tasks: JoinSet<Tally> = JoinSet::new();
    for (i, session) in sessions {
        let shared = shared.clone();
        if i < config.drones {
            tasks.spawn(async move { drone(&shared, session, i, None).await });
        } else {
            let sensor = i - config.drones;
            tasks.spawn(async move { sensor_loop(&shared, session, sensor).await });
        }
    }
    drop(crash_tx);

    // Ground crew: one per crash, queued for the crashed drone's pad.
    let mut crews = JoinSet::new();
    while let Some(crash) = crash_rx.recv().await {
        let shared = shared.clone();
        crews.spawn(async move { ground_crew(&shared, crash).await });
    }
    let mut tally = Tally::default();
    for thread in crash_threads {
        let crashed = thread
            .join()
            .map_err(|_| anyhow::anyhow!("a crashing drone's thread panicked"))?;
        merge(&mut tally, crashed);
    }
    while let Some(joined) = tasks.join_next().await {
        merge(
            &mut tally,
            joined.context("a drone or sensor task panicked")?,
        );
    }
    let mut reclaims = Vec::new();
    while let Some(joined) = crews.join_next().await {
        match joined.context("a ground crew task panicked")? {
            Ok(reclaim) => reclaims.push(reclaim),
            Err(error) => tally.errors.push(format!("ground crew: {error:#}")),
        }
    }

    Ok(summarize(&shared, tally, reclaims, started))
}

/// Every agent but the crashing drones connects and takes its session, all at once, so the
/// flight starts together; returns them by agent index. Drones that will crash connect on
/// their own runtime instead (see `crashing_drone`).
async fn connect_all(shared: &Arc<Shared>) -> anyhow::Result<Vec<(usize, Session)>> {
    let config = &shared.config;
    let mut connecting = JoinSet::new();
    for i in config.crashes..config.drones + config.sensors {
        let shared = shared.clone();
        connecting.spawn(async move { anyhow::Ok((i, connect(&shared, i).await?)) });
    }
    let mut sessions: Vec<(usize, Session)> = Vec::new();
    while let Some(joined) = connecting.join_next().await {
        sessions.push(joined.context("a connecting task panicked")??);
    }
    Ok(sessions)
}

/// The run's summary, from the merged tally of every task, the world's counters and the
/// ground crews' reclaims.
fn summarize(
    shared: &Shared,
    mut tally: Tally,
    reclaims: Vec<Reclaim>,
    started: Instant,
) -> Summary {
    let world = &shared.world;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let error_count = tally.errors.len() as u64;
    tally.errors.truncate(5);
    Summary {
        missions: tally.missions,
        landings: tally.landings,
        reservation_wait_us: wait_histogram(&tally.wait_us),
        contentions: tally.contentions,
        handovers: load(&world.handovers),
        charging: ChargingSummary::new(&tally.charging, world),
        readings: tally.readings,
        gateway_occupancy_max: load(&world.gateway_occupancy_max),
        reconfigurations: tally.reconfigurations,
        reclaims,
        fence_rejections: load(&world.fence_rejections),
        double_occupancy: load(&world.double_occupancy),
        mutual_exclusion_violations: load(&world.violations),
        errors: error_count,
        error_samples: tally.errors,
        elapsed: started.elapsed(),
        cut_short: Instant::now() >= shared.deadline,
    }
}

/// A histogram of waits in µs: 1 µs to an hour at 3 significant figures; `saturating_record`
/// keeps a longer wait at the top instead of failing (an auto-resizing histogram would clamp
/// every value instead).
pub(crate) fn wait_histogram(waits_us: &[u64]) -> Histogram<u64> {
    let mut histogram =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
    for wait in waits_us {
        histogram.saturating_record(*wait);
    }
    histogram
}

/// Agent `i` (drones first, then sensors) connects and takes its session.
pub(crate) async fn connect(shared: &Shared, i: usize) -> anyhow::Result<Session> {
    let id = if i < shared.config.drones {
        format!("drone-{i}")
    } else {
        format!("sensor-{}", i - shared.config.drones)
    };
    let agent = Agent::connect(shared.agent_config(&id))
        .await
        .with_context(|| format!("{id} connects"))?;
    agent
        .session(shared.config.ttl_ms)
        .await
        .with_context(|| format!("{id} takes a session"))
}

fn merge(into: &mut Tally, from: Tally) {
    into.missions += from.missions;
    into.landings += from.landings;
    into.charging.merge(from.charging);
    into.readings += from.readings;
    into.reconfigurations += from.reconfigurations;
    into.contentions += from.contentions;
    into.errors.extend(from.errors);
    into.wait_us.extend(from.wait_us);
}

/// Uniform in `[low_ms, high_ms]`.
pub(crate) fn jitter(low_ms: u64, high_ms: u64) -> Duration {
    Duration::from_millis(fastrand::u64(low_ms..=high_ms))
}

pub(crate) fn pad_name(pad: usize) -> String {
    format!("pad-{pad}")
}

/// Takes pad `pad`, waiting as `wait` says: the one place where drones and ground crews take
/// what they land on, under one token. A pad is reserved by its name and its cylinder, now, at
/// routine priority.
pub(crate) async fn take_pad(
    session: &Session,
    pad: usize,
    wait: Wait,
) -> Result<Guard, AgentError> {
    let reservation = Resource::Waypoint {
        name: pad_name(pad),
        geometry: Some(pad_geometry(pad)),
        window: TimeWindow::default(),
        priority: hivekeeper_agent::Priority::ROUTINE,
    };
    session.acquire(reservation, wait).await
}

/// Pad `pad`'s cylinder: on a grid of [`PADS_PER_ROW`] columns, [`PAD_SPACING_M`] apart.
fn pad_geometry(pad: usize) -> Geometry {
    let row = (pad / PADS_PER_ROW) as f64;
    let col = (pad % PADS_PER_ROW) as f64;
    let metres_per_degree_lon = METRES_PER_DEGREE * FIELD_LAT.to_radians().cos();
    Geometry {
        lat: FIELD_LAT + row * PAD_SPACING_M / METRES_PER_DEGREE,
        lon: FIELD_LON + col * PAD_SPACING_M / metres_per_degree_lon,
        radius_m: PAD_RADIUS_M,
        alt_min_m: Some(0.0),
        alt_max_m: Some(PAD_ALT_MAX_M),
    }
}

/// The drone's missions, each a landing then a recharge. With `crash_on` set, the drone
/// crashes on that mission, on its pad or while charging: it leaks its guard instead of
/// releasing it (the caller makes the crash real).
pub(crate) async fn drone(
    shared: &Shared,
    session: Session,
    index: usize,
    crash_on: Option<CrashPlan<'_>>,
) -> Tally {
    let me = format!("drone-{index}");
    let mut tally = Tally::default();
    for mission in 0..shared.config.missions_per_drone {
        let crash_here = |charging: bool| {
            crash_on
                .as_ref()
                .filter(|plan| plan.mission == mission && plan.while_charging == charging)
        };
        if Instant::now() >= shared.deadline {
            break;
        }
        tokio::time::sleep(jitter(20, 80)).await; // Flying to the field.
        let Some((pad, guard)) = reserve_some_pad(shared, &session, &mut tally).await else {
            if !session.state().is_live() {
                break;
            }
            continue;
        };
        let name = pad_name(pad);
        match shared.world.land(&name, &me, guard.token()) {
            Ok(()) => tally.landings += 1,
            Err(stale) => {
                let what = format!("{me}: pad {name}");
                shared.token_refused(&mut tally, &what, guard.token(), stale);
                continue;
            }
        }
        if let Some(plan) = crash_here(false) {
            plan.crash(shared, &me, Place::Pad(pad), guard, session);
            return tally;
        }
        tokio::time::sleep(jitter(50, 200)).await; // On the pad.
        shared.world.leave(&[&name], guard.token(), false);
        match guard.release().await {
            Ok(()) => tally.missions += 1,
            Err(error) => tally.errors.push(format!("{me} releases {name}: {error}")),
        }
        shared.progress.tick();
        let Some((pair, guard)) = charging::plug_in(shared, &session, &me, &mut tally).await else {
            continue;
        };
        if let Some(plan) = crash_here(true) {
            plan.crash(shared, &me, Place::Charging(pair), guard, session);
            return tally;
        }
        charging::charge(shared, &me, pair, guard, &mut tally).await;
    }
    tally
}

/// Tries random pads (`wait_ms: 0`) with 20–40 ms of jittered backoff after each
/// `would_block`, until one is granted, the session is lost or the run's time is up.
async fn reserve_some_pad(
    shared: &Shared,
    session: &Session,
    tally: &mut Tally,
) -> Option<(usize, Guard)> {
    let first_try = Instant::now();
    while Instant::now() < shared.deadline {
        let pad = fastrand::usize(0..shared.config.pads);
        match take_pad(session, pad, Wait::Try).await {
            Ok(guard) => {
                tally.wait_us.push(
                    first_try
                        .elapsed()
                        .as_micros()
                        .try_into()
                        .unwrap_or(u64::MAX),
                );
                return Some((pad, guard));
            }
            Err(AgentError::WouldBlock) => {
                tally.contentions += 1;
                tokio::time::sleep(jitter(20, 40)).await;
            }
            Err(error) => {
                tally.errors.push(format!("reserving pad-{pad}: {error}"));
                if !session.state().is_live() {
                    return None;
                }
                tokio::time::sleep(jitter(20, 40)).await;
            }
        }
    }
    None
}

/// A hive sensor: readings through the gateway under one of its permits; the first
/// `reconfigurers` sensors also reconfigure it under the FIFO lock.
async fn sensor_loop(shared: &Shared, session: Session, index: usize) -> Tally {
    let me = format!("sensor-{index}");
    let config = &shared.config;
    let mut tally = Tally::default();
    let reconfigures = index < config.reconfigurers;
    for reading in 0..config.readings_per_sensor {
        if Instant::now() >= shared.deadline {
            break;
        }
        tokio::time::sleep(jitter(50, 300)).await; // Sampling the hive.
        let deadline_left = shared.deadline.saturating_duration_since(Instant::now());
        let resource = Resource::Semaphore {
            name: GATEWAY.into(),
            limit: config.gateway_permits,
            permits: 1,
        };
        match session.acquire(resource, Wait::AtMost(deadline_left)).await {
            Ok(permit) => {
                shared.world.gateway_enter();
                tokio::time::sleep(jitter(10, 30)).await; // Uplink.
                shared.world.gateway_leave();
                match permit.release().await {
                    Ok(()) => tally.readings += 1,
                    Err(error) => tally
                        .errors
                        .push(format!("{me} releases a permit: {error}")),
                }
            }
            Err(AgentError::WaitTimeout) => break,
            Err(error) => tally.errors.push(format!("{me} reads: {error}")),
        }
        shared.progress.tick();
        if reconfigures && reading < config.reconfigurations_each {
            reconfigure(shared, &session, &me, &mut tally).await;
        }
    }
    tally
}

/// One reconfiguration under `gateway/config`, held at most 200 ms.
async fn reconfigure(shared: &Shared, session: &Session, me: &str, tally: &mut Tally) {
    let deadline_left = shared.deadline.saturating_duration_since(Instant::now());
    let guard = match session
        .acquire(Resource::lock(GATEWAY_CONFIG), Wait::AtMost(deadline_left))
        .await
    {
        Ok(guard) => guard,
        Err(AgentError::WaitTimeout) => return,
        Err(error) => {
            tally.errors.push(format!("{me} locks the config: {error}"));
            return;
        }
    };
    match shared.world.config_begin(me, guard.token()) {
        Ok(()) => {
            tokio::time::sleep(jitter(50, 200)).await;
            shared.world.config_end(me);
            tally.reconfigurations += 1;
        }
        Err(stale) => {
            shared.token_refused(tally, &format!("{me}: the config"), guard.token(), stale)
        }
    }
    if let Err(error) = guard.release().await {
        tally
            .errors
            .push(format!("{me} unlocks the config: {error}"));
    }
}
