//! End to end: `kill -9` a node with a lock held and waiters queued, start it again on the same
//! data dir and ports. The state is exactly what was acknowledged, tokens keep increasing, the
//! waiting agents are served after the restart (SDK agents resend their queued request ids,
//! the raw client resends by hand), and leases survive with a fresh deadline.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use common::{Node, Raw, agent, agent_session, inspect_lock, wait_for_waiters, within};
use hivekeeper_agent::SessionState;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio::time::Instant;

const TTL_MS: u64 = 5_000;
/// The TTL of a lease nobody keeps alive.
const SPARE_TTL_MS: u64 = 4_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_keeps_the_acknowledged_state_and_serves_the_waiters() {
    let dir = tempfile::tempdir().expect("temp data dir");
    // `restart` keeps the data dir and both ports.
    let mut node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let observer = agent("observer", port).await;

    // A lease that nobody keeps alive, holding another lock: granted first, so that before
    // the kill its deadline is at most 1 s away. It must survive the restart anyway (a new
    // leader gives every lease a fresh deadline, now + TTL) and expire one TTL after it.
    let mut raw = Raw::connect(port, "raw-4").await;
    let spare_granted_at = Instant::now();
    let spare_lease = raw.grant("r-spare-grant", SPARE_TTL_MS).await;
    let spare = raw
        .call(
            json!({"id": "r-spare", "op": "lock.acquire", "name": "spare",
                     "lease": spare_lease}),
        )
        .await;
    assert_eq!(spare["ok"], true, "{spare}");
    assert!(
        spare["token"].as_u64().is_some(),
        "a grant has a token: {spare}"
    );

    let (_holder_agent, holder) = agent_session("holder", port, TTL_MS).await;
    let held = within(10, "holder locks", holder.lock("hangar"))
        .await
        .expect("the lock is free");
    // Tokens increase per resource: the hangar's grants are compared with the hangar's.
    let mut highest = held.token();

    // Three SDK waiters, then a raw one, queued in a known order.
    let grants: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut tasks = JoinSet::new();
    let mut queued = Vec::new();
    let mut waiter_agents = Vec::new();
    for i in 1..=3 {
        let id = format!("waiter-{i}");
        let (waiter_agent, session) = agent_session(&id, port, TTL_MS).await;
        waiter_agents.push(waiter_agent);
        let (grants, me) = (grants.clone(), id.clone());
        tasks.spawn(async move {
            let guard = session
                .lock("hangar")
                .await
                .unwrap_or_else(|e| panic!("{me} waits across the restart: {e}"));
            grants
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((me.clone(), guard.token()));
            tokio::time::sleep(Duration::from_millis(30)).await;
            guard
                .release()
                .await
                .unwrap_or_else(|e| panic!("{me} releases: {e}"));
            session
        });
        queued.push(id);
        wait_for_waiters(&observer, "hangar", &queued).await;
    }
    let raw_lease = raw.grant("r-grant", 60_000).await;
    let raw_acquire =
        json!({"id": "r-acquire", "op": "lock.acquire", "name": "hangar", "lease": raw_lease});
    raw.send(raw_acquire.to_string()).await;
    queued.push("raw-4".to_string());
    wait_for_waiters(&observer, "hangar", &queued).await;
    let acknowledged = inspect_lock(&observer, "hangar").await;
    let spare_acknowledged = inspect_lock(&observer, "spare").await;
    assert_eq!(acknowledged.0.len(), 1);
    assert_eq!(acknowledged.0[0].agent, "holder");
    assert_eq!(acknowledged.1.len(), 4);

    // kill -9, and the same node again on the same data dir and ports; the unkept lease's
    // old deadline is then at most 1 s away.
    within(
        15,
        "the unkept lease nears its deadline",
        tokio::time::sleep_until(spare_granted_at + Duration::from_millis(SPARE_TTL_MS - 1_000)),
    )
    .await;
    let killed_at = Instant::now();
    node.kill9();
    node.restart().await;
    let restart_took = node.ready_at - killed_at;

    // The state is what was acknowledged: same holder, lease and token; same waiters in the
    // same order; the unkept lease's lock is still held.
    let after = inspect_lock(&observer, "hangar").await;
    assert_eq!(after, acknowledged, "the state after the restart");
    let spare_after = inspect_lock(&observer, "spare").await;
    let spare_seen_at = Instant::now();
    assert_eq!(
        spare_after,
        spare_acknowledged,
        "a lease without keepalives is still alive right after the restart ({:?} after ready)",
        spare_seen_at - node.ready_at
    );

    // Watch the unkept lease from now on: when does its lock become free? Bounded: 400 polls
    // of 50 ms.
    let spare_watch = {
        let observer = observer.clone();
        tokio::spawn(async move {
            for _ in 0..400 {
                let (holders, _) = inspect_lock(&observer, "spare").await;
                if holders.is_empty() {
                    return Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            None
        })
    };

    // The holder's lease survives the restart: still held past its TTL counted from the kill,
    // so the keepalives after the reconnect reached the new leader.
    let past_ttl = killed_at + Duration::from_millis(TTL_MS + 500);
    within(15, "past the TTL", tokio::time::sleep_until(past_ttl)).await;
    assert_eq!(holder.state(), SessionState::Live, "the holder's session");
    let (holders, waiters) = inspect_lock(&observer, "hangar").await;
    assert_eq!(holders, acknowledged.0, "the holder still holds the lock");
    assert_eq!(waiters.len(), 4, "{waiters:?}");

    // Release: the waiters are served in their order, with tokens above every earlier one.
    within(10, "the holder releases", held.release())
        .await
        .expect("the holder releases after the restart");
    within(30, "the SDK waiters are served", async {
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a waiter task panicked");
        }
    })
    .await;
    // The raw client resends its queued id (its grant may have been published while it was
    // not subscribed); a resend is answered only once it is granted. Bounded: 30 rounds.
    let mut raw_grant: Option<Value> = None;
    for _ in 0..30 {
        raw.send(raw_acquire.to_string()).await;
        if let Some(response) = raw.try_next(1_000).await {
            raw_grant = Some(response);
            break;
        }
    }
    let raw_grant = raw_grant.expect("the raw waiter is granted after the restart");
    assert_eq!(raw_grant["id"], "r-acquire");
    assert_eq!(raw_grant["ok"], true, "{raw_grant}");
    let mut grants = grants
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    grants.push((
        "raw-4".to_string(),
        raw_grant["token"].as_u64().expect("a token"),
    ));
    let order: Vec<&str> = grants.iter().map(|(agent, _)| agent.as_str()).collect();
    assert_eq!(order, queued, "FIFO order across the restart");
    for (agent, token) in &grants {
        assert!(
            *token > highest,
            "{agent}'s token {token} is not above every earlier token ({highest}): {grants:?}"
        );
        highest = *token;
    }
    // Resends that crossed the grant are answered with the same grant, nothing else.
    let released = raw
        .call_after_resends(
            json!({"id": "r-release", "op": "lock.release", "name": "hangar",
                   "lease": raw_lease}),
            &raw_grant,
        )
        .await;
    assert_eq!(released["ok"], true, "{released}");
    let (holders, waiters) = inspect_lock(&observer, "hangar").await;
    assert!(
        holders.is_empty() && waiters.is_empty(),
        "{holders:?} {waiters:?}"
    );

    // The unkept lease expires in the end, one fresh TTL after the restart.
    let expired_at = within(20, "the unkept lease expires", spare_watch)
        .await
        .expect("the watching task")
        .expect("the unkept lease expires within 20 s");
    let expired_after_kill = expired_at - killed_at;
    let resends: Vec<u64> = waiter_agents
        .iter()
        .map(|agent| agent.stats().resends_total)
        .collect();
    eprintln!("SDK waiters' same-id resends (all requests): {resends:?}");
    eprintln!(
        "restart: kill to ready {restart_took:?}; the unkept {SPARE_TTL_MS} ms lease (old \
         deadline <= 1 s after the kill) expired {expired_after_kill:?} after the kill, {:?} \
         after ready",
        expired_at - node.ready_at
    );
    // Without a fresh deadline it would have expired about 1 s after the kill; with one, not
    // before the new leader's takeover + 4 s (takeover precedes ready).
    assert!(
        expired_after_kill > Duration::from_millis(2_500),
        "the unkept lease expired {expired_after_kill:?} after the kill: no fresh deadline"
    );
}
