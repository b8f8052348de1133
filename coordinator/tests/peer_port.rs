//! A stranger on the peer port who knows the cluster name forges internal commands: it says a
//! correct hello, then sends frames with the node's own commands inside, serialized by hand,
//! both as a `Propose(Vec<Command>)` request and under the real forwarding variant's name. None
//! decodes, the connection is dropped, and the victim keeps what it holds. Oversized frames
//! drop the connection before and after the hello.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test peer_port
//! ```

use std::time::Duration;

use hivekeeper_coordinator::node::{ClusterConfig, ClusterState, Node, NodeConfig, NodeHandle};
use hivekeeper_coordinator::raft::RaftConfig;
use hivekeeper_coordinator::raft::transport::{HELLO_FRAME_MAX_BYTES, frame_max_bytes};
use hivekeeper_coordinator::{Command, LeaseId, Limits};
use hivekeeper_protocol::{
    Granted, Inspection, LeaseGranted, LeaseKept, LockMode, Op, Request, ResourceKind, Success,
    UnexpectedReply,
};
use hivekeeper_test_support::{free_port, within};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The hello as the transport writes it (field names: MessagePack maps).
#[derive(Serialize)]
struct Hello {
    cluster: &'static str,
    from: u64,
    to: u64,
}

#[derive(Debug, Deserialize, PartialEq)]
enum HelloReply {
    Welcome,
    Refused(String),
}

#[derive(Serialize)]
struct Envelope<T> {
    id: u64,
    body: T,
}

/// A peer request that carries any `Command`, internal ones included: it must not decode.
#[derive(Serialize)]
enum OldPeerRequest {
    Propose(Vec<Command>),
}

/// The real forwarding variant's name with an internal command inside: it must not decode
/// either.
#[derive(Serialize)]
enum ForgedWrites {
    Writes(Vec<Command>),
}

