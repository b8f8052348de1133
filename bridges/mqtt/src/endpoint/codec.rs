//! The endpoint's view of MQTT packets, over rumqttc's codec (`rumqttc::mqttbytes::v4` for
//! 3.1.1, `rumqttc::v5::mqttbytes::v5` for 5.0). Nothing here parses bytes itself: framing,
//! decoding and encoding are rumqttc's; this file only picks the version, maps rumqttc's
//! packet types onto the few a server reads ([`Incoming`]) and writes ([`Outgoing`]), and
//! turns codec errors into [`DecodeError`]s the connection can count and answer.
//!
//! Why rumqttc's codec (see the commit that introduced it for the survey): it is already in
//! the tree (the SDK and the external mode use it), it decodes and encodes every packet type
//! of both 3.1.1 and 5.0 in both directions (a server needs to decode CONNECT/SUBSCRIBE and
//! encode CONNACK/SUBACK, which client-only codecs lack), it checks the declared remaining
//! length against a maximum before buffering a packet, and it keeps payloads as
//! `bytes::Bytes`, so a request reaches the handler without a copy.
//!
//! Two gaps of rumqttc 0.25's 5.0 codec, handled here:
//! - its reader refuses a DISCONNECT with no reason code (remaining length 0), which MQTT 5
//!   §3.14.2.1 allows; a connection treats that refusal on a DISCONNECT packet as the normal
//!   disconnect it is;
//! - its writer drops the property length of a DISCONNECT without properties (valid, but its
//!   own reader then fails), and turns one with an empty property list into a normal
//!   disconnect: the endpoint's DISCONNECTs always carry a Reason String.

use bytes::{Bytes, BytesMut};
use rumqttc::mqttbytes as m4_base;
use rumqttc::mqttbytes::v4 as m4;
use rumqttc::v5::mqttbytes as m5_base;
use rumqttc::v5::mqttbytes::v5 as m5;

/// The MQTT protocol version a connection negotiated in its CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// MQTT 3.1.1 (protocol level 4).
    V311,
    /// MQTT 5.0 (protocol level 5).
    V5,
}

/// QoS as the endpoint uses it: 0, 1 or 2.
pub(crate) type Qos = u8;

/// What a CONNECT asked for, as far as the endpoint looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Connect {
    /// Negotiated version.
    pub(crate) version: Version,
    /// Client identifier: the agent id.
    pub(crate) client_id: String,
    /// Keepalive in seconds (0: none).
    pub(crate) keep_alive_s: u16,
    /// Clean session (3.1.1) or clean start (5.0).
    pub(crate) clean_start: bool,
    /// Whether a will was given (accepted, never published: see PROTOCOL.md).
    pub(crate) has_will: bool,
    /// Username, if any: for the credentials hook.
    pub(crate) username: Option<String>,
    /// Password, if any: for the credentials hook.
    pub(crate) password: Option<String>,
    /// MQTT 5 Receive Maximum: most QoS 1/2 publishes the client takes unacknowledged.
    pub(crate) receive_maximum: Option<u16>,
    /// MQTT 5 Maximum Packet Size the client accepts.
    pub(crate) max_packet_size: Option<u32>,
    /// MQTT 5 Session Expiry Interval asked for (the endpoint keeps no session: answered 0).
    pub(crate) session_expiry_s: Option<u32>,
}

/// One PUBLISH from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Publish {
    /// Topic name; `None` if it was not UTF-8 (5.0 hands topics out as bytes).
    pub(crate) topic: Option<String>,
    /// QoS of the publish.
    pub(crate) qos: Qos,
    /// Packet id (0 for QoS 0).
    pub(crate) pkid: u16,
    /// Payload as received.
    pub(crate) payload: Bytes,
    /// MQTT 5 Response Topic.
    pub(crate) response_topic: Option<String>,
    /// MQTT 5 Correlation Data.
    pub(crate) correlation_data: Option<Bytes>,
}

