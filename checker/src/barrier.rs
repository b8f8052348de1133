//! Double barriers: nobody passes a phase early, nobody is dropped from a round, and the
//! rounds of a barrier follow one another.
//!
//! The history is every `barrier.enter` and `barrier.leave` of the workload, each with the
//! send time of the first request of its **attempt** (`since_us`): a member that got no
//! answer asks again under a new request id, and the service takes the wait over, so the
//! member may have joined its round with any request of the attempt, from `since_us` on.
//! An attempt ends at a definite answer. Acknowledged keepalives of the members' leases
//! ([`LeaseAlive`]) are the proof that a lease still lived.
//!
//! A round of barrier `name` fills in one log entry, where every member waiting is answered
//! with its generation; it is over in the entry where its last member leaves, where every
//! leaver is answered. So, per barrier:
//!
//! 1. **Nobody enters early** (`Rule::Early`): an answer of generation `g` (to an enter or a
//!    leave) arrives after every member answered `g` on entering started its attempt.
//! 2. **Nobody leaves early** (`Rule::Early`): a leave answered `g` arrives after every member
//!    answered `g` on leaving started its leave attempt.
//! 3. **At most `count` members** (`Rule::Count`): the leases answered `g` (entering or
//!    leaving) are at most the round's `count`, and all of its enters asked the same `count`.
//!    (Fewer is no anomaly: a member that got no answer, or whose lease ended, is not seen.)
//! 4. **Rounds in order** (`Rule::Order`): an enter attempt started after an answer of `g`
//!    arrived joins a round whose generation is above `g`.
//! 5. **Nobody dropped** (`Rule::Dropped`): a member answered `g` on entering stays in its
//!    round until it leaves or its lease ends. A leave refused `not_holder` by the first
//!    request of its attempt (so no earlier request of the attempt may have left), with the
//!    lease proven alive after the refusal, means the member was dropped from its round.
//!
//! `O(n log n)` for `n` records of a barrier.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::recipe::{Answer, LeaseAlive, NOT_HOLDER, Violation, alive_after};

/// One barrier request of the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierOp {
    /// The barrier.
    pub name: String,
    /// The agent that sent it.
    pub agent: String,
    /// The member's lease.
    pub lease: String,
    /// `barrier.enter` (with its `count`) or `barrier.leave`.
    pub phase: Phase,
    /// When the first request of this attempt was sent (this one's send time, when it is the
    /// first).
    pub since_us: u64,
    /// When this request was sent.
    pub invoke_us: u64,
    /// When its answer arrived (or the client gave up).
    pub complete_us: u64,
    /// The round's generation, or the refusal.
    pub answer: Answer<u64>,
}

/// Which phase a request asks to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// `barrier.enter` with this `count`.
    Enter {
        /// The members a round has.
        count: u32,
    },
    /// `barrier.leave`.
    Leave,
}

/// The barrier rules, numbered as in the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// 1, 2: a phase passed before a member had arrived.
    Early,
    /// 3: more members than `count` in a round, or two counts.
    Count,
    /// 4: a later round with a lower generation.
    Order,
    /// 5: a member dropped from its round while its lease lived.
    Dropped,
}

/// One broken barrier rule.
pub type BarrierViolation = Violation<Rule>;

/// Checks the records of every barrier; returns the violations, name by name.
pub fn check(ops: &[BarrierOp], alive: &[LeaseAlive]) -> Vec<BarrierViolation> {
    let mut by_name: BTreeMap<&str, Vec<&BarrierOp>> = BTreeMap::new();
    for op in ops {
        by_name.entry(op.name.as_str()).or_default().push(op);
    }
    let mut violations = Vec::new();
    for (name, ops) in by_name {
        let mut found = Vec::new();
        rounds(&ops, &mut found);
        order(&ops, &mut found);
        dropped(&ops, alive, &mut found);
        violations.extend(found.into_iter().map(|(rule, detail)| Violation {
            rule,
            name: name.to_string(),
            detail,
        }));
    }
    violations
}

fn describe(op: &BarrierOp) -> String {
    let phase = match op.phase {
        Phase::Enter { .. } => "enter",
        Phase::Leave => "leave",
    };
    format!(
        "{}'s {phase} (attempt from {} µs, sent at {} µs, answered at {} µs)",
        op.agent, op.since_us, op.invoke_us, op.complete_us
    )
}

