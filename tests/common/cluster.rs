//! A cluster of real `hivekeeper serve` processes on loopback, for the cluster e2e tests.

use std::path::PathBuf;
use std::time::Duration;

use hivekeeper_agent::{Agent, AgentConfig, BrokerOrder};

use super::{Node, agent_config, eventually, free_ports, metric, metrics_text, within};

/// How the members of a [`ProcessCluster`] are started and reached.
#[derive(Clone, Copy)]
enum MemberDoor<'a> {
    /// The `hivekeeper` binary at this path, each member with an agent endpoint of its own.
    Endpoint(&'a std::path::Path),
    /// This build, every member behind the external broker on this port.
    Broker(u16),
}

/// `n` members named `n1..nN`, each with its own data dir, embedded broker and metrics port.
pub struct ProcessCluster {
    /// The members, by index (`n{index + 1}`); a killed one stays here, not running.
    pub nodes: Vec<Node>,
    root: tempfile::TempDir,
}

impl ProcessCluster {
    /// Starts `n` members with `extra_args` (e.g. `--config FILE`) and waits until they agree
    /// on a leader.
    pub async fn start(n: usize, extra_args: &[&str]) -> ProcessCluster {
        let root = tempfile::tempdir().expect("a temp dir");
        ProcessCluster::start_on(root, &member_list(n), extra_args).await
    }

    /// Starts every member of `list` (`n1=127.0.0.1:P1,...`, from [`member_list`]) on its data
    /// dir `root/<name>`, which may hold data already (a restored backup), with `extra_args`;
    /// waits until they agree on a leader.
    pub async fn start_on(
        root: tempfile::TempDir,
        list: &str,
        extra_args: &[&str],
    ) -> ProcessCluster {
        ProcessCluster::start_program_on(&super::node::this_build(), root, list, extra_args).await
    }

    /// Starts `n` members that all use the external broker on `broker_port` (`--mqtt-url`)
    /// instead of agent endpoints of their own, with `extra_args`; waits until they agree on a
    /// leader.
    pub async fn start_behind_broker(
        n: usize,
        broker_port: u16,
        extra_args: &[&str],
    ) -> ProcessCluster {
        let root = tempfile::tempdir().expect("a temp dir");
        let list = member_list(n);
        ProcessCluster::start_members(root, &list, MemberDoor::Broker(broker_port), extra_args)
            .await
    }

    /// [`ProcessCluster::start_on`] with every member running the `hivekeeper` binary at
    /// `program` (another build's, e.g. an older release for an upgrade test).
    pub async fn start_program_on(
        program: &std::path::Path,
        root: tempfile::TempDir,
        list: &str,
        extra_args: &[&str],
    ) -> ProcessCluster {
        ProcessCluster::start_members(root, list, MemberDoor::Endpoint(program), extra_args).await
    }

    /// Starts every member of `list` on its data dir `root/<name>`, as `door` says.
    async fn start_members(
        root: tempfile::TempDir,
        list: &str,
        door: MemberDoor<'_>,
        extra_args: &[&str],
    ) -> ProcessCluster {
        let mut nodes = Vec::new();
        for entry in list.split(',') {
            let name = entry.split_once('=').expect("NAME=ADDR").0.to_string();
            let mut args = vec!["--name", &name, "--initial-cluster", list];
            args.extend_from_slice(extra_args);
            let dir: PathBuf = root.path().join(&name);
            nodes.push(match door {
                MemberDoor::Endpoint(program) => Node::start_program(program, &dir, &args).await,
                MemberDoor::Broker(port) => Node::start_external_with_args(&dir, port, &args).await,
            });
        }
        let cluster = ProcessCluster { nodes, root };
        cluster.leader(30).await;
        cluster
    }

    /// The data dirs' parent.
    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// The `admin.secret` member `index` writes when it leads a cluster started with `--auth`,
    /// once it is there.
    pub async fn admin_secret(&self, index: usize) -> PathBuf {
        let secret_file = self
            .root()
            .join(format!("n{}", index + 1))
            .join("admin.secret");
        eventually(20, "the leader writes admin.secret", || async {
            secret_file.exists().then_some(())
        })
        .await;
        secret_file
    }

    /// A new member `name` running the binary at `program`, started to join this cluster
    /// (`--initial-cluster-state existing`) on a free peer port, its data dir `root/<name>`;
    /// with its `NAME=ADDR` for `member add`.
    pub async fn start_joining(&self, program: &std::path::Path, name: &str) -> (Node, String) {
        let entry = format!("{name}=127.0.0.1:{}", super::free_port());
        let args = [
            "--name",
            name,
            "--initial-cluster",
            &entry,
            "--initial-cluster-state",
            "existing",
        ];
        let node = Node::start_program(program, &self.root().join(name), &args).await;
        (node, entry)
    }

