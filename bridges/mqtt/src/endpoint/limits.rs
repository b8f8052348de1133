//! The connect-rate limit: a token bucket in front of the accept loop.
//!
//! A fleet that reconnects at once (a node restart) arrives as a burst; the bucket lets one
//! second's worth through at once and then the configured rate, and closes the rest at
//! accept, before they cost a task or a CONNECT parse. Refusals are counted
//! (`hivekeeper_endpoint_connects_rate_limited_total`); agents reconnect with jittered backoff.

use std::sync::Mutex;
use std::time::Instant;

/// Tokens refill at `per_s` a second up to `per_s` (a one-second burst). `per_s = 0`: no
/// limit.
#[derive(Debug)]
pub(crate) struct ConnectRate {
    per_s: u32,
    state: Mutex<(Instant, f64)>,
}

impl ConnectRate {
    /// A full bucket.
    pub(crate) fn new(per_s: u32) -> ConnectRate {
        ConnectRate {
            per_s,
            state: Mutex::new((Instant::now(), f64::from(per_s))),
        }
    }

    /// Takes a token at `now`; `false` if the bucket is empty (refuse this connection).
    pub(crate) fn admit(&self, now: Instant) -> bool {
        if self.per_s == 0 {
            return true;
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (last, tokens) = &mut *state;
        let elapsed_s = now.saturating_duration_since(*last).as_secs_f64();
        *last = now.max(*last);
        let rate = f64::from(self.per_s);
        *tokens = (*tokens + elapsed_s * rate).min(rate);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_of_one_second_then_the_rate() {
        let rate = ConnectRate::new(10);
        let start = Instant::now();
        let admitted = (0..20).filter(|_| rate.admit(start)).count();
        assert_eq!(admitted, 10, "one second's worth at once");
        assert!(!rate.admit(start));
        assert!(rate.admit(start + Duration::from_millis(150)), "refilled");
        assert!(ConnectRate::new(0).admit(start), "0 means no limit");
    }
}
