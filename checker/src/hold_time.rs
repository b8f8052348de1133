//! Hold times: no lock is granted inside a lock-delay window or while its holder lives, no
//! max-hold ends early, and no hold is taken from a live lease.
//!
//! The history is every request of the hold-time workload ([`LockOp`]) with its send and answer
//! times: acknowledged `lease.grant`s (with the lease's `lock_delay_ms`) and keepalives, lock
//! acquires (with their `max_hold_ms`) and releases, and revokes of the lease by its agent
//! (`lease.revoke`) or by an operator (`admin.revoke`); the `lock.lost` events the agents
//! received ([`Lost`]); and the spans of the run's clock faults ([`ClockFault`]).
//!
//! What the service promises (PROTOCOL.md §6.1): a lease with a lock-delay that ends by expiry
//! or by an operator holds its locks back, granted to nobody, until the delay has passed since
//! its end on the service's clock; a `lock.release` or the agent's own `lease.revoke` ends a
//! hold at once. A hold with a `max_hold_ms` ends that long after its grant (with a `lock.lost`
//! of `reason: "max_hold"`), on the service's clock, and no delay follows.
//!
//! **When a hold ended, at the earliest.** A lease lived when each request it answered took
//! effect, so it ended after the latest send of an acknowledged request naming it (its grant, a
//! keepalive, a granted acquire, an acknowledged release or revoke): its *last proof of life*.
//! (A keepalive is acknowledged only by a leader that confirmed its leadership with a quorum
//! after receiving it, so a deposed leader's acknowledgement proves nothing false here.)
//! A hold ended no earlier than:
//! - the send of its release, when a release of it was acknowledged (the release found it);
//! - otherwise the earliest of the ends still possible: the send of a release of it that got
//!   no answer, or of a `lease.revoke` by its agent (acknowledged or not); its grant plus its
//!   `max_hold_ms`; and, unless its agent's `lease.revoke` was acknowledged (the lease then
//!   lived until that revoke), its lease's end by expiry or by an operator: the last proof of
//!   life plus the lease's `lock_delay_ms`.
//!
//! The parts measured on the service's clock (the delay, the max-hold) are less [`SLACK_US`]:
//! the service stamps each entry with its leader's wall clock and the history is the harness's
//! monotonic clock, which agree up to the clocks' rates and the order in which one leader's
//! stamps enter the log (a few ms). A clock fault moves the service's clock by a jump
//! (`clock.rs` there: a forward jump moves the machine's clock ahead in one entry, which ends
//! every delay and max-hold then running), so a part whose span from its start to its bound
//! meets a [`ClockFault`] is not counted: it falls back to its start (the last proof of life,
//! the grant), so a second holder while the first lived is still found. So, per lock:
//!
//! 1. **Exclusive, and delayed** (`Rule::Early`): the holds in token order (the log order of
//!    their grants) are placed one after the other, each grant as early as its records allow
//!    (its acquire's send) but after the earliest end of every hold before it; a grant
//!    answered before that point was given while an older holder lived (a second holder) or
//!    inside its lock-delay window. The order is fixed by the tokens, so the earliest
//!    placement is optimal, as in the mutex check.
//! 2. **One grant per token** (`Rule::TokenTwice`).
//! 3. **Max-hold not early** (`Rule::MaxHoldEarly`): a `lock.lost` of `reason: "max_hold"`
//!    arrives no sooner than the hold's placed grant plus its `max_hold_ms`, and only for a
//!    hold that asked for one (else `Rule::TakenWhileAlive`).
//! 4. **Not taken from a live lease** (`Rule::TakenWhileAlive`): a hold found gone (its release
//!    refused `not_holder`) while its lease lived (a later proof of life), with no other
//!    release of it sent before, ended by its max-hold: it asked for one, and the refusal came
//!    no sooner than its placed grant plus `max_hold_ms` (else `Rule::MaxHoldEarly`). A
//!    `lock.lost` without a reason (the lease ended) followed by a proof of life of its lease
//!    is `Rule::TakenWhileAlive` too.
//!
//! A grant that came within the lock-delay of a voluntary end (a release or the agent's own
//! revoke) is no anomaly: no delay follows those. [`Outcome`] counts such grants after an
//! acknowledged release, the grants checked against a lock-delay window, the delays and
//! max-holds a clock fault excused, and the closest a grant came to a window's end.
//!
//! `O(n log n)` for `n` records.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::recipe::{Answer, NOT_HOLDER, Violation};

/// What the service's clock and the history's may disagree by over one delay or max-hold,
/// µs (see the module doc).
pub const SLACK_US: u64 = 100_000;

