//! [`ConfigError`]: why a node's configuration was refused, with the offending values.
//!
//! One enum for the crate's configuration rules: [`crate::raft::RaftConfig::validate`], the
//! cluster membership ([`crate::node::ClusterConfig`]: its `initial_cluster` list, this node's
//! entry and listen address) and [`crate::node::NodeConfig::validate`], which checks the rules
//! across them. Each message names the setting, the value and the rule, as an operator reads it
//! on the one line `hivekeeper serve` prints before it exits.

/// A configuration rule that does not hold. Refused at start, before any file or port is
/// opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A size outside the range the setting allows.
    #[error("{field} = {value} is outside {min}..={max}")]
    OutOfRange {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A duration or count that must not be zero is zero.
    #[error("{field} must be positive")]
    NotPositive {
        /// The setting, as the config file names it.
        field: &'static str,
    },
    /// Followers would start elections between two heartbeats of a live leader.
    #[error(
        "election_timeout_ms_min ({election_timeout_ms_min}) must be above heartbeat_interval_ms \
         ({heartbeat_interval_ms}), or followers would start elections between heartbeats"
    )]
    ElectionTimeoutWithinHeartbeat {
        /// The configured shortest election timeout.
        election_timeout_ms_min: u64,
        /// The configured heartbeat interval.
        heartbeat_interval_ms: u64,
    },
    /// The longest election timeout leaves openraft no room: it halves it for its leader lease
    /// (see `RaftConfig::openraft_election_timeouts_ms`).
    #[error(
        "election_timeout_ms_max ({election_timeout_ms_max}) must be at least two heartbeat \
         intervals plus 4 ms ({election_timeout_ms_max_min}): openraft waits a leader lease of \
         half of it before its own timeout"
    )]
    ElectionTimeoutMaxTooShort {
        /// The configured longest election timeout.
        election_timeout_ms_max: u64,
        /// The smallest value allowed with this heartbeat interval.
        election_timeout_ms_max_min: u64,
    },
    /// The election window is empty: followers would all time out together (split votes).
    #[error(
        "election_timeout_ms_min ({election_timeout_ms_min}) must be below \
         election_timeout_ms_max ({election_timeout_ms_max})"
    )]
    ElectionWindowEmpty {
        /// The configured shortest election timeout.
        election_timeout_ms_min: u64,
        /// The configured longest election timeout.
        election_timeout_ms_max: u64,
    },
    /// The replicated limits refused themselves (`Limits::validate`).
    #[error("limits: {0}")]
    Limits(#[from] crate::state_machine::LimitsError),
    /// The key space's replicated bounds refused themselves (`KvLimits::validate`); the text
    /// names the bound and the range it accepts.
    #[error(transparent)]
    KvLimits(#[from] crate::state_machine::KvLimitsError),
    /// A lease could expire in an ordinary hiccup of a few missed heartbeats (DESIGN.md §2).
    #[error(
        "limits.lease_ttl_ms_min ({lease_ttl_ms_min} ms) must be at least three heartbeat \
         intervals ({heartbeats_min_ms} ms)"
    )]
    LeaseTtlBelowHeartbeats {
        /// The configured shortest lease TTL.
        lease_ttl_ms_min: u64,
        /// Three heartbeat intervals.
        heartbeats_min_ms: u64,
    },
    /// More commands per log entry than the storage writer takes.
    #[error("batch_max ({batch_max}) must be at most {batch_max_limit}")]
    BatchAboveLimit {
        /// The configured batch size.
        batch_max: usize,
        /// The most the Raft layer takes in one entry (`raft::BATCH_MAX`).
        batch_max_limit: usize,
    },
    /// A batch hold so long that the proposer would spin for milliseconds per entry.
    #[error(
        "batch_hold_us ({batch_hold_us}) must be at most {batch_hold_us_max}: a hold longer than \
         a durable commit delays every request more than it can save"
    )]
    BatchHoldAboveLimit {
        /// The configured hold.
        batch_hold_us: u64,
        /// The most allowed.
        batch_hold_us_max: u64,
    },
    /// A failover (an election, at most the longest election timeout) would not fit in the
    /// shortest lease, so a lease could expire while nobody leads.
    #[error(
        "raft.election_timeout_ms_max ({election_timeout_ms_max} ms) must be below \
         limits.lease_ttl_ms_min ({lease_ttl_ms_min} ms): a failover must fit in the shortest \
         lease"
    )]
    FailoverLongerThanLease {
        /// The configured longest election timeout.
        election_timeout_ms_max: u64,
        /// The configured shortest lease TTL.
        lease_ttl_ms_min: u64,
    },
    /// A cluster member without a name (`--name`).
    #[error("cluster name (--name) must not be empty")]
    ClusterNameEmpty,
    /// An `initial_cluster` entry without `=`, or with an empty name or address.
    #[error("initial_cluster entry {entry:?} is not name=host:port")]
    MemberNotNameEqualsAddr {
        /// The entry as written.
        entry: String,
    },
    /// An `initial_cluster` entry whose address has no valid port.
    #[error("initial_cluster entry {entry:?}: {addr:?} is not host:port")]
    MemberAddrNotHostPort {
        /// The entry as written.
        entry: String,
        /// Its address part.
        addr: String,
    },
    /// Two `initial_cluster` entries with one name, or two names that hash to one node id.
    #[error("initial_cluster names {name:?} twice (or two names share an id)")]
    MemberTwice {
        /// The name found again.
        name: String,
    },
    /// This node's `--name` is not in `initial_cluster`.
    #[error("this node's name {name:?} is not in initial_cluster ({initial_cluster})")]
    NameNotInCluster {
        /// This node's name.
        name: String,
        /// The list it was looked for in.
        initial_cluster: String,
    },
    /// This node's own address is a host name, not an IP, and no `peer_listen` says where to
    /// listen instead.
    #[error("this node's address {addr:?} is not an IP:port to listen on; set peer_listen")]
    PeerListenNotIp {
        /// This node's address in `initial_cluster`.
        addr: String,
    },
    /// Mutual TLS on the peer port needs a certificate, its key and the peer CA together.
    #[error(
        "{missing} is not set: mutual TLS on the peer port needs peer_tls_cert, peer_tls_key \
         and peer_ca (--peer-tls-cert, --peer-tls-key, --peer-ca) together"
    )]
    PeerTlsIncomplete {
        /// The first setting of the three that is missing.
        missing: &'static str,
    },
}
