//! End to end, one `hivekeeper serve` per test: FIFO locks, try-lock, wait timeout, a
//! semaphore under contention, waypoint conflicts, and same-id retries from a raw client.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use common::{
    Node, Raw, agent, agent_session, code, fifo_scenario, inspect, inspect_lock, release, within,
};
use hivekeeper_agent::protocol::{Area, Inspection, Op, ResourceKind};
use hivekeeper_agent::{AgentError, Resource, TimeWindow, Wait};
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_contend_and_five_waiters_are_granted_in_fifo_order() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    fifo_scenario(node.mqtt_port(), "gateway/config").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_would_block_and_wait_times_out() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;
    let (_a, holder) = agent_session("holder", port, 5_000).await;
    let (_b, other) = agent_session("other", port, 5_000).await;
    let held = within(10, "holder locks", holder.lock("bay"))
        .await
        .expect("the lock is free");

    // wait_ms: 0 on a held lock: would_block at once, and no queue slot.
    let refused = within(10, "try_lock", other.try_lock("bay")).await;
    assert!(
        matches!(refused, Err(AgentError::WouldBlock)),
        "{refused:?}"
    );
    let (holders, waiters) = inspect_lock(&observer, "bay").await;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].token, held.token());
    assert!(waiters.is_empty(), "{waiters:?}");

    // wait_ms: n: queued, then `timeout` once n ms ran out, and out of the queue.
    let wait = Duration::from_millis(1_500);
    let started = Instant::now();
    let timed = {
        let other = other.clone();
        tokio::spawn(async move { other.lock_timeout("bay", wait).await })
    };
    let observer_ref = &observer;
    let queued_seen = common::eventually(5, "the timed waiter is queued", move || async move {
        let (_, waiters) = inspect_lock(observer_ref, "bay").await;
        (waiters.len() == 1 && waiters[0].agent == "other").then_some(started.elapsed())
    })
    .await;
    let result = within(15, "the timed wait ends", timed)
        .await
        .expect("the waiting task");
    let waited = started.elapsed();
    assert!(
        matches!(result, Err(AgentError::WaitTimeout)),
        "a wait that runs out is `timeout`, got {result:?}"
    );
    assert!(
        waited >= wait,
        "answered `timeout` after {waited:?}, before wait_ms = {wait:?}"
    );
    assert!(
        waited < wait + Duration::from_secs(5),
        "`timeout` came {waited:?} after the request, wait_ms was {wait:?}"
    );
    eprintln!("queued seen after {queued_seen:?}; `timeout` after {waited:?} (wait_ms 1500)");
    let (holders, waiters) = inspect_lock(&observer, "bay").await;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].agent, "holder");
    assert!(
        waiters.is_empty(),
        "the timed-out waiter left the queue: {waiters:?}"
    );

    // Once released, the same try-lock succeeds with a later token.
    let first = held.token();
    release(held, "holder releases").await;
    let granted = within(10, "try_lock of a free lock", other.try_lock("bay"))
        .await
        .expect("a free lock is granted to a try-lock");
    assert!(granted.token() > first, "{} > {first}", granted.token());
    release(granted, "other releases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_of_three_never_has_more_than_three_holders() {
    const AGENTS: usize = 10;
    const LIMIT: u32 = 3;
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;
    let mut sessions = Vec::new();
    for i in 0..AGENTS {
        sessions.push(agent_session(&format!("pump-user-{i}"), port, 5_000).await);
    }

    // A shared counter of holders on the agents' side: incremented after a grant, decremented
    // before the release is sent, so it can only exceed 3 if the service granted a 4th.
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = JoinSet::new();
    for (_agent, session) in sessions {
        let (holding, most, tokens) = (holding.clone(), most.clone(), tokens.clone());
        tasks.spawn(async move {
            let guard = session
                .semaphore("pumps", LIMIT, 1)
                .await
                .unwrap_or_else(|e| panic!("sem.acquire: {e}"));
            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(guard.token());
            tokio::time::sleep(Duration::from_millis(200)).await;
            holding.fetch_sub(1, Ordering::SeqCst);
            guard
                .release()
                .await
                .unwrap_or_else(|e| panic!("sem.release: {e}"));
            session
        });
    }

    // Meanwhile the service's own view, polled: never more than 3 permits held. Bounded in
    // count (at most 600 polls) and time (the 30 s `within` below).
    let mut polls = 0;
    let mut most_seen_by_inspect = 0;
    let finished = within(30, "ten agents each get a permit", async {
        let mut finished = 0;
        while finished < AGENTS && polls < 600 {
            polls += 1;
            let success: Inspection = observer
                .request_as(Op::Inspect {
                    kind: ResourceKind::Sem,
                    name: "pumps".into(),
                })
                .await
                .expect("inspect sem");
            let holders = success.holders;
            let permits: u32 = holders.iter().map(|h| h.permits.unwrap_or(0)).sum();
            assert!(
                permits <= LIMIT && holders.len() <= LIMIT as usize,
                "more than {LIMIT} permits held: {holders:?}"
            );
            if !holders.is_empty() {
                assert_eq!(
                    success.limit,
                    Some(LIMIT),
                    "the capacity is the first acquirer's"
                );
            }
            most_seen_by_inspect = most_seen_by_inspect.max(holders.len());
            while let Some(joined) = tasks.try_join_next() {
                joined.expect("a semaphore task panicked");
                finished += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a semaphore task panicked");
            finished += 1;
        }
        finished
    })
    .await;
    assert_eq!(finished, AGENTS);
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= LIMIT as usize,
        "{most} agents held a permit at once"
    );
    assert_eq!(
        most, LIMIT as usize,
        "with 10 contenders holding 200 ms each, 3 should have held at once"
    );
    eprintln!(
        "semaphore: at most {most} holders (agents' counter), {most_seen_by_inspect} (inspect, {polls} polls)"
    );
    let mut tokens = tokens
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), AGENTS, "every grant has its own token");
    let (holders, waiters) = inspect(&observer, ResourceKind::Sem, "pumps").await;
    assert!(
        holders.is_empty() && waiters.is_empty(),
        "{holders:?} {waiters:?}"
    );
}

