//! A swarm coordinated by Hivekeeper: 50 drones land on 20 pads and recharge after each
//! mission on a charging bay and a charger taken together as one multi-lock, 200 hive sensors
//! share a LoRaWAN gateway, and every pad, bay, charger and the gateway's configuration check
//! fencing tokens.
//!
//! ```sh
//! cargo run --release --example drone-fleet                 # embedded node, in-process
//! cargo run --release --example drone-fleet -- --chaos      # some drones crash mid-landing or charging
//! cargo run --release --example drone-fleet -- --bays 4 --chargers 2   # a tighter charging rack
//! cargo run --release --example drone-fleet -- --brokers 127.0.0.1:1883   # a running service
//! ```
//!
//! By default it starts a node in-process (the same assembly as `hivekeeper serve`) on a
//! temporary data dir and a free loopback port. It exits non-zero if any pad, bay or charger
//! saw two drones, the gateway more sensors than permits, or a live holder an older token than
//! an earlier one. The scenario itself is in `fleet.rs`, the recharge in `charging.rs`, the
//! crashes in `crash.rs`, the pads, bays, chargers and gateway it protects in `world.rs`.
//!
//! Then the airspace (`flights.rs`): drones plan whole flights hub → pad as 4D routes, share
//! corridors at different times, and an emergency flight preempts a routine one. It exits
//! non-zero if two intents that overlap in space and time were ever held at once.
//!
//! Last the formation (`formation.rs`, `controller.rs`): control towers elect the fleet's
//! controller, which orders each round of a formation flight under its leadership's token; the
//! formation lines up at a barrier and takes off together, round after round. Half-way the
//! leading tower is taken off duty, the next one leads, and the deposed tower's delayed order is
//! refused. It exits non-zero if a drone took off before its whole formation had lined up, or
//! the board accepted an order from a tower that no longer led.
//!
//! ```sh
//! cargo run --release --example drone-fleet -- --formation 8 --formation-rounds 6 --towers 2
//! ```

mod charging;
mod controller;
mod crash;
mod fleet;
mod flights;
mod formation;
mod world;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use charging::{ChargingConfig, ChargingSummary};
use clap::Parser;
use fleet::{FleetConfig, Progress, Summary};
use flights::{FlightsConfig, FlightsSummary};
use formation::{FormationConfig, FormationSummary};

/// The drone-fleet example: drones, pads, hive sensors and a gateway, over MQTT.
#[derive(Debug, Parser)]
struct Args {
    /// Run against a running service (`host:port,...`) instead of an embedded node.
    #[arg(long, value_delimiter = ',')]
    brokers: Option<Vec<String>>,
    /// Crash some drones mid-landing or while charging (keepalives stop, nothing is released)
    /// and show how long their pads, or bays and chargers, take to be reclaimed.
    #[arg(long)]
    chaos: bool,
    /// How many drones crash with --chaos.
    #[arg(long, default_value_t = 5)]
    crashes: usize,
    /// Number of drones.
    #[arg(long, default_value_t = FleetConfig::default().drones)]
    drones: usize,
    /// Number of landing pads (8 m apart).
    #[arg(long, default_value_t = FleetConfig::default().pads)]
    pads: usize,
    /// Missions per drone.
    #[arg(long, default_value_t = FleetConfig::default().missions_per_drone)]
    missions: usize,
    /// Charging bays (locks `bay-N`) the drones recharge on after each mission.
    #[arg(long, default_value_t = ChargingConfig::default().bays)]
    bays: usize,
    /// Chargers (locks `charger-N`), each taken with a bay as one multi-lock.
    #[arg(long, default_value_t = ChargingConfig::default().chargers)]
    chargers: usize,
    /// Number of hive sensors.
    #[arg(long, default_value_t = FleetConfig::default().sensors)]
    sensors: usize,
    /// Readings per sensor.
    #[arg(long, default_value_t = FleetConfig::default().readings_per_sensor)]
    readings: usize,
    /// Drones in the formation that takes off together through a barrier.
    #[arg(long, default_value_t = FormationConfig::default().drones)]
    formation: u32,
    /// Formation flights, one round of the barrier each.
    #[arg(long, default_value_t = FormationConfig::default().rounds)]
    formation_rounds: u32,
    /// Control towers campaigning for the controller role.
    #[arg(long, default_value_t = FormationConfig::default().towers)]
    towers: usize,
    /// Upper bound of each part of the run, seconds.
    #[arg(long, default_value_t = FleetConfig::default().duration_s)]
    duration_s: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let args = Args::parse();
    let mut config = FleetConfig {
        drones: args.drones,
        pads: args.pads,
        missions_per_drone: args.missions,
        charging: ChargingConfig {
            bays: args.bays,
            chargers: args.chargers,
        },
        sensors: args.sensors,
        readings_per_sensor: args.readings,
        crashes: if args.chaos { args.crashes } else { 0 },
        duration_s: args.duration_s,
        ..FleetConfig::default()
    };
    let embedded = match args.brokers {
        Some(brokers) => {
            println!("console: the service's HTTP port, /ui (docs/HTTP.md)");
            config.brokers = brokers;
            None
        }
        None => {
            let (service, data_dir, addr) = fleet::embedded_node().await?;
            println!(
                "embedded node: MQTT on {addr}, data in {}",
                data_dir.path().display()
            );
            println!(
                "console: {} (live while the fleet flies)",
                fleet::console(&service, data_dir.path()).await?
            );
            config.brokers = vec![addr];
            Some((service, data_dir))
        }
    };

