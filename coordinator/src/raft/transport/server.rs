//! The listening side: accepts peers' connections and answers their frames.
//!
//! Each connection starts with a [`Hello`] that must name this cluster and this node (a
//! membership entry with a stale address fails loudly instead of talking to the wrong node)
//! and share a peer protocol version with it (`version.rs`);
//! until it is welcome, no frame above [`wire::HELLO_FRAME_MAX_BYTES`] is read. Then every
//! frame is answered by its own task, so a slow forwarded proposal never delays a heartbeat
//! behind it, and answers go back through one writer in completion order. At most
//! [`wire::IN_FLIGHT_MAX`] requests of one connection are in flight, from the frame's read to
//! its answer's write: past it the connection's next frame is not read (the dialler, which
//! keeps to the same bound, is never held back; one that does not is slowed by TCP). A frame
//! above the connection's bound or one that does not decode drops the connection.

use std::future::Future;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use hivekeeper_protocol::Request;
use hivekeeper_tls::PeerIdentity;
use openraft::raft::AppendEntriesResponse;
use openraft_legacy::network_v1::ChunkedSnapshotReceiver;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::codec::Framed;

use super::NetworkFaults;
use super::tls::{self, PeerAcceptor, PeerStream};
use super::version::{self, VersionRange};
use super::wire::{
    self, AgentWrite, Envelope, ForwardRefused, Hello, HelloReply, PeerRequest, PeerResponse,
};
use crate::answer::Answer;
use crate::raft::{ElectionClock, NodeId, RaftHandle};
use crate::state_machine::Reply;

/// What the node layer does with requests forwarded by followers. A refusal travels back and
/// becomes `unavailable` on the follower.
pub trait ForwardHandler: Clone + Send + Sync + 'static {
    /// Proposes agents' `writes` as one entry (this node believes it leads); one reply per
    /// write.
    fn propose(
        &self,
        writes: Vec<AgentWrite>,
    ) -> impl Future<Output = Result<Vec<Reply>, ForwardRefused>> + Send;

    /// Answers a request that is not a write (keepalive, read), as the leader.
    fn submit(
        &self,
        agent: String,
        request: Request,
    ) -> impl Future<Output = Result<Answer, ForwardRefused>> + Send;
}

/// Accepts peers on `listener` until the task is aborted; aborting it also ends every
/// connection it accepted (they are its own tasks), so a stopped node answers no peer from a
/// connection opened before it stopped. Each connection answers as `peer` says.
/// Frames after the hello are bounded by `frame_max_bytes` ([`wire::frame_max_bytes`]).
/// With `tls`, each connection's TLS handshake (on its own task) must admit the peer before
/// its first frame is read.
pub async fn serve<H: ForwardHandler>(
    listener: TcpListener,
    peer: PeerServer<H>,
    tls: Option<PeerAcceptor>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reaps ended connections, so the set holds only live ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(%error, "accepting a peer connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = peer.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            match tls {
                None => peer.run(Box::new(stream), None).await,
                Some(tls) => match tls.accept(stream).await {
                    Ok((stream, identity)) => peer.run(stream, Some(identity)).await,
                    Err(reason) => tracing::warn!(%reason, "refused a peer connection"),
                },
            }
        });
    }
}

/// What every connection of the peer server answers with; each accepted connection gets a
/// clone.
#[derive(Clone)]
pub struct PeerServer<H> {
    /// This member's id, checked against each dialler's hello.
    pub me: NodeId,
    /// The cluster's name, checked against each dialler's hello.
    pub cluster: String,
    /// The bound on frames after the hello.
    pub frame_max_bytes: usize,
    /// Where Raft RPCs go.
    pub raft: Arc<RaftHandle>,
    /// What Raft RPCs say about the leader's liveness goes here.
    pub election: Arc<ElectionClock>,
    /// Where forwarded requests go.
    pub handler: H,
    /// Injected network faults (tests and the nemesis).
    pub faults: NetworkFaults,
}

impl<H: ForwardHandler> PeerServer<H> {
    /// Serves one connection; `identity` is who the peer's verified certificate names (TLS).
    async fn run(self, stream: PeerStream, identity: Option<PeerIdentity>) {
        let mut link = Framed::new(stream, wire::codec());
        let Some(from) = self.hello(&mut link, identity.as_ref()).await else {
            return;
        };
        wire::raise_bound(link.codec_mut(), self.frame_max_bytes);
        let peer = Peer {
            id: from,
            name: self.raft.member_name(from),
        };
        let (raft, election, handler) = (self.raft, self.election, self.handler);
        let answer = move |request| {
            // Every frame that reaches this point is the peer talking to this node: a follower
            // hears its leader this way, and a cut-off node hears no one (`quorum.rs`, rule 4).
            raft.contact.heard(from);
            let (raft, election, handler) = (raft.clone(), election.clone(), handler.clone());
            // Boxed: inline, `answer`'s future (openraft's append and vote handling, a
            // forwarded proposal) made each frame's task 3,904 bytes, copied at spawn; boxed,
            // 400.
            Box::pin(async move { answer(&raft, &election, &handler, request).await })
        };
        serve_frames(link, &peer, &self.faults, answer).await;
    }

