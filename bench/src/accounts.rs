//! With `--user` (an admin's credentials): against a service with authentication on, every
//! bench agent gets an account of its own before it connects (`admin.agent.add`, role
//! `agent`), and the accounts are removed when the run ends. Without `--user`, agents connect
//! anonymously, as a service without authentication expects.

use std::sync::Mutex;

use anyhow::{Context, anyhow};
use hivekeeper_agent::protocol::{AccountIssued, Op};
use hivekeeper_agent::{Agent, AgentConfig};

use super::Common;

/// The admin connection that creates the bench's accounts, and the accounts it created.
#[derive(Debug)]
pub struct Accounts {
    /// Authenticated as `--user`, which must have the `admin` role.
    admin: Agent,
    /// Accounts created in this run, removed at its end.
    added: Mutex<Vec<String>>,
}

impl Accounts {
    /// The admin connection, when `--user` is given.
    pub async fn open(common: &Common) -> anyhow::Result<Option<Accounts>> {
        // The brokers and TLS of every bench agent.
        let config = AgentConfig {
            agent_id: format!("hk-bench-{}", std::process::id()),
            ..common.agent_base()?
        };
        let config = common.login.apply(config)?;
        if config.secret.is_none() {
            return Ok(None);
        }
        let user = config.agent_id.clone();
        let admin = Agent::connect(config).await.with_context(|| {
            format!("connecting as --user {user} to create the agents' accounts")
        })?;
        Ok(Some(Accounts {
            admin,
            added: Mutex::new(Vec::new()),
        }))
    }

    /// `config` with a new account's secret for its agent id.
    pub async fn credentials(&self, config: AgentConfig) -> anyhow::Result<AgentConfig> {
        let name = config.agent_id.clone();
        let added: AccountIssued = self
            .admin
            .request_as(Op::AdminAgentAdd {
                name: name.clone(),
                role: None,
                kv_read: Vec::new(),
                kv_write: Vec::new(),
            })
            .await
            .map_err(|error| anyhow!("admin.agent.add {name}: {error}"))?;
        let secret = added
            .secret
            .ok_or_else(|| anyhow!("admin.agent.add {name}: the answer had no secret"))?;
        self.added
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(name);
        Ok(config.credentials(secret))
    }

    /// Removes every account this run created (their leases are revoked with them). Failures
    /// are counted and returned, not fatal: the measurement is already done.
    pub async fn remove_all(&self) -> usize {
        let names = std::mem::take(
            &mut *self
                .added
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut failed = 0;
        for name in names {
            if self
                .admin
                .request(Op::AdminAgentRemove { name })
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        failed
    }
}
