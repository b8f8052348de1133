//! Fuzzing `apply`: arbitrary command sequences, the node's own commands included (lease and
//! wait expiries, the legacy `CancelWait`, `Configure` with any limits, account ops,
//! reservations of every priority, limits with any vacate deadline and aging), applied to a
//! fresh machine with arbitrary stamps, terms and index steps. After every entry
//! `check_invariants()` holds, nothing panics, and every few entries the machine survives
//! `restore(snapshot())` unchanged. The machine's decoders get arbitrary input too: a command
//! decoded from arbitrary JSON bytes (what a log entry's `Proposal::commands` holds), and
//! `restore` of arbitrary bytes and of a real snapshot with one value changed.
//!
//! The inputs are drawn from small universes (a few agents, names, request ids, lease ids that
//! exist) mixed with anything at all (any string, any number, NaN and infinite coordinates),
//! so that requests meet live leases, queues and remembered outcomes as well as garbage.
//!
//! ```text
//! cargo test -p hivekeeper-state-machine --test fuzz                       # 256 cases each
//! PROPTEST_CASES=1000000 cargo test --release -p hivekeeper-state-machine --test fuzz
//! ```
//!
//! A failure prints the shrunk input; commit its seed from `tests/fuzz.proptest-regressions`
//! (proptest writes it there) with the fix, so the case is replayed first on every run.

use hivekeeper_protocol::kv::{
    Compare, CompareOp, CompareTarget, Delete, Get, Holder, KeySelector, Put, TxnOp,
};
use hivekeeper_protocol::{LockMode, Op, Priority, ResourceKind, Role, Volume};
use hivekeeper_state_machine::{
    AgentRequest, CLUSTER_VERSION_SUPPORTED, Command, KV_LIMITS_DEFAULT, KvLimits, LeaseId, Limits,
    LogMeta, StateMachine,
};
use proptest::prelude::*;
use serde_json::Value;

/// Agents the requests come from: a few known ones (so leases meet their owners and others),
/// plus any string at all (invalid ids included).
fn agent() -> BoxedStrategy<String> {
    prop_oneof![
        8 => prop::sample::select(vec!["a", "b", "c", "admin"]).prop_map(str::to_string),
        1 => any::<String>(),
        1 => Just(String::new()),
    ]
    .boxed()
}

/// Names of resources and accounts: a few shared ones, plus anything.
fn name() -> BoxedStrategy<String> {
    prop_oneof![
        8 => prop::sample::select(vec!["l", "m", "s", "t", "pad1", "pad2", "a", "b"])
            .prop_map(str::to_string),
        1 => any::<String>(),
        1 => "[a-z/._-]{0,80}",
    ]
    .boxed()
}

/// Lease ids on the wire: ones that exist in a short log (ids are log positions), plus
/// malformed ones.
fn lease() -> BoxedStrategy<String> {
    prop_oneof![
        8 => (1..40u64).prop_map(|index| LeaseId(index).to_string()),
        1 => any::<u64>().prop_map(|index| LeaseId(index).to_string()),
        1 => any::<String>(),
    ]
    .boxed()
}

/// Keys and prefixes: a few shared ones (a reserved one and the empty one among them), plus
/// anything.
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        8 => prop::sample::select(vec!["k", "k/a", "k/b", "j", "$svc", ""]).prop_map(str::to_string),
        1 => any::<String>(),
    ]
    .boxed()
}

/// A key or a prefix, or neither or both (refused).
fn key_or_prefix() -> BoxedStrategy<(Option<String>, Option<String>)> {
    (prop::option::of(key()), prop::option::of(key())).boxed()
}

fn kv_put() -> BoxedStrategy<Put> {
    (key(), name(), prop::option::of(lease()), any::<bool>())
        .prop_map(|(key, value, lease, prev_kv)| Put {
            key,
            value,
            lease,
            prev_kv,
        })
        .boxed()
}

fn txn_op() -> BoxedStrategy<TxnOp> {
    prop_oneof![
        kv_put().prop_map(TxnOp::Put),
        key_or_prefix().prop_map(|(key, prefix)| TxnOp::Delete(Delete { key, prefix })),
        (key(), prop::option::of(0..3u32)).prop_map(|(prefix, limit)| {
            TxnOp::Get(Get::new(KeySelector::Prefix(prefix), None, limit))
        }),
    ]
    .boxed()
}

