//! A plain GET of a node's `/metrics`, for the bench (which member leads, is it up again) and
//! the end-to-end tests (gauges and counters): one small client for both, with no HTTP crate.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET /metrics` on `127.0.0.1:port` over HTTP/1.0: the whole answer (headers, then the
/// Prometheus text) once the server closes, or `None` if it does not answer within `timeout`.
pub async fn metrics_text(port: u16, timeout: Duration) -> Option<String> {
    let fetch = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await.ok()?;
        String::from_utf8(body).ok()
    };
    tokio::time::timeout(timeout, fetch).await.ok().flatten()
}
