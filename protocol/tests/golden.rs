//! Golden tests for wire protocol v1: literal JSON in, exact values out.
//!
//! Every op, every error code, every success shape, every event and the topic layout are pinned
//! here against literal JSON, so that a change to the serde attributes, a renamed field or a new
//! default shows up as a failing test instead of a silent wire break. Values are compared as
//! `serde_json::Value` (key order is not part of the protocol); messages written by this crate
//! are compared exactly, messages that come from serde itself are checked for the field they
//! name.

use hivekeeper_protocol::kv::{
    Compare, CompareOp, CompareTarget, Deleted, EventKind, Get, Holder, KeySelector, KvEvent, Put,
    PutResult, RangePage, TxnOp, TxnResult, WatchPage,
};
use hivekeeper_protocol::validate::{
    AGENT_ID_BYTES_MAX, LOCK_NAMES_MAX, NAME_BYTES_MAX, REQUEST_BYTES_MAX, REQUEST_ID_BYTES_MAX,
    SEM_LIMIT_MAX, WAIT_MS_MAX,
};
use hivekeeper_protocol::{
    AccountInfo, AccountIssued, AccountPage, Area, BarrierPassed, ConflictInfo, ConflictPage, Done,
    ErrorBody, ErrorCode, Event, FenceStatus, Granted, HolderInfo, Inspection, LeaderInfo,
    LeaderReport, LeaseGranted, LeaseInfo, LeaseKept, LeasePage, LostReason, MemberInfo,
    NodeStatus, Op, Priority, ProtocolError, QueryVolume, ReplicationInfo, Request,
    ReservationKind, ResourceInfo, ResourceKind, ResourcePage, Response, Role, SnapshotPage,
    StatusReport, Success, Topics, Volume, WaiterInfo,
};
use hivekeeper_protocol::{KeyValue, KvDeleted, KvPage, KvPutDone, KvTxnDone, LockMode};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Parses bytes produced by an `encode()` as JSON.
fn to_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("encode() must produce valid JSON")
}

/// Decodes a literal request that must be accepted.
fn decode_ok(wire: &str) -> Request {
    match Request::decode(wire.as_bytes()) {
        Ok(request) => request,
        Err(e) => panic!("{wire} was rejected: {e}"),
    }
}

/// Decodes a literal request that must be rejected.
fn decode_err(wire: &[u8]) -> ProtocolError {
    match Request::decode(wire) {
        Ok(request) => panic!(
            "{} was accepted as {request:?}",
            String::from_utf8_lossy(wire)
        ),
        Err(e) => e,
    }
}

/// The golden check for one request: `wire` decodes to `expected`, `expected` encodes to
/// `encoded`, and `encoded` decodes back to `expected` (also through the `Deserialize` impl the
/// Raft log uses).
fn assert_request(wire: &str, expected: &Request, encoded: &Value) {
    assert_eq!(&decode_ok(wire), expected, "decoding {wire}");
    assert_eq!(
        &to_json(&expected.encode()),
        encoded,
        "encoding {expected:?}"
    );
    let reencoded = serde_json::to_vec(encoded).expect("a Value serializes");
    assert_eq!(
        &decode_ok(std::str::from_utf8(&reencoded).expect("utf-8")),
        expected
    );
    let via_serde: Request = serde_json::from_value(encoded.clone()).expect("Deserialize");
    assert_eq!(&via_serde, expected);
    assert_eq!(encoded["op"], json!(expected.op.name()));
}

fn req(id: &str, op: Op) -> Request {
    Request {
        id: id.to_string(),
        op,
    }
}

/// The failure response for a decoder error must be exactly this JSON.
fn assert_error_response(err: &ProtocolError) {
    let id = match &err.id {
        Some(id) => json!(id),
        None => Value::Null,
    };
    assert_eq!(
        to_json(&err.to_response().encode()),
        json!({
            "id": id,
            "ok": false,
            "error": {"code": err.code.as_str(), "message": err.message},
        })
    );
}

/// `wire` is rejected with exactly this id, code and message.
fn assert_rejected(wire: &[u8], id: Option<&str>, code: ErrorCode, message: &str) {
    let err = decode_err(wire);
    assert_eq!(
        (err.id.as_deref(), err.code, err.message.as_str()),
        (id, code, message),
        "{}",
        String::from_utf8_lossy(wire)
    );
    assert_error_response(&err);
}

/// `wire` is rejected as `bad_request` with this id, and a message that starts with
/// `prefix` and mentions every fragment (for messages worded by serde).
fn assert_bad_request_mentions(wire: &str, id: Option<&str>, prefix: &str, fragments: &[&str]) {
    let err = decode_err(wire.as_bytes());
    assert_eq!(err.id.as_deref(), id, "{wire}");
    assert_eq!(err.code, ErrorCode::BadRequest, "{wire}");
    assert!(
        err.message.starts_with(prefix),
        "{wire}: message {:?} does not start with {prefix:?}",
        err.message
    );
    for fragment in fragments {
        assert!(
            err.message.contains(fragment),
            "{wire}: message {:?} does not mention {fragment:?}",
            err.message
        );
    }
    assert_error_response(&err);
}

fn bad(wire: &str, id: Option<&str>, message: &str) {
    assert_rejected(wire.as_bytes(), id, ErrorCode::BadRequest, message);
}

// ---------------------------------------------------------------------------------------------
// One test per op
// ---------------------------------------------------------------------------------------------

#[test]
fn op_lease_grant() {
    assert_request(
        r#"{"id":"r1","op":"lease.grant","ttl_ms":5000}"#,
        &req(
            "r1",
            Op::LeaseGrant {
                ttl_ms: 5000,
                lock_delay_ms: 0,
            },
        ),
        &json!({"id": "r1", "op": "lease.grant", "ttl_ms": 5000}),
    );
    // A lock-delay; 0, the default, is left out when encoded.
    assert_request(
        r#"{"id":"r1","op":"lease.grant","ttl_ms":5000,"lock_delay_ms":15000}"#,
        &req(
            "r1",
            Op::LeaseGrant {
                ttl_ms: 5000,
                lock_delay_ms: 15_000,
            },
        ),
        &json!({"id": "r1", "op": "lease.grant", "ttl_ms": 5000, "lock_delay_ms": 15000}),
    );
    assert_eq!(
        decode_ok(r#"{"id":"r1","op":"lease.grant","ttl_ms":5000,"lock_delay_ms":0}"#).encode(),
        br#"{"id":"r1","op":"lease.grant","ttl_ms":5000}"#.to_vec()
    );
}

#[test]
fn op_lease_keepalive() {
    assert_request(
        r#"{"id":"r2","op":"lease.keepalive","lease":"L-17"}"#,
        &req(
            "r2",
            Op::LeaseKeepalive {
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r2", "op": "lease.keepalive", "lease": "L-17"}),
    );
}

#[test]
fn op_lease_revoke() {
    assert_request(
        r#"{"id":"r3","op":"lease.revoke","lease":"L-17"}"#,
        &req(
            "r3",
            Op::LeaseRevoke {
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r3", "op": "lease.revoke", "lease": "L-17"}),
    );
}

#[test]
fn op_lock_acquire() {
    // wait_ms absent: wait while the lease lives; not sent back either.
    assert_request(
        r#"{"id":"r4","op":"lock.acquire","name":"gateway/config","lease":"L-17"}"#,
        &req(
            "r4",
            Op::LockAcquire {
                name: "gateway/config".into(),
                lease: "L-17".into(),
                wait_ms: None,
                max_hold_ms: None,
                mode: LockMode::Exclusive,
            },
        ),
        &json!({"id": "r4", "op": "lock.acquire", "name": "gateway/config", "lease": "L-17"}),
    );
    // wait_ms 0: try once.
    assert_request(
        r#"{"id":"r5","op":"lock.acquire","name":"door","lease":"L-17","wait_ms":0}"#,
        &req(
            "r5",
            Op::LockAcquire {
                name: "door".into(),
                lease: "L-17".into(),
                wait_ms: Some(0),
                max_hold_ms: None,
                mode: LockMode::Exclusive,
            },
        ),
        &json!({"id": "r5", "op": "lock.acquire", "name": "door", "lease": "L-17", "wait_ms": 0}),
    );
    // wait_ms n, up to one day.
    assert_request(
        r#"{"id":"r6","op":"lock.acquire","name":"door","lease":"L-17","wait_ms":86400000}"#,
        &req(
            "r6",
            Op::LockAcquire {
                name: "door".into(),
                lease: "L-17".into(),
                wait_ms: Some(WAIT_MS_MAX),
                max_hold_ms: None,
                mode: LockMode::Exclusive,
            },
        ),
        &json!({"id": "r6", "op": "lock.acquire", "name": "door", "lease": "L-17",
                "wait_ms": 86_400_000}),
    );
    // max_hold_ms: the hold ends this long after its grant.
    assert_request(
        r#"{"id":"r6","op":"lock.acquire","name":"door","lease":"L-17","max_hold_ms":30000}"#,
        &req(
            "r6",
            Op::LockAcquire {
                name: "door".into(),
                lease: "L-17".into(),
                wait_ms: None,
                max_hold_ms: Some(30_000),
                mode: LockMode::Exclusive,
            },
        ),
        &json!({"id": "r6", "op": "lock.acquire", "name": "door", "lease": "L-17",
                "max_hold_ms": 30_000}),
    );
    // An explicit null is read as absent.
    assert_eq!(
        decode_ok(r#"{"id":"r7","op":"lock.acquire","name":"door","lease":"L","wait_ms":null}"#),
        req(
            "r7",
            Op::LockAcquire {
                name: "door".into(),
                lease: "L".into(),
                wait_ms: None,
                max_hold_ms: None,
                mode: LockMode::Exclusive,
            },
        )
    );
}

#[test]
fn op_lock_release() {
    assert_request(
        r#"{"id":"r8","op":"lock.release","name":"door","lease":"L-17"}"#,
        &req(
            "r8",
            Op::LockRelease {
                name: "door".into(),
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r8", "op": "lock.release", "name": "door", "lease": "L-17"}),
    );
}

/// `mode` is `exclusive` by default and then never sent; `shared` is sent.
#[test]
fn op_lock_acquire_with_a_mode() {
    assert_request(
        r#"{"id":"r8s","op":"lock.acquire","name":"db","lease":"L-17","mode":"shared"}"#,
        &req(
            "r8s",
            Op::LockAcquire {
                name: "db".into(),
                lease: "L-17".into(),
                wait_ms: None,
                max_hold_ms: None,
                mode: LockMode::Shared,
            },
        ),
        &json!({"id": "r8s", "op": "lock.acquire", "name": "db", "lease": "L-17",
                "mode": "shared"}),
    );
    // A shared hold with a max-hold: `max_hold_ms` is written before `mode`.
    assert_request(
        r#"{"id":"r8t","op":"lock.acquire","name":"db","lease":"L-17","wait_ms":100,"max_hold_ms":30000,"mode":"shared"}"#,
        &req(
            "r8t",
            Op::LockAcquire {
                name: "db".into(),
                lease: "L-17".into(),
                wait_ms: Some(100),
                max_hold_ms: Some(30_000),
                mode: LockMode::Shared,
            },
        ),
        &json!({"id": "r8t", "op": "lock.acquire", "name": "db", "lease": "L-17",
                "wait_ms": 100, "max_hold_ms": 30_000, "mode": "shared"}),
    );
    assert_eq!(
        decode_ok(
            r#"{"id":"r8t","op":"lock.acquire","name":"db","lease":"L-17","mode":"shared","max_hold_ms":30000,"wait_ms":100}"#
        )
        .encode(),
        br#"{"id":"r8t","op":"lock.acquire","name":"db","lease":"L-17","wait_ms":100,"max_hold_ms":30000,"mode":"shared"}"#
    );
    // An explicit exclusive is the default: read, and left out when written.
    let exclusive =
        decode_ok(r#"{"id":"r8e","op":"lock.acquire","name":"db","lease":"L","mode":"exclusive"}"#);
    assert_eq!(
        serde_json::to_value(&exclusive).expect("encodes"),
        json!({"id": "r8e", "op": "lock.acquire", "name": "db", "lease": "L"})
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"lock.acquire","name":"db","lease":"L","mode":"read"}"#,
        Some("7"),
        "lock.acquire: ",
        &["unknown variant `read`, expected `exclusive` or `shared`"],
    );
}

#[test]
fn op_lock_downgrade() {
    assert_request(
        r#"{"id":"r8d","op":"lock.downgrade","name":"db","lease":"L-17"}"#,
        &req(
            "r8d",
            Op::LockDowngrade {
                name: "db".into(),
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r8d", "op": "lock.downgrade", "name": "db", "lease": "L-17"}),
    );
}

#[test]
fn op_lock_acquire_all_and_release_all() {
    assert_request(
        r#"{"id":"r8m","op":"lock.acquire_all","names":["bay/1","door"],"lease":"L-17"}"#,
        &req(
            "r8m",
            Op::LockAcquireAll {
                names: vec!["bay/1".into(), "door".into()],
                lease: "L-17".into(),
                wait_ms: None,
                max_hold_ms: None,
                mode: LockMode::Exclusive,
            },
        ),
        &json!({"id": "r8m", "op": "lock.acquire_all", "names": ["bay/1", "door"],
                "lease": "L-17"}),
    );
    assert_request(
        r#"{"id":"r8n","op":"lock.acquire_all","names":["db"],"lease":"L-17","wait_ms":0,"mode":"shared"}"#,
        &req(
            "r8n",
            Op::LockAcquireAll {
                names: vec!["db".into()],
                lease: "L-17".into(),
                wait_ms: Some(0),
                max_hold_ms: None,
                mode: LockMode::Shared,
            },
        ),
        &json!({"id": "r8n", "op": "lock.acquire_all", "names": ["db"], "lease": "L-17",
                "wait_ms": 0, "mode": "shared"}),
    );
    // max_hold_ms: the hold of every name ends this long after the grant.
    assert_request(
        r#"{"id":"r8h","op":"lock.acquire_all","names":["bay/1","door"],"lease":"L-17","max_hold_ms":30000}"#,
        &req(
            "r8h",
            Op::LockAcquireAll {
                names: vec!["bay/1".into(), "door".into()],
                lease: "L-17".into(),
                wait_ms: None,
                max_hold_ms: Some(30_000),
                mode: LockMode::Exclusive,
            },
        ),
        &json!({"id": "r8h", "op": "lock.acquire_all", "names": ["bay/1", "door"],
                "lease": "L-17", "max_hold_ms": 30_000}),
    );
    assert_request(
        r#"{"id":"r8r","op":"lock.release_all","names":["door","bay/1"],"lease":"L-17"}"#,
        &req(
            "r8r",
            Op::LockReleaseAll {
                names: vec!["door".into(), "bay/1".into()],
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r8r", "op": "lock.release_all", "names": ["door", "bay/1"],
                "lease": "L-17"}),
    );
}

/// A multi-lock names 1 to `LOCK_NAMES_MAX` distinct locks, each a resource name.
#[test]
fn bad_request_lock_names() {
    let all = |names: Value| {
        json!({"id": "7", "op": "lock.acquire_all", "names": names, "lease": "L"}).to_string()
    };
    bad(
        &all(json!([])),
        Some("7"),
        "lock.acquire_all: `names` has 0 names, a multi-lock takes 1 to 64",
    );
    let many: Vec<String> = (0..=LOCK_NAMES_MAX).map(|i| format!("l{i}")).collect();
    bad(
        &all(json!(many)),
        Some("7"),
        "lock.acquire_all: `names` has 65 names, a multi-lock takes 1 to 64",
    );
    bad(
        &all(json!(["a", "b", "a"])),
        Some("7"),
        "lock.acquire_all: `names` has \"a\" twice; name each lock once",
    );
    bad(
        &json!({"id": "7", "op": "lock.release_all", "names": ["a", ""], "lease": "L"}).to_string(),
        Some("7"),
        "lock.release_all: `names[1]` must not be empty",
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"lock.release_all","names":"a","lease":"L"}"#,
        Some("7"),
        "lock.release_all: ",
        &["invalid type: string \"a\", expected a sequence"],
    );
}

#[test]
fn op_sem_acquire() {
    // permits defaults to 1 and is always encoded.
    assert_request(
        r#"{"id":"r9","op":"sem.acquire","name":"chargers","limit":4,"lease":"L-17"}"#,
        &req(
            "r9",
            Op::SemAcquire {
                name: "chargers".into(),
                limit: 4,
                lease: "L-17".into(),
                permits: 1,
                wait_ms: None,
                max_hold_ms: None,
            },
        ),
        &json!({"id": "r9", "op": "sem.acquire", "name": "chargers", "limit": 4,
                "lease": "L-17", "permits": 1}),
    );
    // Every field given; permits == limit is allowed.
    assert_request(
        r#"{"id":"r10","op":"sem.acquire","name":"chargers","limit":4,"lease":"L-17",
            "permits":4,"wait_ms":2500}"#,
        &req(
            "r10",
            Op::SemAcquire {
                name: "chargers".into(),
                limit: 4,
                lease: "L-17".into(),
                permits: 4,
                wait_ms: Some(2500),
                max_hold_ms: None,
            },
        ),
        &json!({"id": "r10", "op": "sem.acquire", "name": "chargers", "limit": 4,
                "lease": "L-17", "permits": 4, "wait_ms": 2500}),
    );
    assert_request(
        r#"{"id":"r10","op":"sem.acquire","name":"chargers","limit":4,"lease":"L-17",
            "max_hold_ms":600000}"#,
        &req(
            "r10",
            Op::SemAcquire {
                name: "chargers".into(),
                limit: 4,
                lease: "L-17".into(),
                permits: 1,
                wait_ms: None,
                max_hold_ms: Some(600_000),
            },
        ),
        &json!({"id": "r10", "op": "sem.acquire", "name": "chargers", "limit": 4,
                "lease": "L-17", "permits": 1, "max_hold_ms": 600_000}),
    );
    // The largest capacity.
    assert_request(
        r#"{"id":"r11","op":"sem.acquire","name":"s","limit":1000000,"lease":"L","permits":999}"#,
        &req(
            "r11",
            Op::SemAcquire {
                name: "s".into(),
                limit: SEM_LIMIT_MAX,
                lease: "L".into(),
                permits: 999,
                wait_ms: None,
                max_hold_ms: None,
            },
        ),
        &json!({"id": "r11", "op": "sem.acquire", "name": "s", "limit": 1_000_000,
                "lease": "L", "permits": 999}),
    );
}

#[test]
fn op_sem_release() {
    assert_request(
        r#"{"id":"r12","op":"sem.release","name":"chargers","lease":"L-17"}"#,
        &req(
            "r12",
            Op::SemRelease {
                name: "chargers".into(),
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r12", "op": "sem.release", "name": "chargers", "lease": "L-17"}),
    );
}

#[test]
fn op_waypoint_reserve_without_geometry() {
    let expected = req(
        "r13",
        Op::WaypointReserve {
            name: "pad-3".into(),
            lease: "L-17".into(),
            lat: None,
            lon: None,
            alt_min_m: None,
            alt_max_m: None,
            radius_m: None,
            wait_ms: None,
            start_ms: None,
            end_ms: None,
            priority: Default::default(),
        },
    );
    assert_request(
        r#"{"id":"r13","op":"waypoint.reserve","name":"pad-3","lease":"L-17"}"#,
        &expected,
        &json!({"id": "r13", "op": "waypoint.reserve", "name": "pad-3", "lease": "L-17"}),
    );
    assert_eq!(expected.op.area(), Ok(None));
}

/// The geometry `area()` derives, reduced to the fields whose meaning is fixed by the wire
/// protocol (the altitude representation inside `Area` is the coordinator's business).
fn area_core(request: &Request) -> Option<(f64, f64, f64)> {
    request.op.area().expect("valid geometry").map(
        |Area {
             lat, lon, radius_m, ..
         }| (lat, lon, radius_m),
    )
}

#[test]
fn op_waypoint_reserve_with_full_geometry() {
    let expected = req(
        "r14",
        Op::WaypointReserve {
            name: "pad-3".into(),
            lease: "L-17".into(),
            lat: Some(47.3769),
            lon: Some(8.5417),
            alt_min_m: Some(10.0),
            alt_max_m: Some(120.5),
            radius_m: Some(25.0),
            wait_ms: Some(0),
            start_ms: None,
            end_ms: None,
            priority: Default::default(),
        },
    );
    // Integers are accepted for the float fields; they are encoded back as floats.
    assert_request(
        r#"{"id":"r14","op":"waypoint.reserve","name":"pad-3","lease":"L-17","lat":47.3769,
            "lon":8.5417,"alt_min_m":10,"alt_max_m":120.5,"radius_m":25,"wait_ms":0}"#,
        &expected,
        &json!({"id": "r14", "op": "waypoint.reserve", "name": "pad-3", "lease": "L-17",
                "lat": 47.3769, "lon": 8.5417, "alt_min_m": 10.0, "alt_max_m": 120.5,
                "radius_m": 25.0, "wait_ms": 0}),
    );
    assert_eq!(area_core(&expected), Some((47.3769, 8.5417, 25.0)));
}

#[test]
fn op_waypoint_reserve_with_point_only() {
    // lat/lon only: radius 0, altitude unbounded. Absent fields stay absent on the wire.
    let expected = req(
        "r15",
        Op::WaypointReserve {
            name: "mast".into(),
            lease: "L-17".into(),
            lat: Some(-33.5),
            lon: Some(-180.0),
            alt_min_m: None,
            alt_max_m: None,
            radius_m: None,
            wait_ms: None,
            start_ms: None,
            end_ms: None,
            priority: Default::default(),
        },
    );
    assert_request(
        r#"{"id":"r15","op":"waypoint.reserve","name":"mast","lease":"L-17","lat":-33.5,
            "lon":-180}"#,
        &expected,
        &json!({"id": "r15", "op": "waypoint.reserve", "name": "mast", "lease": "L-17",
                "lat": -33.5, "lon": -180.0}),
    );
    assert_eq!(area_core(&expected), Some((-33.5, -180.0, 0.0)));
    // Only one altitude bound, the extreme values of every range: accepted, and only the
    // given fields are sent back.
    let one_sided = r#"{"id":"r16","op":"waypoint.reserve","name":"m","lease":"L","lat":90,
        "lon":180,"alt_max_m":100000,"radius_m":10000}"#;
    assert_request(
        one_sided,
        &req(
            "r16",
            Op::WaypointReserve {
                name: "m".into(),
                lease: "L".into(),
                lat: Some(90.0),
                lon: Some(180.0),
                alt_min_m: None,
                alt_max_m: Some(100_000.0),
                radius_m: Some(10_000.0),
                wait_ms: None,
                start_ms: None,
                end_ms: None,
                priority: Default::default(),
            },
        ),
        &json!({"id": "r16", "op": "waypoint.reserve", "name": "m", "lease": "L",
                "lat": 90.0, "lon": 180.0, "alt_max_m": 100_000.0, "radius_m": 10_000.0}),
    );
    assert_eq!(
        area_core(&decode_ok(one_sided)),
        Some((90.0, 180.0, 10_000.0))
    );
    // Equal altitude bounds are accepted (alt_min_m > alt_max_m is what is refused).
    let flat = decode_ok(
        r#"{"id":"r17","op":"waypoint.reserve","name":"m","lease":"L","lat":0,"lon":0,
            "alt_min_m":-1000,"alt_max_m":-1000}"#,
    );
    assert_eq!(area_core(&flat), Some((0.0, 0.0, 0.0)));
}

/// A time window, `[start_ms, end_ms)` in UTC ms; either end may be left out, and what is left
/// out stays out on the wire.
#[test]
fn op_waypoint_reserve_with_a_time_window() {
    let expected = req(
        "r14w",
        Op::WaypointReserve {
            name: "pad-3@0900".into(),
            lease: "L-17".into(),
            lat: Some(47.3769),
            lon: Some(8.5417),
            alt_min_m: None,
            alt_max_m: None,
            radius_m: Some(25.0),
            wait_ms: Some(0),
            start_ms: Some(1_764_503_600_000),
            end_ms: Some(1_764_504_200_000),
            priority: Default::default(),
        },
    );
    assert_request(
        r#"{"id":"r14w","op":"waypoint.reserve","name":"pad-3@0900","lease":"L-17",
            "lat":47.3769,"lon":8.5417,"radius_m":25,"wait_ms":0,
            "start_ms":1764503600000,"end_ms":1764504200000}"#,
        &expected,
        &json!({"id": "r14w", "op": "waypoint.reserve", "name": "pad-3@0900", "lease": "L-17",
                "lat": 47.3769, "lon": 8.5417, "radius_m": 25.0, "wait_ms": 0,
                "start_ms": 1_764_503_600_000u64, "end_ms": 1_764_504_200_000u64}),
    );
    let end_only = req(
        "r14x",
        Op::WaypointReserve {
            name: "n".into(),
            lease: "L".into(),
            lat: None,
            lon: None,
            alt_min_m: None,
            alt_max_m: None,
            radius_m: None,
            wait_ms: None,
            start_ms: None,
            end_ms: Some(5),
            priority: Default::default(),
        },
    );
    assert_request(
        r#"{"id":"r14x","op":"waypoint.reserve","name":"n","lease":"L","end_ms":5}"#,
        &end_only,
        &json!({"id": "r14x", "op": "waypoint.reserve", "name": "n", "lease": "L", "end_ms": 5}),
    );
}

/// The one-minute leg over Zurich's hub the route and query examples use.
fn hub_leg() -> Volume {
    Volume {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 20.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: 1_764_503_600_000,
        end_ms: 1_764_503_660_000,
    }
}

/// `route.reserve` carries 1 to 64 volumes, every field required; `route.amend` the same
/// without `wait_ms`; `route.release` is a name and a lease.
#[test]
fn op_route_reserve_amend_release() {
    let volume = hub_leg();
    let volume_json = json!({"lat": 47.3769, "lon": 8.5417, "radius_m": 20.0, "alt_min_m": 0.0,
        "alt_max_m": 120.0, "start_ms": 1_764_503_600_000u64, "end_ms": 1_764_503_660_000u64});
    assert_request(
        r#"{"id":"r30","op":"route.reserve","name":"hub-pad7","lease":"L-17","wait_ms":0,
            "volumes":[{"lat":47.3769,"lon":8.5417,"radius_m":20,"alt_min_m":0,"alt_max_m":120,
                        "start_ms":1764503600000,"end_ms":1764503660000}]}"#,
        &req(
            "r30",
            Op::RouteReserve {
                name: "hub-pad7".into(),
                lease: "L-17".into(),
                volumes: vec![volume],
                wait_ms: Some(0),
                priority: Default::default(),
            },
        ),
        &json!({"id": "r30", "op": "route.reserve", "name": "hub-pad7", "lease": "L-17",
                "wait_ms": 0, "volumes": [volume_json.clone()]}),
    );
    assert_request(
        r#"{"id":"r31","op":"route.amend","name":"hub-pad7","lease":"L-17",
            "volumes":[{"lat":47.3769,"lon":8.5417,"radius_m":20,"alt_min_m":0,"alt_max_m":120,
                        "start_ms":1764503600000,"end_ms":1764503660000}]}"#,
        &req(
            "r31",
            Op::RouteAmend {
                name: "hub-pad7".into(),
                lease: "L-17".into(),
                volumes: vec![volume],
                priority: Default::default(),
            },
        ),
        &json!({"id": "r31", "op": "route.amend", "name": "hub-pad7", "lease": "L-17",
                "volumes": [volume_json]}),
    );
    assert_request(
        r#"{"id":"r32","op":"route.release","name":"hub-pad7","lease":"L-17"}"#,
        &req(
            "r32",
            Op::RouteRelease {
                name: "hub-pad7".into(),
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r32", "op": "route.release", "name": "hub-pad7", "lease": "L-17"}),
    );
}

/// `airspace.query` takes one cylinder (`volume`, its window optional) or a route (`volumes`),
/// and pages with `after` and `limit`.
#[test]
fn op_airspace_query() {
    let volume = QueryVolume {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 20.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: None,
        end_ms: None,
    };
    assert_request(
        r#"{"id":"q1","op":"airspace.query",
            "volume":{"lat":47.3769,"lon":8.5417,"radius_m":20,"alt_min_m":0,"alt_max_m":120}}"#,
        &req(
            "q1",
            Op::AirspaceQuery {
                volume: Some(volume),
                volumes: None,
                after: None,
                limit: None,
            },
        ),
        &json!({"id": "q1", "op": "airspace.query", "volume": {"lat": 47.3769, "lon": 8.5417,
                "radius_m": 20.0, "alt_min_m": 0.0, "alt_max_m": 120.0}}),
    );
    let windowed = QueryVolume {
        start_ms: Some(1_764_503_600_000),
        end_ms: Some(1_764_503_660_000),
        ..volume
    };
    assert_request(
        r#"{"id":"q2","op":"airspace.query","after":"hub-pad7","limit":10,
            "volume":{"lat":47.3769,"lon":8.5417,"radius_m":20,"alt_min_m":0,"alt_max_m":120,
                      "start_ms":1764503600000,"end_ms":1764503660000}}"#,
        &req(
            "q2",
            Op::AirspaceQuery {
                volume: Some(windowed),
                volumes: None,
                after: Some("hub-pad7".into()),
                limit: Some(10),
            },
        ),
        &json!({"id": "q2", "op": "airspace.query", "after": "hub-pad7", "limit": 10,
                "volume": {"lat": 47.3769, "lon": 8.5417, "radius_m": 20.0, "alt_min_m": 0.0,
                           "alt_max_m": 120.0, "start_ms": 1_764_503_600_000u64,
                           "end_ms": 1_764_503_660_000u64}}),
    );
    let leg = hub_leg();
    assert_request(
        r#"{"id":"q3","op":"airspace.query",
            "volumes":[{"lat":47.3769,"lon":8.5417,"radius_m":20,"alt_min_m":0,"alt_max_m":120,
                        "start_ms":1764503600000,"end_ms":1764503660000}]}"#,
        &req(
            "q3",
            Op::AirspaceQuery {
                volume: None,
                volumes: Some(vec![leg]),
                after: None,
                limit: None,
            },
        ),
        &json!({"id": "q3", "op": "airspace.query", "volumes": [{"lat": 47.3769,
                "lon": 8.5417, "radius_m": 20.0, "alt_min_m": 0.0, "alt_max_m": 120.0,
                "start_ms": 1_764_503_600_000u64, "end_ms": 1_764_503_660_000u64}]}),
    );
}

/// Bad queries: neither or both of `volume` and `volumes`, too many volumes, an empty window,
/// a cylinder out of range, a bad page.
#[test]
fn bad_request_airspace_query() {
    let volume = r#"{"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9}"#;
    let leg =
        r#"{"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9,"start_ms":1,"end_ms":2}"#;
    bad(
        r#"{"id":"7","op":"airspace.query"}"#,
        Some("7"),
        "airspace.query: give `volume` (one cylinder) or `volumes` (a route of 1 to 64 volumes)",
    );
    bad(
        &format!(r#"{{"id":"7","op":"airspace.query","volume":{volume},"volumes":[{leg}]}}"#),
        Some("7"),
        "airspace.query: give `volume` or `volumes`, not both",
    );
    let legs = vec![leg; 65].join(",");
    bad(
        &format!(r#"{{"id":"7","op":"airspace.query","volumes":[{legs}]}}"#),
        Some("7"),
        "airspace.query: `volumes` has 65 volumes, a route has 1 to 64",
    );
    bad(
        r#"{"id":"7","op":"airspace.query","volume":{"lat":1,"lon":2,"radius_m":3,
            "alt_min_m":0,"alt_max_m":9,"start_ms":5,"end_ms":5}}"#,
        Some("7"),
        "airspace.query: `volume`: the window is empty: `end_ms` (5) is not after `start_ms` (5)",
    );
    bad(
        r#"{"id":"7","op":"airspace.query","volume":{"lat":91,"lon":2,"radius_m":3,
            "alt_min_m":0,"alt_max_m":9}}"#,
        Some("7"),
        "airspace.query: `volume`: `lat` is 91, it must be in [-90, 90]",
    );
    bad(
        &format!(r#"{{"id":"7","op":"airspace.query","volume":{volume},"limit":101}}"#),
        Some("7"),
        "airspace.query: `limit` is 101, it must be from 1 to 100",
    );
    bad(
        &format!(r#"{{"id":"7","op":"airspace.query","volume":{volume},"after":""}}"#),
        Some("7"),
        "airspace.query: `after` must not be empty",
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"airspace.query","volume":{"lat":1,"lon":2,"radius_m":3}}"#,
        Some("7"),
        "airspace.query: ",
        &["alt_min_m"],
    );
}

