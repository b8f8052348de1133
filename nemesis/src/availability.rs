//! Availability around one fault: the longest time nobody was granted anything, the longest
//! any client waited for an answer, how the acquires ended, when a member the fault hit began
//! answering `unavailable`, and (for a paused client) how long its lock took to reach someone
//! else.

use std::collections::BTreeMap;

use super::faults::FaultKind;
use super::history::History;
use crate::run::Window;

/// One fault's span, as the schedule recorded it.
pub struct Span<'a> {
    /// The fault class.
    pub fault: FaultKind,
    /// Its target, described.
    pub target: String,
    /// Injected, µs into the run.
    pub inject_us: u64,
    /// Undone.
    pub undo_us: u64,
    /// Recovered.
    pub recovered_us: u64,
    /// The run's end.
    pub end_us: u64,
    /// Members that exited by themselves.
    pub exited: Vec<String>,
    /// The members the fault hit.
    pub hit: Vec<usize>,
    /// How many members there are.
    pub members: usize,
    /// The pausable client's lock.
    pub paused_lock: &'a str,
}

/// The span's figures. The span runs from the injection to the recovery + 1 s.
pub fn window(history: &History, span: Span<'_>) -> Window {
    let from = span.inject_us;
    let to = (span.recovered_us + 1_000_000).min(span.end_us);
    let (outcomes, longest_wait) = acquire_outcomes(history, from, to);
    let probes = probe_gaps(history, &span, from, to);
    let probe_gap_ms: Vec<Option<f64>> = probes.gaps_us.iter().map(|gap| gap.map(ms)).collect();
    let majority_probe_gap_ms = (0..span.members)
        .filter(|member| !span.hit.contains(member))
        .filter_map(|member| probe_gap_ms[member])
        .fold(0.0, f64::max);
    let reclaim_ms = (span.fault == FaultKind::PauseClient)
        .then(|| reclaim_us(history, span.paused_lock, from).map(ms))
        .flatten();
    let hit_unavailable_ms = history
        .sentinel
        .iter()
        .filter(|answer| span.hit.contains(&answer.member) && answer.outcome == "unavailable")
        .map(|answer| answer.complete_us)
        .filter(|&at| at > from && at <= to)
        .min()
        .map(|at| ms(at - from));
    Window {
        fault: span.fault,
        target: span.target,
        inject_ms: ms(span.inject_us),
        undo_ms: ms(span.undo_us),
        recovered_ms: ms(span.recovered_us),
        longest_no_grant_ms: ms(longest_no_grant_us(history, from, to)),
        longest_wait_ms: ms(longest_wait),
        probe_gap_ms,
        majority_probe_gap_ms,
        hit_probe_answer_ms: probes.hit_answer_us.map(ms),
        hit_unavailable_ms,
        outcomes,
        reclaim_ms,
        exited: span.exited,
    }
}

/// The longest time in `from..=to` without a grant of a lock or a semaphore to anyone, µs.
fn longest_no_grant_us(history: &History, from: u64, to: u64) -> u64 {
    let mut grants: Vec<u64> = history
        .lock_holds
        .iter()
        .chain(&history.sem_holds)
        .map(|hold| hold.granted_us)
        .filter(|&at| at > from && at <= to)
        .collect();
    grants.sort_unstable();
    let mut longest_no_grant = 0;
    let mut previous = from;
    for &at in grants.iter().chain(std::iter::once(&to)) {
        longest_no_grant = longest_no_grant.max(at - previous);
        previous = at;
    }
    longest_no_grant
}

/// The acquires sent in `from..=to`, counted by outcome, and the longest any took to be
/// answered, µs.
fn acquire_outcomes(history: &History, from: u64, to: u64) -> (BTreeMap<String, u64>, u64) {
    let mut outcomes = BTreeMap::new();
    let mut longest_wait = 0;
    for wait in history
        .waits
        .iter()
        .filter(|w| w.invoke_us >= from && w.invoke_us <= to)
    {
        *outcomes.entry(wait.outcome.clone()).or_insert(0) += 1;
        longest_wait = longest_wait.max(wait.complete_us.saturating_sub(wait.invoke_us));
    }
    (outcomes, longest_wait)
}

/// What the probes saw in a span.
struct ProbeGaps {
    /// Per member, the longest a probe connected there waited for a grant, µs; `None` when no
    /// probe was connected there.
    gaps_us: Vec<Option<u64>>,
    /// The longest any single try of a probe on a hit member waited for an answer, µs.
    hit_answer_us: Option<u64>,
}

/// The probes, by the member each was connected to when it sent its try-lock. A probe tries
/// every 100 ms, so its wait for a grant runs from its first try after its last grant to its
/// next grant, counted where it made them (a probe that moved members starts afresh there).
fn probe_gaps(history: &History, span: &Span<'_>, from: u64, to: u64) -> ProbeGaps {
    let mut gaps_us: Vec<Option<u64>> = vec![None; span.members];
    let mut hit_answer_us: Option<u64> = None;
    let mut probes: Vec<&super::history::Wait> = history
        .waits
        .iter()
        .filter(|w| w.agent.contains("-probe"))
        .filter(|w| w.complete_us > from && w.invoke_us <= to)
        .collect();
    probes.sort_by_key(|w| (w.agent.as_str(), w.invoke_us));
    let mut since: Option<(&str, Option<usize>, u64)> = None;
    for wait in probes {
        let Some(member) = wait.member else {
            since = None;
            continue;
        };
        if span.hit.contains(&member) {
            let took = wait.complete_us - wait.invoke_us;
            hit_answer_us = Some(hit_answer_us.unwrap_or(0).max(took));
        }
        let start = match since {
            Some((agent, at, start)) if agent == wait.agent && at == Some(member) => start,
            _ => wait.invoke_us,
        };
        if wait.outcome == "granted" {
            let gap = wait.complete_us - start;
            gaps_us[member] = Some(gaps_us[member].unwrap_or(0).max(gap));
            since = None;
        } else {
            gaps_us[member] = Some(gaps_us[member].unwrap_or(0));
            since = Some((wait.agent.as_str(), wait.member, start));
        }
    }
    ProbeGaps {
        gaps_us,
        hit_answer_us,
    }
}

/// For a paused client: from its grant of `paused_lock` at or after `from` (else `from`) to
/// the next grant of that lock to another agent, µs; `None` when nobody else got it.
fn reclaim_us(history: &History, paused_lock: &str, from: u64) -> Option<u64> {
    let paused_agent = history
        .lock_holds
        .iter()
        .filter(|h| h.resource == paused_lock && h.granted_us <= from + 30_000_000)
        .filter(|h| h.agent.ends_with("-paused0"))
        .map(|h| h.granted_us)
        .filter(|&at| at >= from)
        .min();
    let paused_at = paused_agent.unwrap_or(from);
    history
        .lock_holds
        .iter()
        .filter(|h| h.resource == paused_lock && !h.agent.ends_with("-paused0"))
        .map(|h| h.granted_us)
        .filter(|&at| at > paused_at)
        .min()
        .map(|at| at - paused_at)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}
