//! The log and snapshot formats do not drift: bytes written by data format 1 (the build at
//! commit 4e87a8e, before the machine had request types of its own and the log stored the
//! wire `Request`) still decode, re-encode to the same bytes and lead to the same state (plus
//! the wait deadlines the machine has replicated since: `wait_deadline.rs`).
//!
//! `tests/data/commands-format1.json` is a log of 32 commands (`Vec<Command>` as JSON, as a
//! Raft entry's `Proposal::commands` stores them), covering every command and every write op,
//! optional fields present and absent. `tests/data/snapshot-format1.json` is
//! `StateMachine::snapshot()` after that build applied them at index `i + 1`, term 1, stamped
//! as [`stamps`] does, so it holds held and waiting locks, semaphores and waypoints, and
//! remembered replies of every kind. Both were written by that build and are never regenerated:
//! a test that fails here means the format changed, which needs a new `DATA_FORMAT`
//! (`hivekeeper_coordinator::raft`) and a migration, not new golden files.
//!
//! The coordinator's `tests/data_format.rs` checks a whole log entry (an openraft `Entry` with
//! its `Proposal`) the same way.

use hivekeeper_state_machine::{Command, LogMeta, StateMachine};

const COMMANDS: &[u8] = include_bytes!("data/commands-format1.json");
const SNAPSHOT: &[u8] = include_bytes!("data/snapshot-format1.json");

fn commands() -> Vec<Command> {
    serde_json::from_slice(COMMANDS).expect("a format 1 log decodes")
}

/// The positions and clock the golden snapshot's build applied the commands at.
fn stamps(count: usize) -> Vec<LogMeta> {
    let mut now_ms = 1_700_000_000_000;
    (0..count)
        .map(|i| {
            now_ms += 1_000 + i as u64 * 7;
            LogMeta {
                index: i as u64 + 1,
                term: 1,
                now_ms,
            }
        })
        .collect()
}

/// A fresh machine that applied `commands` at the positions and clock of [`stamps`], its
/// invariants checked.
fn replay(commands: Vec<Command>) -> StateMachine {
    let mut machine = StateMachine::default();
    for (meta, command) in stamps(commands.len()).into_iter().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
    }
    machine.check_invariants().expect("invariants hold");
    machine
}

#[test]
fn format1_commands_decode_and_encode_to_the_same_bytes() {
    let commands = commands();
    assert_eq!(commands.len(), 32);
    let encoded = serde_json::to_vec_pretty(&commands).expect("commands encode");
    assert!(
        encoded == COMMANDS,
        "the command JSON changed shape:\n{}",
        String::from_utf8_lossy(&encoded)
    );
}

#[test]
fn format1_snapshot_restores_and_snapshots_to_the_same_bytes() {
    let machine = StateMachine::restore(SNAPSHOT).expect("a format 1 snapshot restores");
    assert_eq!(machine.applied_index(), 32);
    assert!(
        machine.snapshot() == SNAPSHOT,
        "the snapshot JSON changed shape:\n{}",
        String::from_utf8_lossy(&machine.snapshot())
    );
}

