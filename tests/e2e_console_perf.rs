//! The web console's performance targets, measured, not asserted (every test is ignored: run
//! them one at a time on a quiet machine and read the figures they print):
//!
//! - 10,000 held volumes: the airspace view draws in ≤ 1 s in headless Chromium;
//! - changes at 10 a second reach the page within 500 ms;
//! - 20 open consoles add ≤ 5% of one core to the member serving them.
//!
//! ```sh
//! # not run by the doc test: measurements, a minute each
//! cargo test --test e2e_console_perf -- --ignored --nocapture --test-threads 1
//! ```

mod common;
mod console_browser;

use std::time::Duration;

use common::airspace::{now_ms, pilot, try_route, volume};
use common::{Node, metric, metrics_text};
use console_browser::Browser;
use hivekeeper_protocol::Volume;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Volumes per route: 40 volumes keep a `route.reserve` under the request size bound.
const VOLUMES_PER_ROUTE: usize = 40;

/// The grid cell `i` of a 100 × 100 grid of 20 m cylinders 50 m apart around the hub.
fn cell(i: usize, start_ms: u64, end_ms: u64) -> Volume {
    let (row, column) = ((i / 100) as f64, (i % 100) as f64);
    volume(
        (row - 50.0) * 50.0,
        (column - 50.0) * 50.0,
        start_ms,
        end_ms,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it alone and read its figures"]
async fn ten_thousand_volumes_draw_in_headless_chromium() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let (mut raw, lease) = pilot(node.mqtt_port(), "surveyor").await;
    let (start, end) = (now_ms(), now_ms() + 3_600_000);
    for route in 0..10_000 / VOLUMES_PER_ROUTE {
        let volumes: Vec<Volume> = (0..VOLUMES_PER_ROUTE)
            .map(|leg| cell(route * VOLUMES_PER_ROUTE + leg, start, end))
            .collect();
        try_route(&mut raw, &format!("grid-{route:03}"), &lease, &volumes).await;
    }
    let browser = Browser::start(1200, 900).await;
    let opened = std::time::Instant::now();
    browser.load(node.metrics_port).await;
    let count = "return document.getElementById('map').dataset.count;";
    browser
        .until(count, &json!("10000"), Duration::from_secs(60))
        .await;
    let shown = opened.elapsed();
    let first_draw = browser
        .eval("return document.getElementById('map').dataset.drawMs;")
        .await;
    // A redraw alone (the time slider moved): the canvas work without the read.
    let mut redraws = Vec::new();
    for step in 1..=5 {
        let ms = browser
            .eval(&format!(
                "const slider = document.getElementById('time-slider');
                 slider.value = {step};
                 slider.dispatchEvent(new Event('input'));
                 return Number(document.getElementById('map').dataset.drawMs);"
            ))
            .await;
        redraws.push(ms);
    }
    browser.assert_no_errors().await;
    eprintln!(
        "10,000 volumes: on screen {shown:?} after opening the page (read, JSON, draw); the \
         first draw took {first_draw} ms, redraws {redraws:?} ms"
    );
    browser.close().await;
}

/// Records, in the page, when each reservation name first appears on the map.
const RECORD_APPEARANCES: &str = "
    window.__appeared = {};
    const map = document.getElementById('map');
    new MutationObserver(() => {
        for (const name of map.dataset.drawn.split(',')) {
            if (name && !(name in window.__appeared)) window.__appeared[name] = Date.now();
        }
    }).observe(map, {attributes: true, attributeFilter: ['data-drawn']});
    return true;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it alone and read its figures"]
async fn changes_at_ten_a_second_reach_the_page() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let (mut raw, lease) = pilot(node.mqtt_port(), "tracer").await;
    let browser = Browser::start(1200, 900).await;
    browser.open(node.metrics_port, "airspace").await;
    browser.eval(RECORD_APPEARANCES).await;
    let mut answered = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let (start, end) = (now_ms(), now_ms() + 3_600_000);
    for i in 0..100 {
        tick.tick().await;
        let name = format!("dot-{i:03}");
        try_route(&mut raw, &name, &lease, &[cell(i, start, end)]).await;
        answered.push((name, now_ms()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let appeared = browser.eval("return window.__appeared;").await;
    let mut delays: Vec<i64> = answered
        .iter()
        .map(
            |(name, at)| match appeared.get(name).and_then(Value::as_i64) {
                Some(seen) => seen - *at as i64,
                None => i64::MAX,
            },
        )
        .collect();
    delays.sort_unstable();
    let quantile = |q: f64| delays[((delays.len() - 1) as f64 * q) as usize];
    eprintln!(
        "100 changes at 10/s: from the MQTT answer to the page's map, median {} ms, p95 {} ms, \
         max {} ms",
        quantile(0.5),
        quantile(0.95),
        quantile(1.0)
    );
    browser.assert_no_errors().await;
    browser.close().await;
}

/// One console's stream of `view` on `port`, read and dropped as it comes, until aborted.
async fn stream(port: u16, query: &str) {
    let mut connection = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the HTTP port");
    let request = format!("GET /api/v1/events?{query} HTTP/1.1\r\nHost: console\r\n\r\n");
    connection
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut buffer = vec![0u8; 64 * 1024];
    while connection.read(&mut buffer).await.is_ok_and(|n| n > 0) {}
}

/// The node's CPU seconds over `window` while a pilot makes 10 changes a second, its
/// reservations named `{run}-N` on the grid's cells from `first_cell`.
async fn cpu_under_load(
    node: &Node,
    raw: &mut common::Raw,
    lease: &str,
    (run, first_cell): (&str, usize),
    window: Duration,
) -> f64 {
    let cpu = || async {
        let text = metrics_text(node.metrics_port).await.expect("a scrape");
        metric(&text, "process_cpu_seconds_total").expect("the process's CPU")
    };
    let before = cpu().await;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let (start, end) = (now_ms(), now_ms() + 3_600_000);
    let mut i = 0;
    while started.elapsed() < window {
        tick.tick().await;
        let name = format!("{run}-{i}");
        try_route(
            raw,
            &name,
            lease,
            &[cell((first_cell + i) % 10_000, start, end)],
        )
        .await;
        if i >= 20 {
            let old = format!("{run}-{}", i - 20);
            let released = raw
                .call(
                    json!({"id": format!("free-{old}"), "op": "route.release", "name": old,
                             "lease": lease}),
                )
                .await;
            assert_eq!(released["ok"], true, "{released}");
        }
        i += 1;
    }
    cpu().await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it alone and read its figures"]
async fn twenty_consoles_cost_the_member_little() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let (mut raw, _) = pilot(node.mqtt_port(), "loader").await;
    // An hour's lease: the raw client sends no keepalives over the three windows.
    let lease = raw.grant("long", 3_600_000).await;
    let window = Duration::from_secs(20);
    let alone = cpu_under_load(&node, &mut raw, &lease, ("alone", 0), window).await;
    let seconds = window.as_secs_f64();
    let share = |cpu: f64| 100.0 * cpu / seconds;
    eprintln!(
        "10 changes/s for {seconds} s, no console: {:.1}% of a core",
        share(alone)
    );
    for (consoles, first_cell) in [(1, 3_000), (20, 6_000)] {
        let streams: Vec<_> = (0..consoles)
            .flat_map(|_| ["view=airspace&all=1", "view=cluster"])
            .map(|query| tokio::spawn(stream(node.metrics_port, query)))
            .collect();
        let run = (format!("watched{consoles}"), first_cell);
        let watched = cpu_under_load(&node, &mut raw, &lease, (&run.0, run.1), window).await;
        for stream in streams {
            stream.abort();
        }
        eprintln!(
            "  with {consoles} console(s) on the airspace and cluster views: {:.1}% (+{:.1}% of \
             a core)",
            share(watched),
            share(watched - alone)
        );
    }
}
