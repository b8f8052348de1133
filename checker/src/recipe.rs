//! What the election and barrier checkers share: how a request ended, the proof that a lease
//! lived at some point, and the violation they report.
//!
//! Every time is microseconds on the recorder's one monotonic clock. A request took effect
//! (if at all) at one point of the service's log, somewhere between its send (`invoke_us`) and
//! the arrival of its answer (`complete_us`); a request with no answer may have taken effect
//! at any point after its send, or never.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a request ended, as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer<T> {
    /// It succeeded, with this result.
    Ok(T),
    /// The service refused it with this code (`not_holder`, `timeout`, ...): it took no
    /// effect, or (`timeout`) ended its wait.
    Refused(String),
    /// No answer (the client's deadline, a lost connection, the run's end): it took effect
    /// once, or never.
    Unknown,
}

impl<T> Answer<T> {
    /// The result, when it succeeded.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Answer::Ok(value) => Some(value),
            _ => None,
        }
    }

    /// The same outcome with the result turned by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Ok(value) => Answer::Ok(f(value)),
            Answer::Refused(code) => Answer::Refused(code),
            Answer::Unknown => Answer::Unknown,
        }
    }

    /// Whether the service refused it with `code`.
    pub fn refused(&self, code: &str) -> bool {
        matches!(self, Answer::Refused(refused) if refused == code)
    }
}

/// The refusal code that says the lease holds nothing of that name any more (or never did).
pub const NOT_HOLDER: &str = "not_holder";

/// An acknowledged `lease.keepalive`: the lease lived at some point of
/// `[invoke_us, complete_us]`, so at every earlier point after its grant (a lease that ended
/// never comes back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAlive {
    /// The lease.
    pub lease: String,
    /// When the keepalive was sent.
    pub invoke_us: u64,
    /// When its acknowledgement arrived.
    pub complete_us: u64,
}

/// Whether `lease` is proven to have lived at some point at or after `at_us`.
pub(crate) fn alive_after(alive: &[LeaseAlive], lease: &str, at_us: u64) -> bool {
    alive
        .iter()
        .any(|proof| proof.lease == lease && proof.invoke_us >= at_us)
}

/// One broken rule of a recipe, on one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation<R> {
    /// The rule.
    pub rule: R,
    /// The election or barrier.
    pub name: String,
    /// What the records show, with their agents, values and times.
    pub detail: String,
}

impl<R: fmt::Debug> fmt::Display for Violation<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} on {:?}: {}", self.rule, self.name, self.detail)
    }
}
