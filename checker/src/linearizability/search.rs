//! The search for a linearization of one key's operations: Wing & Gong's backtracking with
//! Lowe's just-in-time linearization and a cache of visited configurations, as in Porcupine.
//!
//! ```text
//!  entries, sorted by time (a call before a return at the same instant):
//!  HEAD -> call a -> call b -> ret a -> call c -> ret b -> ret c
//!           ^ try: step the model with a; if the new (linearized set, state) is unseen,
//!             push a frame, lift a's call and return out of the list, restart at HEAD.
//!  reaching a return means its operation cannot be put off any longer: pop the last frame,
//!  put its entries back, and try the next alternative or the next call after it.
//!  an empty list is a linearization; an empty stack at a return is a proof there is none.
//! ```
//!
//! Invariants:
//! 1. The frames on the stack are exactly the lifted operations, in linearization order, and
//!    `state` is the model after them.
//! 2. A (linearized set, state) pair enters the cache once; a configuration met again was
//!    already explored, which bounds the work by the number of distinct configurations.

use std::collections::HashSet;
use std::time::Instant;

use super::Budget;
use super::model::{KeyState, ModelOp};

/// No entry: the end of the list.
const NIL: usize = usize::MAX;

/// How one key's search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SearchResult {
    /// A linearization exists.
    Linearizable,
    /// None exists; the longest partial linearization found, as indices into the key's ops.
    NotLinearizable {
        /// The longest sequence of operations the model accepted in a row.
        longest: Vec<usize>,
    },
    /// The budget ran out after this many steps.
    TimedOut {
        /// Steps taken.
        steps: u64,
    },
}

/// The key's call and return entries as a doubly linked list over indices: the call of op `i`
/// is entry `2i`, its return `2i + 1`, and `head` the sentinel before the first.
struct Entries {
    next: Vec<usize>,
    prev: Vec<usize>,
    head: usize,
}

impl Entries {
    /// Links the entries of `intervals` (call, return) in time order.
    fn new(intervals: &[(u64, u64)]) -> Self {
        let mut order: Vec<usize> = (0..2 * intervals.len()).collect();
        // A call sorts before a return at the same instant: two operations that touch are
        // treated as concurrent, the reading that never rejects a valid history.
        order.sort_by_key(|&entry| {
            let (call, ret) = intervals[entry / 2];
            if entry.is_multiple_of(2) {
                (call, 0u8)
            } else {
                (ret, 1u8)
            }
        });
        let head = 2 * intervals.len();
        let mut next = vec![NIL; head + 1];
        let mut prev = vec![NIL; head + 1];
        let mut last = head;
        for entry in order {
            next[last] = entry;
            prev[entry] = last;
            last = entry;
        }
        Entries { next, prev, head }
    }

    fn unlink(&mut self, entry: usize) {
        let (prev, next) = (self.prev[entry], self.next[entry]);
        self.next[prev] = next;
        if next != NIL {
            self.prev[next] = prev;
        }
    }

    fn relink(&mut self, entry: usize) {
        let (prev, next) = (self.prev[entry], self.next[entry]);
        self.next[prev] = entry;
        if next != NIL {
            self.prev[next] = entry;
        }
    }

    /// Takes op `op`'s call and return out of the list.
    fn lift(&mut self, op: usize) {
        self.unlink(2 * op);
        self.unlink(2 * op + 1);
    }

    /// Puts back what `lift(op)` took, in reverse order, which restores the list exactly when
    /// lifts and unlifts nest (they do: the frames are a stack).
    fn unlift(&mut self, op: usize) {
        self.relink(2 * op + 1);
        self.relink(2 * op);
    }
}

/// A fixed-size set of operation indices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bitset(Vec<u64>);

impl Bitset {
    fn new(len: usize) -> Self {
        Bitset(vec![0; len.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// One linearized operation on the stack.
struct Frame {
    /// The operation.
    op: usize,
    /// The model before it, restored when it is taken back.
    state: KeyState,
    /// Which of the operation's successor states was taken.
    alternative: usize,
}

/// Searches for a linearization of `ops`, whose intervals are `intervals` (an unknown outcome
/// has `u64::MAX` as its return).
pub(crate) fn search(ops: &[ModelOp], intervals: &[(u64, u64)], budget: &Budget) -> SearchResult {
    let started = Instant::now();
    let mut entries = Entries::new(intervals);
    let mut cache: HashSet<(Bitset, KeyState)> = HashSet::new();
    let mut linearized = Bitset::new(ops.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut state = KeyState::initial();
    let mut entry = entries.next[entries.head];
    // The first alternative to try at `entry`: above 0 only right after a backtrack to it.
    let mut alternative_from = 0;
    let mut steps: u64 = 0;
    while entries.next[entries.head] != NIL {
        steps += 1;
        if steps > budget.steps_max
            || (steps.is_multiple_of(4096)
                && budget.time_max.is_some_and(|max| started.elapsed() > max))
        {
            return SearchResult::TimedOut { steps };
        }
        let op = entry / 2;
        if entry.is_multiple_of(2) {
            let successors = state.successors(&ops[op]);
            let mut lifted = false;
            for (alternative, next) in successors.iter().enumerate().skip(alternative_from) {
                let Some(next) = next else { continue };
                let mut candidate = linearized.clone();
                candidate.set(op);
                if cache.insert((candidate, *next)) {
                    stack.push(Frame {
                        op,
                        state,
                        alternative,
                    });
                    state = *next;
                    linearized.set(op);
                    entries.lift(op);
                    lifted = true;
                    break;
                }
            }
            alternative_from = 0;
            if lifted {
                if stack.len() > longest.len() {
                    longest = stack.iter().map(|frame| frame.op).collect();
                }
                entry = entries.next[entries.head];
            } else {
                entry = entries.next[entry];
            }
        } else {
            // A return: every operation still in the list before it must come after it, so the
            // last choice was wrong.
            let Some(frame) = stack.pop() else {
                return SearchResult::NotLinearizable { longest };
            };
            state = frame.state;
            linearized.clear(frame.op);
            entries.unlift(frame.op);
            entry = 2 * frame.op;
            alternative_from = frame.alternative + 1;
        }
    }
    SearchResult::Linearizable
}
