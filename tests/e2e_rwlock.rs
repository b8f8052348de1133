//! End to end over MQTT in raw JSON, one `hivekeeper serve`: read-write locks and multi-locks
//! (docs/PROTOCOL.md §8.4–§8.5.3).
//!
//! - Two shared holders hold a lock together, each with its own token; an exclusive request
//!   waits for both, and a shared request after it queues behind it (the writer is not
//!   starved); the writer is granted when the last reader leaves, and its downgrade grants the
//!   reader behind it while keeping its token.
//! - A multi-lock of two locks held by others waits as a unit and is granted, with one token
//!   valid on both, in the entry that frees the second; `lock.release_all` frees both.
//! - A multi-lock acquired with `max_hold_ms` is taken from its live holder at the deadline,
//!   on both locks in one entry: a `lock.lost` with `"reason":"max_hold"` for each, and the
//!   reader waiting on one of them granted, with no client action.

mod common;

use common::{Node, Raw, code};
use serde_json::{Value, json};

/// How long a queued request is watched for an answer it must not get yet.
const SILENCE_MS: u64 = 400;

/// The token of a successful grant.
fn token(response: &Value) -> u64 {
    assert_eq!(response["ok"], true, "{response}");
    response["token"]
        .as_u64()
        .unwrap_or_else(|| panic!("a token: {response}"))
}

/// An agent with a live lease: its raw client and the lease id.
async fn agent(port: u16, name: &str) -> (Raw, String) {
    let mut raw = Raw::connect(port, name).await;
    let lease = raw.grant(&format!("{name}-lease"), 10_000).await;
    (raw, lease)
}

/// Sends a request that must queue: no answer comes within [`SILENCE_MS`].
async fn queue(raw: &mut Raw, request: Value) {
    raw.send(request.to_string()).await;
    assert_eq!(raw.try_next(SILENCE_MS).await, None, "{request} must wait");
}

/// `fence.check` of `token` on lock `name`.
async fn fence(raw: &mut Raw, id: &str, name: &str, token: u64) -> Value {
    raw.call(json!({"id": id, "op": "fence.check", "name": name, "token": token}))
        .await
}

