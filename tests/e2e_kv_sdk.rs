//! The Rust SDK's keys and watches against real `hivekeeper serve` processes over MQTT: the
//! SDK's own tests play the service with a fake, since the SDK must not depend on the
//! coordinator; these run the real one.
//!
//! - `Kv`: put, get, get_prefix over several pages, delete, delete_prefix and a txn on both
//!   branches, each answer with its revision; a bad key refused before sending.
//! - `Kv::put_leased`: the key vanishes with the session's lease; without a session it is
//!   refused.
//! - `Watch`: puts and deletes in revision order, one item per revision (a txn's two events
//!   together), a bookmark on an idle prefix, and a stream that goes on, without a gap or a
//!   repeat, after the member it was polling is killed in a three-member cluster; a cursor
//!   older than the kept history yields `AgentError::Compacted` and ends the stream.
//! - `KvCache`: a prefix's local map follows puts, deletes and a leased key's end.

mod common;

use std::collections::BTreeMap;

use common::cluster::ProcessCluster;
use common::{Node, agent, agent_session, eventually, within};
use futures_util::StreamExt;
use hivekeeper_agent::protocol::ErrorCode;
use hivekeeper_agent::protocol::kv::{CompareOp, EventKind, KvEvent, Put, TxnResult};
use hivekeeper_agent::{AgentError, Kv, KvCache, Txn, Watch, WatchItem};

/// The next item of `watch`, within 20 s; it must be one.
async fn next_item(watch: &mut Watch) -> WatchItem {
    within(20, "the next watch item", watch.next())
        .await
        .expect("the watch goes on")
        .unwrap_or_else(|e| panic!("watch item: {e}"))
}

/// The next changes of `watch`, bookmarks skipped.
async fn next_changes(watch: &mut Watch) -> (u64, Vec<KvEvent>) {
    loop {
        if let WatchItem::Changes { revision, events } = next_item(watch).await {
            return (revision, events);
        }
    }
}

/// `(kind, key, value)` of each event, to compare in one assert.
fn summary(events: &[KvEvent]) -> Vec<(EventKind, String, String)> {
    events
        .iter()
        .map(|e| (e.kind, e.kv.key.clone(), e.kv.value.clone()))
        .collect()
}

