//! End to end over MQTT in raw JSON, one `hivekeeper serve`: the double barrier
//! (docs/PROTOCOL.md §8.24).
//!
//! - Three agents enter a barrier of 3: the first two wait until the third arrives, and all
//!   three are answered with the same generation; `inspect` shows the arrivals meanwhile.
//! - All leave: the first two wait until the third leaves, all answered that generation.
//! - A second round works at once, with a later generation.
//! - A member whose lease is revoked mid-round is not counted: an arrival's wait is answered
//!   `lease_not_found` and the round needs another arrival; in the leave phase it counts as
//!   left, and the others are answered.

mod common;

use std::collections::BTreeMap;

use common::{Node, Raw, code};
use serde_json::{Value, json};

/// How long an unanswered request must stay unanswered to be taken as waiting: a request the
/// node can answer at once is answered within milliseconds on loopback.
const QUIET_MS: u64 = 300;

const BARRIER: &str = "survey/start";

fn enter(id: &str, lease: &str) -> Value {
    json!({"id": id, "op": "barrier.enter", "name": BARRIER, "count": 3, "lease": lease})
}

fn leave(id: &str, lease: &str) -> Value {
    json!({"id": id, "op": "barrier.leave", "name": BARRIER, "lease": lease})
}

/// Sends `request`, which must wait: nothing comes back within [`QUIET_MS`].
async fn send_waiting(raw: &mut Raw, request: Value) {
    raw.send(request.to_string()).await;
    if let Some(early) = raw.try_next(QUIET_MS).await {
        panic!("{request} was answered at once: {early}");
    }
}

/// The generation of a barrier's answer to request `id`.
fn generation(response: &Value, id: &str) -> u64 {
    assert_eq!(response["id"], id, "{response}");
    let generation = response["generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("a generation: {response}"));
    assert_eq!(
        *response,
        json!({"id": id, "ok": true, "generation": generation})
    );
    generation
}

/// The next `n` responses of `raw`, by request id (answers of one entry come in any order).
async fn answers(raw: &mut Raw, n: usize) -> BTreeMap<String, Value> {
    let mut answers = BTreeMap::new();
    for _ in 0..n {
        let response = raw.next(10).await;
        let id = response["id"].as_str().expect("an id").to_string();
        answers.insert(id, response);
    }
    answers
}

/// `inspect` of the barrier: holder agents, waiter agents, and the whole answer.
async fn inspect(raw: &mut Raw, id: &str) -> (Vec<String>, Vec<String>, Value) {
    let response = raw.inspect(id, "barrier", BARRIER).await;
    let agents = |list: &str| -> Vec<String> {
        let rows = response[list].as_array().expect("a list");
        rows.iter()
            .map(|row| row["agent"].as_str().expect("an agent").to_string())
            .collect()
    };
    (agents("holders"), agents("waiters"), response.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_barrier_passes_and_ends_together_and_does_not_count_the_dead() {
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let mut a = Raw::connect(port, "drone-1").await;
    let mut b = Raw::connect(port, "drone-2").await;
    let mut c = Raw::connect(port, "drone-3").await;
    let la = a.grant("g1", 60_000).await;
    let lb = b.grant("g2", 60_000).await;
    let lc = c.grant("g3", 60_000).await;

    // Round one fills: the first two wait, the third passes them all in one entry.
    send_waiting(&mut a, enter("e1", &la)).await;
    send_waiting(&mut b, enter("e2", &lb)).await;
    let (holders, waiters, seen) = inspect(&mut c, "i1").await;
    assert_eq!(holders, Vec::<String>::new());
    assert_eq!(waiters, ["drone-1", "drone-2"]);
    assert_eq!(seen["count"], 3, "{seen}");
    let first = generation(&c.call(enter("e3", &lc)).await, "e3");
    assert_eq!(generation(&a.next(10).await, "e1"), first);
    assert_eq!(generation(&b.next(10).await, "e2"), first);
    let (holders, waiters, _) = inspect(&mut c, "i2").await;
    assert_eq!((holders.len(), waiters.len()), (3, 0));

    // Everyone leaves: the first two wait for the third.
    send_waiting(&mut a, leave("l1", &la)).await;
    send_waiting(&mut b, leave("l2", &lb)).await;
    let (holders, _, seen) = inspect(&mut c, "i3").await;
    assert_eq!(holders, ["drone-3"], "the one the others wait for");
    assert_eq!(seen["leaving"], 2, "{seen}");
    assert_eq!(generation(&c.call(leave("l3", &lc)).await, "l3"), first);
    assert_eq!(generation(&a.next(10).await, "l1"), first);
    assert_eq!(generation(&b.next(10).await, "l2"), first);
    let (holders, waiters, seen) = inspect(&mut c, "i4").await;
    assert_eq!((holders.len(), waiters.len()), (0, 0), "forgotten: {seen}");

    // A second round at once, with a later generation.
    send_waiting(&mut b, enter("e4", &lb)).await;
    send_waiting(&mut c, enter("e5", &lc)).await;
    let second = generation(&a.call(enter("e6", &la)).await, "e6");
    assert!(second > first, "{first} then {second}");
    assert_eq!(generation(&b.next(10).await, "e4"), second);
    assert_eq!(generation(&c.next(10).await, "e5"), second);
    send_waiting(&mut a, leave("l4", &la)).await;
    send_waiting(&mut b, leave("l5", &lb)).await;
    assert_eq!(generation(&c.call(leave("l6", &lc)).await, "l6"), second);
    assert_eq!(generation(&a.next(10).await, "l4"), second);
    assert_eq!(generation(&b.next(10).await, "l5"), second);

    // A member revoked while the round fills is not counted: the round needs another arrival.
    let mut d = Raw::connect(port, "drone-4").await;
    let ld = d.grant("g4", 60_000).await;
    send_waiting(&mut a, enter("e7", &la)).await;
    send_waiting(&mut b, enter("e8", &lb)).await;
    b.send(json!({"id": "r1", "op": "lease.revoke", "lease": lb}).to_string())
        .await;
    let revoked = answers(&mut b, 2).await;
    assert_eq!(revoked["r1"], json!({"id": "r1", "ok": true}));
    assert_eq!(code(&revoked["e8"]), Some("lease_not_found"), "{revoked:?}");
    send_waiting(&mut c, enter("e9", &lc)).await;
    let third = generation(&d.call(enter("e10", &ld)).await, "e10");
    assert!(third > second, "{second} then {third}");
    assert_eq!(generation(&a.next(10).await, "e7"), third);
    assert_eq!(generation(&c.next(10).await, "e9"), third);

    // A member revoked while the others leave counts as left: they are answered.
    send_waiting(&mut a, leave("l7", &la)).await;
    send_waiting(&mut c, leave("l8", &lc)).await;
    let revoke = json!({"id": "r2", "op": "admin.revoke", "lease": ld});
    assert_eq!(b.call(revoke).await, json!({"id": "r2", "ok": true}));
    assert_eq!(generation(&a.next(10).await, "l7"), third);
    assert_eq!(generation(&c.next(10).await, "l8"), third);
    let (holders, waiters, seen) = inspect(&mut c, "i5").await;
    assert_eq!((holders.len(), waiters.len()), (0, 0), "forgotten: {seen}");
    let late = d.call(leave("l9", &ld)).await;
    assert_eq!(code(&late), Some("lease_not_found"), "{late}");
}
