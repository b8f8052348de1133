//! The transport's configuration: which broker, which topics, which bounds.
//!
//! One [`DEFAULTS`] holds every default value; `Default` impls and serde's `#[serde(default)]`
//! read from it, so a default is written down exactly once. [`Config::validate`] checks the
//! rules that cross fields or that the underlying crates would otherwise answer with a panic
//! (rumqttc panics on a keepalive under one second).
//!
//! Example (JSON; the node's own config file nests this under its `mqtt` key):
//!
//! ```json
//! {
//!   "mode": { "kind": "external", "url": "mqtt://10.0.0.5:1883", "client_id": "hk-node-1" },
//!   "topic_prefix": "farm/east/hk"
//! }
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use hivekeeper_protocol::Topics;
use hivekeeper_protocol::topic::DEFAULT_PREFIX;
use hivekeeper_protocol::validate::{AGENT_ID_BYTES_MAX, REQUEST_BYTES_MAX};
use serde::{Deserialize, Serialize};

use crate::MqttError;

/// Largest remaining length an MQTT packet can declare (MQTT 3.1.1 §2.2.3, 5.0 §1.5.5).
pub const MQTT_PACKET_BYTES_MAX: usize = 268_435_455;

/// What a request packet carries besides its payload, generously: the topic
/// (`{prefix}/req/{agent}`, the prefix bounded by [`TOPIC_PREFIX_BYTES_MAX`]), its 2-byte length,
/// the packet id and MQTT 5 properties. `packet_bytes_max` must leave room for a full-size
/// request plus this, or a valid request would be refused by the broker.
pub const REQUEST_OVERHEAD_BYTES_MAX: usize = 1024;

/// Longest topic prefix accepted, in bytes. Keeps [`REQUEST_OVERHEAD_BYTES_MAX`] honest.
pub const TOPIC_PREFIX_BYTES_MAX: usize = 512;

/// Every default of this crate's configuration, in one place.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    /// See [`Config::topic_prefix`].
    pub topic_prefix: &'static str,
    /// See [`Config::packet_bytes_max`].
    pub packet_bytes_max: usize,
    /// See [`Config::inbound_capacity`].
    pub inbound_capacity: usize,
    /// See [`Config::outbound_capacity`].
    pub outbound_capacity: usize,
    /// See [`Config::startup_timeout_ms`].
    pub startup_timeout_ms: u64,
    /// See [`EmbeddedConfig::listen`].
    pub listen: SocketAddr,
    /// See [`EmbeddedConfig::tcp_nodelay`].
    pub tcp_nodelay: bool,
    /// See [`EmbeddedConfig::connections_max`].
    pub connections_max: usize,
    /// See [`EmbeddedConfig::connect_packet_timeout_ms`].
    pub connect_packet_timeout_ms: u16,
    /// See [`EmbeddedConfig::inflight_max`].
    pub inflight_max: usize,
    /// See [`EmbeddedConfig::connect_rate_per_s_max`].
    pub connect_rate_per_s_max: u32,
    /// See [`EmbeddedConfig::connection_queue_max`].
    pub connection_queue_max: usize,
    /// See [`EmbeddedConfig::write_timeout_ms`].
    pub write_timeout_ms: u64,
    /// See [`ExternalConfig::url`].
    pub url: &'static str,
    /// See [`ExternalConfig::client_id`].
    pub client_id: &'static str,
    /// See [`ExternalConfig::keepalive_s`].
    pub keepalive_s: u16,
    /// See [`ExternalConfig::connect_timeout_s`].
    pub connect_timeout_s: u64,
    /// See [`ExternalConfig::reconnect_delay_ms_min`].
    pub reconnect_delay_ms_min: u64,
    /// See [`ExternalConfig::reconnect_delay_ms_max`].
    pub reconnect_delay_ms_max: u64,
    /// The shared-subscription group of a cluster's members, when `share_group` is not set:
    /// see [`ExternalConfig::as_member`].
    pub share_group: &'static str,
}

