//! The drone-fleet example's scenario, small: a few drones, pads and sensors, drones recharging
//! on a bay and a charger taken as one multi-lock, one crash on a pad and one while charging, then
//! the airspace part (routes, an emergency preempting a routine flight), then the formation
//! part (an elected controller, a formation through a barrier), on an in-process node started
//! exactly as the example starts it. Checks that nothing was violated (no bay or charger held by
//! two drones at once among them), that work was done, that the crashed drones' pad and pair
//! were reclaimed and their stale tokens refused, that no two overlapping 4D
//! intents were held at once, that a tower led and another took over with a higher token when
//! the first was taken off duty (whose delayed order was refused), and that the formation took
//! off together in every round, at increasing generations. No timing is asserted beyond the
//! scenario's own bounds.

// The example's scenario module, compiled into this test: the example is a binary, so this is
// how a test reaches its code without running `cargo run --example` (too slow here). The
// command-line-only parts (the progress total, the elapsed times) are not used here.
#[path = "../examples/drone-fleet/charging.rs"]
mod charging;
#[path = "../examples/drone-fleet/controller.rs"]
mod controller;
#[allow(dead_code)]
#[path = "../examples/drone-fleet/crash.rs"]
mod crash;
#[allow(dead_code)]
#[path = "../examples/drone-fleet/fleet.rs"]
mod fleet;
#[allow(dead_code)]
#[path = "../examples/drone-fleet/flights.rs"]
mod flights;
#[allow(dead_code)]
#[path = "../examples/drone-fleet/formation.rs"]
mod formation;
#[path = "../examples/drone-fleet/world.rs"]
mod world;

use std::sync::Arc;

use fleet::{FleetConfig, Progress};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_with_one_crash_and_its_flights_have_no_violation() {
    let (service, _data_dir, addr) = fleet::embedded_node().await.expect("embedded node");
    let config = FleetConfig {
        brokers: vec![addr.clone()],
        drones: 6,
        pads: 3,
        missions_per_drone: 3,
        // Fewer chargers than bays, and both fewer than drones: drones queue for the pairs.
        charging: charging::ChargingConfig {
            bays: 3,
            chargers: 2,
        },
        sensors: 10,
        readings_per_sensor: 3,
        reconfigurers: 2,
        reconfigurations_each: 2,
        gateway_permits: 2,
        // Long enough that a stalled debug build on a busy machine keeps its sessions live,
        // short enough that the crashed lease expires within a few seconds.
        ttl_ms: 3_000,
        keepalive_every_ms: 1_000,
        // drone-0 crashes on its pad, drone-1 while charging.
        crashes: 2,
        duration_s: 60,
    };
    let progress = Arc::new(Progress::default());
    let summary = fleet::run(config, progress.clone())
        .await
        .expect("the fleet runs");
    // Then the airspace part on the same node, as the example runs it (one node per test
    // process: the node's actors have process-wide names).
    let flown = flights::run(flights::FlightsConfig {
        brokers: vec![addr.clone()],
        planners: 4,
        flights_each: 2,
        corridors: 2,
        leg_ms: 100,
        lead_ms: 1_000,
        ttl_ms: 3_000,
        duration_s: 60,
    })
    .await
    .expect("the flights run");
    // Then the formation: three towers, three drones, two rounds (the handover after the first).
    let formed = formation::run(formation::FormationConfig {
        brokers: vec![addr],
        drones: 3,
        rounds: 2,
        towers: 3,
        flight_ms: 100,
        ttl_ms: 3_000,
        duration_s: 60,
    })
    .await
    .expect("the formation runs");
    service.shutdown().await.expect("the node stops");
    eprintln!("{summary:?}");
    eprintln!("{flown:?}");
    eprintln!("{formed:?}");

    assert_eq!(summary.violations(), 0, "{summary:?}");
    assert_eq!(summary.errors, 0, "{:?}", summary.error_samples);
    assert!(!summary.cut_short, "the counts finish well within 60 s");
    // Four healthy drones fly all three missions. drone-0 lands twice (its second landing is
    // the crash) and flies one mission to the end; drone-1 flies two, and crashes plugged in
    // after the second. Every mission flown to the end is followed by a recharge, but that one.
    assert_eq!(summary.missions, 4 * 3 + 1 + 2, "{summary:?}");
    assert_eq!(summary.charging.charges, 4 * 3 + 1 + 1, "{summary:?}");
    assert_eq!(summary.charging.overlaps, 0);
    assert!(summary.charging.wait_us.len() >= summary.charging.charges);

    assert_eq!(summary.readings, 10 * 3);
    assert_eq!(summary.reconfigurations, 2 * 2);
    assert!(summary.gateway_occupancy_max <= 2);
    // Each crash's place went to the ground crew once the lease expired, and refused the
    // rebooted drone's stale token: a pad, and a bay with a charger.
    let mut places: Vec<&str> = summary.reclaims.iter().map(|r| r.place.as_str()).collect();
    places.sort_unstable();
    assert!(
        matches!(places[..], [bay, pad] if bay.starts_with("bay-") && bay.contains(" + charger-") && pad.starts_with("pad-")),
        "{:?}",
        summary.reclaims
    );
    assert!(summary.reclaims.iter().all(|r| r.stale_token_refused));
    assert_eq!(
        summary.fence_rejections, 2,
        "only the stale tokens are refused"
    );
    assert!(progress.done.load(std::sync::atomic::Ordering::Relaxed) > 0);

    // The airspace: four planners on two corridors, two flights each, and the emergency.
    // Nothing overlapping is ever held at once, every flight is flown, corridors are shared in
    // time, and the emergency preempts the survey drone, which vacates, so the medevac is
    // granted with a higher token.
    assert_eq!(flown.overlaps_held, 0, "{flown:?}");
    assert_eq!(flown.errors, 0, "{:?}", flown.error_samples);
    assert!(!flown.cut_short);
    assert_eq!(flown.flights, 4 * 2);
    // Eight grants on two corridors: six of them on a corridor granted before.
    assert_eq!(flown.corridor_shares, 6);
    // Two planners start on each corridor at the same planned time: one of them must move.
    assert!(flown.conflicts_avoided >= 1, "{flown:?}");
    assert_eq!(flown.preemptions, 1);
    assert!(flown.emergency_token_higher);
    assert!(flown.vacate_ms.is_some() && flown.emergency_wait_ms.is_some());

    // The formation: a tower led and ordered the first round; taken off duty after it, the
    // next tower in line led with a higher token and ordered the second; the deposed tower's
    // delayed order was refused. The whole formation took off together in both rounds, through
    // the one barrier, at two increasing generations.
    assert_eq!(formed.violations(), 0, "{formed:?}");
    assert_eq!(formed.errors, 0, "{:?}", formed.error_samples);
    assert!(!formed.cut_short);
    assert_eq!(formed.leaders.len(), 2, "{formed:?}");
    let (first, second) = (&formed.leaders[0], &formed.leaders[1]);
    assert_ne!(first.0, second.0, "another tower took over");
    assert!(second.1 > first.1, "the new leadership's token is higher");
    assert_eq!(formed.deposed.as_ref(), Some(&first.0));
    assert_eq!(formed.stale_orders_refused, 1);
    assert_eq!(formed.orders, 2, "one order per round");
    assert_eq!(formed.rounds_flown, 2);
    assert_eq!(formed.generations.len(), 2);
    assert!(formed.generations[1] > formed.generations[0]);
}
