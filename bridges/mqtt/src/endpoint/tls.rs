//! TLS on the agent endpoint: the handshake of one accepted socket, on that connection's own
//! task (never on the accept loop, so a slow or silent client delays nobody else), bounded by
//! the same deadline as the CONNECT.
//!
//! With a client CA (mutual TLS) rustls refuses a client without a certificate of that CA
//! inside the handshake; a verified certificate without a CN is refused here, since the CN is
//! the agent's identity (the credentials hook then requires client id = CN).

use metrics::counter;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::debug;

use super::Shared;
use crate::transport_metrics::ENDPOINT_TLS_HANDSHAKE_FAILURES_TOTAL;

/// The endpoint's TLS settings, built once at start.
#[derive(Clone)]
pub(crate) struct EndpointTls {
    /// The rustls acceptor (server certificate, and the client verifier with mutual TLS).
    pub(crate) acceptor: TlsAcceptor,
    /// Whether clients must present a certificate (mutual TLS).
    pub(crate) mutual: bool,
}

/// A finished handshake: the stream and the verified client certificate's CN (mutual TLS).
pub(crate) type Accepted = (TlsStream<TcpStream>, Option<String>);

/// Runs the server side of the handshake, by `deadline`; `None` (counted) when it fails, times
/// out or the endpoint shuts down meanwhile.
pub(crate) async fn handshake(
    shared: &Shared,
    tls: &EndpointTls,
    stream: TcpStream,
    deadline: Instant,
) -> Option<Accepted> {
    let mut stop = shared.stop_rx.clone();
    let failed = || counter!(ENDPOINT_TLS_HANDSHAKE_FAILURES_TOTAL).increment(1);
    let accepted = tokio::select! {
        accepted = tokio::time::timeout_at(deadline, tls.acceptor.accept(stream)) => accepted,
        _ = stop.wait_for(|stopped| *stopped) => return None,
    };
    let stream = match accepted {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            debug!(%error, "TLS handshake failed");
            failed();
            return None;
        }
        Err(_) => {
            debug!("TLS handshake did not finish in time");
            failed();
            return None;
        }
    };
    if !tls.mutual {
        return Some((stream, None));
    }
    let cn = hivekeeper_tls::PeerIdentity::of(stream.get_ref().1)
        .and_then(|identity| identity.common_name);
    match cn {
        Some(cn) => Some((stream, Some(cn))),
        None => {
            debug!("client certificate without a CN refused");
            failed();
            None
        }
    }
}
