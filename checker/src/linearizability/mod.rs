//! Linearizability of a key-value history.
//!
//! The history is split by key (P-compositionality: a history of independent objects is
//! linearizable exactly when each object's sub-history is), and each key's operations are
//! searched for an order that (a) respects real time, an operation that returned before another
//! was called comes first, and (b) the sequential model of `model.rs` accepts with the replies
//! the clients saw. An operation whose outcome is unknown has no return: it may take effect
//! anywhere after its call, and putting it last is how "never" is expressed.
//!
//! ```text
//!  &[Operation] --validate--> by key --prepare (intern values)--> search --> Verdict
//!                                                          (one key at a time, in key order)
//! ```

mod history;
mod model;
mod search;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

pub use history::{Expected, HistoryError, Input, OpId, Operation, Outcome, Reply};
use model::{Interner, ModelOp};
use search::SearchResult;

/// How long the search of one key may run before giving up with `Verdict::Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most search steps (an attempt to linearize a call, or a backtrack) per key. Counted,
    /// so a verdict within it does not depend on the machine.
    pub steps_max: u64,
    /// The most wall time per key, checked every 4096 steps; `None` for no limit.
    pub time_max: Option<Duration>,
}

/// The default budget: enough for thousands of operations per key at a concurrency of a few
/// tens, a few seconds on one core.
pub const BUDGET_DEFAULT: Budget = Budget {
    steps_max: 20_000_000,
    time_max: None,
};

impl Default for Budget {
    fn default() -> Self {
        BUDGET_DEFAULT
    }
}

/// An operation of the history with its index, as reports list them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedOp {
    /// Its index in the history given to `check`.
    pub id: OpId,
    /// The operation.
    pub op: Operation,
}

/// Why one key's history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterexample {
    /// The key.
    pub key: String,
    /// The longest sequence of the key's operations that respects real time and the model, in
    /// that order: the point at which every continuation failed.
    pub linearized: Vec<IndexedOp>,
    /// The key's operations that could not be placed after it, by call time.
    pub unplaced: Vec<IndexedOp>,
}

/// A key whose search ran out of budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// The key.
    pub key: String,
    /// Its operations.
    pub ops: usize,
    /// The steps taken.
    pub steps: u64,
}

/// The result of `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's history has a linearization.
    Linearizable,
    /// A key's history has none (the first such key in byte order).
    NotLinearizable(Counterexample),
    /// No key was proved wrong, but these keys ran out of budget.
    Unknown {
        /// The keys not decided.
        timed_out: Vec<TimedOut>,
    },
}

impl Verdict {
    /// Whether the history was proved linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

/// Checks `history` for linearizability against a key-value register per key, giving each key
/// at most `budget`.
pub fn check(history: &[Operation], budget: &Budget) -> Result<Verdict, HistoryError> {
    history::validate(history)?;
    let mut by_key: BTreeMap<&str, Vec<OpId>> = BTreeMap::new();
    for (id, operation) in history.iter().enumerate() {
        // A read that never answered constrains nothing: leave it out of the search.
        if matches!(operation.input, Input::Get { .. }) && operation.outcome == Outcome::Unknown {
            continue;
        }
        by_key.entry(operation.input.key()).or_default().push(id);
    }
    let mut timed_out = Vec::new();
    for (key, ids) in by_key {
        match check_key(history, &ids, budget) {
            SearchResult::Linearizable => {}
            SearchResult::TimedOut { steps } => timed_out.push(TimedOut {
                key: key.to_owned(),
                ops: ids.len(),
                steps,
            }),
            SearchResult::NotLinearizable { longest } => {
                return Ok(Verdict::NotLinearizable(counterexample(
                    history, key, &ids, &longest,
                )));
            }
        }
    }
    if timed_out.is_empty() {
        Ok(Verdict::Linearizable)
    } else {
        Ok(Verdict::Unknown { timed_out })
    }
}

fn check_key(history: &[Operation], ids: &[OpId], budget: &Budget) -> SearchResult {
    let mut interner = Interner::default();
    let ops: Vec<ModelOp> = ids
        .iter()
        .map(|&id| interner.prepare(&history[id]))
        .collect();
    let intervals: Vec<(u64, u64)> = ids
        .iter()
        .map(|&id| {
            let operation = &history[id];
            match operation.outcome {
                Outcome::Unknown => (operation.call_ns, u64::MAX),
                Outcome::Ok(_) => (operation.call_ns, operation.return_ns),
            }
        })
        .collect();
    search::search(&ops, &intervals, budget)
}

fn counterexample(
    history: &[Operation],
    key: &str,
    ids: &[OpId],
    longest: &[usize],
) -> Counterexample {
    let indexed = |local: usize| IndexedOp {
        id: ids[local],
        op: history[ids[local]].clone(),
    };
    let linearized: Vec<IndexedOp> = longest.iter().map(|&local| indexed(local)).collect();
    let mut placed = vec![false; ids.len()];
    for &local in longest {
        placed[local] = true;
    }
    let mut unplaced: Vec<IndexedOp> = (0..ids.len())
        .filter(|&local| !placed[local])
        .map(indexed)
        .collect();
    unplaced.sort_by_key(|indexed| (indexed.op.call_ns, indexed.id));
    Counterexample {
        key: key.to_owned(),
        linearized,
        unplaced,
    }
}

impl fmt::Display for IndexedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.id, self.op)
    }
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "key {:?} is not linearizable: after {} of its {} operations no order fits",
            self.key,
            self.linearized.len(),
            self.linearized.len() + self.unplaced.len()
        )?;
        writeln!(f, "  longest linearizable prefix, in order:")?;
        for op in &self.linearized {
            writeln!(f, "    {op}")?;
        }
        writeln!(f, "  could not be placed after it:")?;
        for op in &self.unplaced {
            writeln!(f, "    {op}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => write!(f, "linearizable"),
            Verdict::NotLinearizable(counterexample) => write!(f, "{counterexample}"),
            Verdict::Unknown { timed_out } => {
                write!(f, "unknown: the search ran out of budget on")?;
                for key in timed_out {
                    write!(
                        f,
                        " {:?} ({} operations, {} steps)",
                        key.key, key.ops, key.steps
                    )?;
                }
                Ok(())
            }
        }
    }
}