/// The lock's holders as `(agent, token, mode)` and waiters as `(agent, mode)`, `mode`
/// `None` where `inspect` leaves it out (exclusive).
async fn occupants(
    raw: &mut Raw,
    id: &str,
    name: &str,
) -> (
    Vec<(String, u64, Option<String>)>,
    Vec<(String, Option<String>)>,
) {
    let inspection = raw.inspect(id, "lock", name).await;
    let mode = |entry: &Value| entry["mode"].as_str().map(str::to_string);
    let list = |field: &str| inspection[field].as_array().cloned().unwrap_or_default();
    let holders = list("holders")
        .iter()
        .map(|h| {
            (
                h["agent"].as_str().unwrap_or_default().to_string(),
                h["token"].as_u64().unwrap_or(0),
                mode(h),
            )
        })
        .collect();
    let waiters = list("waiters")
        .iter()
        .map(|w| (w["agent"].as_str().unwrap_or_default().to_string(), mode(w)))
        .collect();
    (holders, waiters)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_lock_and_a_queued_writer_is_not_overtaken_by_a_later_reader() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut r1, l1) = agent(port, "reader-1").await;
    let (mut r2, l2) = agent(port, "reader-2").await;
    let (mut w, lw) = agent(port, "writer").await;
    let (mut r3, l3) = agent(port, "reader-3").await;
    let shared = |id: &str, lease: &str| {
        json!({"id": id, "op": "lock.acquire", "name": "fleet/db", "lease": lease,
               "mode": "shared"})
    };

    // Two readers hold it together, each with its own token.
    let t1 = token(&r1.call(shared("s1", &l1)).await);
    let t2 = token(&r2.call(shared("s2", &l2)).await);
    assert!(t2 > t1, "{t1} then {t2}");
    let reading = Some("shared".to_string());
    assert_eq!(
        occupants(&mut r1, "i1", "fleet/db").await,
        (
            vec![
                ("reader-1".into(), t1, reading.clone()),
                ("reader-2".into(), t2, reading.clone())
            ],
            vec![]
        )
    );
    assert_eq!(
        fence(&mut r1, "f1", "fleet/db", t1).await,
        json!({"id": "f1", "ok": true, "current": t2, "valid": true})
    );

    // A writer waits for both; a later reader queues behind the writer, not beside the readers.
    queue(
        &mut w,
        json!({"id": "x1", "op": "lock.acquire", "name": "fleet/db", "lease": lw}),
    )
    .await;
    queue(&mut r3, shared("s3", &l3)).await;
    assert_eq!(
        occupants(&mut r1, "i2", "fleet/db").await.1,
        vec![
            ("writer".into(), None),
            ("reader-3".into(), reading.clone())
        ]
    );

    // One reader leaves: the other still holds it, the writer still waits.
    let released = r1
        .call(json!({"id": "u1", "op": "lock.release", "name": "fleet/db", "lease": l1}))
        .await;
    assert_eq!(released, json!({"id": "u1", "ok": true}));
    assert_eq!(
        w.try_next(SILENCE_MS).await,
        None,
        "the writer waits for the last reader"
    );
    // The last reader leaves: the writer is granted, the reader behind it still waits.
    r2.call(json!({"id": "u2", "op": "lock.release", "name": "fleet/db", "lease": l2}))
        .await;
    let granted = w.next(10).await;
    assert_eq!(granted["id"], "x1", "{granted}");
    let tw = token(&granted);
    assert!(tw > t2, "{t2} then {tw}");
    assert_eq!(r3.try_next(SILENCE_MS).await, None);

    // The writer downgrades: its token is kept, and the reader behind it joins it.
    let downgraded = w
        .call(json!({"id": "d1", "op": "lock.downgrade", "name": "fleet/db", "lease": lw}))
        .await;
    assert_eq!(downgraded, json!({"id": "d1", "ok": true, "token": tw}));
    let joined = r3.next(10).await;
    assert_eq!(joined["id"], "s3", "{joined}");
    let t3 = token(&joined);
    assert!(t3 > tw, "{tw} then {t3}");
    assert_eq!(
        occupants(&mut r3, "i3", "fleet/db").await,
        (
            vec![
                ("writer".into(), tw, reading.clone()),
                ("reader-3".into(), t3, reading)
            ],
            vec![]
        )
    );
    // No upgrade back: bad_request, and nothing changes.
    let upgrade = r3
        .call(json!({"id": "x2", "op": "lock.acquire", "name": "fleet/db", "lease": l3}))
        .await;
    assert_eq!(code(&upgrade), Some("bad_request"), "{upgrade}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_is_granted_once_both_locks_are_free_with_one_token() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut p, lp) = agent(port, "holder-1").await;
    let (mut q, lq) = agent(port, "holder-2").await;
    let (mut m, lm) = agent(port, "mover").await;
    let (mut z, lz) = agent(port, "late").await;
    let lock = |id: &str, name: &str, lease: &str| json!({"id": id, "op": "lock.acquire", "name": name, "lease": lease});
    let held_1 = token(&p.call(lock("a1", "bay/1", &lp)).await);
    let held_2 = token(&q.call(lock("a2", "bay/2", &lq)).await);

    // Both are held: the multi-lock waits as a unit, in both queues.
    queue(
        &mut m,
        json!({"id": "m1", "op": "lock.acquire_all", "names": ["bay/2", "bay/1"], "lease": lm}),
    )
    .await;
    for (id, name) in [("i1", "bay/1"), ("i2", "bay/2")] {
        assert_eq!(
            occupants(&mut z, id, name).await.1,
            vec![("mover".into(), None)]
        );
    }
    // bay/1 freed: the multi-lock still waits for bay/2, and keeps bay/1 from a later request.
    p.call(json!({"id": "u1", "op": "lock.release", "name": "bay/1", "lease": lp}))
        .await;
    assert_eq!(
        m.try_next(SILENCE_MS).await,
        None,
        "it never holds part of what it waits for"
    );
    let late = z
        .call(
            json!({"id": "z1", "op": "lock.acquire", "name": "bay/1", "lease": lz,
                     "wait_ms": 0}),
        )
        .await;
    assert_eq!(code(&late), Some("would_block"), "{late}");

    // bay/2 freed: both granted in one entry, one token valid on each.
    q.call(json!({"id": "u2", "op": "lock.release", "name": "bay/2", "lease": lq}))
        .await;
    let granted = m.next(10).await;
    assert_eq!(granted["id"], "m1", "{granted}");
    let tm = token(&granted);
    assert!(tm > held_1.max(held_2), "{held_1}, {held_2} then {tm}");
    for (id, name) in [("f1", "bay/1"), ("f2", "bay/2")] {
        assert_eq!(
            fence(&mut z, id, name, tm).await,
            json!({"id": id, "ok": true, "current": tm, "valid": true})
        );
    }

    // Released together; a second release_all holds nothing to release.
    let release_all = |id: &str| json!({"id": id, "op": "lock.release_all", "names": ["bay/1", "bay/2"], "lease": lm});
    assert_eq!(
        m.call(release_all("r1")).await,
        json!({"id": "r1", "ok": true})
    );
    let again = m.call(release_all("r2")).await;
    assert_eq!(code(&again), Some("not_holder"), "{again}");
    for (id, name) in [("i3", "bay/1"), ("i4", "bay/2")] {
        assert_eq!(occupants(&mut z, id, name).await, (vec![], vec![]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_locks_max_hold_ends_both_locks_with_a_loss_each_and_grants_the_reader_waiting() {
    const MAX_HOLD_MS: u64 = 1_500;
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (mut m, lm) = agent(port, "mover").await;
    m.subscribe("hk/v1/evt/mover").await;
    let (mut r, lr) = agent(port, "reader").await;

    let granted_at = std::time::Instant::now();
    let held = token(
        &m.call(
            json!({"id": "m1", "op": "lock.acquire_all", "names": ["bay/1", "bay/2"],
                   "lease": lm, "max_hold_ms": MAX_HOLD_MS}),
        )
        .await,
    );
    queue(
        &mut r,
        json!({"id": "s1", "op": "lock.acquire", "name": "bay/2", "lease": lr,
               "mode": "shared"}),
    )
    .await;

    // At the deadline the node ends both holds in one entry, with no client action: the
    // reader is granted, and the mover is told it lost each lock, by max-hold.
    let granted = r.next(10).await;
    assert_eq!(granted["id"], "s1", "{granted}");
    assert!(token(&granted) > held);
    let waited = granted_at.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(MAX_HOLD_MS),
        "granted {waited:?} after the multi-lock, inside its {MAX_HOLD_MS} ms max-hold"
    );
    let mut told = vec![m.next_event(10).await.1, m.next_event(10).await.1];
    told.sort_by_key(|event| event["name"].to_string());
    let lost = |name: &str| json!({"event": "lock.lost", "name": name, "token": held, "reason": "max_hold"});
    assert_eq!(told, vec![lost("bay/1"), lost("bay/2")]);
    assert_eq!(occupants(&mut r, "i1", "bay/1").await, (vec![], vec![]));
    // The mover's lease lives on.
    let again = m
        .call(json!({"id": "m2", "op": "lock.acquire", "name": "bay/1", "lease": lm}))
        .await;
    assert!(token(&again) > held, "{again}");
}
