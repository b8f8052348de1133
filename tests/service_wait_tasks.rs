//! A granted wait must not leave work behind in the node. The bridge answers each request in a
//! task; a queued acquire's task times its `wait_ms`, and must end when the grant comes: a task
//! that slept out the whole wait would keep one live task (about 6 KB) per grant for `wait_ms`,
//! which a contended bench turns into tens of megabytes (docs/BENCHMARKS.md, "Scale after the
//! wait-timer fix"). This runs the service in this test's own runtime, so its tasks can be
//! counted.

mod common;

use std::time::Duration;

use common::{agent_session, eventually, wait_for_waiters, within};
use hivekeeper::Service;
use hivekeeper_agent::{Resource, Wait};
use hivekeeper_coordinator::node::NodeConfig;
use hivekeeper_mqtt::Mode;

/// Handovers done through queued acquires with a long wait.
const HANDOVERS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_wait_ends_its_timer_task() {
    let data_dir = tempfile::tempdir().unwrap();
    let node = NodeConfig {
        data_dir: data_dir.path().to_path_buf(),
        ..NodeConfig::default()
    };
    let mut mqtt = hivekeeper_mqtt::Config::default();
    if let Mode::Embedded(embedded) = &mut mqtt.mode {
        embedded.listen = "127.0.0.1:0".parse().unwrap();
    }
    let service = Service::start(node, mqtt).await.unwrap();
    let port = service.mqtt_addrs()[0].port();

    let (observer, a) = agent_session("wait-a", port, 10_000).await;
    let (_b, b) = agent_session("wait-b", port, 10_000).await;
    let lock = Resource::lock("tasks/one");
    let mut held = within(10, "a takes the lock", a.acquire(lock.clone(), Wait::Try))
        .await
        .unwrap();
    // Every agent task and connection is running now; what is left is the bridge's.
    let runtime = tokio::runtime::Handle::current().metrics();
    let baseline = runtime.num_alive_tasks();

    // A long wait: a task that slept out its wait would stay alive ten minutes after each grant
    // below.
    let long = Wait::AtMost(Duration::from_secs(600));
    let sessions = [(&a, "wait-a"), (&b, "wait-b")];
    for round in 0..HANDOVERS {
        let (next, next_id) = sessions[(round + 1) % 2];
        let waiting = tokio::spawn({
            let (next, lock, long) = (next.clone(), lock.clone(), long);
            async move { next.acquire(lock, long).await }
        });
        // The acquire is queued behind `held` before it is released.
        wait_for_waiters(&observer, "tasks/one", &[next_id.to_string()]).await;
        within(10, "release", held.release()).await.unwrap();
        held = within(10, "the queued acquire is granted", waiting)
            .await
            .unwrap()
            .unwrap();
    }

    // Each grant's answering task ends with its answer. Other tasks come and go (resends,
    // keepalives), so the bound leaves room for a few, far below one per grant.
    let settled = eventually(10, "the wait timers end with their grants", || async {
        let alive = runtime.num_alive_tasks();
        (alive <= baseline + HANDOVERS / 4).then_some(alive)
    })
    .await;
    eprintln!("alive tasks: {baseline} before, {settled} after {HANDOVERS} granted waits");

    within(10, "release", held.release()).await.unwrap();
    drop((a, b, observer, _b));
    service.shutdown().await.unwrap();
}
