//! The FIFO lock scenario that the embedded-broker and the external-broker tests both run.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_agent::AgentError;
use tokio::task::JoinSet;

use super::{agent, agent_session, inspect_lock, wait_for_waiters, within};

/// The FIFO scenario shared by the embedded and the external-broker tests: one agent holds
/// the lock, a second contends (try-lock: `would_block`), five waiters queue in a known order
/// (each one seen queued by `inspect` before the next starts), and on release they are granted
/// one after the other in that order with strictly increasing tokens.
pub async fn fifo_scenario(port: u16, lock: &str) {
    let observer = agent("observer", port).await;
    let (_holder_agent, holder) = agent_session("holder", port, 5_000).await;
    let first = within(10, "holder takes the free lock", holder.lock(lock))
        .await
        .expect("the holder takes the free lock");
    let first_token = first.token();

    // Two agents contend: the second is refused at once by a try-lock, and nothing queues.
    let (_contender_agent, contender) = agent_session("contender", port, 5_000).await;
    let refused = within(10, "contender try_lock", contender.try_lock(lock)).await;
    assert!(
        matches!(refused, Err(AgentError::WouldBlock)),
        "a try-lock of a held lock is would_block, got {refused:?}"
    );
    let (holders, waiters) = inspect_lock(&observer, lock).await;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].agent, "holder");
    assert_eq!(holders[0].token, first_token);
    assert!(waiters.is_empty(), "a try-lock never queues: {waiters:?}");

    // Five waiters, queued one by one.
    let grants: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut tasks = JoinSet::new();
    let mut queued = Vec::new();
    for i in 1..=5 {
        let id = format!("waiter-{i}");
        let (_agent, session) = agent_session(&id, port, 5_000).await;
        let (grants, name, me) = (grants.clone(), lock.to_string(), id.clone());
        tasks.spawn(async move {
            let guard = session
                .lock(name)
                .await
                .unwrap_or_else(|e| panic!("{me} waits for the lock: {e}"));
            grants
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((me.clone(), guard.token()));
            // Hold it a moment, so a second grant at once would show up in the order.
            tokio::time::sleep(Duration::from_millis(30)).await;
            guard
                .release()
                .await
                .unwrap_or_else(|e| panic!("{me} releases: {e}"));
            session
        });
        queued.push(id);
        wait_for_waiters(&observer, lock, &queued).await;
    }
    let (holders, _) = inspect_lock(&observer, lock).await;
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].agent.as_str(), holders[0].token),
        ("holder", first_token)
    );

    within(10, "the holder releases", first.release())
        .await
        .expect("the holder releases");
    within(30, "all five waiters are served", async {
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a waiter task panicked");
        }
    })
    .await;

    let grants = grants
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let order: Vec<&str> = grants.iter().map(|(agent, _)| agent.as_str()).collect();
    assert_eq!(order, queued, "waiters are granted in arrival order");
    let mut last = first_token;
    for (agent, token) in &grants {
        assert!(
            *token > last,
            "{agent}'s token {token} is not above the previous grant's {last}: {grants:?}"
        );
        last = *token;
    }
    let (holders, waiters) = inspect_lock(&observer, lock).await;
    assert!(
        holders.is_empty() && waiters.is_empty(),
        "{holders:?} {waiters:?}"
    );
}
