//! Exponential backoff with full jitter, for reconnects and request resends.
//!
//! The bound of the n-th delay is `min(cap, first × 2ⁿ)`; the delay itself is drawn uniformly
//! from `[0, bound]` ("full jitter", the AWS architecture blog's recommendation: it spreads a
//! swarm that lost its broker at the same instant better than any other variant). The bounds
//! come from `backon`'s [`ExponentialBuilder`] without its jitter: backon's jitter *adds* up to
//! one more bound on top (`[d, 2d)`), which can exceed the cap and never goes below `d`, so the
//! SDK draws the delay itself.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// A sequence of jittered, growing delays. Not shared: each retry loop owns one.
#[derive(Debug)]
pub struct Backoff {
    /// Builds a fresh bound sequence on [`Backoff::reset`].
    builder: ExponentialBuilder,
    /// The un-jittered bounds: first, 2×first, ... up to the cap, forever.
    bounds: ExponentialBackoff,
    /// The largest delay, also the bound once backon's sequence is past it.
    cap: Duration,
    /// Seeded from the OS per backoff, so two agents started together draw different delays.
    rng: fastrand::Rng,
}

impl Backoff {
    /// A backoff whose first delay is at most `first` and no delay exceeds `cap`.
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        let cap = cap.max(first);
        let builder = ExponentialBuilder::new()
            .with_min_delay(first)
            .with_max_delay(cap)
            .with_factor(2.0)
            .without_max_times();
        Backoff {
            builder,
            bounds: builder.build(),
            cap,
            rng: fastrand::Rng::new(),
        }
    }

    /// The next delay: uniform in `[0, bound]`, the bound doubling each call up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let bound = self.next_bound();
        bound.mul_f64(self.rng.f64())
    }

    /// The next bound without jitter (what [`Backoff::next_delay`] draws below). Public so a
    /// test can check the sequence grows to the cap.
    pub fn next_bound(&mut self) -> Duration {
        self.bounds.next().unwrap_or(self.cap).min(self.cap)
    }

    /// Starts over from the first step, after a success.
    pub fn reset(&mut self) {
        self.bounds = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Duration = Duration::from_millis(30);
    const CAP: Duration = Duration::from_millis(2_000);

    #[test]
    fn bounds_double_from_first_up_to_the_cap() {
        let mut backoff = Backoff::new(FIRST, CAP);
        // backon computes in f32 seconds, so round to whole milliseconds before comparing.
        let bounds: Vec<u128> = (0..10)
            .map(|_| (backoff.next_bound().as_micros() + 500) / 1000)
            .collect();
        assert_eq!(bounds, [30, 60, 120, 240, 480, 960, 1920, 2000, 2000, 2000]);
        backoff.reset();
        assert_eq!(backoff.next_bound(), FIRST);
    }

    #[test]
    fn delays_stay_in_zero_to_their_bound_and_grow() {
        // Many independent sequences, so the growth of the mean is not luck: the mean delay of
        // step n is bound_n / 2; with 400 samples per step the observed mean is within a few
        // percent of it.
        const RUNS: usize = 400;
        const STEPS: usize = 9;
        let mut sums = [Duration::ZERO; STEPS];
        let mut any_below_half_first = false;
        for _ in 0..RUNS {
            let mut backoff = Backoff::new(FIRST, CAP);
            for (step, sum) in sums.iter_mut().enumerate() {
                // One microsecond of slack for backon's f32 arithmetic.
                let bound = FIRST.saturating_mul(1 << step).min(CAP) + Duration::from_micros(1);
                let delay = backoff.next_delay();
                assert!(
                    delay <= bound,
                    "step {step}: {delay:?} above its bound {bound:?}"
                );
                assert!(delay <= CAP, "step {step}: {delay:?} above the cap");
                if step == 0 && delay < FIRST / 2 {
                    any_below_half_first = true;
                }
                *sum += delay;
            }
        }
        assert!(
            any_below_half_first,
            "full jitter reaches below half the bound"
        );
        let means: Vec<Duration> = sums.iter().map(|s| *s / RUNS as u32).collect();
        for step in 1..7 {
            assert!(
                means[step] > means[step - 1],
                "mean delays grow until the cap: {means:?}"
            );
        }
        // At the cap the mean is about cap / 2.
        let capped = means[STEPS - 1];
        assert!(
            capped > CAP * 4 / 10 && capped < CAP * 6 / 10,
            "mean at the cap {capped:?}"
        );
    }
}
