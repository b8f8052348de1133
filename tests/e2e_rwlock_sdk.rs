//! The Rust SDK's read-write locks, multi-locks, max-hold and lock-delay against a real
//! `hivekeeper serve` over MQTT (the SDK's own tests play the service with a fake, which knows
//! none of them).
//!
//! - `Session::read_lock`: two readers hold a lock together; a `write_lock` waits for both,
//!   and a reader queued after the writer waits for the writer (FIFO); the writer's
//!   `Guard::downgrade` keeps its token and lets that reader in beside it.
//! - `Session::lock_all`: one guard holds every name with one token, valid on each; a single
//!   lock of one of its names in the same session is `AlreadyHeld`; dropping the guard frees
//!   every name, and a waiter on one of them is granted.
//! - `AcquireOptions::max_hold`: the service takes a live session's lock and permits at the
//!   deadline, and `Guard::ended` says `MaxHold` while the session lives on.
//! - `SessionOptions::lock_delay`: after an operator revokes the holder's lease, the next
//!   waiter is granted no earlier than the delay.

mod common;

use std::time::{Duration, Instant};

use common::{
    Node, agent, agent_session, fence_check, inspect_lock, release, wait_for_waiters, within,
};
use hivekeeper_agent::protocol::{Op, ResourceKind};
use hivekeeper_agent::{
    AcquireOptions, Agent, AgentError, Guard, HoldEnd, LockMode, Resource, Session, SessionOptions,
    SessionState, Wait,
};
use tokio::task::JoinHandle;

/// How long a queued acquire is watched for a grant it must not get yet.
const SILENCE: Duration = Duration::from_millis(400);

/// Takes the lock `name` in a task (`read`: shared, else exclusive), returned once the lock's
/// waiters, as `observer` sees them, are `waiters` (agent ids, in order).
async fn queued(
    observer: &Agent,
    session: &Session,
    name: &'static str,
    read: bool,
    waiters: &[&str],
) -> JoinHandle<Result<Guard, AgentError>> {
    let session = session.clone();
    let task = tokio::spawn(async move {
        if read {
            session.read_lock(name).await
        } else {
            session.write_lock(name).await
        }
    });
    let waiters: Vec<String> = waiters.iter().map(|w| w.to_string()).collect();
    wait_for_waiters(observer, name, &waiters).await;
    task
}

