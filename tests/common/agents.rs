//! SDK agents with test-sized timeouts, and what the tests do through them: sessions,
//! `inspect`, `fence.check`, waiting for a queue, releasing a guard.

use hivekeeper_agent::protocol::{
    FenceStatus, HolderInfo, Inspection, Op, ResourceKind, WaiterInfo,
};
use hivekeeper_agent::{Agent, AgentConfig, Guard, Session};

use super::{eventually, within};

/// SDK settings for a test agent: timeouts short enough that retries happen within a test,
/// long enough for a debug build on a busy 2-core machine.
pub fn agent_config(agent_id: &str, port: u16) -> AgentConfig {
    AgentConfig {
        agent_id: agent_id.to_string(),
        brokers: vec![format!("127.0.0.1:{port}")],
        request_timeout_ms: 1_000,
        request_deadline_ms: 15_000,
        // A queued acquire resends its id every second: how a grant whose response was lost
        // (a node restart) reaches the agent.
        wait_resend_ms: 1_000,
        backoff_first_ms: 20,
        backoff_cap_ms: 250,
        keepalive_margin_ms: 150,
        mqtt_keepalive_s: 2,
        connect_timeout_s: 2,
        ..AgentConfig::default()
    }
}

/// An SDK agent with [`agent_config`].
pub async fn agent(agent_id: &str, port: u16) -> Agent {
    within(
        20,
        &format!("agent {agent_id} connects"),
        Agent::connect(agent_config(agent_id, port)),
    )
    .await
    .unwrap_or_else(|e| panic!("agent {agent_id} connects: {e}"))
}

/// An SDK agent and a session of `ttl_ms`.
pub async fn agent_session(agent_id: &str, port: u16, ttl_ms: u64) -> (Agent, Session) {
    let agent = agent(agent_id, port).await;
    let session = within(10, &format!("{agent_id} session"), agent.session(ttl_ms))
        .await
        .unwrap_or_else(|e| panic!("{agent_id} session: {e}"));
    (agent, session)
}

/// Holders and waiters of a resource, through an SDK agent.
pub async fn inspect(
    agent: &Agent,
    kind: ResourceKind,
    name: &str,
) -> (Vec<HolderInfo>, Vec<WaiterInfo>) {
    let inspection: Inspection = within(
        20,
        "inspect",
        agent.request_as(Op::Inspect {
            kind,
            name: name.to_string(),
        }),
    )
    .await
    .unwrap_or_else(|e| panic!("inspect {kind:?} {name}: {e}"));
    (inspection.holders, inspection.waiters)
}

/// `fence.check` of `token` on a resource, through an SDK agent: (`valid`, `current`).
pub async fn fence_check(agent: &Agent, kind: ResourceKind, name: &str, token: u64) -> (bool, u64) {
    let fence: FenceStatus = within(
        20,
        "fence.check",
        agent.request_as(Op::FenceCheck {
            name: name.to_string(),
            kind,
            token,
        }),
    )
    .await
    .unwrap_or_else(|e| panic!("fence.check {kind:?} {name} {token}: {e}"));
    (fence.valid, fence.current)
}

/// `inspect` of a lock.
pub async fn inspect_lock(agent: &Agent, name: &str) -> (Vec<HolderInfo>, Vec<WaiterInfo>) {
    inspect(agent, ResourceKind::Lock, name).await
}

/// Waits until the lock's waiters are exactly `agents`, in that order (positions 1, 2, ...).
pub async fn wait_for_waiters(observer: &Agent, lock: &str, agents: &[String]) {
    eventually(
        15,
        &format!("waiters of {lock} are {agents:?}"),
        move || async move {
            let (_, waiters) = inspect_lock(observer, lock).await;
            let seen: Vec<&str> = waiters.iter().map(|w| w.agent.as_str()).collect();
            let positions: Vec<u32> = waiters.iter().map(|w| w.position).collect();
            let expected_positions: Vec<u32> = (1..=agents.len() as u32).collect();
            (seen == agents && positions == expected_positions).then_some(())
        },
    )
    .await;
}

/// Releases `guard` within 10 s, failing the test otherwise.
pub async fn release(guard: Guard, what: &str) {
    within(10, what, guard.release())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}
