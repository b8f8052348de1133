//! The drone-fleet example's scenario, small: a few drones, pads and sensors, one crash, on an
//! in-process node started exactly as the example starts it. Checks that nothing was violated,
//! that work was done, and that the crashed drone's pad was reclaimed and its stale token
//! refused. No timing is asserted beyond the scenario's own bounds.

// The example's scenario module, compiled into this test: the example is a binary, so this is
// how a test reaches its code without running `cargo run --example` (too slow here). The
// command-line-only parts (the progress total) are not used here.
#[allow(dead_code)]
#[path = "../examples/drone-fleet/fleet.rs"]
mod fleet;

use std::sync::Arc;

use fleet::{FleetConfig, Progress};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_with_one_crash_has_no_violation_and_reclaims_the_pad() {
    let (service, _data_dir, addr) = fleet::embedded_node().await.expect("embedded node");
    let config = FleetConfig {
        brokers: vec![addr],
        drones: 6,
        pads: 3,
        missions_per_drone: 3,
        sensors: 10,
        readings_per_sensor: 3,
        reconfigurers: 2,
        reconfigurations_each: 2,
        gateway_permits: 2,
        // Long enough that a stalled debug build on a busy machine keeps its sessions live,
        // short enough that the crashed lease expires within a few seconds.
        ttl_ms: 3_000,
        keepalive_every_ms: 1_000,
        crashes: 1,
        duration_s: 60,
    };
    let progress = Arc::new(Progress::default());
    let summary = fleet::run(config, progress.clone())
        .await
        .expect("the fleet runs");
    service.shutdown().await.expect("the node stops");
    eprintln!("{summary:?}");

    assert_eq!(summary.violations(), 0, "{summary:?}");
    assert_eq!(summary.errors, 0, "{:?}", summary.error_samples);
    assert!(!summary.cut_short, "the counts finish well within 60 s");
    // Five healthy drones fly all three missions; the crashing one lands twice (its second
    // landing is the crash) and flies one mission to the end.
    assert_eq!(summary.missions, 5 * 3 + 1, "{summary:?}");

    assert_eq!(summary.readings, 10 * 3);
    assert_eq!(summary.reconfigurations, 2 * 2);
    assert!(summary.gateway_occupancy_max <= 2);
    assert_eq!(summary.reclaims.len(), 1, "{:?}", summary.reclaims);
    assert!(summary.reclaims[0].stale_token_refused);
    assert_eq!(
        summary.fence_rejections, 1,
        "only the stale token is refused"
    );
    assert!(progress.done.load(std::sync::atomic::Ordering::Relaxed) > 0);
}