#[test]
fn replaying_the_format1_log_gives_the_format1_snapshot() {
    let commands = commands();
    let mut machine = StateMachine::default();
    for (meta, command) in stamps(commands.len()).into_iter().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
        if let Err(broken) = machine.check_invariants() {
            panic!("invariant broken after entry {}: {broken}", meta.index);
        }
    }
    // Replies are in the snapshot too (the dedup memory), so equal bytes mean the same
    // replies as well as the same state. Since wait deadlines are replicated, the two waits
    // still queued with a `wait_ms` (r4: 60 s, r11: 20 s) also carry their deadline, queued
    // time + wait_ms, and since the retry memory keeps its own idle clock (`dedup.rs`), it is
    // there too: the 31 steps after the first entry, each over a second, count a second each.
    // Nothing else differs. A format 1 snapshot, which has neither, still restores to its own
    // bytes (above).
    let golden = String::from_utf8(SNAPSHOT.to_vec()).expect("the golden snapshot is UTF-8");
    let with_deadlines = golden
        .replacen(
            r#""r11":{"lease":3,"key":"waypoint:pad2"}"#,
            r#""r11":{"lease":3,"key":"waypoint:pad2","deadline_ms":1700000037952}"#,
            1,
        )
        .replacen(
            r#""r4":{"lease":5,"key":"lock:gw/config"}"#,
            r#""r4":{"lease":5,"key":"lock:gw/config","deadline_ms":1700000070315}"#,
            1,
        )
        .replacen(
            r#"["r19","done"]]}}}},"locks""#,
            r#"["r19","done"]]}},"idle_clock_ms":31000}},"locks""#,
            1,
        );
    assert_eq!(
        with_deadlines.len(),
        golden.len()
            + 2 * r#","deadline_ms":1700000000000"#.len()
            + r#","idle_clock_ms":31000"#.len()
    );
    assert!(
        machine.snapshot() == with_deadlines.as_bytes(),
        "replaying the log gave another state:\n{}",
        String::from_utf8_lossy(&machine.snapshot())
    );
}

/// Commands added after format 1 are additive: old entries keep their bytes, and the new
/// command's shape is pinned here (a log written now must decode the same later).
#[test]
fn the_wait_expiry_command_has_a_pinned_shape() {
    let command = Command::ExpireWaits { term: 7 };
    let json = serde_json::to_string(&command).expect("encodes");
    assert_eq!(json, r#"{"expire_waits":{"term":7}}"#);
    let back: Command = serde_json::from_str(&json).expect("decodes");
    assert_eq!(back, command);
}

/// The account commands' log form (added after format 1, read by this build and every later
/// one): the wire op with the node's `secret_hash` in place of a secret, and the snapshot's
/// `accounts` map, present only when there are accounts (so a format-1 snapshot stays valid).
#[test]
fn account_commands_and_their_snapshot_have_a_fixed_shape() {
    const HASH: &str = "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$aGFzaA";
    let log = format!(
        r#"[{{"request":{{"agent":"admin","request":{{"id":"a1","op":"admin.agent.add","name":"drone-1","role":"observer","secret_hash":"{HASH}"}}}}}},{{"request":{{"agent":"admin","request":{{"id":"a2","op":"admin.agent.rotate","name":"drone-1","secret_hash":"{HASH}"}}}}}},{{"request":{{"agent":"admin","request":{{"id":"a3","op":"admin.agent.add","name":"drone-2","role":"agent","secret_hash":"{HASH}"}}}}}},{{"request":{{"agent":"admin","request":{{"id":"a4","op":"admin.agent.remove","name":"drone-2"}}}}}}]"#
    );
    let commands: Vec<Command> = serde_json::from_str(&log).expect("the account log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the account commands changed shape"
    );
    let mut machine = StateMachine::default();
    for (meta, command) in stamps(commands.len()).into_iter().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
    }
    let snapshot: serde_json::Value =
        serde_json::from_slice(&machine.snapshot()).expect("a snapshot is JSON");
    assert_eq!(
        snapshot["state"]["accounts"],
        serde_json::json!({"drone-1": {"role": "observer", "secret_hash": HASH}})
    );
}