    /// Reads and checks the hello; returns the dialler's id if it is welcome. With TLS the
    /// hello must come from the member the certificate names.
    async fn hello(
        &self,
        link: &mut Framed<PeerStream, wire::PeerCodec>,
        identity: Option<&PeerIdentity>,
    ) -> Option<NodeId> {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(2), link.next())
            .await
            .ok()??
            .ok()?;
        let hello: Hello = wire::decode(&frame).ok()?;
        let refusal = if hello.cluster != self.cluster {
            Some(format!(
                "this node belongs to cluster {:?}, not {:?}",
                self.cluster, hello.cluster
            ))
        } else if hello.to != self.me {
            Some(format!(
                "this is member {}, not {}: the membership has a wrong address",
                self.raft.member_name(self.me),
                self.raft.member_name(hello.to)
            ))
        } else if let Some(identity) = identity
            && !tls::names_node(identity, hello.from)
        {
            Some(format!(
                "the certificate names {:?}, not member {}",
                identity.common_name,
                self.raft.member_name(hello.from)
            ))
        } else if self.faults.is_cut(hello.from) {
            Some("cut off by a network fault".into())
        } else {
            None
        };
        let agreed = version::negotiate(
            VersionRange::OURS,
            VersionRange::of_hello(hello.versions),
            &self.raft.member_name(self.me),
            &self.raft.member_name(hello.from),
        );
        let reply = match (refusal, agreed) {
            (Some(reason), _) => HelloReply::Refused(reason),
            (None, Err(no_common)) => HelloReply::Refused(no_common.to_string()),
            // A build before versions knows this answer only.
            (None, Ok(_)) if hello.versions.is_none() => HelloReply::Welcome,
            (None, Ok(version)) => HelloReply::Agreed { version },
        };
        link.send(wire::encode(&reply).ok()?).await.ok()?;
        match reply {
            HelloReply::Refused(reason) => {
                let peer = self.raft.member_name(hello.from);
                tracing::warn!(%peer, %reason, "refused a peer connection");
                None
            }
            HelloReply::Welcome | HelloReply::Agreed { .. } => Some(hello.from),
        }
    }
}

/// A welcomed peer: its id, and its member name for log lines.
struct Peer {
    /// The id its hello gave.
    id: NodeId,
    /// Its `--name` (the id, for a node outside the known membership).
    name: String,
}

/// Answers the frames of a welcomed connection from `from`, each by its own task running
/// `answer`, at most [`wire::IN_FLIGHT_MAX`] at once, until the link breaks, a frame is bad
/// (over the bound, undecodable) or `from` is cut off.
async fn serve_frames<S, A, F>(
    link: Framed<S, wire::PeerCodec>,
    from: &Peer,
    faults: &NetworkFaults,
    answer: A,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
    A: Fn(PeerRequest) -> F,
    F: Future<Output = PeerResponse> + Send + 'static,
{
    let (mut sink, mut frames) = link.split();
    // Each answer carries its request's permit to the writer: a request holds one from its
    // frame's read until its answer is written.
    let (answers, mut outgoing) = mpsc::unbounded_channel::<(bytes::Bytes, OwnedSemaphorePermit)>();
    let writer = tokio::spawn(async move {
        while let Some((frame, _permit)) = outgoing.recv().await {
            if sink.send(frame).await.is_err() {
                break;
            }
        }
    });
    let in_flight = Arc::new(Semaphore::new(wire::IN_FLIGHT_MAX));
    loop {
        // Backpressure: past the bound, the next frame stays unread.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let frame = match frames.next().await {
            Some(Ok(frame)) => frame,
            // A peer that stopped resets its connections: routine, and the dialling side
            // reports the outage (`peer lost`).
            Some(Err(error))
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                tracing::debug!(peer = %from.name, %error, "peer connection reset; closing");
                break;
            }
            Some(Err(error)) => {
                tracing::warn!(peer = %from.name, %error, "bad frame from a peer; closing");
                break;
            }
            None => break,
        };
        if faults.is_cut(from.id) {
            break;
        }
        if faults.is_silenced(from.id) {
            // Lost on the way: no answer, and the connection stays up.
            drop(permit);
            continue;
        }
        let envelope = match wire::decode::<Envelope<PeerRequest>>(&frame) {
            Ok(envelope) => envelope,
            Err(error) => {
                tracing::warn!(peer = %from.name, %error, "undecodable frame from a peer; closing");
                break;
            }
        };
        let answering = answer(envelope.body);
        let answers = answers.clone();
        tokio::spawn(async move {
            let body = answering.await;
            match wire::encode(&Envelope {
                id: envelope.id,
                body,
            }) {
                Ok(frame) => {
                    let _ = answers.send((frame, permit));
                }
                Err(error) => tracing::warn!(%error, "an answer to a peer did not encode"),
            }
        });
    }
    writer.abort();
}

