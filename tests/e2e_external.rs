//! End to end in external-broker mode: the test runs its own mosquitto on a free loopback
//! port, `hivekeeper serve --mqtt-url` connects to it, and the agents talk to mosquitto. The
//! same FIFO scenario as with the embedded broker must pass. Without mosquitto the test fails
//! (CI installs it): `apt-get install mosquitto`.

mod common;

use common::{Mosquitto, Node, fifo_scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_through_mosquitto() {
    let broker = Mosquitto::start().await;
    let dir = tempfile::tempdir().expect("temp data dir");
    let node = Node::start_external(dir.path(), broker.port).await;
    assert_eq!(node.mqtt_port(), broker.port);
    fifo_scenario(broker.port, "gateway/config").await;
}
