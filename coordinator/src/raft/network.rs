//! The network between Raft members: for now, none.
//!
//! openraft needs a [`RaftNetworkFactory`] to construct a `Raft` even when the cluster has one
//! member (it never calls it then). [`UnreachableNetwork`] answers every RPC with `Unreachable`,
//! which makes openraft back off and retry, as it would for a peer that is down. The cluster
//! issue replaces it with a real transport.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{RaftNetwork, RaftNetworkFactory};

use super::types::{Node, NodeId, TypeConfig};

/// A network factory whose peers are all unreachable (single-member clusters only).
#[derive(Debug, Clone, Copy, Default)]
pub struct UnreachableNetwork;

/// A connection to a peer that never answers.
#[derive(Debug, Clone, Copy)]
pub struct UnreachablePeer {
    /// The peer openraft wanted to reach.
    target: NodeId,
}

/// Why every RPC fails.
#[derive(Debug, thiserror::Error)]
#[error("node {target} is unreachable: this build has no transport between nodes yet")]
struct NoTransport {
    target: NodeId,
}

impl UnreachablePeer {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<NodeId, Node, E> {
        RPCError::Unreachable(Unreachable::new(&NoTransport {
            target: self.target,
        }))
    }
}

impl RaftNetworkFactory<TypeConfig> for UnreachableNetwork {
    type Network = UnreachablePeer;

    async fn new_client(&mut self, target: NodeId, _node: &Node) -> UnreachablePeer {
        UnreachablePeer { target }
    }
}

impl RaftNetwork<TypeConfig> for UnreachablePeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        Err(self.unreachable())
    }
}
