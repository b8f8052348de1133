//! A plain MQTT client for the tools that must not act as the SDK does: the bench's flooder
//! (the SDK backs off on `rate_limited`) and the nemesis's sentinels (the SDK leaves a member
//! that answers `unavailable`). One place sets what both need: a clean session, TCP_NODELAY
//! (without it, a request waits ~40 ms for a delayed ACK) and a bounded connect.

use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, NetworkOptions, Packet, QoS};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Error;

/// A client of `broker` (`host:port`) under the client id `agent`, not yet connected: the
/// connection is made, and remade after an error, by polling the event loop.
pub fn client(
    broker: &str,
    agent: &str,
    keep_alive: Duration,
    connect_timeout_s: u64,
    capacity: usize,
) -> Result<(AsyncClient, EventLoop), Error> {
    let (host, port) = broker
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_string(), port.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::NotHostPort {
            broker: broker.to_string(),
        })?;
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

/// Polls `eventloop` on a task of its own: subscribes to `response_topic` after every ConnAck
/// (the session is clean), says on `subscribed` whether the current connection is subscribed,
/// hands each publish's payload to `on_response` until it returns `false`, and retries a failed
/// connection every 50 ms.
pub fn poll_responses(
    mut eventloop: EventLoop,
    client: AsyncClient,
    response_topic: String,
    subscribed: watch::Sender<bool>,
    mut on_response: impl FnMut(&[u8]) -> bool + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    // try_: never block the polling task on its own request channel.
                    let _ = client.try_subscribe(response_topic.clone(), QoS::AtLeastOnce);
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = subscribed.send(true);
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    if !on_response(&publish.payload) {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = subscribed.send(false);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}
