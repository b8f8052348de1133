//! The web console's backend over the node's handle (the `hivekeeper-console` crate knows
//! nothing of the node): requests answered as the node answers MQTT agents, the node's applied
//! ticks, the leader's unreachable members, and accounts checked as a CONNECT's are.

use std::path::{Path, PathBuf};

use hivekeeper_console::{ConsoleBackend, Storage};
use hivekeeper_coordinator::node::NodeHandle;
use hivekeeper_coordinator::raft::{DATA_FILE_NAME, LOG_DIR_NAME};
use hivekeeper_protocol::{Request, Response, Role};
use tokio::sync::watch;

/// [`ConsoleBackend`] over a running node and its data directory.
#[derive(Clone)]
pub struct NodeConsole {
    /// The node whose state the console shows.
    pub node: NodeHandle,
    /// Its data directory, whose files' sizes the cluster view shows.
    pub data_dir: PathBuf,
}

impl NodeConsole {
    /// The bytes of the files directly in `dir` (the log's segments).
    fn files_bytes(dir: &Path) -> Option<u64> {
        let entries = std::fs::read_dir(dir).ok()?;
        Some(
            entries
                .flatten()
                .filter_map(|entry| entry.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|metadata| metadata.len())
                .sum(),
        )
    }
}

impl ConsoleBackend for NodeConsole {
    async fn call(&self, account: &str, request: Request) -> Response {
        self.node.call(account, request).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.node.applied_ticks()
    }

    fn unreachable(&self) -> Option<Vec<String>> {
        self.node.unreachable_members()
    }

    fn storage(&self) -> Option<Storage> {
        Some(Storage {
            log_bytes: NodeConsole::files_bytes(&self.data_dir.join(LOG_DIR_NAME))?,
            state_file_bytes: std::fs::metadata(self.data_dir.join(DATA_FILE_NAME))
                .ok()?
                .len(),
        })
    }

    fn auth_enabled(&self) -> bool {
        self.node.auth_enabled()
    }

    async fn authenticate(&self, account: &str, secret: &str) -> Option<Role> {
        self.node.authenticate(account, secret).await.ok()
    }
}
