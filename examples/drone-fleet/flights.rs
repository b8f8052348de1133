//! The drone-fleet example's airspace part: every flight from the hub to a pad is one 4D intent
//! (`route.reserve`), planned ahead in time, and an emergency flight preempts a routine one.
//! Kept apart from `fleet.rs` (the pads, the gateway, the crashes), so the end-to-end test
//! (`tests/example_drone_fleet.rs`) runs the same code with small counts.
//!
//! ```text
//!  planners (one agent + session each)                 survey drone (routine)
//!   plan hub → pad k: a corridor of cylinders,           holds a long route east of the field,
//!   each with the time slice the drone spends in it      waits on Guard::preempted()
//!   route.reserve, wait_ms 0 ─┬─ granted: wait for the      ─▶ vacates (VACATE_MS), releases
//!                             │  window, fly, release     medevac (emergency)
//!                             └─ would_block: a conflict    route.reserve across the survey route
//!                                avoided ─▶ depart a slot      ─▶ granted once the survey released
//!                                later, plan again               (or at vacate_by_ms), higher token
//!
//!  Airspace (the checker): every intent from its grant until its drone vacated. A grant that
//!  overlaps a held intent in space and time is a violation: a naive pairwise check of its own,
//!  independent of the service's.
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hivekeeper_agent::protocol::{ErrorCode, Volume};
use hivekeeper_agent::{Agent, AgentConfig, AgentError, Guard, Priority, Session, Wait};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::fleet::{FIELD_LAT, FIELD_LON, METRES_PER_DEGREE};

/// The hub, on the field outside Zürich where `fleet.rs` puts its pads.
const HUB_LAT: f64 = FIELD_LAT;
/// See [`HUB_LAT`].
const HUB_LON: f64 = FIELD_LON;
/// Where a corridor starts: its own departure lane, this far from the hub's centre, so that
/// flights on different corridors never conflict and flights on one corridor do.
const LANE_OFFSET_M: f64 = 100.0;
/// Length of a corridor, from its lane to its pad.
const CORRIDOR_M: f64 = 400.0;
/// Cylinders along a corridor, one per leg of the flight.
const LEGS: usize = 5;
/// Radius of each cylinder: neighbouring legs (100 m apart) overlap, so a corridor has no gap,
/// and two lanes (141 m apart) do not.
const LEG_RADIUS_M: f64 = 55.0;
/// The altitude band of every flight.
const ALT_MIN_M: f64 = 30.0;
/// See [`ALT_MIN_M`].
const ALT_MAX_M: f64 = 60.0;
/// How long the survey drone takes to vacate once told: it finishes its pass and climbs out.
const VACATE_MS: u64 = 300;

/// What the airspace part does; [`FlightsConfig::default`] is the example's scenario.
#[derive(Debug, Clone)]
pub struct FlightsConfig {
    /// Brokers of the service, `host:port`.
    pub brokers: Vec<String>,
    /// Drones that plan and fly routes hub → pad.
    pub planners: usize,
    /// Flights each of them makes.
    pub flights_each: usize,
    /// Corridors (and pads) around the hub, evenly spread.
    pub corridors: usize,
    /// How long a drone spends in one leg's cylinder; a flight is `LEGS + 1` of these (each
    /// cylinder's window covers two slices, so consecutive legs overlap in time).
    pub leg_ms: u64,
    /// How far ahead the first departure is planned.
    pub lead_ms: u64,
    /// TTL of every session.
    pub ttl_ms: u64,
    /// Every loop stops at this bound even if its count is not reached.
    pub duration_s: u64,
}

impl Default for FlightsConfig {
    fn default() -> Self {
        FlightsConfig {
            brokers: vec![hivekeeper_agent::DEFAULT_BROKER.into()],
            planners: 12,
            flights_each: 3,
            corridors: 4,
            leg_ms: 150,
            lead_ms: 1_000,
            ttl_ms: 5_000,
            duration_s: 45,
        }
    }
}