/// The defaults. `hivekeeper serve` with no flags runs the agent endpoint on 127.0.0.1:1883
/// (DESIGN.md §4): loopback only, so a fresh install exposes nothing to the network.
pub const DEFAULTS: Defaults = Defaults {
    topic_prefix: DEFAULT_PREFIX,
    // 64 KiB = REQUEST_BYTES_MAX (8 KiB) + 56 KiB of margin. A request over 8 KiB must still
    // reach the handler so the agent gets `too_large` on its response topic instead of a silent
    // disconnect (the endpoint closes a connection whose packet exceeds this limit before
    // reading it). Valid requests are under 1 KiB (every field is bounded), so anything
    // larger is a client bug, and 8x the limit covers such bugs without letting one connection
    // make the node buffer megabytes.
    packet_bytes_max: 64 * 1024,
    // A burst of 4096 requests (a fleet reconnecting at once) fits without dropping; at about
    // 200 bytes a request that is under 1 MiB of queued payload.
    inbound_capacity: 4096,
    outbound_capacity: 4096,
    startup_timeout_ms: 10_000,
    listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 1883),
    tcp_nodelay: true,
    // The scale target is 10,000 agents a node with room for 20,000 idle ones; each
    // connection costs a task, a read buffer and its queue (docs/BENCHMARKS.md).
    connections_max: 20_000,
    connect_packet_timeout_ms: 5_000,
    inflight_max: 100,
    // 10,000 agents reconnecting after a restart are in within about 5 s (a 2,000 burst, then
    // 2,000 a second); the SDK's jittered backoff spreads the ones refused.
    connect_rate_per_s_max: 2_000,
    // An agent has a handful of requests in flight; 256 messages is far more than a healthy
    // one ever has waiting, so only a consumer that stopped reading reaches it.
    connection_queue_max: 256,
    write_timeout_ms: 10_000,
    url: "mqtt://127.0.0.1:1883",
    client_id: "hivekeeper",
    keepalive_s: 30,
    connect_timeout_s: 5,
    reconnect_delay_ms_min: 100,
    reconnect_delay_ms_max: 10_000,
    // A shared subscription is named by its group and its filter together (MQTT 5.0 §4.8.2),
    // so services under other topic prefixes never share one by having this name in common.
    share_group: "hivekeeper",
};

/// The MQTT transport's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The agent endpoint (the default: nothing else to install) or a client of an external
    /// broker (general pub/sub, or when the swarm outgrows one node, DESIGN.md §4).
    pub mode: Mode,
    /// Topic prefix, `hk/v1` by default. Configurable so two services can share one broker.
    /// Checked by [`Topics::new`] (no wildcards, no empty level).
    pub topic_prefix: String,
    /// Largest MQTT packet accepted from a client, in bytes of remaining length (topic,
    /// properties and payload). Above `REQUEST_BYTES_MAX` on purpose, see [`DEFAULTS`]: an
    /// oversized request must reach the handler to be answered `too_large`. Also caps what
    /// [`crate::Transport::publish`] accepts, and is the rumqttc packet limit in external
    /// mode. The endpoint closes a connection that sends a larger packet
    /// (`hivekeeper_endpoint_packets_too_large_total`) and announces the limit to MQTT 5 clients.
    pub packet_bytes_max: usize,
    /// Accepted and checked so existing config files keep loading, and otherwise unused: a
    /// request goes from the task that received it straight to the transport's handler,
    /// with no queue between (the node bounds what waits for it, and refuses past that).
    pub inbound_capacity: usize,
    /// Capacity of the outbound queue to an external broker (responses and events waiting to
    /// be published). When full, [`crate::Transport::publish`] fails at once with
    /// [`MqttError::OutboundFull`] instead of blocking the caller. The agent endpoint has a
    /// queue per connection instead ([`EmbeddedConfig::connection_queue_max`]).
    pub outbound_capacity: usize,
    /// How long [`crate::Transport::start`] waits for the external broker to accept the
    /// connection and the request subscription. Past it, start fails with a clear error
    /// instead of hanging. (The endpoint's listeners are bound before start returns.)
    pub startup_timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::default(),
            topic_prefix: DEFAULTS.topic_prefix.to_string(),
            packet_bytes_max: DEFAULTS.packet_bytes_max,
            inbound_capacity: DEFAULTS.inbound_capacity,
            outbound_capacity: DEFAULTS.outbound_capacity,
            startup_timeout_ms: DEFAULTS.startup_timeout_ms,
        }
    }
}

