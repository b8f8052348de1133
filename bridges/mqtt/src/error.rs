//! [`MqttError`], the one error type at this crate's boundary.

use std::net::SocketAddr;

/// Everything that can go wrong in the transport, each variant carrying what a log line or an
/// operator needs to act on it.
#[derive(Debug, thiserror::Error)]
pub enum MqttError {
    /// The agent endpoint's TLS files could not be used (`mode.tls_cert`, `mode.tls_key`,
    /// `mode.client_ca`): the error names the file and what is wrong.
    ///
    /// The cause is in the text, not in `source()`, so a report of the error chain (anyhow's
    /// `{:#}`) names it once.
    #[error("agent endpoint TLS: {0}")]
    Tls(hivekeeper_tls::TlsError),

    /// A configuration field is out of range or inconsistent with another.
    #[error("invalid MQTT config: `{field}` {reason}")]
    InvalidConfig {
        /// The field, dotted from the top of [`crate::Config`] (`mode.client_id`).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// The agent endpoint's listen address is taken by another process (or another endpoint in
    /// this one).
    #[error(
        "cannot listen on {addr}: address already in use (is another broker or Hivekeeper node \
         running on this port? give `hivekeeper serve` another --mqtt-listen, or another \
         `listen` in the config file's [mqtt.mode])"
    )]
    ListenAddrInUse {
        /// The address that could not be bound.
        addr: SocketAddr,
    },

    /// The agent endpoint could not listen on an address for another reason (permission, no
    /// such interface).
    #[error("agent endpoint cannot listen on {addr}: {reason}")]
    Listen {
        /// The listener's address.
        addr: SocketAddr,
        /// What the OS reported.
        reason: String,
    },

    /// The external broker did not accept the connection and the request subscription within
    /// the startup timeout.
    #[error(
        "external broker {url} not connected and subscribed within {waited_ms} ms (last error: \
         {last_error})"
    )]
    BrokerUnreachable {
        /// The configured broker URL.
        url: String,
        /// How long start waited.
        waited_ms: u64,
        /// The last connection error seen, or `none` if the attempt was still in progress.
        last_error: String,
    },

    /// A broker refused the subscription to the request filter (an ACL, most likely).
    #[error("broker refused the subscription to {filter}")]
    SubscribeRefused {
        /// The filter, `{prefix}/req/+`.
        filter: String,
    },

    /// The message was not queued: the external broker connection is down or slower than the
    /// service (the transport's queue is full), or, on the agent endpoint, the agent's own
    /// queue dropped it (an event under pressure, or a response overflowing a slow consumer's
    /// queue, which disconnects it). The caller counts it and moves on (an agent retries a
    /// lost response with the same request id).
    #[error("outbound queue full ({capacity} messages waiting); message to {topic} not sent")]
    OutboundFull {
        /// The topic of the message that was not queued.
        topic: String,
        /// The capacity that was reached.
        capacity: usize,
    },

    /// A topic the transport was asked to publish to is not a valid MQTT topic name.
    #[error("cannot publish to {topic:?}: {reason}")]
    InvalidTopic {
        /// The topic as given.
        topic: String,
        /// Why MQTT refuses it.
        reason: &'static str,
    },

    /// A message is larger than the configured packet limit.
    #[error("message to {topic} is {bytes} bytes, the packet limit is {bytes_max}")]
    PayloadTooLarge {
        /// The topic of the message.
        topic: String,
        /// Topic plus payload plus packet overhead, in bytes.
        bytes: usize,
        /// [`crate::Config::packet_bytes_max`].
        bytes_max: usize,
    },

    /// The transport has been shut down (or its backend stopped); nothing more is sent.
    #[error("MQTT transport is shut down")]
    Closed,

    /// Shutdown finished, but some part did not stop within its time bound.
    #[error("MQTT transport shutdown incomplete: {reason}")]
    Shutdown {
        /// Which parts did not stop in time.
        reason: String,
    },
}

impl From<hivekeeper_tls::TlsError> for MqttError {
    fn from(error: hivekeeper_tls::TlsError) -> Self {
        MqttError::Tls(error)
    }
}
