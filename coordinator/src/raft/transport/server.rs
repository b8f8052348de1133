//! The listening side: accepts peers' connections and answers their frames.
//!
//! Each connection starts with a [`Hello`] that must name this cluster and this node (a
//! membership entry with a stale address fails loudly instead of talking to the wrong node).
//! Then every frame is answered by its own task, so a slow forwarded proposal never delays a
//! heartbeat behind it, and answers go back through one writer in completion order.

use std::future::Future;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use hivekeeper_protocol::Request;
use hivekeeper_tls::PeerIdentity;
use openraft::raft::AppendEntriesResponse;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::codec::Framed;

use super::NetworkFaults;
use super::tls::{self, PeerAcceptor, PeerStream};
use super::wire::{self, Envelope, Hello, HelloReply, PeerRequest, PeerResponse};
use crate::raft::{ElectionClock, NodeId, RaftHandle};
use crate::state_machine::{Command, Reply};

/// What the node layer does with requests forwarded by followers. Errors are strings: they
/// travel back and become `unavailable` on the follower.
pub trait ForwardHandler: Clone + Send + Sync + 'static {
    /// Proposes `commands` as one entry (this node believes it leads); one reply per command.
    fn propose(
        &self,
        commands: Vec<Command>,
    ) -> impl Future<Output = Result<Vec<Reply>, String>> + Send;

    /// Answers a request that is not a write (keepalive, read), as the leader.
    fn submit(
        &self,
        agent: String,
        request: Request,
    ) -> impl Future<Output = Result<Reply, String>> + Send;
}

/// Accepts peers on `listener` until the task is aborted. Raft RPCs go to `raft` (and what
/// they say about the leader's liveness to `election`), forwarded requests to `handler`.
/// With `tls`, each connection's TLS handshake (on its own task) must admit the peer before
/// its first frame is read.
#[expect(
    clippy::too_many_arguments,
    reason = "the server's parts, each from a different owner at start"
)]
pub async fn serve<H: ForwardHandler>(
    listener: TcpListener,
    me: NodeId,
    cluster: String,
    raft: Arc<RaftHandle>,
    election: Arc<ElectionClock>,
    handler: H,
    faults: NetworkFaults,
    tls: Option<PeerAcceptor>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(%error, "accepting a peer connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = PeerConnection {
            me,
            cluster: cluster.clone(),
            raft: raft.clone(),
            election: election.clone(),
            handler: handler.clone(),
            faults: faults.clone(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
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

struct PeerConnection<H> {
    me: NodeId,
    cluster: String,
    raft: Arc<RaftHandle>,
    election: Arc<ElectionClock>,
    handler: H,
    faults: NetworkFaults,
}

impl<H: ForwardHandler> PeerConnection<H> {
    /// Serves one connection; `identity` is who the peer's verified certificate names (TLS).
    async fn run(self, stream: PeerStream, identity: Option<PeerIdentity>) {
        let mut link = Framed::new(stream, wire::codec());
        let Some(from) = self.hello(&mut link, identity.as_ref()).await else {
            return;
        };
        let (mut sink, mut frames) = link.split();
        let (answers, mut outgoing) = mpsc::unbounded_channel::<bytes::Bytes>();
        let writer = tokio::spawn(async move {
            while let Some(frame) = outgoing.recv().await {
                if sink.send(frame).await.is_err() {
                    break;
                }
            }
        });
        while let Some(Ok(frame)) = frames.next().await {
            if self.faults.is_cut(from) {
                break;
            }
            let envelope = match wire::decode::<Envelope<PeerRequest>>(&frame) {
                Ok(envelope) => envelope,
                Err(error) => {
                    tracing::warn!(peer = from, %error, "undecodable frame from a peer; closing");
                    break;
                }
            };
            let (raft, election, handler, answers) = (
                self.raft.clone(),
                self.election.clone(),
                self.handler.clone(),
                answers.clone(),
            );
            tokio::spawn(async move {
                // Boxed: inline, `answer`'s future (openraft's append and vote handling, a
                // forwarded proposal) made this task 3,904 bytes, copied at spawn for every
                // frame; boxed, 400.
                let body = Box::pin(answer(&raft, &election, &handler, envelope.body)).await;
                match wire::encode(&Envelope {
                    id: envelope.id,
                    body,
                }) {
                    Ok(frame) => {
                        let _ = answers.send(frame);
                    }
                    Err(error) => tracing::warn!(%error, "an answer to a peer did not encode"),
                }
            });
        }
        writer.abort();
    }

    /// Reads and checks the hello; returns the dialler's id if it is welcome. With TLS the
    /// hello must come from the member the certificate names.
    async fn hello(
        &self,
        link: &mut Framed<PeerStream, tokio_util::codec::LengthDelimitedCodec>,
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
                "this is node {}, not node {}: the membership has a wrong address",
                self.me, hello.to
            ))
        } else if let Some(identity) = identity
            && !tls::names_node(identity, hello.from)
        {
            Some(format!(
                "the certificate names {:?}, not node {}",
                identity.common_name, hello.from
            ))
        } else if self.faults.is_cut(hello.from) {
            Some("cut off by a network fault".into())
        } else {
            None
        };
        let reply = match &refusal {
            Some(reason) => HelloReply::Refused(reason.clone()),
            None => HelloReply::Welcome,
        };
        link.send(wire::encode(&reply).ok()?).await.ok()?;
        match refusal {
            Some(reason) => {
                tracing::warn!(peer = hello.from, %reason, "refused a peer connection");
                None
            }
            None => Some(hello.from),
        }
    }
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
        PeerRequest::InstallSnapshot(rpc) => {
            let leader = rpc.vote;
            let result = raft.raft.install_snapshot(rpc).await;
            // The answer carries our vote: not above the sender's means we follow it.
            if result.as_ref().is_ok_and(|answer| answer.vote <= leader) {
                election.heard();
            }
            PeerResponse::InstallSnapshot(result)
        }
        PeerRequest::Propose(commands) => PeerResponse::Replies(handler.propose(commands).await),
        PeerRequest::Submit { agent, request } => PeerResponse::Replies(
            handler
                .submit(agent, request)
                .await
                .map(|reply| vec![reply]),
        ),
    }
}