/// The guard a queued acquire was granted.
async fn granted(task: JoinHandle<Result<Guard, AgentError>>, what: &str) -> Guard {
    within(20, what, task)
        .await
        .expect("the acquire task ends")
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Asserts a queued acquire is still waiting.
async fn still_waiting(task: &JoinHandle<Result<Guard, AgentError>>, what: &str) {
    tokio::time::sleep(SILENCE).await;
    assert!(!task.is_finished(), "{what} must still wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_writer_waits_in_line_and_its_downgrade_lets_the_next_reader_in() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (_, reader_1) = agent_session("reader-1", port, 5_000).await;
    let (_, reader_2) = agent_session("reader-2", port, 5_000).await;
    let (_, writer) = agent_session("writer", port, 5_000).await;
    let (observer, reader_3) = agent_session("reader-3", port, 5_000).await;

    let read_1 = within(20, "reader-1", reader_1.read_lock("fleet/db"))
        .await
        .expect("reader-1 reads");
    let read_2 = within(20, "reader-2", reader_2.read_lock("fleet/db"))
        .await
        .expect("reader-2 reads beside reader-1");
    assert_ne!(
        read_1.token(),
        read_2.token(),
        "each reader has its own token"
    );
    assert_eq!(read_1.mode(), Some(LockMode::Shared));
    let (holders, _) = inspect_lock(&observer, "fleet/db").await;
    assert_eq!(holders.len(), 2, "{holders:?}");
    // A writer cannot even try its way in beside readers.
    let tried = writer.acquire(Resource::lock("fleet/db"), Wait::Try);
    assert_eq!(
        within(20, "try write", tried).await.err(),
        Some(AgentError::WouldBlock)
    );

    let write = queued(&observer, &writer, "fleet/db", false, &["writer"]).await;
    let read_3 = queued(
        &observer,
        &reader_3,
        "fleet/db",
        true,
        &["writer", "reader-3"],
    )
    .await;
    still_waiting(&read_3, "a reader behind a waiting writer").await;

    release(read_1, "reader-1 releases").await;
    still_waiting(&write, "the writer, while reader-2 reads").await;
    release(read_2, "reader-2 releases").await;
    let mut write = granted(write, "the writer is granted").await;
    assert_eq!(write.mode(), Some(LockMode::Exclusive));
    still_waiting(&read_3, "the reader, while the writer writes").await;

    let token = write.token();
    within(20, "downgrade", write.downgrade())
        .await
        .expect("the writer downgrades");
    assert_eq!(write.token(), token, "a downgrade keeps the token");
    assert_eq!(write.mode(), Some(LockMode::Shared));
    let read_3 = granted(read_3, "the reader behind the writer").await;
    assert!(read_3.token() > token);
    let (valid, _) = fence_check(&observer, ResourceKind::Lock, "fleet/db", token).await;
    assert!(valid, "the downgraded hold's token is still valid");
    // A shared hold is not downgraded again, and nothing is sent for it.
    let again = within(20, "downgrade again", write.downgrade()).await;
    assert!(
        matches!(again, Err(AgentError::NotDowngradable { .. })),
        "{again:?}"
    );
    release(write, "the downgraded writer releases").await;
    release(read_3, "reader-3 releases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_holds_every_name_with_one_token_and_its_drop_frees_them_all() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let (observer, holder) = agent_session("holder", port, 5_000).await;
    let (_, other) = agent_session("other", port, 5_000).await;

    let mut bays = within(
        20,
        "lock_all",
        holder.lock_all(["bay/1", "bay/2"], LockMode::Exclusive),
    )
    .await
    .expect("both bays at once");
    assert_eq!(bays.names(), ["bay/1".to_string(), "bay/2".to_string()]);
    for bay in ["bay/1", "bay/2"] {
        let (holders, _) = inspect_lock(&observer, bay).await;
        assert_eq!(holders.len(), 1, "{bay}: {holders:?}");
        assert_eq!(holders[0].token, bays.token(), "{bay}: one token for both");
        let (valid, _) = fence_check(&observer, ResourceKind::Lock, bay, bays.token()).await;
        assert!(valid, "{bay}");
    }
    // One claim per lock in a session: a single lock of one of its names overlaps it, and so
    // does another multi-lock naming one of them.
    let single = within(20, "lock bay/2", holder.lock("bay/2")).await;
    assert!(
        matches!(&single, Err(AgentError::AlreadyHeld { name, .. }) if name == "bay/2"),
        "{single:?}"
    );
    let overlap = holder.acquire(
        Resource::lock_all(["bay/3", "bay/1"], LockMode::Shared),
        Wait::Try,
    );
    let overlap = within(20, "lock_all bay/3 bay/1", overlap).await;
    assert!(
        matches!(&overlap, Err(AgentError::AlreadyHeld { name, .. }) if name == "bay/1"),
        "{overlap:?}"
    );
    // A multi-lock is no single exclusive lock: refused locally.
    let downgrade = within(20, "downgrade", bays.downgrade()).await;
    assert!(
        matches!(downgrade, Err(AgentError::NotDowngradable { .. })),
        "{downgrade:?}"
    );

    let waiting = queued(&observer, &other, "bay/2", false, &["other"]).await;
    let token = bays.token();
    drop(bays);
    let next = granted(waiting, "the waiter on bay/2").await;
    assert!(next.token() > token);
    let (holders, _) = inspect_lock(&observer, "bay/1").await;
    assert!(holders.is_empty(), "bay/1 is free: {holders:?}");
    // Both names are free in the holder's session again (the release is done).
    let again = within(
        20,
        "lock_all again",
        holder.lock_all(["bay/1"], LockMode::Shared),
    )
    .await
    .expect("bay/1 again");
    release(again, "bay/1").await;
    release(next, "bay/2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_ends_a_live_sessions_lock_and_permits_with_the_max_hold_reason() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let (observer, session) = agent_session("pump", node.mqtt_port(), 5_000).await;
    let max_hold = AcquireOptions::max_hold(Duration::from_millis(600));

    let lock = session.acquire_with(Resource::lock("pump-2"), Wait::UntilGranted, max_hold);
    let lock = within(20, "lock with max_hold", lock)
        .await
        .expect("granted");
    let permits = Resource::Semaphore {
        name: "chargers".into(),
        limit: 2,
        permits: 1,
    };
    let permits = session.acquire_with(permits, Wait::UntilGranted, max_hold);
    let permits = within(20, "permits with max_hold", permits)
        .await
        .expect("granted");
    let (lock_end, permits_end) = (lock.ended(), permits.ended());
    assert_eq!(
        within(20, "the lock's end", lock_end).await,
        HoldEnd::MaxHold
    );
    assert_eq!(
        within(20, "the permits' end", permits_end).await,
        HoldEnd::MaxHold
    );
    assert!(lock.is_lost() && permits.is_lost());
    assert_eq!(session.state(), SessionState::Live, "the lease lives on");
    let (holders, _) = inspect_lock(&observer, "pump-2").await;
    assert!(holders.is_empty(), "{holders:?}");
    // A reservation has no max-hold: refused before anything is sent.
    let waypoint = Resource::Waypoint {
        name: "pad-1".into(),
        geometry: None,
        window: Default::default(),
        priority: Default::default(),
    };
    let refused = session.acquire_with(waypoint, Wait::Try, max_hold).await;
    assert!(matches!(refused, Err(AgentError::Config(_))), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_the_lock_back_after_an_operator_revokes_the_holders_lease() {
    const LOCK_DELAY: Duration = Duration::from_millis(2_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let node = Node::start(dir.path()).await;
    let port = node.mqtt_port();
    let holder_agent = agent("holder", port).await;
    let options = SessionOptions {
        lock_delay: LOCK_DELAY,
    };
    let holder = within(20, "session", holder_agent.session_with(5_000, options))
        .await
        .expect("a session with a lock-delay");
    let (operator, next) = agent_session("next", port, 5_000).await;
    let held = within(20, "holder locks", holder.lock("pad-9"))
        .await
        .expect("held");
    let ended = held.ended();
    let waiting = queued(&operator, &next, "pad-9", false, &["next"]).await;

    let revoked_at = Instant::now();
    let revoke = Op::AdminRevoke {
        lease: holder.lease().to_string(),
    };
    within(20, "admin.revoke", operator.request(revoke))
        .await
        .expect("the operator revokes the holder's lease");
    let end = within(20, "the holder's end", ended).await;
    assert!(
        matches!(
            end,
            HoldEnd::Taken | HoldEnd::Session(SessionState::Expired)
        ),
        "{end:?}"
    );
    let next_guard = granted(waiting, "the next waiter").await;
    let after = revoked_at.elapsed();
    // The delay counts from the revoke's log entry, after the request was sent; the slack
    // only covers the wall clock (the service's) against the monotonic one (this test's).
    assert!(
        after >= LOCK_DELAY - Duration::from_millis(200),
        "granted {after:?} after the revoke, within the lock-delay of {LOCK_DELAY:?}"
    );
    release(next_guard, "the next holder").await;
}
