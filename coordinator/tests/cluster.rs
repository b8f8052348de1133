//! Three nodes in one process over the real TCP transport on loopback: forwarding from
//! followers, failover, and a node cut off from the majority (DESIGN.md §6.3, with
//! [`NetworkFaults`] as the partitionable network).
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test cluster
//! ```

use std::time::Duration;

use hivekeeper_coordinator::node::{ClusterConfig, ClusterState, Node, NodeConfig, NodeHandle};
use hivekeeper_coordinator::raft::{CatchUp, node_id_for};
use hivekeeper_protocol::{
    ErrorCode, Granted, Inspection, LeaseGranted, LeaseKept, LockMode, Op, Request, ResourceKind,
    Response, StatusReport, Success,
};
use hivekeeper_test_support::{TestCerts, free_port, free_ports, within};

struct Cluster {
    nodes: Vec<Option<Node>>,
    _dirs: Vec<tempfile::TempDir>,
    /// Peer certificates (`peer-{name}`) of mutual TLS between the members; `None`: plain TCP.
    tls: Option<TestCerts>,
    /// The `initial_cluster` list the members were started with.
    initial_cluster: String,
}

impl Cluster {
    /// Three members named `{prefix}1..3`: tests run in one process, and ractor's actor
    /// registry (names carry the node id) is per process.
    async fn start(prefix: &str) -> Cluster {
        Cluster::start_with(prefix, None).await
    }

