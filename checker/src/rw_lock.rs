//! Read-write locks: no exclusive holder beside anyone, and tokens in grant order.
//!
//! The history is every request of the read-write workload ([`RwOp`]) with its send and
//! answer times: acknowledged `lease.grant`s and keepalives, `lock.acquire`s and
//! `lock.acquire_all`s with their mode and names, `lock.downgrade`s, `lock.release`s and
//! `lock.release_all`s (each naming the token of the hold it ends), the agent's own
//! `lease.revoke`s; and, not requests, the points where an agent let its lease lapse or was
//! told it was gone.
//!
//! What the service promises (PROTOCOL.md §8.4 to §8.5.3): a lock is held by one exclusive
//! holder or by any number of shared ones, never both; a downgrade turns an exclusive hold
//! into a shared one with its token; a multi-lock holds each of its names under one token;
//! tokens strictly increase in the log order of the grants.
//!
//! **Where a grant and an end can be placed.** A request took effect at one point of the
//! service's log between its send and its answer (or after its send, if it got none). Token
//! order is the log order of the grants on a name, so the grants are placed in token order,
//! each no earlier than its acquire's send and no earlier than the grant before it. A hold
//! ended no earlier than its *earliest end*:
//! - no earlier than the send of a request that found it held: an acknowledged release (or
//!   `lock.release_all`) of it, an acknowledged downgrade of it;
//! - and no earlier than the first of the ends still possible: the send of a release of it
//!   not refused (acknowledged or unanswered), of its agent's `lease.revoke` not refused, and
//!   its lease's expiry, which came after the lease's *last proof of life* (the latest send of
//!   an acknowledged request naming the lease: its grant, a keepalive, a granted acquire, an
//!   acknowledged downgrade, release or revoke). A hold that lapses with its lease so ends no
//!   earlier than that proof; the `lock.lost` the service then sends only bounds it from
//!   above, which no rule needs.
//!
//! A downgraded hold is exclusive from its grant until its downgrade and shared after: its
//! exclusive part ended no earlier than the first of the send of a downgrade of it not
//! refused and its earliest end. No bound is measured on the service's clock (the workload's
//! leases have no lock-delay and its holds no max-hold), so the rules hold under every fault
//! class, clock faults included, with no slack and nothing excused. Per name, with the holds
//! in token order, each placed as early as the rules allow (the order is fixed by the tokens
//! and every bound grows with the placements before it, so the earliest placement is optimal,
//! as in the mutex check):
//!
//! 1. **No exclusive holder beside anyone** (`Rule::ExclusiveBeside`): a hold granted
//!    exclusive is placed no earlier than the earliest end of every older hold, shared or
//!    exclusive; a shared one no earlier than the earliest end of every older hold's exclusive
//!    part. A grant answered before that point overlapped an exclusive hold. Shared holds may
//!    overlap each other, and a shared hold may join a downgraded one after its downgrade.
//! 2. **Tokens in grant order** (`Rule::TokenBackwards`): a grant answered before the grant of
//!    a lower token on its name can have been made (that one's request was sent later, or its
//!    own bounds put it later).
//! 3. **One grant per token** (`Rule::TokenTwice`) on each name.
//!
//! [`Outcome`] also counts the grants that surely overlapped an older shared hold (its
//! earliest end after their answer), and those that surely joined a downgraded one: the
//! workload exercised what the rules allow.
//!
//! `O(n log n)` for `n` records.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::recipe::{Answer, Violation};

/// One request of the read-write workload, or a point of its lease's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwOp {
    /// The agent that sent it.
    pub agent: String,
    /// The lease it names (the granted lease, for a grant).
    pub lease: String,
    /// When it was sent.
    pub invoke_us: u64,
    /// When its answer arrived (or the client gave up).
    pub complete_us: u64,
    /// What it was, and its answer.
    pub kind: RwKind,
}

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Alone.
    Exclusive,
    /// With other shared holders.
    Shared,
}