/// An `airspace.query` page: a waypoint row with its cylinder and window, a route row with its
/// conflicting volumes and their positions, `next_after`; a row without `agent` and `lease` (as
/// the `agent` role sees another agent's reservation).
#[test]
fn success_airspace_query() {
    let leg = hub_leg();
    let success = Success::from(ConflictPage {
        conflicts: vec![
            ConflictInfo {
                name: "hub-pad7".into(),
                kind: ReservationKind::Route,
                agent: "drone-7".into(),
                lease: "0000000000000011".into(),
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: vec![leg],
                volume_indexes: vec![3],
                priority: None,
            },
            ConflictInfo {
                name: "pad-2".into(),
                kind: ReservationKind::Waypoint,
                agent: String::new(),
                lease: String::new(),
                area: Some(Area {
                    lat: 47.3787,
                    lon: 8.5417,
                    radius_m: 5.0,
                    alt_min_m: None,
                    alt_max_m: Some(30.0),
                }),
                start_ms: Some(1_764_503_600_000),
                end_ms: None,
                volumes: Vec::new(),
                volume_indexes: Vec::new(),
                priority: None,
            },
        ],
        next_after: Some("pad-2".into()),
    });
    let response = Response::ok("q1", success.clone());
    let wire = json!({"id": "q1", "ok": true,
        "conflicts": [
            {"name": "hub-pad7", "kind": "route", "agent": "drone-7",
             "lease": "0000000000000011",
             "volumes": [{"lat": 47.3769, "lon": 8.5417, "radius_m": 20.0, "alt_min_m": 0.0,
                          "alt_max_m": 120.0, "start_ms": 1_764_503_600_000u64,
                          "end_ms": 1_764_503_660_000u64}],
             "volume_indexes": [3]},
            {"name": "pad-2", "kind": "waypoint",
             "area": {"lat": 47.3787, "lon": 8.5417, "radius_m": 5.0, "alt_min_m": null,
                      "alt_max_m": 30.0},
             "start_ms": 1_764_503_600_000u64}
        ],
        "next_after": "pad-2"});
    assert_eq!(to_json(&response.encode()), wire);
    let back: Response = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back.outcome, Ok(success));
}

/// Bad routes: no volume, too many, a volume out of range or with an empty window (named by
/// its index), a missing or unknown volume field.
#[test]
fn bad_request_routes() {
    let volume = |radius_m: f64, start_ms: u64, end_ms: u64| {
        json!({"lat": 1.0, "lon": 2.0, "radius_m": radius_m, "alt_min_m": 0.0, "alt_max_m": 9.0,
               "start_ms": start_ms, "end_ms": end_ms})
    };
    let route = |volumes: Vec<Value>| {
        json!({"id": "7", "op": "route.reserve", "name": "n", "lease": "L", "volumes": volumes})
            .to_string()
    };
    bad(
        &route(vec![]),
        Some("7"),
        "route.reserve: `volumes` has 0 volumes, a route has 1 to 64",
    );
    bad(
        &route(vec![volume(1.0, 1, 2); 65]),
        Some("7"),
        "route.reserve: `volumes` has 65 volumes, a route has 1 to 64",
    );
    assert!(
        decode_ok(&route(vec![volume(1.0, 1, 2); 64]))
            .op
            .validate()
            .is_ok()
    );
    bad(
        &route(vec![volume(1.0, 1, 2), volume(1.0, 5, 5)]),
        Some("7"),
        "route.reserve: volume 1: the window is empty: `end_ms` (5) is not after `start_ms` (5)",
    );
    assert_bad_request_mentions(
        &route(vec![volume(10_001.0, 1, 2)]),
        Some("7"),
        "route.reserve: volume 0: ",
        &["radius_m"],
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"route.reserve","name":"n","lease":"L","volumes":[
            {"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"start_ms":1,"end_ms":2}]}"#,
        Some("7"),
        "route.reserve: ",
        &["missing field `alt_max_m`"],
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"route.amend","name":"n","lease":"L","volumes":[
            {"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9,"start_ms":1,"end_ms":2,
             "priority":3}]}"#,
        Some("7"),
        "route.amend: ",
        &["unknown field `priority`"],
    );
}

/// An empty window is refused by the decoder, saying which; a window in the past, too long or
/// too far ahead needs the entry's time and is the state machine's refusal (PROTOCOL.md §8.8).
#[test]
fn bad_request_empty_time_window() {
    for (start, end) in [(1_000, 1_000), (1_000, 999)] {
        let wire = format!(
            r#"{{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","start_ms":{start},"end_ms":{end}}}"#
        );
        let err = decode_err(wire.as_bytes());
        assert_eq!(err.code, ErrorCode::BadRequest);
        assert_eq!(err.id.as_deref(), Some("7"));
        assert_eq!(
            err.message,
            format!(
                "waypoint.reserve: the window is empty: `end_ms` ({end}) is not after `start_ms` \
                 ({start})"
            )
        );
    }
    assert_bad_request_mentions(
        r#"{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","start_ms":-1}"#,
        Some("7"),
        "waypoint.reserve: ",
        &["-1"],
    );
}

#[test]
fn op_waypoint_release() {
    assert_request(
        r#"{"id":"r18","op":"waypoint.release","name":"pad-3","lease":"L-17"}"#,
        &req(
            "r18",
            Op::WaypointRelease {
                name: "pad-3".into(),
                lease: "L-17".into(),
            },
        ),
        &json!({"id": "r18", "op": "waypoint.release", "name": "pad-3", "lease": "L-17"}),
    );
}

#[test]
fn op_fence_check() {
    // kind defaults to "lock" and is always encoded; the resource's field is `name`, as in
    // every other op.
    assert_request(
        r#"{"id":"r19","op":"fence.check","name":"door","token":42}"#,
        &req(
            "r19",
            Op::FenceCheck {
                name: "door".into(),
                kind: ResourceKind::Lock,
                token: 42,
            },
        ),
        &json!({"id": "r19", "op": "fence.check", "name": "door", "kind": "lock",
                "token": 42}),
    );
    assert_request(
        r#"{"id":"r20","op":"fence.check","name":"chargers","kind":"sem","token":0}"#,
        &req(
            "r20",
            Op::FenceCheck {
                name: "chargers".into(),
                kind: ResourceKind::Sem,
                token: 0,
            },
        ),
        &json!({"id": "r20", "op": "fence.check", "name": "chargers", "kind": "sem",
                "token": 0}),
    );
    assert_request(
        r#"{"id":"r21","op":"fence.check","name":"pad-3","kind":"waypoint",
            "token":18446744073709551615}"#,
        &req(
            "r21",
            Op::FenceCheck {
                name: "pad-3".into(),
                kind: ResourceKind::Waypoint,
                token: u64::MAX,
            },
        ),
        &json!({"id": "r21", "op": "fence.check", "name": "pad-3", "kind": "waypoint",
                "token": u64::MAX}),
    );
    bad(
        r#"{"id":"8","op":"fence.check","name":"","token":1}"#,
        Some("8"),
        "fence.check: `name` must not be empty",
    );
}

