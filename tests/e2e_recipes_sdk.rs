//! The Rust SDK's elections and barriers against a real `hivekeeper serve` over MQTT (the
//! SDK's own tests play the service with a fake, which knows neither recipe).
//!
//! - `Session::campaign`: one session leads, another waits; a resign hands the leadership
//!   over with a larger token, and the first one's `lost()` resolves `Resigned`.
//! - `Leadership::lost` resolves when an operator revokes the leader's lease
//!   (`election.lost`, then the session's end), and the next candidate leads.
//! - A campaign dropped while queued leaves no leadership behind once it is granted.
//! - `Agent::observe`: nobody, then two leaders in order with their agents, no `None`
//!   between them at the handover, and a proclaim as a change of value.
//! - `Session::barrier`: three sessions pass a barrier of 3 together with one generation and
//!   leave together.

mod common;

use std::time::Duration;

use common::{Node, agent, agent_session, eventually, inspect, within};
use futures_util::StreamExt;
use hivekeeper_agent::protocol::{LeaderReport, Op, ResourceKind};
use hivekeeper_agent::{
    Agent, AgentError, Leader, Leadership, LeadershipEnd, Observe, Session, SessionState,
};
use tokio::task::JoinHandle;

/// The leader `election.leader` reports for `name`.
async fn leader_of(agent: &Agent, name: &str) -> Option<(String, u64)> {
    let op = Op::ElectionLeader {
        name: name.to_string(),
    };
    let report: LeaderReport = within(20, "election.leader", agent.request_as(op))
        .await
        .expect("election.leader");
    report.leader.map(|leader| (leader.agent, leader.token))
}

/// Waits until `name` has `count` candidates.
async fn wait_for_candidates(agent: &Agent, name: &str, count: usize) {
    eventually(20, &format!("{count} candidates of {name}"), || async {
        inspect(agent, ResourceKind::Election, name).await.1.len() == count
    })
    .await;
}

async fn next_leader(observe: &mut Observe) -> Option<Leader> {
    within(20, "the next leader", observe.next())
        .await
        .expect("the stream goes on")
        .unwrap_or_else(|e| panic!("observe: {e}"))
}

/// A node, and the sessions of two agents on it, gw-1 (`first`) and gw-2 (`second`).
struct Two {
    _dir: tempfile::TempDir,
    node: Node,
    first: Session,
    second: Session,
    /// gw-2's agent, which asks who leads.
    asker: Agent,
}

impl Two {
    async fn start() -> Two {
        let dir = tempfile::tempdir().expect("a temp dir");
        let node = Node::start(dir.path()).await;
        let (_, first) = agent_session("gw-1", node.mqtt_port(), 5_000).await;
        let (asker, second) = agent_session("gw-2", node.mqtt_port(), 5_000).await;
        Two {
            _dir: dir,
            node,
            first,
            second,
            asker,
        }
    }

    /// gw-1 leads "gateway" with `value`.
    async fn first_leads(&self, value: &str) -> Leadership {
        within(20, "gw-1 campaigns", self.first.campaign("gateway", value))
            .await
            .expect("gw-1 leads")
    }

    /// gw-2 campaigns for "gateway" with `value` in a task; returned once it waits in line.
    async fn second_waits(&self, value: &str) -> JoinHandle<Result<Leadership, AgentError>> {
        let second = self.second.clone();
        let value = value.to_string();
        let task = tokio::spawn(async move { second.campaign("gateway", value).await });
        wait_for_candidates(&self.asker, "gateway", 1).await;
        task
    }
}

