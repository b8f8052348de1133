//! Building the swarm: many agents, each its own MQTT connection and lease, connected with
//! bounded concurrency; names unique per run so two runs against one service never share an
//! agent id (the MQTT client id) or a lock.

use std::sync::Arc;

use hivekeeper_agent::{Agent, AgentConfig, BrokerOrder, Session};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::accounts::Accounts;
use super::report::Errors;

/// Names of one bench run: `bench-{run}-...`, the run being the start time in ms (base 36)
/// and the process id, so runs started in the same millisecond differ too. Carries the
/// run's [`Accounts`] when `--user` is given.
#[derive(Debug, Clone)]
pub struct RunId(String, Option<Arc<Accounts>>);

impl RunId {
    /// A fresh run id.
    pub fn new() -> RunId {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        RunId(
            format!("{}{}", base36(ms), base36(u64::from(std::process::id()))),
            None,
        )
    }

    /// This run, creating an account for each agent through `accounts`.
    pub fn with_accounts(self, accounts: Option<Accounts>) -> RunId {
        RunId(self.0, accounts.map(Arc::new))
    }

    /// The run's accounts, if it creates them.
    pub fn accounts(&self) -> Option<&Accounts> {
        self.1.as_deref()
    }

    /// `config` as it connects in this run: with an account of its own when the run creates
    /// them, unchanged otherwise.
    pub async fn authenticate(&self, config: AgentConfig) -> anyhow::Result<AgentConfig> {
        match self.accounts() {
            Some(accounts) => accounts.credentials(config).await,
            None => Ok(config),
        }
    }

    /// The id of agent `role`-`index` (`[A-Za-z0-9_.-]`, well under 64 characters).
    pub fn agent(&self, role: &str, index: usize) -> String {
        format!("bench-{}-{role}-{index}", self.0)
    }

    /// A resource name of this run.
    pub fn resource(&self, name: &str) -> String {
        format!("bench-{}/{name}", self.0)
    }
}

fn base36(mut value: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(value % 36) as usize]);
        value /= 36;
        if value == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// A connected agent with its session (which holds the agent, and so its connection).
#[derive(Debug, Clone)]
pub struct Member {
    /// Its lease, kept alive by the SDK.
    pub session: Session,
}

/// Connects `count` agents named `run.agent(role, i)` with the settings of `base` (brokers,
/// TLS), at most `concurrency` at once, each taking a session of `ttl_ms`; agent i's first
/// broker is `brokers[i % n]`. Returns them in index order (`None` where connecting failed;
/// the failure is counted in the errors).
pub async fn connect(
    base: &AgentConfig,
    run: &RunId,
    role: &str,
    count: usize,
    ttl_ms: u64,
    concurrency: usize,
) -> (Vec<Option<Member>>, Errors) {
    // Agent i starts at broker i mod n and fails over along the rest: a cluster's load
    // spreads over its members, as a real swarm's would.
    let configs = (0..count).map(|index| AgentConfig {
        agent_id: run.agent(role, index),
        brokers: rotated(&base.brokers, index),
        broker_order: BrokerOrder::InOrder,
        ..base.clone()
    });
    let run = run.clone();
    connect_each(configs, concurrency, move |config| {
        let run = run.clone();
        async move {
            let config = run.authenticate(config).await?;
            let agent = Agent::connect(config).await?;
            let session = agent.session(ttl_ms).await?;
            Ok(Member { session })
        }
    })
    .await
}

/// Connects an agent of each of `configs` through `connect`, at most `concurrency` at once.
/// Returns what each gave in the configs' order (`None` where it failed; the failure is
/// counted in the errors).
pub async fn connect_each<T, F, Fut>(
    configs: impl IntoIterator<Item = AgentConfig>,
    concurrency: usize,
    connect: F,
) -> (Vec<Option<T>>, Errors)
where
    T: Send + 'static,
    F: Fn(AgentConfig) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut tasks = JoinSet::new();
    let mut count = 0;
    for (index, config) in configs.into_iter().enumerate() {
        count += 1;
        let permits = permits.clone();
        let connected = connect(config);
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            anyhow::Ok((index, connected.await?))
        });
    }
    let mut connected: Vec<Option<T>> = (0..count).map(|_| None).collect();
    let mut errors = Errors::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok((index, value))) => connected[index] = Some(value),
            Ok(Err(error)) => errors.add(format!("connect: {error}")),
            Err(panic) => errors.add(format!("connect: task failed: {panic}")),
        }
    }
    (connected, errors)
}

/// The traffic's agents (role `agent`): only those that connected, and their connect errors;
/// an error when none did.
pub async fn connect_agents(
    base: &AgentConfig,
    run: &RunId,
    count: usize,
    ttl_ms: u64,
    concurrency: usize,
) -> anyhow::Result<(Vec<Member>, Errors)> {
    let (members, errors) = connect(base, run, "agent", count, ttl_ms, concurrency).await;
    let members: Vec<Member> = members.into_iter().flatten().collect();
    anyhow::ensure!(
        !members.is_empty(),
        "no agent could connect to {}: {:?}",
        base.brokers.join(","),
        errors.samples
    );
    Ok((members, errors))
}

/// `brokers` starting at the one of index `home` (mod their count), the rest after it in order:
/// an agent's first broker and the ones it fails over to.
pub fn rotated(brokers: &[String], home: usize) -> Vec<String> {
    (0..brokers.len())
        .map(|k| brokers[(home + k) % brokers.len()].clone())
        .collect()
}