    /// [`Cluster::start`] with mutual TLS on the peer port, from `tls`'s peer certificates.
    async fn start_with(prefix: &str, tls: Option<TestCerts>) -> Cluster {
        let names: Vec<String> = (1..=3).map(|i| format!("{prefix}{i}")).collect();
        let ports = free_ports(names.len());
        let list = names
            .iter()
            .zip(ports)
            .map(|(name, port)| format!("{name}=127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            nodes: Vec::new(),
            _dirs: Vec::new(),
            tls,
            initial_cluster: list.clone(),
        };
        for name in &names {
            cluster.spawn(name, &list, ClusterState::New).await;
        }
        cluster
    }

    /// Starts member `name` with this `initial_cluster` list and state; returns its index.
    async fn spawn(&mut self, name: &str, list: &str, state: ClusterState) -> usize {
        let dir = tempfile::tempdir().expect("a temp dir");
        let node = self.member(name, list, state, dir.path()).await;
        self.nodes.push(Some(node));
        self._dirs.push(dir);
        self.nodes.len() - 1
    }

    /// Starts member `name` on the data directory `dir`.
    async fn member(
        &self,
        name: &str,
        list: &str,
        state: ClusterState,
        dir: &std::path::Path,
    ) -> Node {
        let config = NodeConfig {
            data_dir: dir.to_path_buf(),
            cluster: Some(ClusterConfig {
                name: name.to_string(),
                initial_cluster: list.to_string(),
                initial_cluster_state: state,
                peer_listen: None,
                peer_tls_cert: self.tls.as_ref().map(|certs| certs.peer(name).cert),
                peer_tls_key: self.tls.as_ref().map(|certs| certs.peer(name).key),
                peer_ca: self.tls.as_ref().map(TestCerts::ca),
            }),
            // Short, so a request stuck in a minority is answered within the test.
            propose_timeout_ms: 1_500,
            ..NodeConfig::default()
        };
        let (node, mut outbound) = Node::start(config).await.expect("a member starts");
        // Nobody listens for deferred answers here; drain them.
        tokio::spawn(async move { while outbound.recv().await.is_some() {} });
        node
    }

    fn handle(&self, index: usize) -> NodeHandle {
        self.running(index).handle()
    }

    /// The index of the node that leads, once the running ones agree on one.
    async fn leader(&self) -> usize {
        for _ in 0..200 {
            let running: Vec<usize> = (0..self.nodes.len())
                .filter(|i| self.nodes[*i].is_some())
                .collect();
            let leaders: Vec<usize> = running
                .iter()
                .copied()
                .filter(|i| self.handle(*i).is_leader())
                .collect();
            if let [leader] = leaders[..] {
                let id = self.handle(leader).node_id();
                if running
                    .iter()
                    .all(|i| self.handle(*i).leader_id() == Some(id))
                {
                    return leader;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no agreed leader within 10 s");
    }

    /// Cuts node `index` off from the other two, both ways.
    fn isolate(&self, index: usize) {
        let others: Vec<u64> = (0..self.nodes.len())
            .filter(|i| *i != index)
            .map(|i| self.handle(i).node_id())
            .collect();
        self.running(index).faults().cut_off(others);
    }

    /// Silences node `index`'s links with the other two: nothing arrives, nothing fails fast.
    fn isolate_silently(&self, index: usize) {
        let others: Vec<u64> = (0..self.nodes.len())
            .filter(|i| *i != index)
            .map(|i| self.handle(i).node_id())
            .collect();
        self.running(index).faults().silence(others);
    }

    fn heal(&self, index: usize) {
        self.running(index).faults().heal();
    }

    fn running(&self, index: usize) -> &Node {
        self.nodes[index].as_ref().expect("node running")
    }

    /// Stops member `index` cleanly; it stays in the list, not running.
    async fn stop(&mut self, index: usize) {
        let node = self.nodes[index].take().expect("node running");
        node.shutdown().await.expect("a node stops cleanly");
    }

    async fn shutdown(mut self) {
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.shutdown().await.expect("a node stops cleanly");
        }
    }
}

fn request(id: &str, op: Op) -> Request {
    Request {
        id: id.to_string(),
        op,
    }
}

async fn grant(node: &NodeHandle, agent: &str, id: &str) -> String {
    grant_ttl(node, agent, id, 10_000).await
}

/// A lease of `ttl_ms` for `agent`; its wire id.
async fn grant_ttl(node: &NodeHandle, agent: &str, id: &str, ttl_ms: u64) -> String {
    match node
        .call(
            agent,
            request(
                id,
                Op::LeaseGrant {
                    ttl_ms,
                    lock_delay_ms: 0,
                },
            ),
        )
        .await
        .outcome
    {
        Ok(Success::LeaseGranted(LeaseGranted { lease, .. })) => lease,
        other => panic!("lease.grant answered {other:?}"),
    }
}

/// Takes lock `name` at once through `node` for `agent`'s `lease`; its fencing token.
async fn acquired(node: &NodeHandle, agent: &str, id: &str, name: &str, lease: &str) -> u64 {
    match node
        .call(agent, request(id, try_lock(name, lease)))
        .await
        .outcome
    {
        Ok(Success::Granted(Granted { token, .. })) => token,
        other => panic!("lock.acquire of {name} answered {other:?}"),
    }
}

fn try_lock(name: &str, lease: &str) -> Op {
    Op::LockAcquire {
        name: name.to_string(),
        lease: lease.to_string(),
        wait_ms: Some(0),
        max_hold_ms: None,
        mode: LockMode::Exclusive,
    }
}

fn holders(reply: Response) -> Vec<(String, u64)> {
    match reply.outcome {
        Ok(Success::Inspection(Inspection { holders, .. })) => holders
            .into_iter()
            .map(|holder| (holder.agent, holder.token))
            .collect(),
        other => panic!("inspect answered {other:?}"),
    }
}

fn inspect(name: &str) -> Op {
    Op::Inspect {
        kind: ResourceKind::Lock,
        name: name.to_string(),
    }
}

fn is_unavailable(reply: &Response) -> bool {
    matches!(&reply.outcome, Err(error) if error.code == ErrorCode::Unavailable)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_forward_writes_keepalives_and_reads_to_the_leader() {
    let cluster = Cluster::start("fwd").await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let node = cluster.handle(follower);

    let lease = grant(&node, "drone-1", "g1").await;
    let token = acquired(&node, "drone-1", "a1", "pad/1", &lease).await;
    match node
        .call(
            "drone-1",
            request(
                "k1",
                Op::LeaseKeepalive {
                    lease: lease.clone(),
                },
            ),
        )
        .await
        .outcome
    {
        Ok(Success::LeaseKept(LeaseKept { ttl_ms, .. })) => assert_eq!(ttl_ms, 10_000),
        other => panic!("a keepalive through a follower answered {other:?}"),
    }
    // The read is answered by the leader (read-index): it sees the grant.
    let seen = holders(node.call("drone-1", request("i1", inspect("pad/1"))).await);
    assert_eq!(seen, vec![("drone-1".to_string(), token)]);
    // And the third node agrees.
    let other = cluster.handle((leader + 2) % 3);
    let seen = holders(other.call("tester", request("i2", inspect("pad/1"))).await);
    assert_eq!(seen, vec![("drone-1".to_string(), token)]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_majority_answers_unavailable_and_never_grants() {
    let cluster = Cluster::start("cutf").await;
    let leader = cluster.leader().await;
    let cut = (leader + 1) % 3;
    let node = cluster.handle(cut);
    let lease = grant(&node, "drone-1", "g1").await;

    cluster.isolate(cut);

    let acquire = node
        .call("drone-1", request("a1", try_lock("pad/1", &lease)))
        .await;
    assert!(
        is_unavailable(&acquire),
        "a cut-off follower answered {acquire:?}"
    );
    let keepalive = node
        .call(
            "drone-1",
            request(
                "k1",
                Op::LeaseKeepalive {
                    lease: lease.clone(),
                },
            ),
        )
        .await;
    assert!(
        is_unavailable(&keepalive),
        "keepalive answered {keepalive:?}"
    );
    let read = node.call("drone-1", request("i1", inspect("pad/1"))).await;
    assert!(is_unavailable(&read), "inspect answered {read:?}");

    // The majority goes on: another agent takes the lock there.
    let majority = cluster.handle(leader);
    let other_lease = grant(&majority, "drone-2", "g2").await;
    let token = match majority
        .call("drone-2", request("a2", try_lock("pad/1", &other_lease)))
        .await
        .outcome
    {
        Ok(Success::Granted(Granted { token, .. })) => token,
        other => panic!("the majority answered {other:?}"),
    };

    // Healed, the cut-off node catches up and sees the majority's grant, not its own.
    cluster.heal(cut);
    // Until it has rejoined, its answers may still be `unavailable`: retried, bounded.
    let mut seen = Vec::new();
    for _ in 0..100 {
        let reply = node.call("drone-1", request("i2", inspect("pad/1"))).await;
        if !is_unavailable(&reply) {
            seen = holders(reply);
            if !seen.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, vec![("drone-2".to_string(), token)]);
    cluster.shutdown().await;
}

/// Pre-Vote, against term inflation: a follower cut off for many election timeouts asks whether
/// it could win before it raises its term, so it keeps its term, and when the partition heals
/// the leader stays leader throughout. Without Pre-Vote the cut-off member campaigns at every
/// timeout and its higher term deposes the leader on return (a new election: the leader is seen
/// not leading for at least an election timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_back_from_a_partition_does_not_depose_the_leader() {
    let cluster = Cluster::start("prev").await;
    let leader = cluster.leader().await;
    let leader_id = cluster.handle(leader).node_id();
    let cut = (leader + 1) % 3;
    cluster.isolate(cut);
    // Six longest election timeouts: without Pre-Vote, about six campaigns.
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    assert!(
        cluster.handle(leader).is_leader(),
        "the majority keeps its leader"
    );
    cluster.heal(cut);
    // Watch the leader every 10 ms for five election timeouts after the heal (bounded: 150
    // samples), and wait for the healed member to follow it again.
    let mut deposed_at = None;
    for sample in 0..150 {
        if !cluster.handle(leader).is_leader() && deposed_at.is_none() {
            deposed_at = Some(sample * 10);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        deposed_at, None,
        "the leader was deposed after the heal (ms)"
    );
    assert_eq!(cluster.handle(cut).leader_id(), Some(leader_id));
    cluster.shutdown().await;
}

/// A follower whose links go silent (packets dropped, as in a real partition) stops waiting for
/// its silent leader as soon as it no longer knows it as leader (its own election timer fires),
/// and answers `unavailable` saying no leader is known, instead of holding the request until
/// the commit timeout (the case `hivekeeper nemesis`'s partition-minority fault makes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_cut_off_follower_answers_that_no_leader_is_known() {
    let cluster = Cluster::start("silf").await;
    let leader = cluster.leader().await;
    let cut = (leader + 1) % 3;
    let node = cluster.handle(cut);
    let lease = grant(&node, "drone-1", "g1").await;

    cluster.isolate_silently(cut);

    let acquire = node
        .call("drone-1", request("a1", try_lock("pad/1", &lease)))
        .await;
    let message = match &acquire.outcome {
        Err(error) if error.code == ErrorCode::Unavailable => error.message.clone(),
        other => panic!("a silently cut-off follower answered {other:?}"),
    };
    // Whichever comes first: the cluster watch finding the member cut off (400 ms of silence),
    // or the forward giving up after its leader wait. Never the commit timeout.
    let member = format!("silf{}", cut + 1);
    assert!(
        message.starts_with(&format!(
            "cut off: member {member} knows no leader, and only 1 of the 3 voters"
        )) || message.starts_with("no leader known after"),
        "the answer should say the member is cut off, not wait out a commit: {message}"
    );
    cluster.heal(cut);
    cluster.shutdown().await;
}

/// A member cut off from the cluster answers the agents that wait in a queue there, which would
/// otherwise hear nothing until the partition heals (a queued wait has no commit deadline: its
/// answer comes from the log, which a cut-off member no longer hears). Their waits stay queued
/// in the replicated state: a resend of the same id at a member of the majority is granted
/// there once the holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_member_answers_its_waiting_agents_and_their_waits_go_on_elsewhere() {
    for (prefix, silently, cut_leader) in [("cwl", false, true), ("cwf", true, false)] {
        let cluster = Cluster::start(prefix).await;
        let leader = cluster.leader().await;
        let cut = if cut_leader { leader } else { (leader + 1) % 3 };
        let majority = cluster.handle((cut + 2) % 3);
        let node = cluster.handle(cut);
        // drone-2 holds the dock through a member of the majority.
        let holder = grant(&majority, "drone-2", "h-g").await;
        let held = acquired(&majority, "drone-2", "h-a", "dock", &holder).await;
        let lease = grant_ttl(&node, "drone-1", "g1", 60_000).await;
        let waiting = tokio::spawn({
            let node = node.clone();
            let lease = lease.clone();
            async move {
                node.call("drone-1", request("w1", wait_lock("dock", &lease, 60_000)))
                    .await
            }
        });
        hivekeeper_test_support::eventually(5, "the wait queued", async || {
            let seen = node.call("tester", request("i0", inspect("dock"))).await;
            matches!(seen.outcome, Ok(Success::Inspection(Inspection { waiters: w, .. })) if w.len() == 1)
        })
        .await;
        if silently {
            cluster.isolate_silently(cut);
        } else {
            cluster.isolate(cut);
        }
        let answer = within(
            10,
            "the cut-off member's answer to its waiting agent",
            waiting,
        )
        .await
        .expect("the waiting task");
        let message = match &answer.outcome {
            Err(error) if error.code == ErrorCode::Unavailable => error.message.clone(),
            other => panic!("{prefix}: the cut-off member answered its waiter {other:?}"),
        };
        let expected = if cut_leader {
            "no quorum: this leader has not heard from a majority of its 3 voters".to_string()
        } else {
            format!("cut off: member {prefix}{} knows no leader", cut + 1)
        };
        assert!(message.starts_with(&expected), "{prefix}: {message}");
        // New requests there are refused at once with the same reason.
        let again = node.call("drone-1", request("w2", inspect("dock"))).await;
        assert!(is_unavailable(&again), "{prefix}: {again:?}");
        // The holder lets go through the majority; the wait, still queued in the replicated
        // state, is granted, and the agent's resend of its id there gets the grant.
        let released = majority
            .call(
                "drone-2",
                request(
                    "h-r",
                    Op::LockRelease {
                        name: "dock".into(),
                        lease: holder.clone(),
                    },
                ),
            )
            .await;
        assert!(released.outcome.is_ok(), "{prefix}: {released:?}");
        let resend = within(
            10,
            "the resend's grant at the majority",
            majority.call("drone-1", request("w1", wait_lock("dock", &lease, 60_000))),
        )
        .await;
        match resend.outcome {
            Ok(Success::Granted(Granted { token, .. })) => {
                assert!(token > held, "{prefix}: token {token} after {held}")
            }
            other => panic!("{prefix}: the resend at the majority answered {other:?}"),
        }
        cluster.heal(cut);
        cluster.shutdown().await;
    }
}

/// A request already on its way to the leader when its member is cut off (a silent partition:
/// nothing fails fast) is answered `unavailable` with the cut-off reason once the member knows
/// it is cut off, so its agent moves on. Before, the forwarder waited for the member to give up
/// on the old leader and then the whole leader wait, and answered "no leader" after ~0.9 s; the
/// message tells the two apart without timing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_when_its_member_is_cut_off_is_answered_with_the_cut() {
    let cluster = Cluster::start("cif").await;
    let leader = cluster.leader().await;
    let cut = (leader + 1) % 3;
    let node = cluster.handle(cut);
    cluster.isolate_silently(cut);
    let answer = within(
        10,
        "the cut-off member's answer to a request in flight",
        node.call("tester", request("i1", inspect("dock"))),
    )
    .await;
    match &answer.outcome {
        Err(error) if error.code == ErrorCode::Unavailable => {
            let expected = format!("cut off: member cif{} knows no leader", cut + 1);
            assert!(error.message.starts_with(&expected), "{}", error.message);
        }
        other => panic!("the cut-off member answered {other:?}"),
    }
    cluster.heal(cut);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_never_grants_and_the_majority_elects_a_new_one() {
    let mut cluster = Cluster::start("cutl").await;
    let old = cluster.leader().await;
    let old_node = cluster.handle(old);
    let lease = grant(&old_node, "drone-1", "g1").await;
    cluster.isolate(old);

    // The deposed (but unaware) leader cannot commit: `unavailable`, not a grant.
    let acquire = old_node
        .call("drone-1", request("a1", try_lock("pad/9", &lease)))
        .await;
    assert!(
        is_unavailable(&acquire),
        "a cut-off leader answered {acquire:?}"
    );

    // The other two elect a new leader among themselves, which grants.
    let survivor = (old + 1) % 3;
    let mut new_leader = None;
    for _ in 0..200 {
        let candidates: Vec<usize> = (0..3)
            .filter(|i| *i != old && cluster.handle(*i).is_leader())
            .collect();
        if let [leader] = candidates[..] {
            new_leader = Some(leader);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let new_leader = new_leader.expect("the majority elects a leader within 10 s");
    let through = cluster.handle(survivor);
    let lease2 = grant(&through, "drone-2", "g2").await;
    match through
        .call("drone-2", request("a2", try_lock("pad/9", &lease2)))
        .await
        .outcome
    {
        Ok(Success::Granted(Granted { token: _, .. })) => {}
        other => panic!("the new majority (leader index {new_leader}) answered {other:?}"),
    }
    // The old leader's holdings never included pad/9.
    let seen = holders(
        through
            .call("drone-2", request("i1", inspect("pad/9")))
            .await,
    );
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, "drone-2");

    cluster.heal(old);
    cluster.stop(old).await;
    cluster.shutdown().await;
}

/// A leader cut off from both followers (openraft never steps down on its own) says within
/// an election timeout that it has no quorum, and answers `unavailable` at once with that
/// reason instead of holding each request for its commit timeout. Healed, it is healthy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_a_quorum_says_so_and_refuses_at_once() {
    let mut cluster = Cluster::start("noq").await;
    let old = cluster.leader().await;
    let node = cluster.handle(old);
    let lease = grant(&node, "drone-1", "g1").await;
    assert!(node.health().healthy, "{:?}", node.health());
    cluster.isolate(old);

    let mut status = None;
    for _ in 0..200 {
        let reply = node.call("tester", request("s1", Op::AdminStatus {})).await;
        let Ok(Success::Status(StatusReport { status: seen, .. })) = reply.outcome else {
            panic!("admin.status answered {reply:?}");
        };
        if seen.has_quorum == Some(false) {
            status = Some(seen);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = status.expect("the cut-off leader reports no quorum within 10 s");
    assert!(
        status.is_leader,
        "it still leads in its own view: {status:?}"
    );
    assert!(status.quorum_ack_age_ms.is_some_and(|age| age > 300));

    let mut others: Vec<String> = (0..3)
        .filter(|i| *i != old)
        .map(|i| format!("noq{}", i + 1))
        .collect();
    others.sort();
    let acquire = node
        .call("drone-1", request("a1", try_lock("pad/q", &lease)))
        .await;
    let Err(error) = &acquire.outcome else {
        panic!("a leader without a quorum answered {acquire:?}");
    };
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert!(
        error.message.starts_with(
            "no quorum: this leader has not heard from a majority of its 3 voters for "
        ),
        "{}",
        error.message
    );
    assert!(
        error.message.ends_with(&format!(
            " ms (more than the 300 ms election timeout); unreachable: {}; nothing can commit \
             until enough members are back",
            others.join(", ")
        )),
        "{}",
        error.message
    );
    let health = node.health();
    assert!(!health.healthy && !health.ready, "{health:?}");
    assert!(health.detail.starts_with("no quorum: leader"), "{health:?}");

    // Healed once the majority has a leader of its own (a higher term), which takes it back
    // as a follower. Healed before that (the majority's election can lag on a loaded machine),
    // the old leader would simply lead on, which is fine Raft but not what this test checks.
    hivekeeper_test_support::eventually(10, "the majority elects a leader", async || {
        (0..3).any(|i| i != old && cluster.handle(i).is_leader())
    })
    .await;
    cluster.heal(old);
    let mut healthy = false;
    for _ in 0..200 {
        if node.health().healthy && !node.is_leader() {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(healthy, "still {:?}", node.health());
    cluster.stop(old).await;
    cluster.shutdown().await;
}

/// Nothing listening at the address: refused before anything is proposed. A member that
/// answers the dial but never catches up (the leader's link to it cut; the dial is not): left
/// a learner, not a voter, so the quorum is unchanged. A resend of the same request id gets
/// the same answer; a new request, once the link is back, promotes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phantom_is_refused_and_a_learner_that_cannot_catch_up_never_votes() {
    let mut cluster = Cluster::start("phan").await;
    let leader = cluster.leader().await;
    let node = cluster.handle(leader);
    let voters = |node: &NodeHandle| node.members().iter().filter(|info| info.voter).count();

    let phantom = format!("127.0.0.1:{}", free_port());
    let refused = node
        .add_member("phan4", &phantom)
        .await
        .expect_err("nothing listens there")
        .to_string();
    assert!(
        refused.starts_with(&format!(
            "nothing answers as member phan4 at {phantom} (its peer port): Connection refused"
        )),
        "{refused}"
    );
    assert!(
        refused.ends_with(&format!(
            "Nothing was changed: start phan4 first (hivekeeper serve --name phan4 \
             --initial-cluster phan4={phantom} --initial-cluster-state existing), then add it"
        )),
        "{refused}"
    );
    assert_eq!(node.members().len(), 3);

    // Through the wire: a final `bad_request`, not an `unavailable` to retry.
    let answer = node
        .call(
            "operator",
            request(
                "m1",
                Op::AdminMemberAdd {
                    name: "phan4".into(),
                    addr: phantom.clone(),
                    catch_up_timeout_ms: None,
                    catch_up_lag_entries_max: None,
                },
            ),
        )
        .await;
    match &answer.outcome {
        Err(error) => {
            assert_eq!(error.code, ErrorCode::BadRequest);
            assert_eq!(error.message, refused);
        }
        other => panic!("a phantom add answered {other:?}"),
    }

    let addr = format!("127.0.0.1:{}", free_port());
    cluster
        .spawn("phan4", &format!("phan4={addr}"), ClusterState::Existing)
        .await;
    cluster
        .running(leader)
        .faults()
        .cut_off([node_id_for("phan4")]);
    let behind = node
        .add_member_with(
            "phan4",
            &addr,
            CatchUp {
                timeout_ms: 1_000,
                lag_entries_max: 0,
            },
        )
        .await
        .expect_err("cut off, it cannot catch up");
    assert_eq!(
        behind.to_string(),
        "phan4 did not catch up within 1000 ms (it has not answered the leader yet, at most 0 \
         allowed), so it was not made a voter: it is left as a learner, which does not vote. \
         Remove it with `hivekeeper member remove phan4`, or run `member add` again once it \
         keeps up"
    );
    let learner = node
        .members()
        .into_iter()
        .find(|info| info.member.name == "phan4")
        .expect("a learner");
    assert!(!learner.voter);
    assert_eq!(voters(&node), 3);
    // The quorum is what it was: writes commit.
    grant(&node, "drone-1", "g1").await;

    // Through the wire: a final `timeout`, and a resend of the same request id gets that
    // answer again, even once the learner could catch up: the change is carried out once.
    let add = |id: &str, timeout_ms| {
        request(
            id,
            Op::AdminMemberAdd {
                name: "phan4".into(),
                addr: addr.clone(),
                catch_up_timeout_ms: timeout_ms,
                catch_up_lag_entries_max: Some(0),
            },
        )
    };
    let first = node.call("operator", add("m2", Some(1_000))).await;
    match &first.outcome {
        Err(error) => {
            assert_eq!(error.code, ErrorCode::Timeout);
            assert_eq!(error.message, behind.to_string());
        }
        other => panic!("a learner that cannot catch up answered {other:?}"),
    }
    cluster.heal(leader);
    let again = node.call("operator", add("m2", Some(1_000))).await;
    assert_eq!(again, first);
    assert_eq!(voters(&node), 3, "a resend made the learner a voter");
    // A new request catches the learner up now and promotes it.
    let promoted = node.call("operator", add("m3", None)).await;
    assert!(promoted.outcome.is_ok(), "{promoted:?}");
    assert_eq!(voters(&node), 4);

    node.remove_member("phan4")
        .await
        .expect("a member is removed");
    assert_eq!(node.members().len(), 3);
    assert_eq!(voters(&node), 3);
    cluster.shutdown().await;
}

/// A member that is down is removed like any other, and the rest keep taking writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_is_down_is_removed_and_writes_go_on() {
    let mut cluster = Cluster::start("dead").await;
    let leader = cluster.leader().await;
    let node = cluster.handle(leader);
    let down = (leader + 1) % 3;
    cluster.stop(down).await;
    let name = format!("dead{}", down + 1);
    node.remove_member(&name).await.expect("removed while down");
    let members = node.members();
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(!members.iter().any(|info| info.member.name == name));
    let lease = grant(&node, "drone-1", "g1").await;
    acquired(&node, "drone-1", "a1", "pad/d", &lease).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_joins_as_learner_then_voter_and_a_member_is_removed() {
    join_and_remove("memb", None).await;
}

/// The same with mutual TLS between the members: the joiner, with no membership yet, accepts
/// the leader's certificate; the removed member is no longer a current one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_peer_mutual_tls_a_member_joins_and_a_removed_one_is_refused() {
    let names = ["mtls1", "mtls2", "mtls3", "mtls4"];
    join_and_remove("mtls", Some(TestCerts::new(&names, &[]))).await;
}

/// A fourth member `{prefix}4` joins, then a follower is removed.
async fn join_and_remove(prefix: &str, tls: Option<TestCerts>) {
    let mut cluster = Cluster::start_with(prefix, tls).await;
    let fourth = format!("{prefix}4");
    let leader = cluster.leader().await;
    let node = cluster.handle(leader);
    let lease = grant(&node, "drone-1", "g1").await;
    let token = match node
        .call("drone-1", request("a1", try_lock("dock", &lease)))
        .await
        .outcome
    {
        Ok(Success::Granted(Granted { token, .. })) => token,
        other => panic!("acquire answered {other:?}"),
    };

    // A fresh node, started to join: it initializes nothing and waits to be added.
    let addr = format!("127.0.0.1:{}", free_port());
    let joiner = cluster
        .spawn(&fourth, &format!("{fourth}={addr}"), ClusterState::Existing)
        .await;
    assert!(cluster.handle(joiner).members().is_empty());
    let added = node
        .add_member(&fourth, &addr)
        .await
        .expect("the leader adds it");
    assert!(added.voter);
    let members = node.members();
    assert_eq!(members.len(), 4);
    assert!(members.iter().all(|info| info.voter), "{members:?}");

    // The new member follows the leader and answers (forwarding), seeing the replicated state.
    let joined = cluster.handle(joiner);
    let mut seen = Vec::new();
    for _ in 0..100 {
        if joined.leader_id() == Some(node.node_id()) {
            seen = holders(joined.call("tester", request("i1", inspect("dock"))).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, vec![("drone-1".to_string(), token)]);
    // Adding it again changes nothing.
    node.add_member(&fourth, &addr).await.expect("idempotent");
    assert_eq!(node.members().len(), 4);

    // Remove a follower that is not the new one; three voters remain and still commit.
    let removed = (0..3).find(|i| *i != leader).expect("a follower");
    let removed_name = format!("{prefix}{}", removed + 1);
    node.remove_member(&removed_name).await.expect("removed");
    let members = node.members();
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(!members.iter().any(|info| info.member.name == removed_name));
    if let Some(certs) = &cluster.tls {
        // The removed member's certificate no longer opens the leader's peer port.
        let leader_addr = members
            .iter()
            .find(|info| info.id == node.node_id())
            .map(|info| info.member.addr.clone())
            .expect("the leader is a member");
        let removed_cert = certs.peer(&removed_name);
        let client = hivekeeper_tls::client_config(&certs.ca(), Some(&removed_cert)).expect("c");
        assert_eq!(
            stranger(&leader_addr, Some(client)).await,
            "read: received fatal alert: AccessDenied"
        );
    }
    let lease2 = grant(&joined, "drone-2", "g2").await;
    match joined
        .call("drone-2", request("a2", try_lock("dock-2", &lease2)))
        .await
        .outcome
    {
        Ok(Success::Granted(Granted { token: second, .. })) => assert!(second > token),
        other => panic!("acquire after the removal answered {other:?}"),
    }
    // Unknown names and non-leaders are refused with a reason.
    let unknown = node
        .remove_member("nobody")
        .await
        .expect_err("not a member");
    assert!(unknown.to_string().contains("not a member"), "{unknown}");
    let follower = cluster.handle((0..3).find(|i| *i != leader && *i != removed).expect("one"));
    let refused = follower
        .add_member(&format!("{prefix}5"), "127.0.0.1:1")
        .await
        .expect_err("not the leader");
    assert!(refused.to_string().contains("not the leader"), "{refused}");
    cluster.shutdown().await;
}

/// Each node's term and the leader it follows, through `admin.status`.
async fn terms_and_leaders(cluster: &Cluster) -> Vec<(u64, Option<u64>)> {
    let mut seen = Vec::new();
    for index in 0..cluster.nodes.len() {
        let reply = cluster
            .handle(index)
            .call("tester", request(&format!("s{index}"), Op::AdminStatus {}))
            .await;
        match reply.outcome {
            Ok(Success::Status(StatusReport { status, .. })) => {
                seen.push((status.term, status.leader_id))
            }
            other => panic!("admin.status answered {other:?}"),
        }
    }
    seen
}

/// A stranger on a member's peer port: TLS with `client` (or plain TCP without), then a
/// would-be hello frame. Returns why the connection ended; it must end before any answer.
async fn stranger(
    addr: &str,
    client: Option<std::sync::Arc<hivekeeper_tls::rustls::ClientConfig>>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the peer port accepts TCP");
    // Any frame will do: the member must not read it. A length prefix and junk.
    let frame = [0_u8, 0, 0, 4, 0x81, 0xa1, b'x', 0x01];
    let mut answer = Vec::new();
    let read = match client {
        None => {
            let mut tcp = tcp;
            tcp.write_all(&frame).await.expect("written");
            within(10, "the member closes", tcp.read_to_end(&mut answer)).await
        }
        Some(client) => {
            let name = hivekeeper_tls::server_name("localhost").expect("a name");
            let connector = hivekeeper_tls::tokio_rustls::TlsConnector::from(client);
            let mut tls = match within(10, "the handshake", connector.connect(name, tcp)).await {
                Ok(tls) => tls,
                Err(error) => return format!("handshake: {error}"),
            };
            // TLS 1.3: the client finishes first; the server's verdict comes on the next read.
            let _ = tls.write_all(&frame).await;
            let _ = tls.flush().await;
            within(10, "the member closes", tls.read_to_end(&mut answer)).await
        }
    };
    match read {
        // Plain TCP: the member's TLS answers the junk with an alert record (type 21) at most.
        Ok(_) => {
            assert!(
                answer.is_empty() || answer[0] == 21,
                "the member answered a stranger: {answer:?}"
            );
            format!("closed after {} bytes", answer.len())
        }
        Err(error) => format!("read: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_mutual_tls_elects_replicates_and_refuses_strangers_before_any_frame() {
    let certs = TestCerts::new(&["ptls1", "ptls2", "ptls3", "ptls9"], &[]);
    let cluster = Cluster::start_with("ptls", Some(certs)).await;
    let leader = cluster.leader().await;

    // Elected over mutual TLS; a write through a follower replicates to the third member.
    let follower = cluster.handle((leader + 1) % 3);
    let lease = grant(&follower, "drone-1", "g1").await;
    let token = acquired(&follower, "drone-1", "a1", "pad/1", &lease).await;
    let third = cluster.handle((leader + 2) % 3);
    let seen = holders(third.call("tester", request("i1", inspect("pad/1"))).await);
    assert_eq!(seen, vec![("drone-1".to_string(), token)]);

    let before = terms_and_leaders(&cluster).await;
    let tls = cluster.tls.as_ref().expect("TLS certificates");
    let other_ca = TestCerts::new(&["ptls2"], &[]);
    let ca = tls.ca();
    let members = cluster.handle(leader).members();
    assert_eq!(members.len(), 3);
    for member in &members {
        let addr = member.member.addr.as_str();
        let plain = stranger(addr, None).await;
        let anonymous = stranger(
            addr,
            Some(hivekeeper_tls::client_config(&ca, None).expect("c")),
        )
        .await;
        let foreign = stranger(
            addr,
            Some(hivekeeper_tls::client_config(&ca, Some(&other_ca.peer("ptls2"))).expect("c")),
        )
        .await;
        let non_member = stranger(
            addr,
            Some(hivekeeper_tls::client_config(&ca, Some(&tls.peer("ptls9"))).expect("c")),
        )
        .await;
        // Each refused by the member's TLS, inside the handshake: a plaintext client gets an
        // alert record (7 bytes) for its first bytes, the others the alert that names why.
        assert_eq!(
            [plain, anonymous, foreign, non_member],
            [
                "closed after 7 bytes",
                "read: received fatal alert: CertificateRequired",
                "read: received fatal alert: DecryptError",
                "read: received fatal alert: AccessDenied",
            ],
            "{}",
            member.member.name
        );
    }

    // Nothing changed: same terms and leader everywhere, and the holder still holds.
    assert_eq!(terms_and_leaders(&cluster).await, before);
    let seen = holders(third.call("tester", request("i2", inspect("pad/1"))).await);
    assert_eq!(seen, vec![("drone-1".to_string(), token)]);
    cluster.shutdown().await;
}

/// The final answer a waiting acquire gets when its `wait_ms` runs out.
fn wait_elapsed(id: &str) -> Response {
    Response::error(
        Some(id.to_string()),
        ErrorCode::Timeout,
        "wait_ms elapsed before the resource was granted",
    )
}

/// `drone-2` takes `name` through the leader and keeps it: the waiter in these tests can only
/// time out.
async fn hold(cluster: &Cluster, name: &str) {
    let leader = cluster.handle(cluster.leader().await);
    let lease = grant(&leader, "drone-2", "h-g").await;
    match leader
        .call("drone-2", request("h-a", try_lock(name, &lease)))
        .await
        .outcome
    {
        Ok(Success::Granted(Granted { token: _, .. })) => {}
        other => panic!("the holder's acquire answered {other:?}"),
    }
}

fn wait_lock(name: &str, lease: &str, wait_ms: u64) -> Op {
    Op::LockAcquire {
        name: name.to_string(),
        lease: lease.to_string(),
        wait_ms: Some(wait_ms),
        max_hold_ms: None,
        mode: LockMode::Exclusive,
    }
}

/// A follower arms no wait timer and forwards no cancel: the deadline is in the replicated
/// state, the leader's keeper proposes the expiry, and the follower answers its agent from the
/// entry it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_waiting_client_is_answered_timeout_by_the_leaders_expiry() {
    let cluster = Cluster::start("wexp").await;
    hold(&cluster, "dock").await;
    let follower = cluster.handle((cluster.leader().await + 1) % 3);
    let lease = grant(&follower, "drone-1", "g1").await;
    let answer = hivekeeper_test_support::within(
        10,
        "the timed-out wait's answer",
        follower.call("drone-1", request("w1", wait_lock("dock", &lease, 300))),
    )
    .await;
    assert_eq!(answer, wait_elapsed("w1"));
    // The holder keeps the lock; nobody waits any more.
    let leader = cluster.handle(cluster.leader().await);
    let seen = leader.call("tester", request("i1", inspect("dock"))).await;
    match seen.outcome {
        Ok(Success::Inspection(Inspection {
            holders, waiters, ..
        })) => {
            assert_eq!(holders.len(), 1);
            assert_eq!(holders[0].agent, "drone-2");
            assert!(waiters.is_empty(), "{waiters:?}");
        }
        other => panic!("inspect answered {other:?}"),
    }
    cluster.shutdown().await;
}

/// The leader goes away while a follower's agent waits: the next leader finds the wait's
/// deadline in the state it took over and ends it, so the agent still gets its final answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_still_times_out_when_the_leader_changes_while_it_waits() {
    let cluster = Cluster::start("wfail").await;
    hold(&cluster, "dock").await;
    let old = cluster.leader().await;
    let follower = cluster.handle((old + 1) % 3);
    let lease = grant(&follower, "drone-1", "g1").await;
    let waiting = tokio::spawn({
        let follower = follower.clone();
        async move {
            follower
                .call("drone-1", request("w1", wait_lock("dock", &lease, 2_000)))
                .await
        }
    });
    // Queued (replicated) before the leader goes.
    hivekeeper_test_support::eventually(5, "the wait queued", async || {
        let seen = follower
            .call("tester", request("i0", inspect("dock")))
            .await;
        matches!(seen.outcome, Ok(Success::Inspection(Inspection { waiters: w, .. })) if w.len() == 1)
    })
    .await;
    // The leader is cut off from both followers (as if it had died: `Node::shutdown` does
    // not stop Raft while other tasks hold the node's handle). The two elect another.
    cluster.isolate(old);
    let answer = hivekeeper_test_support::within(30, "the wait's answer after failover", waiting)
        .await
        .expect("the waiting task");
    assert_eq!(answer, wait_elapsed("w1"));
    let new_leader = (0..3)
        .filter(|i| *i != old)
        .find(|i| cluster.handle(*i).is_leader());
    assert!(new_leader.is_some(), "the majority leads on");
    cluster.heal(old);
    cluster.shutdown().await;
}

/// A leader whose clock ran an hour ahead granted a lease (stamped an hour in the future), then
/// its clock came back. The machine's clock steps by stamps (`clock.rs`), so the lease's lock
/// is reclaimed a few seconds after its 1 s TTL and goes to the next agent with a higher token.
/// A machine that kept the largest stamp as its clock could not expire the lease until real
/// time caught up an hour later (the keeper would propose the refused expiry every tick): the
/// lock would still be held after 20 s, and this test would fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_granted_while_the_leaders_clock_ran_an_hour_ahead_is_still_reclaimed() {
    let cluster = Cluster::start("clk").await;
    let leader = cluster.leader().await;
    let node = cluster.handle(leader);
    cluster.running(leader).set_clock_offset_ms(3_600_000);
    let lease = grant_ttl(&node, "a", "a-grant", 1_000).await;
    let token = acquired(&node, "a", "a-lock", "l", &lease).await;
    // The clock comes back; agent a never keeps its lease alive.
    cluster.running(leader).set_clock_offset_ms(0);
    let mut reclaimed = false;
    for attempt in 0..200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reply = node
            .call(
                "observer",
                request(&format!("inspect-{attempt}"), inspect("l")),
            )
            .await;
        if holders(reply).is_empty() {
            reclaimed = true;
            break;
        }
    }
    assert!(
        reclaimed,
        "lock l is still held 20 s after its lease's 1 s TTL"
    );
    let lease_b = grant_ttl(&node, "b", "b-grant", 1_000).await;
    let token_b = acquired(&node, "b", "b-lock", "l", &lease_b).await;
    assert!(token_b > token, "tokens increase: {token_b} after {token}");
    cluster.shutdown().await;
}

/// The same for waits: an agent queued with `wait_ms` while the leader's clock ran an hour
/// ahead, then the clock came back with no other entry. The keeper's expiry check projects the
/// machine's clock from the last stamp, which is then an hour ahead of the leader's clock, so
/// it would see nothing due until the leader's clock caught up; the keeper therefore proposes
/// an entry that re-anchors the steps, and the wait times out about `wait_ms` later. Without
/// that entry no answer comes within 20 s and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_queued_while_the_leaders_clock_ran_ahead_still_times_out() {
    let cluster = Cluster::start("wclk").await;
    let leader = cluster.leader().await;
    cluster.running(leader).set_clock_offset_ms(3_600_000);
    let node = cluster.handle(leader);
    // Leases of a minute, so that no lease expiry comes as an entry during the test (one
    // would re-anchor the clock's steps as well and hide the fault).
    let holder = grant_ttl(&node, "drone-2", "h-g", 60_000).await;
    acquired(&node, "drone-2", "h-a", "dock", &holder).await;
    let lease = grant_ttl(&node, "drone-1", "g1", 60_000).await;
    let waiting = tokio::spawn({
        let node = node.clone();
        async move {
            node.call("drone-1", request("w1", wait_lock("dock", &lease, 2_000)))
                .await
        }
    });
    hivekeeper_test_support::eventually(5, "the wait queued", async || {
        let seen = node.call("tester", request("i0", inspect("dock"))).await;
        matches!(seen.outcome, Ok(Success::Inspection(Inspection { waiters: w, .. })) if w.len() == 1)
    })
    .await;
    cluster.running(leader).set_clock_offset_ms(0);
    let answer = hivekeeper_test_support::within(20, "the wait's answer", waiting)
        .await
        .expect("the waiting task");
    assert_eq!(answer, wait_elapsed("w1"));
    cluster.shutdown().await;
}

/// `Node::shutdown` stops Raft even while a front door still holds a handle: the held handle is
/// answered `unavailable`, and the member restarts at once on the same data directory (the
/// data file is closed, no Raft core of the old instance votes or appends any more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stops_cleanly_while_a_front_door_holds_its_handle_and_restarts_at_once() {
    let mut cluster = Cluster::start("stop").await;
    let leader = cluster.leader().await;
    let lease = grant(&cluster.handle(leader), "drone-1", "g1").await;
    let token = acquired(&cluster.handle(leader), "drone-1", "a1", "pad/1", &lease).await;
    let stopped = (leader + 1) % 3;
    let held = cluster.handle(stopped);
    cluster.stop(stopped).await;

    let reply = within(
        10,
        "a write through a stopped member's handle",
        held.call(
            "drone-1",
            request(
                "g2",
                Op::LeaseGrant {
                    ttl_ms: 5_000,
                    lock_delay_ms: 0,
                },
            ),
        ),
    )
    .await;
    assert!(
        is_unavailable(&reply),
        "a stopped member's handle answered {reply:?}"
    );
    assert!(!held.is_leader());

    let list = cluster.initial_cluster.clone();
    let name = format!("stop{}", stopped + 1);
    let dir = cluster._dirs[stopped].path().to_path_buf();
    let node = cluster.member(&name, &list, ClusterState::New, &dir).await;
    cluster.nodes[stopped] = Some(node);
    cluster.leader().await;
    let seen = holders(
        cluster
            .handle(stopped)
            .call("tester", request("i2", inspect("pad/1")))
            .await,
    );
    assert_eq!(seen, vec![("drone-1".to_string(), token)]);
    drop(held);
    cluster.shutdown().await;
}
