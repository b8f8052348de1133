//! Hivekeeper's web console: a JSON API under `/api/v1/`, its live updates as server-sent
//! events, and one page under `/ui` that shows them. It knows nothing of the node: it is given
//! a [`ConsoleBackend`] that answers protocol requests, and the node's HTTP port hands it every
//! request under those two paths ([`Console::serves`], [`Console::answer`]).
//!
//! ```text
//!  GET  /ui, /ui/app.js, /ui/style.css ─▶ the page, embedded in the binary (ui/)
//!  GET  /api/v1/session                 ─▶ who the page is, its CSRF token, what it may do
//!  POST /api/v1/login  {account, secret} ─▶ a session cookie (authentication on)
//!  POST /api/v1/logout
//!  GET  /api/v1/{view}?…                ─▶ api.rs: one read, JSON
//!  GET  /api/v1/events?view={view}&…    ─▶ hub.rs: the same read, pushed on every change
//!  POST /api/v1/leases/{lease}/revoke   ─▶ admin.revoke (an admin, with the CSRF token)
//! ```
//!
//! Who may do what: with authentication on, every API call needs a session from a login with an
//! account's secret, and the console asks the service as that account, so roles are checked
//! where MQTT's are. Without authentication the console is read-only, unless the node was
//! started `--insecure` ([`ConsoleOptions::writes_without_auth`]).

mod api;
mod backend;
mod http;
mod hub;
mod server;
mod session;

use std::sync::Arc;

use bytes::Bytes;
use hivekeeper_protocol::{Done, ErrorCode, Op, Role};
use http_body_util::{BodyExt, Limited};
use hyper::header::{COOKIE, HeaderValue, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode};
use serde::{Deserialize, Serialize};

pub use api::{ALL_ROWS_MAX, View};
pub use backend::{ConsoleBackend, Storage};
pub use http::{ApiError, ConsoleBody, status_of};
pub use hub::{COALESCE, UNAPPLIED_REFRESH};
pub use server::{ConsoleSlot, OtherPaths, serve};
pub use session::{COOKIE as SESSION_COOKIE, SESSION_TTL};
pub use tokio_rustls::TlsAcceptor;

use api::{Reader, RequestIds};
use hub::Hub;
use session::{Session, Sessions};

/// The account the console asks the service as when authentication is off (the service then
/// checks no role, so the console's own rule applies: read-only unless `--insecure`).
pub const ANONYMOUS_ACCOUNT: &str = "console";

/// The header a write carries its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Bytes of a login's body, at most.
const LOGIN_BYTES_MAX: usize = 4096;

/// How the console is set up.
#[derive(Debug, Clone, Default)]
pub struct ConsoleOptions {
    /// Without authentication, allow writes (revoke) anyway: the node's `--insecure`.
    pub writes_without_auth: bool,
    /// Mark the session cookie `Secure`: the port is served over TLS.
    pub secure_cookies: bool,
    /// Map tiles under the airspace: a URL with `{z}`, `{x}` and `{y}` (slippy-map tiles, Web
    /// Mercator); the page loads them from there, and from nowhere else.
    pub tile_url: Option<String>,
}

/// The console of one member.
pub struct Console<B> {
    backend: Arc<B>,
    options: ConsoleOptions,
    ids: Arc<RequestIds>,
    hub: Arc<Hub<B>>,
    sessions: Arc<Sessions>,
}

/// The page's files, written for this console (ui/), embedded.
const PAGE: &str = include_str!("../ui/index.html");
const SCRIPT: &str = include_str!("../ui/app.js");
const STYLE: &str = include_str!("../ui/style.css");

/// What `/api/v1/session` and a login answer.
#[derive(Debug, Serialize)]
struct SessionInfo<'a> {
    /// Whether accounts are enforced (a login is needed).
    auth: bool,
    /// Whether this page is logged in (always, without authentication).
    logged_in: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    account: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<Role>,
    /// The token writes carry in `X-CSRF-Token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    csrf: Option<&'a str>,
    /// Whether revoke is offered: an admin, or `--insecure` without authentication.
    can_write: bool,
    /// The map tiles' URL, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    tile_url: Option<&'a str>,
}