/// What the airspace part did, and what went wrong.
#[derive(Debug)]
pub struct FlightsSummary {
    /// Routes granted and flown to the end (released).
    pub flights: u64,
    /// `would_block` answers: a planned route conflicted with one held, and the planner moved
    /// its departure to a later slot instead.
    pub conflicts_avoided: u64,
    /// Grants on a corridor that another drone had been granted too, at other times: the
    /// corridor shared in time rather than given to one drone.
    pub corridor_shares: u64,
    /// `reservation.preempted` events the survey drone got.
    pub preemptions: u64,
    /// From the survey drone's preempted event to its release acknowledged, ms.
    pub vacate_ms: Option<u64>,
    /// The deadline the event gave, from when it was received, ms.
    pub vacate_deadline_ms: Option<u64>,
    /// From the medevac's request to its grant, ms.
    pub emergency_wait_ms: Option<u64>,
    /// Whether the medevac's token was above the survey route's (the late holder is fenced).
    pub emergency_token_higher: bool,
    /// Two intents that overlap in space and time held at once: must be 0.
    pub overlaps_held: u64,
    /// SDK errors other than contention.
    pub errors: u64,
    /// Sample messages of those errors (the first few).
    pub error_samples: Vec<String>,
    /// Wall time of the part.
    pub elapsed: Duration,
    /// Whether the duration bound cut it short.
    pub cut_short: bool,
}

/// One intent the checker holds: its owner's grant, until vacated.
#[derive(Debug, Clone)]
struct Intent {
    token: u64,
    volumes: Vec<Volume>,
}

/// The checker: intents from grant to vacate.
#[derive(Debug, Default)]
struct Airspace {
    held: Mutex<Vec<Intent>>,
    overlaps_held: Mutex<u64>,
}

