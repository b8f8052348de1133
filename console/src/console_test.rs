//! The console over a fake backend: the API's reshaping, its errors, who may write, and the
//! hub's one reader for many pages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hivekeeper_protocol::{
    ErrorCode, HolderInfo, Inspection, LeaseInfo, LeasePage, LockMode, MemberInfo, NodeStatus, Op,
    ReplicationInfo, Request, ResourceInfo, ResourceKind, ResourcePage, Response, Role,
    StatusReport, Success, WaiterInfo,
};
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::*;

/// Answers from a table by op name; records every request with its account.
#[derive(Clone)]
struct Fake {
    answers: Arc<Mutex<HashMap<&'static str, Response>>>,
    asked: Arc<Mutex<Vec<(String, Op)>>>,
    changes: Arc<watch::Sender<u64>>,
    auth: bool,
    calls: Arc<AtomicUsize>,
}

impl Fake {
    fn new(auth: bool) -> Fake {
        Fake {
            answers: Arc::default(),
            asked: Arc::default(),
            changes: Arc::new(watch::channel(0).0),
            auth,
            calls: Arc::default(),
        }
    }

    fn answer(&self, op: &'static str, success: impl Into<Success>) {
        self.answers
            .lock()
            .unwrap()
            .insert(op, Response::ok("x", success));
    }

    fn refuse(&self, op: &'static str, code: ErrorCode) {
        self.answers
            .lock()
            .unwrap()
            .insert(op, Response::error(Some("x".into()), code, "no"));
    }

    fn asked(&self) -> Vec<(String, Op)> {
        self.asked.lock().unwrap().clone()
    }
}

