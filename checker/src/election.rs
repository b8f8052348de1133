//! Elections: at most one leader per name at any time, and a leadership's token fences it.
//!
//! The history is every election request of the workload with its send and answer times:
//! campaigns (answered with a token), proclaims, resigns, `fence.check`s of a token, and reads
//! of the leader (`election.leader`, or the mirror key `$election/{name}`, whose
//! `create_revision` is the leader's token), plus acknowledged keepalives of the candidates'
//! leases ([`LeaseAlive`]).
//!
//! A leader learns that it lost only when its lease ended, so real-time overlap of what the
//! leaders *believe* proves nothing. What is checked is what the service answered: the
//! leaderships of one name, ordered by token (the log order of their grants), must fit one
//! after the other in real time. Each leadership is placed in one pass, as early as its
//! records allow (the order is fixed by the tokens, so the earliest placement is optimal):
//!
//! 1. **Exclusive** (`Rule::Exclusive`): leadership `k + 1` was granted after leadership `k`
//!    ended, so after every point `k` was seen alive. `k` is seen alive by an acknowledged
//!    proclaim or resign with its token, a `fence.check` answered `valid`, or a read showing
//!    it lead. A grant answered before such a request of an older token was even sent is two
//!    leaders at once (a stale proclaim accepted after a newer grant is this case).
//! 2. **Not before its grant** (`Rule::Exclusive`): a request that saw `k` alive took effect
//!    after `k`'s grant did.
//! 3. **Never back** (`Rule::Resurrected`): once a leadership is seen over (a proclaim, resign
//!    or `fence.check` of its token refused or `valid: false` after its grant, a read showing
//!    no leader after its grant or a newer token), no later request sees it alive: a deposed
//!    leader's proclaim or `fence.check` is refused.
//! 4. **One grant per token** (`Rule::TokenTwice`).
//! 5. **The right leader** (`Rule::WrongLeader`): a read shows a leadership with its grantee's
//!    agent and one of the values its grantee sent under it (the campaign's or a proclaim's,
//!    answered or not); an acknowledged proclaim came from the grantee.
//! 6. **Ended only by its holder or its lease** (`Rule::TakenWhileAlive`): a leadership seen
//!    over, whose holder had sent no resign for it by then, and whose lease is proven alive
//!    after that, was taken from a live leader.
//!
//! Linear in the records per name, but for the reads, each compared with every leadership:
//! `O(L · R)` for `L` leaderships and `R` reads of a name.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::recipe::{Answer, LeaseAlive, NOT_HOLDER, Violation, alive_after};

/// One election request of the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionOp {
    /// The election.
    pub name: String,
    /// The agent that sent it.
    pub agent: String,
    /// When it was sent.
    pub invoke_us: u64,
    /// When its answer arrived (or the client gave up).
    pub complete_us: u64,
    /// What it was, and its answer.
    pub kind: ElectionKind,
}

/// An election request and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionKind {
    /// `election.campaign`; answered with the leadership's token.
    Campaign {
        /// The lease the leadership is bound to.
        lease: String,
        /// The value campaigned with.
        value: String,
        /// The token, or the refusal.
        answer: Answer<u64>,
    },
    /// `election.proclaim`.
    Proclaim {
        /// The leadership's token.
        token: u64,
        /// The new value.
        value: String,
        /// The put's revision, or the refusal.
        answer: Answer<u64>,
    },
    /// `election.resign`.
    Resign {
        /// The leadership's token.
        token: u64,
        /// The answer.
        answer: Answer<()>,
    },
    /// `fence.check` with `kind: "election"`.
    FenceCheck {
        /// The token checked.
        token: u64,
        /// `valid`, or the refusal.
        answer: Answer<bool>,
    },
    /// An answered read of the leader: `None` when nobody led.
    Read {
        /// How it was read.
        via: ReadVia,
        /// The leader seen.
        leader: Option<Seen>,
    },
}

/// How the leader was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadVia {
    /// `election.leader`.
    Leader,
    /// A linearizable `kv.get` of `$election/{name}`.
    Mirror,
}

/// A leader as a read showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The leading agent (`None`: the mirror key does not name it).
    pub agent: Option<String>,
    /// The leadership's token (the mirror key's `create_revision`).
    pub token: u64,
    /// The leader's value.
    pub value: String,
}

/// The election rules, numbered as in the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// 1, 2: leaderships in token order do not overlap in real time.
    Exclusive,
    /// 3: a leadership seen over is never seen alive again.
    Resurrected,
    /// 4: a token granted twice.
    TokenTwice,
    /// 5: a read or a proclaim that does not match the leadership's grantee.
    WrongLeader,
    /// 6: a leadership ended while its lease lived and without a resign.
    TakenWhileAlive,
}

/// One broken election rule.
pub type ElectionViolation = Violation<Rule>;

