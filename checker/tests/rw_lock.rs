//! Hand-written read-write lock histories: ones that keep every rule (shared holds overlapping,
//! a shared holder joining a downgraded hold, a hold that lapsed with its lease before its
//! successor, a multi-lock), and for each rule at least one that breaks it (an exclusive hold
//! beside a shared one, two exclusive holds at once, a shared one joining before a downgrade,
//! a token going backwards, a token twice). Times are µs; `MS` is a millisecond.

use hivekeeper_checker::recipe::Answer;
use hivekeeper_checker::rw_lock::{Mode, Outcome, Rule, RwKind, RwOp, check};

const MS: u64 = 1_000;

/// The lease of `agent` ("a" holds lease "a-lease").
fn lease_of(agent: &str) -> String {
    format!("{agent}-lease")
}

fn op(agent: &str, invoke_us: u64, complete_us: u64, kind: RwKind) -> RwOp {
    RwOp {
        agent: agent.into(),
        lease: lease_of(agent),
        invoke_us,
        complete_us,
        kind,
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

fn grant(agent: &str, at: u64) -> RwOp {
    op(agent, at, at + MS, RwKind::Grant)
}

fn keepalive(agent: &str, at: u64) -> RwOp {
    op(agent, at, at + MS, RwKind::Keepalive)
}

/// `agent`'s acquire of "L" in `mode`, sent at `invoke`, answered `token` at `granted`.
fn acquire(agent: &str, mode: Mode, invoke: u64, granted: u64, token: u64) -> RwOp {
    acquire_all(agent, &["L"], mode, invoke, granted, token)
}

fn acquire_all(
    agent: &str,
    locks: &[&str],
    mode: Mode,
    invoke: u64,
    granted: u64,
    token: u64,
) -> RwOp {
    let kind = RwKind::Acquire {
        names: names(locks),
        mode,
        answer: Answer::Ok(token),
    };
    op(agent, invoke, granted, kind)
}

/// `agent`'s release of its hold of "L" with `token`, sent at `invoke`, answered 10 ms later.
fn release(agent: &str, invoke: u64, token: u64, answer: Answer<()>) -> RwOp {
    release_all(agent, &["L"], invoke, token, answer)
}

fn release_all(agent: &str, locks: &[&str], invoke: u64, token: u64, answer: Answer<()>) -> RwOp {
    let kind = RwKind::Release {
        names: names(locks),
        token,
        answer,
    };
    op(agent, invoke, invoke + 10 * MS, kind)
}

fn downgrade(agent: &str, invoke: u64, token: u64, answer: Answer<u64>) -> RwOp {
    let kind = RwKind::Downgrade {
        name: "L".into(),
        token,
        answer,
    };
    op(agent, invoke, invoke + 10 * MS, kind)
}

fn ok() -> Answer<()> {
    Answer::Ok(())
}

fn rules(outcome: &Outcome) -> Vec<Rule> {
    outcome.violations.iter().map(|v| v.rule).collect()
}

#[test]
fn shared_holds_overlap_and_an_exclusive_one_follows_their_releases() {
    let ops = vec![
        grant("a", 0),
        grant("b", 0),
        grant("c", 0),
        acquire("a", Mode::Shared, 10 * MS, 20 * MS, 1),
        acquire("b", Mode::Shared, 15 * MS, 25 * MS, 2),
        // c waited for both: its grant came after both releases were sent.
        acquire("c", Mode::Exclusive, 12 * MS, 80 * MS, 3),
        release("a", 50 * MS, 1, ok()),
        release("b", 60 * MS, 2, ok()),
        release("c", 90 * MS, 3, ok()),
    ];
    let outcome = check(&ops);
    assert_eq!(outcome.violations, vec![], "{outcome:?}");
    assert_eq!(outcome.holds, 3);
    assert_eq!(outcome.shared_beside_shared, 1);
}

#[test]
fn an_exclusive_hold_granted_beside_a_shared_one_is_caught() {
    let ops = vec![
        grant("a", 0),
        grant("b", 0),
        acquire("a", Mode::Shared, 10 * MS, 20 * MS, 1),
        // Answered before a's release was even sent.
        acquire("b", Mode::Exclusive, 15 * MS, 30 * MS, 2),
        release("a", 50 * MS, 1, ok()),
        release("b", 60 * MS, 2, ok()),
    ];
    let outcome = check(&ops);
    assert_eq!(rules(&outcome), vec![Rule::ExclusiveBeside], "{outcome:?}");
    let detail = &outcome.violations[0].detail;
    assert!(
        detail.contains("b's exclusive token 2") && detail.contains("a's shared token 1"),
        "{detail}"
    );
    // The other way round: a shared hold granted beside an exclusive one.
    let ops = vec![
        acquire("a", Mode::Exclusive, 10 * MS, 20 * MS, 1),
        acquire("b", Mode::Shared, 15 * MS, 30 * MS, 2),
        release("a", 50 * MS, 1, ok()),
    ];
    assert_eq!(rules(&check(&ops)), vec![Rule::ExclusiveBeside]);
}

#[test]
fn two_exclusive_holds_at_once_are_caught() {
    let ops = vec![
        grant("a", 0),
        acquire("a", Mode::Exclusive, 10 * MS, 20 * MS, 1),
        acquire("b", Mode::Exclusive, 15 * MS, 40 * MS, 2),
        // a's lease lived after b's grant and a's hold could end no other way.
        keepalive("a", 45 * MS),
    ];
    let outcome = check(&ops);
    assert_eq!(rules(&outcome), vec![Rule::ExclusiveBeside], "{outcome:?}");
    assert!(outcome.violations[0].detail.contains("lived exclusive"));
}

#[test]
fn a_token_going_backwards_is_caught() {
    // b's grant arrived before a's acquire was even sent, yet a has the lower token.
    let ops = vec![
        acquire("a", Mode::Shared, 50 * MS, 60 * MS, 1),
        acquire("b", Mode::Shared, 10 * MS, 20 * MS, 2),
    ];
    let outcome = check(&ops);
    assert_eq!(rules(&outcome), vec![Rule::TokenBackwards], "{outcome:?}");
    // Concurrent requests may take their tokens in either order.
    let ops = vec![
        acquire("a", Mode::Shared, 10 * MS, 60 * MS, 1),
        acquire("b", Mode::Shared, 10 * MS, 20 * MS, 2),
    ];
    assert_eq!(check(&ops).violations, vec![]);
}

#[test]
fn a_token_granted_twice_is_caught() {
    let ops = vec![
        acquire("a", Mode::Shared, 10 * MS, 20 * MS, 7),
        acquire("b", Mode::Shared, 10 * MS, 20 * MS, 7),
    ];
    assert_eq!(rules(&check(&ops)), vec![Rule::TokenTwice]);
}

#[test]
fn a_shared_holder_may_join_a_downgraded_hold_after_its_downgrade_only() {
    let history = |joined_us: u64| {
        vec![
            grant("a", 0),
            grant("b", 0),
            acquire("a", Mode::Exclusive, 10 * MS, 20 * MS, 1),
            downgrade("a", 40 * MS, 1, Answer::Ok(1)),
            acquire("b", Mode::Shared, 30 * MS, joined_us, 2),
            release("b", 70 * MS, 2, ok()),
            release("a", 80 * MS, 1, ok()),
        ]
    };
    // Granted beside the downgrade (in its entry) or after it.
    let outcome = check(&history(45 * MS));
    assert_eq!(outcome.violations, vec![], "{outcome:?}");
    assert_eq!((outcome.downgraded, outcome.joined_downgraded), (1, 1));
    // Answered before the downgrade was sent: beside an exclusive holder.
    let outcome = check(&history(35 * MS));
    assert_eq!(rules(&outcome), vec![Rule::ExclusiveBeside], "{outcome:?}");
    // An exclusive request waits for the downgraded hold's end, not its downgrade.
    let mut ops = history(45 * MS);
    ops.push(acquire("c", Mode::Exclusive, 30 * MS, 75 * MS, 3));
    assert_eq!(rules(&check(&ops)), vec![Rule::ExclusiveBeside]);
    // A downgrade with no answer may have taken effect at its send.
    let mut ops = history(45 * MS);
    ops[3] = downgrade("a", 40 * MS, 1, Answer::Unknown);
    assert_eq!(check(&ops).violations, vec![]);
    // A refused one did nothing: the hold stayed exclusive.
    ops[3] = downgrade("a", 40 * MS, 1, Answer::Refused("not_holder".into()));
    assert_eq!(rules(&check(&ops)), vec![Rule::ExclusiveBeside]);
}

#[test]
fn a_hold_that_lapsed_with_its_lease_ends_after_its_last_proof_of_life() {
    let history = |successor_us: u64| {
        vec![
            grant("a", 0),
            acquire("a", Mode::Exclusive, 10 * MS, 20 * MS, 1),
            keepalive("a", 300 * MS),
            op("a", 400 * MS, 400 * MS, RwKind::Lapse),
            acquire("b", Mode::Exclusive, 100 * MS, successor_us, 2),
            release("b", 2_000 * MS, 2, ok()),
        ]
    };
    // Granted after the lease's last proof of life: it may have expired by then.
    assert_eq!(check(&history(1_500 * MS)).violations, vec![]);
    assert_eq!(check(&history(350 * MS)).violations, vec![]);
    // Granted before a keepalive that proves a's lease (and so its hold) still lived.
    assert_eq!(
        rules(&check(&history(250 * MS))),
        vec![Rule::ExclusiveBeside]
    );
}

#[test]
fn a_release_that_found_the_hold_bounds_its_end_whatever_else_could_have_ended_it() {
    let history = |answer: Answer<()>| {
        vec![
            grant("a", 0),
            acquire("a", Mode::Exclusive, 10 * MS, 20 * MS, 1),
            op(
                "a",
                30 * MS,
                40 * MS,
                RwKind::Revoke {
                    answer: Answer::Unknown,
                },
            ),
            release("a", 50 * MS, 1, answer),
            acquire("b", Mode::Shared, 20 * MS, 45 * MS, 2),
        ]
    };
    // The revoke with no answer may have ended the hold at 30 ms.
    assert_eq!(check(&history(Answer::Unknown)).violations, vec![]);
    assert_eq!(
        check(&history(Answer::Refused("not_holder".into()))).violations,
        vec![]
    );
    // But the release found it held at 50 ms at the earliest.
    assert_eq!(rules(&check(&history(ok()))), vec![Rule::ExclusiveBeside]);
}

#[test]
fn a_multi_lock_holds_each_of_its_names_under_one_token() {
    let ops = vec![
        acquire_all("a", &["L", "M"], Mode::Exclusive, 10 * MS, 20 * MS, 1),
        acquire_all("b", &["M"], Mode::Shared, 15 * MS, 70 * MS, 2),
        acquire_all("c", &["L"], Mode::Shared, 15 * MS, 30 * MS, 3),
        release_all("a", &["L", "M"], 50 * MS, 1, ok()),
    ];
    let outcome = check(&ops);
    assert_eq!(outcome.holds, 4);
    assert_eq!(rules(&outcome), vec![Rule::ExclusiveBeside], "{outcome:?}");
    assert_eq!(outcome.violations[0].name, "L");
}

#[test]
fn a_history_survives_a_json_round_trip() {
    let ops = vec![
        grant("a", 0),
        acquire_all("a", &["L", "M"], Mode::Shared, 10 * MS, 20 * MS, 1),
        op("a", 30 * MS, 40 * MS, RwKind::Gone),
    ];
    let text = serde_json::to_string(&ops).expect("encodes");
    let back: Vec<RwOp> = serde_json::from_str(&text).expect("decodes");
    assert_eq!(back, ops);
}
