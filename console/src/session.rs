//! Sessions: who a page is (an account and its role, from a login with the account's secret,
//! the same as over MQTT), its cookie and its CSRF token.
//!
//! 1. A session id and a CSRF token are 256 random bits each, from the OS's generator.
//! 2. The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page
//!    sends it) and `Secure` when the port is served over TLS.
//! 3. Every write carries the session's CSRF token in `X-CSRF-Token`, which only the console's
//!    own page can read (from `/api/v1/session`).
//! 4. A session lasts [`SESSION_TTL`] from its last use; sessions are kept in memory, so a
//!    restart logs everyone out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_protocol::Role;
use tokio::time::Instant;

/// How long an unused session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// Sessions kept at most: past it, the least recently used goes.
const SESSIONS_MAX: usize = 10_000;

/// The cookie's name.
pub const COOKIE: &str = "hk_session";

/// A logged-in page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The account the console asks the service as.
    pub account: String,
    /// Its role, as the login found it (the service checks each request itself as well).
    pub role: Role,
    /// The token every write must carry.
    pub csrf: String,
}

/// The sessions of one console.
#[derive(Debug, Default)]
pub struct Sessions {
    live: Mutex<HashMap<String, (Session, Instant)>>,
}

impl Sessions {
    /// A new session for `account`: its id (the cookie's value) and itself.
    pub fn open(&self, account: &str, role: Role) -> (String, Session) {
        let id = random_token();
        let session = Session {
            account: account.to_string(),
            role,
            csrf: random_token(),
        };
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, (_, used)| now.duration_since(*used) < SESSION_TTL);
        if live.len() >= SESSIONS_MAX
            && let Some(oldest) = live
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| id.clone())
        {
            live.remove(&oldest);
        }
        live.insert(id.clone(), (session.clone(), now));
        (id, session)
    }

    /// The session with cookie value `id`, if it is live; its use counts.
    pub fn find(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        match live.get_mut(id) {
            Some((session, used)) if now.duration_since(*used) < SESSION_TTL => {
                *used = now;
                Some(session.clone())
            }
            Some(_) => {
                live.remove(id);
                None
            }
            None => None,
        }
    }

    /// Whether the session with cookie value `id` is live, without counting a use (an open
    /// event stream does not keep its session alive).
    pub fn is_live(&self, id: &str) -> bool {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.get(id)
            .is_some_and(|(_, used)| used.elapsed() < SESSION_TTL)
    }

    /// Ends the session with cookie value `id`.
    pub fn close(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
}

/// 256 random bits as 64 hex digits. The OS's generator failing is a broken machine: no
/// session is worth a guessable id, so it panics.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut bytes).expect("the OS's random generator answers");
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The `Set-Cookie` value for session `id` (`None`: one that ends it).
pub fn set_cookie(id: Option<&str>, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match id {
        Some(id) => format!(
            "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            SESSION_TTL.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

/// The session cookie's value in a `Cookie` header.
pub fn cookie_value(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether two tokens are equal, in time that does not depend on where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}