fn compare() -> BoxedStrategy<Compare> {
    let op = prop::sample::select(vec![
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Gt,
    ]);
    let target = prop_oneof![
        name().prop_map(CompareTarget::Value),
        (0..4u64).prop_map(CompareTarget::Version),
        number().prop_map(CompareTarget::ModRevision),
        number().prop_map(CompareTarget::CreateRevision),
        prop::option::of(lease()).prop_map(CompareTarget::Lease),
    ];
    prop_oneof![
        (key(), op, target).prop_map(|(key, op, target)| Compare::Key { key, op, target }),
        (name(), number()).prop_map(|(name, token)| Compare::Holder {
            holder: Holder {
                kind: ResourceKind::Lock,
                name,
            },
            token,
        }),
    ]
    .boxed()
}

/// The log's clock at its first entry.
const START_MS: u64 = 1_700_000_000_000;

/// Request ids: a few, so that retries meet remembered outcomes and waiting requests.
fn request_id() -> BoxedStrategy<String> {
    prop_oneof![
        8 => (0..12u32).prop_map(|n| format!("r{n}")),
        1 => any::<String>(),
    ]
    .boxed()
}

/// Any u64, weighted towards the edges and the ranges the machine checks.
fn number() -> BoxedStrategy<u64> {
    prop_oneof![
        4 => 0..10_000u64,
        2 => Just(0u64),
        1 => Just(u64::MAX),
        1 => (u64::MAX - 10_000)..=u64::MAX,
        2 => any::<u64>(),
    ]
    .boxed()
}

/// A lock's mode, exclusive more often than not.
fn lock_mode() -> BoxedStrategy<LockMode> {
    prop_oneof![2 => Just(LockMode::Exclusive), 1 => Just(LockMode::Shared)].boxed()
}

/// A multi-lock's names: none, a few (duplicates sometimes), or more than a multi-lock may
/// have.
fn lock_names() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        8 => prop::collection::vec(name(), 1..4),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(name(), 64..67),
    ]
    .boxed()
}

/// A fencing token: one a short log can grant (`position << 16`, plus a few for the further
/// grants of an entry), so that proclaims and resigns meet a leadership, or any number.
fn token() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => (1..64u64, 0..3u64).prop_map(|(position, extra)| (position << 16) + extra),
        1 => number(),
    ]
    .boxed()
}

fn wait_ms() -> BoxedStrategy<Option<u64>> {
    prop::option::of(number()).boxed()
}

/// A hold's bound: none mostly, or any number (0 and past the longest TTL included).
fn max_hold_ms() -> BoxedStrategy<Option<u64>> {
    prop_oneof![2 => Just(None), 1 => number().prop_map(Some)].boxed()
}

/// A route's volumes: none, a few, or more than a route may have; any coordinates and times.
fn volumes() -> BoxedStrategy<Vec<Volume>> {
    let volume = (
        (float(), float(), float()),
        (float(), float()),
        (window_ms(), window_ms()),
    )
        .prop_map(
            |((lat, lon, radius_m), (alt_min_m, alt_max_m), (start_ms, end_ms))| Volume {
                lat,
                lon,
                radius_m,
                alt_min_m,
                alt_max_m,
                start_ms: start_ms.unwrap_or(START_MS),
                end_ms: end_ms.unwrap_or(START_MS + 60_000),
            },
        );
    // Valid ones, close together, so that routes are granted, conflict and wait.
    let near = (
        0..400u32,
        0..400u32,
        0..40u32,
        0..100u32,
        0..20_000_000u64,
        1..4_000_000u64,
    )
        .prop_map(|(north, east, radius, alt, start, length)| Volume {
            lat: 47.0 + f64::from(north) * 1e-5,
            lon: 8.0 + f64::from(east) * 1e-5,
            radius_m: f64::from(radius),
            alt_min_m: f64::from(alt),
            alt_max_m: f64::from(alt) + 30.0,
            start_ms: START_MS + start,
            end_ms: START_MS + start + length,
        });
    prop_oneof![
        6 => prop::collection::vec(near, 1..6),
        3 => prop::collection::vec(volume.clone(), 1..6),
        1 => prop::collection::vec(volume, 0..70),
    ]
    .boxed()
}

/// A reservation window's end: any number, or an instant within a few hours of the log's
/// clock (which starts at [`START_MS`]), so that windows are accepted, overlap and end.
fn window_ms() -> BoxedStrategy<Option<u64>> {
    prop::option::of(prop_oneof![
        1 => number(),
        3 => (0..20_000_000u64).prop_map(|ms| START_MS + ms),
    ])
    .boxed()
}