/// The packets a server reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// PUBLISH.
    Publish(Publish),
    /// PUBACK to a QoS 1 message the endpoint sent.
    PubAck(u16),
    /// PUBREL of the client's QoS 2 publish.
    PubRel(u16),
    /// SUBSCRIBE: packet id, then each filter and its requested QoS.
    Subscribe(u16, Vec<(String, Qos)>),
    /// UNSUBSCRIBE: packet id and filters.
    Unsubscribe(u16, Vec<String>),
    /// PINGREQ.
    PingReq,
    /// DISCONNECT.
    Disconnect,
    /// A packet a client must not send to a server (CONNACK, SUBACK, PUBREC/PUBCOMP to a
    /// QoS 2 the endpoint never sends, AUTH, ...): a protocol error.
    Unexpected(&'static str),
}

/// Why bytes could not become a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The packet declares a remaining length over the limit: refused before it is buffered.
    TooLarge {
        /// The declared remaining length.
        declared: usize,
    },
    /// A CONNECT with an unsupported protocol name or level.
    UnsupportedProtocol,
    /// The first packet is not a CONNECT.
    NotConnect,
    /// Anything else the codec refused.
    Malformed(String),
    /// A DISCONNECT without a reason code, which rumqttc's 5.0 reader refuses (module doc).
    BareDisconnect,
}

/// Reads the first packet of a connection, which must be a CONNECT, in whichever version it
/// names. `Ok(None)`: not complete yet, read more.
pub(crate) fn decode_connect(
    buf: &mut BytesMut,
    packet_bytes_max: usize,
) -> Result<Option<Connect>, DecodeError> {
    // Framing is the same in both versions: check completeness and size without consuming.
    let header = match m4_base::check(buf.iter(), packet_bytes_max) {
        Ok(header) => header,
        Err(m4_base::Error::InsufficientBytes(_)) => return Ok(None),
        Err(m4_base::Error::PayloadSizeLimitExceeded(declared)) => {
            return Err(DecodeError::TooLarge { declared });
        }
        Err(error) => return Err(DecodeError::Malformed(error.to_string())),
    };
    if !matches!(header.packet_type(), Ok(m4_base::PacketType::Connect)) {
        return Err(DecodeError::NotConnect);
    }
    // Try 5.0 on a copy of this one packet; its reader refuses every level but 5, and then
    // the 3.1.1 reader (which takes level 4) reads the original.
    let mut copy = BytesMut::from(&buf[..header.frame_length()]);
    match m5::Packet::read(&mut copy, Some(limit_u32(packet_bytes_max))) {
        Ok(m5::Packet::Connect(connect, will, login)) => {
            let _ = buf.split_to(header.frame_length());
            let properties = connect_limits(connect.properties);
            return Ok(Some(Connect {
                version: Version::V5,
                client_id: connect.client_id,
                keep_alive_s: connect.keep_alive,
                clean_start: connect.clean_start,
                has_will: will.is_some(),
                username: login.as_ref().map(|login| login.username.clone()),
                password: login.map(|login| login.password),
                receive_maximum: properties.receive_maximum,
                max_packet_size: properties.max_packet_size,
                session_expiry_s: properties.session_expiry_interval,
            }));
        }
        Ok(_) => return Err(DecodeError::NotConnect),
        Err(m5_base::Error::InvalidProtocolLevel(_)) => {}
        Err(m5_base::Error::InvalidProtocol) => return Err(DecodeError::UnsupportedProtocol),
        Err(error) => return Err(DecodeError::Malformed(error.to_string())),
    }
    match m4::Packet::read(buf, packet_bytes_max) {
        Ok(m4::Packet::Connect(connect)) if connect.protocol == m4_base::Protocol::V4 => {
            Ok(Some(Connect {
                version: Version::V311,
                client_id: connect.client_id,
                keep_alive_s: connect.keep_alive,
                clean_start: connect.clean_session,
                has_will: connect.last_will.is_some(),
                username: connect.login.as_ref().map(|login| login.username.clone()),
                password: connect.login.map(|login| login.password),
                receive_maximum: None,
                max_packet_size: None,
                session_expiry_s: None,
            }))
        }
        Ok(_)
        | Err(m4_base::Error::InvalidProtocolLevel(_))
        | Err(m4_base::Error::InvalidProtocol) => Err(DecodeError::UnsupportedProtocol),
        Err(error) => Err(DecodeError::Malformed(error.to_string())),
    }
}