/// Which broker the transport uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mode {
    /// Run the agent endpoint, Hivekeeper's own MQTT 3.1.1/5.0 server, in this process.
    Embedded(EmbeddedConfig),
    /// Connect to a broker that runs elsewhere (Mosquitto, EMQX, HiveMQ, ...).
    ///
    /// The broker must set TCP_NODELAY on its sockets, or every round trip waits for a
    /// delayed ACK: Debian's mosquitto 2.0.11 measured 44 ms p50 without `set_tcp_nodelay
    /// true` in mosquitto.conf and 0.15 ms with it (`examples/latency.rs --external`).
    External(ExternalConfig),
}

impl Default for Mode {
    fn default() -> Self {
        Mode::Embedded(EmbeddedConfig::default())
    }
}

/// The agent endpoint: Hivekeeper's own MQTT server, serving only its topics
/// (docs/PROTOCOL.md §1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Listener address. Loopback by default, so nothing is exposed until the operator says
    /// so. Port 0 picks a free port; [`crate::Transport::listeners`] tells which. Serves MQTT
    /// 3.1.1 and 5.0 alike (the version is read from each CONNECT). A hostname
    /// (`localhost:1883`) is resolved when the file is read.
    #[serde(deserialize_with = "hivekeeper_listen::deserialize")]
    pub listen: SocketAddr,
    /// Optional second listener address (kept from the rumqttd days, when 5.0 needed its own
    /// port); serves both versions like `listen`.
    #[serde(deserialize_with = "hivekeeper_listen::deserialize_option")]
    pub listen_v5: Option<SocketAddr>,
    /// Set TCP_NODELAY on every accepted socket. Without it each QoS 1 request waits about
    /// 40 ms: the endpoint writes the PUBACK, then Nagle holds the response until the
    /// client's delayed ACK (DESIGN.md §7).
    pub tcp_nodelay: bool,
    /// Most open agent connections (sockets accepted and not yet closed, CONNECT or not).
    /// Past it a new socket is closed at once and counted in
    /// `hivekeeper_endpoint_connections_refused_total`.
    pub connections_max: usize,
    /// How long a new socket may take to send its CONNECT before it is closed, in ms. Bounds
    /// what half-open sockets and idle probes cost.
    pub connect_packet_timeout_ms: u16,
    /// Most QoS 1 messages in flight (sent, not acknowledged) to one agent; also the Receive
    /// Maximum announced to MQTT 5 clients and the most QoS 2 requests one agent may have
    /// awaiting PUBREL.
    pub inflight_max: usize,
    /// Most new connections accepted a second (a token bucket holding one second's worth).
    /// Past it a new socket is closed at once and counted in
    /// `hivekeeper_endpoint_connects_rate_limited_total`. 0: no limit.
    pub connect_rate_per_s_max: u32,
    /// Messages waiting for one agent's connection. Events may fill at most half of it (an
    /// event beyond is dropped, `hivekeeper_endpoint_events_dropped_total`); a response that
    /// finds it full evicts the oldest event, and if only responses are waiting the agent is
    /// a slow consumer and is disconnected (`hivekeeper_endpoint_slow_consumer_disconnects_total`).
    pub connection_queue_max: usize,
    /// Longest one socket write may take, in ms, before the agent is disconnected as a slow
    /// consumer (it stopped reading and its TCP window is shut).
    pub write_timeout_ms: u64,
    /// PEM certificate chain the agent endpoint presents; with [`EmbeddedConfig::tls_key`] every
    /// listener speaks MQTT over TLS only (`serve --mqtt-tls-cert`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (`serve --mqtt-tls-key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificate(s) for mutual TLS (`serve --mqtt-client-ca`): every client must
    /// present a certificate signed by one of them, and its CN is the agent's identity (the
    /// client id must equal it, else CONNACK not authorized). Needs `tls_cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// Ignored: a rumqttd setting (its per-filter log segments), accepted so that config files
    /// written for it still load. A warning is logged when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_bytes_max: Option<usize>,
    /// Ignored, like `segment_bytes_max`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_count_max: Option<usize>,
    /// Ignored, like `segment_bytes_max`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_segment_bytes_max: Option<usize>,
    /// Ignored, like `segment_bytes_max`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_segment_count_max: Option<usize>,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            listen: DEFAULTS.listen,
            listen_v5: None,
            tcp_nodelay: DEFAULTS.tcp_nodelay,
            connections_max: DEFAULTS.connections_max,
            connect_packet_timeout_ms: DEFAULTS.connect_packet_timeout_ms,
            inflight_max: DEFAULTS.inflight_max,
            connect_rate_per_s_max: DEFAULTS.connect_rate_per_s_max,
            connection_queue_max: DEFAULTS.connection_queue_max,
            write_timeout_ms: DEFAULTS.write_timeout_ms,
            tls_cert: None,
            tls_key: None,
            client_ca: None,
            segment_bytes_max: None,
            segment_count_max: None,
            request_segment_bytes_max: None,
            request_segment_count_max: None,
        }
    }
}

