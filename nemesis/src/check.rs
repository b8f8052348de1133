//! The checks over a whole history. Each is sound: it reports an anomaly only when the records
//! prove one, whatever the network and scheduling delays were.
//!
//! 1. **Fenced register.** In the store's order, every accepted write read the value the
//!    previous accepted write left (else an update was lost), and every refused write came
//!    from a hold that had ended (its release was answered "gone", never "released").
//! 2. **Mutex.** Per lock, tokens are distinct, and the holds are linearizable against a mutex
//!    whose grants carry strictly increasing tokens. That model fixes the order in which the
//!    grants took effect (token order), so the usual WGL search collapses to one pass: place
//!    each grant as early as its interval allows after the previous hold's end, and that end as
//!    early as its interval allows after the grant; the history is linearizable iff every
//!    placement fits in its interval (earliest placement is optimal when the order is fixed).
//!    A grant takes effect in `[invoke_us, granted_us]`; a released hold ends in
//!    `[release invoke, release ack]`; a hold that was found gone ended in
//!    `[grant, observed]`; one with no answer ended after its last release attempt, or never.
//! 3. **Semaphore.** Per semaphore, tokens are distinct and at no instant more than `limit`
//!    holds are certainly held (from the grant's arrival to the release's send, for a release
//!    the service acknowledged). FIFO: whenever the service showed its queue (`inspect`, a
//!    linearizable read) with A ahead of B, and both of those waits ended in a grant, A's token
//!    is the smaller. (Send times prove nothing about arrival order under load, so the queue
//!    the service reported is the evidence.)
//! 4. **Leases.** No lease was found gone before `TTL` after the send time of its last
//!    acknowledged keepalive (the service received it after it was sent, so the lease lived at
//!    least that long).
//! 5. **Answers.** No well-formed acquire was answered `bad_request` or `internal` (or failed
//!    in the SDK for a reason other than time, connection or the session).
//! 6. **Keys.** The keys workload's operations and the final read are linearizable per key
//!    (`hivekeeper-checker`'s search, within a budget: a key over it is undecided, not an
//!    anomaly), and no value, each written by one request, is seen at two revisions (a write
//!    applied twice). See `keys.rs`.
//! 7. **Watch.** Every watcher's streams keep etcd's watch guarantees (ordered, unique,
//!    reliable, atomic, bookmarkable, resumable, consistent) against the writes the keys
//!    workload saw committed. See `watchers.rs`.
//! 8. **Election.** Per name, the leaderships in token order fit one after the other in real
//!    time (a grant only after the previous leadership was last seen alive), a leadership seen
//!    over is never seen alive again (a deposed leader's proclaim and `fence.check` are
//!    refused), the leader read (`election.leader`, `$election/{name}`'s `create_revision`) is
//!    the grantee with one of its values, and a leadership ends only by a resign or its
//!    lease's end. See `hivekeeper-checker`'s `election` and `elections.rs`.
//! 9. **Barrier.** Per barrier, no round answered before one of its members started entering
//!    (or, for leaves, leaving), at most `count` members per round, later rounds with higher
//!    generations, and no member dropped from its round while its lease lived. See
//!    `hivekeeper-checker`'s `barrier` and `barriers.rs`.
//!
//! 10. **Hold times.** Per lock of the hold-time workload (leases with a lock-delay, holds with
//!     a max-hold), in token order: no grant before the earliest end of an older hold, which
//!     for a hold ended by its lease's expiry or an operator's revoke is the lease's last proof
//!     of life plus its `lock_delay_ms` (a release or the agent's own revoke skips the delay);
//!     no max-hold ended before `max_hold_ms` after its grant; no hold taken while its lease
//!     lived but by its max-hold. The parts measured on the service's clock (delays,
//!     max-holds) get [`hivekeeper_checker::hold_time::SLACK_US`] of slack and are excused
//!     where a clock fault met them. See `hivekeeper-checker`'s `hold_time` and
//!     `hold_times.rs`.
//!
//! 11. **No exclusive holder beside anyone.** Per lock of the read-write workload (shared and
//!     exclusive holds, multi-locks, downgrades), in token order: an exclusive grant no earlier
//!     than the earliest end of every older hold, a shared one no earlier than the earliest
//!     end of every older hold's exclusive part (a downgraded hold is exclusive until its
//!     downgrade, shared after); shared holds overlap freely; no grant before a lower token's
//!     grant can have been made. A hold ends no earlier than a request that found it held, nor
//!     than the first end still possible (a release or revoke not refused, its lease's expiry
//!     after its last proof of life). Nothing is measured on the service's clock, so nothing is
//!     excused under clock faults. See `hivekeeper-checker`'s `rw_lock` and `rw_locks.rs`.
//!
//! The last four checks also count every election, barrier, hold-time or read-write lock
//! request answered `bad_request` or `internal` (or unreadable) as an anomaly.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::history::{History, Hold, HoldEnd, QueueView};