/// Reads the next packet after the CONNECT. `Ok(None)`: not complete yet, read more.
pub(crate) fn decode(
    version: Version,
    buf: &mut BytesMut,
    packet_bytes_max: usize,
) -> Result<Option<Incoming>, DecodeError> {
    match version {
        Version::V311 => decode_v4(buf, packet_bytes_max),
        Version::V5 => decode_v5(buf, packet_bytes_max),
    }
}

fn decode_v4(buf: &mut BytesMut, packet_bytes_max: usize) -> Result<Option<Incoming>, DecodeError> {
    let packet = match m4::Packet::read(buf, packet_bytes_max) {
        Ok(packet) => packet,
        Err(m4_base::Error::InsufficientBytes(_)) => return Ok(None),
        Err(m4_base::Error::PayloadSizeLimitExceeded(declared)) => {
            return Err(DecodeError::TooLarge { declared });
        }
        Err(error) => return Err(DecodeError::Malformed(error.to_string())),
    };
    Ok(Some(match packet {
        m4::Packet::Connect(_) => Incoming::Unexpected("a second CONNECT"),
        m4::Packet::Publish(publish) => Incoming::Publish(Publish {
            topic: Some(publish.topic),
            qos: publish.qos as Qos,
            pkid: publish.pkid,
            payload: publish.payload,
            response_topic: None,
            correlation_data: None,
        }),
        m4::Packet::PubAck(ack) => Incoming::PubAck(ack.pkid),
        m4::Packet::PubRel(rel) => Incoming::PubRel(rel.pkid),
        m4::Packet::Subscribe(subscribe) => {
            subscription(subscribe.pkid, subscribe.filters, |filter| {
                (filter.path, filter.qos as Qos)
            })
        }
        m4::Packet::Unsubscribe(unsubscribe) => {
            Incoming::Unsubscribe(unsubscribe.pkid, unsubscribe.topics)
        }
        m4::Packet::PingReq => Incoming::PingReq,
        m4::Packet::Disconnect => Incoming::Disconnect,
        m4::Packet::ConnAck(_) => Incoming::Unexpected("CONNACK"),
        m4::Packet::PubRec(_) => Incoming::Unexpected("PUBREC"),
        m4::Packet::PubComp(_) => Incoming::Unexpected("PUBCOMP"),
        m4::Packet::SubAck(_) => Incoming::Unexpected("SUBACK"),
        m4::Packet::UnsubAck(_) => Incoming::Unexpected("UNSUBACK"),
        m4::Packet::PingResp => Incoming::Unexpected("PINGRESP"),
    }))
}

fn decode_v5(buf: &mut BytesMut, packet_bytes_max: usize) -> Result<Option<Incoming>, DecodeError> {
    // A DISCONNECT is the packet type nibble 14; remember it in case the reader refuses it.
    let disconnect = buf.first().is_some_and(|byte| byte >> 4 == 14);
    let packet = match m5::Packet::read(buf, Some(limit_u32(packet_bytes_max))) {
        Ok(packet) => packet,
        Err(m5_base::Error::InsufficientBytes(_)) => return Ok(None),
        Err(m5_base::Error::PayloadSizeLimitExceeded { pkt_size, .. }) => {
            return Err(DecodeError::TooLarge { declared: pkt_size });
        }
        Err(m5_base::Error::PayloadRequired) if disconnect => {
            return Err(DecodeError::BareDisconnect);
        }
        Err(error) => return Err(DecodeError::Malformed(error.to_string())),
    };
    Ok(Some(match packet {
        m5::Packet::Connect(..) => Incoming::Unexpected("a second CONNECT"),
        m5::Packet::Publish(publish) => {
            let (response_topic, correlation_data) = match publish.properties {
                Some(properties) => (properties.response_topic, properties.correlation_data),
                None => (None, None),
            };
            Incoming::Publish(Publish {
                topic: String::from_utf8(publish.topic.to_vec()).ok(),
                qos: publish.qos as Qos,
                pkid: publish.pkid,
                payload: publish.payload,
                response_topic,
                correlation_data,
            })
        }
        m5::Packet::PubAck(ack) => Incoming::PubAck(ack.pkid),
        m5::Packet::PubRel(rel) => Incoming::PubRel(rel.pkid),
        m5::Packet::Subscribe(subscribe) => {
            subscription(subscribe.pkid, subscribe.filters, |filter| {
                (filter.path, filter.qos as Qos)
            })
        }
        m5::Packet::Unsubscribe(unsubscribe) => {
            Incoming::Unsubscribe(unsubscribe.pkid, unsubscribe.filters)
        }
        m5::Packet::PingReq(_) => Incoming::PingReq,
        m5::Packet::Disconnect(_) => Incoming::Disconnect,
        m5::Packet::Auth(_) => Incoming::Unexpected("AUTH (enhanced authentication)"),
        m5::Packet::ConnAck(_) => Incoming::Unexpected("CONNACK"),
        m5::Packet::PubRec(_) => Incoming::Unexpected("PUBREC"),
        m5::Packet::PubComp(_) => Incoming::Unexpected("PUBCOMP"),
        m5::Packet::SubAck(_) => Incoming::Unexpected("SUBACK"),
        m5::Packet::UnsubAck(_) => Incoming::Unexpected("UNSUBACK"),
        m5::Packet::PingResp(_) => Incoming::Unexpected("PINGRESP"),
    }))
}

