//! The metrics port (`[metrics] listen`, `--metrics-listen`): `/metrics` for Prometheus,
//! `/health` and `/ready` for load balancers and orchestrators, the web console under `/ui` and
//! `/api/v1/` (the `hivekeeper-console` crate, docs/HTTP.md), 404 for anything else.
//!
//! ```text
//!  GET /metrics ─▶ 200: the recorder's text, then the process's figures (process_metrics.rs)
//!  GET /health  ─▶ 200 "ok: ..." with a quorum │ 503 "no quorum: ..." without one, or starting
//!  GET /ready   ─▶ 200 with a quorum and every committed entry applied here │ 503 otherwise
//!  /ui, /api/v1/… ─▶ the console (503 until the node has started)
//!  other paths  ─▶ 404;  other methods ─▶ 405
//! ```
//!
//! The answers come from the node's own view ([`Health`], from Raft's metrics): no request to
//! another member, so a probe is cheap and never hangs. Before the node has started (the port
//! opens first, so a taken port fails the start early), `/health` and `/ready` answer 503.
//! The exporter's own listener answered every path with the metrics text, so a probe of
//! `/health` always saw 200; hence this server (hyper's HTTP/1, one task per connection).

use std::sync::{Arc, OnceLock};

use hivekeeper::console_backend::NodeConsole;
use hivekeeper_console::{ConsoleSlot, TlsAcceptor};
use hivekeeper_coordinator::node::Health;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// Where the node's health comes from: set once the node has started.
pub type HealthSource = Arc<OnceLock<Box<dyn Fn() -> Health + Send + Sync>>>;

/// The web console: set once the node has started.
pub type ConsoleSource = ConsoleSlot<NodeConsole>;

/// Answers the metrics port on `listener` until the task is aborted: the console's paths from
/// `console`, the others here (hyper's HTTP/1, one task per connection: the console's server),
/// over TLS with `tls` (`[metrics] tls_cert`, `tls_key`).
pub async fn serve(
    listener: TcpListener,
    prometheus: PrometheusHandle,
    health: HealthSource,
    console: ConsoleSource,
    tls: Option<TlsAcceptor>,
) {
    let other = Arc::new(move |method: &Method, path: &str| {
        answer(method, path, &prometheus, &health).map(|body| body.boxed())
    });
    hivekeeper_console::serve(listener, console, other, tls).await;
}

/// The answer to `method path`.
fn answer(
    method: &Method,
    path: &str,
    prometheus: &PrometheusHandle,
    health: &HealthSource,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} is not served here: use GET\n"),
        );
    }
    match path {
        "/metrics" => {
            let mut body = prometheus.render();
            body.push_str(&crate::process_metrics::render());
            let mut response = text(StatusCode::OK, body);
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
        "/health" | "/ready" => {
            let Some(health) = health.get().map(|health| health()) else {
                return text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "starting: the node is not running yet\n".into(),
                );
            };
            let up = if path == "/health" {
                health.healthy
            } else {
                health.ready
            };
            let status = if up {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, format!("{}\n", health.detail))
        }
        other => text(
            StatusCode::NOT_FOUND,
            format!("{other} is not served here: try /metrics, /health or /ready\n"),
        ),
    }
}

/// A plain-text answer.
fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
