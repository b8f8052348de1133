//! Hand-written barrier histories: one that keeps every rule, and for each rule at least one
//! that breaks it.

use hivekeeper_checker::barrier::{BarrierOp, Phase, Rule, check};
use hivekeeper_checker::recipe::{Answer, LeaseAlive};

fn op(agent: &str, phase: Phase, since: u64, complete: u64, answer: Answer<u64>) -> BarrierOp {
    BarrierOp {
        name: "b".into(),
        agent: agent.into(),
        lease: format!("{agent}-lease"),
        phase,
        since_us: since,
        invoke_us: since,
        complete_us: complete,
        answer,
    }
}

const ENTER: Phase = Phase::Enter { count: 2 };

fn rules(ops: &[BarrierOp], alive: &[LeaseAlive]) -> Vec<Rule> {
    check(ops, alive).into_iter().map(|v| v.rule).collect()
}

/// Two rounds of a and b; c's first enter got no answer and its retry passed.
fn good() -> Vec<BarrierOp> {
    let mut retry = op("c", ENTER, 300, 360, Answer::Ok(20));
    retry.invoke_us = 340;
    vec![
        op("a", ENTER, 0, 50, Answer::Ok(10)),
        op("b", ENTER, 40, 45, Answer::Ok(10)),
        op("a", Phase::Leave, 60, 100, Answer::Ok(10)),
        op("b", Phase::Leave, 90, 95, Answer::Ok(10)),
        op("a", ENTER, 200, 350, Answer::Ok(20)),
        op("c", ENTER, 300, 330, Answer::Unknown),
        retry,
    ]
}

#[test]
fn a_history_that_keeps_every_rule_passes() {
    assert_eq!(check(&good(), &[]), vec![]);
}

#[test]
fn an_answer_before_a_member_arrived_is_caught() {
    let mut ops = good();
    // b's enter answered before a started entering.
    ops[1] = op("b", ENTER, 0, 1, Answer::Ok(10));
    ops[0] = op("a", ENTER, 2, 50, Answer::Ok(10));
    assert_eq!(rules(&ops, &[]), vec![Rule::Early]);
    // a's leave answered before b started leaving.
    let mut ops = good();
    ops[2] = op("a", Phase::Leave, 60, 80, Answer::Ok(10));
    assert_eq!(rules(&ops, &[]), vec![Rule::Early]);
}

#[test]
fn more_members_than_count_or_two_counts_are_caught() {
    let mut ops = good();
    ops.push(op("d", ENTER, 30, 55, Answer::Ok(10)));
    assert_eq!(rules(&ops, &[]), vec![Rule::Count]);
    let mut ops = good();
    ops[1].phase = Phase::Enter { count: 3 };
    assert_eq!(rules(&ops, &[]), vec![Rule::Count]);
}

#[test]
fn a_later_round_with_a_lower_generation_is_caught() {
    let mut ops = good();
    ops[4].answer = Answer::Ok(5);
    ops[6].answer = Answer::Ok(5);
    // Both members of the late round.
    assert_eq!(rules(&ops, &[]), vec![Rule::Order, Rule::Order]);
}

#[test]
fn a_member_dropped_from_its_round_while_its_lease_lived_is_caught() {
    let mut ops = good();
    ops[2] = op(
        "a",
        Phase::Leave,
        60,
        70,
        Answer::Refused("not_holder".into()),
    );
    let alive = |invoke_us| LeaseAlive {
        lease: "a-lease".into(),
        invoke_us,
        complete_us: invoke_us + 5,
    };
    assert_eq!(rules(&ops, &[alive(75)]), vec![Rule::Dropped]);
    // Its lease may have ended before the refusal.
    assert_eq!(rules(&ops, &[alive(65)]), vec![]);
    // An earlier leave of the attempt may have left.
    let mut retried = ops.clone();
    retried[2].invoke_us = 65;
    assert_eq!(rules(&retried, &[alive(75)]), vec![]);
}