/// Rules 1 to 3, round by round.
fn rounds(ops: &[&BarrierOp], found: &mut Vec<(Rule, String)>) {
    let mut by_generation: BTreeMap<u64, Vec<&BarrierOp>> = BTreeMap::new();
    for op in ops {
        if let Answer::Ok(generation) = op.answer {
            by_generation.entry(generation).or_default().push(op);
        }
    }
    for (generation, answers) in by_generation {
        let first_answer = answers
            .iter()
            .min_by_key(|op| op.complete_us)
            .expect("a round has an answer");
        let enters = answers
            .iter()
            .filter(|op| matches!(op.phase, Phase::Enter { .. }));
        let leaves = answers.iter().filter(|op| op.phase == Phase::Leave);
        if let Some(latest) = enters.clone().max_by_key(|op| op.since_us)
            && latest.since_us > first_answer.complete_us
        {
            found.push((
                Rule::Early,
                format!(
                    "generation {generation}: {} arrived before {} started entering",
                    describe(first_answer),
                    describe(latest)
                ),
            ));
        }
        let first_leave = leaves.clone().min_by_key(|op| op.complete_us);
        let latest_leave = leaves.clone().max_by_key(|op| op.since_us);
        if let (Some(first), Some(latest)) = (first_leave, latest_leave)
            && latest.since_us > first.complete_us
        {
            found.push((
                Rule::Early,
                format!(
                    "generation {generation}: {} arrived before {} started leaving",
                    describe(first),
                    describe(latest)
                ),
            ));
        }
        let counts: BTreeSet<u32> = enters
            .map(|op| match op.phase {
                Phase::Enter { count } => count,
                Phase::Leave => 0,
            })
            .collect();
        let members: BTreeSet<&str> = answers.iter().map(|op| op.lease.as_str()).collect();
        let count = counts.iter().next().copied();
        if counts.len() > 1 || count.is_some_and(|count| members.len() > count as usize) {
            found.push((
                Rule::Count,
                format!(
                    "generation {generation} was answered to {} leases ({:?}) whose enters \
                     asked the counts {counts:?}",
                    members.len(),
                    answers.iter().map(|op| &op.agent).collect::<BTreeSet<_>>()
                ),
            ));
        }
    }
}

/// Rule 4: enter attempts in start order against the answers that had arrived by then.
fn order(ops: &[&BarrierOp], found: &mut Vec<(Rule, String)>) {
    let mut answers: Vec<(u64, u64, &BarrierOp)> = ops
        .iter()
        .filter_map(|op| op.answer.ok().map(|&g| (op.complete_us, g, *op)))
        .collect();
    answers.sort_by_key(|&(complete, ..)| complete);
    let mut enters: Vec<(u64, u64, &BarrierOp)> = ops
        .iter()
        .filter(|op| matches!(op.phase, Phase::Enter { .. }))
        .filter_map(|op| op.answer.ok().map(|&g| (op.since_us, g, *op)))
        .collect();
    enters.sort_by_key(|&(since, ..)| since);
    // The highest generation answered before the current attempt started, and its answer.
    let mut highest: Option<(u64, &BarrierOp)> = None;
    let mut next = 0;
    for (since, generation, enter) in enters {
        while next < answers.len() && answers[next].0 < since {
            let (_, answered, op) = answers[next];
            if highest.is_none_or(|(g, _)| answered > g) {
                highest = Some((answered, op));
            }
            next += 1;
        }
        if let Some((before, op)) = highest
            && before > generation
        {
            found.push((
                Rule::Order,
                format!(
                    "{} joined generation {generation}, below generation {before} answered \
                     before it started: {}",
                    describe(enter),
                    describe(op)
                ),
            ));
        }
    }
}

/// Rule 5.
fn dropped(ops: &[&BarrierOp], alive: &[LeaseAlive], found: &mut Vec<(Rule, String)>) {
    for op in ops {
        let first_of_attempt = op.since_us == op.invoke_us;
        if op.phase == Phase::Leave
            && first_of_attempt
            && op.answer.refused(NOT_HOLDER)
            && passed_unleft(ops, op)
            && alive_after(alive, &op.lease, op.complete_us)
        {
            found.push((
                Rule::Dropped,
                format!(
                    "{} was refused not_holder, though its lease had passed a round it had not \
                     left, and lived after the refusal",
                    describe(op)
                ),
            ));
        }
    }
}

/// Whether the lease of `leave` was answered a generation on entering, and sent no leave since
/// (before `leave`) that may have left.
fn passed_unleft(ops: &[&BarrierOp], leave: &BarrierOp) -> bool {
    let same_lease = |op: &&&BarrierOp| op.lease == leave.lease && op.invoke_us < leave.invoke_us;
    let Some(passed) = ops
        .iter()
        .filter(same_lease)
        .filter(|op| matches!(op.phase, Phase::Enter { .. }) && op.answer.ok().is_some())
        .map(|op| op.complete_us)
        .max()
    else {
        return false;
    };
    // A leave refused `timeout` did not leave; one answered, or not answered, may have.
    !ops.iter().filter(same_lease).any(|op| {
        op.phase == Phase::Leave
            && op.invoke_us > passed
            && matches!(op.answer, Answer::Ok(_) | Answer::Unknown)
    })
}
