//! Online backup end to end, over real `hivekeeper serve` processes: a three-member cluster
//! holds locks (one with a waiter), a semaphore and waypoints with several agents, and a few
//! hundred more locks over ten leases so the snapshot spans several pages;
//! `hivekeeper snapshot save` (through a follower) saves it; the cluster is stopped;
//! `hivekeeper snapshot restore` seeds three fresh data directories for a new member list; the
//! new cluster holds every lock, permit and reservation with its token, every waiter in its
//! place and every lease, and a new grant's token is above every restored one.
//!
//! ```text
//! cargo test --test e2e_backup
//! ```

mod common;

use std::collections::BTreeMap;

use common::cluster::{ProcessCluster, member_list};
use common::{CliRun, inspect, run_cli, within};
use hivekeeper_agent::protocol::{Area, HolderInfo, ResourceKind, WaiterInfo};
use hivekeeper_agent::{Agent, Guard, Session};
use serde_json::Value;

/// Long enough that no lease expires during the test, in either cluster.
const TTL_MS: u64 = 60_000;

/// Leases of the bulk agent, and locks per lease: enough state for several default pages.
const BULK_LEASES: usize = 10;
const BULK_LOCKS_PER_LEASE: usize = 20;

/// What `inspect` shows of one resource.
type Seen = (Vec<HolderInfo>, Vec<WaiterInfo>);

async fn session(agent: &Agent) -> Session {
    within(20, "a session", agent.session(TTL_MS))
        .await
        .unwrap_or_else(|e| panic!("{}: session: {e}", agent.agent_id()))
}

async fn granted(
    what: &str,
    acquire: impl std::future::Future<Output = Result<Guard, hivekeeper_agent::AgentError>>,
) -> Guard {
    within(20, what, acquire)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn cylinder(lat: f64, lon: f64) -> Option<Area> {
    Some(Area {
        lat,
        lon,
        radius_m: 30.0,
        alt_min_m: Some(0.0),
        alt_max_m: Some(120.0),
    })
}

/// An agent that does not resend a queued acquire during the test: a resend is a log entry,
/// and the test saves the same state twice.
async fn patient(cluster: &ProcessCluster, agent_id: &str, home: usize) -> Agent {
    let mut config = cluster.agent_config(agent_id, home);
    config.wait_resend_ms = 600_000;
    within(20, "a patient agent connects", Agent::connect(config))
        .await
        .unwrap_or_else(|e| panic!("{agent_id} connects: {e}"))
}

/// Every resource the test made, with what `inspect` shows of it.
async fn seen(observer: &Agent, resources: &[(ResourceKind, String)]) -> BTreeMap<String, Seen> {
    let mut seen = BTreeMap::new();
    for (kind, name) in resources {
        let shown = inspect(observer, *kind, name).await;
        seen.insert(format!("{}/{name}", kind.as_str()), shown);
    }
    seen
}

/// `hivekeeper ARGS --json`, succeeded, as JSON.
async fn cli_json(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    run_cli(&args).await.json()
}

/// `args` run as the `admin` account through `brokers`, its secret in `secret_file`.
fn as_admin<'a>(args: &[&'a str], brokers: &'a str, secret_file: &'a str) -> Vec<&'a str> {
    let login = [
        "--brokers",
        brokers,
        "--user",
        "admin",
        "--password-file",
        secret_file,
    ];
    [args, &login[..]].concat()
}

/// `snapshot restore FILE` for a single node into `dir/restored`; checks that it restored the
/// state `saved` (a `snapshot save --json`) named. Returns the directory and the answer.
async fn restore_single(
    file: &str,
    dir: &std::path::Path,
    saved: &Value,
) -> (std::path::PathBuf, Value) {
    let restored_dir = dir.join("restored");
    let restored_text = restored_dir.to_string_lossy().to_string();
    let restored = cli_json(&["snapshot", "restore", file, "--data-dir", &restored_text]).await;
    assert_eq!(restored["index"], saved["index"], "{restored}");
    (restored_dir, restored)
}

