//! [`ReplyRoute`]: where the answer to one request goes.

use std::sync::Arc;

use bytes::Bytes;

/// Where the response to one [`crate::Inbound`] request goes: by default the agent's
/// `{prefix}/rsp/{agent}`; for an MQTT 5 request that carried a Response Topic (the agent's
/// own response topic: the endpoint refuses any other) or Correlation Data, that topic with
/// the same Correlation Data, so a generic MQTT 5 request/response client (`mosquitto_rr`)
/// gets its answer without knowing Hivekeeper's topic convention.
///
/// Opaque and cheap to clone (one `Arc` or nothing): the handler keeps it with a request that
/// waits in a queue and hands it back to [`crate::Transport::publish_response`] with the final
/// answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyRoute(Option<Arc<V5Reply>>);

/// The MQTT 5 request/response properties of one request.
#[derive(Debug, PartialEq, Eq)]
struct V5Reply {
    /// The Response Topic to publish the answer on.
    response_topic: String,
    /// The Correlation Data to echo, if the request carried some.
    correlation_data: Option<Bytes>,
}

/// MQTT 5 property overhead of a Correlation Data of `len` bytes: identifier and length.
const CORRELATION_PROPERTY_OVERHEAD_BYTES: usize = 1 + 2;

impl ReplyRoute {
    /// An MQTT 5 route: answer on `response_topic` with `correlation_data`.
    pub(crate) fn v5(response_topic: String, correlation_data: Option<Bytes>) -> ReplyRoute {
        ReplyRoute(Some(Arc::new(V5Reply {
            response_topic,
            correlation_data,
        })))
    }

    /// Whether this is the default route (`{prefix}/rsp/{agent}`, no Correlation Data).
    pub fn is_default(&self) -> bool {
        self.0.is_none()
    }

    /// The Response Topic the request named, if any.
    pub fn response_topic(&self) -> Option<&str> {
        self.0.as_ref().map(|reply| reply.response_topic.as_str())
    }

    /// The Correlation Data to echo, if any.
    pub fn correlation_data(&self) -> Option<&Bytes> {
        self.0
            .as_ref()
            .and_then(|reply| reply.correlation_data.as_ref())
    }

    /// Bytes the route adds to a response packet besides its topic (the Correlation Data
    /// property).
    pub(crate) fn overhead_bytes(&self) -> usize {
        self.correlation_data()
            .map_or(0, |data| data.len() + CORRELATION_PROPERTY_OVERHEAD_BYTES)
    }
}
