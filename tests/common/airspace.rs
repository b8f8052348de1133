//! 4D airspace as the end-to-end tests plan it: times on the service's clock, cylinders and
//! routes around one hub, raw pilots and routes, accounts of a node with `--auth`, and a node
//! with other reservation limits (a short vacate deadline, say).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use hivekeeper_agent::protocol::{Area, Volume};
use serde_json::json;

use super::{Node, Raw};

/// The wall clock, UTC ms: the node stamps entries with the same clock.
pub fn now_ms() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    u64::try_from(since_epoch.as_millis()).expect("ms since 1970 fit in u64")
}

/// Latitude of the hub every airspace test flies around (Zurich).
pub const HUB_LAT: f64 = 47.3769;
/// Longitude of the hub.
pub const HUB_LON: f64 = 8.5417;

/// A 25 m cylinder over the hub, from the ground to 120 m.
pub fn hub_area() -> Area {
    Area {
        lat: HUB_LAT,
        lon: HUB_LON,
        radius_m: 25.0,
        alt_min_m: Some(0.0),
        alt_max_m: Some(120.0),
    }
}

/// A 20 m cylinder, ground to 120 m, `north_m` metres north and `east_m` east of the hub, in
/// `[start_ms, end_ms)`.
pub fn volume(north_m: f64, east_m: f64, start_ms: u64, end_ms: u64) -> Volume {
    let m_per_deg = 6_371_008.8 * std::f64::consts::PI / 180.0;
    let lat = HUB_LAT + north_m / m_per_deg;
    Volume {
        lat,
        lon: HUB_LON + east_m / (m_per_deg * lat.to_radians().cos()),
        radius_m: 20.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms,
        end_ms,
    }
}

/// Three legs along a line through the hub, `step_m` apart from `-step_m` (east-west when
/// `east` is true, else north-south), each for `leg_ms` from `start_ms`.
pub fn line(east: bool, step_m: f64, start_ms: u64, leg_ms: u64) -> Vec<Volume> {
    (0..3u64)
        .map(|i| {
            let offset_m = (i as f64 - 1.0) * step_m;
            let (north_m, east_m) = if east {
                (0.0, offset_m)
            } else {
                (offset_m, 0.0)
            };
            let start = start_ms + i * leg_ms;
            volume(north_m, east_m, start, start + leg_ms)
        })
        .collect()
}

/// Reserves route `name` in raw JSON, trying once; it must be granted. Returns its token.
pub async fn try_route(raw: &mut Raw, name: &str, lease: &str, volumes: &[Volume]) -> u64 {
    let reserved = raw
        .call(
            json!({"id": format!("reserve-{name}"), "op": "route.reserve", "name": name,
                     "lease": lease, "volumes": volumes, "wait_ms": 0}),
        )
        .await;
    assert_eq!(reserved["ok"], true, "{reserved}");
    reserved["token"].as_u64().expect("a grant has a token")
}

/// A raw client of a node with `--auth`, logged in as a new account of `role` that the admin
/// adds in raw JSON.
pub async fn account(admin: &mut Raw, port: u16, name: &str, role: &str) -> Raw {
    let added = admin
        .call(
            json!({"id": format!("add-{name}"), "op": "admin.agent.add", "name": name,
                     "role": role}),
        )
        .await;
    let secret = added["secret"].as_str().expect("the new secret, once");
    Raw::connect_with(port, name, Some(secret)).await
}

/// The admin of a node started with `--auth` on `dir`, logged in with the secret the node
/// wrote to `admin.secret`.
async fn admin(dir: &Path, port: u16) -> Raw {
    let secret =
        std::fs::read_to_string(dir.join("admin.secret")).expect("admin.secret is written");
    Raw::connect_with(port, "admin", Some(secret.trim())).await
}

/// A node started with `--auth` on `dir`, its admin, and two accounts of role `agent`,
/// `drone-a` and `drone-b`, each logged in raw with a lease of a minute.
pub struct AuthNode {
    /// The node; killed when this is dropped.
    pub node: Node,
    /// The `admin` account, logged in.
    pub admin: Raw,
    /// `drone-a`, logged in.
    pub a: Raw,
    /// `drone-a`'s lease.
    pub lease_a: String,
    /// `drone-b`, logged in.
    pub b: Raw,
    /// `drone-b`'s lease.
    pub lease_b: String,
}

impl AuthNode {
    /// Starts the node and sets up the accounts and leases.
    pub async fn start(dir: &Path) -> AuthNode {
        let node = Node::start_with_args(dir, &["--auth"]).await;
        let port = node.mqtt_port();
        let mut admin = admin(dir, port).await;
        let mut a = account(&mut admin, port, "drone-a", "agent").await;
        let mut b = account(&mut admin, port, "drone-b", "agent").await;
        let lease_a = a.grant("ga", 60_000).await;
        let lease_b = b.grant("gb", 60_000).await;
        AuthNode {
            node,
            admin,
            a,
            lease_a,
            b,
            lease_b,
        }
    }
}

/// A node with the `[node.limits]` `limits` (name, value) in its config, its config and data
/// in `dir`: a short `reservation_vacate_ms`, say, so that a test can wait for a preempted
/// holder's deadline.
pub async fn node_with_limits(dir: &Path, limits: &[(&str, u64)]) -> Node {
    let config = dir.join("limits.toml");
    let lines: String = limits
        .iter()
        .map(|(name, value)| format!("{name} = {value}\n"))
        .collect();
    std::fs::write(&config, format!("[node.limits]\n{lines}")).expect("write the config");
    let config = config.to_str().expect("a UTF-8 temp path");
    Node::start_with_args(&dir.join("data"), &["--config", config]).await
}

/// A raw client of `agent` with a lease of a minute, subscribed to its own events.
pub async fn pilot(port: u16, agent: &str) -> (Raw, String) {
    let mut raw = Raw::connect(port, agent).await;
    raw.subscribe(&format!("hk/v1/evt/{agent}")).await;
    let lease = raw.grant(&format!("grant-{agent}"), 60_000).await;
    (raw, lease)
}