impl Airspace {
    /// A grant: counts every held intent it overlaps in space and time, then holds it.
    fn granted(&self, token: u64, volumes: &[Volume]) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let overlaps = held
            .iter()
            .filter(|intent| intents_overlap(&intent.volumes, volumes))
            .count() as u64;
        if overlaps > 0 {
            *self
                .overlaps_held
                .lock()
                .unwrap_or_else(PoisonError::into_inner) += overlaps;
        }
        held.push(Intent {
            token,
            volumes: volumes.to_vec(),
        });
    }

    /// The drone of `token` left the airspace (before it releases, as a real drone would).
    fn vacated(&self, token: u64) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|intent| intent.token != token);
    }

    fn overlaps_held(&self) -> u64 {
        *self
            .overlaps_held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Two routes overlap when any of their volumes do: the horizontal distance of the axes below
/// the sum of the radii (less a centimetre, so that a contact the service may allow is not
/// counted), the altitude bands overlapping, and the half-open windows overlapping.
fn intents_overlap(a: &[Volume], b: &[Volume]) -> bool {
    a.iter().any(|x| {
        b.iter().any(|y| {
            x.start_ms < y.end_ms
                && y.start_ms < x.end_ms
                && x.alt_min_m < y.alt_max_m
                && y.alt_min_m < x.alt_max_m
                && haversine_m(x.lat, x.lon, y.lat, y.lon) < x.radius_m + y.radius_m - 0.01
        })
    })
}

/// Great-circle distance on the protocol's sphere.
fn haversine_m(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (phi1, phi2) = (lat1.to_radians(), lat2.to_radians());
    let (dphi, dlambda) = ((lat2 - lat1).to_radians(), (lon2 - lon1).to_radians());
    let a = (dphi / 2.0).sin().powi(2) + phi1.cos() * phi2.cos() * (dlambda / 2.0).sin().powi(2);
    2.0 * 6_371_008.8 * a.sqrt().asin()
}

/// The point `north_m`, `east_m` from the hub.
fn offset(north_m: f64, east_m: f64) -> (f64, f64) {
    let metres_per_degree_lon = METRES_PER_DEGREE * HUB_LAT.to_radians().cos();
    (
        HUB_LAT + north_m / METRES_PER_DEGREE,
        HUB_LON + east_m / metres_per_degree_lon,
    )
}

/// A straight route from `from` to `to` (north, east in metres from the hub): `legs`
/// cylinders, the drone in leg `i` during `[depart + i·leg, depart + (i + 2)·leg)`.
fn straight_route(
    from: (f64, f64),
    to: (f64, f64),
    legs: usize,
    radius_m: f64,
    depart_ms: u64,
    leg_ms: u64,
) -> Vec<Volume> {
    (0..legs)
        .map(|i| {
            let t = i as f64 / (legs - 1).max(1) as f64;
            let (lat, lon) = offset(from.0 + t * (to.0 - from.0), from.1 + t * (to.1 - from.1));
            Volume {
                lat,
                lon,
                radius_m,
                alt_min_m: ALT_MIN_M,
                alt_max_m: ALT_MAX_M,
                start_ms: depart_ms + i as u64 * leg_ms,
                end_ms: depart_ms + (i as u64 + 2) * leg_ms,
            }
        })
        .collect()
}

/// Corridor `k`'s route departing at `depart_ms`: from its lane to its pad, on bearing
/// `k · 360° / corridors`.
fn corridor_route(k: usize, corridors: usize, depart_ms: u64, leg_ms: u64) -> Vec<Volume> {
    let bearing = (k as f64) * std::f64::consts::TAU / corridors as f64;
    let (north, east) = (bearing.cos(), bearing.sin());
    let lane = (LANE_OFFSET_M * north, LANE_OFFSET_M * east);
    let pad = (
        (LANE_OFFSET_M + CORRIDOR_M) * north,
        (LANE_OFFSET_M + CORRIDOR_M) * east,
    );
    straight_route(lane, pad, LEGS, LEG_RADIUS_M, depart_ms, leg_ms)
}

/// The service's time: UTC ms since the Unix epoch (the example and the node share a clock).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .unwrap_or(0)
}

fn elapsed_ms(since: Instant) -> u64 {
    since.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
}

/// What one task reports.
#[derive(Debug, Default)]
struct Tally {
    flights: u64,
    conflicts_avoided: u64,
    /// `(corridor, token)` of each grant.
    grants: Vec<(usize, u64)>,
    errors: Vec<String>,
}

