//! Hand-written election histories: one that keeps every rule, and for each rule at least one
//! that breaks it.

use hivekeeper_checker::election::{ElectionKind, ElectionOp, ReadVia, Rule, Seen, check};
use hivekeeper_checker::recipe::{Answer, LeaseAlive};

fn op(agent: &str, invoke_us: u64, complete_us: u64, kind: ElectionKind) -> ElectionOp {
    ElectionOp {
        name: "e".into(),
        agent: agent.into(),
        invoke_us,
        complete_us,
        kind,
    }
}

fn campaign(agent: &str, invoke: u64, complete: u64, token: u64) -> ElectionOp {
    let kind = ElectionKind::Campaign {
        lease: format!("{agent}-lease"),
        value: format!("{agent}-v0"),
        answer: Answer::Ok(token),
    };
    op(agent, invoke, complete, kind)
}

fn proclaim(
    agent: &str,
    invoke: u64,
    complete: u64,
    token: u64,
    answer: Answer<u64>,
) -> ElectionOp {
    let kind = ElectionKind::Proclaim {
        token,
        value: format!("{agent}-v1"),
        answer,
    };
    op(agent, invoke, complete, kind)
}

fn resign(agent: &str, invoke: u64, complete: u64, token: u64, answer: Answer<()>) -> ElectionOp {
    op(
        agent,
        invoke,
        complete,
        ElectionKind::Resign { token, answer },
    )
}

fn fence(agent: &str, invoke: u64, complete: u64, token: u64, valid: bool) -> ElectionOp {
    let answer = Answer::Ok(valid);
    op(
        agent,
        invoke,
        complete,
        ElectionKind::FenceCheck { token, answer },
    )
}

fn read(invoke: u64, complete: u64, leader: Option<(&str, u64, &str)>) -> ElectionOp {
    let leader = leader.map(|(agent, token, value)| Seen {
        agent: Some(agent.into()),
        token,
        value: value.into(),
    });
    let via = ReadVia::Leader;
    op(
        "reader",
        invoke,
        complete,
        ElectionKind::Read { via, leader },
    )
}

fn refused() -> Answer<u64> {
    Answer::Refused("not_holder".into())
}

fn rules(ops: &[ElectionOp], alive: &[LeaseAlive]) -> Vec<Rule> {
    check(ops, alive).into_iter().map(|v| v.rule).collect()
}

/// a leads, proclaims, is read, resigns; its late proclaim and fence check are refused; b
/// leads after; an unanswered campaign's token shows up in a read.
fn good() -> Vec<ElectionOp> {
    vec![
        campaign("a", 0, 10, 5),
        proclaim("a", 20, 30, 5, Answer::Ok(6)),
        read(31, 35, Some(("a", 5, "a-v1"))),
        fence("a", 36, 40, 5, true),
        resign("a", 50, 60, 5, Answer::Ok(())),
        proclaim("a", 61, 70, 5, refused()),
        fence("a", 71, 80, 5, false),
        // b campaigned while a led: answered once a resigned.
        campaign("b", 15, 62, 7),
        read(63, 66, Some(("b", 7, "b-v0"))),
        read(100, 110, None),
        read(120, 130, Some(("c", 9, "c-v0"))),
    ]
}

#[test]
fn a_history_that_keeps_every_rule_passes() {
    let alive = [LeaseAlive {
        lease: "a-lease".into(),
        invoke_us: 200,
        complete_us: 210,
    }];
    assert_eq!(check(&good(), &alive), vec![]);
}

#[test]
fn a_newer_grant_answered_before_an_older_leader_was_seen_alive_is_two_leaders() {
    let mut ops = good();
    // a's proclaim, sent after b's grant was answered, was accepted.
    ops.push(proclaim("a", 63, 64, 5, Answer::Ok(8)));
    let found = rules(&ops, &[]);
    assert!(found.contains(&Rule::Exclusive), "{found:?}");
    assert!(found.contains(&Rule::Resurrected), "{found:?}");
}

#[test]
fn a_lower_token_granted_after_a_higher_one_was_answered_is_caught() {
    let ops = vec![campaign("a", 0, 10, 9), campaign("b", 20, 30, 7)];
    assert_eq!(rules(&ops, &[]), vec![Rule::Exclusive]);
}

#[test]
fn a_fence_check_valid_after_the_resign_was_acknowledged_is_caught() {
    let ops = vec![
        campaign("a", 0, 10, 5),
        resign("a", 20, 30, 5, Answer::Ok(())),
        fence("a", 40, 50, 5, true),
    ];
    assert_eq!(rules(&ops, &[]), vec![Rule::Resurrected]);
}

#[test]
fn a_token_granted_twice_is_caught() {
    let ops = vec![campaign("a", 0, 10, 5), campaign("b", 0, 12, 5)];
    assert!(rules(&ops, &[]).contains(&Rule::TokenTwice));
}

#[test]
fn a_read_with_a_value_its_leader_never_sent_or_a_stranger_s_proclaim_is_caught() {
    let ops = vec![campaign("a", 0, 10, 5), read(20, 30, Some(("a", 5, "z")))];
    assert_eq!(rules(&ops, &[]), vec![Rule::WrongLeader]);
    let ops = vec![
        campaign("a", 0, 10, 5),
        read(20, 30, Some(("b", 5, "a-v0"))),
    ];
    assert_eq!(rules(&ops, &[]), vec![Rule::WrongLeader]);
    let ops = vec![
        campaign("a", 0, 10, 5),
        proclaim("b", 20, 30, 5, Answer::Ok(6)),
    ];
    assert_eq!(rules(&ops, &[]), vec![Rule::WrongLeader]);
}

#[test]
fn a_leadership_ended_without_a_resign_while_its_lease_lived_is_caught() {
    let ops = vec![campaign("a", 0, 10, 5), proclaim("a", 20, 30, 5, refused())];
    let alive = |invoke_us| LeaseAlive {
        lease: "a-lease".into(),
        invoke_us,
        complete_us: invoke_us + 5,
    };
    assert_eq!(rules(&ops, &[alive(40)]), vec![Rule::TakenWhileAlive]);
    // Alive only before the refusal: its lease may have ended in between.
    assert_eq!(rules(&ops, &[alive(25)]), vec![]);
    // A resign was sent (unanswered) before: that may have ended it.
    let mut resigned = ops.clone();
    resigned.insert(1, resign("a", 15, 18, 5, Answer::Unknown));
    assert_eq!(rules(&resigned, &[alive(40)]), vec![]);
}
