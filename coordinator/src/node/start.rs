//! [`Node`]: starting a node (data directory, Raft, peer port, components) and stopping it.
//!
//! ```text
//!  Node::start: validate ─▶ bind the peer port ─▶ open Raft (redb) ─▶ Waits, Proposer
//!     ─▶ Supervisor (LeaseKeeper) ─▶ FanOut installed as Raft's applied sink (entries applied
//!        meanwhile are handed over first) ─▶ waits timer ─▶ peer server
//!     ─▶ a single node waits to lead and configures its limits; a member configures them each
//!        time it takes office
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use super::fan_out::FanOut;
use super::forward::Forwarder;
use super::lease_keeper::KeeperMsg;
use super::proposer::Proposer;
use super::rate::AgentRates;
use super::supervisor::{Supervisor, SupervisorArgs, SupervisorMsg};
use super::waits::Waits;
use super::watches::Watches;
use super::{ClusterConfig, ClusterState, NodeConfig, NodeError, NodeHandle, Outbound};
use crate::raft::transport::{self, NetworkFaults, PeerAcceptor, PeerTlsFiles};
use crate::raft::{self, NodeId, RaftError, RaftHandle, TcpNetwork};
use crate::state_machine::{KvLimits, Limits};

/// The name every Hivekeeper peer says in its hello; a node refuses another cluster's.
const CLUSTER_NAME: &str = "hivekeeper";

/// A running node.
pub struct Node {
    handle: NodeHandle,
    /// The proposer and the waits timer, ended at shutdown after the supervisor (the proposer
    /// holds Raft).
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Answers peers (a cluster member only).
    peer_server: Option<tokio::task::JoinHandle<()>>,
    /// Links cut on purpose (tests).
    faults: NetworkFaults,
    supervisor: ActorRef<SupervisorMsg>,
    supervisor_done: tokio::task::JoinHandle<()>,
    failure: watch::Receiver<Option<String>>,
}

impl Node {
    /// Opens the data directory, starts Raft and the node's components, and makes sure the
    /// configured limits are the replicated ones. Returns the node and the stream of notices
    /// (and final answers of requests not pending here) for the front door.
    ///
    /// A single node makes itself a one-member cluster and waits until it leads. A cluster
    /// member listens for its peers, bootstraps the initial membership on a fresh data dir
    /// (`initial_cluster_state = new`) and returns without waiting for a leader: its peers
    /// may not be up yet, and until there is a leader it answers `unavailable`.
    pub async fn start(
        config: NodeConfig,
    ) -> Result<(Node, mpsc::UnboundedReceiver<Outbound>), NodeError> {
        config.validate()?;
        let node_id = config
            .cluster
            .as_ref()
            .map_or(config.node_id, ClusterConfig::node_id);
        let faults = NetworkFaults::default();
        let (peer_tls, network) = peer_network(&config, node_id, &faults)?;
        let peer_listener = bind_peer_port(&config).await?;
        let raft = open_raft(&config, node_id, &network).await?;
        let forwarder = forwarder(&config, &raft, &network);
        let propose_timeout = Duration::from_millis(config.propose_timeout_ms);
        let waits = Arc::new(Waits::new(propose_timeout));
        let (proposer, proposer_task, proposer_ended) = Proposer::start(
            raft.clone(),
            waits.clone(),
            forwarder.clone(),
            config.batch_max,
            Duration::from_micros(config.batch_hold_us),
        );
        let (failure_tx, failure) = watch::channel(None);
        tokio::spawn(report_raft_stop(raft.leadership(), failure_tx.clone()));
        let (supervisor, supervisor_done, keeper) = start_supervisor(
            node_id,
            SupervisorArgs {
                raft: raft.clone(),
                proposer: proposer.clone(),
                proposer_ended,
                keeper_tick_ms: config.keeper_tick_ms,
                failure: failure_tx,
                waits: waits.clone(),
            },
        )
        .await?;
        let (outbound, outbound_rx) = mpsc::unbounded_channel();
        let watches = Arc::new(Watches::default());
        raft.deliver_applied_to(Arc::new(FanOut::new(
            waits.clone(),
            keeper.clone(),
            outbound,
            watches.clone(),
            &raft,
        )));
        let handle = NodeHandle {
            raft: raft.clone(),
            proposer,
            keeper,
            waits: waits.clone(),
            ingress: Arc::new(Semaphore::new(config.ingress_max)),
            ingress_max: config.ingress_max,
            keepalive_ingress: Arc::new(Semaphore::new(config.keepalive_ingress_max)),
            keepalive_ingress_max: config.keepalive_ingress_max,
            rates: Arc::new(AgentRates::new(
                config.rate_per_s_max,
                config.rate_burst_max,
            )),
            propose_timeout,
            forwarder,
            auth_enabled: config.auth_enabled,
            membership: Arc::default(),
            snapshots: Arc::default(),
            watches,
        };
        let timer = tokio::spawn(waits.run_timer());
        let peer_acceptor = match &peer_tls {
            Some(files) => Some(
                PeerAcceptor::new(files, raft.clone())
                    .map_err(|error| start_error(format!("peer TLS: {error}")))?,
            ),
            None => None,
        };
        let peer_server = peer_listener.map(|listener| {
            let peer = transport::PeerServer {
                me: node_id,
                cluster: CLUSTER_NAME.to_string(),
                frame_max_bytes: transport::frame_max_bytes(&config.raft),
                raft: raft.clone(),
                election: network.election_clock(),
                handler: handle.clone(),
                faults: faults.clone(),
            };
            tokio::spawn(transport::serve(listener, peer, peer_acceptor))
        });
        make_configured_limits_replicated(&config, &handle).await?;
        let node = Node {
            handle,
            tasks: vec![proposer_task, timer],
            peer_server,
            faults,
            supervisor,
            supervisor_done,
            failure,
        };
        Ok((node, outbound_rx))
    }

