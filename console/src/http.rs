//! The HTTP shapes the console answers with: JSON, errors as JSON with the protocol's codes,
//! embedded files, and the server-sent events body.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hivekeeper_protocol::{ErrorBody, ErrorCode};
use http_body_util::BodyExt;
use http_body_util::Full;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde::Serialize;
use tokio::sync::mpsc;

/// Every answer's body: whole, or a stream of events.
pub type ConsoleBody = BoxBody<Bytes, Infallible>;

/// An API refusal: an HTTP status and the protocol's error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {code}: {message}")]
pub struct ApiError {
    /// The HTTP status it is answered with.
    pub status: StatusCode,
    /// The protocol's code (docs/PROTOCOL.md §9).
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// A refusal with `code`, its HTTP status derived from the code.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status: status_of(code),
            code,
            message: message.into(),
        }
    }

    /// `bad_request`: the URL or the form is not one the API reads.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::BadRequest, message)
    }

    /// `forbidden`: not with this session (or without one).
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Forbidden, message)
    }

    /// The service's own refusal.
    pub fn from_body(body: ErrorBody) -> ApiError {
        ApiError::new(body.code, body.message)
    }

    /// The JSON answer: `{"error": {"code": ..., "message": ...}}`.
    pub fn response(&self) -> Response<ConsoleBody> {
        #[derive(Serialize)]
        struct Wire<'a> {
            error: ErrorWire<'a>,
        }
        #[derive(Serialize)]
        struct ErrorWire<'a> {
            code: ErrorCode,
            message: &'a str,
        }
        let wire = Wire {
            error: ErrorWire {
                code: self.code,
                message: &self.message,
            },
        };
        json(self.status, &wire)
    }
}

/// The HTTP status that says what `code` says.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadRequest | ErrorCode::UnknownOp | ErrorCode::LimitMismatch => {
            StatusCode::BAD_REQUEST
        }
        ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::LeaseNotFound => StatusCode::NOT_FOUND,
        ErrorCode::NotHolder | ErrorCode::WouldBlock => StatusCode::CONFLICT,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::ResourceExhausted | ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Compacted => StatusCode::GONE,
    }
}

/// `value` as a JSON answer.
pub fn json(status: StatusCode, value: &impl Serialize) -> Response<ConsoleBody> {
    let text = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
    whole(status, "application/json", Bytes::from(text))
}

/// A whole body of `content_type`, never cached (the page and the data change with the build
/// and the state).
pub fn whole(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<ConsoleBody> {
    let mut response = Response::new(Full::new(body).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A `text/event-stream` answer fed by `events` until either side goes.
pub fn event_stream(events: mpsc::Receiver<Bytes>) -> Response<ConsoleBody> {
    let mut response = Response::new(EventBody(events).boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A body whose frames come from a channel: it ends when the sender goes.
struct EventBody(mpsc::Receiver<Bytes>);

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The query string's pairs, percent-decoded (`+` is a space).
pub fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let Some(query) = query.filter(|query| !query.is_empty()) else {
        return Ok(Vec::new());
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(name)?, percent_decode(value)?))
        })
        .collect()
}

/// `text` with its `%XX` escapes decoded and `+` read as a space.
pub fn percent_decode(text: &str) -> Result<String, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = bytes
                    .get(at + 1..at + 3)
                    .and_then(|hex| std::str::from_utf8(hex).ok())
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .ok_or_else(|| ApiError::bad_request(format!("bad escape in {text:?}")))?;
                out.push(hex);
                at += 3;
            }
            b'+' => {
                out.push(b' ');
                at += 1;
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request(format!("{text:?} is not UTF-8")))
}