/// The outcome of one check.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Operations the check looked at.
    pub ops: u64,
    /// Anomalies found.
    pub anomalies: u64,
    /// The first few, described.
    pub samples: Vec<String>,
    /// Parts of the history the check could not decide within its budget (not anomalies).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
    /// Context for the verdict that is no anomaly (operations left without an answer, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Verdict {
    /// The verdict of a check that looked at `ops` operations and found `violations`.
    pub fn of<V: ToString>(ops: usize, violations: impl IntoIterator<Item = V>) -> Verdict {
        let mut verdict = Verdict {
            ops: ops as u64,
            ..Verdict::default()
        };
        for violation in violations {
            verdict.anomaly(violation.to_string());
        }
        verdict
    }

    /// Counts one anomaly, described among the first few.
    pub fn anomaly(&mut self, what: String) {
        self.anomalies += 1;
        if self.samples.len() < 8 {
            self.samples.push(what);
        }
    }
}

/// Requests counted by what they were and how they ended, for a verdict's notes.
#[derive(Debug, Default)]
pub struct Tally(BTreeMap<String, u64>);

impl Tally {
    /// Counts one `what` (a request) that ended `outcome`.
    pub fn count(&mut self, what: &str, outcome: &str) {
        *self.0.entry(format!("{what} {outcome}")).or_default() += 1;
    }