    /// The node's deliberate network faults: cut it off from peers to test a partition.
    pub fn faults(&self) -> &NetworkFaults {
        &self.faults
    }

    /// The panic that stopped this node's state machine, if an apply panicked: the node has
    /// failed then ([`Node::failed`] says so too), and `hivekeeper serve` exits with
    /// [`crate::raft::EXIT_APPLY_PANICKED`].
    pub fn apply_panic(&self) -> Option<crate::raft::ApplyPanic> {
        self.handle.raft.apply_panic()
    }

    /// Fault injection: this member stamps entries with its wall clock moved by `offset_ms`
    /// (a clock that runs ahead, or jumps back when set to less). For tests and fault-injection
    /// harnesses ([`crate::raft::RaftHandle::set_clock_offset_ms`]).
    pub fn set_clock_offset_ms(&self, offset_ms: i64) {
        self.handle.raft.set_clock_offset_ms(offset_ms);
    }

    /// A handle for a front door.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// Resolves with the reason when one of the node's components fails.
    pub async fn failed(&self) -> String {
        let mut failure = self.failure.clone();
        loop {
            if let Some(reason) = failure.borrow_and_update().clone() {
                return reason;
            }
            if failure.changed().await.is_err() {
                return "the node's supervisor ended".into();
            }
        }
    }

    /// Stops the components and Raft, and closes the data file.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        if let Some(server) = self.peer_server {
            // Its connection tasks end with it: no peer is answered by a stopping node.
            server.abort();
            let _ = server.await;
        }
        self.supervisor.stop(None);
        let _ = self.supervisor_done.await;
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
        // Raft stops even while a front door's task or a forwarder still holds a handle: their
        // next call is answered "stopped", and the data file is closed for a restart.
        self.handle.raft.shutdown().await.map_err(NodeError::from)
    }
}

/// A [`NodeError::Start`] with `reason`.
fn start_error(reason: String) -> NodeError {
    NodeError::Start { reason }
}

/// A Raft error while starting, as a [`NodeError::Start`] naming it.
fn raft_failed(error: RaftError) -> NodeError {
    start_error(error.to_string())
}

/// The peer TLS files (a cluster member with TLS only) and the network Raft calls its peers
/// on. The files are read here, before anything is bound or opened, so a bad file fails the
/// start first.
fn peer_network(
    config: &NodeConfig,
    node_id: NodeId,
    faults: &NetworkFaults,
) -> Result<(Option<PeerTlsFiles>, TcpNetwork), NodeError> {
    let peer_tls = match &config.cluster {
        Some(cluster) => cluster.peer_tls()?,
        None => None,
    };
    let network = match &peer_tls {
        None => TcpNetwork::new(node_id, CLUSTER_NAME, faults.clone(), &config.raft),
        Some(files) => {
            TcpNetwork::with_peer_tls(node_id, CLUSTER_NAME, faults.clone(), &config.raft, files)
                .map_err(|error| start_error(format!("peer TLS: {error}")))?
        }
    };
    Ok((peer_tls, network))
}

/// Binds a cluster member's peer port (`None` for a single node). Bound before the data file
/// opens, so a taken port fails fast and names the port.
async fn bind_peer_port(config: &NodeConfig) -> Result<Option<TcpListener>, NodeError> {
    let Some(cluster) = &config.cluster else {
        return Ok(None);
    };
    let addr = cluster.listen_addr()?;
    let listener = TcpListener::bind(addr).await.map_err(|error| {
        start_error(format!(
            "cannot listen for peers on {addr}: {error} (is another node using it? \
             give `hivekeeper serve` another --peer-listen, or fix this member's \
             address in --initial-cluster)"
        ))
    })?;
    Ok(Some(listener))
}

/// Opens Raft on the data directory and, on an empty log, bootstraps its first membership:
/// this node alone, or the initial cluster of a member started with
/// `initial_cluster_state = new`. A restart finds the log initialized and changes nothing.
async fn open_raft(
    config: &NodeConfig,
    node_id: NodeId,
    network: &TcpNetwork,
) -> Result<Arc<RaftHandle>, NodeError> {
    let raft = raft::open_with_network(&config.data_dir, node_id, &config.raft, network.clone())
        .await
        .map_err(raft_failed)?;
    let raft = Arc::new(raft);
    match &config.cluster {
        None => raft.initialize_single_node().await.map_err(raft_failed)?,
        Some(cluster) if cluster.initial_cluster_state == ClusterState::New => {
            let members = cluster.members()?;
            raft.initialize_cluster(members)
                .await
                .map_err(raft_failed)?;
        }
        Some(_) => {}
    }
    Ok(raft)
}