/// `resource`, fence.check's first name for the field, is still accepted (an alias); the
/// service answers the same, and encodes it as `name`. Both at once is a duplicate.
#[test]
fn op_fence_check_accepts_resource_as_an_alias_of_name() {
    assert_eq!(
        decode_ok(r#"{"id":"r19","op":"fence.check","resource":"door","token":42}"#),
        req(
            "r19",
            Op::FenceCheck {
                name: "door".into(),
                kind: ResourceKind::Lock,
                token: 42,
            },
        )
    );
    assert_eq!(
        to_json(
            &decode_ok(
                r#"{"id":"r1","op":"fence.check","resource":"pad-3","kind":"waypoint","token":7}"#
            )
            .encode()
        ),
        json!({"id": "r1", "op": "fence.check", "name": "pad-3", "kind": "waypoint", "token": 7})
    );
    let both = decode_err(br#"{"id":"2","op":"fence.check","name":"a","resource":"b","token":1}"#);
    assert_eq!(
        (both.id.as_deref(), both.code),
        (Some("2"), ErrorCode::BadRequest)
    );
    assert!(
        both.message.contains("duplicate field `name`"),
        "{}",
        both.message
    );
}

#[test]
fn op_inspect() {
    for (kind, wire) in [
        (ResourceKind::Lock, "lock"),
        (ResourceKind::Sem, "sem"),
        (ResourceKind::Waypoint, "waypoint"),
    ] {
        assert_eq!(kind.as_str(), wire);
        assert_eq!(serde_json::to_value(kind).expect("serializes"), json!(wire));
        assert_request(
            &format!(r#"{{"id":"r22","op":"inspect","kind":"{wire}","name":"door"}}"#),
            &req(
                "r22",
                Op::Inspect {
                    kind,
                    name: "door".into(),
                },
            ),
            &json!({"id": "r22", "op": "inspect", "kind": wire, "name": "door"}),
        );
    }
}

#[test]
fn op_admin_status() {
    assert_request(
        r#"{"id":"r23","op":"admin.status"}"#,
        &req("r23", Op::AdminStatus {}),
        &json!({"id": "r23", "op": "admin.status"}),
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"admin.status","node":1}"#,
        Some("7"),
        "admin.status: ",
        &["node"],
    );
}

#[test]
fn op_admin_leases() {
    assert_request(
        r#"{"id":"r24","op":"admin.leases"}"#,
        &req("r24", Op::AdminLeases { after: None }),
        &json!({"id": "r24", "op": "admin.leases"}),
    );
    assert_request(
        r#"{"id":"r25","op":"admin.leases","after":"0000000000000011"}"#,
        &req(
            "r25",
            Op::AdminLeases {
                after: Some("0000000000000011".into()),
            },
        ),
        &json!({"id": "r25", "op": "admin.leases", "after": "0000000000000011"}),
    );
    bad(
        r#"{"id":"7","op":"admin.leases","after":""}"#,
        Some("7"),
        "admin.leases: `after` must not be empty",
    );
}

#[test]
fn op_admin_resources() {
    assert_request(
        r#"{"id":"r40","op":"admin.resources"}"#,
        &req(
            "r40",
            Op::AdminResources {
                kind: None,
                prefix: None,
                after: None,
                limit: None,
            },
        ),
        &json!({"id": "r40", "op": "admin.resources"}),
    );
    assert_request(
        r#"{"id":"r41","op":"admin.resources","kind":"lock","prefix":"door/","after":"lock/door/2","limit":50}"#,
        &req(
            "r41",
            Op::AdminResources {
                kind: Some(ResourceKind::Lock),
                prefix: Some("door/".into()),
                after: Some("lock/door/2".into()),
                limit: Some(50),
            },
        ),
        &json!({"id": "r41", "op": "admin.resources", "kind": "lock", "prefix": "door/",
                "after": "lock/door/2", "limit": 50}),
    );
    bad(
        r#"{"id":"7","op":"admin.resources","limit":0}"#,
        Some("7"),
        "admin.resources: `limit` is 0, it must be from 1 to 100",
    );
    bad(
        r#"{"id":"7","op":"admin.resources","limit":101}"#,
        Some("7"),
        "admin.resources: `limit` is 101, it must be from 1 to 100",
    );
    bad(
        r#"{"id":"7","op":"admin.resources","after":"door/2"}"#,
        Some("7"),
        "admin.resources: `after` is \"door/2\", not a cursor `kind/name` (a page's `next_after`)",
    );
    bad(
        r#"{"id":"7","op":"admin.resources","prefix":""}"#,
        Some("7"),
        "admin.resources: `prefix` must not be empty",
    );
}

#[test]
fn success_admin_resources() {
    let success = Success::from(ResourcePage {
        resources: vec![
            ResourceInfo {
                kind: ResourceKind::Lock,
                name: "door/2".into(),
                holders: 1,
                waiters: 2,
            },
            ResourceInfo {
                kind: ResourceKind::Waypoint,
                name: "pad-2".into(),
                holders: 0,
                waiters: 1,
            },
        ],
        next_after: Some("waypoint/pad-2".into()),
    });
    let response = Response::ok("r40", success.clone());
    let wire = json!({"id": "r40", "ok": true,
        "resources": [
            {"kind": "lock", "name": "door/2", "holders": 1, "waiters": 2},
            {"kind": "waypoint", "name": "pad-2", "holders": 0, "waiters": 1}
        ],
        "next_after": "waypoint/pad-2"});
    assert_eq!(to_json(&response.encode()), wire);
    let back: Response = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back.outcome, Ok(success));
}

/// Online backup: the first page takes and pins a snapshot; later pages name its `index` and an
/// `offset`; `page_bytes_max` bounds a page.
#[test]
fn op_admin_snapshot() {
    assert_request(
        r#"{"id":"s1","op":"admin.snapshot"}"#,
        &req(
            "s1",
            Op::AdminSnapshot {
                index: None,
                offset: None,
                page_bytes_max: None,
            },
        ),
        &json!({"id": "s1", "op": "admin.snapshot"}),
    );
    assert_request(
        r#"{"id":"s2","op":"admin.snapshot","index":120,"offset":32768,"page_bytes_max":32768}"#,
        &req(
            "s2",
            Op::AdminSnapshot {
                index: Some(120),
                offset: Some(32_768),
                page_bytes_max: Some(32_768),
            },
        ),
        &json!({"id": "s2", "op": "admin.snapshot", "index": 120, "offset": 32768,
                "page_bytes_max": 32768}),
    );
    bad(
        r#"{"id":"7","op":"admin.snapshot","offset":100}"#,
        Some("7"),
        "admin.snapshot: `offset` needs `index`: the log index the first page answered, so \
         that every page is of the same snapshot",
    );
    bad(
        r#"{"id":"7","op":"admin.snapshot","page_bytes_max":1023}"#,
        Some("7"),
        "admin.snapshot: `page_bytes_max` is 1023, it must be from 1024 to 524288",
    );
    bad(
        r#"{"id":"7","op":"admin.snapshot","page_bytes_max":524289}"#,
        Some("7"),
        "admin.snapshot: `page_bytes_max` is 524289, it must be from 1024 to 524288",
    );
    bad(
        r#"{"id":"7","op":"admin.snapshot","index":-1}"#,
        Some("7"),
        "admin.snapshot: invalid value: integer `-1`, expected u64",
    );
}

#[test]
fn success_admin_snapshot() {
    let page = SnapshotPage {
        index: 120,
        term: 3,
        total_bytes: 5,
        offset: 0,
        data: "aGVsbG8=".into(),
        digest: "324dcf027dd4a30a932c441f365a25e86b173defa4b8e58948253471b81b72cf".into(),
        done: true,
    };
    let success = Success::from(page.clone());
    assert_eq!(SnapshotPage::try_from(success.clone()), Ok(page));
    let response = Response::ok("s1", success.clone());
    let wire = json!({"id": "s1", "ok": true, "index": 120, "term": 3, "total_bytes": 5,
        "offset": 0, "data": "aGVsbG8=",
        "digest": "324dcf027dd4a30a932c441f365a25e86b173defa4b8e58948253471b81b72cf",
        "done": true});
    assert_eq!(to_json(&response.encode()), wire);
    let back: Response = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back.outcome, Ok(success));
    // Any other result carries no page.
    assert!(SnapshotPage::try_from(Success::from(Granted { token: 7 })).is_err());
}

#[test]
fn op_admin_revoke() {
    assert_request(
        r#"{"id":"r26","op":"admin.revoke","lease":"0000000000000011"}"#,
        &req(
            "r26",
            Op::AdminRevoke {
                lease: "0000000000000011".into(),
            },
        ),
        &json!({"id": "r26", "op": "admin.revoke", "lease": "0000000000000011"}),
    );
}

#[test]
fn op_admin_member_add() {
    assert_request(
        r#"{"id":"r27","op":"admin.member.add","name":"n4","addr":"10.0.0.4:7401"}"#,
        &req(
            "r27",
            Op::AdminMemberAdd {
                name: "n4".into(),
                addr: "10.0.0.4:7401".into(),
                catch_up_timeout_ms: None,
                catch_up_lag_entries_max: None,
            },
        ),
        &json!({"id": "r27", "op": "admin.member.add", "name": "n4", "addr": "10.0.0.4:7401"}),
    );
    // The catch-up bounds, and a host name for the address.
    assert_request(
        r#"{"id":"r29","op":"admin.member.add","name":"n4","addr":"node-4.local:7401","catch_up_timeout_ms":30000,"catch_up_lag_entries_max":10}"#,
        &req(
            "r29",
            Op::AdminMemberAdd {
                name: "n4".into(),
                addr: "node-4.local:7401".into(),
                catch_up_timeout_ms: Some(30_000),
                catch_up_lag_entries_max: Some(10),
            },
        ),
        &json!({"id": "r29", "op": "admin.member.add", "name": "n4", "addr": "node-4.local:7401",
                "catch_up_timeout_ms": 30000, "catch_up_lag_entries_max": 10}),
    );
    bad(
        r#"{"id":"10","op":"admin.member.add","name":"n4","addr":"10.0.0.4:7401","catch_up_timeout_ms":0}"#,
        Some("10"),
        "admin.member.add: `catch_up_timeout_ms` is 0, it must be in [1, 600000]",
    );
    bad(
        r#"{"id":"11","op":"admin.member.add","name":"n4","addr":"10.0.0.4:0"}"#,
        Some("11"),
        "admin.member.add: `addr` \"10.0.0.4:0\" has port 0: give the peer port",
    );
    bad(
        r#"{"id":"12","op":"admin.member.add","name":"n4","addr":"node 4:7401"}"#,
        Some("12"),
        "admin.member.add: `addr` \"node 4:7401\": \"node 4\" is not a host name, an IPv4 address or a bracketed IPv6 address",
    );
    bad(
        r#"{"id":"7","op":"admin.member.add","name":"n 4","addr":"10.0.0.4:7401"}"#,
        Some("7"),
        "admin.member.add: member name \"n 4\" contains ' '; allowed are A-Z a-z 0-9 _ . -",
    );
    bad(
        r#"{"id":"8","op":"admin.member.add","name":"n4","addr":"10.0.0.4"}"#,
        Some("8"),
        "admin.member.add: `addr` \"10.0.0.4\" is not host:port",
    );
}

#[test]
fn op_admin_member_remove() {
    assert_request(
        r#"{"id":"r28","op":"admin.member.remove","name":"n2"}"#,
        &req("r28", Op::AdminMemberRemove { name: "n2".into() }),
        &json!({"id": "r28", "op": "admin.member.remove", "name": "n2"}),
    );
    bad(
        r#"{"id":"9","op":"admin.member.remove","name":""}"#,
        Some("9"),
        "admin.member.remove: member name must be 1 to 64 characters, got 0",
    );
}

