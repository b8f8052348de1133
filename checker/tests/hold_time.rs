//! Hand-written hold-time histories: ones that keep every rule (voluntary ends need no delay,
//! a clock fault excuses a window), and for each rule at least one that breaks it (a grant
//! inside a lock-delay window, a second holder while the first lives, a max-hold ended early,
//! a hold taken from a live lease, a token twice). Times are µs; `MS` is a millisecond.

use hivekeeper_checker::hold_time::{
    ClockFault, LockKind, LockOp, Lost, Outcome, Rule, SLACK_US, check,
};
use hivekeeper_checker::recipe::Answer;

const MS: u64 = 1_000;
/// The lock-delay of every lease here but `d0`'s.
const DELAY_MS: u64 = 2_000;

/// The lease of `agent` ("a" holds lease "a-lease").
fn lease_of(agent: &str) -> String {
    format!("{agent}-lease")
}

fn op(agent: &str, invoke_us: u64, complete_us: u64, kind: LockKind) -> LockOp {
    LockOp {
        agent: agent.into(),
        lease: lease_of(agent),
        invoke_us,
        complete_us,
        kind,
    }
}

/// `agent`'s lease granted at `at` with `delay_ms`.
fn grant(agent: &str, at: u64, delay_ms: u64) -> LockOp {
    let kind = LockKind::Grant {
        ttl_ms: 1_000,
        lock_delay_ms: delay_ms,
    };
    op(agent, at, at + MS, kind)
}

fn keepalive(agent: &str, at: u64) -> LockOp {
    op(agent, at, at + MS, LockKind::Keepalive)
}

fn acquire(agent: &str, invoke: u64, granted: u64, token: u64) -> LockOp {
    acquire_bounded(agent, invoke, granted, token, None)
}

fn acquire_bounded(
    agent: &str,
    invoke: u64,
    granted: u64,
    token: u64,
    max_hold_ms: Option<u64>,
) -> LockOp {
    let kind = LockKind::Acquire {
        lock: "L".into(),
        max_hold_ms,
        answer: Answer::Ok(token),
    };
    op(agent, invoke, granted, kind)
}

fn release(agent: &str, invoke: u64, token: u64, answer: Answer<()>) -> LockOp {
    let kind = LockKind::Release {
        lock: "L".into(),
        token,
        answer,
    };
    op(agent, invoke, invoke + 10 * MS, kind)
}

fn revoke(agent: &str, invoke: u64, operator: bool, answer: Answer<()>) -> LockOp {
    op(
        agent,
        invoke,
        invoke + 10 * MS,
        LockKind::Revoke { operator, answer },
    )
}

fn lost(agent: &str, token: u64, max_hold: bool, observed_us: u64) -> Lost {
    Lost {
        agent: agent.into(),
        lock: "L".into(),
        token,
        max_hold,
        observed_us,
    }
}

fn rules(outcome: &Outcome) -> Vec<Rule> {
    outcome.violations.iter().map(|v| v.rule).collect()
}

/// Every way a hold ends, each followed by a grant as early as the rules allow.
fn clean() -> (Vec<LockOp>, Vec<Lost>) {
    let ops = vec![
        // a releases: b's grant 10 ms later needs no delay.
        grant("a", 0, DELAY_MS),
        acquire("a", 10 * MS, 20 * MS, 1),
        release("a", 100 * MS, 1, Answer::Ok(())),
        // b's lease lapses (last proof of life at 300 ms): c is granted after the delay.
        grant("b", 0, DELAY_MS),
        acquire("b", 30 * MS, 110 * MS, 2),
        keepalive("b", 300 * MS),
        acquire("c", 200 * MS, 2_350 * MS, 3),
        // c's lease is revoked by an operator at 2.5 s: d after the delay.
        grant("c", 0, DELAY_MS),
        revoke("c", 2_500 * MS, true, Answer::Ok(())),
        // d holds with a max-hold of 300 ms and keeps its lease: e is granted at its end,
        // well within d's lock-delay, which does not follow a max-hold.
        grant("d", 0, DELAY_MS),
        acquire_bounded("d", 2_600 * MS, 4_550 * MS, 4, Some(300)),
        release("d", 4_800 * MS, 4, Answer::Refused("not_holder".into())),
        keepalive("d", 5_000 * MS),
        acquire("e", 3_000 * MS, 4_760 * MS, 5),
        // e revokes its own lease: f at once.
        grant("e", 0, DELAY_MS),
        revoke("e", 4_800 * MS, false, Answer::Ok(())),
        acquire("f", 4_700 * MS, 4_820 * MS, 6),
        // f's release got no answer: it may have taken effect, so g needs no delay.
        grant("f", 0, DELAY_MS),
        release("f", 4_900 * MS, 6, Answer::Unknown),
        acquire("g", 4_850 * MS, 4_950 * MS, 7),
    ];
    let lost = vec![lost("d", 4, true, 4_755 * MS)];
    (ops, lost)
}

