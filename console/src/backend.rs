//! [`ConsoleBackend`]: all the console knows of the service it shows.

use std::future::Future;

use hivekeeper_protocol::{Request, Response, Role};
use tokio::sync::watch;

/// What a member's data takes on disk, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Storage {
    /// The Raft log's segment files.
    pub log_bytes: u64,
    /// The state file: the vote, the snapshots and the log's indexes.
    pub state_file_bytes: u64,
}

/// What the console needs of the service: answers to protocol requests, a tick when the state
/// changed, the members this one cannot reach, and the accounts' secrets checked. The node
/// implements it over its handle; the tests, over a fake.
pub trait ConsoleBackend: Send + Sync + 'static {
    /// Answers `request` as it would answer agent `account` over MQTT: with authentication on,
    /// the account's role is checked there, so the console needs no copy of the role rules.
    fn call(&self, account: &str, request: Request) -> impl Future<Output = Response> + Send;

    /// Ticks (the value grows) whenever this member applied entries or installed a snapshot.
    fn changes(&self) -> watch::Receiver<u64>;

    /// The names of the voters this member has not heard from within the election timeout, when
    /// it leads; `None` elsewhere (only a leader hears from every member).
    fn unreachable(&self) -> Option<Vec<String>>;

    /// Whether accounts and roles are enforced.
    fn auth_enabled(&self) -> bool;

    /// What this member's data takes on disk, when it can tell.
    fn storage(&self) -> Option<Storage>;

    /// The role of `account` if `secret` is its secret (authentication on), `None` otherwise.
    fn authenticate(
        &self,
        account: &str,
        secret: &str,
    ) -> impl Future<Output = Option<Role>> + Send;
}