/// Time windows and routes add to format 1 without changing it: a reservation's window is an
/// optional `window` member and a route's volumes an optional `volumes` member (both absent
/// when empty, so the bytes above are unchanged), a request's `start_ms`/`end_ms` are optional
/// members, and `route.*` and `ExpireReservations` are commands of their own. A snapshot with
/// windows restores to its own bytes. A build without time windows would ignore the `window`
/// member and fail to decode the route commands, so a cluster must not mix the two while
/// windows are in use (docs/OPERATIONS.md, upgrades).
#[test]
fn windows_and_routes_are_optional_members_and_the_new_commands_have_a_fixed_shape() {
    let mut commands = commands();
    let request = serde_json::json!({"request": {"agent": "a", "request": {
        "id": "w1", "op": "waypoint.reserve", "name": "slot", "lease": "0000000000000002",
        "lat": 47.0, "lon": 8.0, "radius_m": 5.0,
        "start_ms": 1_700_000_100_000u64, "end_ms": 1_700_000_200_000u64}}});
    commands.push(serde_json::from_value(request.clone()).expect("a windowed reserve decodes"));
    commands.push(Command::ExpireReservations { term: 1 });
    let route = serde_json::json!({"request": {"agent": "a", "request": {
        "id": "w2", "op": "route.reserve", "name": "route", "lease": "0000000000000002",
        "volumes": [{"lat": 48.0, "lon": 8.0, "radius_m": 5.0, "alt_min_m": 0.0,
                     "alt_max_m": 120.0, "start_ms": 1_700_000_100_000u64,
                     "end_ms": 1_700_000_300_000u64}]}}});
    commands.push(serde_json::from_value(route.clone()).expect("a route.reserve decodes"));
    assert_eq!(
        serde_json::to_value(&commands[32]).expect("encodes"),
        request,
        "the windowed request keeps its shape"
    );
    assert_eq!(
        serde_json::to_value(&commands[33]).expect("encodes"),
        serde_json::json!({"expire_reservations": {"term": 1}})
    );
    let route_command = commands[34].clone();
    let machine = replay(commands);
    let bytes = machine.snapshot();
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(
        text.contains(r#""window":{"start_ms":1700000100000,"end_ms":1700000200000}"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#""area":null,"volumes":[{"lat":48.0,"lon":8.0,"radius_m":5.0,"alt_min_m":0.0,"alt_max_m":120.0,"start_ms":1700000100000,"end_ms":1700000300000}]"#
        ),
        "a route is a reservation with volumes: {text}"
    );
    assert_eq!(
        serde_json::to_value(&route_command).expect("encodes"),
        route,
        "the route request keeps its shape"
    );
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
    assert_eq!(restored.reservation_end_next_ms(), Some(1_700_000_200_000));
    restored
        .check_invariants()
        .expect("invariants hold after a restore");
}

