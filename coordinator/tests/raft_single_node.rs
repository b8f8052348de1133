//! One node end to end, in process: open a data directory, initialize a single-member cluster,
//! propose through openraft, get the state machine's replies and events, shut down, reopen the
//! same directory and find the state again (the log is replayed), with tokens still increasing.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_single_node
//! ```

mod raft_support;

use hivekeeper_coordinator::raft::{self, Applied, RaftConfig, RaftError};
use hivekeeper_coordinator::{Event, Reply};
use hivekeeper_protocol::Op;
use hivekeeper_protocol::ResourceKind;
use raft_support::{WAIT, WAIT_S, lease_grant, lock_try, next_applied, request, tempdir, within};

/// The holders of lock `name` as `(agent, token)`, read from the node's state machine.
fn lock_holders(node: &raft::RaftHandle, name: &str) -> Vec<(String, u64)> {
    let inspect = Op::Inspect {
        kind: ResourceKind::Lock,
        name: name.to_string(),
    };
    match node
        .query(|machine| machine.query("tester", &inspect))
        .expect("the state machine is readable")
    {
        Reply::Inspect { holders, .. } => holders
            .into_iter()
            .map(|holder| (holder.agent, holder.token))
            .collect(),
        other => panic!("inspect answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_commits_applies_and_restarts_with_its_state() {
    let dir = tempdir();
    let config = RaftConfig::DEFAULTS;

    // First life: initialize, grant a lease, take a lock.
    let (node, mut applied) = within(WAIT_S, "open", raft::open(dir.path(), 1, &config))
        .await
        .expect("a fresh data directory opens");
    within(WAIT_S, "initialize", node.initialize_single_node())
        .await
        .expect("an empty node initializes");
    let leader = within(WAIT_S, "leader", node.wait_for_leader(WAIT))
        .await
        .expect("a single member elects itself");
    assert_eq!(leader, 1);

    let granted = within(
        WAIT_S,
        "lease.grant",
        node.propose(request("drone-1", "r1", lease_grant(10_000))),
    )
    .await
    .expect("the leader commits the grant");
    let Reply::Lease { lease, ttl_ms } = granted.reply else {
        panic!("lease.grant answered {:?}", granted.reply);
    };
    assert_eq!(ttl_ms, 10_000);
    let lease = lease.to_string();

    let acquired = within(
        WAIT_S,
        "lock.acquire",
        node.propose(request("drone-1", "r2", lock_try("pad-1", &lease))),
    )
    .await
    .expect("the leader commits the acquire");
    let Reply::Granted { token: first_token } = acquired.reply else {
        panic!("lock.acquire answered {:?}", acquired.reply);
    };
    assert!(acquired.meta.index > granted.meta.index);

    // The node layer's channel saw both entries, in order, with their events.
    let Applied::Entry {
        meta,
        reply,
        events,
        replayed,
        ..
    } = next_applied(&mut applied).await
    else {
        panic!("expected an applied entry");
    };
    assert_eq!(meta, granted.meta);
    assert!(matches!(reply, Reply::Lease { .. }));
    assert!(!replayed);
    assert!(matches!(
        events.as_slice(),
        [Event::LeaseGranted { ttl_ms: 10_000, .. }]
    ));
    let Applied::Entry { meta, events, .. } = next_applied(&mut applied).await else {
        panic!("expected an applied entry");
    };
    assert_eq!(meta, acquired.meta);
    assert!(
        matches!(events.as_slice(), [Event::Granted { token, .. }] if *token == first_token),
        "events of the acquire: {events:?}"
    );
    assert_eq!(
        lock_holders(&node, "pad-1"),
        vec![("drone-1".to_string(), first_token)]
    );

    // Several commands in one entry: applied in order, each at its own position.
    let batch = within(
        WAIT_S,
        "a batch",
        node.propose_batch(vec![
            request("drone-2", "r1", lease_grant(10_000)),
            request("drone-3", "r1", lease_grant(10_000)),
            request("drone-1", "r2", lock_try("pad-1", &lease)), // a retry: the first answer
        ]),
    )
    .await
    .expect("the leader commits the batch");
    let positions: Vec<u64> = batch.iter().map(|proposed| proposed.meta.index).collect();
    let first = positions[0];
    assert!(first > acquired.meta.index);
    assert_eq!(positions, vec![first, first + 1, first + 2]);
    assert!(matches!(batch[0].reply, Reply::Lease { .. }));
    assert!(matches!(batch[1].reply, Reply::Lease { .. }));
    assert_eq!(batch[2].reply, Reply::Granted { token: first_token });
    // The next entry continues after the batch's last position.
    let after_batch = within(
        WAIT_S,
        "after the batch",
        node.propose(request("drone-2", "r2", lease_grant(10_000))),
    )
    .await
    .expect("committed");
    assert_eq!(after_batch.meta.index, first + 3);
    for expected in batch.iter().chain([&after_batch]) {
        let Applied::Entry { meta, reply, .. } = next_applied(&mut applied).await else {
            panic!("expected an applied entry");
        };
        assert_eq!((meta, &reply), (expected.meta, &expected.reply));
    }
    assert!(matches!(
        within(
            WAIT_S,
            "an oversized batch",
            node.propose_batch(vec![
                request("drone-1", "x", lease_grant(10_000));
                raft::BATCH_MAX + 1
            ])
        )
        .await,
        Err(RaftError::BatchTooLarge { .. })
    ));

    let snapshot_before = node.query(|machine| machine.snapshot()).expect("readable");

    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");

    // Second life: the same directory. The log is re-applied at open, before any election.
    let (node, mut applied) = within(WAIT_S, "reopen", raft::open(dir.path(), 1, &config))
        .await
        .expect("the data directory reopens");
    assert_eq!(
        node.query(|machine| machine.snapshot()).expect("readable"),
        snapshot_before,
        "the replayed state equals the state before the restart"
    );
    assert_eq!(
        lock_holders(&node, "pad-1"),
        vec![("drone-1".to_string(), first_token)]
    );
    let Applied::Entry { replayed, .. } = next_applied(&mut applied).await else {
        panic!("expected a replayed entry");
    };
    assert!(replayed, "entries re-applied at start are marked replayed");

    within(WAIT_S, "initialize again", node.initialize_single_node())
        .await
        .expect("initializing an initialized node is a no-op");
    within(WAIT_S, "leader again", node.wait_for_leader(WAIT))
        .await
        .expect("the node is leader again");
    let acquired = within(
        WAIT_S,
        "lock.acquire after restart",
        node.propose(request("drone-1", "r3", lock_try("pad-2", &lease))),
    )
    .await
    .expect("the leader commits after a restart");
    let Reply::Granted {
        token: second_token,
    } = acquired.reply
    else {
        panic!("lock.acquire answered {:?}", acquired.reply);
    };
    assert!(
        second_token > first_token,
        "tokens keep increasing across restarts: {second_token} after {first_token}"
    );
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_a_leader_refuses_proposals_with_not_leader() {
    let dir = tempdir();
    let (node, _applied) = within(
        WAIT_S,
        "open",
        raft::open(dir.path(), 1, &RaftConfig::DEFAULTS),
    )
    .await
    .expect("a fresh data directory opens");
    // Not initialized: no membership, no leader.
    let refused = within(
        WAIT_S,
        "propose",
        node.propose(request("drone-1", "r1", lease_grant(10_000))),
    )
    .await;
    assert!(
        matches!(refused, Err(RaftError::NotLeader { leader: None, .. })),
        "{refused:?}"
    );
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
}