/// Metres north of `lat`, in degrees: the service measures great-circle distances on a sphere
/// of radius 6 371 008.8 m, on which a meridian degree is exactly this long.
fn north(lat: f64, metres: f64) -> f64 {
    lat + metres / (6_371_008.8 * std::f64::consts::PI / 180.0)
}

fn pad(lat: f64, lon: f64) -> Area {
    Area {
        lat,
        lon,
        radius_m: 3.0,
        alt_min_m: None,
        alt_max_m: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waypoints_conflict_only_when_closer_than_their_radii() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;
    let (_a, a) = agent_session("drone-a", port, 5_000).await;
    let (_b, b) = agent_session("drone-b", port, 5_000).await;
    let (_c, c) = agent_session("drone-c", port, 5_000).await;
    let (lat, lon) = (47.3769, 8.5417);
    let reserve = |name: &str, at: f64| Resource::Waypoint {
        name: name.to_string(),
        geometry: Some(pad(at, lon)),
        window: TimeWindow::default(),
        priority: hivekeeper_agent::Priority::ROUTINE,
    };

    // 10 m apart with 3 m radii (3 + 3 < 10): both granted at once.
    let pad_a = within(10, "pad-a", a.acquire(reserve("pad-a", lat), Wait::Try))
        .await
        .expect("pad-a is free");
    let pad_b = within(
        10,
        "pad-b",
        b.acquire(reserve("pad-b", north(lat, 10.0)), Wait::Try),
    )
    .await
    .expect("pad-b, 10 m from pad-a with 3 m radii, does not conflict");
    assert_ne!(pad_a.token(), pad_b.token());

    // 4 m from pad-a (and 14 m from pad-b): 4 < 3 + 3, would_block, nothing queued.
    let too_close = within(
        10,
        "pad-c",
        c.acquire(reserve("pad-c", north(lat, -4.0)), Wait::Try),
    )
    .await;
    assert!(
        matches!(too_close, Err(AgentError::WouldBlock)),
        "pad-c, 4 m from pad-a with 3 m radii, conflicts: {too_close:?}"
    );
    let (holders, waiters) = inspect(&observer, ResourceKind::Waypoint, "pad-c").await;
    assert!(
        holders.is_empty() && waiters.is_empty(),
        "{holders:?} {waiters:?}"
    );
    let (holders, _) = inspect(&observer, ResourceKind::Waypoint, "pad-a").await;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].agent, "drone-a");

    // Once pad-a is released, the same reservation is granted.
    release(pad_a, "pad-a released").await;
    let pad_c = within(
        10,
        "pad-c again",
        c.acquire(reserve("pad-c", north(lat, -4.0)), Wait::Try),
    )
    .await
    .expect("pad-c is free once pad-a is released");
    release(pad_c, "pad-c released").await;
    release(pad_b, "pad-b released").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_id_gets_the_first_outcome_and_no_second_slot() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut a = Raw::connect(port, "raw-a").await;
    let mut b = Raw::connect(port, "raw-b").await;
    let lease_a = a.grant("a-grant", 60_000).await;
    let lease_b = b.grant("b-grant", 60_000).await;

    // A grant whose response was "lost": the same id again gets the identical response.
    let acquire_a = json!({"id": "a-1", "op": "lock.acquire", "name": "gate", "lease": lease_a});
    let first = a.call(acquire_a.clone()).await;
    assert_eq!(first["ok"], true, "{first}");
    let token_a = first["token"].as_u64().expect("a grant has a token");
    let again = a.call(acquire_a.clone()).await;
    assert_eq!(again, first, "a retry gets the first outcome");
    let inspected = a.inspect("a-i1", "lock", "gate").await;
    assert_eq!(
        inspected["holders"].as_array().map(Vec::len),
        Some(1),
        "{inspected}"
    );
    assert_eq!(inspected["holders"][0]["token"], token_a);
    assert_eq!(inspected["waiters"], json!([]));

    // A queued acquire retried under its id: still one queue slot, and no answer until granted.
    let acquire_b = json!({"id": "b-1", "op": "lock.acquire", "name": "gate", "lease": lease_b});
    b.send(acquire_b.to_string()).await;
    b.send(acquire_b.to_string()).await;
    assert_eq!(
        b.try_next(500).await,
        None,
        "a queued acquire is not answered"
    );
    let inspected = a.inspect("a-i2", "lock", "gate").await;
    let waiters = inspected["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 1, "one slot for one request id: {inspected}");
    assert_eq!(waiters[0]["agent"], "raw-b");

    // The release hands the lock to b, which is answered once with its token.
    let released = a
        .call(json!({"id": "a-2", "op": "lock.release", "name": "gate", "lease": lease_a}))
        .await;
    assert_eq!(released, json!({"id": "a-2", "ok": true}));
    let granted = b.next(10).await;
    assert_eq!(granted["id"], "b-1");
    assert_eq!(granted["ok"], true, "{granted}");
    let token_b = granted["token"].as_u64().expect("a grant has a token");
    assert!(token_b > token_a, "{token_b} > {token_a}");
    assert_eq!(
        b.try_next(500).await,
        None,
        "exactly one final response per request id"
    );

    // Retries after the fact replay the first outcomes and change nothing: b's acquire is not
    // granted twice, a's old acquire does not take the lock back, a's release is not redone.
    assert_eq!(b.call(acquire_b).await, granted);
    assert_eq!(a.call(acquire_a).await, first);
    let released_again = a
        .call(json!({"id": "a-2", "op": "lock.release", "name": "gate", "lease": lease_a}))
        .await;
    assert_eq!(released_again, released);
    let inspected = a.inspect("a-i3", "lock", "gate").await;
    let holders = inspected["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{inspected}");
    assert_eq!(holders[0]["agent"], "raw-b");
    assert_eq!(holders[0]["token"], token_b);
    assert_eq!(inspected["waiters"], json!([]));

    // A fresh id is a fresh request: a's new acquire queues behind b.
    let fresh = json!({"id": "a-3", "op": "lock.acquire", "name": "gate", "lease": lease_a,
                       "wait_ms": 0});
    let refused = a.call(fresh).await;
    assert_eq!(code(&refused), Some("would_block"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_of_one_agent_are_applied_in_order() {
    // MQTT delivers one client's QoS 1 messages in order; an agent that publishes an acquire
    // and its release without waiting in between must see them applied in that order (the
    // release answered `ok`, not `not_holder` with the lock left held).
    const ROUNDS: usize = 50;
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let mut raw = Raw::connect(node.mqtt_port(), "pipeliner").await;
    let lease = raw.grant("g", 60_000).await;
    let mut out_of_order = Vec::new();
    for round in 0..ROUNDS {
        let acquire = json!({"id": format!("a{round}"), "op": "lock.acquire", "name": "pipe",
                             "lease": lease, "wait_ms": 0});
        let release = json!({"id": format!("r{round}"), "op": "lock.release", "name": "pipe",
                             "lease": lease});
        raw.send(acquire.to_string()).await;
        raw.send(release.to_string()).await;
        for _ in 0..2 {
            let response = raw.next(10).await;
            if response["ok"] != true {
                out_of_order.push(response);
            }
        }
    }
    let inspected = raw.inspect("i", "lock", "pipe").await;
    assert!(
        out_of_order.is_empty(),
        "{} of {ROUNDS} acquire+release pairs were applied out of order, e.g. {}; now {}",
        out_of_order.len(),
        out_of_order[0],
        inspected
    );
    assert_eq!(inspected["holders"], json!([]), "{inspected}");
}
