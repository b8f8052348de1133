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
//!
//! What a follower may ask of the leader is in the types, not in a check: agents' writes as
//! [`AgentWrite`]s (the state machine's request, which the leader wraps into
//! `Command::Request` itself) and agents' other requests as [`PeerRequest::Submit`]. No
//! state-machine `Command` can be written in a [`PeerRequest`], so the node's own commands
//! (lease and wait expiry, limits) never cross the peer port: a frame shaped like one does not
//! decode, and the connection is dropped.
//!
//! Bounds (docs/CLUSTER.md, "The peer port"): the hello frames at most
//! [`HELLO_FRAME_MAX_BYTES`], so a stranger cannot make a node buffer more than that before it
//! is refused; every later frame at most [`frame_max_bytes`] of the Raft settings; at most
//! [`IN_FLIGHT_MAX`] requests in flight per connection.

use bytes::BytesMut;
use hivekeeper_protocol::Request;
use hivekeeper_protocol::validate::{AGENT_ID_BYTES_MAX, REQUEST_BYTES_MAX};
use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft_legacy::network_v1::{
    InstallSnapshotError, InstallSnapshotRequest, InstallSnapshotResponse,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use super::TransportError;
use super::version::VersionRange;
use crate::answer::Answer;
use crate::raft::config::SNAPSHOT_CHUNK_BYTES;
use crate::raft::{BATCH_MAX, NodeId, RaftConfig, TypeConfig};
use crate::state_machine::{AgentRequest, Command};

/// Largest hello or hello reply: a cluster name, two node ids and a refusal's reason. The
/// codec starts at this bound and is raised to [`frame_max_bytes`] only after a welcome, so a
/// stranger's first length prefix cannot make the node reserve more.
pub const HELLO_FRAME_MAX_BYTES: usize = 4 << 10;

/// Most requests one connection has in flight: the dialler sends no more until answers come
/// back, and the server reads no further frame past it (backpressure: the dialler's writes
/// block). 256 lets a follower forward a burst of keepalives on one connection; each request
/// costs the server a task and a queued answer at most, so one connection's memory is bounded
/// by this times [`frame_max_bytes`] in the worst case, and in practice by small replies.
pub const IN_FLIGHT_MAX: usize = 256;

/// Bytes one state-machine command may take in a frame: a request of at most
/// `REQUEST_BYTES_MAX` as JSON (MessagePack is no larger but for its floats: 9 bytes each
/// where JSON may spend 1), its agent id, and the enum's and fields' names.
const COMMAND_BYTES_MAX: usize = REQUEST_BYTES_MAX + AGENT_ID_BYTES_MAX + 512;

/// Room for an envelope, an entry's log id, vote and membership around the payload.
const FRAME_OVERHEAD_BYTES: usize = 64 << 10;

/// Largest frame after the hello, in either direction, for these Raft settings: the larger of
/// a snapshot chunk and a full append (`replication_entries_max` entries of [`BATCH_MAX`]
/// commands, each at most `COMMAND_BYTES_MAX`), plus room for the envelope. A forwarded batch
/// of writes (at most `BATCH_MAX` commands) and every answer are smaller. A larger length
/// prefix is a broken or hostile peer: the connection is dropped. With the defaults (300
/// entries) about 321 MiB: the worst case of a full append, which needs 38,400 agent requests
/// of 8 KiB in flight; lower `replication_entries_max` to lower it.
pub fn frame_max_bytes(config: &RaftConfig) -> usize {
    let entries = usize::try_from(config.replication_entries_max).unwrap_or(usize::MAX);
    let append = entries
        .saturating_mul(BATCH_MAX)
        .saturating_mul(COMMAND_BYTES_MAX);
    let chunk = usize::try_from(SNAPSHOT_CHUNK_BYTES).unwrap_or(usize::MAX);
    append.max(chunk).saturating_add(FRAME_OVERHEAD_BYTES)
}

/// The frames' codec: a big-endian u32 length and the body, with a bound on the length.
///
/// tokio-util's `LengthDelimitedCodec` reserves a frame's whole length as soon as it has read
/// the prefix, so a peer could make a node allocate the bound with four bytes. This wrapper
/// hands a frame to it only once the whole frame has arrived (the prefix is checked against
/// the bound first), so the memory a connection holds grows with the bytes it really sent.
#[derive(Debug)]
pub(crate) struct PeerCodec {
    /// The length-prefixed framing itself.
    inner: LengthDelimitedCodec,
    /// The bound in force: [`HELLO_FRAME_MAX_BYTES`], then the connection's.
    frame_max_bytes: usize,
}

/// Bytes of a frame's length prefix.
const PREFIX_BYTES: usize = 4;

/// The codec of a new connection: frames up to [`HELLO_FRAME_MAX_BYTES`] until the hello is
/// done, then [`raise_bound`] to the connection's bound.
pub(super) fn codec() -> PeerCodec {
    PeerCodec {
        inner: LengthDelimitedCodec::builder()
            .length_field_length(PREFIX_BYTES)
            .max_frame_length(HELLO_FRAME_MAX_BYTES)
            .new_codec(),
        frame_max_bytes: HELLO_FRAME_MAX_BYTES,
    }
}

/// After a welcome: frames up to `frame_max_bytes` (see [`frame_max_bytes`]).
pub(super) fn raise_bound(codec: &mut PeerCodec, frame_max_bytes: usize) {
    codec.inner.set_max_frame_length(frame_max_bytes);
    codec.frame_max_bytes = frame_max_bytes;
}

impl Decoder for PeerCodec {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        if let Some(prefix) = src.get(..PREFIX_BYTES) {
            let prefix: [u8; PREFIX_BYTES] = prefix.try_into().expect("sliced to the prefix");
            let length = usize::try_from(u32::from_be_bytes(prefix)).unwrap_or(usize::MAX);
            if length > self.frame_max_bytes {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "a frame of {length} bytes is over the bound of {} bytes",
                        self.frame_max_bytes
                    ),
                ));
            }
            if src.len() < PREFIX_BYTES + length {
                return Ok(None);
            }
        }
        self.inner.decode(src)
    }
}

