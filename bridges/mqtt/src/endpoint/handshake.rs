//! The CONNECT of a new connection: reading it, refusing a bad one with the CONNACK the
//! spec asks for, and deciding whether a well-formed one is accepted (client id, shutdown,
//! credentials).

use bytes::BytesMut;
use metrics::counter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::Shared;
use super::codec::{self, Connect, DecodeError, Outgoing, Refusal, Version};
use super::connection::CLOSE_WRITE_TIMEOUT;
use super::credentials::{self, Credentials};
use crate::transport_metrics::{
    ENDPOINT_CONNECTS_REFUSED_TOTAL, ENDPOINT_MALFORMED_PACKETS_TOTAL,
    ENDPOINT_PACKETS_TOO_LARGE_TOTAL, ENDPOINT_PROTOCOL_ERRORS_TOTAL,
};

/// Why a CONNECT is refused, if it is: a client id that is not a valid agent id, an endpoint
/// shutting down, or credentials the authenticator does not accept (checked in that order,
/// so the cheap refusals never reach the authenticator).
pub(super) async fn connect_refusal(
    shared: &Shared,
    connect: &Connect,
    stop: &watch::Receiver<bool>,
    certificate_cn: Option<&str>,
) -> Option<Refusal> {
    if hivekeeper_protocol::validate::agent_id(&connect.client_id).is_err() {
        Some(Refusal::BadClientId)
    } else if *stop.borrow() {
        Some(Refusal::Unavailable)
    } else {
        credentials::check(
            shared.authenticator.as_deref(),
            Credentials {
                agent: &connect.client_id,
                username: connect.username.as_deref(),
                password: connect.password.as_deref(),
                certificate_cn,
            },
        )
        .await
        .err()
    }
}

/// Why no CONNECT was read.
pub(super) enum ConnectFailure {
    /// The socket closed (or failed) before a whole CONNECT arrived.
    Closed,
    /// The first packet was not a usable CONNECT.
    Decode(DecodeError),
}

/// Reads until the first packet is whole and decodes it as a CONNECT.
pub(super) async fn read_connect<S: AsyncRead + Unpin>(
    stream: &mut S,
    rbuf: &mut BytesMut,
    packet_bytes_max: usize,
) -> Result<Connect, ConnectFailure> {
    loop {
        match codec::decode_connect(rbuf, packet_bytes_max) {
            Ok(Some(connect)) => return Ok(connect),
            Ok(None) => {}
            Err(error) => return Err(ConnectFailure::Decode(error)),
        }
        match stream.read_buf(rbuf).await {
            Ok(0) | Err(_) => return Err(ConnectFailure::Closed),
            Ok(_) => {}
        }
    }
}

/// Counts a bad first packet and, for an unsupported protocol, answers with the CONNACK the
/// spec asks for (3.1.1 §3.1.2.2: return code 0x01) before closing.
pub(super) async fn refuse_connect<S: AsyncWrite + Unpin>(stream: &mut S, error: DecodeError) {
    match error {
        DecodeError::UnsupportedProtocol => {
            counter!(ENDPOINT_CONNECTS_REFUSED_TOTAL).increment(1);
            let mut out = BytesMut::new();
            // 3.1.1 encoding: a client of another version reads its first bytes the same way.
            let refused = Outgoing::ConnRefused(Refusal::UnsupportedProtocol);
            if codec::encode(Version::V311, refused, &mut out, None).is_ok() {
                let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, stream.write_all(&out)).await;
            }
        }
        DecodeError::TooLarge { .. } => counter!(ENDPOINT_PACKETS_TOO_LARGE_TOTAL).increment(1),
        DecodeError::NotConnect => counter!(ENDPOINT_PROTOCOL_ERRORS_TOTAL).increment(1),
        DecodeError::Malformed(_) | DecodeError::BareDisconnect => {
            counter!(ENDPOINT_MALFORMED_PACKETS_TOTAL).increment(1);
        }
    }
}