/// `hivekeeper snapshot restore FILE --data-dir DIR --name NAME --initial-cluster LIST`.
async fn restore(file: &str, dir: &str, name: &str, list: &str, json: bool) -> CliRun {
    let mut args = vec![
        "snapshot",
        "restore",
        file,
        "--data-dir",
        dir,
        "--name",
        name,
        "--initial-cluster",
        list,
    ];
    if json {
        args.push("--json");
    }
    run_cli(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_snapshot_restores_into_a_new_cluster_with_every_hold_and_its_token() {
    let cluster = ProcessCluster::start(3, &[]).await;
    let leader = cluster.leader(30).await;
    let follower = (leader + 1) % 3;
    let brokers = format!("127.0.0.1:{}", cluster.mqtt_ports()[follower]);

    // Locks: door/1 held with a waiter, door/2 held.
    let lock_a = cluster.agent("lock-a", 0).await;
    let lock_a_session = session(&lock_a).await;
    let _door_1 = granted("door/1", lock_a_session.lock("door/1")).await;
    let lock_b = cluster.agent("lock-b", 1).await;
    let lock_b_session = session(&lock_b).await;
    let _door_2 = granted("door/2", lock_b_session.lock("door/2")).await;
    let lock_c = patient(&cluster, "lock-c", 2).await;
    let lock_c_session = session(&lock_c).await;
    let waiting_lock = tokio::spawn(async move { lock_c_session.lock("door/1").await.map(|_| ()) });
    // A semaphore of 3: two agents hold 2 + 1 permits.
    let sem_1 = cluster.agent("sem-1", 0).await;
    let sem_1_session = session(&sem_1).await;
    let _permits_1 = granted("chargers x2", sem_1_session.semaphore("chargers", 3, 2)).await;
    let sem_2 = cluster.agent("sem-2", 1).await;
    let sem_2_session = session(&sem_2).await;
    let _permits_2 = granted("chargers x1", sem_2_session.semaphore("chargers", 3, 1)).await;
    // Waypoints: two drones hold pads 111 m apart; a third waits for a pad 8 m from pad-1.
    let drone_1 = cluster.agent("drone-1", 0).await;
    let drone_1_session = session(&drone_1).await;
    let _pad_1 = granted(
        "pad-1",
        drone_1_session.reserve_waypoint("pad-1", cylinder(47.0, 8.0)),
    )
    .await;
    let drone_2 = cluster.agent("drone-2", 1).await;
    let drone_2_session = session(&drone_2).await;
    let _pad_2 = granted(
        "pad-2",
        drone_2_session.reserve_waypoint("pad-2", cylinder(47.001, 8.0)),
    )
    .await;
    let drone_3 = patient(&cluster, "drone-3", 2).await;
    let drone_3_session = session(&drone_3).await;
    let waiting_pad = tokio::spawn(async move {
        drone_3_session
            .reserve_waypoint("pad-3", cylinder(47.0, 8.0001))
            .await
            .map(|_| ())
    });
    // Bulk: ten leases of one agent, twenty locks each, with long names.
    let bulk = cluster.agent("bulk", 2).await;
    let mut bulk_guards = Vec::new();
    let mut resources = vec![
        (ResourceKind::Lock, "door/1".to_string()),
        (ResourceKind::Lock, "door/2".to_string()),
        (ResourceKind::Sem, "chargers".to_string()),
        (ResourceKind::Waypoint, "pad-1".to_string()),
        (ResourceKind::Waypoint, "pad-2".to_string()),
        (ResourceKind::Waypoint, "pad-3".to_string()),
    ];
    for lease in 0..BULK_LEASES {
        let bulk_session = session(&bulk).await;
        for lock in 0..BULK_LOCKS_PER_LEASE {
            let name = format!("bulk/{lease:02}/{lock:02}/{}", "x".repeat(100));
            bulk_guards.push(granted(&name, bulk_session.lock(name.clone())).await);
            resources.push((ResourceKind::Lock, name));
        }
    }

    // The two waiters are in their queues before the backup.
    let observer = cluster.agent("observer", follower).await;
    common::eventually(20, "both waiters queued", || async {
        let (_, lock_waiters) = inspect(&observer, ResourceKind::Lock, "door/1").await;
        let (_, pad_waiters) = inspect(&observer, ResourceKind::Waypoint, "pad-3").await;
        (lock_waiters.len() == 1 && pad_waiters.len() == 1).then_some(())
    })
    .await;
    let before = seen(&observer, &resources).await;
    let tokens_before: Vec<u64> = before
        .values()
        .flat_map(|(holders, _)| holders.iter().map(|holder| holder.token))
        .collect();
    assert_eq!(
        tokens_before.len(),
        2 + 2 + 2 + BULK_LEASES * BULK_LOCKS_PER_LEASE
    );
    let ls_before = cli_json(&["ls", "--limit", "1000", "--brokers", &brokers]).await;
    let leases_before = cli_json(&["leases", "--brokers", &brokers]).await;

    // Save, through a follower (it forwards every page to the leader): default pages, and
    // 1 KiB pages (dozens of them) of the same state.
    let files = tempfile::tempdir().expect("a temp dir");
    let file = files.path().join("backup.hkb");
    let file_text = file.to_string_lossy().to_string();
    let saved = cli_json(&["snapshot", "save", &file_text, "--brokers", &brokers]).await;
    let bytes = saved["bytes"].as_u64().expect("bytes");
    assert!(
        bytes > 2 * 32 * 1024,
        "{bytes} bytes: more than two default pages"
    );
    // Three lock agents, two semaphore agents, three drones, and the bulk agent's leases.
    assert_eq!(saved["leases"], 3 + 2 + 3 + BULK_LEASES, "{saved}");
    assert_eq!(saved["resources"], resources.len(), "{saved}");
    let index = saved["index"].as_u64().expect("index");
    let small = files.path().join("small-pages.hkb");
    let small_text = small.to_string_lossy().to_string();
    let saved_small = cli_json(&[
        "snapshot",
        "save",
        &small_text,
        "--page-bytes-max",
        "1024",
        "--brokers",
        &brokers,
    ])
    .await;
    assert_eq!(
        saved_small["index"], index,
        "nothing was written in between"
    );
    assert_eq!(
        std::fs::read(&small).expect("read"),
        std::fs::read(&file).expect("read"),
        "1 KiB pages join into the same file"
    );
    assert!(!files.path().join("backup.hkb.tmp").exists());

    // The old cluster and its agents go away (the agents first: none may reach the new one).
    waiting_lock.abort();
    waiting_pad.abort();
    drop((
        bulk_guards,
        _door_1,
        _door_2,
        _permits_1,
        _permits_2,
        _pad_1,
        _pad_2,
    ));
    drop((lock_a_session, lock_b_session, sem_1_session, sem_2_session));
    drop((drone_1_session, drone_2_session));
    drop((
        lock_a, lock_b, lock_c, sem_1, sem_2, drone_1, drone_2, drone_3, bulk, observer,
    ));
    drop(cluster);

    // A damaged file is refused with its reason, and nothing is seeded.
    let new_root = tempfile::tempdir().expect("a temp dir");
    let list = member_list(3);
    let mut truncated = std::fs::read(&file).expect("read");
    truncated.truncate(truncated.len() - 10);
    let truncated_file = files.path().join("truncated.hkb");
    std::fs::write(&truncated_file, truncated).expect("write");
    let n1_dir = new_root.path().join("n1").to_string_lossy().to_string();
    let refused = restore(
        &truncated_file.to_string_lossy(),
        &n1_dir,
        "n1",
        &list,
        false,
    )
    .await;
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("bytes of state follow it, but")
            && refused.stderr.contains("truncated"),
        "{}",
        refused.stderr
    );
    assert!(!new_root.path().join("n1").exists());

    // Restore every member of a new cluster (new names' addresses) from the one file.
    for name in ["n1", "n2", "n3"] {
        let dir = new_root.path().join(name).to_string_lossy().to_string();
        let restored = restore(&file_text, &dir, name, &list, true).await.json();
        assert_eq!(restored["index"], index, "{restored}");
        assert_eq!(restored["leases"], saved["leases"], "{restored}");
        assert_eq!(restored["resources"], saved["resources"], "{restored}");
    }
    // A directory with data in it is refused.
    let again = restore(&file_text, &n1_dir, "n1", &list, false).await;
    assert!(!again.success);
    assert!(
        again.stderr.contains("already holds data"),
        "{}",
        again.stderr
    );

    let restored = ProcessCluster::start_on(new_root, &list, &[]).await;
    let brokers = format!("127.0.0.1:{}", restored.mqtt_ports()[0]);
    let observer = restored.agent("observer", 1).await;
    let after = seen(&observer, &resources).await;
    assert_eq!(
        after, before,
        "every holder with its token, every waiter in its place"
    );
    assert_eq!(
        cli_json(&["ls", "--limit", "1000", "--brokers", &brokers]).await,
        ls_before
    );
    let leases_after = cli_json(&["leases", "--brokers", &brokers]).await;
    let ids = |leases: &Value| -> Vec<(String, String, u64)> {
        leases["leases"]
            .as_array()
            .expect("leases")
            .iter()
            .map(|lease| {
                (
                    lease["lease"].as_str().expect("id").to_string(),
                    lease["agent"].as_str().expect("agent").to_string(),
                    lease["ttl_ms"].as_u64().expect("ttl"),
                )
            })
            .collect()
    };
    assert_eq!(ids(&leases_after), ids(&leases_before));
    // The new leader keeps a deadline for every restored lease (a fresh TTL from when it
    // took office), so they end unless their agents come back and keep them alive.
    for lease in leases_after["leases"].as_array().expect("leases") {
        let remaining_ms = lease["remaining_ms"].as_u64().expect("a deadline");
        assert!(remaining_ms <= TTL_MS, "{lease}");
    }

    // A new grant's token is above every restored one.
    let late = restored.agent("late", 2).await;
    let late_session = session(&late).await;
    let door_3 = granted("door/3", late_session.lock("door/3")).await;
    let restored_max = tokens_before.iter().copied().max().expect("tokens");
    assert!(
        door_3.token() > restored_max,
        "new token {} is not above the restored {restored_max}",
        door_3.token()
    );
}

/// A single node whose MQTT packets are small (9 KiB): `snapshot save`'s default 32 KiB pages
/// are answered `too_large`, and the CLI halves them until they fit; the file is the one 4 KiB
/// pages give. Restored without `--name`, it seeds a single node that holds every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_packets_shrink_the_pages_and_a_single_node_restores() {
    const LOCKS: usize = 60;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("hivekeeper.toml");
    std::fs::write(&config, "[mqtt]\npacket_bytes_max = 9216\n").expect("config file");
    let config = config.to_str().expect("a UTF-8 path");
    let node = common::Node::start_with_args(&dir.path().join("data"), &["--config", config]).await;
    let brokers = format!("127.0.0.1:{}", node.mqtt_port());
    let (agent, holder) = common::agent_session("holder", node.mqtt_port(), TTL_MS).await;
    let mut guards = Vec::new();
    let mut resources = Vec::new();
    for lock in 0..LOCKS {
        let name = format!("long/{lock:02}/{}", "y".repeat(100));
        guards.push(granted(&name, holder.lock(name.clone())).await);
        resources.push((ResourceKind::Lock, name));
    }
    let before = seen(&agent, &resources).await;

    let file = dir.path().join("backup.hkb");
    let file_text = file.to_string_lossy().to_string();
    let saved = cli_json(&["snapshot", "save", &file_text, "--brokers", &brokers]).await;
    assert!(
        saved["bytes"].as_u64().expect("bytes") > 4 * 4096,
        "{saved}"
    );
    let small = dir.path().join("small.hkb");
    let small_text = small.to_string_lossy().to_string();
    cli_json(&[
        "snapshot",
        "save",
        &small_text,
        "--page-bytes-max",
        "4096",
        "--brokers",
        &brokers,
    ])
    .await;
    assert_eq!(
        std::fs::read(&file).expect("read"),
        std::fs::read(&small).expect("read")
    );
    drop((guards, holder, agent, node));

    let (restored_dir, restored) = restore_single(&file_text, dir.path(), &saved).await;
    assert_eq!(restored["resources"], LOCKS, "{restored}");
    let node = common::Node::start(&restored_dir).await;
    let observer = common::agent("observer", node.mqtt_port()).await;
    assert_eq!(seen(&observer, &resources).await, before);
}