impl ConsoleBackend for Fake {
    async fn call(&self, account: &str, request: Request) -> Response {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let name = request.op.name();
        self.asked
            .lock()
            .unwrap()
            .push((account.to_string(), request.op));
        self.answers
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_else(|| Response::error(None, ErrorCode::UnknownOp, name))
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn unreachable(&self) -> Option<Vec<String>> {
        Some(vec!["n3".into()])
    }

    fn storage(&self) -> Option<Storage> {
        Some(Storage {
            log_bytes: 4_096,
            state_file_bytes: 1_536_000,
        })
    }

    fn auth_enabled(&self) -> bool {
        self.auth
    }

    async fn authenticate(&self, account: &str, secret: &str) -> Option<Role> {
        match (account, secret) {
            ("admin", "s-admin") => Some(Role::Admin),
            ("watcher", "s-watch") => Some(Role::Observer),
            ("drone", "s-drone") => Some(Role::Agent),
            _ => None,
        }
    }
}

fn get(uri: &str) -> hyper::Request<Full<Bytes>> {
    hyper::Request::get(uri).body(Full::default()).unwrap()
}

fn post(uri: &str, body: &str) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post(uri)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn body_json(response: Response_) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

type Response_ = hyper::Response<ConsoleBody>;

fn cookie_of(response: &Response_) -> String {
    let set = response.headers()["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_string()
}

fn with_cookie(
    mut request: hyper::Request<Full<Bytes>>,
    cookie: &str,
) -> hyper::Request<Full<Bytes>> {
    request
        .headers_mut()
        .insert("cookie", cookie.parse().unwrap());
    request
}

fn status(leader: bool) -> StatusReport {
    let member = |id: u64, name: &str| MemberInfo {
        id,
        name: name.into(),
        addr: format!("127.0.0.1:{id}"),
        voter: true,
    };
    StatusReport {
        status: Box::new(NodeStatus {
            node_id: 1,
            term: 3,
            is_leader: leader,
            leader_id: Some(1),
            last_log_index: Some(40),
            committed_index: Some(40),
            applied_index: Some(39),
            snapshot_index: None,
            purged_index: None,
            members: vec![member(1, "n1"), member(2, "n2"), member(3, "n3")],
            replication: Some(vec![
                ReplicationInfo {
                    id: 2,
                    matched_index: Some(38),
                },
                ReplicationInfo {
                    id: 3,
                    matched_index: None,
                },
            ]),
            has_quorum: Some(true),
            quorum_ack_age_ms: Some(12),
            cluster_version: None,
        }),
    }
}

#[tokio::test]
async fn cluster_gives_each_member_its_role_lag_and_reachability() {
    let fake = Fake::new(false);
    fake.answer("admin.status", status(true));
    let console = Console::new(fake.clone(), ConsoleOptions::default());
    let (code, body) = body_json(console.answer(get("/api/v1/cluster")).await).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["term"], 3);
    assert_eq!(body["has_quorum"], true);
    assert_eq!(
        body["member_views"],
        json!([
            {"id": 1, "name": "n1", "addr": "127.0.0.1:1", "role": "leader",
             "matched_index": 40, "lag": 0, "reachable": true},
            {"id": 2, "name": "n2", "addr": "127.0.0.1:2", "role": "follower",
             "matched_index": 38, "lag": 2, "reachable": true},
            {"id": 3, "name": "n3", "addr": "127.0.0.1:3", "role": "follower",
             "lag": 40, "reachable": false},
        ])
    );
    assert_eq!(
        body["storage"],
        json!({"log_bytes": 4_096, "state_file_bytes": 1_536_000})
    );
    assert_eq!(
        fake.asked()[0],
        (ANONYMOUS_ACCOUNT.into(), Op::AdminStatus {})
    );
}

/// A page of `rows`, the last.
fn leases(rows: &[LeaseInfo]) -> LeasePage {
    LeasePage {
        leases: rows.to_vec(),
        next_after: None,
    }
}

fn lease(lease: &str, agent: &str, ttl_ms: u64, remaining_ms: Option<u64>) -> LeaseInfo {
    LeaseInfo {
        lease: lease.into(),
        agent: agent.into(),
        ttl_ms,
        remaining_ms,
    }
}

fn holder(agent: &str, token: u64) -> HolderInfo {
    serde_json::from_value(
        json!({"agent": agent, "lease": format!("L-{agent}"), "token": token,
        "since_ms": 5}),
    )
    .unwrap()
}

fn waiter(agent: &str, position: u32) -> WaiterInfo {
    serde_json::from_value(json!({"agent": agent, "position": position, "since_ms": 6})).unwrap()
}

#[tokio::test]
async fn resources_join_each_row_with_its_holders_and_queue_in_order() {
    let fake = Fake::new(false);
    fake.answer(
        "admin.resources",
        ResourcePage {
            resources: vec![ResourceInfo {
                kind: ResourceKind::Lock,
                name: "pad/1".into(),
                holders: 1,
                waiters: 2,
            }],
            next_after: Some("lock/pad/1".into()),
        },
    );
    fake.answer(
        "inspect",
        Inspection {
            limit: None,
            count: None,
            holders: vec![holder("a", 7)],
            waiters: vec![waiter("b", 1), waiter("c", 2)],
            leaving: None,
            holders_total: None,
            waiters_total: None,
        },
    );
    let console = Console::new(fake.clone(), ConsoleOptions::default());
    let uri = "/api/v1/resources?kind=lock&prefix=pad%2F&after=lock%2Fpad%2F0&limit=5";
    let (code, body) = body_json(console.answer(get(uri)).await).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"resources": [{"kind": "lock", "name": "pad/1",
            "holders": [{"agent": "a", "lease": "L-a", "token": 7, "since_ms": 5}],
            "waiters": [{"agent": "b", "position": 1, "since_ms": 6},
                        {"agent": "c", "position": 2, "since_ms": 6}]}],
          "next_after": "lock/pad/1"})
    );
    let asked = fake.asked();
    assert_eq!(
        asked[0].1,
        Op::AdminResources {
            kind: Some(ResourceKind::Lock),
            prefix: Some("pad/".into()),
            after: Some("lock/pad/0".into()),
            limit: Some(5),
        }
    );
    assert_eq!(
        asked[1].1,
        Op::Inspect {
            kind: ResourceKind::Lock,
            name: "pad/1".into()
        }
    );
    let _ = LockMode::Exclusive;
}

#[tokio::test]
async fn airspace_is_the_waypoints_and_leases_join_their_holdings() {
    let fake = Fake::new(false);
    fake.answer(
        "admin.resources",
        ResourcePage {
            resources: vec![ResourceInfo {
                kind: ResourceKind::Waypoint,
                name: "wp/1".into(),
                holders: 1,
                waiters: 0,
            }],
            next_after: None,
        },
    );
    fake.answer(
        "inspect",
        Inspection {
            limit: None,
            count: None,
            holders: vec![holder("a", 9)],
            waiters: vec![],
            leaving: None,
            holders_total: None,
            waiters_total: None,
        },
    );
    fake.answer(
        "admin.leases",
        leases(&[lease("L-a", "a", 5000, Some(4000))]),
    );
    let console = Console::new(fake.clone(), ConsoleOptions::default());
    let (_, airspace) = body_json(console.answer(get("/api/v1/airspace?all=1")).await).await;
    assert_eq!(airspace["resources"][0]["name"], "wp/1");
    assert!(matches!(
        fake.asked()[0].1,
        Op::AdminResources {
            kind: Some(ResourceKind::Waypoint),
            ..
        }
    ));
    let (code, leases) = body_json(console.answer(get("/api/v1/leases?holdings=1")).await).await;
    assert_eq!(code, StatusCode::OK, "{leases}");
    assert_eq!(leases["leases"][0]["remaining_ms"], 4000);
    assert_eq!(
        leases["holdings"],
        json!({"L-a": [{"kind": "waypoint", "name": "wp/1", "token": 9}]})
    );
}