/// Priorities add to format 1 without changing it: a request's `priority` is an optional member
/// (absent for routine, so the requests above keep their bytes), and so are a reservation's
/// `priority` and `vacate_by_ms` and a waiter's `priority` and `head_start_ms` in the snapshot
/// (absent for routine and unpreempted ones, so the snapshot above keeps its bytes). A snapshot
/// with a preemption under way restores to its own bytes and deadline.
#[test]
fn priorities_and_vacate_deadlines_are_optional_members() {
    let request = |agent: &str, value: serde_json::Value| -> Command {
        serde_json::from_value(serde_json::json!({"request": {"agent": agent, "request": value}}))
            .expect("a request decodes")
    };
    let volume = |lat: f64| {
        serde_json::json!([{"lat": lat, "lon": 8.0, "radius_m": 5.0, "alt_min_m": 0.0,
            "alt_max_m": 120.0, "start_ms": 1_700_000_000_000u64,
            "end_ms": 1_700_000_600_000u64}])
    };
    let emergency = serde_json::json!({"id": "r4", "op": "route.reserve", "name": "emergency",
        "lease": "0000000000000002", "volumes": volume(47.0), "priority": 3});
    let commands = vec![
        request(
            "a",
            serde_json::json!({"id": "r1", "op": "lease.grant", "ttl_ms": 60_000}),
        ),
        request(
            "b",
            serde_json::json!({"id": "r2", "op": "lease.grant", "ttl_ms": 60_000}),
        ),
        request(
            "a",
            serde_json::json!({"id": "r3", "op": "route.reserve", "name": "routine",
            "lease": "0000000000000001", "volumes": volume(47.0)}),
        ),
        request("b", emergency.clone()),
    ];
    assert_eq!(
        serde_json::to_value(&commands[3]).expect("encodes")["request"]["request"],
        emergency,
        "the request keeps its shape, priority included"
    );
    assert!(
        !serde_json::to_string(&commands[2])
            .expect("encodes")
            .contains("priority"),
        "a routine request has no priority member"
    );
    let mut machine = StateMachine::default();
    let mut now_ms = 1_700_000_000_000;
    for (i, command) in commands.into_iter().enumerate() {
        now_ms += 1_000;
        let meta = LogMeta {
            index: i as u64 + 1,
            term: 1,
            now_ms,
        };
        machine.apply(meta, command).expect("indexes increase");
    }
    machine.check_invariants().expect("invariants hold");
    let bytes = machine.snapshot();
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    let vacate_by_ms = now_ms + 5_000;
    assert!(
        text.contains(&format!(r#"}}],"vacate_by_ms":{vacate_by_ms}}}"#)),
        "the preempted routine route has its deadline and no priority member: {text}"
    );
    assert!(
        text.contains(r#"}],"priority":3,"head_start_ms":180000}"#),
        "the emergency waiter has its priority and head start: {text}"
    );
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
    assert_eq!(restored.reservation_end_next_ms(), Some(vacate_by_ms));
}

/// The kv commands' log form (added after format 1): the wire ops as they are, and the
/// snapshot's `kv` member, present only once a key has changed (so a format-1 snapshot stays
/// valid and a machine without keys keeps its bytes), restoring to its own bytes.
#[test]
fn kv_commands_and_their_snapshot_have_a_fixed_shape() {
    let log = r#"[{"request":{"agent":"a","request":{"id":"k1","op":"kv.put","key":"cfg","value":"1","prev_kv":true}}},{"request":{"agent":"a","request":{"id":"k2","op":"kv.delete","prefix":"tmp/"}}},{"request":{"agent":"a","request":{"id":"k3","op":"kv.txn","compare":[{"key":"cfg","op":"==","target":"version","value":1}],"success":[{"put":{"key":"cfg","value":"2"}}],"failure":[]}}}]"#;
    let commands: Vec<Command> = serde_json::from_str(log).expect("the kv log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the kv commands changed shape"
    );
    let mut machine = StateMachine::default();
    for (meta, command) in stamps(commands.len()).into_iter().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
    }
    let snapshot: serde_json::Value =
        serde_json::from_slice(&machine.snapshot()).expect("a snapshot is JSON");
    let kv = &snapshot["state"]["kv"];
    assert_eq!(kv["revision"], 3 << 16);
    assert_eq!(
        kv["keys"],
        serde_json::json!({"cfg": {"value": "2", "create_revision": 1 << 16,
            "mod_revision": 3 << 16, "version": 2}})
    );
    let restored = StateMachine::restore(&machine.snapshot()).expect("restores");
    assert_eq!(restored.snapshot(), machine.snapshot());
}

/// Read-write locks and multi-locks add to format 1 without changing it: a request's `mode`
/// is an optional member (absent for exclusive, so the requests above keep their bytes), and
/// so are a lock's `shared` holders, a waiter's `mode` and a pending wait's `others` (a
/// multi-lock's other locks) in the snapshot; `lock.downgrade`, `lock.acquire_all` and
/// `lock.release_all` are commands of their own. A snapshot with all of them restores to its
/// own bytes.
#[test]
fn lock_modes_and_multi_locks_are_optional_members_and_the_new_commands_have_a_fixed_shape() {
    let log = r#"[{"request":{"agent":"a","request":{"id":"g1","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"b","request":{"id":"g2","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"c","request":{"id":"g3","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"a","request":{"id":"l4","op":"lock.acquire","name":"w","lease":"0000000000000001"}}},{"request":{"agent":"a","request":{"id":"l5","op":"lock.downgrade","name":"w","lease":"0000000000000001"}}},{"request":{"agent":"b","request":{"id":"l6","op":"lock.acquire","name":"w","lease":"0000000000000002"}}},{"request":{"agent":"c","request":{"id":"l7","op":"lock.acquire","name":"w","lease":"0000000000000003","wait_ms":5000,"mode":"shared"}}},{"request":{"agent":"a","request":{"id":"l8","op":"lock.acquire_all","names":["y","x"],"lease":"0000000000000001"}}},{"request":{"agent":"b","request":{"id":"l9","op":"lock.acquire_all","names":["x","z"],"lease":"0000000000000002","wait_ms":1000,"mode":"shared"}}},{"request":{"agent":"c","request":{"id":"l10","op":"lock.acquire_all","names":["v"],"lease":"0000000000000003","wait_ms":0}}},{"request":{"agent":"c","request":{"id":"l11","op":"lock.release_all","names":["v"],"lease":"0000000000000003"}}}]"#;
    let commands: Vec<Command> = serde_json::from_str(log).expect("the lock log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the lock commands changed shape"
    );
    let mut machine = StateMachine::default();
    let stamps = stamps(commands.len());
    for (meta, command) in stamps.iter().copied().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
        machine.check_invariants().expect("invariants hold");
    }
    let snapshot: serde_json::Value =
        serde_json::from_slice(&machine.snapshot()).expect("a snapshot is JSON");
    let (w_since_ms, b_queued_ms) = (stamps[3].now_ms, stamps[8].now_ms);
    let waiter = |lease: u64, agent: &str, id: &str, seq: u64| {
        serde_json::json!({"lease": lease, "agent": agent, "request_id": id, "permits": 1,
            "since_ms": stamps[seq as usize - 1].now_ms, "seq": seq})
    };
    let mut c_shared = waiter(3, "c", "l7", 7);
    c_shared["mode"] = "shared".into();
    assert_eq!(
        snapshot["state"]["locks"]["w"],
        serde_json::json!({
            "holder": null,
            "shared": [{"lease": 1, "agent": "a", "token": 4 << 16, "permits": 1,
                        "since_ms": w_since_ms}],
            "waiters": [waiter(2, "b", "l6", 6), c_shared]
        }),
        "the downgraded hold keeps its token; only the shared waiter has a mode"
    );
    let mut b_multi = waiter(2, "b", "l9", 9);
    b_multi["mode"] = "shared".into();
    assert_eq!(
        snapshot["state"]["locks"]["x"]["waiters"],
        serde_json::json!([b_multi])
    );
    assert_eq!(
        snapshot["state"]["locks"]["z"],
        serde_json::json!({"holder": null, "waiters": [b_multi]})
    );
    assert_eq!(
        snapshot["state"]["core"]["waiting"]["b"]["l9"],
        serde_json::json!({"lease": 2, "key": "lock:x", "deadline_ms": b_queued_ms + 1_000,
                           "others": ["z"]})
    );
    assert_eq!(
        snapshot["state"]["core"]["waiting"]["b"]["l6"],
        serde_json::json!({"lease": 2, "key": "lock:w"}),
        "a request for one lock has no `others`"
    );
    assert_eq!(
        snapshot["state"]["locks"]["x"]["holder"]["token"],
        snapshot["state"]["locks"]["y"]["holder"]["token"],
        "one token on every lock of a multi-lock"
    );
    let bytes = machine.snapshot();
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
}

/// Hold times add to format 1 without changing it: `lease.grant`'s `lock_delay_ms` and the
/// acquires' `max_hold_ms` are optional members (a `lock_delay_ms` of 0 is left out, as if
/// absent), and so are a lease's `lock_delay_ms`, a hold's `max_hold_deadline_ms`, a waiting
/// request's `max_hold_ms` and the machine's `lock_delays` in the snapshot (absent while unset
/// or empty, so the snapshots above keep their bytes); `ExpireHoldTimes` is a command of its
/// own. A snapshot taken while a lock is held back restores to its own bytes and deadlines.
#[test]
fn hold_times_are_optional_members_and_the_new_command_has_a_fixed_shape() {
    let command = Command::ExpireHoldTimes { term: 7 };
    let json = serde_json::to_string(&command).expect("encodes");
    assert_eq!(json, r#"{"expire_hold_times":{"term":7}}"#);
    assert_eq!(
        serde_json::from_str::<Command>(&json).expect("decodes"),
        command
    );

    let log = r#"[{"request":{"agent":"a","request":{"id":"h1","op":"lease.grant","ttl_ms":5000,"lock_delay_ms":2000}}},{"request":{"agent":"b","request":{"id":"h2","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"a","request":{"id":"h3","op":"lock.acquire","name":"gw","lease":"0000000000000001","max_hold_ms":4000}}},{"request":{"agent":"b","request":{"id":"h4","op":"lock.acquire","name":"gw","lease":"0000000000000002","max_hold_ms":3000}}},{"request":{"agent":"b","request":{"id":"h5","op":"sem.acquire","name":"pool","limit":2,"lease":"0000000000000002","permits":1,"max_hold_ms":9000}}}]"#;
    let mut commands: Vec<Command> = serde_json::from_str(log).expect("the hold-time log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the hold-time requests changed shape"
    );
    let zero: Command = serde_json::from_value(serde_json::json!({"request": {"agent": "c",
        "request": {"id": "h0", "op": "lease.grant", "ttl_ms": 5_000, "lock_delay_ms": 0}}}))
    .expect("a zero lock-delay decodes");
    assert_eq!(
        serde_json::to_string(&zero).expect("encodes"),
        r#"{"request":{"agent":"c","request":{"id":"h0","op":"lease.grant","ttl_ms":5000}}}"#,
        "a lock-delay of 0 is left out, as if absent"
    );
    // a's lease expires at its TTL (5 s; the sixth entry is stamped 5,105 ms after its
    // grant), holding gw: gw is held back 2 s from then.
    commands.push(Command::ExpireLeases {
        term: 1,
        leases: vec![hivekeeper_state_machine::LeaseId(1)],
    });
    let machine = replay(commands);
    let bytes = machine.snapshot();
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(
        text.ends_with(r#","lock_delays":{"gw":1700000008105}}}"#),
        "the held-back lock, last: {text}"
    );
    assert!(
        text.contains(r#""key":"lock:gw","max_hold_ms":3000}"#),
        "b waits with its bound: {text}"
    );
    assert!(
        text.contains(r#""since_ms":1700000005070,"max_hold_deadline_ms":1700000014070}"#),
        "b's permit ends at its deadline: {text}"
    );
    assert!(
        !text.contains(r#""lock_delay_ms""#),
        "a's lease ended: {text}"
    );
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
    assert_eq!(restored.hold_time_next_ms(), Some(1_700_000_008_105));
}

/// Hold times with lock modes and multi-locks add nothing new to format 1, only their members
/// together: `lock.acquire_all`'s `max_hold_ms` (written between `wait_ms` and `mode`), a
/// shared hold's `max_hold_deadline_ms`, a waiting multi-lock's `max_hold_ms` beside its
/// `others`, and the locks a lease held back in either mode and through a multi-lock in
/// `lock_delays`, the shared holder beside it kept. It restores to its own bytes, the
/// held-back locks still held back.
#[test]
fn hold_times_of_shared_locks_and_multi_locks_are_the_members_of_each_together() {
    let log = r#"[{"request":{"agent":"a","request":{"id":"g1","op":"lease.grant","ttl_ms":5000,"lock_delay_ms":2000}}},{"request":{"agent":"b","request":{"id":"g2","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"c","request":{"id":"g3","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"a","request":{"id":"l4","op":"lock.acquire","name":"r","lease":"0000000000000001","mode":"shared"}}},{"request":{"agent":"b","request":{"id":"l5","op":"lock.acquire","name":"r","lease":"0000000000000002","max_hold_ms":30000,"mode":"shared"}}},{"request":{"agent":"a","request":{"id":"l6","op":"lock.acquire_all","names":["y","x"],"lease":"0000000000000001"}}},{"request":{"agent":"c","request":{"id":"l7","op":"lock.acquire_all","names":["x","z"],"lease":"0000000000000003","wait_ms":60000,"max_hold_ms":4000,"mode":"shared"}}}]"#;
    let mut commands: Vec<Command> = serde_json::from_str(log).expect("the log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the requests changed shape"
    );
    // a's lease expires holding r shared and the multi-lock x, y: all three held back 2 s.
    commands.push(Command::ExpireLeases {
        term: 1,
        leases: vec![hivekeeper_state_machine::LeaseId(1)],
    });
    let stamps = stamps(commands.len());
    let machine = replay(commands);
    let bytes = machine.snapshot();
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    let until_ms = stamps[7].now_ms + 2_000;
    assert!(
        text.ends_with(&format!(
            r#","lock_delays":{{"r":{until_ms},"x":{until_ms},"y":{until_ms}}}}}}}"#
        )),
        "every lock a held, in either mode: {text}"
    );
    let snapshot: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    let locks = &snapshot["state"]["locks"];
    assert_eq!(
        locks["r"],
        serde_json::json!({"holder": null,
            "shared": [{"lease": 2, "agent": "b", "token": 5 << 16, "permits": 1,
                        "since_ms": stamps[4].now_ms,
                        "max_hold_deadline_ms": stamps[4].now_ms + 30_000}],
            "waiters": []}),
        "b's shared hold is kept, with its own deadline"
    );
    assert_eq!(
        locks["y"],
        serde_json::json!({"holder": null, "waiters": []})
    );
    assert_eq!(
        snapshot["state"]["core"]["waiting"]["c"]["l7"],
        serde_json::json!({"lease": 3, "key": "lock:x",
            "deadline_ms": stamps[6].now_ms + 60_000, "max_hold_ms": 4_000, "others": ["z"]})
    );
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
    assert_eq!(restored.hold_time_next_ms(), Some(until_ms));
}

/// The election commands' log form (added after format 1): the wire ops as they are, and the
/// snapshot's `elections` member, present only while an election is in use (so a format-1
/// snapshot stays valid and a machine without elections keeps its bytes), restoring to its own
/// bytes. The leader is mirrored as the key `$election/{name}`, created at its token.
#[test]
fn election_commands_and_their_snapshot_have_a_fixed_shape() {
    let log = r#"[{"request":{"agent":"a","request":{"id":"g1","op":"lease.grant","ttl_ms":5000}}},{"request":{"agent":"b","request":{"id":"g2","op":"lease.grant","ttl_ms":5000}}},{"request":{"agent":"a","request":{"id":"e1","op":"election.campaign","name":"hive","lease":"0000000000000001","value":"10.0.0.1"}}},{"request":{"agent":"b","request":{"id":"e2","op":"election.campaign","name":"hive","lease":"0000000000000002","value":"10.0.0.2","wait_ms":60000}}},{"request":{"agent":"a","request":{"id":"e3","op":"election.proclaim","name":"hive","token":196608,"value":"10.0.0.9"}}}]"#;
    let commands: Vec<Command> = serde_json::from_str(log).expect("the election log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the election commands changed shape"
    );
    let resign = r#"{"request":{"agent":"a","request":{"id":"e4","op":"election.resign","name":"hive","token":196608}}}"#;
    let command: Command = serde_json::from_str(resign).expect("a resign decodes");
    assert_eq!(serde_json::to_string(&command).expect("encodes"), resign);

    let mut machine = StateMachine::default();
    for (meta, command) in stamps(commands.len()).into_iter().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
    }
    let snapshot: serde_json::Value =
        serde_json::from_slice(&machine.snapshot()).expect("a snapshot is JSON");
    let queued_ms = stamps(4)[3].now_ms;
    assert_eq!(
        snapshot["state"]["elections"],
        serde_json::json!({"hive": {
            "leader": {"lease": 1, "agent": "a", "token": 3 << 16, "permits": 1,
                       "since_ms": stamps(3)[2].now_ms},
            "value": "10.0.0.9",
            "candidates": [{"lease": 2, "agent": "b", "request_id": "e2", "permits": 1,
                            "since_ms": queued_ms, "seq": 4}],
            "candidate_values": {"2": "10.0.0.2"}}})
    );
    assert_eq!(
        snapshot["state"]["kv"]["keys"],
        serde_json::json!({"$election/hive": {"value": "10.0.0.9", "create_revision": 3 << 16,
            "mod_revision": 5 << 16, "version": 2}})
    );
    let restored = StateMachine::restore(&machine.snapshot()).expect("restores");
    assert_eq!(restored.snapshot(), machine.snapshot());
}

/// The barrier commands' log form (added after format 1): the wire ops as they are, and the
/// snapshot's `barriers` member, present only while a barrier is in use (so a format-1
/// snapshot stays valid and a machine without barriers keeps its bytes), restoring to its own
/// bytes: a passed round with its members (holds under the generation) and a leaver, and the
/// next round filling.
#[test]
fn barrier_commands_and_their_snapshot_have_a_fixed_shape() {
    let log = r#"[{"request":{"agent":"a","request":{"id":"g1","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"b","request":{"id":"g2","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"c","request":{"id":"g3","op":"lease.grant","ttl_ms":60000}}},{"request":{"agent":"a","request":{"id":"e1","op":"barrier.enter","name":"start","count":2,"lease":"0000000000000001","wait_ms":60000}}},{"request":{"agent":"b","request":{"id":"e2","op":"barrier.enter","name":"start","count":2,"lease":"0000000000000002"}}},{"request":{"agent":"a","request":{"id":"l1","op":"barrier.leave","name":"start","lease":"0000000000000001"}}},{"request":{"agent":"c","request":{"id":"e3","op":"barrier.enter","name":"start","count":2,"lease":"0000000000000003","wait_ms":0}}},{"request":{"agent":"c","request":{"id":"e4","op":"barrier.enter","name":"start","count":2,"lease":"0000000000000003","wait_ms":30000}}}]"#;
    let commands: Vec<Command> = serde_json::from_str(log).expect("the barrier log decodes");
    assert_eq!(
        serde_json::to_string(&commands).expect("encodes"),
        log,
        "the barrier commands changed shape"
    );
    let mut machine = StateMachine::default();
    for (meta, command) in stamps(commands.len()).into_iter().zip(commands) {
        machine.apply(meta, command).expect("indexes increase");
    }
    machine.check_invariants().expect("invariants hold");
    let snapshot: serde_json::Value =
        serde_json::from_slice(&machine.snapshot()).expect("a snapshot is JSON");
    let generation = 5u64 << 16;
    let hold = |lease: u64, agent: &str| {
        serde_json::json!({"lease": lease, "agent": agent, "token": generation, "permits": 1,
                           "since_ms": 1_700_000_005_070u64})
    };
    assert_eq!(
        snapshot["state"]["barriers"],
        serde_json::json!({"start": {
            "filling": {"count": 2, "arrivals": [{"lease": 3, "agent": "c", "request_id": "e4",
                "permits": 1, "since_ms": 1_700_000_008_196u64, "seq": 8}]},
            "passed": [{"generation": generation,
                "members": {"1": hold(1, "a"), "2": hold(2, "b")},
                "leaving": [{"lease": 1, "agent": "a", "request_id": "l1", "permits": 1,
                    "since_ms": 1_700_000_006_105u64, "seq": 6}]}]}})
    );
    let restored = StateMachine::restore(&machine.snapshot()).expect("restores");
    assert_eq!(restored.snapshot(), machine.snapshot());
    assert_eq!(restored.wait_deadline_next_ms(), Some(1_700_000_038_196));
}

/// The cluster version's raise (a command of the node's own) has a pinned shape, and the
/// snapshot carries the version only once raised, as its last member (at the initial version
/// it is absent, so every snapshot above keeps its bytes).
#[test]
fn the_cluster_version_command_and_its_snapshot_have_a_fixed_shape() {
    let command = Command::RaiseClusterVersion { version: 2 };
    let json = serde_json::to_string(&command).expect("encodes");
    assert_eq!(json, r#"{"raise_cluster_version":{"version":2}}"#);
    assert_eq!(
        serde_json::from_str::<Command>(&json).expect("decodes"),
        command
    );
    let initial = replay(vec![]);
    let raised = replay(vec![command]);
    assert_eq!(raised.cluster_version(), 2);
    let (initial, raised) = (initial.snapshot(), raised.snapshot());
    let initial = String::from_utf8(initial).expect("JSON");
    let raised = String::from_utf8(raised).expect("JSON");
    assert!(!initial.contains("cluster_version"), "{initial}");
    assert!(raised.ends_with(r#","cluster_version":2}}"#), "{raised}");
    let restored = StateMachine::restore(raised.as_bytes()).expect("restores");
    assert_eq!(restored.snapshot(), raised.as_bytes());
}