/// A SUBSCRIBE's packet id and its filters as (topic filter, requested QoS), from either
/// version's filter type by `path_qos`.
fn subscription<F>(pkid: u16, filters: Vec<F>, path_qos: fn(F) -> (String, Qos)) -> Incoming {
    Incoming::Subscribe(pkid, filters.into_iter().map(path_qos).collect())
}

/// Why a CONNECT is refused, in the CONNACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Protocol name or level not served (3.1.1: 0x01; 5.0: 0x84).
    UnsupportedProtocol,
    /// The client id is not a valid agent id (3.1.1: 0x02; 5.0: 0x85).
    BadClientId,
    /// Bad username or password (3.1.1: 0x04; 5.0: 0x86): every credentials refusal.
    BadCredentials,
    /// Not authorized (3.1.1: 0x05; 5.0: 0x87).
    NotAuthorized,
    /// The endpoint is shutting down (3.1.1: 0x03; 5.0: 0x88).
    Unavailable,
}

/// The packets a server writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outgoing {
    /// CONNACK accepting the connection; `session_expiry_zeroed` tells a 5.0 client that
    /// asked for a session that none is kept.
    ConnAck {
        /// Largest packet the endpoint accepts (5.0 property).
        packet_bytes_max: usize,
        /// Most unacknowledged QoS 1/2 publishes the endpoint takes (5.0 Receive Maximum).
        receive_maximum: u16,
        /// Send Session Expiry Interval 0 (5.0): the client asked for a longer one.
        session_expiry_zeroed: bool,
    },
    /// CONNACK refusing the connection (then the connection closes).
    ConnRefused(Refusal),
    /// PUBACK; `refused` gives a 5.0 client reason 0x87 (not authorized).
    PubAck {
        /// Packet id.
        pkid: u16,
        /// Whether the publish was refused (5.0 reason code; 3.1.1 cannot say).
        refused: bool,
    },
    /// PUBREC of a client's QoS 2 publish.
    PubRec {
        /// Packet id.
        pkid: u16,
        /// Whether the publish was refused (5.0 reason 0x87 ends the exchange).
        refused: bool,
    },
    /// PUBCOMP ending a client's QoS 2 exchange.
    PubComp(u16),
    /// SUBACK: per filter, the granted QoS or `None` for a refusal.
    SubAck(u16, Vec<Option<Qos>>),
    /// UNSUBACK: per filter, whether a subscription existed (5.0 reason codes).
    UnsubAck(u16, Vec<bool>),
    /// PINGRESP.
    PingResp,
    /// A message to the client.
    Publish {
        /// Topic name.
        topic: String,
        /// QoS 0 or 1.
        qos: Qos,
        /// Packet id (QoS 1).
        pkid: u16,
        /// Payload.
        payload: Bytes,
        /// MQTT 5 Correlation Data to echo.
        correlation_data: Option<Bytes>,
    },
    /// A 5.0 DISCONNECT with a reason (3.1.1 has no server DISCONNECT: nothing is written).
    Disconnect(DisconnectReason),
}

