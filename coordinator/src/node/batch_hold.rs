//! When the proposer holds a batch open for the requests about to follow, and whether it pays.
//!
//! A handover of a hot lock makes two requests at once: the entry that granted the next holder
//! answers the old one, and both react (the new holder releases, the old one acquires again)
//! about 30 µs apart (docs/BENCHMARKS.md, "What falls short"). Proposed as they come, the first
//! goes out alone and the second waits a whole commit behind it: 1.6–1.8 entries per handover.
//! Held open until the second arrives, the batch carries both: one entry, one fsync round.
//! Only a batch of one is held: when two or more are there already they arrived together
//! while the last entry was in flight, and holding would only delay them (nor would a hold
//! that catches nothing then say anything about the traffic).
//!
//! ```text
//!  proposer: recv_many (the first arrivals, at once) ─▶ one command, and should_hold?
//!     no  ─▶ propose now
//!     yes ─▶ take what arrives while arrivals come within `gap` of each other (at most
//!            3 × gap in all, or until the batch is full) ─▶ held(caught) ─▶ propose
//!  held(caught > 0) ─▶ hold every batch
//!  held(0)          ─▶ propose the next 1, 2, 4 … 64 batches at once before trying again
//! ```
//!
//! So an isolated request (a single agent's, one at a time) pays the gap once, then once in
//! 64 batches; a stream of requests that arrive together keeps its batches held. The gap is
//! far below a durable commit (100 µs against about 0.5 ms on one node and 2.4 ms on three),
//! and a hold that catches nothing costs no more than that.
//!
//! Invariants:
//! 1. With `gap` zero it never holds.
//! 2. After a hold that caught nothing, it skips `backoff` batches, `backoff` doubling from 1
//!    up to [`BACKOFF_MAX`]; a hold that caught something resets the backoff.

use std::time::Duration;

/// The longest run of batches proposed at once after holds that caught nothing.
pub(crate) const BACKOFF_MAX: u32 = 64;

/// The hold policy of one proposer.
#[derive(Debug, Clone)]
pub(crate) struct BatchHold {
    /// A batch stays open while arrivals come within this of the last; zero: never held.
    gap: Duration,
    /// Batches still to propose at once before the next hold.
    skip: u32,
    /// The skip after the last hold that caught nothing (0: the last hold caught something).
    backoff: u32,
}

impl BatchHold {
    /// A policy holding batches open for arrivals `gap` apart (zero: off).
    pub(crate) fn new(gap: Duration) -> BatchHold {
        BatchHold {
            gap,
            skip: 0,
            backoff: 0,
        }
    }

    /// The gap, when this batch should be held open; `None` to propose it at once.
    pub(crate) fn should_hold(&mut self) -> Option<Duration> {
        if self.gap.is_zero() {
            return None;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        Some(self.gap)
    }

    /// A held batch caught `caught` more commands.
    pub(crate) fn held(&mut self, caught: usize) {
        if caught > 0 {
            self.backoff = 0;
        } else {
            self.backoff = (self.backoff * 2).clamp(1, BACKOFF_MAX);
            self.skip = self.backoff;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAP: Duration = Duration::from_micros(100);

    /// How many of the next `batches` batches the policy holds.
    fn holds_of(hold: &mut BatchHold, batches: usize) -> usize {
        (0..batches)
            .filter(|_| hold.should_hold().is_some())
            .count()
    }

    #[test]
    fn a_zero_gap_never_holds() {
        let mut hold = BatchHold::new(Duration::ZERO);
        assert_eq!(holds_of(&mut hold, 100), 0);
    }

    #[test]
    fn holds_that_catch_keep_holding() {
        let mut hold = BatchHold::new(GAP);
        for _ in 0..100 {
            assert_eq!(hold.should_hold(), Some(GAP));
            hold.held(1);
        }
    }

    #[test]
    fn holds_that_catch_nothing_back_off_to_one_in_sixty_five_and_a_catch_resets() {
        let mut hold = BatchHold::new(GAP);
        // Batches proposed at once before each hold, every hold catching nothing.
        let mut runs = Vec::new();
        let mut run = 0;
        while runs.len() < 10 {
            if hold.should_hold().is_some() {
                runs.push(run);
                run = 0;
                hold.held(0);
            } else {
                run += 1;
            }
        }
        assert_eq!(runs, vec![0, 1, 2, 4, 8, 16, 32, 64, 64, 64]);
        // A hold that catches resets: the next batch is held again, and the next.
        while hold.should_hold().is_none() {}
        hold.held(3);
        assert_eq!(holds_of(&mut hold, 2), 2);
    }
}
