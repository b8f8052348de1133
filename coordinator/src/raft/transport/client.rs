//! The dialling side: a [`PeerClient`] per peer and purpose, and a [`PeerPool`] that keeps one
//! per peer.
//!
//! A client is a handle to a connection task. The task dials on the first call, says hello,
//! then writes calls as they come and matches answers to calls by id, so many calls can be in
//! flight on one connection (a follower forwards many agents' keepalives at once), up to
//! [`wire::IN_FLIGHT_MAX`]: past it the task waits for answers before it sends more (the
//! server reads no further frame past that bound), and a call whose caller gave up meanwhile
//! is dropped unsent. When the connection breaks, its calls in flight fail and the next call
//! dials again; after a failed dial, calls fail at once until a jittered, growing backoff has
//! passed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::tls::{PeerConnector, PeerStream};
use super::version::{PEER_PROTOCOL_UNVERSIONED, PeerVersions, VersionRange};
use super::wire::{self, Envelope, Hello, HelloReply, PeerRequest, PeerResponse};
use super::{NetworkFaults, TransportError};
use crate::raft::{CLUSTER_TARGET, NodeId};

/// How long dialling and the hello may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Backoff between failed dials: from 10 ms, doubling, at most 100 ms (two heartbeats): a
/// restarted peer is found again before its election timeout runs out (see
/// `TcpNetwork::new`), and a dead one costs at most about ten refused dials a second per pool.
const REDIAL_MIN: Duration = Duration::from_millis(10);
const REDIAL_MAX: Duration = Duration::from_millis(100);

/// Who this node is, for the hello of every connection it dials.
#[derive(Debug, Clone)]
pub(crate) struct Dialler {
    /// This node.
    pub me: NodeId,
    /// The cluster's name.
    pub cluster: String,
    /// Links cut on purpose.
    pub faults: NetworkFaults,
    /// Mutual TLS to every peer (`--peer-tls-cert`); `None`: plain TCP.
    pub tls: Option<PeerConnector>,
    /// The bound on frames after the hello ([`wire::frame_max_bytes`]).
    pub frame_max_bytes: usize,
    /// The version agreed with each peer dialled, shared by every connection of this node.
    pub versions: PeerVersions,
}

impl Dialler {
    /// Dials `addr`, says hello to member `name` (id `peer`) and hangs up: whether a member of
    /// this cluster with that name answers there, before anything names it in the membership
    /// (`member add`). A refusal says who answered instead (another node, another cluster, a
    /// certificate that names someone else). [`NetworkFaults`] are not consulted: they cut
    /// Raft's calls and forwarded requests, not this one-off check.
    pub(crate) async fn probe(
        &self,
        peer: NodeId,
        name: &str,
        addr: &str,
    ) -> Result<(), TransportError> {
        let connection = Connection {
            dialler: self.clone(),
            peer,
            name: name.to_string(),
            addr: addr.to_string(),
        };
        connection.dial().await.map(drop)
    }
}

/// One call waiting for its answer.
struct Call {
    request: PeerRequest,
    answer: oneshot::Sender<Result<PeerResponse, TransportError>>,
}

/// A connection to one peer (dialled lazily, re-dialled after a failure). Cheap to clone;
/// clones share the connection. The task ends when the last clone is dropped.
#[derive(Clone)]
pub struct PeerClient {
    peer: NodeId,
    /// The peer's member name, for errors and log lines.
    name: String,
    faults: NetworkFaults,
    calls: mpsc::UnboundedSender<Call>,
}

impl PeerClient {
    /// A client for `peer`, member `name`, at `addr`. Must be called inside a tokio runtime.
    pub(crate) fn new(dialler: Dialler, peer: NodeId, name: String, addr: String) -> PeerClient {
        let (calls, queue) = mpsc::unbounded_channel();
        let faults = dialler.faults.clone();
        tokio::spawn(
            Connection {
                dialler,
                peer,
                name: name.clone(),
                addr,
            }
            .run(queue),
        );
        PeerClient {
            peer,
            name,
            faults,
            calls,
        }
    }