/// A coordinate or length: ordinary values, edges, and what JSON cannot even carry.
fn float() -> BoxedStrategy<f64> {
    prop_oneof![
        6 => -200.0..200.0f64,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => any::<f64>(),
    ]
    .boxed()
}

fn count() -> BoxedStrategy<u32> {
    prop_oneof![4 => 0..6u32, 1 => any::<u32>()].boxed()
}

/// A reservation's priority: any level (the type admits no other; the wire's decoder refuses
/// the rest, `Priority`'s own tests).
fn priority() -> BoxedStrategy<Priority> {
    (0..=3u8)
        .prop_map(|level| Priority::new(level).expect("0 to 3"))
        .boxed()
}

fn role() -> BoxedStrategy<Role> {
    prop::sample::select(Role::ALL.to_vec()).boxed()
}

/// Every op an agent's request can carry, with any field values.
fn agent_op() -> BoxedStrategy<Op> {
    prop_oneof![
        4 => (number(), number()).prop_map(|(ttl_ms, lock_delay_ms)| Op::LeaseGrant {
            ttl_ms,
            lock_delay_ms
        }),
        4 => (500..10_000u64, prop_oneof![Just(0u64), 0..3_000u64]).prop_map(
            |(ttl_ms, lock_delay_ms)| Op::LeaseGrant {
                ttl_ms,
                lock_delay_ms
            }
        ),
        2 => lease().prop_map(|lease| Op::LeaseRevoke { lease }),
        4 => (name(), lease(), wait_ms(), max_hold_ms(), lock_mode()).prop_map(
            |(name, lease, wait_ms, max_hold_ms, mode)| Op::LockAcquire {
                name,
                lease,
                wait_ms,
                max_hold_ms,
                mode,
            }
        ),
        3 => (name(), lease()).prop_map(|(name, lease)| Op::LockRelease { name, lease }),
        2 => (name(), lease()).prop_map(|(name, lease)| Op::LockDowngrade { name, lease }),
        3 => (lock_names(), lease(), wait_ms(), max_hold_ms(), lock_mode()).prop_map(
            |(names, lease, wait_ms, max_hold_ms, mode)| Op::LockAcquireAll {
                names,
                lease,
                wait_ms,
                max_hold_ms,
                mode,
            }
        ),
        2 => (lock_names(), lease())
            .prop_map(|(names, lease)| Op::LockReleaseAll { names, lease }),
        4 => (name(), count(), lease(), count(), wait_ms(), max_hold_ms()).prop_map(
            |(name, limit, lease, permits, wait_ms, max_hold_ms)| Op::SemAcquire {
                name,
                limit,
                lease,
                permits,
                wait_ms,
                max_hold_ms,
            }
        ),
        2 => (name(), lease()).prop_map(|(name, lease)| Op::SemRelease { name, lease }),
        4 => (
            name(),
            lease(),
            prop::option::of(float()),
            prop::option::of(float()),
            (prop::option::of(float()), prop::option::of(float())),
            prop::option::of(float()),
            (wait_ms(), window_ms(), window_ms()),
            priority(),
        )
            .prop_map(
                |(name, lease, lat, lon, (alt_min_m, alt_max_m), radius_m, (wait_ms, start_ms, end_ms), priority)| {
                    Op::WaypointReserve {
                        name,
                        lease,
                        lat,
                        lon,
                        alt_min_m,
                        alt_max_m,
                        radius_m,
                        wait_ms,
                        start_ms,
                        end_ms,
                        priority,
                    }
                }
            ),
        2 => (name(), lease()).prop_map(|(name, lease)| Op::WaypointRelease { name, lease }),
        3 => (name(), lease(), volumes(), wait_ms(), priority()).prop_map(
            |(name, lease, volumes, wait_ms, priority)| Op::RouteReserve {
                name,
                lease,
                volumes,
                wait_ms,
                priority,
            }
        ),
        1 => (name(), lease()).prop_map(|(name, lease)| Op::RouteRelease { name, lease }),
        2 => (name(), lease(), volumes(), priority()).prop_map(
            |(name, lease, volumes, priority)| Op::RouteAmend {
                name,
                lease,
                volumes,
                priority
            }
        ),
        2 => lease().prop_map(|lease| Op::AdminRevoke { lease }),
        1 => (
            name(),
            prop::option::of(role()),
            prop::collection::vec(key(), 0..3),
            prop::collection::vec(key(), 0..3)
        )
            .prop_map(|(name, role, kv_read, kv_write)| Op::AdminAgentAdd {
                name,
                role,
                kv_read,
                kv_write,
            }),
        1 => name().prop_map(|name| Op::AdminAgentRotate { name }),
        1 => name().prop_map(|name| Op::AdminAgentRemove { name }),
        4 => kv_put().prop_map(|put| Op::KvPut {
            key: put.key,
            value: put.value,
            lease: put.lease,
            prev_kv: Some(put.prev_kv),
        }),
        2 => key_or_prefix().prop_map(|(key, prefix)| Op::KvDelete { key, prefix }),
        2 => (
            prop::collection::vec(compare(), 0..3),
            prop::collection::vec(txn_op(), 0..4),
            prop::collection::vec(txn_op(), 0..3),
        )
            .prop_map(|(compare, success, failure)| Op::KvTxn {
                compare,
                success,
                failure,
            }),
        4 => (name(), lease(), name(), wait_ms()).prop_map(|(name, lease, value, wait_ms)| {
            Op::ElectionCampaign {
                name,
                lease,
                value,
                wait_ms,
            }
        }),
        2 => (name(), token(), name())
            .prop_map(|(name, token, value)| Op::ElectionProclaim { name, token, value }),
        2 => (name(), token()).prop_map(|(name, token)| Op::ElectionResign { name, token }),
        3 => (name(), count(), lease(), wait_ms()).prop_map(|(name, count, lease, wait_ms)| {
            Op::BarrierEnter {
                name,
                count,
                lease,
                wait_ms,
            }
        }),
        2 => (name(), lease(), wait_ms())
            .prop_map(|(name, lease, wait_ms)| Op::BarrierLeave { name, lease, wait_ms }),
    ]
    .boxed()
}