    let progress = Arc::new(Progress::default());
    let bar = indicatif::ProgressBar::new(Progress::total(&config));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed:>3} [{bar:40}] {pos}/{len} landings + recharges + readings",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let ticker = {
        let (bar, progress) = (bar.clone(), progress.clone());
        tokio::spawn(async move {
            loop {
                bar.set_position(progress.done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let flights_config = FlightsConfig {
        brokers: config.brokers.clone(),
        duration_s: args.duration_s,
        ..FlightsConfig::default()
    };
    let formation_config = FormationConfig {
        brokers: config.brokers.clone(),
        drones: args.formation,
        rounds: args.formation_rounds,
        towers: args.towers,
        duration_s: args.duration_s,
        ..FormationConfig::default()
    };
    let summary = fleet::run(config, progress.clone()).await;
    ticker.abort();
    bar.set_position(progress.done.load(Ordering::Relaxed));
    bar.finish();
    let violations = match summary {
        Ok(summary) => {
            print_summary(&summary);
            airspace_and_formation(flights_config, formation_config)
                .await
                .map(|violations| violations + summary.violations())
        }
        Err(error) => Err(error),
    };
    if let Some((service, _data_dir)) = embedded {
        service.shutdown().await?;
    }
    let violations = violations?;
    Ok(if violations == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("drone-fleet: {violations} violations");
        std::process::ExitCode::FAILURE
    })
}

/// The airspace part, then the formation part, each summary printed when its part ends;
/// returns their violations.
async fn airspace_and_formation(
    flights: FlightsConfig,
    formation: FormationConfig,
) -> anyhow::Result<u64> {
    let flown = flights::run(flights).await?;
    print_flights(&flown);
    let formed = formation::run(formation).await?;
    print_formation(&formed);
    Ok(flown.overlaps_held + formed.violations())
}

fn print_formation(formed: &FormationSummary) {
    let rows: Vec<(&str, String)> = vec![
        (
            "rounds flown by the whole formation",
            formed.rounds_flown.to_string(),
        ),
        ("controllers in turn", formed.leaders.len().to_string()),
        (
            "orders (each fenced by its leader's token)",
            formed.orders.to_string(),
        ),
        (
            "taken off duty",
            formed.deposed.clone().unwrap_or_else(|| "-".to_string()),
        ),
        (
            "stale orders refused",
            formed.stale_orders_refused.to_string(),
        ),
        (
            "early take-offs or leaves, split rounds",
            formed.barrier_violations.to_string(),
        ),
        (
            "orders accepted out of token order",
            formed.fencing_violations.to_string(),
        ),
        ("errors", formed.errors.to_string()),
        ("elapsed", elapsed(formed.elapsed, formed.cut_short)),
    ];
    print_table("formation", rows);
    let leaders: Vec<String> = formed
        .leaders
        .iter()
        .map(|(tower, token)| format!("{tower} (token {token})"))
        .collect();
    println!("  controllers: {}", leaders.join(", then "));
    for (round, generation) in (1..).zip(&formed.generations) {
        println!("  round {round} took off at generation {generation}");
    }
    for sample in &formed.error_samples {
        println!("  error: {sample}");
    }
}

fn print_flights(flown: &FlightsSummary) {
    let ms = |value: Option<u64>| value.map_or_else(|| "-".to_string(), |ms| format!("{ms} ms"));
    let rows: Vec<(&str, String)> = vec![
        (
            "routes flown (hub to pad, one intent each)",
            flown.flights.to_string(),
        ),
        (
            "conflicts avoided (moved to a later slot)",
            flown.conflicts_avoided.to_string(),
        ),
        (
            "corridors shared at other times",
            flown.corridor_shares.to_string(),
        ),
        (
            "preemptions (emergency over routine)",
            flown.preemptions.to_string(),
        ),
        ("vacate time (told to released)", ms(flown.vacate_ms)),
        ("vacate deadline given", ms(flown.vacate_deadline_ms)),
        ("emergency route granted after", ms(flown.emergency_wait_ms)),
        (
            "emergency token above the preempted",
            if flown.emergency_token_higher {
                "yes"
            } else {
                "NO"
            }
            .to_string(),
        ),
        (
            "overlapping intents held at once",
            flown.overlaps_held.to_string(),
        ),
        ("errors", flown.errors.to_string()),
        ("elapsed", elapsed(flown.elapsed, flown.cut_short)),
    ];
    print_table("airspace", rows);
    for sample in &flown.error_samples {
        println!("  error: {sample}");
    }
}

/// A part's summary after the fleet's: a blank line, its title, then a row per figure.
fn print_table(title: &str, rows: Vec<(&str, String)>) {
    println!();
    println!("{title}");
    for (what, value) in rows {
        println!("{what:<44} {value:>12}");
    }
}

/// The run's length, and whether `--duration-s` cut it short.
fn elapsed(elapsed: Duration, cut_short: bool) -> String {
    let cut = if cut_short {
        " (cut short by --duration-s)"
    } else {
        ""
    };
    format!("{:.1} s{cut}", elapsed.as_secs_f64())
}

/// A histogram of waits in µs as its median and 99th percentile in ms.
fn p50_p99(wait_us: &hdrhistogram::Histogram<u64>) -> String {
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
    format!(
        "{} / {}",
        ms(wait_us.value_at_quantile(0.5)),
        ms(wait_us.value_at_quantile(0.99))
    )
}

fn print_summary(summary: &Summary) {
    let rows: Vec<(&str, String)> = vec![
        ("missions flown", summary.missions.to_string()),
        ("landings", summary.landings.to_string()),
        (
            "reservation wait p50 / p99",
            p50_p99(&summary.reservation_wait_us),
        ),
        ("contentions (would_block)", summary.contentions.to_string()),
        ("pad handovers", summary.handovers.to_string()),
        ("gateway readings", summary.readings.to_string()),
        (
            "gateway occupancy max",
            summary.gateway_occupancy_max.to_string(),
        ),
        (
            "gateway reconfigurations",
            summary.reconfigurations.to_string(),
        ),
        (
            "crashed leases expired, places reclaimed",
            summary.reclaims.len().to_string(),
        ),
        ("fence rejections", summary.fence_rejections.to_string()),
        ("double occupancy", summary.double_occupancy.to_string()),
        (
            "mutual-exclusion violations",
            summary.mutual_exclusion_violations.to_string(),
        ),
        ("errors", summary.errors.to_string()),
        ("elapsed", elapsed(summary.elapsed, summary.cut_short)),
    ];
    println!();
    for (what, value) in rows {
        println!("{what:<40} {value:>16}");
    }
    for reclaim in &summary.reclaims {
        println!(
            "  {} crashed at {}: reclaimed after {} ms; its stale token {}",
            reclaim.drone,
            reclaim.place,
            reclaim.reclaim_ms,
            if reclaim.stale_token_refused {
                "was refused"
            } else {
                "WAS ACCEPTED"
            }
        );
    }
    for sample in &summary.error_samples {
        println!("  error: {sample}");
    }
    print_charging(&summary.charging);
}

fn print_charging(charging: &ChargingSummary) {
    let rows: Vec<(&str, String)> = vec![
        (
            "recharges (bay + charger, one multi-lock)",
            charging.charges.to_string(),
        ),
        ("wait for the pair p50 / p99", p50_p99(&charging.wait_us)),
        (
            "bays or chargers held by two at once",
            charging.overlaps.to_string(),
        ),
    ];
    print_table("charging", rows);
}