/// With authentication: a backup needs the admin role (an observer is refused `forbidden`:
/// the state holds every account's secret hash), and accounts are restored with the rest,
/// so the old admin secret works on the restored node, which writes no new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_needs_the_admin_role_and_restores_the_accounts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let node = common::Node::start_with_args(&data, &["--auth"]).await;
    let brokers = format!("127.0.0.1:{}", node.mqtt_port());
    let secret_file = data.join("admin.secret");
    let secret_text = secret_file.to_string_lossy().to_string();
    let added = cli_json(&as_admin(
        &["agent", "add", "watcher", "--role", "observer"],
        &brokers,
        &secret_text,
    ))
    .await;
    let observer_secret = added["secret"].as_str().expect("the secret").to_string();
    let mut watcher =
        common::Raw::connect_with(node.mqtt_port(), "watcher", Some(&observer_secret)).await;
    let refused = watcher
        .call(serde_json::json!({"id": "s1", "op": "admin.snapshot"}))
        .await;
    assert_eq!(common::code(&refused), Some("forbidden"), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("needs the admin role; agent \"watcher\" has the observer role"),
        "{refused}"
    );

    let file = dir.path().join("backup.hkb");
    let file_text = file.to_string_lossy().to_string();
    let saved = cli_json(&as_admin(
        &["snapshot", "save", &file_text],
        &brokers,
        &secret_text,
    ))
    .await;
    drop((watcher, node));

    let (restored_dir, _) = restore_single(&file_text, dir.path(), &saved).await;
    let node = common::Node::start_with_args(&restored_dir, &["--auth"]).await;
    let brokers = format!("127.0.0.1:{}", node.mqtt_port());
    // The old cluster's admin secret.
    let listed = cli_json(&as_admin(&["agent", "list"], &brokers, &secret_text)).await;
    let agents: Vec<&str> = listed["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .map(|account| account["agent"].as_str().expect("agent"))
        .collect();
    assert_eq!(agents, ["admin", "watcher"], "{listed}");
    assert!(
        !restored_dir.join("admin.secret").exists(),
        "the restored admin account keeps its secret: no new one is made"
    );
}