/// The ops that are never logged (reads and the node's own): a log holding one is refused
/// `bad_request`, and the machine must not change.
fn unlogged_op() -> BoxedStrategy<Op> {
    let kind = || prop::sample::select(ResourceKind::ALL.to_vec());
    let after = || prop::option::of(name());
    prop_oneof![
        lease().prop_map(|lease| Op::LeaseKeepalive { lease }),
        (name(), kind(), any::<u64>()).prop_map(|(name, kind, token)| Op::FenceCheck {
            name,
            kind,
            token
        }),
        (kind(), name()).prop_map(|(kind, name)| Op::Inspect { kind, name }),
        Just(Op::AdminStatus {}),
        after().prop_map(|after| Op::AdminLeases { after }),
        (prop::option::of(kind()), after(), prop::option::of(count())).prop_map(
            |(kind, after, limit)| Op::AdminResources {
                kind,
                prefix: None,
                after,
                limit
            }
        ),
        (prop::option::of(number()), prop::option::of(number())).prop_map(|(index, offset)| {
            Op::AdminSnapshot {
                index,
                offset,
                page_bytes_max: None,
            }
        }),
        name().prop_map(|name| Op::AdminMemberAdd {
            name,
            addr: "127.0.0.1:1".into(),
            catch_up_timeout_ms: None,
            catch_up_lag_entries_max: None,
        }),
        name().prop_map(|name| Op::AdminMemberRemove { name }),
        after().prop_map(|after| Op::AdminAgentList { after }),
        (
            key_or_prefix(),
            prop::option::of(key()),
            prop::option::of(0..5u32)
        )
            .prop_map(|((key, prefix), after, limit)| Op::KvGet {
                key,
                prefix,
                after,
                limit,
                serializable: None,
            }),
        (volumes(), after()).prop_map(|(volumes, after)| Op::AirspaceQuery {
            volume: None,
            volumes: Some(volumes),
            after,
            limit: None,
        }),
        (
            key_or_prefix(),
            any::<u64>(),
            proptest::option::of("[a-z/]{1,8}")
        )
            .prop_map(|((key, prefix), after, after_key)| Op::WatchPoll {
                key,
                prefix,
                after,
                after_key,
                max_events: None,
                wait_ms: Some(0),
            }),
        name().prop_map(|name| Op::ElectionLeader { name }),
    ]
    .boxed()
}

/// Any request a log entry can carry: every op of the protocol, with a secret's hash or
/// without (only the account ops that set a secret may have one).
fn agent_request() -> BoxedStrategy<AgentRequest> {
    let op = prop_oneof![12 => agent_op(), 2 => unlogged_op()];
    let secret_hash = prop::option::of(any::<String>());
    (request_id(), op, secret_hash)
        .prop_map(|(id, op, secret_hash)| AgentRequest {
            id,
            op,
            secret_hash,
        })
        .boxed()
}