/// A client of an external broker.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExternalConfig {
    /// Broker URL, `mqtt://host:port` (or `tcp://`); the port defaults to 1883. TLS to an
    /// external broker is not supported yet: terminate TLS in front of the broker.
    pub url: String,
    /// MQTT client id of this node. Must differ between nodes sharing a broker: a broker
    /// disconnects the older of two connections with the same id.
    pub client_id: String,
    /// Username, if the broker requires one.
    pub username: Option<String>,
    /// Password, only with a username. Never printed by `Debug`.
    pub password: Option<String>,
    /// MQTT keepalive, in seconds (0 disables it; otherwise at least 1, rumqttc refuses less).
    /// A dead connection is noticed after about 1.5 times this.
    pub keepalive_s: u16,
    /// How long one TCP connect plus CONNECT/CONNACK may take, in seconds.
    pub connect_timeout_s: u64,
    /// First delay before reconnecting after a connection error, in ms. rumqttc's `poll()`
    /// reconnects at once otherwise, which hammers a restarting broker.
    pub reconnect_delay_ms_min: u64,
    /// Longest delay between reconnect attempts, in ms, before jitter (jitter adds up to as
    /// much again, so a fleet of nodes does not reconnect in lockstep).
    pub reconnect_delay_ms_max: u64,
    /// When set, requests are read through the shared subscription
    /// `$share/{share_group}/{prefix}/req/+`: the broker hands each request to one client of
    /// the group. The members of a cluster behind one broker form such a group (set for them
    /// by [`ExternalConfig::as_member`] if left out); a single node subscribes plainly.
    /// One MQTT topic level: no `/`, `+` or `#`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_group: Option<String>,
}

impl Default for ExternalConfig {
    fn default() -> Self {
        ExternalConfig {
            url: DEFAULTS.url.to_string(),
            client_id: DEFAULTS.client_id.to_string(),
            username: None,
            password: None,
            keepalive_s: DEFAULTS.keepalive_s,
            connect_timeout_s: DEFAULTS.connect_timeout_s,
            reconnect_delay_ms_min: DEFAULTS.reconnect_delay_ms_min,
            reconnect_delay_ms_max: DEFAULTS.reconnect_delay_ms_max,
            share_group: None,
        }
    }
}

impl fmt::Debug for ExternalConfig {
    // By hand so the password never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExternalConfig")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("keepalive_s", &self.keepalive_s)
            .field("connect_timeout_s", &self.connect_timeout_s)
            .field("reconnect_delay_ms_min", &self.reconnect_delay_ms_min)
            .field("reconnect_delay_ms_max", &self.reconnect_delay_ms_max)
            .field("share_group", &self.share_group)
            .finish()
    }
}