/// Why the endpoint closes a 5.0 connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DisconnectReason {
    /// 0x81 Malformed Packet.
    Malformed,
    /// 0x82 Protocol Error.
    ProtocolError,
    /// 0x8B Server shutting down.
    ShuttingDown,
    /// 0x8D Keep Alive timeout.
    KeepAliveTimeout,
    /// 0x87 Not authorized: the account was removed or its secret rotated.
    NotAuthorized,
    /// 0x8E Session taken over.
    SessionTakenOver,
    /// 0x93 Receive Maximum exceeded.
    ReceiveMaximumExceeded,
    /// 0x95 Packet too large.
    PacketTooLarge,
    /// 0x97 Quota exceeded (a slow consumer's queue overflowed).
    QuotaExceeded,
}

impl DisconnectReason {
    /// The Reason String sent with the reason code.
    fn text(self) -> &'static str {
        match self {
            DisconnectReason::Malformed => "malformed packet",
            DisconnectReason::ProtocolError => "protocol error",
            DisconnectReason::ShuttingDown => "hivekeeper is shutting down",
            DisconnectReason::KeepAliveTimeout => "nothing received for 1.5 x the keepalive",
            DisconnectReason::NotAuthorized => "the account was removed or its secret rotated",
            DisconnectReason::SessionTakenOver => "another connection with this client id",
            DisconnectReason::ReceiveMaximumExceeded => "receive maximum exceeded",
            DisconnectReason::PacketTooLarge => "packet larger than the maximum packet size",
            DisconnectReason::QuotaExceeded => "slow consumer: the outbound queue overflowed",
        }
    }
}

/// Why a packet was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EncodeError {
    /// Larger than the client's maximum packet size (5.0): skipped.
    TooLarge,
    /// Anything else the codec refused (a topic over 65535 bytes, ...).
    Other(String),
}

/// Appends `packet` to `out` in `version`'s encoding. `client_packet_max`: the client's
/// Maximum Packet Size (5.0), if it gave one.
pub(crate) fn encode(
    version: Version,
    packet: Outgoing,
    out: &mut BytesMut,
    client_packet_max: Option<u32>,
) -> Result<(), EncodeError> {
    match version {
        Version::V311 => encode_v4(packet, out),
        Version::V5 => encode_v5(packet, out, client_packet_max),
    }
}

fn encode_v4(packet: Outgoing, out: &mut BytesMut) -> Result<(), EncodeError> {
    let packet = match packet {
        Outgoing::ConnAck { .. } => {
            m4::Packet::ConnAck(m4::ConnAck::new(m4::ConnectReturnCode::Success, false))
        }
        Outgoing::ConnRefused(refusal) => {
            let code = match refusal {
                Refusal::UnsupportedProtocol => m4::ConnectReturnCode::RefusedProtocolVersion,
                Refusal::BadClientId => m4::ConnectReturnCode::BadClientId,
                Refusal::BadCredentials => m4::ConnectReturnCode::BadUserNamePassword,
                Refusal::NotAuthorized => m4::ConnectReturnCode::NotAuthorized,
                Refusal::Unavailable => m4::ConnectReturnCode::ServiceUnavailable,
            };
            m4::Packet::ConnAck(m4::ConnAck::new(code, false))
        }
        // 3.1.1 has no negative acknowledgement: a refused publish is acknowledged and
        // dropped (§3.3.5 allows exactly that or closing).
        Outgoing::PubAck { pkid, .. } => m4::Packet::PubAck(m4::PubAck::new(pkid)),
        Outgoing::PubRec { pkid, .. } => m4::Packet::PubRec(m4::PubRec::new(pkid)),
        Outgoing::PubComp(pkid) => m4::Packet::PubComp(m4::PubComp::new(pkid)),
        Outgoing::SubAck(pkid, codes) => m4::Packet::SubAck(m4::SubAck::new(
            pkid,
            codes
                .into_iter()
                .map(|code| match code.and_then(qos_v4) {
                    Some(qos) => m4::SubscribeReasonCode::Success(qos),
                    None => m4::SubscribeReasonCode::Failure,
                })
                .collect(),
        )),
        Outgoing::UnsubAck(pkid, _) => m4::Packet::UnsubAck(m4::UnsubAck::new(pkid)),
        Outgoing::PingResp => m4::Packet::PingResp,
        Outgoing::Publish {
            topic,
            qos,
            pkid,
            payload,
            ..
        } => {
            let mut publish = m4::Publish::from_bytes(
                topic,
                qos_v4(qos).unwrap_or(m4_base::QoS::AtMostOnce),
                payload,
            );
            publish.pkid = pkid;
            m4::Packet::Publish(publish)
        }
        Outgoing::Disconnect(_) => return Ok(()),
    };
    packet
        .write(out, usize::MAX)
        .map(|_| ())
        .map_err(|error| EncodeError::Other(error.to_string()))
}