/// Any limits: the defaults, tight ones, zeros (refused) and anything.
fn limits() -> BoxedStrategy<Limits> {
    let tight = (count(), count(), count(), count(), count(), count()).prop_map(
        |(leases_max, resources_max, waiters, waypoint_waiters, dedup, agents)| Limits {
            leases_max,
            resources_max,
            waiters_per_resource_max: waiters,
            waypoint_waiters_max: waypoint_waiters,
            dedup_per_agent_max: dedup,
            dedup_agents_max: agents,
            ..Limits::DEFAULTS
        },
    );
    let per_agent = (count(), count(), count(), number(), number()).prop_map(
        |(leases, waits, holds, ttl_min, ttl_max)| Limits {
            leases_per_agent_max: leases,
            waits_per_lease_max: waits,
            holds_per_agent_max: holds,
            lease_ttl_ms_min: ttl_min,
            lease_ttl_ms_max: ttl_max,
            ..Limits::DEFAULTS
        },
    );
    // Vacate deadlines and aging that a few entries' stamps reach, or any at all.
    let airspace = (number(), number()).prop_map(|(vacate_ms, aging_ms)| Limits {
        reservation_vacate_ms: vacate_ms,
        reservation_aging_ms: aging_ms,
        ..Limits::DEFAULTS
    });
    prop_oneof![2 => Just(Limits::DEFAULTS), 3 => tight, 3 => per_agent, 2 => airspace].boxed()
}

/// Every command a log entry can hold, the node's own included.
fn command() -> BoxedStrategy<Command> {
    prop_oneof![
        12 => (agent(), agent_request())
            .prop_map(|(agent, request)| Command::Request { agent, request }),
        2 => (number(), prop::collection::vec((1..40u64).prop_map(LeaseId), 0..5))
            .prop_map(|(term, leases)| Command::ExpireLeases { term, leases }),
        1 => (number(), prop::collection::vec(any::<u64>().prop_map(LeaseId), 0..3))
            .prop_map(|(term, leases)| Command::ExpireLeases { term, leases }),
        2 => number().prop_map(|term| Command::ExpireWaits { term }),
        2 => number().prop_map(|term| Command::ExpireReservations { term }),
        2 => number().prop_map(|term| Command::ExpireHoldTimes { term }),
        1 => (agent(), request_id())
            .prop_map(|(agent, request_id)| Command::CancelWait { agent, request_id }),
        1 => (limits(), prop::option::of(kv_limits()))
            .prop_map(|(limits, kv)| Command::Configure { limits, kv }),
        1 => (0..=CLUSTER_VERSION_SUPPORTED)
            .prop_map(|version| Command::RaiseClusterVersion { version }),
    ]
    .boxed()
}

/// Key-space bounds: the defaults, tight ones that keys and the history meet (lowering a
/// history bound compacts at once), or any, zero and past the wire's ceilings included.
fn kv_limits() -> BoxedStrategy<KvLimits> {
    let tight = (
        count(),
        count(),
        count(),
        count(),
        count(),
        count(),
        count(),
    )
        .prop_map(
            |(keys, bytes, per_lease, key_bytes, value_bytes, events, history_bytes)| KvLimits {
                keys_max: keys,
                bytes_max: u64::from(bytes) * 16,
                keys_per_lease_max: per_lease,
                key_bytes_max: key_bytes,
                value_bytes_max: value_bytes,
                history_events_max: events,
                history_bytes_max: u64::from(history_bytes) * 16,
            },
        );
    prop_oneof![2 => Just(KV_LIMITS_DEFAULT), 3 => tight].boxed()
}

/// How the entry's position and stamp move before it.
#[derive(Debug, Clone)]
struct Stamp {
    /// Added to the index (at least 1; now and then a huge gap).
    index_step: u64,
    /// The term; small, so stale and current terms both occur.
    term: u64,
    /// The leader's clock: a step forward, back, a jump, or any value at all.
    now_ms: Clock,
}

#[derive(Debug, Clone)]
enum Clock {
    Forward(u64),
    Backward(u64),
    Set(u64),
}

