//! openraft's network on Hivekeeper's inter-node transport ([`crate::transport`]).
//!
//! Raft's RPCs to a peer share one multiplexed connection ([`PeerPool`]), because openraft
//! asks for a fresh client for every read-index round (`ensure_linearizable`, once per
//! keepalive batch): a connection per client would dial the peers for every round. Forwarded
//! requests use a pool of their own ([`TcpNetwork::forwarding_pool`]), so they never queue
//! behind a snapshot chunk or delay a heartbeat. Transport failures map onto openraft's error
//! kinds: a peer that cannot be dialled is `Unreachable` (openraft backs off), anything else on
//! the way is a `NetworkError` (it retries), and the peer's own refusal is a `RemoteError`.
//!
//! Snapshots still go in chunks (openraft-legacy's v1 `install_snapshot`, behind its
//! `Adapter`), so no frame is larger than a chunk whatever the machine's size; every other RPC,
//! Pre-Vote included, is openraft 0.10's `RaftNetworkV2`.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::decompose::DecomposeResult;
use openraft::error::{
    NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RaftNetworkFactory, RaftNetworkV2};
use openraft_legacy::network_v1::{
    Adapter, InstallSnapshotError, InstallSnapshotRequest, InstallSnapshotResponse, RaftNetwork,
};

use super::RaftConfig;
use super::contact::PeerContact;
use super::election::{ElectionClock, ElectionTiming};
use super::types::{Node, NodeId, Snapshot, SnapshotData, TypeConfig, Vote};
use crate::raft::transport::PeerVersions;
use crate::raft::transport::client::Dialler;
use crate::raft::transport::tls::PeerConnector;
use crate::raft::transport::{
    NetworkFaults, PeerClient, PeerPool, PeerRequest, PeerResponse, PeerTlsFiles, TransportError,
};

/// The network factory: dials peers at the address their membership entry records.
#[derive(Clone)]
pub struct TcpNetwork {
    dialler: Dialler,
    /// The connections Raft's RPCs use, one per peer.
    raft_pool: PeerPool,
    /// How soon openraft tries an unreachable peer again.
    retry_unreachable: Duration,
    /// The election timer's view of votes refused (see `election.rs`).
    election: Arc<ElectionClock>,
    /// When each peer last answered (see `contact.rs`).
    contact: Arc<PeerContact>,
}

impl TcpNetwork {
    /// The network of node `me` in cluster `cluster`, with `faults` (none in production).
    /// openraft tries an unreachable peer again every heartbeat interval of `config`.
    ///
    /// Why not openraft's default of 500 ms: a member restarted after a crash still holds the
    /// committed vote of its old term; if the leader's next message takes longer than the
    /// restarted member's election timeout, the member campaigns with a higher term and a
    /// shorter log, loses, and still deposes the live leader (its higher term makes the
    /// leader step down): a leaderless gap of about 350 ms with no failure at all, seen twice
    /// in six restarts under load. Retrying at the heartbeat interval reaches it in time.
    pub fn new(
        me: NodeId,
        cluster: impl Into<String>,
        faults: NetworkFaults,
        config: &RaftConfig,
    ) -> TcpNetwork {
        TcpNetwork::build(me, cluster.into(), faults, config, None)
    }

    /// [`TcpNetwork::new`] dialling every peer over mutual TLS with `tls`'s certificate; the
    /// files are read now (errors name the file).
    pub fn with_peer_tls(
        me: NodeId,
        cluster: impl Into<String>,
        faults: NetworkFaults,
        config: &RaftConfig,
        tls: &PeerTlsFiles,
    ) -> Result<TcpNetwork, hivekeeper_tls::TlsError> {
        let connector = PeerConnector::new(tls)?;
        Ok(TcpNetwork::build(
            me,
            cluster.into(),
            faults,
            config,
            Some(connector),
        ))
    }

    fn build(
        me: NodeId,
        cluster: String,
        faults: NetworkFaults,
        config: &RaftConfig,
        tls: Option<PeerConnector>,
    ) -> TcpNetwork {
        let retry_unreachable = Duration::from_millis(config.heartbeat_interval_ms);
        let dialler = Dialler {
            me,
            cluster,
            faults,
            tls,
            frame_max_bytes: crate::raft::transport::frame_max_bytes(config),
            versions: PeerVersions::default(),
        };
        TcpNetwork {
            raft_pool: PeerPool::new(dialler.clone()),
            dialler,
            retry_unreachable,
            election: ElectionClock::new(ElectionTiming::of(config)),
            contact: Arc::default(),
        }
    }

    /// The election timer's clock: the peer server tells it when a leader was heard, the
    /// election driver reads it.
    pub fn election_clock(&self) -> Arc<ElectionClock> {
        self.election.clone()
    }