    /// Every member's MQTT port, in member order.
    pub fn mqtt_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(Node::mqtt_port).collect()
    }

    /// The index of the member that says it leads (`hivekeeper_raft_is_leader 1`), once
    /// exactly one running member says so.
    pub async fn leader(&self, secs: u64) -> usize {
        eventually(secs, "one leader", || async {
            let mut leaders = Vec::new();
            for (index, node) in self.nodes.iter().enumerate() {
                let Some(text) = metrics_text(node.metrics_port).await else {
                    continue;
                };
                if metric(&text, "hivekeeper_raft_is_leader") == Some(1.0) {
                    leaders.push(index);
                }
            }
            match leaders[..] {
                [leader] => Some(leader),
                _ => None,
            }
        })
        .await
    }

    /// SDK settings for an agent whose first broker is member `home`, the others next (the
    /// SDK fails over along the list).
    pub fn agent_config(&self, agent_id: &str, home: usize) -> AgentConfig {
        let ports = self.mqtt_ports();
        let mut config = agent_config(agent_id, ports[home % ports.len()]);
        config.brokers = (0..ports.len())
            .map(|k| format!("127.0.0.1:{}", ports[(home + k) % ports.len()]))
            .collect();
        config.broker_order = BrokerOrder::InOrder;
        config
    }

    /// An SDK agent connected to member `home` first.
    pub async fn agent(&self, agent_id: &str, home: usize) -> Agent {
        within(
            20,
            &format!("agent {agent_id} connects"),
            Agent::connect(self.agent_config(agent_id, home)),
        )
        .await
        .unwrap_or_else(|e| panic!("agent {agent_id} connects: {e}"))
    }
}

/// A member list `n1=127.0.0.1:P1,...,nN=...` on free loopback peer ports.
pub fn member_list(n: usize) -> String {
    free_ports(n)
        .iter()
        .enumerate()
        .map(|(i, port)| format!("n{}=127.0.0.1:{port}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// One hold of a lock as an agent saw it: granted (the answer arrived) to released (the release
/// was about to be sent). It lies inside the service's own hold, so holds of one lock must
/// never overlap, and their tokens must grow in grant order.
#[derive(Debug, Clone)]
pub struct Hold {
    pub lock: String,
    pub agent: String,
    pub token: u64,
    pub granted: tokio::time::Instant,
    pub released: tokio::time::Instant,
}

/// What a lock workload saw ([`LockWorkload::run`]), shared by its agents; `stop` ends it.
#[derive(Default)]
pub struct LockWorkload {
    /// Every hold whose lease stayed alive, as the agent saw it.
    pub holds: tokio::sync::Mutex<Vec<Hold>>,
    /// Requests that failed and were retried (a member going down answers nothing).
    pub errors: std::sync::atomic::AtomicUsize,
    /// Holds whose lease was lost while held.
    pub lost: std::sync::atomic::AtomicUsize,
    /// Set to end the workload.
    pub stop: std::sync::atomic::AtomicBool,
}

impl LockWorkload {
    /// Worker `i`: `agent` takes lock `lock` on a 5 s session, holds it 2 to 6 ms and releases
    /// it, again and again until `stop`, recording each hold.
    pub async fn run(self: std::sync::Arc<Self>, agent: Agent, lock: String, i: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let session = agent.session(5_000).await.expect("a session");
        while !self.stop.load(Relaxed) {
            let Ok(guard) = session.lock(lock.clone()).await else {
                self.errors.fetch_add(1, Relaxed);
                continue;
            };
            let granted = tokio::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(2 + (i as u64 % 5))).await;
            let released = tokio::time::Instant::now();
            if guard.is_lost() {
                self.lost.fetch_add(1, Relaxed);
            } else {
                self.holds.lock().await.push(Hold {
                    lock: lock.clone(),
                    agent: agent.agent_id().to_string(),
                    token: guard.token(),
                    granted,
                    released,
                });
            }
            if guard.release().await.is_err() {
                self.errors.fetch_add(1, Relaxed);
            }
        }
    }

    /// How many holds so far.
    pub async fn hold_count(&self) -> usize {
        self.holds.lock().await.len()
    }

    /// Stops the workload, waits for its agents' `tasks` to end, and returns the holds once
    /// [`check_history`] found no violation in them.
    pub async fn finish(&self, tasks: &mut tokio::task::JoinSet<()>) -> Vec<Hold> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        super::within(60, "the agents stop", async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        let holds = self.holds.lock().await.clone();
        let violations = check_history(&holds);
        assert!(violations.is_empty(), "history violations: {violations:#?}");
        holds
    }
}

/// The history checker: per lock, no two holds overlap and tokens strictly increase in grant
/// order. Returns every violation, described.
pub fn check_history(holds: &[Hold]) -> Vec<String> {
    let mut by_lock: std::collections::BTreeMap<&str, Vec<&Hold>> = Default::default();
    for hold in holds {
        by_lock.entry(hold.lock.as_str()).or_default().push(hold);
    }
    let mut violations = Vec::new();
    for (lock, mut holds) in by_lock {
        holds.sort_by_key(|hold| hold.granted);
        for pair in holds.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.granted < a.released {
                violations.push(format!(
                    "{lock}: {} (token {}) was granted {:?} before {} (token {}) released",
                    b.agent,
                    b.token,
                    a.released - b.granted,
                    a.agent,
                    a.token
                ));
            }
            if b.token <= a.token {
                violations.push(format!(
                    "{lock}: token {} granted to {} after token {} granted to {}",
                    b.token, b.agent, a.token, a.agent
                ));
            }
        }
    }
    violations
}

/// Test-sized waits around a failover.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(20);