/// A cluster member's forwarder, which sends a follower's requests to the leader; `None` for a
/// single node.
fn forwarder(
    config: &NodeConfig,
    raft: &Arc<RaftHandle>,
    network: &TcpNetwork,
) -> Option<Forwarder> {
    config.cluster.as_ref().map(|_| {
        Forwarder::new(
            raft.clone(),
            network.forwarding_pool(),
            Duration::from_millis(config.propose_timeout_ms),
            // Two of the longest elections: long enough for a failover, short enough that a
            // cut-off node answers `unavailable` promptly.
            Duration::from_millis(2 * config.raft.election_timeout_ms_max),
        )
    })
}

/// Spawns the node's supervisor and asks it for the lease keeper it started, which the fan-out
/// and the handle send to. Returns the supervisor, the task that ends with it, and the keeper.
async fn start_supervisor(
    node_id: NodeId,
    args: SupervisorArgs,
) -> Result<
    (
        ActorRef<SupervisorMsg>,
        tokio::task::JoinHandle<()>,
        ActorRef<KeeperMsg>,
    ),
    NodeError,
> {
    let (supervisor, supervisor_done) =
        Actor::spawn(Some(format!("node@{node_id}")), Supervisor, args)
            .await
            .map_err(|error| start_error(format!("starting the node's actors: {error}")))?;
    let keeper = supervisor
        .call(SupervisorMsg::Keeper, Some(Duration::from_secs(5)))
        .await
        .ok()
        .and_then(|result| match result {
            ractor::rpc::CallResult::Success(keeper) => Some(keeper),
            _ => None,
        })
        .ok_or_else(|| start_error("the node's actors did not start".into()))?;
    Ok((supervisor, supervisor_done, keeper))
}

/// Makes the configured limits the replicated ones. A single node waits until it leads and
/// configures them (and its cluster version, and the first admin account) before the start
/// returns; a cluster member configures them each time it takes office, in a task of its own,
/// and raises the cluster version in another (`cluster_version.rs`).
async fn make_configured_limits_replicated(
    config: &NodeConfig,
    handle: &NodeHandle,
) -> Result<(), NodeError> {
    if config.cluster.is_none() {
        handle
            .raft
            .wait_for_leader(Duration::from_secs(10))
            .await
            .map_err(raft_failed)?;
        handle.configure(&config.limits, &config.kv).await?;
        handle.raise_cluster_version().await?;
        handle.bootstrap_admin(&config.data_dir).await?;
    } else {
        tokio::spawn(super::cluster_version::raise_when_every_member_can(
            handle.clone(),
        ));
        tokio::spawn(configure_when_leading(
            handle.clone(),
            config.limits.clone(),
            config.kv.clone(),
            config.data_dir.clone(),
        ));
    }
    Ok(())
}

/// In a cluster: each time this node takes office, makes its configured limits and key-space
/// bounds the replicated ones (the members should all be configured alike; the latest
/// leader's win). A failure is logged and retried at the next term: limits are not worth
/// stopping a node for. With authentication on, it then creates the first `admin` account if
/// there is none.
async fn configure_when_leading(
    handle: NodeHandle,
    limits: Limits,
    kv: KvLimits,
    data_dir: PathBuf,
) {
    let mut leadership = handle.raft.leadership();
    let mut configured_term = None;
    loop {
        let (ready, term) = {
            let now = leadership.borrow_and_update();
            (now.ready, now.term)
        };
        if ready && configured_term != Some(term) {
            configured_term = Some(term);
            if let Err(error) = handle.configure(&limits, &kv).await {
                tracing::warn!(%error, term, "could not make the configured limits the replicated ones");
            }
            if let Err(error) = handle.bootstrap_admin(&data_dir).await {
                tracing::warn!(%error, term, "could not create the first admin account");
            }
        }
        if leadership.changed().await.is_err() {
            return;
        }
    }
}

/// Reports Raft stopping on its own as the node's failure. openraft ends its core on a storage
/// error (a full disk, a failed fsync: the writer accepts nothing after one); a process that
/// stayed up would answer nothing and log an error for every request. `serve` exits non-zero
/// with the reason instead, so a supervisor or an operator sees it, and in a cluster the agents
/// fail over to the other members. Raft stopping because we shut it down is not a failure.
async fn report_raft_stop(
    mut leadership: watch::Receiver<raft::Leadership>,
    failure: watch::Sender<Option<String>>,
) {
    if let Ok(stopped) = leadership.wait_for(|now| now.stopped.is_some()).await
        && let Some(reason) = stopped.stopped.clone()
    {
        failure.send_if_modified(|current| {
            current.is_none() && {
                *current = Some(reason);
                true
            }
        });
    }
}
