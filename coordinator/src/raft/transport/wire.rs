//! The frames nodes exchange, and their codec.
//!
//! A frame is a big-endian u32 length and that many bytes of MessagePack (`rmp-serde`, maps
//! with field names). MessagePack because it is compact and self-describing: a forwarded
//! [`Request`] is an internally tagged enum, which non-self-describing codecs (postcard,
//! bincode) cannot decode. Field names keep frames readable in a capture and tolerant of added
//! optional fields.
//!
//! A connection opens with one [`Hello`] from the dialler and one [`HelloReply`]; then the
//! dialler sends [`Envelope`]s of [`PeerRequest`] and the server answers each with an
//! [`Envelope`] of [`PeerResponse`] carrying the same id, in any order.

use hivekeeper_protocol::Request;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio_util::codec::LengthDelimitedCodec;

use super::TransportError;
use crate::raft::{NodeId, TypeConfig};
use crate::state_machine::{Command, Reply};

/// Largest frame accepted. A snapshot travels in chunks of at most
/// [`crate::raft::RaftConfig`]'s chunk size (1 MiB), an append in at most
/// `replication_entries_max` entries of at most `BATCH_MAX` commands of at most 8 KiB: well
/// under this. A larger length prefix is a broken or hostile peer: the connection is dropped.
pub const FRAME_MAX_BYTES: usize = 64 << 20;

/// The codec for both directions.
pub(super) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(FRAME_MAX_BYTES)
        .new_codec()
}

/// The first frame on a connection: who dials whom, in which cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Hello {
    /// The cluster's name; a node refuses a peer of another cluster.
    pub cluster: String,
    /// The dialling node.
    pub from: NodeId,
    /// The node the dialler believes it reached; a node refuses a hello meant for another (a
    /// stale or wrong address in the membership).
    pub to: NodeId,
}

/// The server's answer to a [`Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum HelloReply {
    /// Go ahead.
    Welcome,
    /// Refused, with the reason.
    Refused(String),
}

/// A request or answer with the id that pairs them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Envelope<T> {
    /// Chosen by the dialler, unique per connection.
    pub id: u64,
    /// The request or answer.
    pub body: T,
}

/// What one node asks another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum PeerRequest {
    /// openraft: replicate entries (or heartbeat).
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// openraft: a candidate asks for a vote.
    Vote(VoteRequest<NodeId>),
    /// openraft: one chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A follower forwards a batch of commands for the leader to propose as one entry, in
    /// order; answered [`PeerResponse::Replies`] with one reply per command.
    Propose(Vec<Command>),
    /// A follower forwards a request that is not a write (a keepalive, a read, an admin
    /// query) for the leader to answer; answered [`PeerResponse::Replies`] with one reply.
    Submit {
        /// The agent that sent it.
        agent: String,
        /// The request.
        request: Request,
    },
}

/// What a node answers.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum PeerResponse {
    /// To [`PeerRequest::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To [`PeerRequest::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To [`PeerRequest::InstallSnapshot`].
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    /// To a forwarded request: the replies, or why the node could not answer (then every
    /// command of it is answered `unavailable` and the agent retries with the same id).
    Replies(Result<Vec<Reply>, String>),
}

impl PeerResponse {
    /// The variant's name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerResponse::AppendEntries(_) => "append-entries",
            PeerResponse::Vote(_) => "vote",
            PeerResponse::InstallSnapshot(_) => "install-snapshot",
            PeerResponse::Replies(_) => "replies",
        }
    }
}

/// Serializes a frame's body.
pub(super) fn encode<T: Serialize>(value: &T) -> Result<bytes::Bytes, TransportError> {
    rmp_serde::to_vec_named(value)
        .map(bytes::Bytes::from)
        .map_err(|error| TransportError::Codec(error.to_string()))
}

/// Deserializes a frame's body.
pub(super) fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, TransportError> {
    rmp_serde::from_slice(frame).map_err(|error| TransportError::Codec(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hivekeeper_protocol::Op;

    #[test]
    fn a_forwarded_request_survives_the_codec() {
        let request = Request {
            id: "r-1".into(),
            op: Op::LockAcquire {
                name: "pad/7".into(),
                lease: "0000000000000004".into(),
                wait_ms: Some(1_500),
            },
        };
        let frame = encode(&Envelope {
            id: 9,
            body: PeerRequest::Submit {
                agent: "drone-1".into(),
                request: request.clone(),
            },
        })
        .expect("encodes");
        let back: Envelope<PeerRequest> = decode(&frame).expect("decodes");
        assert_eq!(back.id, 9);
        match back.body {
            PeerRequest::Submit {
                agent,
                request: got,
            } => {
                assert_eq!(agent, "drone-1");
                assert_eq!(got, request);
            }
            other => panic!("decoded as {other:?}"),
        }
    }

    /// A forwarded write is the state machine's own request type (a flattened, internally
    /// tagged enum): it must survive MessagePack too, optional fields present and absent.
    #[test]
    fn a_forwarded_command_survives_the_codec() {
        use crate::state_machine::{AgentOp, AgentRequest};
        let reserve = |wait_ms, alt_max_m| Command::Request {
            agent: "drone-1".into(),
            request: AgentRequest {
                id: "r-2".into(),
                op: AgentOp::WaypointReserve {
                    name: "pad/7".into(),
                    lease: "0000000000000004".into(),
                    lat: Some(51.500_044_966),
                    lon: Some(-0.1),
                    alt_min_m: None,
                    alt_max_m,
                    radius_m: Some(4.25),
                    wait_ms,
                },
            },
        };
        let commands = vec![reserve(None, Some(120.5)), reserve(Some(0), None)];
        let frame = encode(&PeerRequest::Propose(commands.clone())).expect("encodes");
        match decode::<PeerRequest>(&frame).expect("decodes") {
            PeerRequest::Propose(got) => assert_eq!(got, commands),
            other => panic!("decoded as {other:?}"),
        }
    }

    #[test]
    fn garbage_is_a_codec_error_not_a_panic() {
        let result: Result<Envelope<PeerRequest>, _> = decode(b"\xc1\xff not msgpack");
        assert!(matches!(result, Err(TransportError::Codec(_))));
    }
}