impl Config {
    /// Checks every field and the rules between fields. [`crate::Transport::start`] calls it,
    /// so an invalid config is refused before anything is bound or connected.
    pub fn validate(&self) -> Result<(), MqttError> {
        if self.topic_prefix.len() > TOPIC_PREFIX_BYTES_MAX {
            return Err(invalid(
                "topic_prefix",
                format!(
                    "is {} bytes long, the maximum is {TOPIC_PREFIX_BYTES_MAX}",
                    self.topic_prefix.len()
                ),
            ));
        }
        Topics::new(&self.topic_prefix).map_err(|error| invalid("topic_prefix", error.message))?;
        let packet_bytes_min = REQUEST_BYTES_MAX + REQUEST_OVERHEAD_BYTES_MAX;
        if !(packet_bytes_min..=MQTT_PACKET_BYTES_MAX).contains(&self.packet_bytes_max) {
            return Err(invalid(
                "packet_bytes_max",
                format!(
                    "is {}, it must be in [{packet_bytes_min}, {MQTT_PACKET_BYTES_MAX}] so that a \
                     full-size request ({REQUEST_BYTES_MAX} bytes) plus its topic fits",
                    self.packet_bytes_max
                ),
            ));
        }
        check_range("inbound_capacity", self.inbound_capacity, 1, 1_000_000)?;
        check_range("outbound_capacity", self.outbound_capacity, 1, 1_000_000)?;
        check_range("startup_timeout_ms", self.startup_timeout_ms, 100, 600_000)?;
        match &self.mode {
            Mode::Embedded(embedded) => embedded.validate(),
            Mode::External(external) => external.validate(),
        }
    }

    /// The topics under [`Config::topic_prefix`]. Call after [`Config::validate`].
    pub fn topics(&self) -> Result<Topics, MqttError> {
        Topics::new(&self.topic_prefix).map_err(|error| invalid("topic_prefix", error.message))
    }
}

