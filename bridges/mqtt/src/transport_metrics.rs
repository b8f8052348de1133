//! The transport's metric names, in one place. Each is recorded with `metrics::counter!` or
//! `gauge!` where its event happens (an endpoint connection, the accept loop, the external
//! client's event loop). `Transport::start` first exports every one at 0, so a dashboard
//! shows 0 rather than "no data" for a counter that should never move. The
//! `hivekeeper_endpoint_*` counters stay 0 with an external broker (docs/OPERATIONS.md).

use metrics::{counter, describe_counter, gauge};

/// Requests received on `{prefix}/req/+` and handed to the handler (counter).
pub const MESSAGES_IN_TOTAL: &str = "hivekeeper_mqtt_messages_in_total";
/// Requests dropped before the handler (counter): with an external broker, those of an agent
/// paused for its request rate (the endpoint stops reading such an agent instead, so there it
/// stays 0).
pub const MESSAGES_DROPPED_TOTAL: &str = "hivekeeper_mqtt_messages_dropped_total";
/// Messages written to agents (endpoint) or handed to the broker (external) (counter).
pub const MESSAGES_OUT_TOTAL: &str = "hivekeeper_mqtt_messages_out_total";
/// 1 while the broker connection is up (external) or the endpoint listens (gauge).
pub const CONNECTED: &str = "hivekeeper_mqtt_connected";
/// Agents connected to the endpoint, past CONNACK (gauge; not exported with an external
/// broker, which alone knows its clients).
pub const CLIENTS_CONNECTED: &str = "hivekeeper_mqtt_clients_connected";
/// The endpoint's `connections_max`: the most sockets it keeps open (gauge; not exported with
/// an external broker), so an alert compares `CLIENTS_CONNECTED` with the setting itself.
pub const ENDPOINT_CONNECTIONS_MAX: &str = "hivekeeper_endpoint_connections_max";
/// External broker: messages on a request topic that names no valid agent, dropped (counter).
/// The endpoint refuses those at the PUBLISH (`ENDPOINT_PUBLISHES_REFUSED_TOTAL`).
pub const BAD_TOPICS_TOTAL: &str = "hivekeeper_mqtt_bad_topics_total";

/// Successful connections: agents accepted by the endpoint, or ConnAcks from an external
/// broker (reconnects are this minus one).
pub const ENDPOINT_CONNECTS_TOTAL: &str = "hivekeeper_endpoint_connects_total";
/// Sockets closed at accept because `connections_max` connections were open.
pub const ENDPOINT_CONNECTIONS_REFUSED_TOTAL: &str =
    "hivekeeper_endpoint_connections_refused_total";
/// Sockets closed at accept by the connect-rate limit.
pub const ENDPOINT_CONNECTS_RATE_LIMITED_TOTAL: &str =
    "hivekeeper_endpoint_connects_rate_limited_total";
/// CONNECTs answered with a refusal (bad client id, unsupported protocol, credentials,
/// shutting down).
pub const ENDPOINT_CONNECTS_REFUSED_TOTAL: &str = "hivekeeper_endpoint_connects_refused_total";
/// Sockets that sent no complete CONNECT within `connect_packet_timeout_ms`.
pub const ENDPOINT_CONNECT_TIMEOUTS_TOTAL: &str = "hivekeeper_endpoint_connect_timeouts_total";
/// Sockets closed by the peer before a complete CONNECT.
pub const ENDPOINT_CONNECTS_ABANDONED_TOTAL: &str = "hivekeeper_endpoint_connects_abandoned_total";
/// With TLS: sockets closed because the handshake failed or did not finish within
/// `connect_packet_timeout_ms` (a plaintext client, an unknown or missing client certificate,
/// a client certificate without a CN).
pub const ENDPOINT_TLS_HANDSHAKE_FAILURES_TOTAL: &str =
    "hivekeeper_endpoint_tls_handshake_failures_total";
/// Connections closed because the same client id connected again.
pub const ENDPOINT_TAKEOVERS_TOTAL: &str = "hivekeeper_endpoint_takeovers_total";
/// Connections closed after 1.5 x their keepalive without a packet.
pub const ENDPOINT_KEEPALIVE_TIMEOUTS_TOTAL: &str = "hivekeeper_endpoint_keepalive_timeouts_total";
/// Connections whose client had already closed them right behind what it sent after a
/// silence (no DISCONNECT): those requests were abandoned, and are dropped unhandled.
pub const ENDPOINT_ABANDONED_TOTAL: &str = "hivekeeper_endpoint_abandoned_total";
/// Connections closed because their outbound queue overflowed with responses or a write did
/// not finish within `write_timeout_ms`.
pub const ENDPOINT_SLOW_CONSUMER_DISCONNECTS_TOTAL: &str =
    "hivekeeper_endpoint_slow_consumer_disconnects_total";
