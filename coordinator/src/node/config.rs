//! [`NodeConfig`]: a node's settings, with one set of defaults and `validate()` for the rules
//! that tie fields together.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ClusterConfig;
use crate::raft::{self, RaftConfig};
use crate::state_machine::Limits;

/// Node settings. Units are in the names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the Raft log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// This node's Raft id when it runs alone; a cluster member's id comes from its name.
    pub node_id: u64,
    /// Cluster membership; absent: a single node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    /// Raft timing and snapshot policy.
    pub raft: RaftConfig,
    /// The replicated limits this node proposes when it first leads with other limits in force.
    pub limits: Limits,
    /// Requests admitted at once (proposals in flight, reads, keepalives); past it the answer is
    /// `unavailable` instead of an ever-growing queue (ractor mailboxes are unbounded).
    pub ingress_max: usize,
    /// Most commands in one log entry: many requests share one fsync.
    pub batch_max: usize,
    /// How often the lease keeper looks for overdue leases. The reclaim delay after a TTL is at
    /// most this plus one commit.
    pub keeper_tick_ms: u64,
    /// How long a request may wait for its commit before it is answered `unavailable`.
    pub propose_timeout_ms: u64,
}

impl NodeConfig {
    /// The defaults, in one place.
    pub fn defaults() -> NodeConfig {
        NodeConfig {
            data_dir: PathBuf::from("hivekeeper-data"),
            node_id: 1,
            cluster: None,
            raft: RaftConfig::default(),
            limits: Limits::DEFAULTS,
            ingress_max: 10_000,
            batch_max: raft::BATCH_MAX,
            keeper_tick_ms: 20,
            propose_timeout_ms: 5_000,
        }
    }

    /// Cross-field rules.
    pub fn validate(&self) -> Result<(), String> {
        self.limits.validate()?;
        self.raft.validate()?;
        // A lease must outlive a few heartbeats, or an ordinary hiccup expires it (DESIGN.md §2).
        let heartbeats_min = 3 * self.raft.heartbeat_interval_ms;
        if self.limits.lease_ttl_ms_min < heartbeats_min {
            return Err(format!(
                "limits.lease_ttl_ms_min ({} ms) must be at least three heartbeat intervals \
                 ({heartbeats_min} ms)",
                self.limits.lease_ttl_ms_min
            ));
        }
        if self.ingress_max == 0 || self.batch_max == 0 {
            return Err("ingress_max and batch_max must be at least 1".into());
        }
        if self.batch_max > raft::BATCH_MAX {
            return Err(format!("batch_max must be at most {}", raft::BATCH_MAX));
        }
        if self.keeper_tick_ms == 0 || self.propose_timeout_ms == 0 {
            return Err("keeper_tick_ms and propose_timeout_ms must be positive".into());
        }
        // A failover must fit in the shortest lease: an election (at most the longest election
        // timeout) before a new leader gives every lease a fresh deadline.
        if self.raft.election_timeout_ms_max >= self.limits.lease_ttl_ms_min {
            return Err(format!(
                "raft.election_timeout_ms_max ({} ms) must be below limits.lease_ttl_ms_min \
                 ({} ms): a failover must fit in the shortest lease",
                self.raft.election_timeout_ms_max, self.limits.lease_ttl_ms_min
            ));
        }
        if let Some(cluster) = &self.cluster {
            cluster.validate()?;
        }
        Ok(())
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig::defaults()
    }
}
