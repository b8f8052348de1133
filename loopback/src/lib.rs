//! # hivekeeper-loopback: loopback helpers for the bench and the tests
//!
//! `hivekeeper bench` starts its own cluster of `hivekeeper serve` processes, and the test
//! crates start nodes, brokers and proxies: both need ports that are free and must read a
//! node's `/metrics` (which member leads, gauges and counters). This crate is that one
//! implementation, with no HTTP crate. It is a crate of its own, not a module of the root
//! package, so that the dev-only `hivekeeper-test-support` can depend on it without depending
//! on the root package (whose tests depend on the test support: two copies of it).
//!
//! # Layout
//! - [`free_ports`]: distinct ports on 127.0.0.1 below the ephemeral range, every listener held
//!   until all are picked.
//! - [`metrics_text`], [`metrics_text_at`]: `GET /metrics` over HTTP/1.0, bounded by a timeout;
//!   [`http_get`] any path of the metrics port (`/health`, `/ready`), with the status code.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `count` distinct ports on 127.0.0.1 that were free a moment ago. Every listener stays bound
/// until all are picked: binding port 0 and closing it at once, one port at a time, can hand
/// out the same port twice, and then one member answered on another's peer address (seen once
/// in 40 failover runs: that member never started, and the cluster lost its majority at the
/// next kill).
///
/// The ports come from below the kernel's ephemeral range (`ip_local_port_range`), from a
/// random place in [`PICK_LOW`, the range's start): a port handed out by binding port 0 is an
/// ephemeral one, which any process's next outgoing connection may take as its source port
/// before the node listens on it. A cluster member's peer port cannot move on a retry (every
/// member names it in `--initial-cluster`), so a test failed after five tries (seen once in
/// CI). Only where that range is too small does it fall back to port 0.
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let high = ephemeral_low().unwrap_or(32_768);
    let mut held: Vec<TcpListener> = Vec::with_capacity(count);
    if high > PICK_LOW {
        let span = u32::from(high - PICK_LOW);
        let start = random_below(span);
        for step in 0..span {
            if held.len() == count {
                break;
            }
            let port = PICK_LOW + u16::try_from((start + step) % span).expect("below high");
            if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
                held.push(listener);
            }
        }
    }
    while held.len() < count {
        held.push(TcpListener::bind("127.0.0.1:0")?);
    }
    held.iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect()
}

/// The lowest port [`free_ports`] hands out: above the well-known and the common service
/// ports.
pub const PICK_LOW: u16 = 20_000;

/// The first port of the kernel's ephemeral range, if it can be read (Linux).
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A number in `[0, below)` that differs from call to call and process to process (so that
/// test binaries running side by side start their searches in different places): the
/// standard library's randomly keyed hasher over a counter.
fn random_below(below: u32) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    u32::try_from(hasher.finish() % u64::from(below)).expect("below a u32")
}

/// `GET /metrics` on `127.0.0.1:port` over HTTP/1.0: the whole answer (headers, then the
/// Prometheus text) once the server closes, or `None` if it does not answer within `timeout`.
pub async fn metrics_text(port: u16, timeout: Duration) -> Option<String> {
    metrics_text_at(SocketAddr::from(([127, 0, 0, 1], port)), timeout).await
}

/// `GET /metrics` at any address (a member in a network namespace of the test's own), as
/// [`metrics_text`].
pub async fn metrics_text_at(addr: SocketAddr, timeout: Duration) -> Option<String> {
    get(addr, "/metrics", timeout).await
}

/// One HTTP answer: its status code and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The status code (200, 404, 503, ...).
    pub status: u16,
    /// The body, after the headers.
    pub body: String,
}

/// `GET path` on `127.0.0.1:port` over HTTP/1.0; `None` if the server does not answer within
/// `timeout` or the answer is not HTTP.
pub async fn http_get(port: u16, path: &str, timeout: Duration) -> Option<HttpAnswer> {
    let answer = get(SocketAddr::from(([127, 0, 0, 1], port)), path, timeout).await?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(HttpAnswer {
        status,
        body: body.to_string(),
    })
}

/// The whole answer to `GET path` at `addr` once the server closes (HTTP/1.0: one request
/// per connection).
async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Option<String> {
    let fetch = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await.ok()?;
        String::from_utf8(body).ok()
    };
    tokio::time::timeout(timeout, fetch).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(16).expect("bind loopback ports");
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
    }
}