    /// The peer this client reaches.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// The peer's member name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `request` and waits for its answer, at most `timeout`.
    pub async fn call(
        &self,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, TransportError> {
        if self.faults.is_cut(self.peer) {
            return Err(TransportError::CutOff {
                peer: self.name.clone(),
            });
        }
        if self.faults.is_silenced(self.peer) {
            // Lost on the way: the caller hears nothing until its timeout.
            tokio::time::sleep(timeout).await;
            return Err(TransportError::Timeout {
                peer: self.name.clone(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            });
        }
        let (answer, answered) = oneshot::channel();
        let broken = || TransportError::Broken {
            peer: self.name.clone(),
            reason: "the connection task ended".into(),
        };
        self.calls
            .send(Call { request, answer })
            .map_err(|_| broken())?;
        match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(broken()),
            Err(_) => Err(TransportError::Timeout {
                peer: self.name.clone(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }
}

/// The connection task's fixed part.
struct Connection {
    dialler: Dialler,
    peer: NodeId,
    /// Its member name: with TLS, the name its certificate must carry.
    name: String,
    addr: String,
}

/// How long a peer that was never reached may stay unreachable before it is reported: members
/// of a new cluster start one after another, and a peer still starting is not news.
const START_GRACE: Duration = Duration::from_secs(5);

/// A peer's unreachability as the log tells it: one WARN when it starts, one WARN when it
/// ends, nothing in between however long it lasts (`hivekeeper_raft_*` metrics show it
/// meanwhile); a peer never reached yet only once it has been unreachable for [`START_GRACE`].
/// The dials themselves go on every 10–100 ms, and openraft logs each failed replication RPC
/// and heartbeat (several lines per heartbeat interval per dead peer), which `serve` turns off
/// by default for this summary.
#[derive(Debug, Default)]
struct Outage {
    /// When the first failed dial of the current outage was.
    since: Option<Instant>,
    /// Whether the current outage was reported (so its end is too).
    reported: bool,
    /// Whether a dial ever succeeded.
    ever_up: bool,
}

/// What [`Outage`] has to say about a dial.
#[derive(Debug, PartialEq, Eq)]
enum OutageReport {
    /// The first failed dial after a success, or [`START_GRACE`] of failures at start.
    Down,
    /// A dial succeeded after a reported outage.
    Up { down_ms: u64 },
}

impl Outage {
    fn failed(&mut self, now: Instant) -> Option<OutageReport> {
        let since = *self.since.get_or_insert(now);
        if self.reported || (!self.ever_up && now.duration_since(since) < START_GRACE) {
            return None;
        }
        self.reported = true;
        Some(OutageReport::Down)
    }

    fn ended(&mut self, now: Instant) -> Option<OutageReport> {
        self.ever_up = true;
        let since = self.since.take()?;
        if !std::mem::take(&mut self.reported) {
            return None;
        }
        let down_ms = u64::try_from(now.duration_since(since).as_millis()).unwrap_or(u64::MAX);
        Some(OutageReport::Up { down_ms })
    }
}

/// Logs an [`OutageReport`] about member `peer`; `error` is the failed dial's (none for `Up`).
fn log_outage(report: OutageReport, peer: &str, addr: &str, error: Option<&TransportError>) {
    let error = error.map(ToString::to_string).unwrap_or_default();
    match report {
        OutageReport::Down => {
            tracing::warn!(target: CLUSTER_TARGET, %peer, %addr, %error, "peer lost: unreachable, redialling every 10-100 ms");
        }
        OutageReport::Up { down_ms } => {
            tracing::warn!(target: CLUSTER_TARGET, %peer, %addr, down_ms, "peer back: reachable again");
        }
    }
}

type Link = Framed<PeerStream, wire::PeerCodec>;

impl Connection {
    async fn run(self, mut queue: mpsc::UnboundedReceiver<Call>) {
        let mut backoff = self.backoff();
        let mut redial_at = Instant::now();
        let mut outage = Outage::default();
        while let Some(call) = queue.recv().await {
            if Instant::now() < redial_at {
                let _ = call
                    .answer
                    .send(Err(self.unreachable("backing off after a failed dial")));
                continue;
            }
            match self.dial().await {
                Ok(link) => {
                    backoff = self.backoff();
                    if let Some(report) = outage.ended(Instant::now()) {
                        log_outage(report, &self.name, &self.addr, None);
                    }
                    self.serve_calls(link, call, &mut queue).await;
                }
                Err(error) => {
                    redial_at = Instant::now() + backoff.next().unwrap_or(REDIAL_MAX);
                    if let Some(report) = outage.failed(Instant::now()) {
                        log_outage(report, &self.name, &self.addr, Some(&error));
                    }
                    let _ = call.answer.send(Err(error));
                }
            }
        }
    }

    fn backoff(&self) -> impl Iterator<Item = Duration> + use<> {
        ExponentialBuilder::default()
            .with_min_delay(REDIAL_MIN)
            .with_max_delay(REDIAL_MAX)
            .with_jitter()
            .without_max_times()
            .build()
    }

    fn unreachable(&self, reason: impl Into<String>) -> TransportError {
        TransportError::Unreachable {
            peer: self.name.clone(),
            addr: self.addr.clone(),
            reason: reason.into(),
        }
    }

    /// The peer refused the hello (or TLS handshake), for `reason`.
    fn refused(&self, reason: String) -> TransportError {
        TransportError::Refused {
            peer: self.name.clone(),
            addr: self.addr.clone(),
            reason,
        }
    }

    /// Dials and says hello, agreeing on a peer protocol version (`version.rs`).
    async fn dial(&self) -> Result<Link, TransportError> {
        let handshake = async {
            let stream = TcpStream::connect(&self.addr)
                .await
                .map_err(|error| self.unreachable(error.to_string()))?;
            // Heartbeats and forwarded requests are small: never hold them back (Nagle).
            stream
                .set_nodelay(true)
                .map_err(|error| self.unreachable(error.to_string()))?;
            let stream: PeerStream = match &self.dialler.tls {
                None => Box::new(stream),
                Some(tls) => tls
                    .connect(&self.name, stream)
                    .await
                    .map_err(|error| self.refused(error.to_string()))?,
            };
            let mut link = Framed::new(stream, wire::codec());
            let hello = Hello {
                cluster: self.dialler.cluster.clone(),
                from: self.dialler.me,
                to: self.peer,
                versions: Some(VersionRange::OURS),
            };
            link.send(wire::encode(&hello)?)
                .await
                .map_err(|error| self.unreachable(error.to_string()))?;
            let reply = link
                .next()
                .await
                .ok_or_else(|| self.unreachable("closed during the hello"))?
                .map_err(|error| self.unreachable(error.to_string()))?;
            let version = match wire::decode::<HelloReply>(&reply)? {
                // A build before versions: it speaks version 1 only.
                HelloReply::Welcome => PEER_PROTOCOL_UNVERSIONED,
                HelloReply::Agreed { version } => version,
                HelloReply::Refused(reason) => return Err(self.refused(reason)),
            };
            if !VersionRange::OURS.contains(version) {
                return Err(self.refused(format!(
                    "it answered at peer protocol version {version}, and this member speaks {}",
                    VersionRange::OURS
                )));
            }
            self.dialler.versions.agreed(self.peer, version);
            wire::raise_bound(link.codec_mut(), self.dialler.frame_max_bytes);
            Ok(link)
        };
        tokio::time::timeout(CONNECT_TIMEOUT, handshake)
            .await
            .unwrap_or_else(|_| Err(self.unreachable("no hello within 500 ms")))
    }

    /// Runs calls over `link` until it breaks (failing the calls in flight) or the client is
    /// dropped.
    async fn serve_calls(
        &self,
        mut link: Link,
        first: Call,
        queue: &mut mpsc::UnboundedReceiver<Call>,
    ) {
        let mut in_flight: HashMap<u64, oneshot::Sender<Result<PeerResponse, TransportError>>> =
            HashMap::new();
        let mut next_id = 0_u64;
        let mut pending = Some(first);
        let reason = loop {
            if let Some(call) = pending.take() {
                if self.dialler.faults.is_cut(self.peer) {
                    let _ = call.answer.send(Err(TransportError::CutOff {
                        peer: self.name.clone(),
                    }));
                    break "cut off by a network fault".to_string();
                }
                // The caller timed out while the call waited for room: nothing to send.
                if call.answer.is_closed() {
                    continue;
                }
                next_id += 1;
                let frame = match wire::encode(&Envelope {
                    id: next_id,
                    body: call.request,
                }) {
                    Ok(frame) => frame,
                    Err(error) => {
                        let _ = call.answer.send(Err(error));
                        continue;
                    }
                };
                in_flight.insert(next_id, call.answer);
                if let Err(error) = link.send(frame).await {
                    break error.to_string();
                }
                continue;
            }
            let room = in_flight.len() < wire::IN_FLIGHT_MAX;
            tokio::select! {
                call = queue.recv(), if room => match call {
                    Some(call) => pending = Some(call),
                    None => return,
                },
                frame = link.next() => match frame {
                    Some(Ok(frame)) => match wire::decode::<Envelope<PeerResponse>>(&frame) {
                        Ok(envelope) => {
                            if let Some(answer) = in_flight.remove(&envelope.id) {
                                let _ = answer.send(Ok(envelope.body));
                            }
                        }
                        Err(error) => break error.to_string(),
                    },
                    Some(Err(error)) => break error.to_string(),
                    None => break "closed by the peer".to_string(),
                },
            }
        };
        tracing::debug!(peer = %self.name, addr = %self.addr, %reason, "peer connection closed");
        for (_, answer) in in_flight {
            let _ = answer.send(Err(TransportError::Broken {
                peer: self.name.clone(),
                reason: reason.clone(),
            }));
        }
    }
}

/// One [`PeerClient`] per peer, created on first use and replaced when the peer's address
/// changes (a membership change). Cheap to clone; clones share the clients.
#[derive(Clone)]
pub struct PeerPool {
    dialler: Dialler,
    clients: Arc<Mutex<HashMap<NodeId, (String, PeerClient)>>>,
}

impl PeerPool {
    /// An empty pool for this node.
    pub(crate) fn new(dialler: Dialler) -> PeerPool {
        PeerPool {
            dialler,
            clients: Arc::default(),
        }
    }

    /// The client for `peer`, member `name`, at `addr`.
    pub fn client(&self, peer: NodeId, name: &str, addr: &str) -> PeerClient {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match clients.get(&peer) {
            Some((known, client)) if known == addr => client.clone(),
            _ => {
                let client = PeerClient::new(
                    self.dialler.clone(),
                    peer,
                    name.to_string(),
                    addr.to_string(),
                );
                clients.insert(peer, (addr.to_string(), client.clone()));
                client
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hivekeeper_protocol::{Op, Request};
    use tokio::net::TcpListener;

    use super::*;

    /// A peer that welcomes the client, then reads frames without answering until told: the
    /// client never has more than `IN_FLIGHT_MAX` calls on the wire, and sends the rest as
    /// answers come back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_dialler_keeps_at_most_in_flight_max_calls_on_the_wire() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address").to_string();
        let read = Arc::new(AtomicUsize::new(0));
        let (release_tx, release) = oneshot::channel::<()>();
        let peer = tokio::spawn({
            let read = read.clone();
            async move {
                let (stream, _) = listener.accept().await.expect("accepts");
                let mut link = Framed::new(stream, wire::codec());
                link.next().await.expect("a hello").expect("a frame");
                let welcome = wire::encode(&HelloReply::Welcome).expect("encodes");
                link.send(welcome).await.expect("sent");
                let mut release = Some(release);
                let mut held = Vec::new();
                loop {
                    let next = link.next();
                    let frame = match release.as_mut() {
                        Some(released) => tokio::select! {
                            frame = next => frame,
                            _ = released => {
                                release = None;
                                // Answer every call read so far.
                                for id in held.drain(..) {
                                    let answer = wire::encode(&Envelope {
                                        id,
                                        body: PeerResponse::Replies(Ok(Vec::new())),
                                    })
                                    .expect("encodes");
                                    link.send(answer).await.expect("sent");
                                }
                                continue;
                            }
                        },
                        None => next.await,
                    };
                    let Some(Ok(frame)) = frame else { return };
                    let envelope: Envelope<PeerRequest> = wire::decode(&frame).expect("decodes");
                    read.fetch_add(1, Ordering::SeqCst);
                    if release.is_some() {
                        held.push(envelope.id);
                    } else {
                        let answer = wire::encode(&Envelope {
                            id: envelope.id,
                            body: PeerResponse::Replies(Ok(Vec::new())),
                        })
                        .expect("encodes");
                        link.send(answer).await.expect("sent");
                    }
                }
            }
        });
        let dialler = Dialler {
            me: 1,
            cluster: "hivekeeper".into(),
            faults: NetworkFaults::default(),
            frame_max_bytes: 1 << 20,
            tls: None,
            versions: PeerVersions::default(),
        };
        let versions = dialler.versions.clone();
        let client = PeerClient::new(dialler, 2, "n2".into(), addr);
        let total = wire::IN_FLIGHT_MAX + 16;
        let calls: Vec<_> = (0..total)
            .map(|id| {
                let client = client.clone();
                tokio::spawn(async move {
                    let request = PeerRequest::Submit {
                        agent: "drone-1".into(),
                        request: Request {
                            id: format!("k{id}"),
                            op: Op::AdminStatus {},
                        },
                    };
                    client.call(request, Duration::from_secs(10)).await
                })
            })
            .collect();
        for _ in 0..500 {
            if read.load(Ordering::SeqCst) >= wire::IN_FLIGHT_MAX {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Every call has had time to go out; none past the bound did.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(read.load(Ordering::SeqCst), wire::IN_FLIGHT_MAX);
        release_tx.send(()).expect("the peer waits");
        for call in calls {
            let answer = call.await.expect("the call task");
            assert!(
                matches!(answer, Ok(PeerResponse::Replies(Ok(_)))),
                "{answer:?}"
            );
        }
        assert_eq!(read.load(Ordering::SeqCst), total);
        // The peer answered the hello as a build before versions does: version 1.
        assert_eq!(versions.of(2), Some(1));
        peer.abort();
    }

    #[test]
    fn an_outage_is_reported_once_when_it_starts_and_once_when_it_ends() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut outage = Outage::default();
        // A peer still starting: quiet for START_GRACE, and its arrival is no news.
        assert_eq!(outage.failed(at(0)), None);
        assert_eq!(outage.failed(at(4_900)), None);
        assert_eq!(outage.ended(at(4_950)), None);
        // Up once, then gone: reported at the first failed dial.
        assert_eq!(outage.failed(at(10_000)), Some(OutageReport::Down));
        // The redials every 10-100 ms stay quiet, however long the peer stays away.
        for ms in (10_100..600_000).step_by(100) {
            assert_eq!(outage.failed(at(ms)), None, "at {ms} ms");
        }
        assert_eq!(
            outage.ended(at(601_500)),
            Some(OutageReport::Up { down_ms: 591_500 })
        );
        // A new outage starts over.
        assert_eq!(outage.ended(at(602_000)), None);
        assert_eq!(outage.failed(at(610_000)), Some(OutageReport::Down));
        // A peer never reached is reported once START_GRACE has passed.
        let mut never = Outage::default();
        assert_eq!(never.failed(at(0)), None);
        assert_eq!(never.failed(at(5_000)), Some(OutageReport::Down));
        assert_eq!(never.failed(at(5_100)), None);
        assert_eq!(
            never.ended(at(6_000)),
            Some(OutageReport::Up { down_ms: 6_000 })
        );
    }
}
