//! An HTTP/1 port, over TLS when given an acceptor, that serves the console, and hands every
//! other path to the caller (the node's metrics port answers `/metrics`, `/health`, `/ready`
//! there; the drone-fleet example, 404).

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hivekeeper_protocol::ErrorCode;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::Console;
use crate::backend::ConsoleBackend;
use crate::http::{ApiError, ConsoleBody};

/// How long a client may take to send its request's headers before the connection is closed
/// (a port scanner or a stuck client holds nothing for long).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The console, once its backend exists (the port opens before the node has started).
pub type ConsoleSlot<B> = Arc<OnceLock<Console<B>>>;

/// What answers the paths that are not the console's: `(method, path)` to a response.
pub type OtherPaths = Arc<dyn Fn(&Method, &str) -> Response<ConsoleBody> + Send + Sync>;

/// Answers `listener` until the task is aborted: the console's paths from `console` (503 until
/// it is set), every other path from `other`; over TLS with `tls`. One task per connection.
pub async fn serve<B: ConsoleBackend>(
    listener: TcpListener,
    console: ConsoleSlot<B>,
    other: OtherPaths,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(%error, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (console, other, tls) = (console.clone(), other.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => connection(stream, console, other).await,
                // The handshake is bounded like the headers: a silent client holds nothing.
                Some(tls) => {
                    match tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(stream)).await {
                        Ok(Ok(stream)) => connection(stream, console, other).await,
                        Ok(Err(error)) => tracing::debug!(%error, "HTTPS handshake failed"),
                        Err(_) => tracing::debug!("HTTPS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serves one connection.
async fn connection<B, S>(stream: S, console: ConsoleSlot<B>, other: OtherPaths)
where
    B: ConsoleBackend,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let console = console.clone();
        let plain = (!Console::<B>::serves(request.uri().path()))
            .then(|| other(request.method(), request.uri().path()));
        async move {
            let answer = match plain {
                Some(plain) => plain,
                None => match console.get() {
                    Some(console) => console.answer(request).await,
                    None => ApiError::new(
                        ErrorCode::Unavailable,
                        "starting: the node is not running yet",
                    )
                    .response(),
                },
            };
            Ok::<_, Infallible>(answer)
        }
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "HTTP connection ended");
    }
}