#[test]
fn every_kind_of_end_followed_by_a_grant_as_early_as_allowed_keeps_every_rule() {
    let (ops, lost) = clean();
    let outcome = check(&ops, &lost, &[]);
    assert_eq!(outcome.violations, vec![], "{:#?}", outcome.violations);
    // c after b's lapse and d after c's operator revoke were checked against a delay.
    assert_eq!(outcome.delays_checked, 2);
    assert_eq!(outcome.closest_delay_us, Some(50 * MS as i64));
    // b came 10 ms after a's acknowledged release: no delay followed it.
    assert_eq!(outcome.undelayed_after_release, 1);
    assert_eq!(outcome.excused, 0);
}

#[test]
fn a_grant_inside_a_lapsed_leases_lock_delay_window_is_caught() {
    let ops = vec![
        grant("b", 0, DELAY_MS),
        acquire("b", 30 * MS, 110 * MS, 2),
        keepalive("b", 300 * MS),
        // Within 2 s of b's last proof of life, and more than the slack early.
        acquire("c", 200 * MS, 2_300 * MS - SLACK_US - 1, 3),
    ];
    let outcome = check(&ops, &[], &[]);
    assert_eq!(
        rules(&outcome),
        vec![Rule::Early],
        "{:#?}",
        outcome.violations
    );
    let detail = &outcome.violations[0].detail;
    assert!(detail.contains("lock-delay window"), "{detail}");
    assert!(outcome.closest_delay_us.is_some_and(|us| us < 0));
    // Just inside the slack: no anomaly.
    let mut late_enough = ops.clone();
    late_enough[3] = acquire("c", 200 * MS, 2_300 * MS - SLACK_US, 3);
    assert_eq!(check(&late_enough, &[], &[]).violations, vec![]);
}

#[test]
fn a_grant_inside_an_operator_revokes_lock_delay_window_is_caught() {
    let ops = vec![
        grant("c", 0, DELAY_MS),
        acquire("c", 10 * MS, 20 * MS, 3),
        revoke("c", 1_000 * MS, true, Answer::Ok(())),
        acquire("d", 500 * MS, 1_050 * MS, 4),
    ];
    let outcome = check(&ops, &[], &[]);
    assert_eq!(
        rules(&outcome),
        vec![Rule::Early],
        "{:#?}",
        outcome.violations
    );
    // The agent's own revoke skips the delay.
    let mut own = ops;
    own[2] = revoke("c", 1_000 * MS, false, Answer::Ok(()));
    assert_eq!(check(&own, &[], &[]).violations, vec![]);
}

#[test]
fn a_second_holder_while_the_first_lives_is_caught() {
    // a's lease has no delay and lives on; b is granted before a's release was even sent.
    let ops = vec![
        grant("a", 0, 0),
        acquire("a", 10 * MS, 20 * MS, 1),
        acquire("b", 15 * MS, 60 * MS, 2),
        release("a", 100 * MS, 1, Answer::Ok(())),
    ];
    let outcome = check(&ops, &[], &[]);
    assert_eq!(
        rules(&outcome),
        vec![Rule::Early],
        "{:#?}",
        outcome.violations
    );
    assert!(outcome.violations[0].detail.contains("lived"));
    // A keepalive after b's grant proves a's lease (and so its hold) lived then too.
    let ops = vec![
        grant("a", 0, 0),
        acquire("a", 10 * MS, 20 * MS, 1),
        acquire("b", 15 * MS, 60 * MS, 2),
        keepalive("a", 200 * MS),
    ];
    assert_eq!(rules(&check(&ops, &[], &[])), vec![Rule::Early]);
    // Tokens out of real-time order: b's grant answered before a's acquire was sent.
    let ops = vec![
        acquire("a", 100 * MS, 120 * MS, 1),
        acquire("b", 10 * MS, 50 * MS, 2),
    ];
    assert_eq!(rules(&check(&ops, &[], &[])), vec![Rule::Early]);
}