    /// When each peer last answered one of this node's Raft calls.
    pub(crate) fn contact(&self) -> Arc<PeerContact> {
        self.contact.clone()
    }

    /// Who this node is when it dials: for the one-off check of a member being added.
    pub(crate) fn dialler(&self) -> Dialler {
        self.dialler.clone()
    }

    /// A separate pool of clients for forwarded requests (never sharing a connection with
    /// Raft's RPCs).
    pub fn forwarding_pool(&self) -> PeerPool {
        PeerPool::new(self.dialler.clone())
    }
}

/// One openraft client: a connection to one peer, speaking openraft's `RaftNetworkV2`.
pub struct TcpPeer {
    /// The RPCs, behind openraft-legacy's adapter, which sends a snapshot in chunks.
    adapter: Adapter<TypeConfig, PeerRpc, SnapshotData>,
}

/// The RPCs to one peer in openraft's v1 shape (chunked snapshots), wrapped by [`TcpPeer`].
pub struct PeerRpc {
    client: PeerClient,
    retry_unreachable: Duration,
    election: Arc<ElectionClock>,
    /// Told of every answer.
    contact: Arc<PeerContact>,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpPeer;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> TcpPeer {
        let rpc = PeerRpc {
            client: self.raft_pool.client(target, &node.name, &node.addr),
            retry_unreachable: self.retry_unreachable,
            election: self.election.clone(),
            contact: self.contact.clone(),
        };
        TcpPeer {
            adapter: Adapter::new(rpc),
        }
    }
}

impl RaftNetworkV2<TypeConfig> for TcpPeer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.adapter.append_entries(rpc, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.adapter.vote(rpc, option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.adapter
            .inner()
            .ask_vote(rpc, true, option)
            .await
            .decompose_infallible()
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.adapter
            .full_snapshot(vote, snapshot, cancel, option)
            .await
    }

    fn backoff(&self) -> Option<Backoff> {
        RaftNetworkV2::backoff(&self.adapter)
    }
}

impl PeerRpc {
    /// One RPC: the peer's answer, or the transport's failure as openraft's error kind.
    async fn call<E: std::error::Error>(
        &self,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, RPCError<TypeConfig, E>> {
        let answer = self.client.call(request, timeout).await;
        if answer.is_ok() {
            self.contact.answered(self.client.peer());
        }
        answer.map_err(|error| match error {
            TransportError::Unreachable { .. }
            | TransportError::Refused { .. }
            | TransportError::CutOff { .. } => RPCError::Unreachable(Unreachable::new(&error)),
            _ => RPCError::Network(NetworkError::new(&error)),
        })
    }

    fn unexpected<E: std::error::Error>(
        &self,
        expected: &'static str,
        got: &PeerResponse,
    ) -> RPCError<TypeConfig, E> {
        RPCError::Network(NetworkError::new(&TransportError::Unexpected {
            peer: self.client.name().to_string(),
            expected,
            got: got.kind(),
        }))
    }

    /// A vote or a Pre-Vote (`election.rs`: would the peer grant a vote at the next
    /// term? It changes nothing on the peer). A refusal by a longer log delays this node's
    /// next try (`election.rs`).
    async fn ask_vote(
        &self,
        rpc: VoteRequest<TypeConfig>,
        pre_vote: bool,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig, RaftError<TypeConfig>>> {
        let ours = rpc.last_log_id;
        let request = if pre_vote {
            PeerRequest::PreVote(rpc)
        } else {
            PeerRequest::Vote(rpc)
        };
        match self.call(request, option.hard_ttl()).await? {
            PeerResponse::Vote(result) => {
                if let Ok(answer) = &result
                    && !answer.vote_granted
                {
                    self.election
                        .refused_by_longer_log(ours, answer.last_log_id);
                }
                result.map_err(|error| {
                    RPCError::RemoteError(RemoteError::new(self.client.peer(), error))
                })
            }
            other => Err(self.unexpected("vote", &other)),
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerRpc {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig, RaftError<TypeConfig>>>
    {
        match self
            .call(PeerRequest::AppendEntries(rpc), option.hard_ttl())
            .await?
        {
            PeerResponse::AppendEntries(result) => result.map_err(|error| {
                RPCError::RemoteError(RemoteError::new(self.client.peer(), error))
            }),
            other => Err(self.unexpected("append-entries", &other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<TypeConfig>,
        RPCError<TypeConfig, RaftError<TypeConfig, InstallSnapshotError>>,
    > {
        match self
            .call(PeerRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await?
        {
            PeerResponse::InstallSnapshot(result) => result.map_err(|error| {
                RPCError::RemoteError(RemoteError::new(self.client.peer(), error))
            }),
            other => Err(self.unexpected("install-snapshot", &other)),
        }
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.retry_unreachable))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig, RaftError<TypeConfig>>> {
        self.ask_vote(rpc, false, option).await
    }
}