/// Connections closed because the codec refused a packet.
pub const ENDPOINT_MALFORMED_PACKETS_TOTAL: &str = "hivekeeper_endpoint_malformed_packets_total";
/// Connections closed because a packet exceeded `packet_bytes_max`.
pub const ENDPOINT_PACKETS_TOO_LARGE_TOTAL: &str = "hivekeeper_endpoint_packets_too_large_total";
/// Connections closed for a packet out of place (first packet not CONNECT, a second CONNECT,
/// a QoS 2 window overrun).
pub const ENDPOINT_PROTOCOL_ERRORS_TOTAL: &str = "hivekeeper_endpoint_protocol_errors_total";
/// PUBLISHes outside the agent's own request topic (or naming another Response Topic):
/// refused, never routed.
pub const ENDPOINT_PUBLISHES_REFUSED_TOTAL: &str = "hivekeeper_endpoint_publishes_refused_total";
/// Subscription filters other than the agent's own response and event topics: refused.
pub const ENDPOINT_SUBSCRIBES_REFUSED_TOTAL: &str = "hivekeeper_endpoint_subscribes_refused_total";
/// Events dropped by an agent's full queue (events yield to responses).
pub const ENDPOINT_EVENTS_DROPPED_TOTAL: &str = "hivekeeper_endpoint_events_dropped_total";
/// Messages for an agent that is not connected or not subscribed to the topic (dropped, as a
/// broker would).
pub const ENDPOINT_OUTBOUND_UNROUTED_TOTAL: &str = "hivekeeper_endpoint_outbound_unrouted_total";
/// Messages over an MQTT 5 client's Maximum Packet Size (dropped).
pub const ENDPOINT_OUTBOUND_TOO_LARGE_TOTAL: &str = "hivekeeper_endpoint_outbound_too_large_total";

/// Every counter of the transport, for [`export_at_zero`].
const COUNTERS: [&str; 23] = [
    MESSAGES_IN_TOTAL,
    MESSAGES_DROPPED_TOTAL,
    MESSAGES_OUT_TOTAL,
    BAD_TOPICS_TOTAL,
    ENDPOINT_CONNECTS_TOTAL,
    ENDPOINT_CONNECTIONS_REFUSED_TOTAL,
    ENDPOINT_CONNECTS_RATE_LIMITED_TOTAL,
    ENDPOINT_CONNECTS_REFUSED_TOTAL,
    ENDPOINT_CONNECT_TIMEOUTS_TOTAL,
    ENDPOINT_CONNECTS_ABANDONED_TOTAL,
    ENDPOINT_TLS_HANDSHAKE_FAILURES_TOTAL,
    ENDPOINT_TAKEOVERS_TOTAL,
    ENDPOINT_KEEPALIVE_TIMEOUTS_TOTAL,
    ENDPOINT_ABANDONED_TOTAL,
    ENDPOINT_SLOW_CONSUMER_DISCONNECTS_TOTAL,
    ENDPOINT_MALFORMED_PACKETS_TOTAL,
    ENDPOINT_PACKETS_TOO_LARGE_TOTAL,
    ENDPOINT_PROTOCOL_ERRORS_TOTAL,
    ENDPOINT_PUBLISHES_REFUSED_TOTAL,
    ENDPOINT_SUBSCRIBES_REFUSED_TOTAL,
    ENDPOINT_EVENTS_DROPPED_TOTAL,
    ENDPOINT_OUTBOUND_UNROUTED_TOTAL,
    ENDPOINT_OUTBOUND_TOO_LARGE_TOTAL,
];

/// Exports every counter at 0 and the connection gauge down (the backend raises it once it
/// listens or the broker accepted), so each series exists from the start.
pub(crate) fn export_at_zero() {
    for name in COUNTERS {
        counter!(name).increment(0);
    }
    gauge!(CONNECTED).set(0.0);
}

/// Gives the transport's described metrics their help texts. Call once, after the recorder is
/// installed.
pub fn describe() {
    describe_counter!(
        BAD_TOPICS_TOTAL,
        "Messages on a request topic that names no valid agent (dropped)."
    );
}