fn encode_v5(
    packet: Outgoing,
    out: &mut BytesMut,
    client_packet_max: Option<u32>,
) -> Result<(), EncodeError> {
    let packet = match packet {
        Outgoing::ConnAck {
            packet_bytes_max,
            receive_maximum,
            session_expiry_zeroed,
        } => connack_v5(packet_bytes_max, receive_maximum, session_expiry_zeroed),
        Outgoing::ConnRefused(refusal) => conn_refused_v5(refusal),
        Outgoing::PubAck { pkid, refused } => m5::Packet::PubAck(m5::PubAck {
            pkid,
            reason: if refused {
                m5::PubAckReason::NotAuthorized
            } else {
                m5::PubAckReason::Success
            },
            properties: None,
        }),
        Outgoing::PubRec { pkid, refused } => m5::Packet::PubRec(m5::PubRec {
            pkid,
            reason: if refused {
                m5::PubRecReason::NotAuthorized
            } else {
                m5::PubRecReason::Success
            },
            properties: None,
        }),
        Outgoing::PubComp(pkid) => m5::Packet::PubComp(m5::PubComp::new(pkid, None)),
        Outgoing::SubAck(pkid, codes) => m5::Packet::SubAck(m5::SubAck {
            pkid,
            return_codes: codes
                .into_iter()
                .map(|code| match code.and_then(qos_v5) {
                    Some(qos) => m5::SubscribeReasonCode::Success(qos),
                    None => m5::SubscribeReasonCode::NotAuthorized,
                })
                .collect(),
            properties: None,
        }),
        Outgoing::UnsubAck(pkid, existed) => m5::Packet::UnsubAck(m5::UnsubAck {
            pkid,
            reasons: existed
                .into_iter()
                .map(|existed| {
                    if existed {
                        m5::UnsubAckReason::Success
                    } else {
                        m5::UnsubAckReason::NoSubscriptionExisted
                    }
                })
                .collect(),
            properties: None,
        }),
        Outgoing::PingResp => m5::Packet::PingResp(m5::PingResp),
        Outgoing::Publish {
            topic,
            qos,
            pkid,
            payload,
            correlation_data,
        } => {
            let properties = correlation_data.map(|correlation_data| m5::PublishProperties {
                correlation_data: Some(correlation_data),
                ..m5::PublishProperties::default()
            });
            let mut publish = m5::Publish::new(
                topic,
                qos_v5(qos).unwrap_or(m5_base::QoS::AtMostOnce),
                payload,
                properties,
            );
            publish.pkid = pkid;
            m5::Packet::Publish(publish)
        }
        Outgoing::Disconnect(reason) => disconnect_v5(reason),
    };
    match packet.write(out, client_packet_max) {
        Ok(_) => Ok(()),
        Err(m5_base::Error::OutgoingPacketTooLarge { .. }) => Err(EncodeError::TooLarge),
        Err(error) => Err(EncodeError::Other(error.to_string())),
    }
}

/// The 5.0 CONNACK accepting a connection, with the properties that tell the client the
/// endpoint's limits and what it does not offer.
fn connack_v5(
    packet_bytes_max: usize,
    receive_maximum: u16,
    session_expiry_zeroed: bool,
) -> m5::Packet {
    m5::Packet::ConnAck(m5::ConnAck {
        session_present: false,
        code: m5::ConnectReturnCode::Success,
        properties: Some(m5::ConnAckProperties {
            session_expiry_interval: session_expiry_zeroed.then_some(0),
            receive_max: Some(receive_maximum),
            max_qos: None,
            // No retained messages, wildcards, shared subscriptions or subscription ids:
            // the endpoint serves two fixed topics per agent (PROTOCOL.md §1).
            retain_available: Some(0),
            max_packet_size: Some(limit_u32(packet_bytes_max)),
            assigned_client_identifier: None,
            topic_alias_max: None,
            reason_string: None,
            user_properties: Vec::new(),
            wildcard_subscription_available: Some(0),
            subscription_identifiers_available: Some(0),
            shared_subscription_available: Some(0),
            server_keep_alive: None,
            response_information: None,
            server_reference: None,
            authentication_method: None,
            authentication_data: None,
        }),
    })
}

