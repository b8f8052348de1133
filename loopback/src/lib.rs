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
//! - [`free_ports`]: distinct ports on 127.0.0.1, every listener held until all are picked.
//! - [`metrics_text`], [`metrics_text_at`]: `GET /metrics` over HTTP/1.0, bounded by a timeout.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `count` distinct ports on 127.0.0.1 that were free a moment ago. Every listener stays bound
/// until all are picked: binding port 0 and closing it at once, one port at a time, can hand
/// out the same port twice, and then one member answered on another's peer address (seen once
/// in 40 failover runs: that member never started, and the cluster lost its majority at the
/// next kill).
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let held = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    held.iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect()
}

/// `GET /metrics` on `127.0.0.1:port` over HTTP/1.0: the whole answer (headers, then the
/// Prometheus text) once the server closes, or `None` if it does not answer within `timeout`.
pub async fn metrics_text(port: u16, timeout: Duration) -> Option<String> {
    metrics_text_at(SocketAddr::from(([127, 0, 0, 1], port)), timeout).await
}

/// `GET /metrics` at any address (a member in a network namespace of the test's own), as
/// [`metrics_text`].
pub async fn metrics_text_at(addr: SocketAddr, timeout: Duration) -> Option<String> {
    let fetch = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
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