/// One request of the hold-time workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockOp {
    /// The agent that sent it.
    pub agent: String,
    /// The lease it names (the granted lease, for a grant).
    pub lease: String,
    /// When it was sent.
    pub invoke_us: u64,
    /// When its answer arrived (or the client gave up).
    pub complete_us: u64,
    /// What it was, and its answer.
    pub kind: LockKind,
}

/// A request of the hold-time workload and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// An acknowledged `lease.grant`.
    Grant {
        /// The lease's TTL.
        ttl_ms: u64,
        /// Its lock-delay (0: none).
        lock_delay_ms: u64,
    },
    /// An acknowledged `lease.keepalive`.
    Keepalive,
    /// `lock.acquire`.
    Acquire {
        /// The lock.
        lock: String,
        /// The hold's bound, if it asked for one.
        max_hold_ms: Option<u64>,
        /// The token, or the refusal.
        answer: Answer<u64>,
    },
    /// `lock.release` of the hold with `token`.
    Release {
        /// The lock.
        lock: String,
        /// The hold's token.
        token: u64,
        /// The answer.
        answer: Answer<()>,
    },
    /// `lease.revoke` by the lease's agent, or `admin.revoke` (`operator`).
    Revoke {
        /// Whether an operator revoked it (`admin.revoke`): a lock-delay follows.
        operator: bool,
        /// The answer.
        answer: Answer<()>,
    },
}

/// A `lock.lost` event as an agent received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// The agent told.
    pub agent: String,
    /// The lock.
    pub lock: String,
    /// The token of the hold that ended.
    pub token: u64,
    /// `reason: "max_hold"`; otherwise the lease ended.
    pub max_hold: bool,
    /// When it arrived.
    pub observed_us: u64,
}

/// A span of the history in which a clock fault may have moved the service's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockFault {
    /// From the injection.
    pub from_us: u64,
    /// Until the clocks were back and an entry had surely been stamped by them.
    pub to_us: u64,
}

/// The hold-time rules, numbered as in the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// 1: a grant while an older hold lived, or inside its lock-delay window.
    Early,
    /// 2: a token granted twice.
    TokenTwice,
    /// 3, 4: a max-hold that ended before it ran out.
    MaxHoldEarly,
    /// 3, 4: a hold taken while its lease lived, by nothing it asked for (or ended as a
    /// max-hold it did not ask for).
    TakenWhileAlive,
}

/// One broken hold-time rule, on one lock.
pub type HoldTimeViolation = Violation<Rule>;

/// The verdict, and what the checked bounds looked like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every broken rule, lock by lock.
    pub violations: Vec<HoldTimeViolation>,
    /// Grants whose rule-1 bound was an older hold's lock-delay window.
    pub delays_checked: u64,
    /// Lock-delays and max-holds not counted because a clock fault met their span.
    pub excused: u64,
    /// The least time between a grant and the end of the lock-delay window it was checked
    /// against (before the slack), µs; negative for a grant inside it.
    pub closest_delay_us: Option<i64>,
    /// Grants that came within the lock-delay after a voluntary end (release or own revoke):
    /// as the service promises, no delay followed those.
    pub undelayed_after_release: u64,
}

/// One granted hold, from its acquire.
struct Hold<'h> {
    op: &'h LockOp,
    lock: &'h str,
    token: u64,
    max_hold_ms: Option<u64>,
}

/// What the records say of one lease.
#[derive(Default)]
struct Lease {
    lock_delay_ms: u64,
    /// The latest send of an acknowledged request naming it: its last proof of life.
    last_alive_us: Option<u64>,
    /// Sends of its agent's `lease.revoke`s that may have taken effect, and whether one was
    /// acknowledged.
    own_revokes: Vec<u64>,
    own_revoke_acknowledged: bool,
}

impl Lease {
    /// Whether the lease is proven alive at some point at or after `at_us`.
    fn alive_after(&self, at_us: u64) -> bool {
        self.last_alive_us.is_some_and(|last| last >= at_us)
    }
}

/// Why a lock could be granted no earlier than some point.
#[derive(Debug, Clone)]
enum Why {
    /// The hold with this token lived until then, at least.
    Held { token: u64, agent: String },
    /// The hold with this token was released (acknowledged) no earlier than then; its lease
    /// has this lock-delay, which a release skips.
    Released {
        token: u64,
        agent: String,
        delay_ms: u64,
    },
    /// Inside the lock-delay window of the hold with this token: its lease's last proof of
    /// life, and the delay.
    Delay {
        token: u64,
        agent: String,
        alive_us: u64,
        delay_ms: u64,
    },
}