#[tokio::test]
async fn errors_are_json_with_the_protocols_codes() {
    let fake = Fake::new(false);
    fake.refuse("admin.leases", ErrorCode::Forbidden);
    let console = Console::new(fake, ConsoleOptions::default());
    let (code, body) = body_json(console.answer(get("/api/v1/leases")).await).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        body,
        json!({"error": {"code": "forbidden", "message": "no"}})
    );
    let (code, body) = body_json(console.answer(get("/api/v1/nothing")).await).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "unknown_op");
    let (code, body) = body_json(console.answer(get("/api/v1/keys?limit=x")).await).await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );
    let (code, body) = body_json(console.answer(get("/api/v1/keys?colour=red")).await).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn without_auth_the_console_is_read_only_unless_insecure() {
    let fake = Fake::new(false);
    fake.answer("admin.revoke", hivekeeper_protocol::Done {});
    for (insecure, expected) in [(false, StatusCode::FORBIDDEN), (true, StatusCode::OK)] {
        let options = ConsoleOptions {
            writes_without_auth: insecure,
            ..ConsoleOptions::default()
        };
        let console = Console::new(fake.clone(), options);
        let session = console.answer(get("/api/v1/session")).await;
        let cookie = cookie_of(&session);
        let (_, info) = body_json(session).await;
        assert_eq!(info["can_write"], insecure);
        let csrf = info["csrf"].as_str().unwrap().to_string();
        let mut revoke = with_cookie(post("/api/v1/leases/L-a/revoke", ""), &cookie);
        revoke
            .headers_mut()
            .insert(CSRF_HEADER, csrf.parse().unwrap());
        let (code, body) = body_json(console.answer(revoke).await).await;
        assert_eq!(code, expected, "{body}");
        // Without the CSRF token no write passes, whoever asks.
        let revoke = with_cookie(post("/api/v1/leases/L-a/revoke", ""), &cookie);
        let (code, _) = body_json(console.answer(revoke).await).await;
        assert_eq!(code, StatusCode::FORBIDDEN);
    }
    let revokes = fake
        .asked()
        .into_iter()
        .filter(|(_, op)| matches!(op, Op::AdminRevoke { .. }))
        .count();
    assert_eq!(revokes, 1);
}

