//! [`AgentRates`]: the request rate per agent, checked once in `NodeHandle::submit`, so both
//! front doors (the agent endpoint and the external-broker bridge) apply it alike.
//!
//! ```text
//!  submit(agent, request) ─▶ AgentRates::check(agent) ─┬─ a token: on to the ingress permit
//!                                                       └─ none: `rate_limited` at once
//!                                                          (nothing proposed, nothing held)
//! ```
//!
//! Each agent has a token bucket of `rate_burst_max` tokens refilled at `rate_per_s_max` a
//! second (governor's keyed GCRA limiter, which is a token bucket kept as one timestamp per
//! agent). One agent flooding the node empties its own bucket only: the others keep theirs,
//! and the flood is answered before it costs a log entry or an ingress permit.
//!
//! Memory is bounded by the agents active in the last burst's worth of time: every
//! [`SWEEP_EVERY_CHECKS`] checks the buckets that have refilled completely (agents gone idle
//! are indistinguishable from new ones) are dropped.
//!
//! This is a node-local limit, not replicated state: it decides whether a request enters the
//! node at all, never what the state machine answers, so replicas need not agree on it.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

use super::NodeError;

/// How many checks pass between two sweeps of idle buckets. A sweep visits every bucket, so
/// it runs once per this many requests: its cost per request stays a fraction of a look-up.
pub const SWEEP_EVERY_CHECKS: u64 = 4_096;

/// governor's keyed limiter on `clock`, with no middleware.
type Limiter<C> =
    RateLimiter<String, DashMapStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The per-agent request rate limiter. `None` inside when the limit is off
/// (`rate_per_s_max = 0`).
pub struct AgentRates<C: Clock = DefaultClock> {
    /// The keyed limiter, one bucket per agent id.
    limiter: Option<Limiter<C>>,
    /// Tokens a second per agent, for the refusal's message.
    rate_per_s_max: u32,
    /// Bucket size per agent, for the refusal's message.
    rate_burst_max: u32,
    /// Checks so far, to time the sweeps.
    checks: AtomicU64,
}

impl AgentRates {
    /// A limiter of `rate_per_s_max` requests a second per agent with bursts of
    /// `rate_burst_max` (at least 1); `rate_per_s_max = 0` turns it off.
    pub fn new(rate_per_s_max: u32, rate_burst_max: u32) -> AgentRates {
        AgentRates::with_clock(rate_per_s_max, rate_burst_max, DefaultClock::default())
    }
}

impl<C: Clock> AgentRates<C> {
    /// As [`AgentRates::new`], on `clock` (tests use a clock they move).
    pub fn with_clock(rate_per_s_max: u32, rate_burst_max: u32, clock: C) -> AgentRates<C> {
        let limiter = NonZeroU32::new(rate_per_s_max).map(|rate| {
            let burst = NonZeroU32::new(rate_burst_max).unwrap_or(NonZeroU32::MIN);
            RateLimiter::dashmap_with_clock(Quota::per_second(rate).allow_burst(burst), clock)
        });
        AgentRates {
            limiter,
            rate_per_s_max,
            rate_burst_max,
            checks: AtomicU64::new(0),
        }
    }

    /// Takes one token from `agent`'s bucket, or refuses with [`NodeError::RateLimited`].
    pub fn check(&self, agent: &str) -> Result<(), NodeError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if self
            .checks
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(SWEEP_EVERY_CHECKS)
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        limiter
            .check_key(&agent.to_string())
            .map_err(|not_until| NodeError::RateLimited {
                agent: agent.to_string(),
                rate_per_s_max: self.rate_per_s_max,
                rate_burst_max: self.rate_burst_max,
                retry_after: not_until.wait_time_from(limiter.clock().now()),
            })
    }

    /// Agents with a bucket now (idle ones go at the next sweep).
    #[cfg(test)]
    pub fn agents(&self) -> usize {
        self.limiter.as_ref().map_or(0, RateLimiter::len)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use governor::clock::FakeRelativeClock;
    use hivekeeper_protocol::ErrorCode;

    use super::*;

    #[test]
    fn one_agent_empties_its_own_bucket_only() {
        let clock = FakeRelativeClock::default();
        let rates = AgentRates::with_clock(10, 20, clock.clone());
        let admitted = (0..50).filter(|_| rates.check("flood").is_ok()).count();
        assert_eq!(admitted, 20, "the burst, then nothing until it refills");
        let refusal = rates.check("flood").expect_err("empty bucket");
        assert_eq!(refusal.code(), ErrorCode::RateLimited);
        assert_eq!(
            refusal.to_string(),
            "agent flood is over its request rate: rate_per_s_max is 10 a second, \
             rate_burst_max 20; retry with backoff"
        );
        assert!(
            rates.check("calm").is_ok(),
            "another agent has its own bucket"
        );
        clock.advance(Duration::from_millis(100));
        assert!(rates.check("flood").is_ok(), "one token back after 100 ms");
        assert!(rates.check("flood").is_err());
    }

    #[test]
    fn idle_agents_buckets_are_dropped() {
        let clock = FakeRelativeClock::default();
        let rates = AgentRates::with_clock(10, 10, clock.clone());
        for agent in 0..100 {
            rates.check(&format!("a{agent}")).expect("a full bucket");
        }
        assert_eq!(rates.agents(), 100);
        // A second later every bucket is full again: the next sweep drops them all but the
        // agents active since.
        clock.advance(Duration::from_secs(1));
        let busy = (100..SWEEP_EVERY_CHECKS).filter(|_| rates.check("busy").is_ok());
        assert!(busy.count() >= 10);
        rates.check("busy").ok();
        assert_eq!(rates.agents(), 1, "only the busy agent's bucket is left");
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let rates = AgentRates::new(0, 0);
        assert!((0..10_000).all(|_| rates.check("flood").is_ok()));
        assert_eq!(rates.agents(), 0);
    }
}