async fn put(kv: &Kv, key: &str, value: &str) -> u64 {
    within(20, key, kv.put(key, value))
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"))
        .revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_delete_and_txn_through_the_sdk() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let kv = agent("kv-writer", node.mqtt_port()).await.kv();

    let first = put(&kv, "hive/config/rate", "10").await;
    let with_prev = Put {
        prev_kv: true,
        ..hivekeeper_agent::kv::put("hive/config/rate", "20")
    };
    let done = within(20, "put with prev_kv", kv.put_with(with_prev))
        .await
        .expect("the put succeeds");
    assert!(done.revision > first);
    assert_eq!(done.prev_kv.map(|prev| prev.value), Some("10".into()));

    let read = within(20, "get", kv.get("hive/config/rate"))
        .await
        .expect("get");
    let rate = read.kv.expect("the key exists");
    assert_eq!(
        (
            rate.value.as_str(),
            rate.version,
            rate.create_revision,
            rate.mod_revision
        ),
        ("20", 2, first, done.revision)
    );
    assert!(read.revision >= done.revision);
    let missing = within(20, "get", kv.get("hive/none")).await.expect("get");
    assert_eq!(missing.kv, None);

    // 25 keys read three at a time: get_prefix pages through them all, in byte order.
    for n in 0..25 {
        put(&kv, &format!("fleet/d{n:02}"), &n.to_string()).await;
    }
    let page = within(20, "a page", kv.get_page("fleet/", None, Some(3)))
        .await
        .expect("a page");
    assert_eq!(
        (page.kvs.len(), page.next_after.as_deref()),
        (3, Some("fleet/d02"))
    );
    let all = within(20, "get_prefix", kv.get_prefix("fleet/"))
        .await
        .expect("all");
    let keys: Vec<String> = all.kvs.iter().map(|kv| kv.key.clone()).collect();
    let want: Vec<String> = (0..25).map(|n| format!("fleet/d{n:02}")).collect();
    assert_eq!(keys, want);

    // A counter by txn: the increment from version 2 succeeds once; a second one from the
    // same version fails and reads the key in the same revision.
    let increment = Txn::new()
        .if_version("hive/config/rate", CompareOp::Eq, 2)
        .then_put("hive/config/rate", "21")
        .else_get("hive/config/rate");
    let won = within(20, "txn", kv.txn(increment.clone()))
        .await
        .expect("txn");
    assert!(won.succeeded, "{won:?}");
    let lost = within(20, "txn", kv.txn(increment)).await.expect("txn");
    assert!(!lost.succeeded && lost.revision >= won.revision, "{lost:?}");
    match &lost.results[..] {
        [TxnResult::Get(page)] => assert_eq!(page.kvs[0].value, "21"),
        other => panic!("the failure branch's get: {other:?}"),
    }

    let deleted = within(20, "delete", kv.delete("hive/config/rate"))
        .await
        .expect("delete");
    assert_eq!(deleted.deleted, 1);
    let deleted = within(20, "delete_prefix", kv.delete_prefix("fleet/"))
        .await
        .expect("delete_prefix");
    assert_eq!(deleted.deleted, 25);

    // Refused by the SDK with the service's code, nothing sent.
    match kv.put("", "x").await {
        Err(AgentError::Service { code, .. }) => assert_eq!(code, ErrorCode::BadRequest),
        other => panic!("an empty key: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_key_vanishes_with_its_session() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let (drone, session) = agent_session("drone-1", node.mqtt_port(), 3_000).await;
    let observer = agent("observer", node.mqtt_port()).await.kv();

    let kv = session.kv();
    assert_eq!(kv.lease(), Some(session.lease()));
    let done = within(20, "put_leased", kv.put_leased("presence/drone-1", "up"))
        .await
        .expect("put_leased");
    let here = within(20, "get", observer.get("presence/drone-1"))
        .await
        .expect("get");
    let here = here.kv.expect("the presence key exists");
    assert_eq!(
        (here.lease.as_deref(), here.mod_revision),
        (Some(session.lease()), done.revision)
    );

    // Without a session there is no lease to bind to.
    assert_eq!(
        drone.kv().put_leased("presence/drone-1", "up").await,
        Err(AgentError::NoSession)
    );

    within(20, "revoke", session.revoke())
        .await
        .expect("revoke");
    let gone = within(20, "get", observer.get("presence/drone-1"))
        .await
        .expect("get");
    assert_eq!(gone.kv, None, "the lease's end deleted its key");
    assert!(matches!(
        kv.put_leased("presence/drone-1", "up").await,
        Err(AgentError::Lost(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_changes_in_order_and_bookmarks_when_idle() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let kv = agent("watcher", node.mqtt_port()).await.kv();
    let writer = agent("writer", node.mqtt_port()).await.kv();

    let start = within(20, "get", kv.get_prefix("hive/"))
        .await
        .expect("get")
        .revision;
    let mut watch = kv.watch_prefix("hive/").after(start).wait_ms(500);
    // Nothing has changed: the first answer is a bookmark, and the cursor moves with it.
    match next_item(&mut watch).await {
        WatchItem::Progress { revision } => assert!(revision >= start),
        other => panic!("an idle prefix answers a bookmark: {other:?}"),
    }

    let a = put(&writer, "hive/a", "1").await;
    put(&writer, "other/x", "not watched").await;
    let txn = Txn::new().then_put("hive/b", "2").then_delete("hive/a");
    let txn = within(20, "txn", writer.txn(txn)).await.expect("txn");

    let (revision, events) = next_changes(&mut watch).await;
    assert_eq!(revision, a);
    assert_eq!(
        summary(&events),
        vec![(EventKind::Put, "hive/a".into(), "1".into())]
    );
    // The txn's two changes come together, in its order.
    let (revision, events) = next_changes(&mut watch).await;
    assert_eq!(revision, txn.revision);
    assert_eq!(
        summary(&events),
        vec![
            (EventKind::Put, "hive/b".into(), "2".into()),
            (EventKind::Delete, "hive/a".into(), "1".into()),
        ]
    );
    assert_eq!(watch.cursor(), txn.revision);

    // A watch started again from the cursor repeats nothing: its next change is a new one.
    drop(watch);
    let mut events = kv
        .watch_key("hive/b")
        .after(txn.revision)
        .wait_ms(500)
        .events();
    let c = put(&writer, "hive/b", "3").await;
    let event = within(20, "the next event", events.next())
        .await
        .expect("the watch goes on")
        .expect("an event");
    assert_eq!((event.revision, event.kv.value.as_str()), (c, "3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_cache_follows_a_prefix() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let writer = agent("config-writer", node.mqtt_port()).await.kv();
    put(&writer, "hive/config/rate", "10").await;
    put(&writer, "hive/config/mode", "survey").await;

    let sensor = agent("sensor", node.mqtt_port()).await.kv();
    let cache = within(20, "cache", KvCache::start(&sensor, "hive/config/"))
        .await
        .expect("the cache starts");
    assert_eq!(
        cache.get("hive/config/rate").map(|kv| kv.value),
        Some("10".into())
    );

    let (_, session) = agent_session("drone-2", node.mqtt_port(), 3_000).await;
    let leased = within(
        20,
        "put_leased",
        session.kv().put_leased("hive/config/drone-2", "on"),
    )
    .await
    .expect("put_leased");
    put(&writer, "hive/config/rate", "20").await;
    let deleted = within(20, "delete", writer.delete("hive/config/mode"))
        .await
        .expect("delete");
    within(20, "the cache catches up", cache.wait_for(deleted.revision))
        .await
        .expect("it follows");
    let snapshot = cache.snapshot();
    assert!(snapshot.revision >= deleted.revision);
    let values: BTreeMap<String, String> = snapshot
        .kvs
        .into_iter()
        .map(|(key, kv)| (key, kv.value))
        .collect();
    assert_eq!(
        values,
        BTreeMap::from([
            ("hive/config/drone-2".to_string(), "on".to_string()),
            ("hive/config/rate".to_string(), "20".to_string()),
        ])
    );
    assert!(leased.revision < deleted.revision);

    // The lease's end deletes its key, and the cache sees the delete.
    within(20, "revoke", session.revoke())
        .await
        .expect("revoke");
    eventually(20, "the leased key leaves the cache", || async {
        cache.get("hive/config/drone-2").is_none().then_some(())
    })
    .await;
    assert_eq!(cache.error(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_goes_on_without_a_gap_after_its_member_is_killed() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let polled = (leader + 1) % 3;
    // The watcher's first broker is a follower's; the writer's is the leader's.
    let kv = cluster.agent("watcher", polled).await.kv();
    let writer = cluster.agent("writer", leader).await.kv();

    let start = within(20, "get", kv.get_prefix("mission/"))
        .await
        .expect("get")
        .revision;
    let mut watch = kv.watch_prefix("mission/").after(start).wait_ms(1_000);
    let mut written = Vec::new();
    for n in 0..3 {
        written.push(put(&writer, &format!("mission/{n}"), "before").await);
    }
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let (revision, _) = next_changes(&mut watch).await;
        seen.push(revision);
    }

    cluster.nodes[polled].kill9();
    for n in 3..6 {
        written.push(put(&writer, &format!("mission/{n}"), "after").await);
    }
    while seen.len() < 6 {
        let (revision, _) = within(60, "changes after the kill", next_changes(&mut watch)).await;
        seen.push(revision);
    }
    assert_eq!(
        seen, written,
        "every put once, in order, across the failover"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_behind_the_kept_history_yields_compacted_and_ends() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let kv = agent("bulk-writer", node.mqtt_port()).await.kv();
    let start = within(20, "get", kv.get_prefix("bulk/"))
        .await
        .expect("get")
        .revision;
    // 160 txns of 64 puts: 10,240 events, past the service's default history of 10,000.
    for round in 0..160 {
        let txn = (0..64).fold(Txn::new(), |txn, n| {
            txn.then_put(format!("bulk/{n:02}"), round.to_string())
        });
        within(20, "a bulk txn", kv.txn(txn))
            .await
            .expect("the txn");
    }
    let mut watch = kv.watch_prefix("bulk/").after(start);
    match within(20, "the first item", watch.next()).await {
        Some(Err(AgentError::Compacted { compact_revision })) => {
            assert!(compact_revision > start, "{compact_revision} > {start}");
        }
        other => panic!("a cursor before the kept history: {other:?}"),
    }
    assert!(
        within(20, "the end", watch.next()).await.is_none(),
        "compacted ends the stream"
    );
}