#[test]
fn op_admin_agent_add() {
    assert_request(
        r#"{"id":"r31","op":"admin.agent.add","name":"drone-7"}"#,
        &req(
            "r31",
            Op::AdminAgentAdd {
                name: "drone-7".into(),
                role: None,
                kv_read: Vec::new(),
                kv_write: Vec::new(),
            },
        ),
        &json!({"id": "r31", "op": "admin.agent.add", "name": "drone-7"}),
    );
    for (wire, role) in [
        ("agent", Role::Agent),
        ("observer", Role::Observer),
        ("admin", Role::Admin),
    ] {
        assert_request(
            &format!(r#"{{"id":"r32","op":"admin.agent.add","name":"ops","role":"{wire}"}}"#),
            &req(
                "r32",
                Op::AdminAgentAdd {
                    name: "ops".into(),
                    role: Some(role),
                    kv_read: Vec::new(),
                    kv_write: Vec::new(),
                },
            ),
            &json!({"id": "r32", "op": "admin.agent.add", "name": "ops", "role": wire}),
        );
    }
    bad(
        r#"{"id":"7","op":"admin.agent.add","name":"a/b"}"#,
        Some("7"),
        "admin.agent.add: `name` (an agent id) \"a/b\" contains '/'; allowed are A-Z a-z 0-9 _ . -",
    );
    assert_bad_request_mentions(
        r#"{"id":"8","op":"admin.agent.add","name":"x","role":"root"}"#,
        Some("8"),
        "admin.agent.add: ",
        &["root"],
    );
}

#[test]
fn op_admin_agent_add_with_key_prefixes() {
    assert_request(
        r#"{"id":"r35","op":"admin.agent.add","name":"drone-8","kv_read":["presence/","cfg/"],"kv_write":["presence/"]}"#,
        &req(
            "r35",
            Op::AdminAgentAdd {
                name: "drone-8".into(),
                role: None,
                kv_read: vec!["presence/".into(), "cfg/".into()],
                kv_write: vec!["presence/".into()],
            },
        ),
        &json!({"id": "r35", "op": "admin.agent.add", "name": "drone-8",
            "kv_read": ["presence/", "cfg/"], "kv_write": ["presence/"]}),
    );
    assert_request(
        r#"{"id":"r36","op":"admin.agent.add","name":"ops","role":"observer","kv_read":["cfg/"]}"#,
        &req(
            "r36",
            Op::AdminAgentAdd {
                name: "ops".into(),
                role: Some(Role::Observer),
                kv_read: vec!["cfg/".into()],
                kv_write: Vec::new(),
            },
        ),
        &json!({"id": "r36", "op": "admin.agent.add", "name": "ops", "role": "observer",
            "kv_read": ["cfg/"]}),
    );
    bad(
        r#"{"id":"9","op":"admin.agent.add","name":"ops","role":"observer","kv_write":["a/"]}"#,
        Some("9"),
        "admin.agent.add: an observer writes no key: `kv_write` is for the agent role",
    );
    bad(
        r#"{"id":"9","op":"admin.agent.add","name":"root2","role":"admin","kv_read":["a/"]}"#,
        Some("9"),
        "admin.agent.add: an admin reads and writes every key: `kv_read` and `kv_write` are for \
         the agent and observer roles",
    );
    let many = vec!["\"p/\""; 33].join(",");
    bad(
        &format!(r#"{{"id":"9","op":"admin.agent.add","name":"d","kv_read":[{many}]}}"#),
        Some("9"),
        "admin.agent.add: `kv_read` has 33 prefixes, at most 32 are allowed",
    );
    let long = "k".repeat(513);
    bad(
        &format!(r#"{{"id":"9","op":"admin.agent.add","name":"d","kv_write":["{long}"]}}"#),
        Some("9"),
        "admin.agent.add: a `kv_write` prefix is 513 bytes, at most 512 are allowed",
    );
    assert_bad_request_mentions(
        r#"{"id":"9","op":"admin.agent.add","name":"d","kv_read":"p/"}"#,
        Some("9"),
        "admin.agent.add: ",
        &["sequence"],
    );
}

#[test]
fn op_admin_agent_list_remove_rotate() {
    assert_request(
        r#"{"id":"r33","op":"admin.agent.list"}"#,
        &req("r33", Op::AdminAgentList { after: None }),
        &json!({"id": "r33", "op": "admin.agent.list"}),
    );
    assert_request(
        r#"{"id":"r34","op":"admin.agent.list","after":"drone-7"}"#,
        &req(
            "r34",
            Op::AdminAgentList {
                after: Some("drone-7".into()),
            },
        ),
        &json!({"id": "r34", "op": "admin.agent.list", "after": "drone-7"}),
    );
    assert_request(
        r#"{"id":"r35","op":"admin.agent.remove","name":"drone-7"}"#,
        &req(
            "r35",
            Op::AdminAgentRemove {
                name: "drone-7".into(),
            },
        ),
        &json!({"id": "r35", "op": "admin.agent.remove", "name": "drone-7"}),
    );
    assert_request(
        r#"{"id":"r36","op":"admin.agent.rotate","name":"drone-7"}"#,
        &req(
            "r36",
            Op::AdminAgentRotate {
                name: "drone-7".into(),
            },
        ),
        &json!({"id": "r36", "op": "admin.agent.rotate", "name": "drone-7"}),
    );
    bad(
        r#"{"id":"9","op":"admin.agent.rotate","name":""}"#,
        Some("9"),
        "admin.agent.rotate: `name` (an agent id) must be 1 to 64 characters, got 0",
    );
}

/// The admin ops, and only they, are marked as needing the admin credential.
#[test]
fn only_admin_ops_are_admin() {
    for name in Op::NAMES {
        let wire = match name {
            "admin.status" => r#"{"id":"a","op":"admin.status"}"#.to_string(),
            "admin.leases" => r#"{"id":"a","op":"admin.leases"}"#.to_string(),
            "admin.resources" => r#"{"id":"a","op":"admin.resources"}"#.to_string(),
            "admin.snapshot" => r#"{"id":"a","op":"admin.snapshot"}"#.to_string(),
            "admin.revoke" => r#"{"id":"a","op":"admin.revoke","lease":"L"}"#.to_string(),
            "admin.member.add" => {
                r#"{"id":"a","op":"admin.member.add","name":"n","addr":"h:1"}"#.to_string()
            }
            "admin.member.remove" => {
                r#"{"id":"a","op":"admin.member.remove","name":"n"}"#.to_string()
            }
            "admin.agent.list" => r#"{"id":"a","op":"admin.agent.list"}"#.to_string(),
            "admin.agent.add" | "admin.agent.remove" | "admin.agent.rotate" => {
                format!(r#"{{"id":"a","op":"{name}","name":"n"}}"#)
            }
            _ => continue,
        };
        assert!(decode_ok(&wire).op.is_admin(), "{name}");
    }
    let ordinary = [
        r#"{"id":"a","op":"lease.revoke","lease":"L"}"#,
        r#"{"id":"a","op":"inspect","kind":"lock","name":"n"}"#,
        r#"{"id":"a","op":"fence.check","name":"n","token":1}"#,
        r#"{"id":"a","op":"election.leader","name":"n"}"#,
        r#"{"id":"a","op":"airspace.query","volume":{"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9}}"#,
    ];
    for wire in ordinary {
        assert!(!decode_ok(wire).op.is_admin(), "{wire}");
    }
}

/// The per-op tests above cover exactly `Op::NAMES`, and the metadata helpers agree.
#[test]
fn op_names_are_complete_and_consistent() {
    let samples = [
        (r#"{"id":"a","op":"lease.grant","ttl_ms":1}"#, None, true),
        (
            r#"{"id":"a","op":"lease.keepalive","lease":"L"}"#,
            Some("L"),
            false,
        ),
        (
            r#"{"id":"a","op":"lease.revoke","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"lock.acquire","name":"n","lease":"L","wait_ms":7}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"lock.release","name":"n","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"lock.downgrade","name":"n","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"lock.acquire_all","names":["n"],"lease":"L","wait_ms":7}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"lock.release_all","names":["n"],"lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"sem.acquire","name":"n","limit":2,"lease":"L","wait_ms":7}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"sem.release","name":"n","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"waypoint.reserve","name":"n","lease":"L","wait_ms":7}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"waypoint.release","name":"n","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"route.reserve","name":"n","lease":"L","wait_ms":7,"volumes":[
                {"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9,
                 "start_ms":10,"end_ms":20}]}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"route.release","name":"n","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"route.amend","name":"n","lease":"L","volumes":[
                {"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9,
                 "start_ms":10,"end_ms":20}]}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"airspace.query","volume":{"lat":1,"lon":2,"radius_m":3,
                "alt_min_m":0,"alt_max_m":9}}"#,
            None,
            false,
        ),
        (
            r#"{"id":"a","op":"fence.check","name":"n","token":1}"#,
            None,
            false,
        ),
        (
            r#"{"id":"a","op":"inspect","kind":"sem","name":"n"}"#,
            None,
            false,
        ),
        (r#"{"id":"a","op":"admin.status"}"#, None, false),
        (r#"{"id":"a","op":"admin.leases","after":"L"}"#, None, false),
        (r#"{"id":"a","op":"admin.resources"}"#, None, false),
        (r#"{"id":"a","op":"admin.snapshot"}"#, None, false),
        (
            r#"{"id":"a","op":"admin.revoke","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"admin.member.add","name":"n","addr":"h:1"}"#,
            None,
            false,
        ),
        (
            r#"{"id":"a","op":"admin.member.remove","name":"n"}"#,
            None,
            false,
        ),
        (
            r#"{"id":"a","op":"admin.agent.add","name":"n"}"#,
            None,
            true,
        ),
        (r#"{"id":"a","op":"admin.agent.list"}"#, None, false),
        (
            r#"{"id":"a","op":"admin.agent.remove","name":"n"}"#,
            None,
            true,
        ),
        (
            r#"{"id":"a","op":"admin.agent.rotate","name":"n"}"#,
            None,
            true,
        ),
        (
            r#"{"id":"a","op":"kv.put","key":"k","value":"v","lease":"L"}"#,
            Some("L"),
            true,
        ),
        (r#"{"id":"a","op":"kv.get","key":"k"}"#, None, false),
        (r#"{"id":"a","op":"kv.delete","key":"k"}"#, None, true),
        (r#"{"id":"a","op":"kv.txn"}"#, None, true),
        (
            r#"{"id":"a","op":"watch.poll","key":"k","after":0}"#,
            None,
            false,
        ),
        (
            r#"{"id":"a","op":"election.campaign","name":"n","lease":"L","value":"v","wait_ms":7}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"election.proclaim","name":"n","token":1,"value":"v"}"#,
            None,
            true,
        ),
        (
            r#"{"id":"a","op":"election.resign","name":"n","token":1}"#,
            None,
            true,
        ),
        (
            r#"{"id":"a","op":"election.leader","name":"n"}"#,
            None,
            false,
        ),
        (
            r#"{"id":"a","op":"barrier.enter","name":"n","count":3,"lease":"L","wait_ms":7}"#,
            Some("L"),
            true,
        ),
        (
            r#"{"id":"a","op":"barrier.leave","name":"n","lease":"L","wait_ms":7}"#,
            Some("L"),
            true,
        ),
    ];
    assert_eq!(samples.len(), Op::NAMES.len());
    for ((wire, lease, is_write), name) in samples.iter().zip(Op::NAMES) {
        let request = decode_ok(wire);
        assert_eq!(request.op.name(), name);
        assert_eq!(request.op.lease(), *lease, "{name}");
        assert_eq!(request.op.is_write(), *is_write, "{name}");
        let expected_wait = if name.ends_with(".acquire")
            || name == "lock.acquire_all"
            || name == "waypoint.reserve"
            || name == "route.reserve"
            || name == "election.campaign"
            || name.starts_with("barrier.")
        {
            Some(7)
        } else {
            None
        };
        assert_eq!(request.op.wait_ms(), expected_wait, "{name}");
    }
    assert_eq!(
        Op::NAMES,
        [
            "lease.grant",
            "lease.keepalive",
            "lease.revoke",
            "lock.acquire",
            "lock.release",
            "lock.downgrade",
            "lock.acquire_all",
            "lock.release_all",
            "sem.acquire",
            "sem.release",
            "waypoint.reserve",
            "waypoint.release",
            "route.reserve",
            "route.release",
            "route.amend",
            "airspace.query",
            "fence.check",
            "inspect",
            "admin.status",
            "admin.leases",
            "admin.resources",
            "admin.snapshot",
            "admin.revoke",
            "admin.member.add",
            "admin.member.remove",
            "admin.agent.add",
            "admin.agent.list",
            "admin.agent.remove",
            "admin.agent.rotate",
            "kv.put",
            "kv.get",
            "kv.delete",
            "kv.txn",
            "watch.poll",
            "election.campaign",
            "election.proclaim",
            "election.resign",
            "election.leader",
            "barrier.enter",
            "barrier.leave",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Error codes: golden failure responses
// ---------------------------------------------------------------------------------------------

/// The wire name of every code. An exhaustive match with no wildcard: a new code does not
/// compile until it is added here (and to docs/PROTOCOL.md).
fn wire_name(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::BadRequest => "bad_request",
        ErrorCode::UnknownOp => "unknown_op",
        ErrorCode::TooLarge => "too_large",
        ErrorCode::LeaseNotFound => "lease_not_found",
        ErrorCode::NotHolder => "not_holder",
        ErrorCode::WouldBlock => "would_block",
        ErrorCode::Timeout => "timeout",
        ErrorCode::LimitMismatch => "limit_mismatch",
        ErrorCode::Unavailable => "unavailable",
        ErrorCode::Forbidden => "forbidden",
        ErrorCode::ResourceExhausted => "resource_exhausted",
        ErrorCode::RateLimited => "rate_limited",
        ErrorCode::Compacted => "compacted",
    }
}

/// `Response::error(id, code, message).encode()` is exactly `golden`, and decodes back.
fn assert_error_golden(id: Option<&str>, code: ErrorCode, message: &str, golden: &str) {
    let response = Response::error(id.map(str::to_string), code, message);
    let golden: Value = serde_json::from_str(golden).expect("golden is JSON");
    assert_eq!(to_json(&response.encode()), golden);
    let decoded = Response::decode(golden.to_string().as_bytes()).expect("golden decodes");
    assert_eq!(decoded, response);
    assert_eq!(
        decoded.outcome,
        Err(ErrorBody {
            code,
            message: message.to_string(),
            compact_revision: None,
        })
    );
    // as_str, Display and the serde name agree.
    assert_eq!(code.as_str(), wire_name(code));
    assert_eq!(code.to_string(), wire_name(code));
    assert_eq!(
        serde_json::to_value(code).expect("serializes"),
        json!(wire_name(code))
    );
    assert_eq!(
        serde_json::from_value::<ErrorCode>(json!(wire_name(code))).expect("deserializes"),
        code
    );
}

#[test]
fn error_code_list_is_closed_and_ordered() {
    assert_eq!(
        ErrorCode::ALL.map(ErrorCode::as_str),
        [
            "bad_request",
            "unknown_op",
            "too_large",
            "lease_not_found",
            "not_holder",
            "would_block",
            "timeout",
            "limit_mismatch",
            "unavailable",
            "forbidden",
            "resource_exhausted",
            "rate_limited",
            "compacted",
        ]
    );
    for code in ErrorCode::ALL {
        assert_eq!(code.as_str(), wire_name(code));
        assert_eq!(
            serde_json::to_value(code).expect("serializes"),
            json!(code.as_str())
        );
    }
    // An unknown code is not silently mapped to a known one.
    assert!(serde_json::from_value::<ErrorCode>(json!("BadRequest")).is_err());
    assert!(serde_json::from_value::<ErrorCode>(json!("no_such_code")).is_err());
}

#[test]
fn error_code_bad_request() {
    assert_error_golden(
        Some("7"),
        ErrorCode::BadRequest,
        "lock.acquire: missing field `lease`",
        r#"{"id":"7","ok":false,"error":{"code":"bad_request",
            "message":"lock.acquire: missing field `lease`"}}"#,
    );
    assert_error_golden(
        None,
        ErrorCode::BadRequest,
        "a request must be a JSON object",
        r#"{"id":null,"ok":false,"error":{"code":"bad_request",
            "message":"a request must be a JSON object"}}"#,
    );
    // From the decoder, with and without an id.
    bad(
        r#"{"id":"7","op":"lock.acquire","name":"n"}"#,
        Some("7"),
        "lock.acquire: missing field `lease`",
    );
    bad("[1,2]", None, "a request must be a JSON object");
}

#[test]
fn error_code_unknown_op() {
    assert_error_golden(
        Some("7"),
        ErrorCode::UnknownOp,
        "unknown op \"lock.steal\"",
        r#"{"id":"7","ok":false,"error":{"code":"unknown_op",
            "message":"unknown op \"lock.steal\""}}"#,
    );
    // The decoder echoes the id.
    assert_rejected(
        br#"{"id":"7","op":"lock.steal","name":"n","lease":"L"}"#,
        Some("7"),
        ErrorCode::UnknownOp,
        "unknown op \"lock.steal\"; the ops are lease.grant, lease.keepalive, lease.revoke, \
         lock.acquire, lock.release, lock.downgrade, lock.acquire_all, lock.release_all, \
         sem.acquire, sem.release, waypoint.reserve, \
         waypoint.release, route.reserve, route.release, route.amend, airspace.query, \
         fence.check, inspect, \
         admin.status, admin.leases, admin.resources, admin.snapshot, \
         admin.revoke, admin.member.add, admin.member.remove, \
         admin.agent.add, admin.agent.list, admin.agent.remove, admin.agent.rotate, \
         kv.put, kv.get, kv.delete, kv.txn, watch.poll, \
         election.campaign, election.proclaim, election.resign, election.leader, \
         barrier.enter, barrier.leave",
    );
    // Op names are case-sensitive.
    let err = decode_err(br#"{"id":"8","op":"Lease.Grant","ttl_ms":1000}"#);
    assert_eq!(
        (err.id.as_deref(), err.code),
        (Some("8"), ErrorCode::UnknownOp)
    );
    assert_error_response(&err);
}

#[test]
fn error_code_too_large() {
    assert_error_golden(
        None,
        ErrorCode::TooLarge,
        "payload is 8193 bytes, the maximum is 8192",
        r#"{"id":null,"ok":false,"error":{"code":"too_large",
            "message":"payload is 8193 bytes, the maximum is 8192"}}"#,
    );
    assert_eq!(REQUEST_BYTES_MAX, 8192);
    // A request that would be valid but is one byte too long: id null, even though the id is
    // readable, because the payload is not parsed at all.
    let head = r#"{"id":"7","op":"lease.grant","ttl_ms":1000}"#;
    let padding = " ".repeat(REQUEST_BYTES_MAX - head.len());
    let exactly_max = format!("{head}{padding}");
    assert_eq!(exactly_max.len(), REQUEST_BYTES_MAX);
    assert_eq!(
        decode_ok(&exactly_max),
        req(
            "7",
            Op::LeaseGrant {
                ttl_ms: 1000,
                lock_delay_ms: 0
            }
        )
    );
    let one_over = format!("{exactly_max} ");
    assert_rejected(
        one_over.as_bytes(),
        None,
        ErrorCode::TooLarge,
        "payload is 8193 bytes, the maximum is 8192",
    );
    assert_eq!(
        to_json(&decode_err(one_over.as_bytes()).to_response().encode()),
        json!({"id": null, "ok": false, "error": {"code": "too_large",
               "message": "payload is 8193 bytes, the maximum is 8192"}})
    );
    // Size is checked before anything else: even garbage is too_large, not bad_request.
    assert_rejected(
        &[0xff; 10_000],
        None,
        ErrorCode::TooLarge,
        "payload is 10000 bytes, the maximum is 8192",
    );
}

#[test]
fn error_code_lease_not_found() {
    assert_error_golden(
        Some("7"),
        ErrorCode::LeaseNotFound,
        "lease \"L-17\" not found",
        r#"{"id":"7","ok":false,"error":{"code":"lease_not_found",
            "message":"lease \"L-17\" not found"}}"#,
    );
}

#[test]
fn error_code_not_holder() {
    assert_error_golden(
        Some("7"),
        ErrorCode::NotHolder,
        "lease does not hold lock \"door\"",
        r#"{"id":"7","ok":false,"error":{"code":"not_holder",
            "message":"lease does not hold lock \"door\""}}"#,
    );
}

#[test]
fn error_code_would_block() {
    assert_error_golden(
        Some("7"),
        ErrorCode::WouldBlock,
        "lock \"door\" is held",
        r#"{"id":"7","ok":false,"error":{"code":"would_block",
            "message":"lock \"door\" is held"}}"#,
    );
}

#[test]
fn error_code_timeout() {
    assert_error_golden(
        Some("7"),
        ErrorCode::Timeout,
        "not granted within 2500 ms",
        r#"{"id":"7","ok":false,"error":{"code":"timeout",
            "message":"not granted within 2500 ms"}}"#,
    );
}

#[test]
fn error_code_limit_mismatch() {
    assert_error_golden(
        Some("7"),
        ErrorCode::LimitMismatch,
        "semaphore \"chargers\" has limit 4, not 5",
        r#"{"id":"7","ok":false,"error":{"code":"limit_mismatch",
            "message":"semaphore \"chargers\" has limit 4, not 5"}}"#,
    );
}

#[test]
fn error_code_unavailable() {
    assert_error_golden(
        Some("7"),
        ErrorCode::Unavailable,
        "no leader",
        r#"{"id":"7","ok":false,"error":{"code":"unavailable","message":"no leader"}}"#,
    );
}

#[test]
fn error_code_forbidden() {
    assert_error_golden(
        Some("7"),
        ErrorCode::Forbidden,
        "lease \"L-17\" belongs to another agent",
        r#"{"id":"7","ok":false,"error":{"code":"forbidden",
            "message":"lease \"L-17\" belongs to another agent"}}"#,
    );
}

#[test]
fn error_code_resource_exhausted() {
    assert_error_golden(
        Some("7"),
        ErrorCode::ResourceExhausted,
        "too many waiters on lock \"door\"",
        r#"{"id":"7","ok":false,"error":{"code":"resource_exhausted",
            "message":"too many waiters on lock \"door\""}}"#,
    );
}

#[test]
fn error_code_rate_limited() {
    assert_error_golden(
        Some("7"),
        ErrorCode::RateLimited,
        "agent drone-7 is over its request rate: rate_per_s_max is 500 a second, \
         rate_burst_max 1000; retry with backoff",
        r#"{"id":"7","ok":false,"error":{"code":"rate_limited",
            "message":"agent drone-7 is over its request rate: rate_per_s_max is 500 a second, rate_burst_max 1000; retry with backoff"}}"#,
    );
}