impl Mode {
    /// Its name on the wire (`mode`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// A request of the read-write workload and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RwKind {
    /// An acknowledged `lease.grant`.
    Grant,
    /// An acknowledged `lease.keepalive`.
    Keepalive,
    /// `lock.acquire` (one name) or `lock.acquire_all` (several), every name in `mode`.
    Acquire {
        /// The locks.
        names: Vec<String>,
        /// Their mode.
        mode: Mode,
        /// The token, or the refusal.
        answer: Answer<u64>,
    },
    /// `lock.downgrade` of the hold of `name` with `token`.
    Downgrade {
        /// The lock.
        name: String,
        /// The hold's token.
        token: u64,
        /// The token it answered, or the refusal.
        answer: Answer<u64>,
    },
    /// `lock.release` (one name) or `lock.release_all` (several) of the hold with `token`.
    Release {
        /// The locks.
        names: Vec<String>,
        /// The hold's token.
        token: u64,
        /// The answer.
        answer: Answer<()>,
    },
    /// The agent's own `lease.revoke`.
    Revoke {
        /// The answer.
        answer: Answer<()>,
    },
    /// The agent stopped keeping the lease alive, to let it lapse (at `invoke_us`).
    Lapse,
    /// A keepalive was answered `lease_not_found` (at `complete_us`): the lease had ended.
    Gone,
}

/// The read-write rules, numbered as in the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// 1: an exclusive hold overlapped another hold of its name.
    ExclusiveBeside,
    /// 2: a grant answered before a lower token's grant on its name can have been made.
    TokenBackwards,
    /// 3: a token granted twice on one name.
    TokenTwice,
}

/// One broken read-write rule, on one lock.
pub type RwViolation = Violation<Rule>;

/// The verdict, and how much overlap the rules allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every broken rule, lock by lock.
    pub violations: Vec<RwViolation>,
    /// Holds checked (a multi-lock once per name).
    pub holds: u64,
    /// Holds granted exclusive, then downgraded (an acknowledged downgrade).
    pub downgraded: u64,
    /// Shared grants answered while an older shared hold surely still lived.
    pub shared_beside_shared: u64,
    /// Shared grants answered while an older downgraded hold surely still lived.
    pub joined_downgraded: u64,
}

/// One granted hold of one name, from its acquire.
struct Hold<'h> {
    op: &'h RwOp,
    name: &'h str,
    token: u64,
    mode: Mode,
}

impl Hold<'_> {
    fn describe(&self) -> String {
        format!(
            "{}'s {} token {} (acquire sent at {} µs, answered at {} µs)",
            self.op.agent,
            self.mode.name(),
            self.token,
            self.op.invoke_us,
            self.op.complete_us
        )
    }
}

/// What the records say of one lease.
#[derive(Default)]
struct Lease {
    /// The latest send of an acknowledged request naming it: its last proof of life.
    last_alive_us: Option<u64>,
    /// Sends of its agent's `lease.revoke`s that may have taken effect.
    revokes: Vec<u64>,
}