/// One member alone in its cluster: it leads, and listens on a peer port.
/// `name` differs per test: tests share a process, and ractor's actor names carry the node id.
async fn start_member(dir: &tempfile::TempDir, name: &str) -> (Node, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let config = NodeConfig {
        data_dir: dir.path().to_path_buf(),
        cluster: Some(ClusterConfig {
            name: name.into(),
            initial_cluster: format!("{name}={addr}"),
            initial_cluster_state: ClusterState::New,
            peer_listen: None,
            peer_tls_cert: None,
            peer_tls_key: None,
            peer_ca: None,
        }),
        ..NodeConfig::default()
    };
    let (node, mut outbound) = Node::start(config).await.expect("the member starts");
    tokio::spawn(async move { while outbound.recv().await.is_some() {} });
    within(10, "the member leads", async {
        while !node.handle().is_leader() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    (node, addr)
}

fn request(id: &str, op: Op) -> Request {
    Request { id: id.into(), op }
}

/// The answer of shape `T` to `op`; panics on a refusal or another shape.
async fn success<T>(node: &NodeHandle, agent: &str, id: &str, op: Op) -> T
where
    T: TryFrom<Success, Error = UnexpectedReply>,
{
    match node.call(agent, request(id, op)).await.outcome {
        Ok(success) => T::try_from(success).unwrap_or_else(|error| panic!("{id}: {error}")),
        Err(error) => panic!("{id} refused: {error:?}"),
    }
}

async fn write_frame(stream: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let length = u32::try_from(body.len()).expect("a test frame fits a u32 length");
    stream.write_all(&length.to_be_bytes()).await?;
    stream.write_all(body).await
}

async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).await?;
    let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

/// Dials the member's peer port and says a correct hello, as any stranger could.
async fn welcomed(addr: &str, node: &NodeHandle) -> TcpStream {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("the peer port accepts");
    let hello = Hello {
        cluster: "hivekeeper",
        from: 4_242,
        to: node.node_id(),
    };
    let hello = rmp_serde::to_vec_named(&hello).expect("encodes");
    write_frame(&mut stream, &hello).await.expect("hello sent");
    let reply = within(5, "the hello reply", read_frame(&mut stream))
        .await
        .expect("a hello reply");
    let reply: HelloReply = rmp_serde::from_slice(&reply).expect("a hello reply decodes");
    assert_eq!(reply, HelloReply::Welcome);
    stream
}

/// The node closes the connection: the next read ends (EOF or reset), with no answer.
async fn assert_dropped(stream: &mut TcpStream, what: &str) {
    let mut byte = [0u8; 1];
    let read = within(5, what, stream.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "{what}: the connection answered instead of closing ({read:?})"
    );
}

/// Sends `body` in an envelope on a welcomed connection and expects it dropped.
async fn forge<T: Serialize>(addr: &str, node: &NodeHandle, body: T, what: &str) {
    let mut stream = welcomed(addr, node).await;
    let frame = rmp_serde::to_vec_named(&Envelope { id: 1, body }).expect("encodes");
    write_frame(&mut stream, &frame).await.expect("frame sent");
    assert_dropped(&mut stream, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_internal_commands_do_not_decode_and_the_victim_keeps_what_it_holds() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (node, addr) = start_member(&dir, "forge1").await;
    let handle = node.handle();
    // The victim keeps a 2 s lease alive with keepalives every 200 ms (which are not log
    // entries)...
    let lease = success::<LeaseGranted>(
        &handle,
        "victim",
        "g1",
        Op::LeaseGrant {
            ttl_ms: 2_000,
            lock_delay_ms: 0,
        },
    )
    .await
    .lease;
    let lease_id = LeaseId::parse(&lease).expect("a lease id");
    let keepalives = tokio::spawn({
        let (handle, lease) = (handle.clone(), lease.clone());
        async move {
            for round in 0..400 {
                let keepalive = Op::LeaseKeepalive {
                    lease: lease.clone(),
                };
                let _ = handle
                    .call("victim", request(&format!("k{round}"), keepalive))
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    // ...so that after 2.2 s the machine's clock (moved by the next entry) is past its first
    // TTL: the machine alone would let an `ExpireLeases` naming it end it. Only the leader's
    // keeper, which saw the keepalives, may propose that, and it does not.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let holder = success::<LeaseGranted>(
        &handle,
        "holder",
        "g2",
        Op::LeaseGrant {
            ttl_ms: 60_000,
            lock_delay_ms: 0,
        },
    )
    .await
    .lease;
    let lock = |lease: &str, wait_ms| Op::LockAcquire {
        name: "dock".into(),
        lease: lease.to_string(),
        wait_ms,
        max_hold_ms: None,
        mode: LockMode::Exclusive,
    };
    success::<Granted>(&handle, "holder", "a1", lock(&holder, None)).await;
    // The victim waits for the lock, without a wait_ms: only a grant or its lease ends it.
    let waiting = tokio::spawn({
        let handle = handle.clone();
        let lease = lease.clone();
        async move {
            handle
                .call("victim", request("w1", lock(&lease, None)))
                .await
        }
    });
    let inspect = Op::Inspect {
        kind: ResourceKind::Lock,
        name: "dock".into(),
    };
    hivekeeper_test_support::eventually(5, "the victim queued", async || {
        let seen: Inspection = success(&handle, "tester", "i0", inspect.clone()).await;
        seen.waiters.len() == 1
    })
    .await;

    let expire = Command::ExpireLeases {
        term: u64::MAX,
        leases: vec![lease_id],
    };
    forge(
        &addr,
        &handle,
        OldPeerRequest::Propose(vec![expire.clone()]),
        "a forged ExpireLeases { term: u64::MAX }",
    )
    .await;
    forge(
        &addr,
        &handle,
        OldPeerRequest::Propose(vec![Command::CancelWait {
            agent: "victim".into(),
            request_id: "w1".into(),
        }]),
        "a forged CancelWait",
    )
    .await;
    let mut tight = Limits::DEFAULTS;
    tight.leases_max = 2;
    forge(
        &addr,
        &handle,
        OldPeerRequest::Propose(vec![Command::Configure {
            limits: tight,
            kv: None,
        }]),
        "a forged Configure",
    )
    .await;
    forge(
        &addr,
        &handle,
        ForgedWrites::Writes(vec![
            expire,
            Command::ExpireWaits { term: u64::MAX },
            Command::ExpireHoldTimes { term: u64::MAX },
        ]),
        "internal commands in today's Writes",
    )
    .await;

    // The victim's lease is live (a keepalive is answered with its TTL), it still waits,
    // and the limits are the configured ones: a third lease is granted, which the forged
    // `leases_max: 2` would have refused.
    let kept: LeaseKept = success(&handle, "victim", "kx", Op::LeaseKeepalive { lease }).await;
    assert_eq!(kept.ttl_ms, 2_000);
    let seen: Inspection = success(&handle, "tester", "i1", inspect).await;
    let waiters: Vec<String> = seen
        .waiters
        .into_iter()
        .map(|waiter| waiter.agent)
        .collect();
    assert_eq!(waiters, vec!["victim".to_string()]);
    assert!(!waiting.is_finished(), "the victim's wait was answered");
    success::<LeaseGranted>(
        &handle,
        "third",
        "g3",
        Op::LeaseGrant {
            ttl_ms: 60_000,
            lock_delay_ms: 0,
        },
    )
    .await;
    waiting.abort();
    keepalives.abort();
    node.shutdown().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_over_their_bound_drop_the_connection_before_and_after_the_hello() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (node, addr) = start_member(&dir, "bound1").await;
    let handle = node.handle();

    // Before the hello: a length prefix one byte over the hello bound, and no hello reply.
    let mut stream = TcpStream::connect(&addr)
        .await
        .expect("the peer port accepts");
    let over = u32::try_from(HELLO_FRAME_MAX_BYTES + 1).expect("small");
    stream
        .write_all(&over.to_be_bytes())
        .await
        .expect("prefix sent");
    assert_dropped(&mut stream, "an oversized hello").await;

    // After a welcome: one byte over the connection's bound (the prefix alone: the node
    // refuses it without reading or reserving the body).
    let mut stream = welcomed(&addr, &handle).await;
    let bound = frame_max_bytes(&RaftConfig::DEFAULTS);
    let over = u32::try_from(bound + 1).expect("the default bound fits a u32 length");
    stream
        .write_all(&over.to_be_bytes())
        .await
        .expect("prefix sent");
    assert_dropped(&mut stream, "an oversized frame").await;

    // A stranger's garbage after the hello, too.
    let mut stream = welcomed(&addr, &handle).await;
    write_frame(&mut stream, b"\xc1\xff not msgpack")
        .await
        .expect("frame sent");
    assert_dropped(&mut stream, "an undecodable frame").await;

    // The node serves on.
    let reply = handle
        .call(
            "agent",
            request(
                "g1",
                Op::LeaseGrant {
                    ttl_ms: 60_000,
                    lock_delay_ms: 0,
                },
            ),
        )
        .await;
    assert!(reply.outcome.is_ok(), "{reply:?}");
    node.shutdown().await.expect("stops");
}