impl Encoder<bytes::Bytes> for PeerCodec {
    type Error = std::io::Error;

    fn encode(&mut self, frame: bytes::Bytes, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        self.inner.encode(frame, dst)
    }
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
    /// The peer protocol versions the dialler speaks (`version.rs`). Absent from the hellos
    /// of builds before versions, which speak version 1 only; an older server, which knows no
    /// such field, ignores it and answers [`HelloReply::Welcome`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<VersionRange>,
}

/// The server's answer to a [`Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum HelloReply {
    /// Go ahead, at version 1: the answer to a hello without versions (the only answer a
    /// build before versions knows), and what such a build answers every hello.
    Welcome,
    /// Refused, with the reason.
    Refused(String),
    /// Go ahead, at this version (the highest both speak): the answer to a hello with
    /// versions.
    Agreed {
        /// The version the connection speaks.
        version: u32,
    },
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
    Vote(VoteRequest<TypeConfig>),
    /// openraft: a follower whose election timer fired asks whether it would be granted a
    /// vote at the next term (Pre-Vote); answered [`PeerResponse::Vote`]. Nothing changes on
    /// the node asked.
    PreVote(VoteRequest<TypeConfig>),
    /// openraft: one chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A follower forwards a batch of agents' writes for the leader to propose as one entry,
    /// in order (at most `BATCH_MAX`); answered [`PeerResponse::Replies`] with one reply per
    /// write. Only agents' writes can be written here: the node's own commands have no
    /// encoding on this port (the module's doc).
    Writes(Vec<AgentWrite>),
    /// A follower forwards a request that is not a write (a keepalive, a read, an admin
    /// query) for the leader to answer; answered [`PeerResponse::Replies`] with one reply.
    Submit {
        /// The agent that sent it.
        agent: String,
        /// The request.
        request: Request,
    },
}

