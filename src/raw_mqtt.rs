//! A plain MQTT client for the tools that must not act as the SDK does: the bench's flooder
//! (the SDK backs off on `rate_limited`) and the nemesis's sentinels (the SDK leaves a member
//! that answers `unavailable`). One place sets what both need: a clean session, TCP_NODELAY
//! (without it, a request waits ~40 ms for a delayed ACK) and a bounded connect.

use std::time::Duration;

use anyhow::Context as _;
use rumqttc::{AsyncClient, EventLoop, MqttOptions, NetworkOptions};

/// A client of `broker` (`host:port`) under the client id `agent`, not yet connected: the
/// connection is made, and remade after an error, by polling the event loop.
pub fn client(
    broker: &str,
    agent: &str,
    keep_alive: Duration,
    connect_timeout_s: u64,
    capacity: usize,
) -> anyhow::Result<(AsyncClient, EventLoop)> {
    let (host, port) = broker
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_string(), port.parse::<u16>().ok()?)))
        .with_context(|| format!("broker {broker:?} is not host:port"))?;
    let mut options = MqttOptions::new(agent, host, port);
    options.set_keep_alive(keep_alive);
    options.set_clean_session(true);
    options.set_max_packet_size(64 * 1024, 64 * 1024);
    let (client, mut eventloop) = AsyncClient::new(options, capacity);
    let mut network = NetworkOptions::new();
    network.set_tcp_nodelay(true);
    network.set_connection_timeout(connect_timeout_s);
    eventloop.set_network_options(network);
    Ok((client, eventloop))
}