/// The leadership a campaign task was granted.
async fn granted(task: JoinHandle<Result<Leadership, AgentError>>) -> Leadership {
    within(20, "the campaign is granted", task)
        .await
        .expect("the task ends")
        .expect("it leads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_hands_over_between_two_sessions() {
    let two = Two::start().await;
    let (first, second, b) = (&two.first, &two.second, &two.asker);
    let leading = two.first_leads("10.0.0.1").await;
    let lost = leading.lost();
    assert_eq!(
        leader_of(b, "gateway").await,
        Some(("gw-1".into(), leading.token()))
    );
    // The same session may not campaign twice.
    let twice = within(20, "again", first.campaign("gateway", "10.0.0.1")).await;
    assert!(
        matches!(twice, Err(AgentError::AlreadyHeld { .. })),
        "{twice:?}"
    );
    let busy = second.campaign_wait("gateway", "10.0.0.2", hivekeeper_agent::Wait::Try);
    assert_eq!(
        within(20, "try", busy).await.err(),
        Some(AgentError::WouldBlock)
    );

    let waiting = two.second_waits("10.0.0.2").await;
    let revision = within(20, "proclaim", leading.proclaim("10.0.0.1:7001"))
        .await
        .expect("the leader proclaims");
    assert!(revision > leading.token());
    let first_token = leading.token();
    within(20, "resign", leading.resign())
        .await
        .expect("gw-1 resigns");
    assert_eq!(within(5, "lost", lost).await, LeadershipEnd::Resigned);

    let next = granted(waiting).await;
    assert!(
        next.token() > first_token,
        "{} > {first_token}",
        next.token()
    );
    assert_eq!(
        leader_of(b, "gateway").await,
        Some(("gw-2".into(), next.token()))
    );
    // Dropping the guard resigns in the background.
    drop(next);
    eventually(20, "nobody leads", || async {
        leader_of(b, "gateway").await.is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_an_operator_revokes_the_leaders_lease() {
    let two = Two::start().await;
    let operator = agent("operator", two.node.mqtt_port()).await;
    let leading = two.first_leads("a").await;
    let waiting = two.second_waits("b").await;
    let revoke = Op::AdminRevoke {
        lease: two.first.lease().to_string(),
    };
    within(20, "admin.revoke", operator.request(revoke))
        .await
        .expect("the operator revokes gw-1's lease");
    let end = within(20, "lost", leading.lost()).await;
    assert!(
        matches!(
            end,
            LeadershipEnd::Lost | LeadershipEnd::Session(SessionState::Expired)
        ),
        "{end:?}"
    );
    assert!(leading.is_lost());
    let next = granted(waiting).await;
    assert!(next.token() > leading.token());
    // The revoked session's guard has nothing to resign.
    assert!(matches!(
        within(20, "resign", leading.resign()).await,
        Err(AgentError::Lost(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_dropped_while_queued_leaves_no_leadership_behind() {
    let two = Two::start().await;
    let (second, b) = (&two.second, &two.asker);
    let leading = two.first_leads("a").await;
    let queued =
        tokio::time::timeout(Duration::from_millis(500), second.campaign("gateway", "b")).await;
    assert!(queued.is_err(), "still queued when dropped");
    wait_for_candidates(b, "gateway", 1).await;
    within(20, "resign", leading.resign())
        .await
        .expect("gw-1 resigns");
    // gw-2's queued campaign is granted, and the SDK resigns it at once.
    eventually(20, "nobody leads", || async {
        leader_of(b, "gateway").await.is_none()
    })
    .await;
    assert_eq!(second.state(), SessionState::Live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_sees_two_leaders_in_order() {
    let two = Two::start().await;
    let watcher = agent("watcher", two.node.mqtt_port()).await;
    let mut observe = watcher.observe("gateway");
    assert_eq!(next_leader(&mut observe).await, None, "nobody leads yet");

    let leading = two.first_leads("a").await;
    let seen = next_leader(&mut observe).await.expect("a leader");
    assert_eq!(
        (seen.token, seen.value.as_str(), seen.agent.as_deref()),
        (leading.token(), "a", Some("gw-1"))
    );
    let waiting = two.second_waits("b").await;
    within(20, "resign", leading.resign())
        .await
        .expect("gw-1 resigns");
    let next = granted(waiting).await;
    // The handover is one change: the new leader, no `None` before it.
    let seen = next_leader(&mut observe).await.expect("the next leader");
    assert_eq!(
        (seen.token, seen.value.as_str(), seen.agent.as_deref()),
        (next.token(), "b", Some("gw-2"))
    );
    let revision = within(20, "proclaim", next.proclaim("b2"))
        .await
        .expect("proclaim");
    let seen = next_leader(&mut observe).await.expect("the same leader");
    assert_eq!(
        (seen.token, seen.value.as_str(), seen.revision),
        (next.token(), "b2", revision)
    );
    within(20, "resign", next.resign()).await.expect("resign");
    assert_eq!(next_leader(&mut observe).await, None, "nobody leads again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sessions_pass_a_barrier_together_and_leave() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let mut members = Vec::new();
    for id in ["d1", "d2", "d3"] {
        members.push(agent_session(id, node.mqtt_port(), 5_000).await);
    }
    let enters: Vec<_> = members
        .iter()
        .map(|(_, session)| {
            let mut barrier = session.barrier("survey", 3);
            tokio::spawn(async move {
                let generation = barrier.enter().await?;
                Ok::<_, AgentError>((barrier, generation))
            })
        })
        .collect();
    let mut barriers = Vec::new();
    for enter in enters {
        let (barrier, generation) = within(20, "enter", enter)
            .await
            .expect("the task ends")
            .expect("the round fills");
        barriers.push((barrier, generation));
    }
    let generation = barriers[0].1;
    assert!(
        barriers
            .iter()
            .all(|(b, g)| *g == generation && b.generation() == Some(generation))
    );

    // Two leave and wait; the third's leave lets all three go.
    let (mut last, _) = barriers.pop().expect("three");
    let leaves: Vec<_> = barriers
        .into_iter()
        .map(|(mut barrier, _)| tokio::spawn(async move { barrier.leave().await }))
        .collect();
    let early = last.leave_wait(hivekeeper_agent::Wait::Try);
    // Not the last to leave until the others' leaves are in.
    let observer = agent("observer", node.mqtt_port()).await;
    eventually(20, "two leaving", || async {
        inspect(&observer, ResourceKind::Barrier, "survey")
            .await
            .0
            .len()
            == 1
    })
    .await;
    assert_eq!(within(20, "the last leave", early).await, Ok(generation));
    for leave in leaves {
        let left = within(20, "leave", leave).await.expect("the task ends");
        assert_eq!(left, Ok(generation));
    }
    assert_eq!(last.generation(), None);
}
