//! `kv-fill`: K keys of 32-byte names and 100-byte values into the scenario's own cluster, in
//! `kv.txn` batches (as many puts as fit in one request, at most 64), several clients at once;
//! the fill rate and each member's memory once every member holds every key.
//!
//! ```text
//!  KvCluster::start (N members) ─▶ clients, client i homed on member i mod N
//!  batch b (keys b·B … b·B+B−1) to client b mod C: kv.txn { success: [put × B] }
//!  ─▶ wait until every member's hivekeeper_kv_keys ≥ K (followers apply behind the leader)
//!  report: keys, keys/s, commit latency of a batch, each member's RSS
//! ```

use std::time::Duration;

use anyhow::Context;
use hivekeeper_agent::Txn;
use hivekeeper_agent::protocol::kv::TxnOp;
use hivekeeper_agent::protocol::validate::REQUEST_BYTES_MAX;
use hivekeeper_agent::protocol::{Op, Request};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Launch;
use super::history::micros;
use super::kv_cluster::{self, KvCluster};
use super::report::{Errors, Report};

/// The length of every key name, bytes.
pub const KEY_BYTES: usize = 32;

/// The gauge of a member's key count.
const KV_KEYS: &str = "hivekeeper_kv_keys";

/// How long the members may take to apply the last batches after the leader answered.
const CATCH_UP: Duration = Duration::from_secs(120);

/// The scenario's shape.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Cluster members.
    pub members: usize,
    /// Keys to write.
    pub keys: u64,
    /// Puts per `kv.txn`; `None`: as many as fit in one request.
    pub batch: Option<usize>,
    /// Clients writing batches at once.
    pub clients: usize,
}

/// Key number `n`: `fill-` and `n` in zero-padded digits, [`KEY_BYTES`] bytes.
pub fn key(n: u64) -> String {
    const PREFIX: &str = "fill-";
    format!("{PREFIX}{n:0digits$}", digits = KEY_BYTES - PREFIX.len())
}

/// The puts of keys `range`, each with the scenario's value.
fn puts(range: std::ops::Range<u64>) -> Vec<TxnOp> {
    let value = kv_cluster::value();
    range
        .map(|n| TxnOp::Put(hivekeeper_agent::kv::put(key(n), value.clone())))
        .collect()
}

/// The largest batch of puts whose `kv.txn` request fits in [`REQUEST_BYTES_MAX`] (with a
/// request id longer than the SDK's), at most the service's 64 ops.
pub fn batch_max() -> usize {
    let fits = |count: usize| {
        let request = Request {
            id: "i".repeat(64),
            op: Op::KvTxn {
                compare: Vec::new(),
                success: puts(0..count as u64),
                failure: Vec::new(),
            },
        };
        serde_json::to_vec(&request).map_or(0, |bytes| bytes.len()) <= REQUEST_BYTES_MAX
    };
    let mut batch = hivekeeper_agent::protocol::kv::TXN_OPS_MAX;
    while batch > 1 && !fits(batch) {
        batch -= 1;
    }
    batch
}

/// Runs the scenario.
pub async fn run(launch: Launch<'_>, plan: Plan) -> anyhow::Result<Report> {
    let batch_fits = batch_max();
    let batch = plan.batch.unwrap_or(batch_fits);
    anyhow::ensure!(
        (1..=batch_fits).contains(&batch),
        "--batch must be 1 to {batch_fits} (the puts of 32-byte keys and 100-byte values that \
         fit in one request)"
    );
    anyhow::ensure!(plan.keys >= 1, "--keys must be at least 1");
    anyhow::ensure!(plan.clients >= 1, "--clients must be at least 1");
    let cluster = KvCluster::start(launch.hivekeeper, launch.run, plan.members).await?;
    let (clients, mut errors) = cluster
        .connect_spread(
            launch.run,
            "filler",
            plan.clients,
            launch.common.connect_concurrency,
        )
        .await?;

    let started = Instant::now();
    let batches = plan.keys.div_ceil(batch as u64);
    let stride = clients.len() as u64;
    let mut tasks = JoinSet::new();
    for (first, client) in clients.into_iter().enumerate() {
        let keys = plan.keys;
        tasks.spawn(async move {
            let kv = client.kv();
            let (mut filled, mut commit_us, mut errors) = (0u64, Vec::new(), Errors::default());
            for b in (first as u64..batches).step_by(stride as usize) {
                let range = b * batch as u64..((b + 1) * batch as u64).min(keys);
                let count = range.end - range.start;
                let txn = puts(range).into_iter().fold(Txn::new(), Txn::then);
                let sent = Instant::now();
                match kv.txn(txn).await {
                    Ok(_) => {
                        commit_us.push(micros(sent.elapsed()));
                        filled += count;
                    }
                    Err(error) => errors.add(format!("kv.txn: {error}")),
                }
            }
            let resends = client.stats().resends_total;
            (filled, commit_us, resends, errors)
        });
    }
    let (mut filled, mut commit_us, mut resends) = (0, Vec::new(), 0);
    while let Some(joined) = tasks.join_next().await {
        let (client_filled, client_commit_us, client_resends, client_errors) =
            joined.context("a filling client's task")?;
        filled += client_filled;
        resends += client_resends;
        commit_us.extend(client_commit_us);
        errors.merge(client_errors);
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    // Memory is read once every member applied every key, not while followers catch up.
    if !cluster
        .wait_for_gauge(&cluster.all(), KV_KEYS, filled, CATCH_UP)
        .await
    {
        errors.add(format!(
            "kv-fill: not every member held {filled} keys within {} s",
            CATCH_UP.as_secs()
        ));
    }
    Ok(cluster.write_report(elapsed_s, errors, filled, &commit_us, resends))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_32_bytes_and_a_full_batch_fits_in_one_request() {
        assert_eq!(key(0).len(), KEY_BYTES);
        assert_eq!(key(999_999_999).len(), KEY_BYTES);
        assert_eq!(kv_cluster::value().len(), kv_cluster::VALUE_BYTES);
        let batch = batch_max();
        assert!((30..=64).contains(&batch), "{batch}");
        // The SDK's own check of a txn of that many puts passes.
        let op = Op::KvTxn {
            compare: Vec::new(),
            success: puts(0..batch as u64),
            failure: Vec::new(),
        };
        op.validate()
            .expect("a full batch passes the service's checks");
    }
}