/// The earliest point a lock is free again, and why.
#[derive(Debug, Clone)]
struct Bound {
    at_us: u64,
    why: Why,
}

/// The records indexed for the rules.
struct Index<'h> {
    leases: HashMap<&'h str, Lease>,
    /// Releases of each hold, by (lock, token).
    releases: HashMap<(&'h str, u64), Vec<&'h LockOp>>,
    faults: &'h [ClockFault],
}

impl<'h> Index<'h> {
    fn new(ops: &'h [LockOp], faults: &'h [ClockFault]) -> Index<'h> {
        let mut leases: HashMap<&str, Lease> = HashMap::new();
        let mut releases: HashMap<(&str, u64), Vec<&LockOp>> = HashMap::new();
        for op in ops {
            let lease = leases.entry(op.lease.as_str()).or_default();
            let acknowledged = match &op.kind {
                LockKind::Grant { lock_delay_ms, .. } => {
                    lease.lock_delay_ms = *lock_delay_ms;
                    true
                }
                LockKind::Keepalive => true,
                LockKind::Acquire { answer, .. } => matches!(answer, Answer::Ok(_)),
                LockKind::Release {
                    lock,
                    token,
                    answer,
                } => {
                    releases.entry((lock, *token)).or_default().push(op);
                    matches!(answer, Answer::Ok(_))
                }
                LockKind::Revoke { operator, answer } => {
                    let acknowledged = matches!(answer, Answer::Ok(_));
                    if !operator && !matches!(answer, Answer::Refused(_)) {
                        lease.own_revokes.push(op.invoke_us);
                        lease.own_revoke_acknowledged |= acknowledged;
                    }
                    acknowledged
                }
            };
            if acknowledged {
                lease.last_alive_us = lease.last_alive_us.max(Some(op.invoke_us));
            }
        }
        Index {
            leases,
            releases,
            faults,
        }
    }

    /// Whether a clock fault met `[from_us, to_us]`.
    fn excused(&self, from_us: u64, to_us: u64) -> bool {
        self.faults
            .iter()
            .any(|fault| fault.from_us <= to_us && from_us <= fault.to_us)
    }

    /// `start` plus a span measured on the service's clock, less the slack; `None` when a
    /// clock fault met it.
    fn on_service_clock(&self, start_us: u64, span_ms: u64) -> Option<u64> {
        let end_us = start_us.saturating_add(span_ms.saturating_mul(1_000));
        (!self.excused(start_us, end_us)).then(|| end_us.saturating_sub(SLACK_US).max(start_us))
    }

    fn releases(&self, hold: &Hold<'h>) -> &[&'h LockOp] {
        self.releases
            .get(&(hold.lock, hold.token))
            .map_or(&[], Vec::as_slice)
    }
}

/// Checks the hold-time records; returns the violations, lock by lock, and the figures.
pub fn check(ops: &[LockOp], lost: &[Lost], faults: &[ClockFault]) -> Outcome {
    let index = Index::new(ops, faults);
    let mut by_lock: BTreeMap<&str, Vec<Hold<'_>>> = BTreeMap::new();
    for op in ops {
        if let LockKind::Acquire {
            lock,
            max_hold_ms,
            answer: Answer::Ok(token),
        } = &op.kind
        {
            by_lock.entry(lock).or_default().push(Hold {
                op,
                lock,
                token: *token,
                max_hold_ms: *max_hold_ms,
            });
        }
    }
    let mut outcome = Outcome::default();
    for (lock, mut holds) in by_lock {
        holds.sort_by_key(|hold| hold.token);
        let mut found = Vec::new();
        for pair in holds.windows(2) {
            if pair[0].token == pair[1].token {
                found.push((
                    Rule::TokenTwice,
                    format!(
                        "token {} granted to {} and again to {}",
                        pair[0].token, pair[0].op.agent, pair[1].op.agent
                    ),
                ));
            }
        }
        let placed = place(&holds, &index, &mut outcome, &mut found);
        for (hold, placed_us) in holds.iter().zip(&placed) {
            ended_early(hold, *placed_us, &index, &mut found, &mut outcome);
        }
        lost_events(&holds, &placed, lost, &index, &mut found, &mut outcome);
        outcome
            .violations
            .extend(found.into_iter().map(|(rule, detail)| Violation {
                rule,
                name: lock.to_string(),
                detail,
            }));
    }
    outcome
}

