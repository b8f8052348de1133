//! Criterion benchmarks of what a request costs in JSON before and after the machine: the wire
//! decode (`hivekeeper_protocol::Request::decode`, with its validation) of the payload an agent
//! sends, and the Raft log entry's encode and decode (`Command` as JSON, which every member
//! writes or reads). A waypoint reserve against a 12-volume route reserve, so the part of a
//! route's extra latency over MQTT that is JSON can be read off (the target is a route reserve
//! within 20% of a waypoint reserve; docs/BENCHMARKS.md).
//!
//! Run: `cargo bench -p hivekeeper-state-machine --bench codec -- --warm-up-time 1
//! --measurement-time 3`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hivekeeper_protocol::Request;
use hivekeeper_state_machine::{AgentRequest, Command};

/// A waypoint reserve as `hivekeeper bench uncontended --resource waypoint` sends it.
fn waypoint_payload() -> String {
    r#"{"id":"b-12345-678","op":"waypoint.reserve","name":"agent-0042-pad","lease":"00000000000000a1","lat":47.3769,"lon":8.5417,"radius_m":10.0}"#
        .to_string()
}

/// A 12-volume route reserve, 50 m legs of a minute each, as `--resource route` sends it.
fn route_payload() -> String {
    let volumes: Vec<String> = (0..12u64)
        .map(|leg| {
            let lat = 47.3769 + leg as f64 * 0.00045;
            let start_ms = 1_764_503_600_000 + leg * 60_000;
            format!(
                r#"{{"lat":{lat},"lon":8.5417,"radius_m":20.0,"alt_min_m":0.0,"alt_max_m":120.0,"start_ms":{start_ms},"end_ms":{}}}"#,
                start_ms + 60_000
            )
        })
        .collect();
    format!(
        r#"{{"id":"b-12345-678","op":"route.reserve","name":"agent-0042-route","lease":"00000000000000a1","volumes":[{}]}}"#,
        volumes.join(",")
    )
}

fn codec(c: &mut Criterion) {
    for (kind, payload) in [("waypoint", waypoint_payload()), ("route", route_payload())] {
        let bytes = payload.as_bytes();
        Request::decode(bytes).expect("a valid request");
        c.bench_function(&format!("wire_decode_{kind}"), |b| {
            b.iter(|| black_box(Request::decode(black_box(bytes)).expect("valid")))
        });
        let request: AgentRequest = serde_json::from_slice(bytes).expect("a machine request");
        let command = Command::Request {
            agent: "agent-0042".into(),
            request,
        };
        let entry = serde_json::to_vec(&command).expect("serializes");
        c.bench_function(&format!("log_encode_{kind}"), |b| {
            b.iter(|| black_box(serde_json::to_vec(black_box(&command)).expect("serializes")))
        });
        c.bench_function(&format!("log_decode_{kind}"), |b| {
            b.iter(|| {
                let decoded: Command = serde_json::from_slice(black_box(&entry)).expect("decodes");
                black_box(decoded)
            })
        });
    }
}

criterion_group!(benches, codec);
criterion_main!(benches);