impl EmbeddedConfig {
    fn validate(&self) -> Result<(), MqttError> {
        if let Some(listen_v5) = self.listen_v5
            && listen_v5 == self.listen
            && listen_v5.port() != 0
        {
            return Err(invalid(
                "mode.listen_v5",
                format!("is {listen_v5}, the same address as `listen`; give v5 its own port"),
            ));
        }
        check_range("mode.connections_max", self.connections_max, 1, 1_000_000)?;
        check_range(
            "mode.connect_packet_timeout_ms",
            self.connect_packet_timeout_ms,
            100,
            u16::MAX,
        )?;
        check_range(
            "mode.inflight_max",
            self.inflight_max,
            1,
            usize::from(u16::MAX),
        )?;
        check_range(
            "mode.connect_rate_per_s_max",
            self.connect_rate_per_s_max,
            0,
            1_000_000,
        )?;
        check_range(
            "mode.connection_queue_max",
            self.connection_queue_max,
            2,
            1_000_000,
        )?;
        check_range("mode.write_timeout_ms", self.write_timeout_ms, 10, 600_000)?;
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(invalid(
                    "mode.tls_key",
                    "is missing: `tls_cert` needs its private key".to_string(),
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "mode.tls_cert",
                    "is missing: `tls_key` is set without a certificate".to_string(),
                ));
            }
            _ => {}
        }
        if self.client_ca.is_some() && self.tls_cert.is_none() {
            return Err(invalid(
                "mode.client_ca",
                "needs `tls_cert` and `tls_key`: client certificates are asked for during the \
                 TLS handshake"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// The certificate and key, and the client CA, when TLS is on (after `validate`).
    pub(crate) fn tls_files(&self) -> Option<(hivekeeper_tls::CertKey, Option<&Path>)> {
        let cert_key = hivekeeper_tls::CertKey {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
        };
        Some((cert_key, self.client_ca.as_deref()))
    }

    /// Logs a warning for each rumqttd-only key still set in the config (ignored).
    pub(crate) fn warn_ignored_keys(&self) {
        let keys = [
            ("segment_bytes_max", self.segment_bytes_max),
            ("segment_count_max", self.segment_count_max),
            ("request_segment_bytes_max", self.request_segment_bytes_max),
            ("request_segment_count_max", self.request_segment_count_max),
        ];
        for (key, value) in keys {
            if value.is_some() {
                tracing::warn!(
                    key,
                    "ignored: a setting of the rumqttd broker the agent endpoint replaced"
                );
            }
        }
    }
}

impl ExternalConfig {
    fn validate(&self) -> Result<(), MqttError> {
        parse_broker_url(&self.url)?;
        if self.client_id.is_empty()
            || self.client_id.len() > 256
            || self.client_id.chars().any(char::is_control)
        {
            return Err(invalid(
                "mode.client_id",
                format!(
                    "is {:?}; it must be 1 to 256 bytes without control characters",
                    self.client_id
                ),
            ));
        }
        if self.password.is_some() && self.username.is_none() {
            return Err(invalid(
                "mode.password",
                "is set without `username`; MQTT 3.1.1 sends a password only with a username"
                    .to_string(),
            ));
        }
        if let Some(group) = &self.share_group
            && (group.is_empty()
                || group.len() > 256
                || group.contains(['/', '+', '#'])
                || group.chars().any(char::is_control))
        {
            return Err(invalid(
                "mode.share_group",
                format!(
                    "is {group:?}; it must be one topic level of 1 to 256 bytes, without `/`, \
                     `+`, `#` or control characters"
                ),
            ));
        }
        check_range("mode.connect_timeout_s", self.connect_timeout_s, 1, 600)?;
        check_range(
            "mode.reconnect_delay_ms_min",
            self.reconnect_delay_ms_min,
            1,
            600_000,
        )?;
        check_range(
            "mode.reconnect_delay_ms_max",
            self.reconnect_delay_ms_max,
            self.reconnect_delay_ms_min,
            600_000,
        )?;
        Ok(())
    }
}

impl ExternalConfig {
    /// This config for `member` of a cluster whose members share the broker: the members
    /// read requests through one shared subscription (`share_group`, [`DEFAULTS`]'s
    /// `share_group` if unset), so each request reaches one of them, and the default client
    /// id gets the member's name appended, since a broker disconnects the older of two
    /// connections with one client id. A client id set in the config is kept: it must then
    /// differ between members.
    pub fn as_member(mut self, member: &str) -> ExternalConfig {
        self.share_group
            .get_or_insert_with(|| DEFAULTS.share_group.to_string());
        if self.client_id == DEFAULTS.client_id {
            self.client_id = format!("{}-{member}", DEFAULTS.client_id);
        }
        self
    }

    /// The filter requests are subscribed with: `{prefix}/req/+`, or its shared form
    /// `$share/{group}/{prefix}/req/+` with a `share_group`.
    pub(crate) fn request_filter(&self, topics: &Topics) -> String {
        match &self.share_group {
            Some(group) => format!("$share/{group}/{}", topics.request_filter()),
            None => topics.request_filter(),
        }
    }
}

/// Host and port of an `mqtt://host[:port]` (or `tcp://`) URL. Written by hand because
/// rumqttc's own URL parsing needs its `url` feature and a `client_id` query parameter.
pub(crate) fn parse_broker_url(url: &str) -> Result<(String, u16), MqttError> {
    let bad = |reason: &str| invalid("mode.url", format!("{url:?} {reason}"));
    let rest = url
        .strip_prefix("mqtt://")
        .or_else(|| url.strip_prefix("tcp://"))
        .ok_or_else(|| bad("must start with mqtt:// or tcp:// (TLS is not built in)"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) {
        return Err(bad(
            "must be only mqtt://host:port (credentials go in `username`/`password`)",
        ));
    }
    // `[::1]:1883` for IPv6, `host:1883` or `host` otherwise.
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| bad("has an unclosed `[`"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("has text after `]`"))?,
                ),
            ),
        }
    } else {
        match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    let port = match port {
        None => 1883,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => return Err(bad("has an invalid port")),
        },
    };
    Ok((host.to_string(), port))
}

fn invalid(field: &'static str, reason: String) -> MqttError {
    MqttError::InvalidConfig { field, reason }
}

fn check_range<T>(field: &'static str, value: T, min: T, max: T) -> Result<(), MqttError>
where
    T: PartialOrd + fmt::Display + Copy,
{
    if value < min || value > max {
        return Err(invalid(
            field,
            format!("is {value}, it must be in [{min}, {max}]"),
        ));
    }
    Ok(())
}

/// The agent ids this crate assumes when sizing [`REQUEST_OVERHEAD_BYTES_MAX`].
const _: () = assert!(TOPIC_PREFIX_BYTES_MAX + "/req/".len() + AGENT_ID_BYTES_MAX + 2 + 2 < 1024);
