//! Throughput of one node under 500 concurrent proposers, and how many fsynced transactions
//! the storage writer needed. Prints the figures; asserts only what must hold whatever the
//! disk's speed.
//!
//! openraft appends one entry per client write, so one command per entry costs up to one
//! transaction each (first test; appends that arrive during a commit share the next one, so it
//! may take fewer). Commands proposed while an entry is in flight share the next entry
//! (`propose_batch`, the way the node's proposer batches), and so its transaction (second
//! test): far fewer transactions than commands.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_group_commit -- --nocapture
//! cargo test -p hivekeeper-coordinator --release --test raft_group_commit -- --nocapture
//! ```

mod raft_support;

use std::sync::Arc;
use std::time::Instant;

use hivekeeper_coordinator::raft::{
    self, AppliedReceiver, BATCH_MAX, Proposed, RaftConfig, RaftHandle,
};
use hivekeeper_coordinator::{Command, Reply};
use raft_support::{WAIT, WAIT_S, lease_grant, request, tempdir, within};
use tokio::sync::{mpsc, oneshot};

const PROPOSALS: usize = 500;

/// Opens a fresh node in `dir`, initializes it as a single-member cluster and waits until it
/// leads.
async fn single_node_leader(dir: &tempfile::TempDir) -> (RaftHandle, AppliedReceiver) {
    let (node, applied) = within(
        WAIT_S,
        "open",
        raft::open(dir.path(), 1, &RaftConfig::DEFAULTS),
    )
    .await
    .expect("opens");
    within(WAIT_S, "initialize", node.initialize_single_node())
        .await
        .expect("initialize");
    within(WAIT_S, "leader", node.wait_for_leader(WAIT))
        .await
        .expect("leader");
    (node, applied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_single_command_proposals_all_commit() {
    let dir = tempdir();
    let (node, mut applied) = single_node_leader(&dir).await;
    // The node layer would consume applied entries; drain them so the channel stays small.
    let drain = tokio::spawn(async move { while applied.recv().await.is_some() {} });

    let node = Arc::new(node);
    let before = node.writer_stats();
    let started = Instant::now();
    let mut proposals = Vec::with_capacity(PROPOSALS);
    for n in 0..PROPOSALS {
        let node = node.clone();
        proposals.push(tokio::spawn(async move {
            node.propose(request(&format!("drone-{n}"), "grant", lease_grant(60_000)))
                .await
        }));
    }
    let mut indexes = Vec::with_capacity(PROPOSALS);
    for proposal in proposals {
        let proposed = within(WAIT_S, "a proposal", proposal)
            .await
            .expect("the proposal task ran")
            .expect("the proposal committed");
        assert!(
            matches!(proposed.reply, Reply::Lease { .. }),
            "{:?}",
            proposed.reply
        );
        indexes.push(proposed.meta.index);
    }
    let elapsed = started.elapsed();
    let after = node.writer_stats();
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), PROPOSALS, "each proposal has its own entry");

    let transactions = after.transactions - before.transactions;
    let entries = after.entries - before.entries;
    println!(
        "one command per entry: {PROPOSALS} concurrent proposals in {:.1} ms: {:.0} writes/s; \
         {transactions} redb transactions (fsyncs) for {entries} entries, \
         {:.2} entries per transaction",
        elapsed.as_secs_f64() * 1000.0,
        PROPOSALS as f64 / elapsed.as_secs_f64(),
        entries as f64 / transactions.max(1) as f64,
    );
    assert!(entries >= PROPOSALS as u64);
    assert!(
        transactions <= entries,
        "never more than one transaction per appended entry"
    );

    let node = Arc::into_inner(node).expect("every proposal task has finished");
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
    within(WAIT_S, "drain", drain)
        .await
        .expect("the drain task ends");
}

/// A batcher like the node's proposer: one entry in flight; whatever arrives meanwhile goes
/// into the next entry (up to `BATCH_MAX` commands).
fn spawn_batcher(
    node: Arc<RaftHandle>,
) -> mpsc::UnboundedSender<(Command, oneshot::Sender<Proposed>)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Command, oneshot::Sender<Proposed>)>();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < BATCH_MAX {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let (commands, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let proposed = node
                .propose_batch(commands)
                .await
                .expect("the leader commits the batch");
            for (reply, proposed) in replies.into_iter().zip(proposed) {
                let _ = reply.send(proposed);
            }
        }
    });
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_proposals_batched_share_few_transactions() {
    let dir = tempdir();
    let (node, mut applied) = single_node_leader(&dir).await;
    let drain = tokio::spawn(async move { while applied.recv().await.is_some() {} });

    let node = Arc::new(node);
    let batcher = spawn_batcher(node.clone());
    let before = node.writer_stats();
    let started = Instant::now();
    let mut proposals = Vec::with_capacity(PROPOSALS);
    for n in 0..PROPOSALS {
        let batcher = batcher.clone();
        proposals.push(tokio::spawn(async move {
            let (tx, rx) = oneshot::channel();
            let command = request(&format!("drone-{n}"), "grant", lease_grant(60_000));
            batcher.send((command, tx)).expect("the batcher runs");
            rx.await.expect("the batcher answers")
        }));
    }
    let mut positions = Vec::with_capacity(PROPOSALS);
    for proposal in proposals {
        let proposed = within(WAIT_S, "a proposal", proposal)
            .await
            .expect("the proposal task ran");
        assert!(
            matches!(proposed.reply, Reply::Lease { .. }),
            "{:?}",
            proposed.reply
        );
        positions.push(proposed.meta.index);
    }
    let elapsed = started.elapsed();
    let after = node.writer_stats();
    positions.sort_unstable();
    positions.dedup();
    assert_eq!(
        positions.len(),
        PROPOSALS,
        "each command has its own position"
    );

    let transactions = after.transactions - before.transactions;
    let entries = after.entries - before.entries;
    println!(
        "batched: {PROPOSALS} concurrent proposals in {:.1} ms: {:.0} writes/s; \
         {entries} entries, {transactions} redb transactions (fsyncs), \
         {:.1} commands per transaction",
        elapsed.as_secs_f64() * 1000.0,
        PROPOSALS as f64 / elapsed.as_secs_f64(),
        PROPOSALS as f64 / transactions.max(1) as f64,
    );
    assert!(
        transactions * 5 <= PROPOSALS as u64,
        "far fewer transactions ({transactions}) than proposals ({PROPOSALS})"
    );

    // The batcher task drops its handle once its channel is closed and drained.
    drop(batcher);
    let node = within(WAIT_S, "the batcher to let go of the node", async move {
        let mut node = node;
        loop {
            match Arc::try_unwrap(node) {
                Ok(node) => return node,
                Err(shared) => {
                    node = shared;
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        }
    })
    .await;
    within(WAIT_S, "shutdown", node.shutdown())
        .await
        .expect("a clean shutdown");
    within(WAIT_S, "drain", drain)
        .await
        .expect("the drain task ends");
}