/// A login's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    account: String,
    secret: String,
}

impl<B: ConsoleBackend> Console<B> {
    /// The console over `backend`.
    pub fn new(backend: B, options: ConsoleOptions) -> Console<B> {
        let backend = Arc::new(backend);
        let ids = Arc::new(RequestIds::new());
        Console {
            hub: Arc::new(Hub::new(backend.clone(), ids.clone())),
            backend,
            options,
            ids,
            sessions: Arc::default(),
        }
    }

    /// Whether `path` is the console's: `/ui` and what is under it, and `/api/v1/...`.
    pub fn serves(path: &str) -> bool {
        path == "/ui" || path.starts_with("/ui/") || path.starts_with("/api/v1/")
    }

    /// Reads the hub has done (its topics' readers), for measurements and tests.
    pub fn hub_reads(&self) -> u64 {
        self.hub.reads()
    }

    /// The answer to a request for one of the console's paths.
    pub async fn answer<T>(&self, request: Request<T>) -> Response<ConsoleBody>
    where
        T: hyper::body::Body<Data = Bytes> + Send,
        T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = request.uri().path().to_string();
        if path == "/ui" || path.starts_with("/ui/") {
            return page(request.method(), &path, self.options.tile_url.as_deref());
        }
        let name = path.trim_start_matches("/api/v1/").to_string();
        let result = match (request.method().clone(), name.as_str()) {
            (Method::GET, "session") => Ok(self.session_info(&request)),
            (Method::POST, "login") => self.login(request).await,
            (Method::POST, "logout") => Ok(self.logout(&request)),
            (Method::GET, "events") => self.events(&request),
            (Method::POST, write) if write.starts_with("leases/") => {
                self.revoke(&request, write).await
            }
            (Method::GET | Method::HEAD, view) => self.read(&request, view).await,
            (method, _) => Err(ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                code: ErrorCode::BadRequest,
                message: format!("{method} {path} is not served: see docs/HTTP.md"),
            }),
        };
        result.unwrap_or_else(|error| error.response())
    }

    /// The session of the request's cookie.
    fn cookie_session<T>(&self, request: &Request<T>) -> Option<(String, Session)> {
        let header = request.headers().get(COOKIE)?.to_str().ok()?;
        let id = session::cookie_value(header)?;
        Some((id.to_string(), self.sessions.find(id)?))
    }

    /// Who the request is: its session, or without authentication the anonymous reader.
    fn who<T>(&self, request: &Request<T>) -> Result<Session, ApiError> {
        if let Some((_, session)) = self.cookie_session(request) {
            return Ok(session);
        }
        if self.backend.auth_enabled() {
            return Err(ApiError {
                status: StatusCode::UNAUTHORIZED,
                code: ErrorCode::Forbidden,
                message: "log in first: POST /api/v1/login".into(),
            });
        }
        Ok(self.anonymous())
    }

    /// The session of a page without authentication.
    fn anonymous(&self) -> Session {
        Session {
            account: ANONYMOUS_ACCOUNT.into(),
            role: if self.options.writes_without_auth {
                Role::Admin
            } else {
                Role::Observer
            },
            csrf: String::new(),
        }
    }

    /// `GET /api/v1/session`. Without authentication it opens a session, so that even then a
    /// write carries a CSRF token.
    fn session_info<T>(&self, request: &Request<T>) -> Response<ConsoleBody> {
        if let Some((_, session)) = self.cookie_session(request) {
            return self.session_answer(&session, None);
        }
        if self.backend.auth_enabled() {
            let info = SessionInfo {
                auth: true,
                logged_in: false,
                account: None,
                role: None,
                csrf: None,
                can_write: false,
                tile_url: None,
            };
            return http::json(StatusCode::OK, &info);
        }
        let anonymous = self.anonymous();
        let (id, session) = self.sessions.open(&anonymous.account, anonymous.role);
        self.session_answer(&session, Some(&id))
    }

    /// A session's info, setting its cookie when `new_id`.
    fn session_answer(&self, session: &Session, new_id: Option<&str>) -> Response<ConsoleBody> {
        let info = SessionInfo {
            auth: self.backend.auth_enabled(),
            logged_in: true,
            account: Some(&session.account),
            role: Some(session.role),
            csrf: Some(&session.csrf),
            can_write: session.role == Role::Admin,
            tile_url: self.options.tile_url.as_deref(),
        };
        let mut response = http::json(StatusCode::OK, &info);
        if let Some(id) = new_id {
            self.set_cookie(&mut response, Some(id));
        }
        response
    }

    fn set_cookie(&self, response: &mut Response<ConsoleBody>, id: Option<&str>) {
        let cookie = session::set_cookie(id, self.options.secure_cookies);
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(SET_COOKIE, value);
        }
    }

    /// `POST /api/v1/login`: the account's secret checked as the agent endpoint checks it.
    async fn login<T>(&self, request: Request<T>) -> Result<Response<ConsoleBody>, ApiError>
    where
        T: hyper::body::Body<Data = Bytes> + Send,
        T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let body = Limited::new(request.into_body(), LOGIN_BYTES_MAX)
            .collect()
            .await
            .map_err(|error| ApiError::bad_request(format!("reading the login: {error}")))?
            .to_bytes();
        let login: Login = serde_json::from_slice(&body).map_err(|error| {
            ApiError::bad_request(format!("a login is {{\"account\", \"secret\"}}: {error}"))
        })?;
        if !self.backend.auth_enabled() {
            return Err(ApiError::bad_request(
                "authentication is off: no login is needed",
            ));
        }
        let role = self
            .backend
            .authenticate(&login.account, &login.secret)
            .await
            .ok_or_else(|| ApiError::forbidden("bad account or secret"))?;
        if role == Role::Agent {
            return Err(ApiError::forbidden(
                "the console is for observer and admin accounts",
            ));
        }
        let (id, session) = self.sessions.open(&login.account, role);
        Ok(self.session_answer(&session, Some(&id)))
    }

    /// `POST /api/v1/logout`.
    fn logout<T>(&self, request: &Request<T>) -> Response<ConsoleBody> {
        if let Some((id, _)) = self.cookie_session(request) {
            self.sessions.close(&id);
        }
        let mut response = http::json(StatusCode::OK, &Done {});
        self.set_cookie(&mut response, None);
        response
    }

    /// `GET /api/v1/{view}`.
    async fn read<T>(
        &self,
        request: &Request<T>,
        view: &str,
    ) -> Result<Response<ConsoleBody>, ApiError> {
        let session = self.who(request)?;
        let view = View::parse(view, request.uri().query())?;
        let reader = Reader {
            backend: &*self.backend,
            account: &session.account,
            ids: &self.ids,
        };
        let value = api::read(&reader, &view).await?;
        Ok(http::json(StatusCode::OK, &value))
    }

    /// `GET /api/v1/events?view=…`: the view's read, pushed whenever it changes, until the
    /// page's session ends.
    fn events<T>(&self, request: &Request<T>) -> Result<Response<ConsoleBody>, ApiError> {
        let session = self.who(request)?;
        let live: Box<dyn Fn() -> bool + Send> = match self.cookie_session(request) {
            Some((id, _)) => {
                let sessions = self.sessions.clone();
                Box::new(move || sessions.is_live(&id))
            }
            // The anonymous reader (authentication off) has no session to end.
            None => Box::new(|| true),
        };
        let query = request.uri().query().unwrap_or("");
        let mut name = None;
        let rest: Vec<&str> = query
            .split('&')
            .filter(|pair| match pair.strip_prefix("view=") {
                Some(view) => {
                    name = Some(view);
                    false
                }
                None => true,
            })
            .collect();
        let name = name.ok_or_else(|| ApiError::bad_request("say which view: ?view=cluster"))?;
        let view = View::parse(name, Some(&rest.join("&")))?;
        Ok(http::event_stream(self.hub.subscribe(
            &session.account,
            view,
            live,
        )))
    }

    /// `POST /api/v1/leases/{lease}/revoke`.
    async fn revoke<T>(
        &self,
        request: &Request<T>,
        path: &str,
    ) -> Result<Response<ConsoleBody>, ApiError> {
        let lease = path
            .strip_prefix("leases/")
            .and_then(|rest| rest.strip_suffix("/revoke"))
            .filter(|lease| !lease.is_empty() && !lease.contains('/'))
            .ok_or_else(|| ApiError::bad_request(format!("POST /api/v1/{path} is not served")))?;
        let lease = http::percent_decode(lease)?;
        let session = self.writer(request)?;
        let reader = Reader {
            backend: &*self.backend,
            account: &session.account,
            ids: &self.ids,
        };
        let done: Done = reader.ask(Op::AdminRevoke { lease }).await?;
        Ok(http::json(StatusCode::OK, &done))
    }

    /// The session of a write: logged in (or a session without authentication), an admin
    /// (or `--insecure` without authentication), and the CSRF token it was given.
    fn writer<T>(&self, request: &Request<T>) -> Result<Session, ApiError> {
        let Some((_, session)) = self.cookie_session(request) else {
            self.who(request)?;
            return Err(ApiError::forbidden(
                "a write needs a session: GET /api/v1/session first",
            ));
        };
        if session.role != Role::Admin {
            let why = if self.backend.auth_enabled() {
                format!(
                    "account {:?} is {}: revoke needs admin",
                    session.account, session.role
                )
            } else {
                "authentication is off, so the console is read-only (start the node with \
                 --insecure to allow writes)"
                    .into()
            };
            return Err(ApiError::forbidden(why));
        }
        let token = request
            .headers()
            .get(CSRF_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if !session::same_token(token, &session.csrf) {
            return Err(ApiError::forbidden(
                "the CSRF token is missing or wrong: send X-CSRF-Token from /api/v1/session",
            ));
        }
        Ok(session)
    }
}