/// What the records say of one leadership (one token of one election).
#[derive(Debug, Default)]
struct Leadership<'h> {
    /// The grantee and its lease, when its campaign was answered.
    agent: Option<&'h str>,
    lease: Option<&'h str>,
    /// The campaign's send and answer, when it was answered.
    grant: Option<(u64, u64)>,
    /// Every value its grantee sent under it.
    values: BTreeSet<&'h str>,
    /// Requests that saw it alive: (send, answer, what).
    alive: Vec<(u64, u64, String)>,
    /// The first answer that showed it over: (answer time, what).
    ended: Option<(u64, String)>,
    /// Send times of its resigns, answered or not.
    resigns: Vec<u64>,
}

impl Leadership<'_> {
    fn seen_over(&mut self, at_us: u64, what: String) {
        if self.ended.as_ref().is_none_or(|(t, _)| at_us < *t) {
            self.ended = Some((at_us, what));
        }
    }

    /// Whether a request sent at `invoke_us` certainly came after the grant took effect.
    fn after_grant(&self, invoke_us: u64) -> bool {
        self.grant.is_some_and(|(_, granted)| invoke_us >= granted)
    }
}

/// Checks the records of every election; returns the violations, name by name.
pub fn check(ops: &[ElectionOp], alive: &[LeaseAlive]) -> Vec<ElectionViolation> {
    let mut by_name: BTreeMap<&str, Vec<&ElectionOp>> = BTreeMap::new();
    for op in ops {
        by_name.entry(op.name.as_str()).or_default().push(op);
    }
    let mut violations = Vec::new();
    for (name, ops) in by_name {
        let mut found = Vec::new();
        let leaderships = collect(&ops, &mut found);
        exclusive(&leaderships, &mut found);
        for (token, leadership) in &leaderships {
            never_back(*token, leadership, &mut found);
            taken_while_alive(*token, leadership, alive, &mut found);
        }
        violations.extend(found.into_iter().map(|(rule, detail)| Violation {
            rule,
            name: name.to_string(),
            detail,
        }));
    }
    violations
}

/// The leaderships of one election by token, from its records; the records that contradict
/// their own leadership (rules 4 and 5) go to `found`.
fn collect<'h>(
    ops: &[&'h ElectionOp],
    found: &mut Vec<(Rule, String)>,
) -> BTreeMap<u64, Leadership<'h>> {
    let mut leaderships = granted(ops, found);
    let mut reads = Vec::new();
    for op in ops {
        let at = format!("{}'s", op.agent);
        let (sent, answered) = (op.invoke_us, op.complete_us);
        match &op.kind {
            ElectionKind::Campaign { .. } => {}
            ElectionKind::Proclaim {
                token,
                value,
                answer,
            } => {
                let leadership = leaderships.entry(*token).or_default();
                if leadership.agent == Some(op.agent.as_str()) {
                    leadership.values.insert(value);
                }
                match answer {
                    Answer::Ok(_) => {
                        if leadership.agent.is_some_and(|agent| agent != op.agent) {
                            found.push((
                                Rule::WrongLeader,
                                format!(
                                    "{at} proclaim with token {token} (sent at {sent} µs) was \
                                     accepted, but {} holds that token",
                                    leadership.agent.unwrap_or_default()
                                ),
                            ));
                        }
                        let what = format!("{at} proclaim accepted");
                        leadership.alive.push((sent, answered, what));
                    }
                    Answer::Refused(code) if code == NOT_HOLDER && leadership.after_grant(sent) => {
                        leadership.seen_over(answered, format!("{at} proclaim refused"));
                    }
                    _ => {}
                }
            }
            ElectionKind::Resign { token, answer } => {
                let leadership = leaderships.entry(*token).or_default();
                leadership.resigns.push(sent);
                match answer {
                    Answer::Ok(()) => {
                        let what = format!("{at} resign accepted");
                        leadership.alive.push((sent, answered, what.clone()));
                        leadership.seen_over(answered, what);
                    }
                    Answer::Refused(code) if code == NOT_HOLDER && leadership.after_grant(sent) => {
                        leadership.seen_over(answered, format!("{at} resign refused"));
                    }
                    _ => {}
                }
            }
            ElectionKind::FenceCheck { token, answer } => {
                let leadership = leaderships.entry(*token).or_default();
                match answer {
                    Answer::Ok(true) => {
                        let what = format!("{at} fence.check valid");
                        leadership.alive.push((sent, answered, what));
                    }
                    Answer::Ok(false) if leadership.after_grant(sent) => {
                        leadership.seen_over(answered, format!("{at} fence.check invalid"));
                    }
                    _ => {}
                }
            }
            ElectionKind::Read { via, leader } => reads.push((*op, *via, leader.as_ref())),
        }
    }
    for (op, via, leader) in reads {
        read(op, via, leader, &mut leaderships, found);
    }
    leaderships
}