#[test]
fn every_code_has_a_golden_error_response() {
    for code in ErrorCode::ALL {
        assert_error_golden(
            Some("7"),
            code,
            "m",
            &format!(
                r#"{{"id":"7","ok":false,"error":{{"code":"{}","message":"m"}}}}"#,
                wire_name(code)
            ),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// bad_request: everything the decoder rejects
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_request_envelope_without_readable_id() {
    // Malformed JSON: id null.
    assert_bad_request_mentions(r#"{"id":"7","op":"#, None, "malformed JSON: ", &["EOF"]);
    assert_bad_request_mentions("", None, "malformed JSON: ", &[]);
    assert_bad_request_mentions("not json", None, "malformed JSON: ", &[]);
    let err = decode_err(&[b'{', 0xff, b'}']);
    assert_eq!(
        (err.id, err.code),
        (None, ErrorCode::BadRequest),
        "invalid UTF-8"
    );
    // A number JSON cannot hold is malformed JSON too.
    assert_bad_request_mentions(
        r#"{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","lat":1e400,"lon":0}"#,
        None,
        "malformed JSON: ",
        &["number out of range"],
    );
    // Not an object.
    bad(r#""lease.grant""#, None, "a request must be a JSON object");
    bad("null", None, "a request must be a JSON object");
    bad("42", None, "a request must be a JSON object");
    // Missing id, non-string id.
    bad(
        r#"{"op":"lease.grant","ttl_ms":1000}"#,
        None,
        "missing field `id`",
    );
    bad(
        r#"{"id":7,"op":"lease.grant","ttl_ms":1000}"#,
        None,
        "`id` must be a string",
    );
    bad(
        r#"{"id":null,"op":"lease.grant","ttl_ms":1000}"#,
        None,
        "`id` must be a string",
    );
    bad(
        r#"{"id":["7"],"op":"lease.grant","ttl_ms":1000}"#,
        None,
        "`id` must be a string",
    );
}

#[test]
fn bad_request_request_ids() {
    let with_id = |id: &str| {
        format!(
            r#"{{"id":{},"op":"lease.grant","ttl_ms":1000}}"#,
            serde_json::to_string(id).expect("string")
        )
    };
    bad(&with_id(""), None, "`id` must not be empty");
    let max = "i".repeat(REQUEST_ID_BYTES_MAX);
    assert_eq!(decode_ok(&with_id(&max)).id, max);
    bad(
        &with_id(&"i".repeat(REQUEST_ID_BYTES_MAX + 1)),
        None,
        "`id` is 129 bytes long, the maximum is 128",
    );
    // The bound is in bytes: 64 two-byte characters fit, 65 do not.
    let wide = "é".repeat(64);
    assert_eq!(decode_ok(&with_id(&wide)).id, wide);
    bad(
        &with_id(&"é".repeat(65)),
        None,
        "`id` is 130 bytes long, the maximum is 128",
    );
    for control in [
        "a\nb",
        "\u{0}",
        "tab\t",
        "bell\u{7}",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        bad(
            &with_id(control),
            None,
            "`id` must not contain control characters",
        );
    }
    // Any other text is a fine id.
    assert_eq!(decode_ok(&with_id("req 1/ä+#")).id, "req 1/ä+#");
}

#[test]
fn bad_request_op_field() {
    bad(r#"{"id":"7"}"#, Some("7"), "missing field `op`");
    bad(r#"{"id":"7","op":5}"#, Some("7"), "`op` must be a string");
    bad(
        r#"{"id":"7","op":null}"#,
        Some("7"),
        "`op` must be a string",
    );
}

#[test]
fn bad_request_missing_fields() {
    for (wire, field) in [
        (r#"{"id":"7","op":"lease.grant"}"#, "ttl_ms"),
        (r#"{"id":"7","op":"lease.keepalive"}"#, "lease"),
        (r#"{"id":"7","op":"lease.revoke"}"#, "lease"),
        (r#"{"id":"7","op":"lock.acquire","lease":"L"}"#, "name"),
        (r#"{"id":"7","op":"lock.release","name":"n"}"#, "lease"),
        (
            r#"{"id":"7","op":"sem.acquire","name":"n","lease":"L"}"#,
            "limit",
        ),
        (r#"{"id":"7","op":"sem.release","lease":"L"}"#, "name"),
        (r#"{"id":"7","op":"waypoint.reserve","name":"n"}"#, "lease"),
        (r#"{"id":"7","op":"waypoint.release","lease":"L"}"#, "name"),
        (r#"{"id":"7","op":"fence.check","name":"r"}"#, "token"),
        (r#"{"id":"7","op":"fence.check","token":1}"#, "name"),
        (r#"{"id":"7","op":"inspect","name":"n"}"#, "kind"),
        (r#"{"id":"7","op":"inspect","kind":"lock"}"#, "name"),
    ] {
        let op: Value = serde_json::from_str::<Value>(wire).expect("json")["op"].clone();
        let op = op.as_str().expect("op");
        bad(wire, Some("7"), &format!("{op}: missing field `{field}`"));
    }
}

#[test]
fn bad_request_wrong_types() {
    for (wire, prefix, mentions) in [
        (
            r#"{"id":"7","op":"lease.grant","ttl_ms":"1000"}"#,
            "lease.grant: ",
            &["invalid type", "u64"][..],
        ),
        (
            r#"{"id":"7","op":"lease.grant","ttl_ms":1e3}"#,
            "lease.grant: ",
            &["invalid type", "floating point"][..],
        ),
        (
            r#"{"id":"7","op":"lease.grant","ttl_ms":-1}"#,
            "lease.grant: ",
            &["-1", "u64"][..],
        ),
        (
            r#"{"id":"7","op":"lease.keepalive","lease":17}"#,
            "lease.keepalive: ",
            &["invalid type", "string"][..],
        ),
        (
            r#"{"id":"7","op":"lock.acquire","name":"n","lease":null}"#,
            "lock.acquire: ",
            &["invalid type", "null"][..],
        ),
        (
            r#"{"id":"7","op":"lock.acquire","name":"n","lease":"L","wait_ms":-5}"#,
            "lock.acquire: ",
            &["-5", "u64"][..],
        ),
        (
            r#"{"id":"7","op":"sem.acquire","name":"n","limit":4294967296,"lease":"L"}"#,
            "sem.acquire: ",
            &["4294967296", "u32"][..],
        ),
        (
            r#"{"id":"7","op":"sem.acquire","name":"n","limit":2,"lease":"L","permits":null}"#,
            "sem.acquire: ",
            &["null", "u32"][..],
        ),
        (
            r#"{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","lat":"47","lon":8}"#,
            "waypoint.reserve: ",
            &["invalid type", "f64"][..],
        ),
        (
            r#"{"id":"7","op":"fence.check","resource":"r","token":1.5}"#,
            "fence.check: ",
            &["invalid type", "u64"][..],
        ),
        (
            r#"{"id":"7","op":"fence.check","resource":"r","token":1,"kind":"disk"}"#,
            "fence.check: ",
            &["unknown variant `disk`"][..],
        ),
        (
            r#"{"id":"7","op":"inspect","kind":"Lock","name":"n"}"#,
            "inspect: ",
            &["unknown variant `Lock`"][..],
        ),
        (
            r#"{"id":"7","op":"inspect","kind":null,"name":"n"}"#,
            "inspect: ",
            &["null"][..],
        ),
    ] {
        assert_bad_request_mentions(wire, Some("7"), prefix, mentions);
    }
}

#[test]
fn bad_request_unknown_fields() {
    for (wire, prefix, field) in [
        (
            r#"{"id":"7","op":"lease.grant","ttl_ms":1000,"ttl":5}"#,
            "lease.grant: ",
            "ttl",
        ),
        (
            r#"{"id":"7","op":"lock.acquire","name":"n","lease":"L","wiat_ms":5}"#,
            "lock.acquire: ",
            "wiat_ms",
        ),
        (
            r#"{"id":"7","op":"lock.release","name":"n","lease":"L","token":3}"#,
            "lock.release: ",
            "token",
        ),
        (
            r#"{"id":"7","op":"sem.acquire","name":"n","limit":2,"lease":"L","permit":1}"#,
            "sem.acquire: ",
            "permit",
        ),
        (
            r#"{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","lat":1,"lon":2,
                "radius":5}"#,
            "waypoint.reserve: ",
            "radius",
        ),
        (
            r#"{"id":"7","op":"fence.check","name":"r","token":1,"lease":"L"}"#,
            "fence.check: ",
            "lease",
        ),
        (
            r#"{"id":"7","op":"inspect","kind":"lock","name":"n","lease":"L"}"#,
            "inspect: ",
            "lease",
        ),
        // A field of another op is unknown too; so are envelope-looking extras.
        (
            r#"{"id":"7","op":"lease.keepalive","lease":"L","ok":true}"#,
            "lease.keepalive: ",
            "ok",
        ),
    ] {
        assert_bad_request_mentions(
            wire,
            Some("7"),
            prefix,
            &[&format!("unknown field `{field}`")],
        );
    }
    // The exact serde wording for one case, so the typo hint stays useful.
    bad(
        r#"{"id":"7","op":"lock.acquire","name":"n","lease":"L","wiat_ms":5}"#,
        Some("7"),
        "lock.acquire: unknown field `wiat_ms`, expected one of `name`, `lease`, `wait_ms`, \
         `max_hold_ms`, `mode`",
    );
}

#[test]
fn bad_request_names_and_leases() {
    let release = |name: &str, lease: &str| {
        format!(
            r#"{{"id":"7","op":"lock.release","name":{},"lease":{}}}"#,
            serde_json::to_string(name).expect("string"),
            serde_json::to_string(lease).expect("string")
        )
    };
    bad(
        &release("", "L"),
        Some("7"),
        "lock.release: `name` must not be empty",
    );
    bad(
        &release("n", ""),
        Some("7"),
        "lock.release: `lease` must not be empty",
    );
    let max = "n".repeat(NAME_BYTES_MAX);
    assert_eq!(
        decode_ok(&release(&max, "L")).op,
        Op::LockRelease {
            name: max.clone(),
            lease: "L".into()
        }
    );
    bad(
        &release(&"n".repeat(NAME_BYTES_MAX + 1), "L"),
        Some("7"),
        "lock.release: `name` is 257 bytes long, the maximum is 256",
    );
    bad(
        &release("n", &"L".repeat(NAME_BYTES_MAX + 1)),
        Some("7"),
        "lock.release: `lease` is 257 bytes long, the maximum is 256",
    );
    // Bytes, not characters: 128 two-byte characters fit, 129 do not.
    assert!(Request::decode(release(&"ü".repeat(128), "L").as_bytes()).is_ok());
    bad(
        &release(&"ü".repeat(129), "L"),
        Some("7"),
        "lock.release: `name` is 258 bytes long, the maximum is 256",
    );
    bad(
        &release("line\nbreak", "L"),
        Some("7"),
        "lock.release: `name` must not contain control characters",
    );
    bad(
        &release("n", "L\u{0}"),
        Some("7"),
        "lock.release: `lease` must not contain control characters",
    );
    // Slashes, spaces, wildcards and non-ASCII are fine in names: they never become topics.
    assert!(Request::decode(release("gateway/config + #1 ü", "L").as_bytes()).is_ok());
    // The same checks for every field that names something.
    bad(
        r#"{"id":"7","op":"fence.check","resource":"","token":1}"#,
        Some("7"),
        "fence.check: `name` must not be empty",
    );
    bad(
        r#"{"id":"7","op":"inspect","kind":"sem","name":""}"#,
        Some("7"),
        "inspect: `name` must not be empty",
    );
    bad(
        r#"{"id":"7","op":"sem.acquire","name":"","limit":1,"lease":"L"}"#,
        Some("7"),
        "sem.acquire: `name` must not be empty",
    );
    bad(
        r#"{"id":"7","op":"waypoint.reserve","name":"","lease":"L"}"#,
        Some("7"),
        "waypoint.reserve: `name` must not be empty",
    );
    bad(
        r#"{"id":"7","op":"lease.keepalive","lease":""}"#,
        Some("7"),
        "lease.keepalive: `lease` must not be empty",
    );
    bad(
        r#"{"id":"7","op":"lease.revoke","lease":""}"#,
        Some("7"),
        "lease.revoke: `lease` must not be empty",
    );
}

#[test]
fn bad_request_ttl_and_wait() {
    bad(
        r#"{"id":"7","op":"lease.grant","ttl_ms":0}"#,
        Some("7"),
        "lease.grant: `ttl_ms` must be positive",
    );
    // Any positive ttl passes the decoder; the service's configured range is checked there.
    assert!(Request::decode(br#"{"id":"7","op":"lease.grant","ttl_ms":1}"#).is_ok());
    for op in [
        r#""op":"lock.acquire","name":"n","lease":"L""#,
        r#""op":"sem.acquire","name":"n","limit":1,"lease":"L""#,
        r#""op":"waypoint.reserve","name":"n","lease":"L""#,
    ] {
        bounded_field(
            op,
            r#""wait_ms":86400000"#,
            r#""wait_ms":86400001"#,
            "`wait_ms` is 86400001, the maximum is 86400000 (one day); omit it to wait while \
             the lease lives",
        );
    }
}

/// A request of `op` (its name and fields, without `id`) with `accepted` decodes, and with
/// `refused` is `bad_request` with the op's name and `why`.
fn bounded_field(op: &str, accepted: &str, refused: &str, why: &str) {
    let name = op.split('"').nth(3).expect("op name");
    assert!(Request::decode(format!(r#"{{"id":"7",{op},{accepted}}}"#).as_bytes()).is_ok());
    bad(
        &format!(r#"{{"id":"7",{op},{refused}}}"#),
        Some("7"),
        &format!("{name}: {why}"),
    );
}

#[test]
fn bad_request_lock_delay_and_max_hold() {
    bounded_field(
        r#""op":"lease.grant","ttl_ms":1"#,
        r#""lock_delay_ms":60000"#,
        r#""lock_delay_ms":60001"#,
        "`lock_delay_ms` is 60001, the maximum is 60000 (one minute)",
    );
    for op in [
        r#""op":"lock.acquire","name":"n","lease":"L""#,
        r#""op":"lock.acquire_all","names":["n"],"lease":"L""#,
        r#""op":"sem.acquire","name":"n","limit":1,"lease":"L""#,
    ] {
        // Any positive bound passes the decoder; the service's longest TTL is checked there.
        bounded_field(
            op,
            r#""max_hold_ms":1"#,
            r#""max_hold_ms":0"#,
            "`max_hold_ms` must be positive; omit it for no bound",
        );
    }
    // Only locks, multi-locks and semaphores take a bound.
    assert_bad_request_mentions(
        r#"{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","max_hold_ms":5}"#,
        Some("7"),
        "waypoint.reserve: ",
        &["unknown field `max_hold_ms`"],
    );
}

#[test]
fn bad_request_semaphore_ranges() {
    let sem = |limit: u64, permits: u64| {
        format!(
            r#"{{"id":"7","op":"sem.acquire","name":"s","limit":{limit},"lease":"L","permits":{permits}}}"#
        )
    };
    bad(
        &sem(0, 1),
        Some("7"),
        "sem.acquire: `limit` is 0, it must be in [1, 1000000]",
    );
    bad(
        &sem(1_000_001, 1),
        Some("7"),
        "sem.acquire: `limit` is 1000001, it must be in [1, 1000000]",
    );
    bad(
        &sem(4, 0),
        Some("7"),
        "sem.acquire: `permits` is 0, it must be in [1, limit = 4]",
    );
    bad(
        &sem(4, 5),
        Some("7"),
        "sem.acquire: `permits` is 5, it must be in [1, limit = 4]",
    );
    assert!(Request::decode(sem(1, 1).as_bytes()).is_ok());
    assert!(Request::decode(sem(4, 4).as_bytes()).is_ok());
}

#[test]
fn bad_request_waypoint_geometry() {
    let reserve = |geometry: &str| {
        format!(r#"{{"id":"7","op":"waypoint.reserve","name":"w","lease":"L",{geometry}}}"#)
    };
    let cases = [
        (
            r#""lat":90.5,"lon":0"#,
            "`lat` is 90.5, it must be in [-90, 90]",
        ),
        (
            r#""lat":-91,"lon":0"#,
            "`lat` is -91, it must be in [-90, 90]",
        ),
        (
            r#""lat":0,"lon":180.5"#,
            "`lon` is 180.5, it must be in [-180, 180]",
        ),
        (
            r#""lat":0,"lon":-200"#,
            "`lon` is -200, it must be in [-180, 180]",
        ),
        (
            r#""lat":47"#,
            "`lat` and `lon` go together: give both or neither",
        ),
        (
            r#""lon":8,"radius_m":5"#,
            "`lat` and `lon` go together: give both or neither",
        ),
        (
            r#""radius_m":5"#,
            "`radius_m`, `alt_min_m` and `alt_max_m` need `lat` and `lon`",
        ),
        (
            r#""alt_min_m":0"#,
            "`radius_m`, `alt_min_m` and `alt_max_m` need `lat` and `lon`",
        ),
        (
            r#""alt_max_m":100"#,
            "`radius_m`, `alt_min_m` and `alt_max_m` need `lat` and `lon`",
        ),
        (
            r#""lat":0,"lon":0,"radius_m":-1"#,
            "`radius_m` is -1, it must be in [0, 10000]",
        ),
        (
            r#""lat":0,"lon":0,"radius_m":10000.5"#,
            "`radius_m` is 10000.5, it must be in [0, 10000]",
        ),
        (
            r#""lat":0,"lon":0,"alt_min_m":-1000.5"#,
            "`alt_min_m` is -1000.5, it must be in [-1000, 100000]",
        ),
        (
            r#""lat":0,"lon":0,"alt_max_m":100000.5"#,
            "`alt_max_m` is 100000.5, it must be in [-1000, 100000]",
        ),
        (
            r#""lat":0,"lon":0,"alt_min_m":120,"alt_max_m":30"#,
            "`alt_min_m` (120) is above `alt_max_m` (30)",
        ),
    ];
    for (geometry, message) in cases {
        bad(
            &reserve(geometry),
            Some("7"),
            &format!("waypoint.reserve: {message}"),
        );
    }
}

/// The `Deserialize` impl (used to read requests back from the Raft log) validates exactly
/// like `Request::decode`.
#[test]
fn deserialize_validates_like_decode() {
    let invalid = json!({"id": "7", "op": "sem.acquire", "name": "s", "limit": 2,
                         "lease": "L", "permits": 3});
    let err = serde_json::from_value::<Request>(invalid).expect_err("permits > limit");
    assert!(
        err.to_string()
            .contains("sem.acquire: `permits` is 3, it must be in [1, limit = 2]"),
        "{err}"
    );
    let unknown = json!({"id": "7", "op": "lock.steal"});
    assert!(serde_json::from_value::<Request>(unknown).is_err());
}

// ---------------------------------------------------------------------------------------------
// Success responses
// ---------------------------------------------------------------------------------------------

/// `response.encode()` is exactly `golden`, and `golden` decodes back to `response`.
fn assert_response_golden(response: &Response, golden: &Value) {
    assert_eq!(&to_json(&response.encode()), golden);
    let decoded = Response::decode(golden.to_string().as_bytes()).expect("golden response decodes");
    assert_eq!(&decoded, response);
    let via_serde: Response = serde_json::from_value(golden.clone()).expect("Deserialize");
    assert_eq!(&via_serde, response);
}

#[test]
fn success_admin_status_of_a_leader_and_a_follower() {
    let leader = NodeStatus {
        node_id: 1,
        term: 3,
        is_leader: true,
        leader_id: Some(1),
        last_log_index: Some(120),
        committed_index: Some(120),
        applied_index: Some(119),
        snapshot_index: Some(100),
        purged_index: Some(90),
        members: vec![
            MemberInfo {
                id: 1,
                name: "n1".into(),
                addr: "10.0.0.1:7400".into(),
                voter: true,
            },
            MemberInfo {
                id: 2,
                name: "n2".into(),
                addr: "10.0.0.2:7400".into(),
                voter: false,
            },
        ],
        replication: Some(vec![
            ReplicationInfo {
                id: 1,
                matched_index: Some(120),
            },
            ReplicationInfo {
                id: 2,
                matched_index: None,
            },
        ]),
        has_quorum: Some(true),
        quorum_ack_age_ms: Some(40),
        cluster_version: Some(2),
    };
    assert_response_golden(
        &Response::ok(
            "r27",
            StatusReport {
                status: Box::new(leader),
            },
        ),
        &json!({"id": "r27", "ok": true, "status": {
            "node_id": 1, "term": 3, "is_leader": true, "leader_id": 1,
            "last_log_index": 120, "committed_index": 120, "applied_index": 119,
            "snapshot_index": 100, "purged_index": 90,
            "members": [{"id": 1, "name": "n1", "addr": "10.0.0.1:7400", "voter": true},
                        {"id": 2, "name": "n2", "addr": "10.0.0.2:7400", "voter": false}],
            "replication": [{"id": 1, "matched_index": 120}, {"id": 2}],
            "has_quorum": true, "quorum_ack_age_ms": 40, "cluster_version": 2}}),
    );
    // A follower that knows no leader and has an empty log: absent, not null or 0.
    let lost = NodeStatus {
        node_id: 2,
        term: 4,
        is_leader: false,
        leader_id: None,
        last_log_index: None,
        committed_index: None,
        applied_index: None,
        snapshot_index: None,
        purged_index: None,
        members: vec![],
        replication: None,
        has_quorum: None,
        quorum_ack_age_ms: None,
        cluster_version: None,
    };
    assert_response_golden(
        &Response::ok(
            "r28",
            StatusReport {
                status: Box::new(lost),
            },
        ),
        &json!({"id": "r28", "ok": true, "status": {
            "node_id": 2, "term": 4, "is_leader": false, "members": []}}),
    );
}

#[test]
fn success_admin_leases() {
    let page = Success::from(LeasePage {
        leases: vec![
            LeaseInfo {
                lease: "0000000000000011".into(),
                agent: "drone-7".into(),
                ttl_ms: 5000,
                remaining_ms: Some(3120),
            },
            LeaseInfo {
                lease: "0000000000000012".into(),
                agent: "drone-8".into(),
                ttl_ms: 10000,
                remaining_ms: None,
            },
        ],
        next_after: Some("0000000000000012".into()),
    });
    assert_response_golden(
        &Response::ok("r29", page),
        &json!({"id": "r29", "ok": true,
            "leases": [
                {"lease": "0000000000000011", "agent": "drone-7", "ttl_ms": 5000,
                 "remaining_ms": 3120},
                {"lease": "0000000000000012", "agent": "drone-8", "ttl_ms": 10000}],
            "next_after": "0000000000000012"}),
    );
    // The last page: no `next_after`; no leases at all: an empty list.
    let last = Success::from(LeasePage {
        leases: vec![],
        next_after: None,
    });
    assert_response_golden(
        &Response::ok("r30", last),
        &json!({"id": "r30", "ok": true, "leases": []}),
    );
}

#[test]
fn success_admin_agent_add_rotate_and_list() {
    let added = Success::from(AccountIssued {
        agent: "drone-7".into(),
        role: Role::Agent,
        secret: Some("5e".repeat(32)),
    });
    assert_response_golden(
        &Response::ok("r31", added),
        &json!({"id": "r31", "ok": true, "agent": "drone-7", "role": "agent",
            "secret": "5e".repeat(32)}),
    );
    // A same-id retry: the account, without the secret (only the lost answer had it).
    let retried = Success::from(AccountIssued {
        agent: "drone-7".into(),
        role: Role::Observer,
        secret: None,
    });
    assert_response_golden(
        &Response::ok("r31", retried),
        &json!({"id": "r31", "ok": true, "agent": "drone-7", "role": "observer"}),
    );
    let page = Success::from(AccountPage {
        accounts: vec![
            AccountInfo {
                agent: "admin".into(),
                role: Role::Admin,
                kv_read: Vec::new(),
                kv_write: Vec::new(),
            },
            AccountInfo {
                agent: "drone-7".into(),
                role: Role::Agent,
                kv_read: Vec::new(),
                kv_write: Vec::new(),
            },
        ],
        next_after: Some("drone-7".into()),
    });
    assert_response_golden(
        &Response::ok("r33", page),
        &json!({"id": "r33", "ok": true,
            "accounts": [{"agent": "admin", "role": "admin"}, {"agent": "drone-7", "role": "agent"}],
            "next_after": "drone-7"}),
    );
    let limited = Success::from(AccountPage {
        accounts: vec![AccountInfo {
            agent: "drone-8".into(),
            role: Role::Agent,
            kv_read: vec!["presence/".into(), "cfg/".into()],
            kv_write: vec!["presence/".into()],
        }],
        next_after: None,
    });
    assert_response_golden(
        &Response::ok("r37", limited),
        &json!({"id": "r37", "ok": true, "accounts": [{"agent": "drone-8", "role": "agent",
            "kv_read": ["presence/", "cfg/"], "kv_write": ["presence/"]}]}),
    );
}

#[test]
fn inspect_holder_without_lease_leaves_the_field_out() {
    let holder = HolderInfo {
        agent: "other".into(),
        lease: String::new(),
        token: 9,
        permits: None,
        since_ms: 5,
        area: None,
        start_ms: None,
        end_ms: None,
        volumes: Vec::new(),
        priority: None,
        vacate_by_ms: None,
        mode: LockMode::Exclusive,
        value: None,
    };
    let value = serde_json::to_value(&holder).expect("encodes");
    assert_eq!(value, json!({"agent": "other", "token": 9, "since_ms": 5}));
    let back: HolderInfo = serde_json::from_value(value).expect("decodes");
    assert_eq!(back, holder);
}

#[test]
fn success_lease_grant() {
    assert_response_golden(
        &Response::ok(
            "r1",
            LeaseGranted {
                lease: "L-17".into(),
                ttl_ms: 5000,
            },
        ),
        &json!({"id": "r1", "ok": true, "lease": "L-17", "ttl_ms": 5000}),
    );
}

#[test]
fn success_keepalive_ttl() {
    assert_response_golden(
        &Response::ok("r2", LeaseKept { ttl_ms: 5000 }),
        &json!({"id": "r2", "ok": true, "ttl_ms": 5000}),
    );
}

#[test]
fn success_token() {
    assert_response_golden(
        &Response::ok("r4", Granted { token: 42 }),
        &json!({"id": "r4", "ok": true, "token": 42}),
    );
    assert_response_golden(
        &Response::ok("r4", Granted { token: u64::MAX }),
        &json!({"id": "r4", "ok": true, "token": 18_446_744_073_709_551_615_u64}),
    );
}

#[test]
fn success_empty_for_release_and_revoke() {
    let response = Response::ok("r8", Done {});
    assert_eq!(
        String::from_utf8(response.encode()).expect("utf-8"),
        r#"{"id":"r8","ok":true}"#
    );
    assert_response_golden(&response, &json!({"id": "r8", "ok": true}));
}

#[test]
fn success_fence_check() {
    assert_response_golden(
        &Response::ok(
            "r19",
            FenceStatus {
                current: 42,
                valid: true,
            },
        ),
        &json!({"id": "r19", "ok": true, "current": 42, "valid": true}),
    );
    // A free resource: current 0, nothing is valid.
    assert_response_golden(
        &Response::ok(
            "r20",
            FenceStatus {
                current: 0,
                valid: false,
            },
        ),
        &json!({"id": "r20", "ok": true, "current": 0, "valid": false}),
    );
}

/// A waypoint's holder and waiter carry their time window (`start_ms`, and `end_ms` when it has
/// an end); both are absent for a reservation without a window. A route's carry its `volumes`.
#[test]
fn success_inspect_waypoint_with_windows() {
    let response = Response::ok(
        "r23w",
        Inspection {
            limit: None,
            count: None,
            leaving: None,
            holders: vec![HolderInfo {
                agent: "drone-7".into(),
                lease: "L-17".into(),
                token: 42,
                permits: None,
                since_ms: 1000,
                area: None,
                start_ms: Some(5_000),
                end_ms: Some(9_000),
                volumes: Vec::new(),
                priority: None,
                vacate_by_ms: None,
                mode: LockMode::Exclusive,
                value: None,
            }],
            waiters: vec![
                WaiterInfo {
                    agent: "drone-9".into(),
                    position: 1,
                    permits: None,
                    since_ms: 1100,
                    area: None,
                    start_ms: Some(1_100),
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    mode: LockMode::Exclusive,
                    value: None,
                },
                WaiterInfo {
                    agent: "drone-3".into(),
                    position: 2,
                    permits: None,
                    since_ms: 1200,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: vec![Volume {
                        lat: 1.5,
                        lon: 2.5,
                        radius_m: 10.0,
                        alt_min_m: 0.0,
                        alt_max_m: 90.0,
                        start_ms: 2_000,
                        end_ms: 3_000,
                    }],
                    priority: None,
                    mode: LockMode::Exclusive,
                    value: None,
                },
            ],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r23w",
            "ok": true,
            "holders": [{"agent": "drone-7", "lease": "L-17", "token": 42, "since_ms": 1000,
                         "start_ms": 5000, "end_ms": 9000}],
            "waiters": [{"agent": "drone-9", "position": 1, "since_ms": 1100, "start_ms": 1100},
                        {"agent": "drone-3", "position": 2, "since_ms": 1200, "volumes": [
                            {"lat": 1.5, "lon": 2.5, "radius_m": 10.0, "alt_min_m": 0.0,
                             "alt_max_m": 90.0, "start_ms": 2000, "end_ms": 3000}]}]
        }),
    );
}

/// A waypoint's holder and waiter carry the cylinder they reserve or ask for (`area`, absent
/// for a name-only reservation); an unbounded altitude side is `null`.
#[test]
fn success_inspect_waypoint_with_geometry() {
    let pad = Area {
        lat: 51.5,
        lon: -0.1,
        radius_m: 3.0,
        alt_min_m: None,
        alt_max_m: Some(120.0),
    };
    let response = Response::ok(
        "r23",
        Inspection {
            limit: None,
            count: None,
            leaving: None,
            holders: vec![HolderInfo {
                agent: "drone-7".into(),
                lease: "L-17".into(),
                token: 42,
                permits: None,
                since_ms: 1000,
                area: Some(pad),
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                vacate_by_ms: None,
                mode: LockMode::Exclusive,
                value: None,
            }],
            waiters: vec![WaiterInfo {
                agent: "drone-9".into(),
                position: 1,
                permits: None,
                since_ms: 1100,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                mode: LockMode::Exclusive,
                value: None,
            }],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r23",
            "ok": true,
            "holders": [{"agent": "drone-7", "lease": "L-17", "token": 42, "since_ms": 1000,
                         "area": {"lat": 51.5, "lon": -0.1, "radius_m": 3.0,
                                  "alt_min_m": null, "alt_max_m": 120.0}}],
            "waiters": [{"agent": "drone-9", "position": 1, "since_ms": 1100}]
        }),
    );
}

#[test]
fn success_inspect_lock() {
    let response = Response::ok(
        "r22",
        Inspection {
            limit: None,
            count: None,
            leaving: None,
            holders: vec![HolderInfo {
                agent: "drone-7".into(),
                lease: "L-17".into(),
                token: 42,
                permits: None,
                since_ms: 1_764_500_000_000,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                vacate_by_ms: None,
                mode: LockMode::Exclusive,
                value: None,
            }],
            waiters: vec![
                WaiterInfo {
                    agent: "drone-9".into(),
                    position: 1,
                    permits: None,
                    since_ms: 1_764_500_000_100,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    mode: LockMode::Exclusive,
                    value: None,
                },
                WaiterInfo {
                    agent: "drone-3".into(),
                    position: 2,
                    permits: None,
                    since_ms: 1_764_500_000_200,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    mode: LockMode::Exclusive,
                    value: None,
                },
            ],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r22",
            "ok": true,
            "holders": [
                {"agent": "drone-7", "lease": "L-17", "token": 42, "since_ms": 1_764_500_000_000_u64}
            ],
            "waiters": [
                {"agent": "drone-9", "position": 1, "since_ms": 1_764_500_000_100_u64},
                {"agent": "drone-3", "position": 2, "since_ms": 1_764_500_000_200_u64}
            ]
        }),
    );
}

/// A lock held shared: each holder and each shared waiter says `"mode":"shared"`; an
/// exclusive waiter says nothing, as in its request.
#[test]
fn success_inspect_lock_held_shared() {
    let holder = |agent: &str, lease: &str, token: u64| HolderInfo {
        agent: agent.into(),
        lease: lease.into(),
        token,
        permits: None,
        since_ms: 1_764_500_000_000,
        area: None,
        start_ms: None,
        end_ms: None,
        volumes: Vec::new(),
        priority: None,
        vacate_by_ms: None,
        mode: LockMode::Shared,
        value: None,
    };
    let waiter = |agent: &str, position: u32, mode: LockMode| WaiterInfo {
        agent: agent.into(),
        position,
        permits: None,
        since_ms: 1_764_500_000_100,
        area: None,
        start_ms: None,
        end_ms: None,
        volumes: Vec::new(),
        priority: None,
        mode,
        value: None,
    };
    let response = Response::ok(
        "r22s",
        Inspection {
            limit: None,
            holders: vec![holder("drone-7", "L-17", 42), holder("drone-8", "L-18", 43)],
            waiters: vec![
                waiter("drone-9", 1, LockMode::Exclusive),
                waiter("drone-3", 2, LockMode::Shared),
            ],
            holders_total: None,
            waiters_total: None,
            count: None,
            leaving: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r22s",
            "ok": true,
            "holders": [
                {"agent": "drone-7", "lease": "L-17", "token": 42,
                 "since_ms": 1_764_500_000_000_u64, "mode": "shared"},
                {"agent": "drone-8", "lease": "L-18", "token": 43,
                 "since_ms": 1_764_500_000_000_u64, "mode": "shared"}
            ],
            "waiters": [
                {"agent": "drone-9", "position": 1, "since_ms": 1_764_500_000_100_u64},
                {"agent": "drone-3", "position": 2, "since_ms": 1_764_500_000_100_u64,
                 "mode": "shared"}
            ]
        }),
    );
}

#[test]
fn success_inspect_sem() {
    let response = Response::ok(
        "r23",
        Inspection {
            limit: Some(4),
            count: None,
            leaving: None,
            holders: vec![
                HolderInfo {
                    agent: "drone-7".into(),
                    lease: "L-17".into(),
                    token: 40,
                    permits: Some(1),
                    since_ms: 1000,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    vacate_by_ms: None,
                    mode: LockMode::Exclusive,
                    value: None,
                },
                HolderInfo {
                    agent: "drone-8".into(),
                    lease: "L-18".into(),
                    token: 41,
                    permits: Some(2),
                    since_ms: 1001,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    vacate_by_ms: None,
                    mode: LockMode::Exclusive,
                    value: None,
                },
            ],
            waiters: vec![WaiterInfo {
                agent: "drone-9".into(),
                position: 1,
                permits: Some(3),
                since_ms: 1002,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                mode: LockMode::Exclusive,
                value: None,
            }],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r23",
            "ok": true,
            "limit": 4,
            "holders": [
                {"agent": "drone-7", "lease": "L-17", "token": 40, "permits": 1, "since_ms": 1000},
                {"agent": "drone-8", "lease": "L-18", "token": 41, "permits": 2, "since_ms": 1001}
            ],
            "waiters": [
                {"agent": "drone-9", "position": 1, "permits": 3, "since_ms": 1002}
            ]
        }),
    );
}

#[test]
fn success_inspect_free_resource() {
    // Nobody holds or waits: empty arrays, not absent fields.
    let response = Response::ok(
        "r24",
        Inspection {
            limit: None,
            count: None,
            leaving: None,
            holders: vec![],
            waiters: vec![],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({"id": "r24", "ok": true, "holders": [], "waiters": []}),
    );
}

#[test]
fn failure_without_id_golden() {
    assert_response_golden(
        &Response::error(None, ErrorCode::BadRequest, "missing field `id`"),
        &json!({"id": null, "ok": false,
                "error": {"code": "bad_request", "message": "missing field `id`"}}),
    );
}

#[test]
fn response_decode_rejects_inconsistent_ok() {
    let ok_with_error = br#"{"id":"7","ok":true,"error":{"code":"timeout","message":"late"}}"#;
    let err = Response::decode(ok_with_error).expect_err("ok:true with an error");
    assert!(
        err.to_string().contains("`ok: true` with an `error`"),
        "{err}"
    );
    let failure_without_error = br#"{"id":"7","ok":false}"#;
    let err = Response::decode(failure_without_error).expect_err("ok:false without an error");
    assert!(
        err.to_string().contains("`ok: false` without an `error`"),
        "{err}"
    );
    // `ok` itself is required and must be a boolean.
    assert!(Response::decode(br#"{"id":"7","token":1}"#).is_err());
    assert!(Response::decode(br#"{"id":"7","ok":"true"}"#).is_err());
    // An error body needs both its fields and a known code.
    assert!(Response::decode(br#"{"id":"7","ok":false,"error":{"code":"timeout"}}"#).is_err());
    assert!(
        Response::decode(br#"{"id":"7","ok":false,"error":{"code":"nope","message":"m"}}"#)
            .is_err()
    );
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

fn assert_event_golden(event: &Event, wire: &str) {
    let golden: Value = serde_json::from_str(wire).expect("golden is JSON");
    assert_eq!(to_json(&event.encode()), golden);
    assert_eq!(&Event::decode(wire.as_bytes()).expect("decodes"), event);
    assert_eq!(&Event::decode(&event.encode()).expect("round trip"), event);
}

#[test]
fn event_lease_expired() {
    assert_event_golden(
        &Event::LeaseExpired {
            lease: "L-17".into(),
        },
        r#"{"event":"lease.expired","lease":"L-17"}"#,
    );
}

#[test]
fn event_lease_revoked() {
    assert_event_golden(
        &Event::LeaseRevoked {
            lease: "L-17".into(),
        },
        r#"{"event":"lease.revoked","lease":"L-17"}"#,
    );
}

#[test]
fn event_lock_lost() {
    assert_event_golden(
        &Event::LockLost {
            name: "door".into(),
            token: 42,
            reason: None,
        },
        r#"{"event":"lock.lost","name":"door","token":42}"#,
    );
}

/// A hold ended by its `max_hold_ms` says so; one ended with its lease has no `reason`.
#[test]
fn event_lost_at_max_hold() {
    assert_event_golden(
        &Event::LockLost {
            name: "door".into(),
            token: 42,
            reason: Some(LostReason::MaxHold),
        },
        r#"{"event":"lock.lost","name":"door","token":42,"reason":"max_hold"}"#,
    );
    assert_event_golden(
        &Event::SemLost {
            name: "chargers".into(),
            token: 41,
            reason: Some(LostReason::MaxHold),
        },
        r#"{"event":"sem.lost","name":"chargers","token":41,"reason":"max_hold"}"#,
    );
}

#[test]
fn event_sem_lost() {
    assert_event_golden(
        &Event::SemLost {
            name: "chargers".into(),
            token: 41,
            reason: None,
        },
        r#"{"event":"sem.lost","name":"chargers","token":41}"#,
    );
}

#[test]
fn event_waypoint_lost() {
    assert_event_golden(
        &Event::WaypointLost {
            name: "pad-3".into(),
            token: 43,
        },
        r#"{"event":"waypoint.lost","name":"pad-3","token":43}"#,
    );
}

/// A reservation preempted by a higher priority is told to vacate by a deadline, with what it
/// is (`kind`) and who preempts it (`priority`).
#[test]
fn event_reservation_preempted() {
    assert_event_golden(
        &Event::ReservationPreempted {
            name: "survey-3".into(),
            token: 3_342_336,
            kind: "route".into(),
            vacate_by_ms: 1_764_503_705_000,
            priority: Priority::EMERGENCY,
        },
        r#"{"event":"reservation.preempted","name":"survey-3","token":3342336,"kind":"route","vacate_by_ms":1764503705000,"priority":3}"#,
    );
}

#[test]
fn event_election_lost() {
    assert_event_golden(
        &Event::ElectionLost {
            name: "hive/leader".into(),
            token: 2_752_512,
        },
        r#"{"event":"election.lost","name":"hive/leader","token":2752512}"#,
    );
}

/// A dropped vacate deadline: the holder keeps its reservation, with its token.
#[test]
fn event_reservation_preemption_withdrawn() {
    assert_event_golden(
        &Event::ReservationPreemptionWithdrawn {
            name: "survey-3".into(),
            token: 3_342_336,
            kind: "route".into(),
        },
        r#"{"event":"reservation.preemption_withdrawn","name":"survey-3","token":3342336,"kind":"route"}"#,
    );
}

// ---------------------------------------------------------------------------------------------
// Priority and preemption
// ---------------------------------------------------------------------------------------------

/// `priority` on `waypoint.reserve`, `route.reserve` and `route.amend`: an integer 0 to 3,
/// absent (and left out of the encoding) for routine.
#[test]
fn op_reserves_take_a_priority() {
    assert_request(
        r#"{"id":"r40","op":"waypoint.reserve","name":"pad-3","lease":"L-17","priority":2}"#,
        &req(
            "r40",
            Op::WaypointReserve {
                name: "pad-3".into(),
                lease: "L-17".into(),
                lat: None,
                lon: None,
                alt_min_m: None,
                alt_max_m: None,
                radius_m: None,
                wait_ms: None,
                start_ms: None,
                end_ms: None,
                priority: Priority::new(2).expect("a level"),
            },
        ),
        &json!({"id": "r40", "op": "waypoint.reserve", "name": "pad-3", "lease": "L-17",
                "priority": 2}),
    );
    let volume = Volume {
        lat: 47.3772,
        lon: 8.5417,
        radius_m: 30.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: 1_764_503_700_000,
        end_ms: 1_764_503_900_000,
    };
    let volume_json = json!({"lat": 47.3772, "lon": 8.5417, "radius_m": 30.0, "alt_min_m": 0.0,
        "alt_max_m": 120.0, "start_ms": 1_764_503_700_000u64, "end_ms": 1_764_503_900_000u64});
    assert_request(
        r#"{"id":"r41","op":"route.reserve","name":"medevac-1","lease":"L-18","priority":3,
            "volumes":[{"lat":47.3772,"lon":8.5417,"radius_m":30,"alt_min_m":0,"alt_max_m":120,
                        "start_ms":1764503700000,"end_ms":1764503900000}]}"#,
        &req(
            "r41",
            Op::RouteReserve {
                name: "medevac-1".into(),
                lease: "L-18".into(),
                volumes: vec![volume],
                wait_ms: None,
                priority: Priority::EMERGENCY,
            },
        ),
        &json!({"id": "r41", "op": "route.reserve", "name": "medevac-1", "lease": "L-18",
                "volumes": [volume_json.clone()], "priority": 3}),
    );
    assert_request(
        r#"{"id":"r42","op":"route.amend","name":"medevac-1","lease":"L-18","priority":1,
            "volumes":[{"lat":47.3772,"lon":8.5417,"radius_m":30,"alt_min_m":0,"alt_max_m":120,
                        "start_ms":1764503700000,"end_ms":1764503900000}]}"#,
        &req(
            "r42",
            Op::RouteAmend {
                name: "medevac-1".into(),
                lease: "L-18".into(),
                volumes: vec![volume],
                priority: Priority::new(1).expect("a level"),
            },
        ),
        &json!({"id": "r42", "op": "route.amend", "name": "medevac-1", "lease": "L-18",
                "volumes": [volume_json], "priority": 1}),
    );
    // 0 is routine: accepted, and encoded by leaving the field out.
    let routine =
        decode_ok(r#"{"id":"r43","op":"waypoint.reserve","name":"p","lease":"L","priority":0}"#);
    assert_eq!(
        to_json(&routine.encode()),
        json!({"id": "r43", "op": "waypoint.reserve", "name": "p", "lease": "L"})
    );
}

/// Anything but an integer 0 to 3 is `bad_request` naming the field and its range; a
/// `priority` on an op that has none is an unknown field.
#[test]
fn bad_request_priority() {
    let range = "it must be an integer from 0 (routine) to 3 (emergency)";
    for (value, shown) in [
        ("4", "4"),
        ("255", "255"),
        ("256", "256"),
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("3.0", "3.0"),
        (r#""high""#, r#""high""#),
        ("null", "null"),
        ("true", "true"),
        ("[3]", "a list"),
        (r#"{"level":3}"#, "an object"),
    ] {
        bad(
            &format!(
                r#"{{"id":"7","op":"waypoint.reserve","name":"n","lease":"L","priority":{value}}}"#
            ),
            Some("7"),
            &format!("waypoint.reserve: `priority` is {shown}; {range}"),
        );
    }
    bad(
        r#"{"id":"8","op":"route.reserve","name":"n","lease":"L","priority":9,"volumes":[
            {"lat":1,"lon":2,"radius_m":3,"alt_min_m":0,"alt_max_m":9,"start_ms":1,"end_ms":2}]}"#,
        Some("8"),
        &format!("route.reserve: `priority` is 9; {range}"),
    );
    assert_bad_request_mentions(
        r#"{"id":"9","op":"lock.acquire","name":"n","lease":"L","priority":3}"#,
        Some("9"),
        "lock.acquire: ",
        &["unknown field `priority`"],
    );
}

/// A waypoint's holder and waiter show their priority when above routine, and a preempted
/// holder its `vacate_by_ms`.
#[test]
fn success_inspect_waypoint_with_priorities() {
    let response = Response::ok(
        "r44",
        Inspection {
            limit: None,
            count: None,
            leaving: None,
            holders: vec![HolderInfo {
                agent: "drone-7".into(),
                lease: "L-17".into(),
                token: 42,
                permits: None,
                since_ms: 1000,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: Some(Priority::new(1).expect("a level")),
                vacate_by_ms: Some(6_000),
                mode: LockMode::Exclusive,
                value: None,
            }],
            waiters: vec![WaiterInfo {
                agent: "drone-9".into(),
                position: 1,
                permits: None,
                since_ms: 1_000,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: Some(Priority::EMERGENCY),
                mode: LockMode::Exclusive,
                value: None,
            }],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r44",
            "ok": true,
            "holders": [{"agent": "drone-7", "lease": "L-17", "token": 42, "since_ms": 1000,
                         "priority": 1, "vacate_by_ms": 6000}],
            "waiters": [{"agent": "drone-9", "position": 1, "since_ms": 1000, "priority": 3}]
        }),
    );
}

#[test]
fn event_decode_rejects_unknown_or_incomplete() {
    assert!(Event::decode(br#"{"event":"lock.stolen","name":"door","token":1}"#).is_err());
    assert!(Event::decode(br#"{"event":"lock.lost","name":"door"}"#).is_err());
    assert!(Event::decode(br#"{"name":"door","token":1}"#).is_err());
}

// ---------------------------------------------------------------------------------------------
// Topics
// ---------------------------------------------------------------------------------------------

#[test]
fn topics_default_prefix() {
    let topics = Topics::default();
    assert_eq!(topics.prefix(), "hk/v1");
    assert_eq!(topics.request("drone-7"), "hk/v1/req/drone-7");
    assert_eq!(topics.response("drone-7"), "hk/v1/rsp/drone-7");
    assert_eq!(topics.event("drone-7"), "hk/v1/evt/drone-7");
    assert_eq!(topics.request_filter(), "hk/v1/req/+");
    assert_eq!(Topics::new("hk/v1").expect("valid"), topics);
}

#[test]
fn topics_parse_request_topic() {
    let topics = Topics::default();
    assert_eq!(
        topics.parse_request_topic("hk/v1/req/drone-7"),
        Ok("drone-7")
    );
    assert_eq!(
        topics.parse_request_topic("hk/v1/req/Hive_04.sensor-A9"),
        Ok("Hive_04.sensor-A9")
    );
    let max = "a".repeat(AGENT_ID_BYTES_MAX);
    assert_eq!(
        topics.parse_request_topic(&format!("hk/v1/req/{max}")),
        Ok(max.as_str())
    );

    let reject = |topic: &str, message: &str| {
        let err = topics
            .parse_request_topic(topic)
            .expect_err("topic must be rejected");
        assert_eq!(
            (err.id, err.code, err.message.as_str()),
            (None, ErrorCode::BadRequest, message),
            "{topic}"
        );
    };
    reject(
        "hk/v2/req/drone-7",
        r#"topic "hk/v2/req/drone-7" is not hk/v1/req/{agent}"#,
    );
    reject(
        "xhk/v1/req/drone-7",
        r#"topic "xhk/v1/req/drone-7" is not hk/v1/req/{agent}"#,
    );
    reject(
        "hk/v1/rsp/x",
        r#"topic "hk/v1/rsp/x" is not hk/v1/req/{agent}"#,
    );
    reject(
        "hk/v1/evt/x",
        r#"topic "hk/v1/evt/x" is not hk/v1/req/{agent}"#,
    );
    reject("hk/v1/req", r#"topic "hk/v1/req" is not hk/v1/req/{agent}"#);
    reject("hk/v1/req/", "agent id must be 1 to 64 characters, got 0");
    reject(
        "hk/v1/req/drone/7",
        r#"agent id "drone/7" contains '/'; allowed are A-Z a-z 0-9 _ . -"#,
    );
    reject(
        "hk/v1/req/+",
        r#"agent id "+" contains '+'; allowed are A-Z a-z 0-9 _ . -"#,
    );
    reject(
        "hk/v1/req/#",
        r##"agent id "#" contains '#'; allowed are A-Z a-z 0-9 _ . -"##,
    );
    reject(
        "hk/v1/req/drone 7",
        r#"agent id "drone 7" contains ' '; allowed are A-Z a-z 0-9 _ . -"#,
    );
    reject(
        "hk/v1/req/drönë",
        r#"agent id "drönë" contains 'ö'; allowed are A-Z a-z 0-9 _ . -"#,
    );
    reject(
        &format!("hk/v1/req/{}", "a".repeat(AGENT_ID_BYTES_MAX + 1)),
        "agent id must be 1 to 64 characters, got 65",
    );
}

#[test]
fn topics_custom_prefix() {
    let topics = Topics::new("farm/east/hk/").expect("trailing slash is dropped");
    assert_eq!(topics.prefix(), "farm/east/hk");
    assert_eq!(topics.request("hive-2"), "farm/east/hk/req/hive-2");
    assert_eq!(topics.response("hive-2"), "farm/east/hk/rsp/hive-2");
    assert_eq!(topics.event("hive-2"), "farm/east/hk/evt/hive-2");
    assert_eq!(topics.request_filter(), "farm/east/hk/req/+");
    assert_eq!(
        topics.parse_request_topic("farm/east/hk/req/hive-2"),
        Ok("hive-2")
    );
    assert!(topics.parse_request_topic("hk/v1/req/hive-2").is_err());
    assert!(
        topics
            .parse_request_topic("farm/east/hk//req/hive-2")
            .is_err()
    );
    assert_eq!(Topics::new("a///").expect("valid").prefix(), "a");
}

#[test]
fn topics_new_rejects_wildcards_and_empty() {
    for (prefix, shown) in [
        ("hk/+/v1", "hk/+/v1"),
        ("hk/#", "hk/#"),
        ("+", "+"),
        ("", ""),
        ("/", ""),
        ("hk//v1", "hk//v1"),
        ("/hk", "/hk"),
        ("hk/\0", "hk/\0"),
    ] {
        let err = Topics::new(prefix).expect_err("prefix must be rejected");
        assert_eq!(
            (err.id, err.code, err.message),
            (
                None,
                ErrorCode::BadRequest,
                format!(
                    "topic prefix {shown:?} must be non-empty, have no empty level and \
                     contain no +, # or NUL"
                )
            ),
            "{prefix:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Keys: kv.put, kv.get, kv.delete, kv.txn
// ---------------------------------------------------------------------------------------------

fn key_value(key: &str, value: &str, lease: Option<&str>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision: 0x30000,
        mod_revision: 0x50000,
        version: 2,
        lease: lease.map(str::to_string),
    }
}

/// `success` encodes to exactly `wire` (beside `id` and `ok`), and `wire` decodes back to it.
fn assert_success(id: &str, success: Success, wire: Value) {
    let response = Response::ok(id, success.clone());
    assert_eq!(to_json(&response.encode()), wire);
    let back: Response = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back.outcome, Ok(success));
}

#[test]
fn op_kv_put() {
    assert_request(
        r#"{"id":"k1","op":"kv.put","key":"presence/drone-7","value":"up","lease":"0000000000000011","prev_kv":true}"#,
        &req(
            "k1",
            Op::KvPut {
                key: "presence/drone-7".into(),
                value: "up".into(),
                lease: Some("0000000000000011".into()),
                prev_kv: Some(true),
            },
        ),
        &json!({"id": "k1", "op": "kv.put", "key": "presence/drone-7", "value": "up",
            "lease": "0000000000000011", "prev_kv": true}),
    );
    assert_request(
        r#"{"id":"k2","op":"kv.put","key":"cfg","value":""}"#,
        &req(
            "k2",
            Op::KvPut {
                key: "cfg".into(),
                value: String::new(),
                lease: None,
                prev_kv: None,
            },
        ),
        &json!({"id": "k2", "op": "kv.put", "key": "cfg", "value": ""}),
    );
    assert_success(
        "k1",
        KvPutDone {
            revision: 0x50000,
            prev_kv: Some(key_value("presence/drone-7", "down", None)),
        }
        .into(),
        json!({"id": "k1", "ok": true, "revision": 0x50000, "prev_kv": {"key": "presence/drone-7",
            "value": "down", "create_revision": 0x30000, "mod_revision": 0x50000, "version": 2}}),
    );
    assert_success(
        "k2",
        KvPutDone {
            revision: 7,
            prev_kv: None,
        }
        .into(),
        json!({"id": "k2", "ok": true, "revision": 7}),
    );
}

#[test]
fn op_kv_get() {
    assert_request(
        r#"{"id":"k3","op":"kv.get","prefix":"presence/","after":"presence/a","limit":10,"serializable":true}"#,
        &req(
            "k3",
            Op::KvGet {
                key: None,
                prefix: Some("presence/".into()),
                after: Some("presence/a".into()),
                limit: Some(10),
                serializable: Some(true),
            },
        ),
        &json!({"id": "k3", "op": "kv.get", "prefix": "presence/", "after": "presence/a",
            "limit": 10, "serializable": true}),
    );
    assert_success(
        "k3",
        KvPage {
            revision: 0x90000,
            kvs: vec![key_value("presence/b", "up", Some("0000000000000011"))],
            next_after: Some("presence/b".into()),
        }
        .into(),
        json!({"id": "k3", "ok": true, "revision": 0x90000, "kvs": [{"key": "presence/b",
            "value": "up", "create_revision": 0x30000, "mod_revision": 0x50000, "version": 2,
            "lease": "0000000000000011"}], "next_after": "presence/b"}),
    );
}

#[test]
fn op_kv_delete() {
    assert_request(
        r#"{"id":"k4","op":"kv.delete","prefix":"jobs/"}"#,
        &req(
            "k4",
            Op::KvDelete {
                key: None,
                prefix: Some("jobs/".into()),
            },
        ),
        &json!({"id": "k4", "op": "kv.delete", "prefix": "jobs/"}),
    );
    assert_success(
        "k4",
        KvDeleted {
            revision: 0xa0000,
            deleted: 3,
        }
        .into(),
        json!({"id": "k4", "ok": true, "revision": 0xa0000, "deleted": 3}),
    );
}

#[test]
fn op_kv_txn() {
    let wire = r#"{"id":"k5","op":"kv.txn","compare":[{"key":"counter","target":"version","op":"==","value":2},{"key":"owner","target":"lease","op":"!=","value":null},{"holder":{"kind":"lock","name":"gw"},"token":131072}],"success":[{"put":{"key":"counter","value":"3","prev_kv":true}},{"delete":{"prefix":"tmp/"}},{"get":{"key":"counter"}}],"failure":[{"get":{"prefix":"c","after":"ca","limit":5}}]}"#;
    let op = Op::KvTxn {
        compare: vec![
            Compare::Key {
                key: "counter".into(),
                op: CompareOp::Eq,
                target: CompareTarget::Version(2),
            },
            Compare::Key {
                key: "owner".into(),
                op: CompareOp::Ne,
                target: CompareTarget::Lease(None),
            },
            Compare::Holder {
                holder: Holder {
                    kind: ResourceKind::Lock,
                    name: "gw".into(),
                },
                token: 131_072,
            },
        ],
        success: vec![
            TxnOp::Put(Put {
                key: "counter".into(),
                value: "3".into(),
                lease: None,
                prev_kv: true,
            }),
            TxnOp::Delete(KeySelector::Prefix("tmp/".into()).into()),
            TxnOp::Get(Get::new(KeySelector::Key("counter".into()), None, None)),
        ],
        failure: vec![TxnOp::Get(Get::new(
            KeySelector::Prefix("c".into()),
            Some("ca".into()),
            Some(5),
        ))],
    };
    let encoded: Value = serde_json::from_str(wire).expect("json");
    assert_request(wire, &req("k5", op), &encoded);
    assert_success(
        "k5",
        KvTxnDone {
            revision: 0xb0000,
            succeeded: true,
            results: vec![
                TxnResult::Put(PutResult {
                    prev_kv: Some(key_value("counter", "2", None)),
                }),
                TxnResult::Delete(Deleted { deleted: 0 }),
                TxnResult::Get(RangePage {
                    kvs: vec![],
                    next_after: None,
                }),
            ],
        }
        .into(),
        json!({"id": "k5", "ok": true, "revision": 0xb0000, "succeeded": true, "results": [
            {"put": {"prev_kv": {"key": "counter", "value": "2", "create_revision": 0x30000,
                "mod_revision": 0x50000, "version": 2}}},
            {"delete": {"deleted": 0}},
            {"get": {"kvs": []}}
        ]}),
    );
}

#[test]
fn bad_request_kv() {
    let long = "k".repeat(513);
    bad(
        &format!(r#"{{"id":"b1","op":"kv.put","key":"{long}","value":"v"}}"#),
        Some("b1"),
        "kv.put: `key` is 513 bytes, it must be 1 to 512",
    );
    bad(
        r#"{"id":"b2","op":"kv.put","key":"","value":"v"}"#,
        Some("b2"),
        "kv.put: `key` is 0 bytes, it must be 1 to 512",
    );
    bad(
        r#"{"id":"b3","op":"kv.put","key":"$svc/x","value":"v"}"#,
        Some("b3"),
        "kv.put: `key` \"$svc/x\" is reserved for the service (it starts with `$`): clients may only read it",
    );
    bad(
        r#"{"id":"b4","op":"kv.get","key":"a","prefix":"a"}"#,
        Some("b4"),
        "kv.get: give exactly one of `key` and `prefix`",
    );
    bad(
        r#"{"id":"b5","op":"kv.delete"}"#,
        Some("b5"),
        "kv.delete: give exactly one of `key` and `prefix`",
    );
    bad(
        r#"{"id":"b6","op":"kv.get","prefix":"a","limit":0}"#,
        Some("b6"),
        "kv.get: `limit` is 0, it must be from 1 to 1000",
    );
    bad(
        r#"{"id":"b7","op":"kv.get","key":"a","after":"b"}"#,
        Some("b7"),
        "kv.get: `after` pages a `prefix`, not a `key`",
    );
    let compares = vec![r#"{"key":"a","target":"version","op":"==","value":0}"#; 65].join(",");
    bad(
        &format!(r#"{{"id":"b8","op":"kv.txn","compare":[{compares}]}}"#),
        Some("b8"),
        "kv.txn: `compare` has 65 compares, at most 64 are allowed",
    );
    bad(
        r#"{"id":"b9","op":"kv.txn","success":[{"delete":{"prefix":"$"}}]}"#,
        Some("b9"),
        "kv.txn: `prefix` \"$\" is reserved for the service (it starts with `$`): clients may only read it",
    );
    assert_bad_request_mentions(
        r#"{"id":"b10","op":"kv.txn","success":[{"move":{"key":"a"}}]}"#,
        Some("b10"),
        "kv.txn: ",
        &[],
    );
}

// ---------------------------------------------------------------------------------------------
// watch.poll
// ---------------------------------------------------------------------------------------------

#[test]
fn op_watch_poll() {
    assert_request(
        r#"{"id":"w1","op":"watch.poll","prefix":"cfg/","after":196608,"max_events":10,"wait_ms":5000}"#,
        &req(
            "w1",
            Op::WatchPoll {
                key: None,
                prefix: Some("cfg/".into()),
                after: 196_608,
                after_key: None,
                max_events: Some(10),
                wait_ms: Some(5_000),
            },
        ),
        &json!({"id": "w1", "op": "watch.poll", "prefix": "cfg/", "after": 196_608,
            "max_events": 10, "wait_ms": 5000}),
    );
    assert_request(
        r#"{"id":"w2","op":"watch.poll","key":"cfg/a","after":0}"#,
        &req(
            "w2",
            Op::WatchPoll {
                key: Some("cfg/a".into()),
                prefix: None,
                after: 0,
                after_key: None,
                max_events: None,
                wait_ms: None,
            },
        ),
        &json!({"id": "w2", "op": "watch.poll", "key": "cfg/a", "after": 0}),
    );
    assert_request(
        r#"{"id":"w3","op":"watch.poll","prefix":"fleet/","after":196607,"after_key":"fleet/d-0412"}"#,
        &req(
            "w3",
            Op::WatchPoll {
                key: None,
                prefix: Some("fleet/".into()),
                after: 196_607,
                after_key: Some("fleet/d-0412".into()),
                max_events: None,
                wait_ms: None,
            },
        ),
        &json!({"id": "w3", "op": "watch.poll", "prefix": "fleet/", "after": 196_607,
            "after_key": "fleet/d-0412"}),
    );
    for (bad, why) in [
        (
            r#"{"id":"w","op":"watch.poll","after":0}"#,
            "exactly one of",
        ),
        (
            r#"{"id":"w","op":"watch.poll","key":"a","prefix":"b","after":0}"#,
            "exactly one of",
        ),
        (
            r#"{"id":"w","op":"watch.poll","key":"a","after":-1}"#,
            "expected u64",
        ),
        (r#"{"id":"w","op":"watch.poll","key":"a"}"#, "after"),
        (
            r#"{"id":"w","op":"watch.poll","key":"a","after":0,"max_events":0}"#,
            "max_events",
        ),
        (
            r#"{"id":"w","op":"watch.poll","key":"a","after":0,"wait_ms":60001}"#,
            "wait_ms",
        ),
        (
            r#"{"id":"w","op":"watch.poll","key":"a","after":0,"after_key":""}"#,
            "`after_key` is 0 bytes",
        ),
    ] {
        let err = decode_err(bad.as_bytes());
        assert_eq!(err.code, ErrorCode::BadRequest, "{bad}");
        assert!(err.message.contains(why), "{bad}: {}", err.message);
    }
}

#[test]
fn watch_poll_answer_and_compacted_error() {
    let page = WatchPage {
        events: vec![
            KvEvent {
                revision: 0x50000,
                kind: EventKind::Put,
                kv: key_value("cfg/a", "on", None),
            },
            KvEvent {
                revision: 0x60000,
                kind: EventKind::Delete,
                kv: key_value("cfg/b", "off", Some("0000000000000011")),
            },
        ],
        next: 0x60000,
        next_key: None,
        progress: None,
    };
    assert_success(
        "w1",
        page.into(),
        json!({"id": "w1", "ok": true, "events": [
            {"revision": 0x50000, "type": "put", "kv": {"key": "cfg/a", "value": "on",
                "create_revision": 0x30000, "mod_revision": 0x50000, "version": 2}},
            {"revision": 0x60000, "type": "delete", "kv": {"key": "cfg/b", "value": "off",
                "create_revision": 0x30000, "mod_revision": 0x50000, "version": 2,
                "lease": "0000000000000011"}}
        ], "next": 0x60000}),
    );
    let idle = WatchPage {
        events: Vec::new(),
        next: 0x90000,
        next_key: None,
        progress: Some(0x90000),
    };
    assert_success(
        "w2",
        idle.into(),
        json!({"id": "w2", "ok": true, "events": [], "next": 0x90000, "progress": 0x90000}),
    );
    // A fragment of a revision too large for one answer: the cursor stays before it.
    let fragment = WatchPage {
        events: vec![KvEvent {
            revision: 0x70000,
            kind: EventKind::Delete,
            kv: key_value("cfg/a", "on", None),
        }],
        next: 0x6ffff,
        next_key: Some("cfg/a".into()),
        progress: None,
    };
    assert_success(
        "w4",
        fragment.into(),
        json!({"id": "w4", "ok": true, "events": [
            {"revision": 0x70000, "type": "delete", "kv": {"key": "cfg/a", "value": "on",
                "create_revision": 0x30000, "mod_revision": 0x50000, "version": 2}}
        ], "next": 0x6ffff, "next_key": "cfg/a"}),
    );
    let compacted = Response::compacted("w3", 0x40000);
    let wire = json!({"id": "w3", "ok": false, "error": {"code": "compacted",
        "message": "the events after this cursor are compacted: the oldest kept follow revision \
                    262144; re-read with kv.get and watch from its revision",
        "compact_revision": 0x40000}});
    assert_eq!(to_json(&compacted.encode()), wire);
    let back: Response = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back, compacted);
}

// ---------------------------------------------------------------------------------------------
// Elections
// ---------------------------------------------------------------------------------------------

/// `election.campaign` takes `wait_ms` as `lock.acquire` does; its `value` is required (the
/// empty string is a value).
#[test]
fn op_election_campaign() {
    assert_request(
        r#"{"id":"e1","op":"election.campaign","name":"hive/leader","lease":"0000000000000011","value":"10.0.0.7:7000"}"#,
        &req(
            "e1",
            Op::ElectionCampaign {
                name: "hive/leader".into(),
                lease: "0000000000000011".into(),
                value: "10.0.0.7:7000".into(),
                wait_ms: None,
            },
        ),
        &json!({"id": "e1", "op": "election.campaign", "name": "hive/leader",
            "lease": "0000000000000011", "value": "10.0.0.7:7000"}),
    );
    assert_request(
        r#"{"id":"e2","op":"election.campaign","name":"hive/leader","lease":"L","value":"","wait_ms":0}"#,
        &req(
            "e2",
            Op::ElectionCampaign {
                name: "hive/leader".into(),
                lease: "L".into(),
                value: String::new(),
                wait_ms: Some(0),
            },
        ),
        &json!({"id": "e2", "op": "election.campaign", "name": "hive/leader", "lease": "L",
            "value": "", "wait_ms": 0}),
    );
    assert_bad_request_mentions(
        r#"{"id":"e3","op":"election.campaign","name":"hive/leader","lease":"L"}"#,
        Some("e3"),
        "election.campaign: ",
        &["missing field `value`"],
    );
    bad(
        r#"{"id":"e4","op":"election.campaign","name":"","lease":"L","value":"v"}"#,
        Some("e4"),
        "election.campaign: `name` must not be empty",
    );
}

/// `election.proclaim` and `election.resign` name the leadership by its token, not a lease.
#[test]
fn op_election_proclaim_and_resign() {
    assert_request(
        r#"{"id":"e5","op":"election.proclaim","name":"hive/leader","token":2752512,"value":"10.0.0.8:7000"}"#,
        &req(
            "e5",
            Op::ElectionProclaim {
                name: "hive/leader".into(),
                token: 2_752_512,
                value: "10.0.0.8:7000".into(),
            },
        ),
        &json!({"id": "e5", "op": "election.proclaim", "name": "hive/leader",
            "token": 2_752_512, "value": "10.0.0.8:7000"}),
    );
    assert_request(
        r#"{"id":"e6","op":"election.resign","name":"hive/leader","token":2752512}"#,
        &req(
            "e6",
            Op::ElectionResign {
                name: "hive/leader".into(),
                token: 2_752_512,
            },
        ),
        &json!({"id": "e6", "op": "election.resign", "name": "hive/leader",
            "token": 2_752_512}),
    );
    assert_bad_request_mentions(
        r#"{"id":"e7","op":"election.resign","name":"hive/leader","lease":"L","token":1}"#,
        Some("e7"),
        "election.resign: ",
        &["unknown field `lease`"],
    );
}

#[test]
fn op_election_leader() {
    assert_request(
        r#"{"id":"e8","op":"election.leader","name":"hive/leader"}"#,
        &req(
            "e8",
            Op::ElectionLeader {
                name: "hive/leader".into(),
            },
        ),
        &json!({"id": "e8", "op": "election.leader", "name": "hive/leader"}),
    );
}

/// The leader, or `"leader": null` (sent, and required: without it the answer is another
/// shape); a proclaim answers its revision as a put does.
#[test]
fn success_election_leader_and_proclaim() {
    assert_success(
        "e8",
        LeaderReport {
            leader: Some(LeaderInfo {
                agent: "drone-7".into(),
                value: "10.0.0.7:7000".into(),
                token: 2_752_512,
            }),
        }
        .into(),
        json!({"id": "e8", "ok": true, "leader": {"agent": "drone-7",
            "value": "10.0.0.7:7000", "token": 2_752_512}}),
    );
    assert_success(
        "e9",
        LeaderReport { leader: None }.into(),
        json!({"id": "e9", "ok": true, "leader": null}),
    );
    let without: Response =
        serde_json::from_value(json!({"id": "e9", "ok": true})).expect("decodes");
    assert_eq!(without.outcome, Ok(Done {}.into()));
    assert_success(
        "e5",
        KvPutDone {
            revision: 2_818_048,
            prev_kv: None,
        }
        .into(),
        json!({"id": "e5", "ok": true, "revision": 2_818_048}),
    );
}

/// `inspect` of an election: the leader with its value, the candidates in order with theirs;
/// `value` is absent for every other kind (the holders and waiters above).
#[test]
fn success_inspect_election_with_values() {
    let response = Response::ok(
        "e10",
        Inspection {
            limit: None,
            count: None,
            leaving: None,
            holders: vec![HolderInfo {
                agent: "drone-7".into(),
                lease: "0000000000000011".into(),
                token: 2_752_512,
                permits: None,
                since_ms: 1_764_500_000_000,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                vacate_by_ms: None,
                value: Some("10.0.0.7:7000".into()),
                mode: LockMode::Exclusive,
            }],
            waiters: vec![WaiterInfo {
                agent: "drone-9".into(),
                position: 1,
                permits: None,
                since_ms: 1_764_500_000_100,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                value: Some("10.0.0.9:7000".into()),
                mode: LockMode::Exclusive,
            }],
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({"id": "e10", "ok": true,
            "holders": [{"agent": "drone-7", "lease": "0000000000000011", "token": 2_752_512,
                         "since_ms": 1_764_500_000_000_u64, "value": "10.0.0.7:7000"}],
            "waiters": [{"agent": "drone-9", "position": 1, "since_ms": 1_764_500_000_100_u64,
                         "value": "10.0.0.9:7000"}]}),
    );
    assert_eq!(
        ResourceKind::parse("election"),
        Some(ResourceKind::Election)
    );
    assert_eq!(
        serde_json::to_value(ResourceKind::Election).expect("encodes"),
        json!("election")
    );
}

// ---------------------------------------------------------------------------------------------
// Barriers (docs/PROTOCOL.md §8.24)
// ---------------------------------------------------------------------------------------------

fn barrier_enter(name: &str, count: u32, lease: &str, wait_ms: Option<u64>) -> Op {
    Op::BarrierEnter {
        name: name.into(),
        count,
        lease: lease.into(),
        wait_ms,
    }
}

#[test]
fn op_barrier_enter() {
    assert_request(
        r#"{"id":"b1","op":"barrier.enter","name":"survey/start","count":3,"lease":"L-17"}"#,
        &req("b1", barrier_enter("survey/start", 3, "L-17", None)),
        &json!({"id": "b1", "op": "barrier.enter", "name": "survey/start", "count": 3,
                "lease": "L-17"}),
    );
    assert_request(
        r#"{"id":"b2","op":"barrier.enter","name":"b","count":1,"lease":"L-17","wait_ms":0}"#,
        &req("b2", barrier_enter("b", 1, "L-17", Some(0))),
        &json!({"id": "b2", "op": "barrier.enter", "name": "b", "count": 1, "lease": "L-17",
                "wait_ms": 0}),
    );
    assert_request(
        r#"{"id":"b3","op":"barrier.enter","name":"b","count":4294967295,"lease":"L","wait_ms":86400000}"#,
        &req("b3", barrier_enter("b", u32::MAX, "L", Some(WAIT_MS_MAX))),
        &json!({"id": "b3", "op": "barrier.enter", "name": "b", "count": 4_294_967_295_u64,
                "lease": "L", "wait_ms": 86_400_000}),
    );
    assert_eq!(
        decode_ok(
            r#"{"id":"b4","op":"barrier.enter","name":"b","count":2,"lease":"L","wait_ms":null}"#
        ),
        req("b4", barrier_enter("b", 2, "L", None)),
        "an explicit null is read as absent"
    );
}

#[test]
fn op_barrier_leave() {
    assert_request(
        r#"{"id":"b5","op":"barrier.leave","name":"survey/start","lease":"L-17"}"#,
        &req(
            "b5",
            Op::BarrierLeave {
                name: "survey/start".into(),
                lease: "L-17".into(),
                wait_ms: None,
            },
        ),
        &json!({"id": "b5", "op": "barrier.leave", "name": "survey/start", "lease": "L-17"}),
    );
    assert_request(
        r#"{"id":"b6","op":"barrier.leave","name":"b","lease":"L","wait_ms":2500}"#,
        &req(
            "b6",
            Op::BarrierLeave {
                name: "b".into(),
                lease: "L".into(),
                wait_ms: Some(2_500),
            },
        ),
        &json!({"id": "b6", "op": "barrier.leave", "name": "b", "lease": "L", "wait_ms": 2500}),
    );
}

#[test]
fn bad_request_barrier() {
    bad(
        r#"{"id":"7","op":"barrier.enter","name":"b","count":0,"lease":"L"}"#,
        Some("7"),
        "barrier.enter: `count` must be at least 1",
    );
    bad(
        r#"{"id":"7","op":"barrier.enter","name":"","count":2,"lease":"L"}"#,
        Some("7"),
        "barrier.enter: `name` must not be empty",
    );
    bad(
        r#"{"id":"7","op":"barrier.leave","name":"b","lease":"L","wait_ms":86400001}"#,
        Some("7"),
        "barrier.leave: `wait_ms` is 86400001, the maximum is 86400000 (one day); omit it to \
         wait while the lease lives",
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"barrier.enter","name":"b","lease":"L"}"#,
        Some("7"),
        "barrier.enter: ",
        &["missing field `count`"],
    );
    for count in ["-1", "2.0", "4294967296", "\"3\""] {
        assert_bad_request_mentions(
            &format!(r#"{{"id":"7","op":"barrier.enter","name":"b","count":{count},"lease":"L"}}"#),
            Some("7"),
            "barrier.enter: ",
            &[],
        );
    }
    assert_bad_request_mentions(
        r#"{"id":"7","op":"barrier.leave","name":"b","count":2,"lease":"L"}"#,
        Some("7"),
        "barrier.leave: ",
        &["unknown field `count`", "`name`, `lease`, `wait_ms`"],
    );
    assert_bad_request_mentions(
        r#"{"id":"7","op":"barrier.enter","name":"b","count":2,"lease":"L","wiat_ms":0}"#,
        Some("7"),
        "barrier.enter: ",
        &[
            "unknown field `wiat_ms`",
            "`name`, `count`, `lease`, `wait_ms`",
        ],
    );
}

#[test]
fn success_barrier_generation() {
    let response = Response::ok(
        "b1",
        BarrierPassed {
            generation: 2_555_904,
        },
    );
    assert_response_golden(
        &response,
        &json!({"id": "b1", "ok": true, "generation": 2_555_904}),
    );
    let success = Response::decode(br#"{"id":"b1","ok":true,"generation":2555904}"#)
        .expect("decodes")
        .outcome
        .expect("a success");
    assert_eq!(success.shape(), "a barrier's round (`generation`)");
    assert_eq!(
        BarrierPassed::try_from(success),
        Ok(BarrierPassed {
            generation: 2_555_904
        })
    );
}

#[test]
fn success_inspect_barrier() {
    let response = Response::ok(
        "r14",
        Inspection {
            limit: None,
            count: Some(3),
            holders: vec![HolderInfo {
                agent: "drone-9".into(),
                lease: "0000000000000013".into(),
                token: 2_555_904,
                permits: None,
                since_ms: 1_764_500_002_000,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                vacate_by_ms: None,
                value: None,
                mode: LockMode::Exclusive,
            }],
            waiters: vec![WaiterInfo {
                agent: "drone-4".into(),
                position: 1,
                permits: None,
                since_ms: 1_764_500_003_000,
                area: None,
                start_ms: None,
                end_ms: None,
                volumes: Vec::new(),
                priority: None,
                value: None,
                mode: LockMode::Exclusive,
            }],
            leaving: Some(2),
            holders_total: None,
            waiters_total: None,
        },
    );
    assert_response_golden(
        &response,
        &json!({
            "id": "r14",
            "ok": true,
            "count": 3,
            "holders": [{"agent": "drone-9", "lease": "0000000000000013", "token": 2_555_904,
                         "since_ms": 1_764_500_002_000_u64}],
            "waiters": [{"agent": "drone-4", "position": 1, "since_ms": 1_764_500_003_000_u64}],
            "leaving": 2
        }),
    );
}

#[test]
fn the_barrier_kind_on_the_wire() {
    assert_eq!(ResourceKind::Barrier.as_str(), "barrier");
    assert_eq!(ResourceKind::parse("barrier"), Some(ResourceKind::Barrier));
    assert_eq!(ResourceKind::ALL.last(), Some(&ResourceKind::Barrier));
    assert_request(
        r#"{"id":"r22","op":"inspect","kind":"barrier","name":"b"}"#,
        &req(
            "r22",
            Op::Inspect {
                kind: ResourceKind::Barrier,
                name: "b".into(),
            },
        ),
        &json!({"id": "r22", "op": "inspect", "kind": "barrier", "name": "b"}),
    );
    assert_request(
        r#"{"id":"r10","op":"fence.check","name":"b","kind":"barrier","token":2555904}"#,
        &req(
            "r10",
            Op::FenceCheck {
                name: "b".into(),
                kind: ResourceKind::Barrier,
                token: 2_555_904,
            },
        ),
        &json!({"id": "r10", "op": "fence.check", "name": "b", "kind": "barrier",
                "token": 2_555_904}),
    );
    assert_request(
        r#"{"id":"r41","op":"admin.resources","kind":"barrier","after":"barrier/b"}"#,
        &req(
            "r41",
            Op::AdminResources {
                kind: Some(ResourceKind::Barrier),
                prefix: None,
                after: Some("barrier/b".into()),
                limit: None,
            },
        ),
        &json!({"id": "r41", "op": "admin.resources", "kind": "barrier", "after": "barrier/b"}),
    );
}