/// The 5.0 CONNACK refusing a connection, with the reason code of `refusal`.
fn conn_refused_v5(refusal: Refusal) -> m5::Packet {
    let code = match refusal {
        Refusal::UnsupportedProtocol => m5::ConnectReturnCode::UnsupportedProtocolVersion,
        Refusal::BadClientId => m5::ConnectReturnCode::ClientIdentifierNotValid,
        Refusal::BadCredentials => m5::ConnectReturnCode::BadUserNamePassword,
        Refusal::NotAuthorized => m5::ConnectReturnCode::NotAuthorized,
        Refusal::Unavailable => m5::ConnectReturnCode::ServerUnavailable,
    };
    m5::Packet::ConnAck(m5::ConnAck {
        session_present: false,
        code,
        properties: None,
    })
}

/// The 5.0 DISCONNECT the endpoint sends for `reason`, with its reason code and a Reason String.
fn disconnect_v5(reason: DisconnectReason) -> m5::Packet {
    let code = match reason {
        DisconnectReason::Malformed => m5::DisconnectReasonCode::MalformedPacket,
        DisconnectReason::ProtocolError => m5::DisconnectReasonCode::ProtocolError,
        DisconnectReason::ShuttingDown => m5::DisconnectReasonCode::ServerShuttingDown,
        DisconnectReason::KeepAliveTimeout => m5::DisconnectReasonCode::KeepAliveTimeout,
        DisconnectReason::NotAuthorized => m5::DisconnectReasonCode::NotAuthorized,
        DisconnectReason::SessionTakenOver => m5::DisconnectReasonCode::SessionTakenOver,
        DisconnectReason::ReceiveMaximumExceeded => {
            m5::DisconnectReasonCode::ReceiveMaximumExceeded
        }
        DisconnectReason::PacketTooLarge => m5::DisconnectReasonCode::PacketTooLarge,
        DisconnectReason::QuotaExceeded => m5::DisconnectReasonCode::QuotaExceeded,
    };
    // With a Reason String: rumqttc 0.25 writes a reason code without a property
    // length, which is valid MQTT 5 but which its own reader (and so any rumqttc v5
    // client) cannot read, and with an empty property list it writes a normal
    // disconnect instead (module doc).
    m5::Packet::Disconnect(m5::Disconnect {
        reason_code: code,
        properties: Some(m5::DisconnectProperties {
            session_expiry_interval: None,
            reason_string: Some(reason.text().to_string()),
            user_properties: Vec::new(),
            server_reference: None,
        }),
    })
}

fn qos_v4(qos: Qos) -> Option<m4_base::QoS> {
    match qos {
        0 => Some(m4_base::QoS::AtMostOnce),
        1 => Some(m4_base::QoS::AtLeastOnce),
        2 => Some(m4_base::QoS::ExactlyOnce),
        _ => None,
    }
}

fn qos_v5(qos: Qos) -> Option<m5_base::QoS> {
    match qos {
        0 => Some(m5_base::QoS::AtMostOnce),
        1 => Some(m5_base::QoS::AtLeastOnce),
        2 => Some(m5_base::QoS::ExactlyOnce),
        _ => None,
    }
}

/// A byte limit as the 5.0 codec takes it.
fn limit_u32(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// The CONNECT properties the endpoint reads, defaulted when absent.
#[derive(Debug, Default)]
struct ConnectLimits {
    receive_maximum: Option<u16>,
    max_packet_size: Option<u32>,
    session_expiry_interval: Option<u32>,
}

/// Reads [`ConnectLimits`] out of rumqttc's optional CONNECT properties.
fn connect_limits(properties: Option<m5::ConnectProperties>) -> ConnectLimits {
    match properties {
        Some(properties) => ConnectLimits {
            receive_maximum: properties.receive_maximum,
            max_packet_size: properties.max_packet_size,
            session_expiry_interval: properties.session_expiry_interval,
        },
        None => ConnectLimits::default(),
    }
}
