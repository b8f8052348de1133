//! Bounded waits: a hang fails the test with what it waited for, never a stuck CI job.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The first pause of [`eventually`] between two checks: short, for state that another task
/// updates just after the effect a test observed (a counter).
const POLL_FIRST: Duration = Duration::from_millis(5);

/// The longest pause of [`eventually`] between two checks: gentle on a node that a check asks
/// over the network (`/metrics`, `inspect`) while the test waits for seconds.
const POLL_MAX: Duration = Duration::from_millis(50);

/// Awaits `future`; fails the test if it takes longer than `secs`.
pub async fn within<T>(secs: u64, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {secs} s"))
}

/// What a check of [`eventually`] answers: `true` or `Some(value)` once the condition holds.
pub trait Settled {
    /// What [`eventually`] returns once the condition holds.
    type Value;

    /// `Some` once the condition holds.
    fn settled(self) -> Option<Self::Value>;
}

impl Settled for bool {
    type Value = ();

    fn settled(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Settled for Option<T> {
    type Value = T;

    fn settled(self) -> Option<T> {
        self
    }
}

/// Runs `check` until it answers `true` or `Some(value)`, for at most `secs`, and returns the
/// value; fails the test otherwise. The pause between checks grows from 5 ms to 50 ms. A single
/// check is bounded by what is left of `secs` too (a request to a node that hangs).
///
/// ```no_run
/// # async fn example() {
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use hivekeeper_test_support::eventually;
///
/// let counted = AtomicU64::new(0);
/// // A condition: `true` once it holds.
/// eventually(5, "both counted", async || counted.load(Ordering::Relaxed) == 2).await;
/// // A value: `Some` once there is one.
/// let leader: u64 = eventually(30, "one leader", async || {
///     let seen = counted.load(Ordering::Relaxed);
///     (seen > 0).then_some(seen)
/// })
/// .await;
/// # }
/// ```
pub async fn eventually<C: Settled>(
    secs: u64,
    what: &str,
    mut check: impl AsyncFnMut() -> C,
) -> C::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut pause = POLL_FIRST;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!("{what}: not true within {secs} s");
        }
        if let Ok(outcome) = tokio::time::timeout(left, check()).await
            && let Some(value) = outcome.settled()
        {
            return value;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(POLL_MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn eventually_returns_the_value_once_the_check_has_one() {
        let checks = AtomicU32::new(0);
        let value = eventually(5, "the third check", async || {
            let n = checks.fetch_add(1, Ordering::Relaxed) + 1;
            (n == 3).then_some(n)
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn eventually_takes_a_plain_condition_too() {
        let checks = AtomicU32::new(0);
        eventually(5, "the second check", async || {
            checks.fetch_add(1, Ordering::Relaxed) == 1
        })
        .await;
        assert_eq!(checks.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    #[should_panic(expected = "never: not true within 1 s")]
    async fn eventually_fails_the_test_past_its_bound() {
        eventually(1, "never", async || false).await;
    }

    #[tokio::test]
    #[should_panic(expected = "a hang: not done within 1 s")]
    async fn within_fails_the_test_past_its_bound() {
        within(1, "a hang", std::future::pending::<()>()).await;
    }
}