fn stamp() -> BoxedStrategy<Stamp> {
    let clock = prop_oneof![
        20 => (0..2_000u64).prop_map(Clock::Forward),
        2 => (0..8_000_000u64).prop_map(Clock::Forward),
        3 => (0..10_000_000u64).prop_map(Clock::Backward),
        1 => number().prop_map(Clock::Set),
    ];
    let index_step = prop_oneof![30 => Just(1u64), 1 => 1..=u64::MAX / 4];
    (index_step, 0..4u64, clock)
        .prop_map(|(index_step, term, now_ms)| Stamp {
            index_step,
            term,
            now_ms,
        })
        .boxed()
}

/// Applies `entries` to a fresh machine; after each, the invariants hold, and every 8th the
/// machine restores from its snapshot to the same bytes.
fn run(entries: &[(Stamp, Command)]) -> Result<(), TestCaseError> {
    let mut machine = StateMachine::default();
    let (mut index, mut now_ms) = (0u64, START_MS);
    for (step, (stamp, command)) in entries.iter().enumerate() {
        let Some(next) = index.checked_add(stamp.index_step) else {
            break;
        };
        index = next;
        now_ms = match stamp.now_ms {
            Clock::Forward(ms) => now_ms.saturating_add(ms),
            Clock::Backward(ms) => now_ms.saturating_sub(ms),
            Clock::Set(ms) => ms,
        };
        let meta = LogMeta {
            index,
            term: stamp.term,
            now_ms,
        };
        let applied = machine.apply(meta, command.clone());
        prop_assert!(
            applied.is_ok(),
            "apply of {command:?} at {meta:?}: {applied:?}"
        );
        if let Err(broken) = machine.check_invariants() {
            prop_assert!(false, "after {command:?} at {meta:?}: {broken}");
        }
        if step % 8 == 7 {
            let bytes = machine.snapshot();
            let restored = StateMachine::restore(&bytes);
            prop_assert!(restored.is_ok(), "restore: {:?}", restored.err());
            let restored = restored.expect("checked");
            prop_assert!(restored.snapshot() == bytes, "restore changed the snapshot");
            machine = restored;
        }
    }
    Ok(())
}

/// A valid snapshot with one value replaced, for `restore`: `path` picks the value (each
/// number picks a member or element at that depth), `replacement` is what goes there.
fn mutate(value: &mut Value, path: &[usize], replacement: Value) {
    let Some((&pick, rest)) = path.split_first() else {
        *value = replacement;
        return;
    };
    let child = match value {
        Value::Object(map) if !map.is_empty() => {
            let key = map.keys().nth(pick % map.len()).cloned().expect("in range");
            map.get_mut(&key)
        }
        Value::Array(items) if !items.is_empty() => {
            let len = items.len();
            items.get_mut(pick % len)
        }
        _ => None,
    };
    match child {
        Some(child) => mutate(child, rest, replacement),
        None => *value = replacement,
    }
}

/// A few JSON values of every kind, for the snapshot mutations.
fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6..1e6f64).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        (1..40u64).prop_map(|n| Value::String(n.to_string())),
        Just(Value::Array(Vec::new())),
        Just(Value::Object(serde_json::Map::new())),
    ]
    .boxed()
}

/// [`busy_snapshot`] as JSON, made once.
fn busy_snapshot_json() -> &'static Value {
    static SNAPSHOT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SNAPSHOT.get_or_init(|| serde_json::from_slice(&busy_snapshot()).expect("a snapshot is JSON"))
}

