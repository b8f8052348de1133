//! The Raft settings a node chooses locally (timers, snapshot and purge policy).
//!
//! Defaults suit a swarm on one LAN: a heartbeat every 50 ms and an election after 150–300 ms
//! of silence, so a failover costs well under a second and stays far below the 500 ms minimum
//! lease TTL's margin of a few heartbeats (DESIGN.md §2).

use serde::{Deserialize, Serialize};

use super::error::RaftError;
use crate::ConfigError;

/// Largest snapshot chunk openraft sends in one `InstallSnapshot`: 1 MiB, so a chunk never
/// holds a heartbeat back for long.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// Local Raft settings. Units are in the names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftConfig {
    /// How often a leader sends heartbeats.
    pub heartbeat_interval_ms: u64,
    /// Shortest silence from the leader after which a follower starts an election (see
    /// [`RaftConfig::openraft_election_timeouts_ms`] for how openraft is set to honour it).
    pub election_timeout_ms_min: u64,
    /// Longest such silence (each follower picks at random in between, to avoid split votes).
    pub election_timeout_ms_max: u64,
    /// Build a snapshot every this many applied entries; 0 never builds one on its own (an
    /// operator or a test triggers it).
    pub snapshot_every_entries: u64,
    /// Entries kept in the log behind the latest snapshot (so a follower slightly behind gets
    /// entries, not a whole snapshot); older ones are purged.
    pub entries_kept_after_snapshot: u64,
    /// Most entries in one replication message.
    pub replication_entries_max: u64,
    /// Time allowed to send and install a snapshot on a follower.
    pub snapshot_install_timeout_ms: u64,
    /// The data file's page cache (redb's), MiB. The hot set is the log's tail and the latest
    /// snapshot; pages written stay cached until the cache is full, so a node's memory grows
    /// by up to this much after start whatever its load. A small device can give less (reads
    /// of older pages then go to the disk: a lagging follower's catch-up, a snapshot install).
    pub cache_mib: u64,
    /// Size of each segment file of the Raft log (`data_dir/raft-log/`), KiB, preallocated when
    /// the segment is created (so a full disk shows there, not in the middle of an append).
    /// Larger segments mean fewer files; a purge behind a snapshot frees whole segments only,
    /// so up to one segment of old entries stays. A small disk can give less; a change applies
    /// to segments created after it.
    pub log_segment_kib: u64,
}

/// The smallest [`RaftConfig::log_segment_kib`]: a few entries per segment.
pub const LOG_SEGMENT_KIB_MIN: u64 = 4;

/// The largest [`RaftConfig::log_segment_kib`]: 1 GiB, the segment log's own bound.
pub const LOG_SEGMENT_KIB_MAX: u64 = hivekeeper_segment_log::SEGMENT_BYTES_MAX >> 10;

impl RaftConfig {
    /// The defaults, in one place.
    pub const DEFAULTS: RaftConfig = RaftConfig {
        heartbeat_interval_ms: 50,
        election_timeout_ms_min: 150,
        election_timeout_ms_max: 300,
        snapshot_every_entries: 10_000,
        entries_kept_after_snapshot: 1_000,
        replication_entries_max: 300,
        snapshot_install_timeout_ms: 2_000,
        cache_mib: 64,
        log_segment_kib: hivekeeper_segment_log::DEFAULTS.segment_bytes >> 10,
    };

