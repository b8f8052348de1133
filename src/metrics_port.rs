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

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hivekeeper_console::{ApiError, Console, ConsoleBody};
use hivekeeper_coordinator::node::Health;
use hivekeeper_protocol::ErrorCode;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// How long a client may take to send its request's headers before the connection is closed
/// (a port scanner or a stuck client holds nothing for long).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the node's health comes from: set once the node has started.
pub type HealthSource = Arc<OnceLock<Box<dyn Fn() -> Health + Send + Sync>>>;

/// The web console: set once the node has started.
pub type ConsoleSource = Arc<OnceLock<Console<crate::console_backend::NodeConsole>>>;

/// Answers the metrics port on `listener` until the task is aborted.
pub async fn serve(
    listener: TcpListener,
    prometheus: PrometheusHandle,
    health: HealthSource,
    console: ConsoleSource,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(%error, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (prometheus, health) = (prometheus.clone(), health.clone());
        let console = console.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let console = console.clone();
                let plain =
                    (!Console::<crate::console_backend::NodeConsole>::serves(request.uri().path()))
                        .then(|| {
                            answer(request.method(), request.uri().path(), &prometheus, &health)
                        });
                async move {
                    let answer = match plain {
                        Some(plain) => plain.map(|body| body.boxed()),
                        None => console_answer(&console, request).await,
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
                tracing::debug!(%error, "metrics connection ended");
            }
        });
    }
}

/// The console's answer, or 503 before the node has started.
async fn console_answer(
    console: &ConsoleSource,
    request: Request<hyper::body::Incoming>,
) -> Response<ConsoleBody> {
    match console.get() {
        Some(console) => console.answer(request).await,
        None => ApiError::new(
            ErrorCode::Unavailable,
            "starting: the node is not running yet",
        )
        .response(),
    }
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
            format!("{other} is not served here: try /metrics, /health, /ready or /ui\n"),
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
