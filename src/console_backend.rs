//! The web console's backend over the node's handle (the `hivekeeper-console` crate knows
//! nothing of the node): requests answered as the node answers MQTT agents, the node's applied
//! ticks, the leader's unreachable members, and accounts checked as a CONNECT's are.

use hivekeeper_console::ConsoleBackend;
use hivekeeper_coordinator::node::NodeHandle;
use hivekeeper_protocol::{Request, Response, Role};
use tokio::sync::watch;

/// [`ConsoleBackend`] over a running node.
#[derive(Clone)]
pub struct NodeConsole(pub NodeHandle);

impl ConsoleBackend for NodeConsole {
    async fn call(&self, account: &str, request: Request) -> Response {
        self.0.call(account, request).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.0.applied_ticks()
    }

    fn unreachable(&self) -> Option<Vec<String>> {
        self.0.unreachable_members()
    }

    fn auth_enabled(&self) -> bool {
        self.0.auth_enabled()
    }

    async fn authenticate(&self, account: &str, secret: &str) -> Option<Role> {
        self.0.authenticate(account, secret).await.ok()
    }
}