    /// Cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.heartbeat_interval_ms == 0 {
            return Err(ConfigError::NotPositive {
                field: "heartbeat_interval_ms",
            });
        }
        if self.election_timeout_ms_min <= self.heartbeat_interval_ms {
            return Err(ConfigError::ElectionTimeoutWithinHeartbeat {
                election_timeout_ms_min: self.election_timeout_ms_min,
                heartbeat_interval_ms: self.heartbeat_interval_ms,
            });
        }
        let election_timeout_ms_max_min = 2 * self.heartbeat_interval_ms + 4;
        if self.election_timeout_ms_max < election_timeout_ms_max_min {
            return Err(ConfigError::ElectionTimeoutMaxTooShort {
                election_timeout_ms_max: self.election_timeout_ms_max,
                election_timeout_ms_max_min,
            });
        }
        if self.election_timeout_ms_min >= self.election_timeout_ms_max {
            return Err(ConfigError::ElectionWindowEmpty {
                election_timeout_ms_min: self.election_timeout_ms_min,
                election_timeout_ms_max: self.election_timeout_ms_max,
            });
        }
        if self.replication_entries_max == 0 {
            return Err(ConfigError::NotPositive {
                field: "replication_entries_max",
            });
        }
        if self.snapshot_install_timeout_ms == 0 {
            return Err(ConfigError::NotPositive {
                field: "snapshot_install_timeout_ms",
            });
        }
        if self.cache_mib == 0 {
            return Err(ConfigError::NotPositive { field: "cache_mib" });
        }
        if !(LOG_SEGMENT_KIB_MIN..=LOG_SEGMENT_KIB_MAX).contains(&self.log_segment_kib) {
            return Err(ConfigError::OutOfRange {
                field: "log_segment_kib",
                value: self.log_segment_kib,
                min: LOG_SEGMENT_KIB_MIN,
                max: LOG_SEGMENT_KIB_MAX,
            });
        }
        Ok(())
    }

    /// openraft's own `(election_timeout_min, election_timeout_max)` for our election window.
    ///
    /// openraft does not start an election after its election timeout of silence: a follower
    /// that knows a leader first waits out that leader's lease, which openraft sets to its
    /// `election_timeout_max`, then its random election timeout, so it elects after
    /// `E_max + random(E_min, E_max)` of silence (`RaftCore::handle_tick_election`). Passed
    /// through unchanged, 150–300 ms would mean 450–600 ms of silence (docs/BENCHMARKS.md,
    /// "Failover", compares the two). So openraft gets `E_max = max / 2` and
    /// `E_min = min − E_max` (at least one heartbeat interval plus 1 ms, which openraft
    /// requires): the silence before an election is then between
    /// `max(min, E_max + heartbeat + 1)` and `max` — 201–300 ms with the defaults. The lease
    /// still keeps a follower from voting for a candidate while it heard from a live leader
    /// within `E_max`; a candidate's own wait is always longer than that.
    pub fn openraft_election_timeouts_ms(&self) -> (u64, u64) {
        let high = (self.election_timeout_ms_max / 2).max(self.heartbeat_interval_ms + 2);
        let low = self
            .election_timeout_ms_min
            .saturating_sub(high)
            .max(self.heartbeat_interval_ms + 1)
            .min(high - 1);
        (low, high)
    }

    /// [`RaftConfig::cache_mib`] in bytes.
    pub fn cache_bytes(&self) -> usize {
        usize::try_from(self.cache_mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
    }

    /// [`RaftConfig::log_segment_kib`] in bytes.
    pub fn log_segment_bytes(&self) -> u64 {
        self.log_segment_kib.saturating_mul(1 << 10)
    }

    /// The openraft configuration for these settings.
    pub(crate) fn to_openraft(&self) -> Result<openraft::Config, RaftError> {
        self.validate()
            .map_err(|error| RaftError::Config(error.to_string()))?;
        let snapshot_policy = match self.snapshot_every_entries {
            0 => openraft::SnapshotPolicy::Never,
            entries => openraft::SnapshotPolicy::LogsSinceLast(entries),
        };
        let (election_timeout_min, election_timeout_max) = self.openraft_election_timeouts_ms();
        let config = openraft::Config {
            cluster_name: "hivekeeper".into(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min,
            election_timeout_max,
            install_snapshot_timeout: self.snapshot_install_timeout_ms,
            max_payload_entries: self.replication_entries_max,
            // A follower further behind than this gets a snapshot; openraft wants it above the
            // snapshot interval, or a snapshot may not catch the follower up.
            replication_lag_threshold: self.snapshot_every_entries.max(1_000) * 2,
            snapshot_policy,
            max_in_snapshot_log_to_keep: self.entries_kept_after_snapshot,
            purge_batch_size: 1,
            // Snapshot chunks of 1 MiB: a chunk never holds a heartbeat back for long; the
            // transport's frame bound is sized from it (`transport::frame_max_bytes`).
            snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
            // Followers campaign on Hivekeeper's timer (`election.rs`), not on openraft's tick.
            enable_elect: false,
            // openraft 0.10 lets a restarted leader resume its old term without a vote (on by
            // default). That is safe only when the state machine is durable at apply or the
            // committed id is saved at once; here the machine lives in memory and the committed
            // id rides along lazily (`writer.rs`, invariant 4), so a restarted leader would
            // serve a machine older than what it acknowledged (with it on,
            // `hivekeeper nemesis`'s `kill-majority` finds a lock granted twice). A restarted
            // leader stands for election like any other member.
            enable_leader_restore: Some(false),
            ..openraft::Config::default()
        };
        config
            .validate()
            .map_err(|error| RaftError::Config(error.to_string()))
    }
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig::DEFAULTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_design() {
        let config = RaftConfig::default()
            .to_openraft()
            .expect("defaults are valid");
        assert_eq!(config.heartbeat_interval, 50);
        // openraft waits its lease (its maximum) plus a random timeout: 150 + [51, 150] ms of
        // silence, inside our 150-300 ms window.
        assert_eq!(
            (config.election_timeout_min, config.election_timeout_max),
            (51, 150)
        );
        assert_eq!(
            config.snapshot_policy,
            openraft::SnapshotPolicy::LogsSinceLast(10_000)
        );
        // A restarted leader must be elected again (see `to_openraft`).
        assert_eq!(config.enable_leader_restore, Some(false));
    }

    /// openraft elects after `E_max + random(E_min, E_max)` of silence: that span must stay
    /// inside the configured window, and openraft's own rules must hold.
    #[test]
    fn openraft_elects_inside_the_configured_window() {
        for (heartbeat, min, max) in [
            (50, 150, 300),
            (10, 40, 80),
            (100, 400, 1_000),
            (20, 60, 61),
        ] {
            let config = RaftConfig {
                heartbeat_interval_ms: heartbeat,
                election_timeout_ms_min: min,
                election_timeout_ms_max: max,
                ..RaftConfig::DEFAULTS
            };
            config.validate().expect("a valid window");
            let (low, high) = config.openraft_election_timeouts_ms();
            assert!(
                heartbeat < low && low < high,
                "{heartbeat} {min} {max}: {low} {high}"
            );
            assert!(high + high <= max, "{min} {max}: {low} {high}");
            config.to_openraft().expect("openraft accepts it");
        }
    }

    #[test]
    fn an_election_timeout_within_a_heartbeat_is_refused() {
        let config = RaftConfig {
            election_timeout_ms_min: 50,
            ..RaftConfig::DEFAULTS
        };
        assert_eq!(
            config.validate(),
            Err(ConfigError::ElectionTimeoutWithinHeartbeat {
                election_timeout_ms_min: 50,
                heartbeat_interval_ms: 50,
            })
        );
    }

    #[test]
    fn the_cache_is_in_mib_and_never_zero() {
        assert_eq!(RaftConfig::DEFAULTS.cache_bytes(), 64 << 20);
        let config = RaftConfig {
            cache_mib: 0,
            ..RaftConfig::DEFAULTS
        };
        assert_eq!(
            config.validate(),
            Err(ConfigError::NotPositive { field: "cache_mib" })
        );
    }

    #[test]
    fn the_log_segment_is_in_kib_and_bounded() {
        assert_eq!(RaftConfig::DEFAULTS.log_segment_bytes(), 64 << 20);
        for (kib, valid) in [
            (3, false),
            (4, true),
            (1 << 20, true),
            ((1 << 20) + 1, false),
        ] {
            let config = RaftConfig {
                log_segment_kib: kib,
                ..RaftConfig::DEFAULTS
            };
            let expected = if valid {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange {
                    field: "log_segment_kib",
                    value: kib,
                    min: 4,
                    max: 1 << 20,
                })
            };
            assert_eq!(config.validate(), expected, "{kib} KiB");
        }
    }
}