/// The leaderships the accepted campaigns granted, by token, with their agent, lease, grant
/// and first value; a token granted twice (rule 4) goes to `found`.
fn granted<'h>(
    ops: &[&'h ElectionOp],
    found: &mut Vec<(Rule, String)>,
) -> BTreeMap<u64, Leadership<'h>> {
    let mut leaderships: BTreeMap<u64, Leadership<'h>> = BTreeMap::new();
    for op in ops {
        if let ElectionKind::Campaign {
            lease,
            value,
            answer: Answer::Ok(token),
        } = &op.kind
        {
            let leadership = leaderships.entry(*token).or_default();
            if let Some(first) = leadership.agent {
                found.push((
                    Rule::TokenTwice,
                    format!(
                        "token {token} granted to {first} and again to {} (campaign sent at {} µs)",
                        op.agent, op.invoke_us
                    ),
                ));
                continue;
            }
            leadership.agent = Some(&op.agent);
            leadership.lease = Some(lease);
            leadership.grant = Some((op.invoke_us, op.complete_us));
            leadership.values.insert(value);
        }
    }
    leaderships
}

/// What one answered read of the leader says of every leadership.
fn read<'h>(
    op: &'h ElectionOp,
    via: ReadVia,
    leader: Option<&'h Seen>,
    leaderships: &mut BTreeMap<u64, Leadership<'h>>,
    found: &mut Vec<(Rule, String)>,
) {
    let what = format!("{}'s {via:?} read sent at {} µs", op.agent, op.invoke_us);
    if let Some(seen) = leader {
        let leadership = leaderships.entry(seen.token).or_default();
        if leadership.agent.is_none() {
            leadership.agent = seen.agent.as_deref();
        }
        let wrong_agent = matches!((leadership.agent, &seen.agent),
            (Some(grantee), Some(agent)) if grantee != agent);
        let wrong_value = leadership.grant.is_some() && !leadership.values.contains(&*seen.value);
        if wrong_agent || wrong_value {
            found.push((
                Rule::WrongLeader,
                format!(
                    "{what} showed token {} led by {:?} with value {:?}, but its grantee is {} \
                     and sent the values {:?}",
                    seen.token,
                    seen.agent,
                    seen.value,
                    leadership.agent.unwrap_or("unknown"),
                    leadership.values
                ),
            ));
        }
        leadership
            .alive
            .push((op.invoke_us, op.complete_us, what.clone()));
    }
    let shown = leader.map(|seen| seen.token);
    for (token, leadership) in leaderships.iter_mut() {
        let over = match shown {
            Some(newer) => *token < newer,
            None => leadership.after_grant(op.invoke_us),
        };
        if over {
            leadership.seen_over(op.complete_us, format!("{what} (showing {shown:?})"));
        }
    }
}

/// Rules 1 and 2: the leaderships placed one after the other in token order, each as early
/// as its records allow.
fn exclusive(leaderships: &BTreeMap<u64, Leadership<'_>>, found: &mut Vec<(Rule, String)>) {
    // The earliest point the previous leadership can have ended, and its token.
    let mut free_from = 0;
    let mut previous: Option<u64> = None;
    for (token, leadership) in leaderships {
        let mut granted = free_from;
        if let Some((invoke, complete)) = leadership.grant {
            granted = granted.max(invoke);
            if granted > complete {
                found.push((
                    Rule::Exclusive,
                    format!(
                        "token {token} was granted to {} (answered at {complete} µs) before \
                         token {} could have ended (seen alive until {free_from} µs at the \
                         earliest): two leaders at once",
                        leadership.agent.unwrap_or_default(),
                        previous.unwrap_or_default()
                    ),
                ));
                // Placed at its answer (one anomaly per misplaced grant, not a cascade).
                granted = complete;
            }
        }
        let mut end = granted;
        for (invoke, complete, what) in &leadership.alive {
            let at = granted.max(*invoke);
            if at > *complete {
                found.push((
                    Rule::Exclusive,
                    format!(
                        "{what} saw token {token} alive by {complete} µs, before it could have \
                         been granted (at {granted} µs at the earliest)"
                    ),
                ));
            }
            end = end.max(at.min(*complete));
        }
        free_from = end;
        previous = Some(*token);
    }
}

/// Rule 3.
fn never_back(token: u64, leadership: &Leadership<'_>, found: &mut Vec<(Rule, String)>) {
    let Some((over_at, over_what)) = &leadership.ended else {
        return;
    };
    for (invoke, _, what) in &leadership.alive {
        if invoke > over_at {
            found.push((
                Rule::Resurrected,
                format!(
                    "token {token} was seen over ({over_what}, answered at {over_at} µs), then \
                     alive again: {what} (sent at {invoke} µs)"
                ),
            ));
        }
    }
}

/// Rule 6.
fn taken_while_alive(
    token: u64,
    leadership: &Leadership<'_>,
    alive: &[LeaseAlive],
    found: &mut Vec<(Rule, String)>,
) {
    let (Some((over_at, what)), Some(lease)) = (&leadership.ended, leadership.lease) else {
        return;
    };
    let resigned = leadership.resigns.iter().any(|sent| sent < over_at);
    if !resigned && alive_after(alive, lease, *over_at) {
        found.push((
            Rule::TakenWhileAlive,
            format!(
                "token {token} of {} was over by {over_at} µs ({what}) with no resign sent, \
                 yet its lease {lease} lived after that",
                leadership.agent.unwrap_or_default()
            ),
        ));
    }
}