#[test]
fn a_clock_fault_excuses_the_window_but_not_a_grant_before_the_last_proof_of_life() {
    let ops = vec![
        grant("b", 0, DELAY_MS),
        acquire("b", 30 * MS, 110 * MS, 2),
        keepalive("b", 300 * MS),
        acquire("c", 200 * MS, 700 * MS, 3),
    ];
    assert_eq!(rules(&check(&ops, &[], &[])), vec![Rule::Early]);
    let fault = ClockFault {
        from_us: 1_000 * MS,
        to_us: 9_000 * MS,
    };
    let outcome = check(&ops, &[], &[fault]);
    assert_eq!(outcome.violations, vec![], "{:#?}", outcome.violations);
    assert_eq!(outcome.excused, 1);
    // A fault that ended before the window began excuses nothing.
    let before = ClockFault {
        from_us: 0,
        to_us: 200 * MS,
    };
    assert_eq!(rules(&check(&ops, &[], &[before])), vec![Rule::Early]);
    // b's lease lived at 300 ms, whatever the clocks did: c at 250 ms had two holders.
    let mut early = ops;
    early[3] = acquire("c", 200 * MS, 250 * MS, 3);
    assert_eq!(rules(&check(&early, &[], &[fault])), vec![Rule::Early]);
}

#[test]
fn a_token_granted_twice_is_caught() {
    let ops = vec![
        acquire("a", 0, 10 * MS, 1),
        release("a", 20 * MS, 1, Answer::Ok(())),
        acquire("b", 30 * MS, 40 * MS, 1),
    ];
    assert_eq!(rules(&check(&ops, &[], &[])), vec![Rule::TokenTwice]);
}

#[test]
fn a_max_hold_that_ends_early_or_was_never_asked_for_is_caught() {
    let ops = vec![
        grant("d", 0, DELAY_MS),
        acquire_bounded("d", 1_000 * MS, 1_010 * MS, 4, Some(300)),
        keepalive("d", 2_000 * MS),
    ];
    // Told at 1.15 s: 150 ms into a 300 ms max-hold.
    let outcome = check(&ops, &[lost("d", 4, true, 1_150 * MS)], &[]);
    assert_eq!(
        rules(&outcome),
        vec![Rule::MaxHoldEarly],
        "{:#?}",
        outcome.violations
    );
    assert_eq!(
        check(&ops, &[lost("d", 4, true, 1_300 * MS)], &[]).violations,
        vec![]
    );
    // Found gone by a release 150 ms in, while the lease lived.
    let mut refused = ops.clone();
    refused.push(release(
        "d",
        1_140 * MS,
        4,
        Answer::Refused("not_holder".into()),
    ));
    assert_eq!(rules(&check(&refused, &[], &[])), vec![Rule::MaxHoldEarly]);
    // A max-hold end of a hold that asked for none.
    let unbounded = vec![grant("a", 0, 0), acquire("a", 0, 10 * MS, 1)];
    let outcome = check(&unbounded, &[lost("a", 1, true, 5_000 * MS)], &[]);
    assert_eq!(rules(&outcome), vec![Rule::TakenWhileAlive]);
}

#[test]
fn a_hold_taken_from_a_live_lease_is_caught() {
    let ops = vec![
        grant("a", 0, DELAY_MS),
        acquire("a", 10 * MS, 20 * MS, 1),
        release("a", 500 * MS, 1, Answer::Refused("not_holder".into())),
        keepalive("a", 600 * MS),
    ];
    let outcome = check(&ops, &[], &[]);
    assert_eq!(
        rules(&outcome),
        vec![Rule::TakenWhileAlive],
        "{:#?}",
        outcome.violations
    );
    // Without a later proof of life the lease may have ended: no anomaly.
    assert_eq!(check(&ops[..3], &[], &[]).violations, vec![]);
    // A lock.lost saying the lease ended, then a proof that it lived.
    let told = check(&ops[..2], &[lost("a", 1, false, 300 * MS)], &[]);
    assert_eq!(told.violations, vec![]);
    let mut alive = ops[..2].to_vec();
    alive.push(keepalive("a", 400 * MS));
    let told = check(&alive, &[lost("a", 1, false, 300 * MS)], &[]);
    assert_eq!(rules(&told), vec![Rule::TakenWhileAlive]);
}

#[test]
fn the_records_round_trip_through_json() {
    let (ops, lost) = clean();
    let text = serde_json::to_string(&(&ops, &lost)).expect("encode");
    let back: (Vec<LockOp>, Vec<Lost>) = serde_json::from_str(&text).expect("decode");
    assert_eq!(back, (ops, lost));
}