/// The records indexed for the rules.
struct Index<'h> {
    leases: HashMap<&'h str, Lease>,
    /// Releases of each hold, by (name, token).
    releases: HashMap<(&'h str, u64), Vec<&'h RwOp>>,
    /// Downgrades of each hold, by (name, token).
    downgrades: HashMap<(&'h str, u64), Vec<&'h RwOp>>,
}

impl<'h> Index<'h> {
    fn new(ops: &'h [RwOp]) -> Index<'h> {
        let mut index = Index {
            leases: HashMap::new(),
            releases: HashMap::new(),
            downgrades: HashMap::new(),
        };
        for op in ops {
            let lease = index.leases.entry(op.lease.as_str()).or_default();
            let acknowledged = match &op.kind {
                RwKind::Grant | RwKind::Keepalive => true,
                RwKind::Lapse | RwKind::Gone => false,
                RwKind::Acquire { answer, .. } => answer.ok().is_some(),
                RwKind::Downgrade {
                    name,
                    token,
                    answer,
                } => {
                    index.downgrades.entry((name, *token)).or_default().push(op);
                    answer.ok().is_some()
                }
                RwKind::Release {
                    names,
                    token,
                    answer,
                } => {
                    for name in names {
                        index.releases.entry((name, *token)).or_default().push(op);
                    }
                    answer.ok().is_some()
                }
                RwKind::Revoke { answer } => {
                    if !matches!(answer, Answer::Refused(_)) {
                        lease.revokes.push(op.invoke_us);
                    }
                    answer.ok().is_some()
                }
            };
            if acknowledged {
                lease.last_alive_us = lease.last_alive_us.max(Some(op.invoke_us));
            }
        }
        index
    }

    fn of<'a>(map: &'a HashMap<(&'h str, u64), Vec<&'h RwOp>>, hold: &Hold<'h>) -> &'a [&'h RwOp] {
        map.get(&(hold.name, hold.token)).map_or(&[], Vec::as_slice)
    }

    /// The earliest end of `hold` placed at `placed_us` (the module doc's list).
    fn end_earliest(&self, hold: &Hold<'h>, placed_us: u64) -> u64 {
        let releases = Index::of(&self.releases, hold);
        let downgrades = Index::of(&self.downgrades, hold);
        let found_held = releases
            .iter()
            .chain(downgrades)
            .filter(|op| acknowledged(op))
            .map(|op| op.invoke_us)
            .max()
            .unwrap_or(0);
        let lease = self.leases.get(hold.op.lease.as_str());
        let expiry = lease.and_then(|lease| lease.last_alive_us).unwrap_or(0);
        let possible = releases
            .iter()
            .filter(|op| !refused(op))
            .map(|op| op.invoke_us)
            .chain(
                lease
                    .into_iter()
                    .flat_map(|lease| lease.revokes.iter().copied()),
            )
            .fold(expiry, u64::min);
        placed_us.max(found_held).max(possible)
    }

    /// The earliest end of the exclusive part of `hold`, granted exclusive and placed at
    /// `placed_us`, whose earliest end is `end_us`.
    fn exclusive_end_earliest(&self, hold: &Hold<'h>, placed_us: u64, end_us: u64) -> u64 {
        Index::of(&self.downgrades, hold)
            .iter()
            .filter(|op| !refused(op))
            .map(|op| op.invoke_us.max(placed_us))
            .fold(end_us, u64::min)
    }

    fn downgraded(&self, hold: &Hold<'h>) -> bool {
        Index::of(&self.downgrades, hold)
            .iter()
            .any(|op| acknowledged(op))
    }
}

/// Whether a release or downgrade record was acknowledged.
fn acknowledged(op: &RwOp) -> bool {
    match &op.kind {
        RwKind::Release { answer, .. } => answer.ok().is_some(),
        RwKind::Downgrade { answer, .. } => answer.ok().is_some(),
        _ => false,
    }
}

/// Whether a release or downgrade record was refused (it took no effect).
fn refused(op: &RwOp) -> bool {
    match &op.kind {
        RwKind::Release { answer, .. } => matches!(answer, Answer::Refused(_)),
        RwKind::Downgrade { answer, .. } => matches!(answer, Answer::Refused(_)),
        _ => false,
    }
}

/// The latest earliest end seen so far of some holds, and whose it is.
#[derive(Clone, Copy)]
struct Until<'a, 'h> {
    at_us: u64,
    hold: Option<&'a Hold<'h>>,
}

impl<'a, 'h> Until<'a, 'h> {
    const NONE: Until<'static, 'static> = Until {
        at_us: 0,
        hold: None,
    };

    fn extend(&mut self, at_us: u64, hold: &'a Hold<'h>) {
        if self.hold.is_none() || at_us > self.at_us {
            *self = Until {
                at_us,
                hold: Some(hold),
            };
        }
    }
}

/// Checks the read-write records; returns the violations, lock by lock, and the figures.
pub fn check(ops: &[RwOp]) -> Outcome {
    let index = Index::new(ops);
    let mut by_name: BTreeMap<&str, Vec<Hold<'_>>> = BTreeMap::new();
    for op in ops {
        if let RwKind::Acquire {
            names,
            mode,
            answer: Answer::Ok(token),
        } = &op.kind
        {
            for name in names {
                by_name.entry(name).or_default().push(Hold {
                    op,
                    name,
                    token: *token,
                    mode: *mode,
                });
            }
        }
    }
    let mut outcome = Outcome::default();
    for (name, mut holds) in by_name {
        holds.sort_by_key(|hold| hold.token);
        outcome.holds += holds.len() as u64;
        let mut found = tokens_twice(&holds);
        place(&holds, &index, &mut outcome, &mut found);
        outcome
            .violations
            .extend(found.into_iter().map(|(rule, detail)| Violation {
                rule,
                name: name.to_string(),
                detail,
            }));
    }
    outcome
}

/// Rule 3.
fn tokens_twice(holds: &[Hold<'_>]) -> Vec<(Rule, String)> {
    holds
        .windows(2)
        .filter(|pair| pair[0].token == pair[1].token)
        .map(|pair| {
            (
                Rule::TokenTwice,
                format!(
                    "token {} granted to {} and again to {}",
                    pair[0].token, pair[0].op.agent, pair[1].op.agent
                ),
            )
        })
        .collect()
}

/// Rules 1 and 2: each grant placed in token order, as early as its bounds allow.
fn place<'a, 'h>(
    holds: &'a [Hold<'h>],
    index: &Index<'h>,
    outcome: &mut Outcome,
    found: &mut Vec<(Rule, String)>,
) {
    // The latest earliest end of every older hold, of every older exclusive part, of every
    // older shared hold and of every older downgraded hold.
    let (mut any, mut exclusive, mut shared, mut downgraded) =
        (Until::NONE, Until::NONE, Until::NONE, Until::NONE);
    let mut previous: Option<(u64, &Hold<'h>)> = None;
    for hold in holds {
        let answered_us = hold.op.complete_us;
        let blocking = match hold.mode {
            Mode::Exclusive => any,
            Mode::Shared => exclusive,
        };
        if let Some(older) = blocking.hold.filter(|_| blocking.at_us > answered_us) {
            found.push((
                Rule::ExclusiveBeside,
                format!(
                    "{} was granted while {} lived{} (until {} µs at the earliest)",
                    hold.describe(),
                    older.describe(),
                    if hold.mode == Mode::Shared || older.mode == Mode::Exclusive {
                        " exclusive"
                    } else {
                        ""
                    },
                    blocking.at_us
                ),
            ));
        } else if let Some((placed_us, older)) = previous.filter(|(at, _)| *at > answered_us) {
            found.push((
                Rule::TokenBackwards,
                format!(
                    "{} was granted before {}, with a lower token, can have been (at {placed_us} \
                     µs at the earliest)",
                    hold.describe(),
                    older.describe()
                ),
            ));
        }
        if hold.mode == Mode::Shared {
            outcome.shared_beside_shared += u64::from(shared.at_us > answered_us);
            outcome.joined_downgraded += u64::from(downgraded.at_us > answered_us);
        }
        let chain_us = previous.map_or(0, |(at, _)| at);
        // Placed at the answer at the latest (one anomaly per misplaced grant, not a cascade).
        let placed_us = hold
            .op
            .invoke_us
            .max(chain_us)
            .max(blocking.at_us)
            .min(answered_us);
        previous = Some((placed_us, hold));
        let end_us = index.end_earliest(hold, placed_us);
        any.extend(end_us, hold);
        match hold.mode {
            Mode::Shared => shared.extend(end_us, hold),
            Mode::Exclusive => {
                exclusive.extend(index.exclusive_end_earliest(hold, placed_us, end_us), hold);
                if index.downgraded(hold) {
                    outcome.downgraded += 1;
                    downgraded.extend(end_us, hold);
                }
            }
        }
    }
}