fn describe(hold: &Hold<'_>) -> String {
    format!(
        "{}'s token {} (acquire sent at {} µs, answered at {} µs)",
        hold.op.agent, hold.token, hold.op.invoke_us, hold.op.complete_us
    )
}

/// Rule 1: each grant placed after the earliest end of the holds before it; returns each
/// hold's placed grant.
fn place(
    holds: &[Hold<'_>],
    index: &Index<'_>,
    outcome: &mut Outcome,
    found: &mut Vec<(Rule, String)>,
) -> Vec<u64> {
    let mut placed = Vec::with_capacity(holds.len());
    let mut free: Option<Bound> = None;
    for hold in holds {
        let granted_us = hold.op.complete_us;
        let free_us = free.as_ref().map_or(0, |bound| bound.at_us);
        let at_us = hold.op.invoke_us.max(free_us);
        if let Some(bound) = &free {
            figures(bound, granted_us, outcome);
        }
        if at_us > granted_us {
            let why = free
                .as_ref()
                .map_or_else(String::new, |bound| bound.describe());
            found.push((Rule::Early, format!("{} was granted {why}", describe(hold))));
        }
        // Placed at the answer at the latest (one anomaly per misplaced grant, not a cascade).
        let at_us = at_us.min(granted_us);
        placed.push(at_us);
        let end = ends_no_earlier(hold, at_us, index, outcome);
        if free.as_ref().is_none_or(|bound| end.at_us >= bound.at_us) {
            free = Some(end);
        }
    }
    placed
}

/// The [`Outcome`]'s figures for a grant answered at `granted_us` checked against `bound`.
fn figures(bound: &Bound, granted_us: u64, outcome: &mut Outcome) {
    let signed = |us: u64| i64::try_from(us).unwrap_or(i64::MAX);
    match &bound.why {
        Why::Delay {
            alive_us, delay_ms, ..
        } => {
            outcome.delays_checked += 1;
            let margin = signed(granted_us) - signed(alive_us + delay_ms * 1_000);
            outcome.closest_delay_us =
                Some(outcome.closest_delay_us.map_or(margin, |m| m.min(margin)));
        }
        Why::Released { delay_ms, .. } if granted_us < bound.at_us + delay_ms * 1_000 => {
            outcome.undelayed_after_release += 1;
        }
        _ => {}
    }
}

impl Bound {
    fn describe(&self) -> String {
        let at_us = self.at_us;
        match &self.why {
            Why::Held { token, agent } | Why::Released { token, agent, .. } => {
                format!("while {agent}'s token {token} lived (until {at_us} µs at the earliest)")
            }
            Why::Delay {
                token,
                agent,
                alive_us,
                delay_ms,
            } => format!(
                "inside the lock-delay window of {agent}'s token {token}: its lease lived at \
                 {alive_us} µs and has a {delay_ms} ms lock-delay, so nobody before {} µs \
                 (less {} ms of slack)",
                alive_us + delay_ms * 1_000,
                SLACK_US / 1_000
            ),
        }
    }
}

/// The earliest point `hold`, placed at `placed_us`, can have ended, and why (the module doc's
/// list).
fn ends_no_earlier(
    hold: &Hold<'_>,
    placed_us: u64,
    index: &Index<'_>,
    outcome: &mut Outcome,
) -> Bound {
    let (token, agent) = (hold.token, hold.op.agent.clone());
    let lease = index.leases.get(hold.op.lease.as_str());
    let delay_ms = lease.map_or(0, |lease| lease.lock_delay_ms);
    let held = |at_us: u64| Bound {
        at_us: at_us.max(placed_us),
        why: Why::Held {
            token,
            agent: agent.clone(),
        },
    };
    let releases = index.releases(hold);
    if let Some(release) = releases
        .iter()
        .find(|release| release_answer(release) == Some(&Answer::Ok(())))
    {
        return Bound {
            at_us: release.invoke_us.max(placed_us),
            why: Why::Released {
                token,
                agent: agent.clone(),
                delay_ms,
            },
        };
    }
    let mut ends: Vec<Bound> = releases
        .iter()
        .filter(|release| release_answer(release) == Some(&Answer::Unknown))
        .map(|release| held(release.invoke_us))
        .collect();
    if let Some(lease) = lease {
        ends.extend(lease.own_revokes.iter().map(|&sent| held(sent)));
    }
    if let Some(max_hold_ms) = hold.max_hold_ms {
        let end_us = index.on_service_clock(placed_us, max_hold_ms);
        outcome.excused += u64::from(end_us.is_none());
        ends.push(held(end_us.unwrap_or(placed_us)));
    }
    if !lease.is_some_and(|lease| lease.own_revoke_acknowledged) {
        let alive_us = lease
            .and_then(|lease| lease.last_alive_us)
            .unwrap_or(0)
            .max(placed_us);
        let delayed = match delay_ms {
            0 => None,
            _ => {
                let end_us = index.on_service_clock(alive_us, delay_ms);
                outcome.excused += u64::from(end_us.is_none());
                end_us
            }
        };
        ends.push(match delayed {
            Some(end_us) => Bound {
                at_us: end_us,
                why: Why::Delay {
                    token,
                    agent: agent.clone(),
                    alive_us,
                    delay_ms,
                },
            },
            None => held(alive_us),
        });
    }
    ends.into_iter()
        .min_by_key(|bound| bound.at_us)
        .unwrap_or_else(|| held(placed_us))
}

/// The answer of a `lock.release` record.
fn release_answer(op: &LockOp) -> Option<&Answer<()>> {
    match &op.kind {
        LockKind::Release { answer, .. } => Some(answer),
        _ => None,
    }
}

/// Rule 4 (and 3) for a hold whose release was refused `not_holder`.
fn ended_early(
    hold: &Hold<'_>,
    placed_us: u64,
    index: &Index<'_>,
    found: &mut Vec<(Rule, String)>,
    outcome: &mut Outcome,
) {
    let Some(lease) = index.leases.get(hold.op.lease.as_str()) else {
        return;
    };
    let releases = index.releases(hold);
    let refused = |release: &&&LockOp| {
        release_answer(release).is_some_and(|answer| answer.refused(NOT_HOLDER))
    };
    for refusal in releases.iter().filter(refused) {
        let seen_gone_us = refusal.complete_us;
        // An earlier release that may have taken effect explains the refusal.
        let released_before = releases.iter().any(|other| {
            other.invoke_us < seen_gone_us
                && !matches!(release_answer(other), Some(Answer::Refused(_)))
        });
        if released_before || !lease.alive_after(seen_gone_us) {
            continue;
        }
        let what = format!(
            "{} was found gone by a release answered not_holder at {seen_gone_us} µs, while its \
             lease lived (alive after that)",
            describe(hold)
        );
        max_hold_not_early(hold, placed_us, seen_gone_us, what, index, found, outcome);
    }
}

/// Rule 3: a hold ended by its max-hold at `ended_us` at the latest asked for one, and not
/// before it ran out.
fn max_hold_not_early(
    hold: &Hold<'_>,
    placed_us: u64,
    ended_us: u64,
    what: String,
    index: &Index<'_>,
    found: &mut Vec<(Rule, String)>,
    outcome: &mut Outcome,
) {
    let Some(max_hold_ms) = hold.max_hold_ms else {
        found.push((
            Rule::TakenWhileAlive,
            format!("{what}, and it asked for no max-hold"),
        ));
        return;
    };
    match index.on_service_clock(placed_us, max_hold_ms) {
        None => outcome.excused += 1,
        Some(due_us) if ended_us < due_us => found.push((
            Rule::MaxHoldEarly,
            format!(
                "{what}: its max-hold of {max_hold_ms} ms from its grant (at {placed_us} µs at \
                 the earliest) had not run out"
            ),
        )),
        Some(_) => {}
    }
}

/// Rules 3 and 4 for the `lock.lost` events of this lock's holds.
fn lost_events(
    holds: &[Hold<'_>],
    placed: &[u64],
    lost: &[Lost],
    index: &Index<'_>,
    found: &mut Vec<(Rule, String)>,
    outcome: &mut Outcome,
) {
    let Some(first) = holds.first() else {
        return;
    };
    let by_token: HashMap<u64, usize> = holds
        .iter()
        .enumerate()
        .map(|(i, hold)| (hold.token, i))
        .collect();
    for event in lost.iter().filter(|event| event.lock == first.lock) {
        let Some(&i) = by_token.get(&event.token) else {
            continue;
        };
        let hold = &holds[i];
        let what = format!(
            "{} was told lock.lost{} at {} µs",
            describe(hold),
            if event.max_hold { " (max_hold)" } else { "" },
            event.observed_us
        );
        if event.max_hold {
            max_hold_not_early(
                hold,
                placed[i],
                event.observed_us,
                what,
                index,
                found,
                outcome,
            );
        } else if index
            .leases
            .get(hold.op.lease.as_str())
            .is_some_and(|lease| lease.alive_after(event.observed_us))
        {
            found.push((
                Rule::TakenWhileAlive,
                format!("{what}, its lease's end, yet its lease lived after that"),
            ));
        }
    }
}
