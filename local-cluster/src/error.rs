//! The one error type of the crate: each variant says what was being done and carries the
//! values needed to act on it (the path, the command and what it printed, the member).

use std::path::PathBuf;
use std::process::ExitStatus;

/// Why starting, changing or stopping part of a local cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory of the cluster could not be created, written or removed.
    #[error("{action} {}", path.display())]
    File {
        /// What was being done: "creating", "writing", "removing", "opening".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS's reason.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started at all (not installed, not executable).
    #[error("running {program}{hint}")]
    Spawn {
        /// The program.
        program: String,
        /// What to install or do about it, with a leading separator; empty when none applies.
        hint: &'static str,
        /// The OS's reason.
        #[source]
        source: std::io::Error,
    },
    /// A program ran and failed.
    #[error("{command} failed ({status}): {stderr}{hint}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// What it printed on stderr, trimmed.
        stderr: String,
        /// What to do about it, with a leading separator; empty when none applies.
        hint: &'static str,
    },
    /// A member's process could not be started.
    #[error("starting member {member} ({})", binary.display())]
    StartMember {
        /// The member's name.
        member: String,
        /// The `hivekeeper` binary it was started from.
        binary: PathBuf,
        /// The OS's reason.
        #[source]
        source: std::io::Error,
    },
    /// No free ports could be picked for the members' listeners.
    #[error("picking free ports for the members")]
    Ports(#[source] std::io::Error),
    /// A cluster of no members was asked for.
    #[error("a cluster needs at least one member")]
    NoMembers,
    /// No running member said it leads within the wait.
    #[error("no leader among the members within {within_s} s (logs in {})", logs.display())]
    NoLeader {
        /// The wait, seconds.
        within_s: u64,
        /// Where the members' logs are.
        logs: PathBuf,
    },
    /// A restarted member did not serve /metrics within the wait.
    #[error("member {member} did not come back within {within_s} s")]
    NotBack {
        /// The member's name.
        member: String,
        /// The wait, seconds.
        within_s: u64,
    },
    /// A signal was asked for a member that is not running.
    #[error("member {member} is not running")]
    NotRunning {
        /// The member's name.
        member: String,
    },
    /// A fault was asked for that the cluster was not started for.
    #[error("{action} needs {requirement}")]
    NotStartedFor {
        /// The fault: "cutting links", "moving a member's clock", "filling a member's disk".
        action: &'static str,
        /// The [`Options`](crate::Options) it needs, in words.
        requirement: &'static str,
    },
    /// A broker address given to the raw client is not `host:port`.
    #[error("broker {broker:?} is not host:port")]
    NotHostPort {
        /// The address as given.
        broker: String,
    },
}