/// Runs the airspace part against the service at `config.brokers`.
pub async fn run(config: FlightsConfig) -> anyhow::Result<FlightsSummary> {
    anyhow::ensure!(
        config.corridors > 0 && config.planners > 0 && config.leg_ms > 0,
        "need at least one corridor and one planner, and legs of at least 1 ms"
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(config.duration_s);
    let airspace = Arc::new(Airspace::default());
    let config = Arc::new(config);

    let mut planners = JoinSet::new();
    for i in 0..config.planners {
        let session = connect(&config.brokers, &format!("planner-{i}"), config.ttl_ms).await?;
        let (config, airspace) = (config.clone(), airspace.clone());
        planners.spawn(async move { planner(&config, &airspace, session, i, deadline).await });
    }
    let emergency = emergency(&config, &airspace, deadline).await;

    let mut tally = Tally::default();
    while let Some(joined) = planners.join_next().await {
        let one = joined.context("a planner task panicked")?;
        tally.flights += one.flights;
        tally.conflicts_avoided += one.conflicts_avoided;
        tally.grants.extend(one.grants);
        tally.errors.extend(one.errors);
    }
    let (preemptions, vacate_ms, vacate_deadline_ms, emergency_wait_ms, emergency_token_higher) =
        match emergency {
            Ok(seen) => (
                1,
                Some(seen.vacate_ms),
                Some(seen.vacate_deadline_ms),
                Some(seen.wait_ms),
                seen.token_higher,
            ),
            Err(error) => {
                tally.errors.push(format!("emergency: {error:#}"));
                (0, None, None, None, false)
            }
        };
    // A grant on a corridor granted before (to anyone, at another time) shares it in time.
    tally.grants.sort_unstable_by_key(|(_, token)| *token);
    let mut used = vec![false; config.corridors];
    let mut corridor_shares = 0;
    for (corridor, _) in &tally.grants {
        if std::mem::replace(&mut used[*corridor], true) {
            corridor_shares += 1;
        }
    }
    let errors = tally.errors.len() as u64;
    tally.errors.truncate(5);
    Ok(FlightsSummary {
        flights: tally.flights,
        conflicts_avoided: tally.conflicts_avoided,
        corridor_shares,
        preemptions,
        vacate_ms,
        vacate_deadline_ms,
        emergency_wait_ms,
        emergency_token_higher,
        overlaps_held: airspace.overlaps_held(),
        errors,
        error_samples: tally.errors,
        elapsed: started.elapsed(),
        cut_short: Instant::now() >= deadline,
    })
}

/// Agent `id` connects to `brokers`.
pub(crate) async fn connect_agent(brokers: &[String], id: &str) -> anyhow::Result<Agent> {
    Agent::connect(AgentConfig {
        agent_id: id.to_string(),
        brokers: brokers.to_vec(),
        ..AgentConfig::default()
    })
    .await
    .with_context(|| format!("{id} connects"))
}

/// Agent `id` connects to `brokers` and takes a session of `ttl_ms`.
pub(crate) async fn connect(brokers: &[String], id: &str, ttl_ms: u64) -> anyhow::Result<Session> {
    connect_agent(brokers, id)
        .await?
        .session(ttl_ms)
        .await
        .with_context(|| format!("{id} takes a session"))
}

/// Planner `i`: flights to the corridors in turn. Each is planned at the earliest slot after
/// its previous flight; a conflict moves it one leg later, until it is granted.
async fn planner(
    config: &FlightsConfig,
    airspace: &Airspace,
    session: Session,
    i: usize,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut depart_ms = now_ms() + config.lead_ms;
    for flight in 0..config.flights_each {
        let corridor = (i + flight) % config.corridors;
        let name = format!("flight-{i}-{flight}");
        let guard = loop {
            if Instant::now() >= deadline {
                return tally;
            }
            // Never plan a departure that has already passed.
            depart_ms = depart_ms.max(now_ms() + config.leg_ms);
            let volumes = corridor_route(corridor, config.corridors, depart_ms, config.leg_ms);
            match session
                .reserve_route(&name, volumes.clone(), Wait::Try)
                .await
            {
                Ok(guard) => {
                    airspace.granted(guard.token(), &volumes);
                    break guard;
                }
                Err(AgentError::WouldBlock) => {
                    tally.conflicts_avoided += 1;
                    depart_ms += config.leg_ms;
                }
                Err(error) => {
                    tally
                        .errors
                        .push(format!("planner-{i} reserves {name}: {error}"));
                    if !session.state().is_live() {
                        return tally;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        tally.grants.push((corridor, guard.token()));
        // Fly it: wait for the window, then through it; out of the airspace just before its
        // end, then released (the service would end it at its last volume's end anyway).
        let arrive_ms = depart_ms + (LEGS as u64 + 1) * config.leg_ms;
        tokio::time::sleep(Duration::from_millis(
            arrive_ms.saturating_sub(now_ms()).saturating_sub(10),
        ))
        .await;
        airspace.vacated(guard.token());
        match guard.release().await {
            Ok(()) => tally.flights += 1,
            // Ended by the service at its end already: the flight was flown all the same.
            Err(AgentError::Service {
                code: ErrorCode::NotHolder,
                ..
            }) => tally.flights += 1,
            Err(error) => tally
                .errors
                .push(format!("planner-{i} releases {name}: {error}")),
        }
        depart_ms = arrive_ms;
    }
    tally
}

/// What the emergency showed.
struct Emergency {
    vacate_ms: u64,
    vacate_deadline_ms: u64,
    wait_ms: u64,
    token_higher: bool,
}

/// A survey drone holds a long routine route east of the field; a medevac flight at
/// emergency priority needs to cross it now. The survey drone is told to vacate, does so in
/// [`VACATE_MS`] and releases; the medevac is granted then, with a higher token.
async fn emergency(
    config: &FlightsConfig,
    airspace: &Arc<Airspace>,
    deadline: Instant,
) -> anyhow::Result<Emergency> {
    let survey = connect(&config.brokers, "survey-1", config.ttl_ms).await?;
    let medevac = connect(&config.brokers, "medevac-1", config.ttl_ms).await?;
    let start_ms = now_ms();
    // A slow pass up and down a line: every leg for the next minute.
    let mut survey_route = straight_route((0.0, 1_000.0), (300.0, 1_000.0), 4, 60.0, start_ms, 1);
    for volume in &mut survey_route {
        (volume.start_ms, volume.end_ms) = (start_ms, start_ms + 60_000);
    }
    let held = survey
        .reserve_route("survey-east", survey_route.clone(), Wait::Try)
        .await
        .context("the survey drone reserves its route")?;
    airspace.granted(held.token(), &survey_route);
    let survey_token = held.token();

    let vacating = {
        let airspace = airspace.clone();
        tokio::spawn(async move {
            let until = tokio::time::sleep_until(deadline);
            let told = tokio::select! {
                told = held.preempted() => told,
                () = until => anyhow::bail!("the survey drone was never told to vacate"),
            };
            let told_at = Instant::now();
            let deadline_ms = told.vacate_by_ms.saturating_sub(now_ms());
            tokio::time::sleep(Duration::from_millis(VACATE_MS)).await;
            airspace.vacated(held.token());
            held.release()
                .await
                .context("the survey drone releases its route")?;
            anyhow::Ok((elapsed_ms(told_at), deadline_ms))
        })
    };

    let medevac_route = straight_route((150.0, 800.0), (150.0, 1_200.0), 5, 40.0, start_ms, 2_000);
    let asked = Instant::now();
    let wait = Wait::AtMost(deadline.saturating_duration_since(Instant::now()));
    let granted: Guard = medevac
        .reserve_route_at("medevac", medevac_route.clone(), wait, Priority::EMERGENCY)
        .await
        .context("the medevac reserves its route")?;
    let wait_ms = elapsed_ms(asked);
    airspace.granted(granted.token(), &medevac_route);
    let (vacate_ms, vacate_deadline_ms) = vacating.await.context("the survey task panicked")??;
    let token_higher = granted.token() > survey_token;
    airspace.vacated(granted.token());
    granted
        .release()
        .await
        .context("the medevac releases its route")?;
    Ok(Emergency {
        vacate_ms,
        vacate_deadline_ms,
        wait_ms,
        token_higher,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker's predicate: a corridor's consecutive flights a flight-length apart do not
    /// overlap, one a leg later does (its legs overlap the first flight's in space and time),
    /// and two corridors never do.
    #[test]
    fn the_checker_sees_overlap_in_space_and_time_only() {
        let first = corridor_route(0, 4, 10_000, 100);
        let next_slot = corridor_route(0, 4, 10_000 + (LEGS as u64 + 1) * 100, 100);
        let one_leg_later = corridor_route(0, 4, 10_100, 100);
        let other_corridor = corridor_route(1, 4, 10_000, 100);
        assert!(!intents_overlap(&first, &next_slot));
        assert!(intents_overlap(&first, &one_leg_later));
        assert!(!intents_overlap(&first, &other_corridor));
    }
}