/// `/ui` and its files. The page loads nothing from elsewhere but the map tiles, if configured:
/// its policy says so to the browser.
fn page(method: &Method, path: &str, tile_url: Option<&str>) -> Response<ConsoleBody> {
    if method != Method::GET && method != Method::HEAD {
        return ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: ErrorCode::BadRequest,
            message: format!("{method} is not served here: use GET"),
        }
        .response();
    }
    let (content_type, body) = match path {
        "/ui" | "/ui/" | "/ui/index.html" => ("text/html; charset=utf-8", PAGE),
        "/ui/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/ui/style.css" => ("text/css; charset=utf-8", STYLE),
        other => {
            return ApiError {
                status: StatusCode::NOT_FOUND,
                code: ErrorCode::BadRequest,
                message: format!("{other} is not served: the console is at /ui"),
            }
            .response();
        }
    };
    let mut response = http::whole(
        StatusCode::OK,
        content_type,
        Bytes::from_static(body.as_bytes()),
    );
    let tiles = tile_url.map_or(String::new(), |url| format!(" {}", origin_of(url)));
    let policy = format!("default-src 'self'; img-src 'self' data:{tiles}; frame-ancestors 'none'");
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_SECURITY_POLICY, policy);
    }
    response
}

/// The scheme, host and port of `url` (`https://tiles.example.net`), for the page's policy.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    match url[after_scheme..].find('/') {
        Some(slash) => &url[..after_scheme + slash],
        None => url,
    }
}

#[cfg(test)]
mod console_test;
