//! Request/response round-trip latency through the transport: an agent (rumqttc, TCP_NODELAY
//! on) publishes a QoS 1 request on `hk/v1/req/bench`, the transport echoes it as a response
//! on `hk/v1/rsp/bench`, 1,000 times one after another; prints p50/p90/p99/max.
//!
//! ```text
//! cargo run --release -p hivekeeper-mqtt --example latency                 # agent endpoint, TCP_NODELAY on accepted sockets
//! cargo run --release -p hivekeeper-mqtt --example latency -- --no-nodelay # agent endpoint without TCP_NODELAY
//! cargo run --release -p hivekeeper-mqtt --example latency -- --qos0       # QoS 0 requests
//! cargo run --release -p hivekeeper-mqtt --example latency -- --external mqtt://127.0.0.1:1883
//! ```
//!
//! Loopback only, bounded: `--count` round trips (default 1,000, at most 100,000) after 50
//! warm-up ones, each with a 5 s timeout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use std::sync::Arc;

use hivekeeper_mqtt::{
    Config, EmbeddedConfig, ExternalConfig, Flow, Inbound, InboundHandler, Mode, Transport,
};
use rumqttc::{AsyncClient, Event, MqttOptions, NetworkOptions, Packet, QoS};
use tokio::sync::mpsc;

const WARMUP_ROUND_TRIPS: usize = 50;
const ROUND_TRIPS_MAX: usize = 100_000;
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

struct Options {
    tcp_nodelay: bool,
    request_qos: QoS,
    external_url: Option<String>,
    count: usize,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut options = Options {
        tcp_nodelay: true,
        request_qos: QoS::AtLeastOnce,
        external_url: None,
        count: 1_000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-nodelay" => options.tcp_nodelay = false,
            "--qos0" => options.request_qos = QoS::AtMostOnce,
            "--external" => options.external_url = Some(args.next().context("--external URL")?),
            "--count" => {
                options.count = args.next().context("--count N")?.parse()?;
                if !(1..=ROUND_TRIPS_MAX).contains(&options.count) {
                    bail!("--count must be in [1, {ROUND_TRIPS_MAX}]");
                }
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    let (transport, broker_addr) = start_transport(&options).await?;
    let (client, mut events, poller) = connect_agent(broker_addr).await?;
    let samples_us = measure_round_trips(&client, &mut events, &options).await?;
    let nodelay = transport
        .listeners()
        .first()
        .map(|listener| listener.tcp_nodelay.to_string())
        .unwrap_or_else(|| "n/a (external broker)".to_string());
    println!(
        "mode={} listener_tcp_nodelay={nodelay} request_qos={:?} round_trips={}",
        if options.external_url.is_some() {
            "external"
        } else {
            "embedded"
        },
        options.request_qos,
        samples_us.len()
    );
    let at = |quantile: f64| {
        let index = ((samples_us.len() as f64 - 1.0) * quantile).round() as usize;
        samples_us[index] as f64 / 1000.0
    };
    println!(
        "p50={:.3} ms  p90={:.3} ms  p99={:.3} ms  max={:.3} ms",
        at(0.50),
        at(0.90),
        at(0.99),
        at(1.0)
    );

    poller.abort();
    transport.shutdown().await?;
    Ok(())
}

/// Starts the service side (the echo) on an embedded listener or an external broker, and
/// returns it with the broker address the agent connects to.
async fn start_transport(options: &Options) -> anyhow::Result<(Transport, SocketAddr)> {
    let mode = match &options.external_url {
        Some(url) => Mode::External(ExternalConfig {
            url: url.clone(),
            client_id: "hk-latency-service".to_string(),
            ..ExternalConfig::default()
        }),
        None => Mode::Embedded(EmbeddedConfig {
            listen: "127.0.0.1:0".parse()?,
            tcp_nodelay: options.tcp_nodelay,
            ..EmbeddedConfig::default()
        }),
    };
    let transport = Transport::start(
        Config {
            mode,
            ..Config::default()
        },
        Arc::new(Echo),
    )
    .await?;
    let broker_addr = match transport.listeners().first() {
        Some(listener) => listener.addr,
        None => {
            let url = options.external_url.as_deref().unwrap_or_default();
            let host_port = url
                .trim_start_matches("mqtt://")
                .trim_start_matches("tcp://");
            tokio::net::lookup_host(host_port)
                .await?
                .next()
                .context("resolve the external broker")?
        }
    };
    Ok((transport, broker_addr))
}

/// The agent side, subscribed to its responses: its client, its events (`None` for the
/// SubAck, else a response's payload) and the task polling its connection.
async fn connect_agent(
    broker_addr: SocketAddr,
) -> anyhow::Result<(
    AsyncClient,
    mpsc::UnboundedReceiver<Option<Bytes>>,
    tokio::task::JoinHandle<()>,
)> {
    let mut mqtt_options =
        MqttOptions::new("bench", broker_addr.ip().to_string(), broker_addr.port());
    mqtt_options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = AsyncClient::new(mqtt_options, 100);
    let mut network = NetworkOptions::new();
    network.set_tcp_nodelay(true);
    eventloop.set_network_options(network);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let poller = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = events_tx.send(None);
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    let _ = events_tx.send(Some(publish.payload));
                }
                Ok(_) => {}
                Err(error) => {
                    eprintln!("agent connection: {error}");
                    return;
                }
            }
        }
    });
    client
        .subscribe("hk/v1/rsp/bench", QoS::AtLeastOnce)
        .await?;
    match tokio::time::timeout(STEP_TIMEOUT, events.recv()).await {
        Ok(Some(None)) => {}
        other => bail!("no SubAck: {other:?}"),
    }
    Ok((client, events, poller))
}

/// Sends the requests one after another, each once its predecessor's response arrived;
/// returns the round trips after the warm-up, µs, sorted.
async fn measure_round_trips(
    client: &AsyncClient,
    events: &mut mpsc::UnboundedReceiver<Option<Bytes>>,
    options: &Options,
) -> anyhow::Result<Vec<u64>> {
    let mut samples_us = Vec::with_capacity(options.count);
    for seq in 0..WARMUP_ROUND_TRIPS + options.count {
        let payload = format!(r#"{{"id":"{seq}","op":"lease.keepalive","lease":"L"}}"#);
        let started = Instant::now();
        client
            .publish(
                "hk/v1/req/bench",
                options.request_qos,
                false,
                payload.clone(),
            )
            .await?;
        loop {
            let event = tokio::time::timeout(STEP_TIMEOUT, events.recv())
                .await
                .with_context(|| format!("no response to request {seq} within {STEP_TIMEOUT:?}"))?
                .context("agent event loop ended")?;
            if event.as_deref() == Some(payload.as_bytes()) {
                break;
            }
        }
        if seq >= WARMUP_ROUND_TRIPS {
            samples_us.push(u64::try_from(started.elapsed().as_micros())?);
        }
    }
    samples_us.sort_unstable();
    Ok(samples_us)
}

/// The service side: echoes every request as the response to its agent, on the task that
/// received it.
struct Echo;

impl InboundHandler for Echo {
    fn handle(&self, transport: &Transport, inbound: Inbound) -> Flow {
        let topic = transport.topics().response(&inbound.agent);
        if let Err(error) = transport.publish(topic, inbound.payload) {
            eprintln!("echo: {error}");
        }
        Flow::Continue
    }
}
