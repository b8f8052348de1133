//! [`NodeConfig`]: a node's settings, with one set of defaults ([`DEFAULTS`]) and `validate()`
//! for the rules that tie fields together.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ClusterConfig;
use crate::ConfigError;
use crate::raft::{self, RaftConfig};
use crate::state_machine::{KV_LIMITS_DEFAULT, KvLimits, Limits};

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
    /// The key space's replicated bounds (keys, bytes, lengths and the watch history),
    /// proposed like `limits` when this node leads with other bounds in force. Not read with
    /// `[node]`: the service's config file has them as a section of their own, `[kv]`, which
    /// `serve` copies here.
    #[serde(skip)]
    pub kv: KvLimits,
    /// Requests admitted at once (proposals in flight, reads, keepalives); past it the answer is
    /// `unavailable` instead of an ever-growing queue (ractor mailboxes are unbounded).
    pub ingress_max: usize,
    /// `lease.keepalive` requests admitted at once, in a lane of their own beside
    /// `ingress_max`: a flood of other requests can fill `ingress_max` but never refuses or
    /// delays a keepalive, so it never expires another agent's lease.
    pub keepalive_ingress_max: usize,
    /// Requests a second one agent may send (a token bucket per agent, checked before
    /// anything else); past it the answer is `rate_limited` and the SDK retries after a
    /// backoff. 0: no limit. Well above what one agent does flat out (docs/BENCHMARKS.md), so
    /// only a flood meets it.
    pub rate_per_s_max: u32,
    /// The bucket's size: requests one agent may send at once after a quiet spell.
    pub rate_burst_max: u32,
    /// Most commands in one log entry: many requests share one fsync.
    pub batch_max: usize,
    /// A batch of one command stays open while more requests arrive
    /// within this many microseconds of each other (at most three times it in all), while that
    /// pays: one entry then carries both reactions to a lock's handover. 0: never held
    /// (`node/batch_hold.rs`, docs/BENCHMARKS.md).
    pub batch_hold_us: u64,
    /// How often the lease keeper looks for overdue leases. The reclaim delay after a TTL is at
    /// most this plus one commit.
    pub keeper_tick_ms: u64,
    /// How long a request may wait for its commit before it is answered `unavailable`.
    pub propose_timeout_ms: u64,
    /// Authentication and roles (`serve --auth`, `[auth] enabled`): agents connect with an
    /// account's secret, and each request is checked against the account's role. Off: every
    /// client may do everything, as before accounts existed. The leader creates the `admin`
    /// account on the first start with it on (`<data_dir>/admin.secret`). Not a key of the
    /// node's own config section: `serve` sets it from `[auth] enabled` and `--auth`.
    #[serde(skip)]
    pub auth_enabled: bool,
}

/// The longest `batch_hold_us` accepted: 1 ms, about a durable commit on one node.
pub const BATCH_HOLD_US_MAX: u64 = 1_000;

impl NodeConfig {
    /// Every default of a node, in one place: a single node (no `cluster`) keeping its data in
    /// `./hivekeeper-data`.
    pub fn defaults() -> NodeConfig {
        NodeConfig {
            data_dir: PathBuf::from("hivekeeper-data"),
            node_id: 1,
            cluster: None,
            raft: RaftConfig::DEFAULTS,
            limits: Limits::DEFAULTS,
            kv: KV_LIMITS_DEFAULT,
            ingress_max: 10_000,
            keepalive_ingress_max: 10_000,
            rate_per_s_max: 2_000,
            rate_burst_max: 4_000,
            batch_max: raft::BATCH_MAX,
            batch_hold_us: 100,
            keeper_tick_ms: 20,
            propose_timeout_ms: 5_000,
            auth_enabled: false,
        }
    }

    /// Cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate()?;
        self.kv.validate()?;
        self.raft.validate()?;
        // A lease must outlive a few heartbeats, or an ordinary hiccup expires it (DESIGN.md §2).
        let heartbeats_min_ms = 3 * self.raft.heartbeat_interval_ms;
        if self.limits.lease_ttl_ms_min < heartbeats_min_ms {
            return Err(ConfigError::LeaseTtlBelowHeartbeats {
                lease_ttl_ms_min: self.limits.lease_ttl_ms_min,
                heartbeats_min_ms,
            });
        }
        for (field, value) in [
            ("ingress_max", self.ingress_max as u64),
            ("keepalive_ingress_max", self.keepalive_ingress_max as u64),
            ("batch_max", self.batch_max as u64),
            ("keeper_tick_ms", self.keeper_tick_ms),
            ("propose_timeout_ms", self.propose_timeout_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::NotPositive { field });
            }
        }
        // A bucket of no tokens would refuse every request of every agent.
        if self.rate_per_s_max > 0 && self.rate_burst_max == 0 {
            return Err(ConfigError::NotPositive {
                field: "rate_burst_max",
            });
        }
        if self.batch_max > raft::BATCH_MAX {
            return Err(ConfigError::BatchAboveLimit {
                batch_max: self.batch_max,
                batch_max_limit: raft::BATCH_MAX,
            });
        }
        if self.batch_hold_us > BATCH_HOLD_US_MAX {
            return Err(ConfigError::BatchHoldAboveLimit {
                batch_hold_us: self.batch_hold_us,
                batch_hold_us_max: BATCH_HOLD_US_MAX,
            });
        }
        // A failover must fit in the shortest lease: an election (at most the longest election
        // timeout) before a new leader gives every lease a fresh deadline.
        if self.raft.election_timeout_ms_max >= self.limits.lease_ttl_ms_min {
            return Err(ConfigError::FailoverLongerThanLease {
                election_timeout_ms_max: self.raft.election_timeout_ms_max,
                lease_ttl_ms_min: self.limits.lease_ttl_ms_min,
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_bounds_out_of_range_are_refused_with_the_bound_and_the_range() {
        let mut config = NodeConfig::default();
        config.kv.key_bytes_max = 600;
        let error = config.validate().expect_err("past the wire's keys");
        assert!(matches!(error, ConfigError::KvLimits(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "kv.key_bytes_max = 600 is outside 1..=512 (512: the wire contract's longest key)"
        );
        config.kv = KV_LIMITS_DEFAULT;
        config.kv.history_bytes_max = 0;
        let error = config.validate().expect_err("no history");
        assert_eq!(error.to_string(), "kv.history_bytes_max must be at least 1");
        config.kv.history_bytes_max = 1;
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn a_batch_hold_is_off_at_zero_and_refused_past_a_millisecond() {
        let mut config = NodeConfig {
            batch_hold_us: 0,
            ..NodeConfig::default()
        };
        assert!(config.validate().is_ok(), "0 turns the hold off");
        config.batch_hold_us = BATCH_HOLD_US_MAX + 1;
        let error = config.validate().expect_err("past the bound");
        assert_eq!(
            error.to_string(),
            "batch_hold_us (1001) must be at most 1000: a hold longer than a durable commit \
             delays every request more than it can save"
        );
    }
}