async fn answer<H: ForwardHandler>(
    raft: &RaftHandle,
    election: &ElectionClock,
    handler: &H,
    request: PeerRequest,
) -> PeerResponse {
    match request {
        PeerRequest::AppendEntries(rpc) => {
            let result = raft.raft.append_entries(rpc).await;
            // Any answer but "my vote is higher" means we follow the sender: a live leader.
            if result
                .as_ref()
                .is_ok_and(|answer| !matches!(answer, AppendEntriesResponse::HigherVote(_)))
            {
                election.heard();
            }
            PeerResponse::AppendEntries(result)
        }
        PeerRequest::Vote(rpc) => {
            let result = raft.raft.vote(rpc).await;
            // Granting a vote gives that candidate a full timeout to win (Raft §5.2).
            if result.as_ref().is_ok_and(|answer| answer.vote_granted) {
                election.heard();
            }
            PeerResponse::Vote(result)
        }
        PeerRequest::PreVote(rpc) => PeerResponse::Vote(raft.raft.pre_vote(rpc).await),
        PeerRequest::InstallSnapshot(rpc) => {
            let leader = rpc.vote;
            let result = raft.raft.install_snapshot(rpc).await;
            // The answer carries our vote: not above the sender's means we follow it.
            if result.as_ref().is_ok_and(|answer| answer.vote <= leader) {
                election.heard();
            }
            PeerResponse::InstallSnapshot(result)
        }
        PeerRequest::Writes(writes) => PeerResponse::Replies(
            handler
                .propose(writes)
                .await
                .map(|replies| replies.into_iter().map(Answer::Machine).collect()),
        ),
        PeerRequest::Submit { agent, request } => PeerResponse::Replies(
            handler
                .submit(agent, request)
                .await
                .map(|reply| vec![reply]),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::net::TcpStream;

    use hivekeeper_protocol::{Op, Request};

    use super::*;

    /// A welcomed connection whose requests never finish until `gate` opens: the server
    /// starts exactly `IN_FLIGHT_MAX` of them and reads no further frame; once they finish,
    /// every request is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_has_at_most_in_flight_max_requests_started() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let dialler = TcpStream::connect(addr).await.expect("connects");
        let (accepted, _) = listener.accept().await.expect("accepts");
        let started = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(0));
        let answer = {
            let (started, gate) = (started.clone(), gate.clone());
            move |_request| {
                started.fetch_add(1, Ordering::SeqCst);
                let gate = gate.clone();
                async move {
                    let _open = gate.acquire().await.expect("the gate stays");
                    PeerResponse::Replies(Ok(Vec::new()))
                }
            }
        };
        let server = Framed::new(accepted, wire::codec());
        tokio::spawn(async move {
            let peer = super::Peer {
                id: 7,
                name: "n7".into(),
            };
            serve_frames(server, &peer, &NetworkFaults::default(), answer).await;
        });

        let total = wire::IN_FLIGHT_MAX + 16;
        let (mut sink, mut answers) = Framed::new(dialler, wire::codec()).split();
        // Sent from a task: past the bound the server stops reading, so these writes may wait.
        let sender = tokio::spawn(async move {
            for id in 0..total {
                let request = PeerRequest::Submit {
                    agent: "drone-1".into(),
                    request: Request {
                        id: format!("k{id}"),
                        op: Op::AdminStatus {},
                    },
                };
                let frame = wire::encode(&Envelope {
                    id: id as u64,
                    body: request,
                })
                .expect("encodes");
                sink.send(frame).await.expect("sent");
            }
            sink
        });
        let wait_for = |count: usize| {
            let started = started.clone();
            async move {
                for _ in 0..500 {
                    if started.load(Ordering::SeqCst) >= count {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("{count} requests did not start within 5 s");
            }
        };
        wait_for(wire::IN_FLIGHT_MAX).await;
        // Every frame has had time to arrive; none past the bound was started.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(started.load(Ordering::SeqCst), wire::IN_FLIGHT_MAX);

        gate.add_permits(total);
        let mut answered = 0;
        while answered < total {
            let frame = tokio::time::timeout(Duration::from_secs(5), answers.next())
                .await
                .expect("answers keep coming")
                .expect("the connection stays")
                .expect("a frame");
            let envelope: Envelope<PeerResponse> = wire::decode(&frame).expect("decodes");
            assert!(matches!(envelope.body, PeerResponse::Replies(Ok(_))));
            answered += 1;
        }
        assert_eq!(started.load(Ordering::SeqCst), total);
        let _sink = sender.await.expect("every frame was sent");
    }
}