#[tokio::test]
async fn with_auth_a_login_opens_a_strict_session_and_only_admins_write() {
    let fake = Fake::new(true);
    fake.answer("admin.leases", leases(&[]));
    fake.answer("admin.revoke", hivekeeper_protocol::Done {});
    let console = Console::new(fake.clone(), ConsoleOptions::default());
    let (code, _) = body_json(console.answer(get("/api/v1/leases")).await).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let bad = post(
        "/api/v1/login",
        r#"{"account": "admin", "secret": "wrong"}"#,
    );
    assert_eq!(console.answer(bad).await.status(), StatusCode::FORBIDDEN);
    let agent = post(
        "/api/v1/login",
        r#"{"account": "drone", "secret": "s-drone"}"#,
    );
    assert_eq!(console.answer(agent).await.status(), StatusCode::FORBIDDEN);

    let mut csrf = HashMap::new();
    let mut cookies = HashMap::new();
    for (account, secret) in [("watcher", "s-watch"), ("admin", "s-admin")] {
        let login = post(
            "/api/v1/login",
            &json!({"account": account, "secret": secret}).to_string(),
        );
        let response = console.answer(login).await;
        let set = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(!set.contains("Secure"), "{set}");
        cookies.insert(account, cookie_of(&response));
        let (_, info) = body_json(response).await;
        assert_eq!(info["can_write"], account == "admin");
        csrf.insert(account, info["csrf"].as_str().unwrap().to_string());
    }
    let leases = with_cookie(get("/api/v1/leases"), &cookies["watcher"]);
    assert_eq!(console.answer(leases).await.status(), StatusCode::OK);
    for (account, expected) in [
        ("watcher", StatusCode::FORBIDDEN),
        ("admin", StatusCode::OK),
    ] {
        let mut revoke = with_cookie(post("/api/v1/leases/L-a/revoke", ""), &cookies[account]);
        revoke
            .headers_mut()
            .insert(CSRF_HEADER, csrf[account].parse().unwrap());
        assert_eq!(console.answer(revoke).await.status(), expected);
    }
    // The requests went out as the logged-in accounts.
    let accounts: Vec<String> = fake
        .asked()
        .into_iter()
        .map(|(account, _)| account)
        .collect();
    assert_eq!(accounts, ["watcher", "admin"]);
    let logout = with_cookie(post("/api/v1/logout", ""), &cookies["admin"]);
    assert_eq!(console.answer(logout).await.status(), StatusCode::OK);
    let after = with_cookie(get("/api/v1/leases"), &cookies["admin"]);
    assert_eq!(
        console.answer(after).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_a_strict_policy() {
    let console = Console::new(Fake::new(false), ConsoleOptions::default());
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ] {
        let response = console.answer(get(path)).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        assert!(response.headers().contains_key("content-security-policy"));
    }
    assert_eq!(
        console.answer(get("/ui/other.js")).await.status(),
        StatusCode::NOT_FOUND
    );
    assert!(Console::<Fake>::serves("/api/v1/cluster") && !Console::<Fake>::serves("/metrics"));
}

/// The next event of an SSE body.
async fn next_event(body: &mut ConsoleBody) -> String {
    loop {
        let frame = body.frame().await.unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            let text = String::from_utf8(data.to_vec()).unwrap();
            if !text.starts_with(':') {
                return text;
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn many_pages_share_one_reader_and_changes_are_coalesced() {
    let fake = Fake::new(false);
    fake.answer("admin.leases", leases(&[]));
    let console = Console::new(fake.clone(), ConsoleOptions::default());
    let mut pages = Vec::new();
    for _ in 0..20 {
        let response = console.answer(get("/api/v1/events?view=leases")).await;
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        pages.push(response.into_body());
    }
    for page in &mut pages {
        let event = next_event(page).await;
        assert!(
            event.starts_with("event: leases\ndata: {\"leases\":[]}"),
            "{event}"
        );
    }
    assert_eq!(
        fake.calls.load(Ordering::SeqCst),
        1,
        "one read for twenty pages"
    );

    // Ten changes within the coalescing window make at most two reads.
    fake.answer("admin.leases", leases(&[lease("L-1", "a", 1000, None)]));
    for tick in 1..=10 {
        fake.changes.send_replace(tick);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for page in &mut pages {
        let event = next_event(page).await;
        assert!(event.contains("L-1"), "{event}");
    }
    tokio::time::sleep(COALESCE * 3).await;
    let calls = fake.calls.load(Ordering::SeqCst);
    assert!((2..=3).contains(&calls), "{calls} reads");
    assert_eq!(console.hub_reads() as usize, calls);

    // Nobody left: the reader stops.
    drop(pages);
    tokio::time::sleep(std::time::Duration::from_secs(20)).await;
    fake.changes.send_replace(99);
    tokio::time::sleep(COALESCE * 3).await;
    assert_eq!(fake.calls.load(Ordering::SeqCst), calls);
}

#[tokio::test(start_paused = true)]
async fn a_read_refused_over_the_rate_is_sent_again() {
    let fake = Fake::new(false);
    fake.refuse("admin.leases", ErrorCode::RateLimited);
    let console = Arc::new(Console::new(fake.clone(), ConsoleOptions::default()));
    let reading = tokio::spawn({
        let console = console.clone();
        async move { body_json(console.answer(get("/api/v1/leases")).await).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    fake.answer("admin.leases", leases(&[]));
    let (code, body) = reading.await.unwrap();
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(fake.calls.load(Ordering::SeqCst) >= 3);
}

#[tokio::test]
async fn a_tile_url_reaches_the_page_and_its_policy_allows_only_that_origin() {
    let options = ConsoleOptions {
        tile_url: Some("https://tiles.example.net:8443/osm/{z}/{x}/{y}.png".into()),
        ..ConsoleOptions::default()
    };
    let console = Console::new(Fake::new(false), options);
    let page = console.answer(get("/ui")).await;
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert_eq!(
        policy,
        "default-src 'self'; img-src 'self' data: https://tiles.example.net:8443; \
         frame-ancestors 'none'"
    );
    let (_, session) = body_json(console.answer(get("/api/v1/session")).await).await;
    assert_eq!(
        session["tile_url"],
        "https://tiles.example.net:8443/osm/{z}/{x}/{y}.png"
    );
}

#[tokio::test]
async fn a_logout_ends_the_pages_event_stream() {
    let fake = Fake::new(true);
    fake.answer("admin.leases", leases(&[]));
    let console = Console::new(fake.clone(), ConsoleOptions::default());
    let login = post(
        "/api/v1/login",
        r#"{"account": "watcher", "secret": "s-watch"}"#,
    );
    let cookie = cookie_of(&console.answer(login).await);
    let events = with_cookie(get("/api/v1/events?view=leases"), &cookie);
    let mut body = console.answer(events).await.into_body();
    assert!(next_event(&mut body).await.starts_with("event: leases"));
    let logout = with_cookie(post("/api/v1/logout", ""), &cookie);
    console.answer(logout).await;
    fake.answer("admin.leases", leases(&[lease("L-2", "b", 1000, None)]));
    fake.changes.send_replace(1);
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame()).await;
    assert!(
        matches!(end, Ok(None)),
        "the stream ends, nothing more is sent"
    );
}
