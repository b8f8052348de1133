//! End to end: SDK agents given one broker list spread over a three-member cluster
//! (`BrokerOrder::Spread`, the default), the agents of a killed member spread over both
//! survivors rather than herding onto the next in the list, and agents that connect after the
//! member came back spread over it too. Every session stays live throughout: where an agent
//! is connected changes nothing of its lease.
//!
//! The choice is random, so the bounds are loose: each check fails by chance with a
//! probability below 1e-5 (binomial tails, noted at each).

mod common;

use std::collections::BTreeMap;

use common::cluster::ProcessCluster;
use common::{agent_config, eventually, within};
use hivekeeper_agent::{Agent, Session, SessionState};

/// Agents connected before the failover.
const AGENTS: usize = 90;
/// Agents connected after the killed member came back.
const LATECOMERS: usize = 30;

/// Connects `count` agents named `{prefix}-{i}` with every member in their list, each with a
/// session.
async fn connect(cluster: &ProcessCluster, prefix: &str, count: usize) -> Vec<(Agent, Session)> {
    let brokers: Vec<String> = cluster
        .mqtt_ports()
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let mut agents = Vec::new();
    for i in 0..count {
        let id = format!("{prefix}-{i}");
        let mut config = agent_config(&id, cluster.mqtt_ports()[0]);
        config.brokers = brokers.clone();
        let agent = within(20, &format!("{id} connects"), Agent::connect(config))
            .await
            .unwrap_or_else(|error| panic!("{id} connects: {error}"));
        let session = within(20, &format!("{id}'s session"), agent.session(15_000))
            .await
            .unwrap_or_else(|error| panic!("{id}'s session: {error}"));
        agents.push((agent, session));
    }
    agents
}

/// How many of `agents` are connected to each member (by MQTT port), members with none
/// included; `None` while any agent is between brokers.
fn per_member(
    cluster: &ProcessCluster,
    agents: &[(Agent, Session)],
) -> Option<BTreeMap<u16, usize>> {
    let mut counts: BTreeMap<u16, usize> = cluster
        .mqtt_ports()
        .into_iter()
        .map(|port| (port, 0))
        .collect();
    for (agent, _) in agents {
        let broker = agent.broker()?;
        let port = broker.rsplit(':').next()?.parse().ok()?;
        *counts.get_mut(&port)? += 1;
    }
    Some(counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_spread_over_the_members_and_spread_again_after_a_failover() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let ports = cluster.mqtt_ports();
    let agents = connect(&cluster, "fleet", AGENTS).await;
    let before = per_member(&cluster, &agents).expect("every agent is connected");
    // Binomial(90, 1/3) below 10: about 3e-6 a member.
    assert!(
        before.values().all(|n| *n >= 10),
        "one list, every member gets agents: {before:?}"
    );

    // A follower is killed: its agents move to the two survivors, both of them.
    let leader = cluster.leader(30).await;
    let victim = (leader + 1) % 3;
    let fled = before[&ports[victim]];
    cluster.nodes[victim].kill9();
    let after = eventually(
        30,
        "every agent of the killed member reconnected",
        || async { per_member(&cluster, &agents).filter(|counts| counts[&ports[victim]] == 0) },
    )
    .await;
    for (member, port) in ports.iter().enumerate().filter(|(m, _)| *m != victim) {
        let gained = after[port] - before[port];
        // Binomial(fled, 1/2) at 0, with fled ≥ 10 (checked above): at most 1e-3, and about
        // 1e-9 for the 30 expected.
        assert!(
            gained > 0,
            "member {member} took none of the {fled} agents that fled: {before:?} -> {after:?}"
        );
    }

    // The member comes back: agents connecting now spread over it too.
    cluster.nodes[victim].restart().await;
    cluster.leader(30).await;
    let latecomers = connect(&cluster, "late", LATECOMERS).await;
    let late = per_member(&cluster, &latecomers).expect("every latecomer is connected");
    // Binomial(30, 1/3) at 0: 5e-6.
    assert!(
        late[&ports[victim]] > 0,
        "the member that came back gets latecomers: {late:?}"
    );
    for (i, (_, session)) in agents.iter().chain(&latecomers).enumerate() {
        assert_eq!(session.state(), SessionState::Live, "agent {i}'s session");
    }
}