/// A machine with leases, holds, waiters, an election, barriers, remembered outcomes and an
/// account: the snapshot the mutations start from.
fn busy_snapshot() -> Vec<u8> {
    let mut machine = StateMachine::default();
    let mut index = 0;
    let mut apply = |agent: &str, id: &str, op: Op| {
        index += 1;
        let meta = LogMeta {
            index,
            term: 1,
            now_ms: 1_700_000_000_000 + index * 10,
        };
        let request = AgentRequest::new(id, op);
        let agent = agent.into();
        machine
            .apply(meta, Command::Request { agent, request })
            .expect("a well-formed log");
    };
    apply(
        "a",
        "g",
        Op::LeaseGrant {
            ttl_ms: 5_000,
            lock_delay_ms: 0,
        },
    );
    apply(
        "b",
        "g",
        Op::LeaseGrant {
            ttl_ms: 5_000,
            lock_delay_ms: 0,
        },
    );
    let (a, b) = (LeaseId(1).to_string(), LeaseId(2).to_string());
    let lock = |name: &str, lease: &str, wait_ms, max_hold_ms| Op::LockAcquire {
        name: name.into(),
        lease: lease.into(),
        wait_ms,
        max_hold_ms,
        mode: LockMode::Exclusive,
    };
    apply("a", "l1", lock("l", &a, None, Some(60_000)));
    apply("b", "l2", lock("l", &b, Some(1_000), Some(30_000)));
    // Two shared holders, a multi-lock held with a max-hold, and one waiting on a lock it
    // makes holder-less, so that mutations reach modes and multi-locks too.
    let shared = |lease: &str| Op::LockAcquire {
        name: "r".into(),
        lease: lease.into(),
        wait_ms: None,
        max_hold_ms: None,
        mode: LockMode::Shared,
    };
    let all = |names: [&str; 2], lease: &str, max_hold_ms| Op::LockAcquireAll {
        names: names.map(str::to_string).to_vec(),
        lease: lease.into(),
        wait_ms: Some(1_000),
        max_hold_ms,
        mode: LockMode::Exclusive,
    };
    apply("a", "r1", shared(&a));
    apply("b", "r2", shared(&b));
    apply("a", "m1", all(["m", "n"], &a, Some(60_000)));
    apply("b", "m2", all(["o", "n"], &b, Some(30_000)));
    // Locks held back by the lock-delay of an operator's revoke, one held exclusive and one
    // shared beside other shared holders, so mutations reach them too.
    apply(
        "c",
        "g",
        Op::LeaseGrant {
            ttl_ms: 5_000,
            lock_delay_ms: 60_000,
        },
    );
    let c = LeaseId(9).to_string();
    apply("c", "l3", lock("held-back", &c, None, None));
    apply("c", "r3", shared(&c));
    apply("admin", "r", Op::AdminRevoke { lease: c });
    let sem = |lease: &str| Op::SemAcquire {
        name: "s".into(),
        limit: 2,
        lease: lease.into(),
        permits: 1,
        wait_ms: None,
        max_hold_ms: None,
    };
    apply("a", "s1", sem(&a));
    apply("b", "s2", sem(&b));
    let pad = |name: &str, lease: &str, (start_ms, end_ms)| Op::WaypointReserve {
        name: name.into(),
        lease: lease.into(),
        lat: Some(47.0),
        lon: Some(8.0),
        alt_min_m: None,
        alt_max_m: Some(100.0),
        radius_m: Some(5.0),
        wait_ms: None,
        start_ms,
        end_ms,
        priority: Priority::ROUTINE,
    };
    apply("a", "w1", pad("pad", &a, (None, None)));
    apply("b", "w2", pad("pad", &b, (None, None)));
    // A window held and one waiting behind it, so that mutations reach windows too.
    let window = (Some(START_MS + 1_000), Some(START_MS + 60_000));
    apply("a", "w3", pad("slot-a", &a, window));
    apply("b", "w4", pad("slot-b", &b, window));
    // An election with a leader (its `$election/` key) and a candidate.
    let campaign = |lease: &str, value: &str| Op::ElectionCampaign {
        name: "e".into(),
        lease: lease.into(),
        value: value.into(),
        wait_ms: None,
    };
    apply("a", "e1", campaign(&a, "node-a"));
    apply("b", "e2", campaign(&b, "node-b"));
    // A barrier's passed round with a member leaving, and another's round filling.
    let enter = |name: &str, count, lease: &str| Op::BarrierEnter {
        name: name.into(),
        count,
        lease: lease.into(),
        wait_ms: Some(1_000),
    };
    apply("a", "b1", enter("bar", 2, &a));
    apply("b", "b2", enter("bar", 2, &b));
    let leave = Op::BarrierLeave {
        name: "bar".into(),
        lease: a.clone(),
        wait_ms: None,
    };
    apply("a", "b3", leave);
    apply("a", "b4", enter("bar2", 3, &a));
    let mut request = AgentRequest::new(
        "acct",
        Op::AdminAgentAdd {
            name: "c".into(),
            role: Some(Role::Observer),
            kv_read: Vec::new(),
            kv_write: Vec::new(),
        },
    );
    request.secret_hash = Some("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into());
    index += 1;
    let meta = LogMeta {
        index,
        term: 1,
        now_ms: 1_700_000_000_000 + index * 10,
    };
    let agent = "admin".into();
    machine
        .apply(meta, Command::Request { agent, request })
        .expect("a well-formed log");
    machine.snapshot()
}

proptest! {
    /// Arbitrary logs of every command: invariants after every entry, no panic, snapshots
    /// restore to the same bytes.
    #[test]
    fn fuzz_apply_arbitrary_commands(entries in prop::collection::vec((stamp(), command()), 1..64)) {
        run(&entries)?;
    }

    /// A command decoded from arbitrary bytes (as a log entry's commands are) never panics;
    /// one that decodes applies like any other.
    #[test]
    fn fuzz_decode_commands_from_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(commands) = serde_json::from_slice::<Vec<Command>>(&bytes) {
            let entries: Vec<(Stamp, Command)> = commands
                .into_iter()
                .map(|command| (Stamp { index_step: 1, term: 1, now_ms: Clock::Forward(10) }, command))
                .collect();
            run(&entries)?;
        }
        let _ = serde_json::from_slice::<Command>(&bytes);
    }

    /// Commands decoded from JSON shaped like commands, with any values in the fields.
    #[test]
    fn fuzz_decode_commands_from_arbitrary_json(
        tag in prop::sample::select(vec!["request", "expire_leases", "expire_waits", "cancel_wait", "configure"]),
        op in prop::sample::select(vec![
            "lease.grant", "lease.revoke", "lock.acquire", "lock.release", "sem.acquire",
            "sem.release", "waypoint.reserve", "waypoint.release", "admin.revoke",
            "admin.agent.add", "admin.agent.rotate", "admin.agent.remove", "nope",
        ]),
        fields in prop::collection::btree_map(
            prop::sample::select(vec![
                "agent", "id", "name", "lease", "ttl_ms", "wait_ms", "limit", "permits", "lat",
                "lon", "alt_min_m", "alt_max_m", "radius_m", "role", "secret_hash", "term",
                "leases", "request_id", "limits", "leases_max",
            ]),
            json_leaf(),
            0..8,
        ),
    ) {
        let mut request: serde_json::Map<String, Value> =
            fields.iter().map(|(key, value)| (key.to_string(), value.clone())).collect();
        request.insert("op".into(), Value::String(op.into()));
        let mut body: serde_json::Map<String, Value> =
            fields.into_iter().map(|(key, value)| (key.to_string(), value)).collect();
        body.insert("request".into(), Value::Object(request));
        let json = serde_json::json!({ tag: body });
        if let Ok(command) = serde_json::from_value::<Command>(json) {
            let stamp = Stamp { index_step: 1, term: 1, now_ms: Clock::Forward(10) };
            run(&[(stamp.clone(), command.clone()), (stamp, command)])?;
        }
    }

    /// `restore` of arbitrary bytes is an error or a machine that keeps its invariants, never
    /// a panic.
    #[test]
    fn fuzz_restore_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(machine) = StateMachine::restore(&bytes) {
            prop_assert!(machine.check_invariants().is_ok());
        }
    }

    /// `restore` of a real snapshot with one value changed anywhere: refused, or a machine
    /// that keeps its invariants and applies on; never a panic.
    #[test]
    fn fuzz_restore_a_snapshot_with_one_value_changed(
        path in prop::collection::vec(any::<usize>(), 1..7),
        replacement in json_leaf(),
        then in prop::collection::vec((stamp(), command()), 0..8),
    ) {
        let mut snapshot = busy_snapshot_json().clone();
        mutate(&mut snapshot, &path, replacement);
        let bytes = serde_json::to_vec(&snapshot).expect("JSON encodes");
        if let Ok(mut machine) = StateMachine::restore(&bytes) {
            prop_assert!(machine.check_invariants().is_ok());
            let mut index = machine.applied_index();
            for (stamp, command) in then {
                index = index.saturating_add(1);
                let meta = LogMeta { index, term: stamp.term, now_ms: 1_700_000_001_000 };
                if machine.apply(meta, command).is_err() {
                    break;
                }
                if let Err(broken) = machine.check_invariants() {
                    prop_assert!(false, "after a restored snapshot: {broken}");
                }
            }
        }
    }
}

/// The generator reaches every op the protocol declares, so a new op is fuzzed as soon as it
/// is added to `Op` (this fails until the generator learns to build it).
#[test]
fn the_fuzzed_log_carries_every_op_of_the_protocol() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = agent_request();
    let mut unseen: std::collections::BTreeSet<&str> = Op::NAMES.into_iter().collect();
    for _ in 0..20_000 {
        let request = strategy.new_tree(&mut runner).expect("a request").current();
        unseen.remove(request.op.name());
        if unseen.is_empty() {
            return;
        }
    }
    panic!("the fuzz generator never builds {unseen:?}: add them to `agent_op` or `unlogged_op`");
}