/// One agent's write, as a follower forwards it: the agent (from its request topic or
/// connection) and the state machine's request. The leader makes the log's command of it
/// ([`AgentWrite::into_command`]); nothing else becomes a command on the leader's behalf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentWrite {
    /// The agent that sent it.
    pub agent: String,
    /// The request.
    pub request: AgentRequest,
}

impl AgentWrite {
    /// The log's command for this write.
    pub fn into_command(self) -> Command {
        Command::Request {
            agent: self.agent,
            request: self.request,
        }
    }
}

/// What a node answers.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum PeerResponse {
    /// To [`PeerRequest::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>),
    /// To [`PeerRequest::Vote`] and [`PeerRequest::PreVote`].
    Vote(Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>),
    /// To [`PeerRequest::InstallSnapshot`].
    InstallSnapshot(
        Result<InstallSnapshotResponse<TypeConfig>, RaftError<TypeConfig, InstallSnapshotError>>,
    ),
    /// To a forwarded request: the answers (the machine's replies to writes; to a submitted
    /// request, the machine's or the node's own), or why the node could not answer (then every
    /// command of it is answered `unavailable` and the agent retries with the same id).
    Replies(Result<Vec<Answer>, ForwardRefused>),
}

/// Why a leader could not answer a forwarded request (it was deposed, lost its quorum, or is
/// overloaded); the follower answers `unavailable` with it. On the wire it is its text alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(transparent)]
#[error("{0}")]
pub struct ForwardRefused(pub String);

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
    use crate::state_machine::Reply;
    use hivekeeper_protocol::{LockMode, Op};

    /// A machine reply in an answer is the reply's own MessagePack, so members of builds
    /// without node answers read it, and node answers come back as themselves.
    #[test]
    fn an_answer_of_the_machine_is_the_replys_own_bytes() {
        let reply = Reply::Granted { token: 7 << 16 };
        let answers: Result<Vec<Answer>, ForwardRefused> = Ok(vec![reply.clone().into()]);
        let replies: Result<Vec<Reply>, ForwardRefused> = Ok(vec![reply]);
        let bytes = rmp_serde::to_vec_named(&answers).expect("encodes");
        assert_eq!(bytes, rmp_serde::to_vec_named(&replies).expect("encodes"));
        let read: Result<Vec<Answer>, ForwardRefused> =
            rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(read, answers);
        let page = hivekeeper_protocol::SnapshotPage {
            index: 9,
            term: 2,
            total_bytes: 3,
            offset: 0,
            data: "AAAA".into(),
            digest: "00".into(),
            done: true,
        };
        let snapshot: Result<Vec<Answer>, ForwardRefused> =
            Ok(vec![Answer::Snapshot(Box::new(page))]);
        let bytes = rmp_serde::to_vec_named(&snapshot).expect("encodes");
        let read: Result<Vec<Answer>, ForwardRefused> =
            rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(read, snapshot);
    }

    /// A member of an older build reads the refusal as the text it always was, and the reverse.
    #[test]
    fn a_forward_refusal_is_its_text_on_the_wire() {
        let refused: Result<Vec<Reply>, ForwardRefused> =
            Err(ForwardRefused("member n2 is not the leader".into()));
        let text: Result<Vec<Reply>, String> = Err("member n2 is not the leader".into());
        let bytes = rmp_serde::to_vec_named(&refused).expect("encodes");
        assert_eq!(bytes, rmp_serde::to_vec_named(&text).expect("encodes"));
        let read: Result<Vec<Reply>, ForwardRefused> =
            rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(read.err(), refused.err());
    }

    #[test]
    fn a_forwarded_request_survives_the_codec() {
        let request = Request {
            id: "r-1".into(),
            op: Op::LockAcquire {
                name: "pad/7".into(),
                lease: "0000000000000004".into(),
                wait_ms: Some(1_500),
                max_hold_ms: None,
                mode: LockMode::Exclusive,
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
    fn a_forwarded_write_survives_the_codec() {
        use hivekeeper_protocol::Op;
        let reserve = |wait_ms, alt_max_m| AgentWrite {
            agent: "drone-1".into(),
            request: AgentRequest {
                id: "r-2".into(),
                op: Op::WaypointReserve {
                    name: "pad/7".into(),
                    lease: "0000000000000004".into(),
                    lat: Some(51.500_044_966),
                    lon: Some(-0.1),
                    alt_min_m: None,
                    alt_max_m,
                    radius_m: Some(4.25),
                    wait_ms,
                    start_ms: wait_ms.map(|_| 1_764_503_600_000),
                    end_ms: wait_ms.map(|_| 1_764_504_200_000),
                    priority: match wait_ms {
                        Some(_) => hivekeeper_protocol::Priority::EMERGENCY,
                        None => hivekeeper_protocol::Priority::ROUTINE,
                    },
                },
                secret_hash: None,
            },
        };
        let writes = vec![reserve(None, Some(120.5)), reserve(Some(0), None)];
        let frame = encode(&PeerRequest::Writes(writes.clone())).expect("encodes");
        match decode::<PeerRequest>(&frame).expect("decodes") {
            PeerRequest::Writes(got) => assert_eq!(got, writes),
            other => panic!("decoded as {other:?}"),
        }
    }

    /// The largest write a front door accepts, as a command in a frame, stays within
    /// `COMMAND_BYTES_MAX`: the frame bound is sized from it.
    #[test]
    fn a_command_of_the_largest_request_fits_its_bound() {
        use hivekeeper_protocol::Op;
        let name = "n".repeat(REQUEST_BYTES_MAX - 200);
        let write = AgentWrite {
            agent: "a".repeat(AGENT_ID_BYTES_MAX),
            request: AgentRequest {
                id: "r".repeat(64),
                op: Op::WaypointReserve {
                    name,
                    lease: "0000000000000004".into(),
                    lat: Some(1.0),
                    lon: Some(1.0),
                    alt_min_m: Some(1.0),
                    alt_max_m: Some(2.0),
                    radius_m: Some(1.0),
                    wait_ms: Some(1),
                    start_ms: Some(u64::MAX - 1),
                    end_ms: Some(u64::MAX),
                    priority: hivekeeper_protocol::Priority::EMERGENCY,
                },
                secret_hash: None,
            },
        };
        let bytes = encode(&write.into_command()).expect("encodes").len();
        assert!(bytes <= COMMAND_BYTES_MAX, "{bytes} bytes");
    }

    #[test]
    fn the_frame_bound_follows_the_raft_settings() {
        let mut config = RaftConfig::DEFAULTS;
        config.replication_entries_max = 300;
        assert_eq!(
            frame_max_bytes(&config),
            300 * BATCH_MAX * COMMAND_BYTES_MAX + FRAME_OVERHEAD_BYTES
        );
        // Few entries per append: a snapshot chunk is the larger.
        config.replication_entries_max = 0;
        assert_eq!(frame_max_bytes(&config), (1 << 20) + FRAME_OVERHEAD_BYTES);
    }

    /// A length prefix alone reserves nothing: the buffer grows with the bytes that came.
    /// Over the bound, the prefix alone is an error.
    #[test]
    fn a_frame_is_buffered_as_it_arrives_and_refused_over_the_bound() {
        let mut peer = codec();
        raise_bound(&mut peer, 1 << 20);
        let mut src = BytesMut::new();
        src.extend_from_slice(&(1_u32 << 20).to_be_bytes());
        src.extend_from_slice(b"abc");
        assert!(peer.decode(&mut src).expect("within the bound").is_none());
        assert!(
            src.capacity() < 4 << 10,
            "reserved {} bytes",
            src.capacity()
        );
        let mut whole = BytesMut::new();
        whole.extend_from_slice(&3_u32.to_be_bytes());
        whole.extend_from_slice(b"abc");
        let frame = peer.decode(&mut whole).expect("decodes").expect("a frame");
        assert_eq!(&frame[..], b"abc");
        let mut over = BytesMut::new();
        over.extend_from_slice(&((1_u32 << 20) + 1).to_be_bytes());
        assert!(peer.decode(&mut over).is_err());
        // Before the hello, the small bound.
        let mut fresh = codec();
        let mut hello = BytesMut::new();
        hello.extend_from_slice(&(HELLO_FRAME_MAX_BYTES as u32 + 1).to_be_bytes());
        assert!(fresh.decode(&mut hello).is_err());
    }

    /// The hello and its reply as builds before versions declared them.
    mod before_versions {
        use serde::{Deserialize, Serialize};

        #[derive(Debug, Serialize, Deserialize)]
        pub struct Hello {
            pub cluster: String,
            pub from: u64,
            pub to: u64,
        }

        #[derive(Debug, Serialize, Deserialize)]
        pub enum HelloReply {
            Welcome,
            Refused(String),
        }
    }

    /// N-1 → N: an older build reads this build's hello (ignoring its versions), and this
    /// build reads an older hello as one without versions; the reply to it is the `Welcome`
    /// the older build knows.
    #[test]
    fn hellos_cross_builds_before_versions() {
        let hello = Hello {
            cluster: "fleet".into(),
            from: 1,
            to: 2,
            versions: Some(VersionRange { min: 1, max: 2 }),
        };
        let old: before_versions::Hello = decode(&encode(&hello).expect("encodes")).expect("read");
        assert_eq!((old.cluster.as_str(), old.from, old.to), ("fleet", 1, 2));
        let new: Hello = decode(&encode(&old).expect("encodes")).expect("read");
        assert_eq!(new.versions, None);
        // Without versions, the frame is the older build's, byte for byte.
        let unversioned = Hello {
            versions: None,
            ..hello
        };
        assert_eq!(
            encode(&unversioned).expect("encodes"),
            encode(&old).expect("encodes")
        );
        let welcome = encode(&HelloReply::Welcome).expect("encodes");
        assert!(matches!(
            decode::<before_versions::HelloReply>(&welcome),
            Ok(before_versions::HelloReply::Welcome)
        ));
        let old_welcome = encode(&before_versions::HelloReply::Welcome).expect("encodes");
        assert!(matches!(decode(&old_welcome), Ok(HelloReply::Welcome)));
        let refused = encode(&before_versions::HelloReply::Refused("no".into())).expect("encodes");
        assert!(matches!(decode(&refused), Ok(HelloReply::Refused(reason)) if reason == "no"));
        let agreed = encode(&HelloReply::Agreed { version: 2 }).expect("encodes");
        assert!(matches!(
            decode(&agreed),
            Ok(HelloReply::Agreed { version: 2 })
        ));
    }

    #[test]
    fn garbage_is_a_codec_error_not_a_panic() {
        let result: Result<Envelope<PeerRequest>, _> = decode(b"\xc1\xff not msgpack");
        assert!(matches!(result, Err(TransportError::Codec(_))));
    }

    proptest::proptest! {
        /// Whatever bytes a peer (or a stranger) sends, every frame type decodes to a value or
        /// a codec error, never a panic or an allocation the frame cannot back.
        /// `PROPTEST_CASES=1000000 cargo test --release -p hivekeeper-coordinator --lib fuzz`.
        #[test]
        fn fuzz_peer_frames_decode_arbitrary_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        ) {
            let _ = decode::<Hello>(&bytes);
            let _ = decode::<HelloReply>(&bytes);
            let _ = decode::<Envelope<PeerRequest>>(&bytes);
            let _ = decode::<Envelope<PeerResponse>>(&bytes);
        }
    }
}