    /// The counts as one line: `3× lock.release ok, 1× lock.release not_holder`.
    pub fn line(&self) -> String {
        self.0
            .iter()
            .map(|(what, n)| format!("{n}× {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Every check's verdict. The checks' numbers (in the module doc and docs/RELIABILITY.md) are
/// their places in [`Verdicts::named`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdicts {
    /// The fenced register.
    pub register: Verdict,
    /// The mutex history.
    pub mutex: Verdict,
    /// The semaphore.
    pub semaphore: Verdict,
    /// The leases.
    pub leases: Verdict,
    /// The answers.
    pub answers: Verdict,
    /// The keys' linearizability.
    pub keys: Verdict,
    /// The watchers' guarantees.
    pub watch: Verdict,
    /// The elections.
    pub election: Verdict,
    /// The barriers.
    pub barrier: Verdict,
    /// Lock-delay and max-hold.
    pub hold_time: Verdict,
    /// Read-write locks.
    pub rw_lock: Verdict,
}

impl Verdicts {
    /// Every verdict with its name, in the checks' order: the one list the total and the
    /// report walk, so no check is left out of either.
    pub fn named(&self) -> [(&'static str, &Verdict); 11] {
        [
            ("register", &self.register),
            ("mutex", &self.mutex),
            ("semaphore", &self.semaphore),
            ("leases", &self.leases),
            ("answers", &self.answers),
            ("keys", &self.keys),
            ("watch", &self.watch),
            ("election", &self.election),
            ("barrier", &self.barrier),
            ("hold_time", &self.hold_time),
            ("rw_lock", &self.rw_lock),
        ]
    }

    /// The total.
    pub fn anomalies(&self) -> u64 {
        self.named()
            .iter()
            .map(|(_, verdict)| verdict.anomalies)
            .sum()
    }
}

/// Runs every check.
pub fn check(history: &History, sem_limit: u32) -> Verdicts {
    Verdicts {
        register: register(history),
        mutex: mutex(&history.lock_holds),
        semaphore: semaphore(&history.sem_holds, sem_limit, &history.queue_views),
        leases: leases(history),
        answers: answers(history),
        keys: super::keys::check(history, &super::keys::BUDGET),
        watch: super::watchers::check(history),
        election: recipe(super::elections::check(history), history, "election."),
        barrier: recipe(super::barriers::check(history), history, "barrier."),
        hold_time: recipe(
            super::hold_times::check(history),
            history,
            super::hold_times::AGENT_MARK,
        ),
        rw_lock: recipe(
            super::rw_locks::check(history),
            history,
            super::rw_locks::AGENT_MARK,
        ),
    }
}

/// A recipe's verdict with its requests answered in a way no well-formed request should be
/// (each described by its agent and op, e.g. `…'s election.campaign`) as anomalies: those
/// whose description contains `mark` (an op's prefix, or a mark in the workload's agent ids).
fn recipe(mut verdict: Verdict, history: &History, mark: &str) -> Verdict {
    for error in &history.recipe_errors {
        if error.contains(mark) {
            verdict.anomaly(error.clone());
        }
    }
    verdict
}

/// The answers (see the module doc).
fn answers(history: &History) -> Verdict {
    let mut verdict = Verdict::default();
    for wait in &history.waits {
        verdict.ops += 1;
        if super::workload::unexpected(&wait.outcome) {
            verdict.anomaly(format!(
                "{}'s acquire sent at {} µs was answered {}: {}",
                wait.agent,
                wait.invoke_us,
                wait.outcome,
                wait.detail.as_deref().unwrap_or("(no detail)")
            ));
        }
    }
    verdict
}

/// The fenced register (see the module doc).
fn register(history: &History) -> Verdict {
    let mut verdict = Verdict::default();
    let holds: HashMap<(&str, u64), &Hold> = history
        .lock_holds
        .iter()
        .map(|hold| ((hold.agent.as_str(), hold.token), hold))
        .collect();
    for write in &history.writes {
        verdict.ops += 1;
        if write.accepted {
            let read_value = write.read_value.unwrap_or_default();
            if read_value != write.current_value {
                verdict.anomaly(format!(
                    "lost update on {}: {} wrote {} with token {} over {} (it read {read_value})",
                    write.register,
                    write.agent,
                    read_value + 1,
                    write.token,
                    write.current_value,
                ));
            }
        } else {
            match holds.get(&(write.agent.as_str(), write.token)) {
                Some(hold) if matches!(hold.end, HoldEnd::Released { .. }) => {
                    verdict.anomaly(format!(
                        "{}'s {} with token {} to {} was refused (a higher token was seen) \
                         although its release then succeeded: two holders at once",
                        write.agent,
                        if write.read_value.is_some() {
                            "write"
                        } else {
                            "read"
                        },
                        write.token,
                        write.register
                    ))
                }
                _ => {}
            }
        }
    }
    verdict
}

/// The earliest point a hold's end can be placed at (its latest point is always after the
/// grant: a release's ack, the moment it was found gone, or never). A release the service
/// acknowledged found the hold still there, so it ended no earlier than the release was sent;
/// a hold found gone, or whose release got no answer, may have ended (its lease expired) any
/// time after the grant took effect (0: no bound beyond that).
fn end_earliest(hold: &Hold) -> u64 {
    match hold.end {
        HoldEnd::Released { invoke_us, .. } => invoke_us,
        HoldEnd::Lost { .. } | HoldEnd::Unknown { .. } => 0,
    }
}

/// Tokens distinct per resource; returns the holds grouped per resource in token order.
fn per_resource<'a>(holds: &'a [Hold], verdict: &mut Verdict) -> HashMap<&'a str, Vec<&'a Hold>> {
    let mut grouped: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for hold in holds {
        verdict.ops += 1;
        grouped
            .entry(hold.resource.as_str())
            .or_default()
            .push(hold);
    }
    for (resource, list) in &mut grouped {
        list.sort_by_key(|hold| hold.token);
        for pair in list.windows(2) {
            if pair[0].token == pair[1].token {
                verdict.anomaly(format!(
                    "token {} granted twice on {resource}: to {} and {}",
                    pair[0].token, pair[0].agent, pair[1].agent
                ));
            }
        }
    }
    grouped
}

/// The mutex history (see the module doc).
fn mutex(holds: &[Hold]) -> Verdict {
    let mut verdict = Verdict::default();
    let grouped = per_resource(holds, &mut verdict);
    for (lock, list) in grouped {
        // The earliest point the previous hold can have ended.
        let mut free_from = 0;
        let mut previous: Option<&Hold> = None;
        for hold in list {
            let acquired = free_from.max(hold.invoke_us);
            if acquired > hold.granted_us {
                let before = previous.map_or(String::new(), |p| {
                    format!("{} (token {})", p.agent, p.token)
                });
                verdict.anomaly(format!(
                    "{lock}: {} got token {} at {} µs, before {before} could have released \
                     (at {free_from} µs at the earliest): not linearizable",
                    hold.agent, hold.token, hold.granted_us
                ));
            }
            // Placed at the grant at the latest, even when that did not fit (one anomaly per
            // misplaced grant, not a cascade).
            let acquired = acquired.min(hold.granted_us);
            // An end is never after its window's latest point: that point is after the grant.
            free_from = acquired.max(end_earliest(hold));
            previous = Some(hold);
        }
    }
    verdict
}

/// The semaphore (see the module doc).
fn semaphore(holds: &[Hold], limit: u32, views: &[QueueView]) -> Verdict {
    let mut verdict = Verdict::default();
    let grouped = per_resource(holds, &mut verdict);
    for (name, list) in grouped {
        // Certain intervals: held for sure from the grant's arrival to the release's send.
        let mut edges: Vec<(u64, i64)> = Vec::new();
        for hold in &list {
            if let HoldEnd::Released { invoke_us, .. } = hold.end
                && invoke_us > hold.granted_us
            {
                edges.push((hold.granted_us, 1));
                edges.push((invoke_us, -1));
            }
        }
        // Ends before starts at the same instant: touching intervals do not overlap.
        edges.sort_by_key(|&(at, delta)| (at, delta));
        let mut held = 0i64;
        for (at, delta) in edges {
            held += delta;
            if held > i64::from(limit) {
                verdict.anomaly(format!(
                    "{name}: {held} permits held at once at {at} µs (limit {limit})"
                ));
            }
        }
    }
    // FIFO against the queue the service showed. A wait of `agent` sent before the inspect
    // was sent and granted after its answer arrived was pending all through the inspect, so
    // it is the wait the view listed (an agent has one acquire at a time); a wait that only
    // overlaps the inspect proves nothing and is left out.
    let pending = |agent: &str, view: &QueueView| {
        holds.iter().find(|h| {
            h.agent == agent && h.invoke_us <= view.invoke_us && h.granted_us >= view.complete_us
        })
    };
    for view in views {
        for (i, ahead) in view.waiters.iter().enumerate() {
            let Some(a) = pending(ahead, view) else {
                continue;
            };
            for behind in &view.waiters[i + 1..] {
                let Some(b) = pending(behind, view) else {
                    continue;
                };
                verdict.ops += 1;
                if b.token < a.token {
                    verdict.anomaly(format!(
                        "{}: the queue seen at {} µs had {} ahead of {}, yet {} got token {} \
                         before {}'s {}: FIFO broken",
                        a.resource,
                        view.invoke_us,
                        a.agent,
                        b.agent,
                        b.agent,
                        b.token,
                        a.agent,
                        a.token
                    ));
                }
            }
        }
    }
    verdict
}

/// The leases (see the module doc).
fn leases(history: &History) -> Verdict {
    let mut verdict = Verdict::default();
    for life in &history.leases {
        verdict.ops += 1;
        if let Some(ended) = life.ended_observed_us {
            let alive_until = life.last_ack_invoke_us + life.ttl_ms * 1_000;
            if ended < alive_until {
                verdict.anomaly(format!(
                    "{}'s lease was gone at {ended} µs, {} ms before the TTL ({} ms) after its \
                     last acknowledged keepalive (sent at {} µs) ran out",
                    life.agent,
                    (alive_until - ended) / 1_000,
                    life.ttl_ms,
                    life.last_ack_invoke_us
                ));
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{LeaseLife, Write};

    /// The numbered `**Title** (`name`...` items of docs/RELIABILITY.md's "Checks", as names.
    fn numbered_in_reliability_doc() -> Vec<String> {
        let doc = include_str!("../../docs/RELIABILITY.md");
        let checks = doc
            .split_once("### Checks")
            .and_then(|(_, rest)| rest.split_once("\n## "))
            .map(|(section, _)| section)
            .expect("docs/RELIABILITY.md has a ### Checks section");
        let mut names = Vec::new();
        for line in checks.lines() {
            let Some((number, item)) = line.split_once(". **") else {
                continue;
            };
            let Ok(number) = number.parse::<usize>() else {
                continue;
            };
            assert_eq!(number, names.len() + 1, "numbered out of order: {line}");
            let name = item
                .split_once("(`")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(name, _)| name.to_string())
                .unwrap_or_else(|| panic!("no (`name`) after the title: {line}"));
            names.push(name);
        }
        names
    }

    #[test]
    fn the_docs_number_the_checks_as_the_verdicts_list_them() {
        let named: Vec<String> = Verdicts::default()
            .named()
            .iter()
            .map(|(name, _)| name.to_string())
            .collect();
        assert_eq!(numbered_in_reliability_doc(), named);
        let module_doc: Vec<usize> = include_str!("check.rs")
            .lines()
            .take_while(|line| line.starts_with("//!"))
            .filter_map(|line| line.strip_prefix("//! ")?.split_once(". **"))
            .filter_map(|(number, _)| number.parse().ok())
            .collect();
        assert_eq!(module_doc, (1..=named.len()).collect::<Vec<_>>());
    }

    fn hold(agent: &str, token: u64, invoke: u64, granted: u64, end: HoldEnd) -> Hold {
        Hold {
            resource: "L".into(),
            agent: agent.into(),
            token,
            invoke_us: invoke,
            granted_us: granted,
            end,
        }
    }

    fn released(invoke_us: u64, complete_us: u64) -> HoldEnd {
        HoldEnd::Released {
            invoke_us,
            complete_us,
        }
    }

    #[test]
    fn sequential_holds_are_linearizable() {
        let holds = vec![
            hold("a", 1, 0, 10, released(20, 30)),
            hold("b", 2, 5, 35, released(40, 50)),
            // Sent long before, granted once b released: fine.
            hold("c", 3, 0, 45, HoldEnd::Lost { observed_us: 90 }),
            hold("d", 4, 60, 95, HoldEnd::Unknown { invoke_us: 99 }),
        ];
        let verdict = mutex(&holds);
        assert_eq!(verdict.anomalies, 0, "{:?}", verdict.samples);
        assert_eq!(verdict.ops, 4);
    }

    #[test]
    fn a_grant_before_the_previous_release_was_sent_is_caught() {
        let holds = vec![
            hold("a", 1, 0, 10, released(50, 60)),
            hold("b", 2, 5, 40, released(70, 80)),
        ];
        let verdict = mutex(&holds);
        assert_eq!(verdict.anomalies, 1, "{:?}", verdict.samples);
        assert!(
            verdict.samples[0].contains("not linearizable"),
            "{:?}",
            verdict.samples
        );
    }

    #[test]
    fn overlapping_grants_in_token_order_that_cannot_be_separated_are_caught() {
        // b's grant arrived before a's grant was even sent, yet b has the higher token.
        let holds = vec![
            hold("a", 1, 30, 40, released(50, 60)),
            hold("b", 2, 0, 20, released(70, 80)),
        ];
        assert_eq!(mutex(&holds).anomalies, 1);
    }

    #[test]
    fn a_repeated_token_is_caught() {
        let holds = vec![
            hold("a", 1, 0, 10, released(20, 30)),
            hold("b", 1, 40, 50, released(60, 70)),
        ];
        let verdict = mutex(&holds);
        assert!(
            verdict.samples.iter().any(|s| s.contains("granted twice")),
            "{:?}",
            verdict.samples
        );
    }

    #[test]
    fn a_hold_with_no_answer_to_its_release_may_have_ended_any_time_after() {
        let holds = vec![
            hold("a", 1, 0, 10, HoldEnd::Unknown { invoke_us: 20 }),
            hold("b", 2, 30, 40, released(50, 60)),
        ];
        // The lease may have expired any time after the grant: b is fine, even before a's
        // release was tried.
        assert_eq!(mutex(&holds).anomalies, 0);
        let holds = vec![
            hold("a", 1, 0, 10, HoldEnd::Unknown { invoke_us: 50 }),
            hold("b", 2, 30, 40, released(60, 70)),
        ];
        assert_eq!(mutex(&holds).anomalies, 0);
    }

    #[test]
    fn more_permits_than_the_limit_at_once_are_caught_and_fifo_is_checked() {
        let holds = vec![
            hold("a", 1, 0, 10, released(50, 55)),
            hold("b", 2, 0, 12, released(50, 55)),
            hold("c", 3, 0, 14, released(50, 55)),
        ];
        let verdict = semaphore(&holds, 2, &[]);
        assert_eq!(verdict.anomalies, 1, "{:?}", verdict.samples);
        // FIFO: the service showed d ahead of e while both waited, and e was granted first.
        let holds = vec![
            hold("d", 9, 0, 5_000, released(6_000, 6_100)),
            hold("e", 8, 2_000, 4_000, released(4_500, 4_600)),
        ];
        let view = |waiters: &[&str]| QueueView {
            invoke_us: 3_000,
            complete_us: 3_100,
            waiters: waiters.iter().map(|w| w.to_string()).collect(),
        };
        let verdict = semaphore(&holds, 1, &[view(&["d", "e"])]);
        assert_eq!(verdict.anomalies, 1, "{:?}", verdict.samples);
        assert!(verdict.samples[0].contains("FIFO"));
        // Shown the other way round, or with d's wait not pending then: nothing proven.
        assert_eq!(semaphore(&holds, 1, &[view(&["e", "d"])]).anomalies, 0);
        let late = QueueView {
            invoke_us: 3_900,
            complete_us: 4_100,
            ..view(&["d", "e"])
        };
        assert_eq!(semaphore(&holds, 1, &[late]).anomalies, 0);
    }

    #[test]
    fn lost_updates_and_refused_live_holders_are_caught() {
        let write = |agent: &str, token, read_value, current_value, accepted| Write {
            register: "L".into(),
            agent: String::from(agent),
            token,
            read_value: Some(read_value),
            current_value,
            accepted,
            at_us: 0,
        };
        let history = History {
            lock_holds: vec![
                hold("a", 1, 0, 10, released(20, 30)),
                hold("b", 2, 0, 40, HoldEnd::Lost { observed_us: 90 }),
            ],
            writes: vec![
                write("a", 1, 0, 0, true),
                write("c", 3, 0, 1, true),
                write("a", 1, 0, 1, false),
                write("b", 2, 1, 1, false),
            ],
            ..History::default()
        };
        let verdict = register(&history);
        assert_eq!(verdict.ops, 4);
        assert_eq!(verdict.anomalies, 2, "{:?}", verdict.samples);
        assert!(verdict.samples[0].contains("lost update"));
        assert!(verdict.samples[1].contains("two holders"));
    }

    #[test]
    fn the_hold_time_verdict_counts_broken_rules_and_its_agents_unexpected_answers() {
        use hivekeeper_checker::hold_time::{LockKind, LockOp};
        use hivekeeper_checker::recipe::Answer;
        let acquire = |agent: &str, invoke_us, complete_us, token| LockOp {
            agent: agent.into(),
            lease: format!("{agent}-lease"),
            invoke_us,
            complete_us,
            kind: LockKind::Acquire {
                lock: "L".into(),
                max_hold_ms: None,
                answer: Answer::Ok(token),
            },
        };
        let history = History {
            // b's grant arrived before a's acquire was even sent, with the higher token.
            hold_time_ops: vec![acquire("a", 100, 120, 1), acquire("b", 10, 50, 2)],
            recipe_errors: vec![
                "nem1x7-holdtime0's lock.acquire was answered internal: boom".into(),
                "nem1x7-elect0's election.campaign was answered internal: boom".into(),
            ],
            ..History::default()
        };
        let verdict = check(&history, 1).hold_time;
        assert_eq!(verdict.ops, 2);
        assert_eq!(verdict.anomalies, 2, "{:?}", verdict.samples);
        assert!(
            verdict.samples[1].contains("holdtime0"),
            "{:?}",
            verdict.samples
        );
    }

    #[test]
    fn the_total_counts_a_bad_answer_to_an_acquire() {
        let history = History {
            waits: vec![crate::history::Wait {
                agent: "a".into(),
                member: None,
                invoke_us: 0,
                complete_us: 10,
                outcome: "internal".into(),
                detail: None,
            }],
            ..History::default()
        };
        let verdicts = check(&history, 1);
        assert_eq!(verdicts.answers.anomalies, 1);
        assert_eq!(verdicts.anomalies(), 1);
    }

    #[test]
    fn the_rw_lock_verdict_counts_broken_rules_and_its_agents_unexpected_answers() {
        use hivekeeper_checker::recipe::Answer;
        use hivekeeper_checker::rw_lock::{Mode, RwKind, RwOp};
        let acquire = |agent: &str, mode, invoke_us, complete_us, token| RwOp {
            agent: agent.into(),
            lease: format!("{agent}-lease"),
            invoke_us,
            complete_us,
            kind: RwKind::Acquire {
                names: vec!["L".into()],
                mode,
                answer: Answer::Ok(token),
            },
        };
        let history = History {
            // b's shared grant arrived while a's exclusive hold was proven alive (a's release,
            // acknowledged, was sent later).
            rw_lock_ops: vec![
                acquire("a", Mode::Exclusive, 0, 10, 1),
                acquire("b", Mode::Shared, 5, 20, 2),
                RwOp {
                    agent: "a".into(),
                    lease: "a-lease".into(),
                    invoke_us: 30,
                    complete_us: 40,
                    kind: RwKind::Release {
                        names: vec!["L".into()],
                        token: 1,
                        answer: Answer::Ok(()),
                    },
                },
            ],
            recipe_errors: vec![
                "nem1x7-rwlock0's lock.downgrade was answered internal: boom".into(),
                "nem1x7-holdtime0's lock.acquire was answered internal: boom".into(),
            ],
            ..History::default()
        };
        let verdicts = check(&history, 1);
        let verdict = &verdicts.rw_lock;
        assert_eq!(verdict.ops, 3);
        assert_eq!(verdict.anomalies, 2, "{:?}", verdict.samples);
        assert!(
            verdict.samples[0].contains("ExclusiveBeside"),
            "{:?}",
            verdict.samples
        );
        assert!(
            verdict.samples[1].contains("rwlock0"),
            "{:?}",
            verdict.samples
        );
        // The hold-time agent's error is the hold-time check's, and both are in the total.
        assert_eq!(verdicts.anomalies(), 3);
    }

    #[test]
    fn a_lease_gone_before_its_ttl_is_caught() {
        let life = |ended| LeaseLife {
            agent: "l".into(),
            ttl_ms: 3_000,
            last_ack_invoke_us: 1_000_000,
            ended_observed_us: Some(ended),
        };
        let history = History {
            leases: vec![life(3_999_000), life(4_000_000)],
            ..History::default()
        };
        let verdict = leases(&history);
        assert_eq!(verdict.anomalies, 1, "{:?}", verdict.samples);
    }
}
