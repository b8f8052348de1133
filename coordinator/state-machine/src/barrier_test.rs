//! Double barriers: a round passes in the entry where its last member arrives and ends in the
//! entry where its last member leaves; reuse at once; members that time out or whose lease ends;
//! the refusals; and the double-barrier bugs of Curator (ZooKeeper's recipes), each shown
//! impossible here.

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceInfo, ResourceKind, Role};

use super::test_support::*;
use super::{
    Command, Event, LeaseEnd, LeaseId, Limits, ReleaseReason, Reply, ResourceKey, StateMachine,
};

fn enter(name: &str, count: u32, lease: &str, wait_ms: Option<u64>) -> Op {
    Op::BarrierEnter {
        name: name.into(),
        count,
        lease: lease.into(),
        wait_ms,
    }
}

fn leave(name: &str, lease: &str, wait_ms: Option<u64>) -> Op {
    Op::BarrierLeave {
        name: name.into(),
        lease: lease.into(),
        wait_ms,
    }
}

fn key(name: &str) -> ResourceKey {
    ResourceKey::new(ResourceKind::Barrier, &Arc::from(name))
}

fn passed(generation: u64) -> Reply {
    Reply::BarrierPassed { generation }
}

fn queued(name: &str, agent: &str, request_id: &str) -> Event {
    Event::Queued {
        key: key(name),
        agent: Arc::from(agent),
        request_id: request_id.into(),
    }
}

fn respond(name: &str, agent: &str, request_id: &str, reply: Reply) -> Event {
    Event::Respond {
        key: key(name),
        agent: Arc::from(agent),
        request_id: request_id.into(),
        reply,
    }
}

/// A member's admission to round `token` (`waited_ms` after it arrived; `None`: the arrival
/// that filled the round).
fn admitted(name: &str, agent: &str, lease: u64, token: u64, waited_ms: Option<u64>) -> Event {
    Event::Granted {
        key: key(name),
        agent: Arc::from(agent),
        lease: LeaseId(lease),
        token,
        waited_ms: waited_ms.unwrap_or(0),
        queued: waited_ms.is_some(),
    }
}

fn released(name: &str, agent: &str, lease: u64, token: u64, held_ms: u64) -> Event {
    Event::Released {
        key: key(name),
        agent: Arc::from(agent),
        lease: LeaseId(lease),
        token,
        held_ms,
        reason: ReleaseReason::Released,
    }
}

fn timeout() -> Reply {
    Reply::refused(
        ErrorCode::Timeout,
        "wait_ms elapsed before the resource was granted",
    )
}

fn lease_ended() -> Reply {
    Reply::refused(
        ErrorCode::LeaseNotFound,
        "the lease ended while the request waited",
    )
}

fn expire_waits(h: &mut Harness) -> (Reply, Vec<Event>) {
    let term = h.term;
    h.apply(Command::ExpireWaits { term })
}

/// `inspect` of barrier `name`: holder agents with their tokens, waiter agents, the filling
/// round's count and how many leave.
type Seen = (Vec<(String, u64)>, Vec<String>, Option<u32>, Option<u32>);

fn inspect(h: &Harness, name: &str) -> Seen {
    let op = Op::Inspect {
        kind: ResourceKind::Barrier,
        name: name.into(),
    };
    match h.sm.query("inspector", &op) {
        Reply::Inspect {
            limit: None,
            holders,
            waiters,
            count,
            leaving,
        } => (
            holders.into_iter().map(|h| (h.agent, h.token)).collect(),
            waiters.into_iter().map(|w| w.agent).collect(),
            count,
            leaving,
        ),
        other => panic!("inspect failed: {other:?}"),
    }
}

fn nobody() -> Seen {
    (vec![], vec![], None, None)
}

/// Leases for `agents` (ids 1, 2, ... in order), and the three entering barrier `b` of 3
/// (ids r4, r5, r6 for three agents): the round passes at index 6.
fn full_round<const N: usize>(h: &mut Harness, agents: [&str; N]) -> ([String; N], u64) {
    let leases = h.leases(agents, 5_000);
    for (agent, lease) in agents.iter().zip(&leases).take(N - 1) {
        assert_eq!(
            h.reply(agent, enter("b", N as u32, lease, None)),
            Reply::Queued
        );
    }
    let generation = (h.index + 1) << 16;
    let last = agents[N - 1];
    assert_eq!(
        h.reply(last, enter("b", N as u32, &leases[N - 1], None)),
        passed(generation)
    );
    (leases, generation)
}

#[test]
fn a_round_passes_in_the_entry_where_its_last_member_arrives() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    assert_eq!(
        h.send("a", enter("b", 3, &a, None)),
        (Reply::Queued, vec![queued("b", "a", "r4")])
    );
    h.now_ms += 10;
    assert_eq!(
        h.send("b", enter("b", 3, &b, None)),
        (Reply::Queued, vec![queued("b", "b", "r5")])
    );
    assert_eq!(
        inspect(&h, "b"),
        (vec![], vec!["a".into(), "b".into()], Some(3), None)
    );
    h.now_ms += 20;
    let generation = 6 << 16;
    let (reply, events) = h.send("c", enter("b", 3, &c, None));
    assert_eq!(
        reply,
        passed(generation),
        "the revision of the filling entry"
    );
    assert_eq!(
        events,
        vec![
            admitted("b", "a", 1, generation, Some(30)),
            respond("b", "a", "r4", passed(generation)),
            admitted("b", "b", 2, generation, Some(20)),
            respond("b", "b", "r5", passed(generation)),
            admitted("b", "c", 3, generation, None),
        ],
        "every member answered in this entry, the queued ones in arrival order"
    );
    let members = vec![
        ("a".into(), generation),
        ("b".into(), generation),
        ("c".into(), generation),
    ];
    assert_eq!(inspect(&h, "b"), (members, vec![], None, None));
}

#[test]
fn every_member_leaves_in_the_entry_where_the_last_one_leaves() {
    let mut h = Harness::new();
    let ([a, b, c], generation) = full_round(&mut h, ["a", "b", "c"]);
    h.now_ms += 5;
    assert_eq!(
        h.send("b", leave("b", &b, None)),
        (Reply::Queued, vec![queued("b", "b", "r7")])
    );
    assert_eq!(
        h.send("a", leave("b", &a, None)),
        (Reply::Queued, vec![queued("b", "a", "r8")])
    );
    assert_eq!(
        inspect(&h, "b"),
        (vec![("c".into(), generation)], vec![], None, Some(2)),
        "the holders are the members that have not left"
    );
    h.now_ms += 5;
    let (reply, events) = h.send("c", leave("b", &c, None));
    assert_eq!(
        reply,
        passed(generation),
        "both answers of a round carry it"
    );
    assert_eq!(
        events,
        vec![
            released("b", "b", 2, generation, 10),
            respond("b", "b", "r7", passed(generation)),
            released("b", "a", 1, generation, 10),
            respond("b", "a", "r8", passed(generation)),
            released("b", "c", 3, generation, 10),
        ],
        "the leavers in the order they left, then the last one"
    );
    assert_eq!(
        inspect(&h, "b"),
        nobody(),
        "a barrier with nobody is forgotten"
    );
    assert_eq!(h.sm.resource_count(), 0);
}

#[test]
fn a_round_of_one_passes_and_ends_at_once() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    assert_eq!(
        h.send("a", enter("solo", 1, &a, Some(0))),
        (
            passed(2 << 16),
            vec![admitted("solo", "a", 1, 2 << 16, None)]
        )
    );
    assert_eq!(
        h.send("a", leave("solo", &a, Some(0))),
        (passed(2 << 16), vec![released("solo", "a", 1, 2 << 16, 0)])
    );
    assert_eq!(inspect(&h, "solo"), nobody());
    // Entered again, it is a new round with a later generation.
    assert_eq!(h.reply("a", enter("solo", 1, &a, None)), passed(4 << 16));
}

#[test]
fn the_next_round_fills_while_the_previous_one_leaves() {
    let mut h = Harness::new();
    let ([a, b], first) = full_round(&mut h, ["a", "b"]);
    assert_eq!(h.reply("a", leave("b", &a, None)), Reply::Queued);
    let [c, d] = h.leases(["c", "d"], 5_000);
    assert_eq!(h.reply("c", enter("b", 2, &c, None)), Reply::Queued);
    let second = (h.index + 1) << 16;
    assert_eq!(h.reply("d", enter("b", 2, &d, None)), passed(second));
    assert!(
        second > first,
        "generations increase: {first} then {second}"
    );
    assert_eq!(
        inspect(&h, "b"),
        (
            vec![
                ("b".into(), first),
                ("c".into(), second),
                ("d".into(), second)
            ],
            vec![],
            None,
            Some(1)
        ),
        "two rounds under way, oldest first"
    );
    // The first round ends when b leaves; the second is untouched.
    let (reply, events) = h.send("b", leave("b", &b, None));
    assert_eq!(reply, passed(first));
    assert_eq!(
        responses(&events),
        vec![("a".into(), "r5".into(), passed(first))]
    );
    let rest = vec![("c".into(), second), ("d".into(), second)];
    assert_eq!(inspect(&h, "b"), (rest, vec![], None, None));
    // A count other than the finished rounds' is fine for the next round.
    let e = h.lease("e", 5_000);
    assert_eq!(h.reply("e", enter("b", 5, &e, None)), Reply::Queued);
}

#[test]
fn a_generation_increases_after_the_barrier_was_forgotten() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let mut last = 0;
    for _ in 0..3 {
        let Reply::BarrierPassed { generation } = h.reply("a", enter("b", 1, &a, None)) else {
            panic!("a round of one passes");
        };
        assert!(generation > last, "{generation} after {last}");
        assert_eq!(h.reply("a", leave("b", &a, None)), passed(generation));
        assert_eq!(inspect(&h, "b"), nobody());
        h.reply("a", lock_acquire("unrelated", &a, None));
        last = generation;
    }
}

#[test]
fn a_member_entering_again_gets_its_round_and_a_leaving_one_is_refused() {
    let mut h = Harness::new();
    let ([a, b], generation) = full_round(&mut h, ["a", "b"]);
    assert_eq!(
        h.send("a", enter("b", 2, &a, Some(0))),
        (passed(generation), vec![]),
        "as a second lock.acquire answers the token held"
    );
    assert_eq!(h.reply("a", enter("b", 7, &a, None)), passed(generation));
    assert_eq!(
        h.send_as("a", "a-out", leave("b", &a, None)).0,
        Reply::Queued
    );
    let (reply, events) = h.send("a", enter("b", 2, &a, None));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "lease 0000000000000001 is leaving round 262144 of barrier:b (request id \
             \"a-out\"): enter again once that leave is answered"
        )
    );
    assert_eq!(events, vec![]);
    assert_eq!(h.reply("b", leave("b", &b, None)), passed(generation));
    assert_eq!(
        h.reply("a", enter("b", 2, &a, None)),
        Reply::Queued,
        "a new round"
    );
}

#[test]
fn a_count_other_than_the_filling_rounds_is_refused_and_changes_nothing() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.reply("a", enter("b", 3, &a, None));
    let (reply, events) = h.send("b", enter("b", 2, &b, None));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "barrier \"b\" is filling a round of 3 members, the request says 2"
        )
    );
    assert_eq!(events, vec![]);
    assert_eq!(inspect(&h, "b"), (vec![], vec!["a".into()], Some(3), None));
    // The filling round's own waiter asking with another count is refused the same way.
    let reply = h.reply("a", enter("b", 4, &a, None));
    assert_eq!(refusal(&reply).0, ErrorCode::BadRequest);
    assert_eq!(inspect(&h, "b"), (vec![], vec!["a".into()], Some(3), None));
}

#[test]
fn the_count_is_bounded_by_the_waiter_bound() {
    let limits = Limits {
        waiters_per_resource_max: 2,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    let (reply, events) = h.send("a", enter("b", 4, &a, None));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "`count` is 4: a round has at most 3 members, as its other members all wait at \
             once and waiters_per_resource_max is 2"
        )
    );
    assert_eq!(events, vec![]);
    // The wire's bound is the decoder's and the machine's: at least one.
    let reply = h.reply("a", enter("b", 0, &a, None));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "barrier.enter: `count` must be at least 1"
        )
    );
    // The largest count fills with the round's other members all waiting.
    h.reply("a", enter("b", 3, &a, None));
    h.reply("b", enter("b", 3, &b, None));
    assert_eq!(h.reply("c", enter("b", 3, &c, None)), passed(8 << 16));
}

#[test]
fn an_arrival_asking_again_takes_its_wait_over_or_would_block() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.send_as("a", "first", enter("b", 2, &a, Some(60_000)));
    let (reply, events) = h.send_as("a", "try", enter("b", 2, &a, Some(0)));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::WouldBlock,
            "the round of barrier:b is not full (this lease already waits in it, request id \
             \"first\")"
        )
    );
    assert_eq!(events, vec![]);
    let (reply, events) = h.send_as("a", "second", enter("b", 2, &a, None));
    assert_eq!(reply, Reply::Queued);
    let superseded = Reply::refused(
        ErrorCode::Timeout,
        "superseded by request id \"second\": the wait for barrier:b goes on under it",
    );
    assert_eq!(
        events,
        vec![
            respond("b", "a", "first", superseded),
            queued("b", "a", "second")
        ]
    );
    assert_eq!(h.sm.wait_deadline_next_ms(), None, "the new wait has none");
    let generation = (h.index + 1) << 16;
    let (_, events) = h.send("b", enter("b", 2, &b, None));
    assert_eq!(
        responses(&events),
        vec![("a".into(), "second".into(), passed(generation))]
    );
}

#[test]
fn wait_ms_zero_would_block_unless_the_arrival_fills_the_round() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let (reply, events) = h.send("a", enter("b", 2, &a, Some(0)));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::WouldBlock,
            "barrier \"b\" has 0 of the 2 members of its round"
        )
    );
    assert_eq!(events, vec![]);
    assert_eq!(inspect(&h, "b"), nobody(), "nothing was made");
    h.reply("a", enter("b", 2, &a, None));
    assert_eq!(h.reply("b", enter("b", 2, &b, Some(0))), passed(5 << 16));
}

#[test]
fn leave_from_a_lease_in_no_passed_round_is_not_holder() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.reply("a", enter("b", 2, &a, None));
    for (agent, lease, name) in [("a", &a, "b"), ("c", &c, "b"), ("b", &b, "elsewhere")] {
        let (reply, events) = h.send(agent, leave(name, lease, None));
        assert_eq!(
            refusal(&reply),
            (
                ErrorCode::NotHolder,
                format!("lease {lease} is in no passed round of barrier {name:?}").as_str()
            ),
            "{agent} on {name}"
        );
        assert_eq!(events, vec![]);
    }
    let (reply, _) = h.send("c", leave("b", &a, None));
    assert_eq!(
        refusal(&reply).0,
        ErrorCode::Forbidden,
        "another agent's lease"
    );
}

#[test]
fn a_leaver_asking_again_takes_its_wait_over_or_would_block() {
    let mut h = Harness::new();
    let ([a, b], generation) = full_round(&mut h, ["a", "b"]);
    let (reply, events) = h.send_as("a", "try", leave("b", &a, Some(0)));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::WouldBlock,
            "1 other members of round 262144 of barrier:b have not left"
        )
    );
    assert_eq!(events, vec![]);
    h.send_as("a", "out-1", leave("b", &a, Some(60_000)));
    let (reply, _) = h.send_as("a", "out-try", leave("b", &a, Some(0)));
    assert_eq!(refusal(&reply).0, ErrorCode::WouldBlock);
    let (reply, events) = h.send_as("a", "out-2", leave("b", &a, None));
    assert_eq!(reply, Reply::Queued);
    assert_eq!(
        events,
        vec![
            respond(
                "b",
                "a",
                "out-1",
                Reply::refused(
                    ErrorCode::Timeout,
                    "superseded by request id \"out-2\": the wait for barrier:b goes on under it"
                )
            ),
            queued("b", "a", "out-2")
        ]
    );
    let (_, events) = h.send("b", leave("b", &b, None));
    assert_eq!(
        responses(&events),
        vec![("a".into(), "out-2".into(), passed(generation))]
    );
}

#[test]
fn a_same_id_retry_gets_the_first_answer_and_no_second_slot() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.send_as("a", "in", enter("b", 2, &a, None));
    assert_eq!(
        h.send_as("a", "in", enter("b", 2, &a, None)),
        (Reply::Queued, vec![])
    );
    let generation = (h.index + 1) << 16;
    let (reply, _) = h.send_as("b", "in", enter("b", 2, &b, None));
    assert_eq!(reply, passed(generation));
    assert_eq!(
        h.send_as("b", "in", enter("b", 2, &b, None)),
        (passed(generation), vec![])
    );
    assert_eq!(
        h.send_as("a", "in", enter("b", 2, &a, None)),
        (passed(generation), vec![]),
        "the queued request's answer is remembered too"
    );
}

#[test]
fn an_arrival_whose_wait_ends_is_out_of_the_round() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.send_as("a", "a-in", enter("b", 3, &a, Some(100)));
    h.send_as("b", "b-in", enter("b", 3, &b, None));
    h.now_ms += 100;
    let (reply, events) = expire_waits(&mut h);
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    assert_eq!(events, vec![respond("b", "a", "a-in", timeout())]);
    assert_eq!(inspect(&h, "b"), (vec![], vec!["b".into()], Some(3), None));
    assert_eq!(
        h.send_as("c", "c-in", enter("b", 3, &c, None)).0,
        Reply::Queued,
        "the round needs one more arrival"
    );
    let generation = (h.index + 1) << 16;
    let (reply, events) = h.send("a", enter("b", 3, &a, None));
    assert_eq!(reply, passed(generation));
    assert_eq!(
        responses(&events),
        vec![
            ("b".into(), "b-in".into(), passed(generation)),
            ("c".into(), "c-in".into(), passed(generation))
        ]
    );
}

#[test]
fn a_leave_that_times_out_has_not_left() {
    let mut h = Harness::new();
    let ([a, b], generation) = full_round(&mut h, ["a", "b"]);
    h.send_as("a", "a-out", leave("b", &a, Some(100)));
    h.now_ms += 100;
    let (_, events) = expire_waits(&mut h);
    assert_eq!(events, vec![respond("b", "a", "a-out", timeout())]);
    let members = vec![("a".into(), generation), ("b".into(), generation)];
    assert_eq!(inspect(&h, "b"), (members, vec![], None, None));
    assert_eq!(
        h.send_as("b", "b-out", leave("b", &b, None)).0,
        Reply::Queued,
        "a is still in the round"
    );
    let (reply, events) = h.send_as("a", "a-out-again", leave("b", &a, None));
    assert_eq!(reply, passed(generation));
    assert_eq!(
        responses(&events),
        vec![("b".into(), "b-out".into(), passed(generation))]
    );
}

/// The ways a lease ends: the agent's revoke, expiry, an operator's revoke, and the removal of
/// the agent's account; the events of the entry that ended it.
fn end_lease(
    h: &mut Harness,
    agent: &str,
    lease: &str,
    how: LeaseEnd,
    account: bool,
) -> Vec<Event> {
    let (_, events) = match (how, account) {
        (_, true) => h.send("admin", Op::AdminAgentRemove { name: agent.into() }),
        (LeaseEnd::Revoked, _) => h.send(
            agent,
            Op::LeaseRevoke {
                lease: lease.into(),
            },
        ),
        (LeaseEnd::Expired, _) => {
            h.now_ms += 5_000;
            h.expire(&[lease])
        }
        (LeaseEnd::AdminRevoked, _) => h.send(
            "admin",
            Op::AdminRevoke {
                lease: lease.into(),
            },
        ),
    };
    assert!(
        events.iter().any(
            |event| matches!(event, Event::LeaseEnded { agent: ended, .. } if &**ended == agent)
        ),
        "{how:?}, account removed: {account}: {events:?}"
    );
    events
}

const ENDS: [(LeaseEnd, bool); 4] = [
    (LeaseEnd::Revoked, false),
    (LeaseEnd::Expired, false),
    (LeaseEnd::AdminRevoked, false),
    (LeaseEnd::AdminRevoked, true),
];

/// A harness where agent `c` has an account (so its removal can end its lease).
fn with_account() -> Harness {
    let mut h = Harness::new();
    let hash = "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$aGFzaA".to_string();
    let add = Op::AdminAgentAdd {
        name: "c".into(),
        role: Some(Role::Agent),
        kv_read: Vec::new(),
        kv_write: Vec::new(),
    };
    h.send_account("admin", (add, hash));
    h
}

#[test]
fn an_arrival_whose_lease_ends_is_not_counted() {
    for (how, account) in ENDS {
        let mut h = with_account();
        let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
        h.reply("a", enter("b", 3, &a, None));
        h.send_as("c", "c-in", enter("b", 3, &c, None));
        let events = end_lease(&mut h, "c", &c, how, account);
        assert_eq!(
            responses(&events),
            vec![("c".into(), "c-in".into(), lease_ended())]
        );
        assert_eq!(
            inspect(&h, "b"),
            (vec![], vec!["a".into()], Some(3), None),
            "{how:?}, account removed: {account}"
        );
        assert_eq!(
            h.send_as("b", "b-in", enter("b", 3, &b, None)).0,
            Reply::Queued,
            "the round needs one more arrival"
        );
        let d = h.lease("d", 5_000);
        let generation = (h.index + 1) << 16;
        let (reply, events) = h.send("d", enter("b", 3, &d, None));
        assert_eq!(reply, passed(generation));
        assert_eq!(
            responses(&events),
            vec![
                ("a".into(), "r5".into(), passed(generation)),
                ("b".into(), "b-in".into(), passed(generation))
            ]
        );
    }
}

#[test]
fn a_member_whose_lease_ends_counts_as_left() {
    for (how, account) in ENDS {
        let mut h = with_account();
        let ([a, b, c], generation) = full_round(&mut h, ["a", "b", "c"]);
        h.send_as("a", "a-out", leave("b", &a, None));
        h.send_as("b", "b-out", leave("b", &b, None));
        let events = end_lease(&mut h, "c", &c, how, account);
        assert_eq!(
            responses(&events),
            vec![
                ("a".into(), "a-out".into(), passed(generation)),
                ("b".into(), "b-out".into(), passed(generation))
            ],
            "{how:?}, account removed: {account}: the others are not stuck"
        );
        assert_eq!(inspect(&h, "b"), nobody());
    }
}

#[test]
fn the_leavers_are_answered_in_the_entry_that_ends_the_last_members_lease() {
    let mut h = Harness::new();
    let ([a, b, c], generation) = full_round(&mut h, ["a", "b", "c"]);
    h.now_ms += 10;
    h.send_as("a", "a-out", leave("b", &a, None));
    h.send_as("b", "b-out", leave("b", &b, None));
    let (_, events) = h.send("c", Op::LeaseRevoke { lease: c.clone() });
    assert_eq!(
        events,
        vec![
            Event::LeaseEnded {
                agent: Arc::from("c"),
                lease: LeaseId(3),
                reason: LeaseEnd::Revoked,
            },
            Event::Released {
                key: key("b"),
                agent: Arc::from("c"),
                lease: LeaseId(3),
                token: generation,
                held_ms: 10,
                reason: ReleaseReason::LeaseEnded,
            },
            released("b", "a", 1, generation, 10),
            respond("b", "a", "a-out", passed(generation)),
            released("b", "b", 2, generation, 10),
            respond("b", "b", "b-out", passed(generation)),
        ]
    );
    assert_eq!(inspect(&h, "b"), nobody());
}

#[test]
fn a_leaver_whose_lease_ends_is_answered_lease_not_found_and_the_round_goes_on() {
    let mut h = Harness::new();
    let ([a, b, c], generation) = full_round(&mut h, ["a", "b", "c"]);
    h.send_as("a", "a-out", leave("b", &a, None));
    let (_, events) = h.send("a", Op::LeaseRevoke { lease: a });
    assert_eq!(
        responses(&events),
        vec![("a".into(), "a-out".into(), lease_ended())]
    );
    let rest = vec![("b".into(), generation), ("c".into(), generation)];
    assert_eq!(inspect(&h, "b"), (rest, vec![], None, None));
    assert_eq!(h.reply("b", leave("b", &b, None)), Reply::Queued);
    assert_eq!(h.reply("c", leave("b", &c, None)), passed(generation));
}

#[test]
fn fence_check_of_a_generation_is_valid_while_its_round_is_under_way() {
    let mut h = Harness::new();
    let ([a, b], generation) = full_round(&mut h, ["a", "b"]);
    let fence = |h: &Harness, token: u64| {
        let op = Op::FenceCheck {
            name: "b".into(),
            kind: ResourceKind::Barrier,
            token,
        };
        h.sm.query("inspector", &op)
    };
    let valid = Reply::Fence {
        current: generation,
        valid: true,
    };
    assert_eq!(fence(&h, generation), valid);
    h.reply("a", leave("b", &a, None));
    assert_eq!(fence(&h, generation), valid, "b has not left");
    h.reply("b", leave("b", &b, None));
    let over = Reply::Fence {
        current: 0,
        valid: false,
    };
    assert_eq!(fence(&h, generation), over);
}

#[test]
fn admin_resources_lists_a_barrier_with_its_members_and_waits() {
    let mut h = Harness::new();
    let ([a, _], _) = full_round(&mut h, ["a", "b"]);
    h.reply("a", leave("b", &a, None));
    let c = h.lease("c", 5_000);
    h.reply("c", enter("b", 2, &c, None));
    h.reply("c", lock_acquire("b", &c, None));
    let op = Op::AdminResources {
        kind: None,
        prefix: None,
        after: None,
        limit: None,
    };
    let info = |kind, holders, waiters| ResourceInfo {
        kind,
        name: "b".into(),
        holders,
        waiters,
    };
    assert_eq!(
        h.sm.query("admin", &op),
        Reply::Resources {
            resources: vec![
                info(ResourceKind::Lock, 1, 0),
                info(ResourceKind::Barrier, 1, 2)
            ],
            next_after: None,
        },
        "b has not left; a's leave and c's arrival wait"
    );
}

#[test]
fn the_bounds_apply_to_barriers() {
    let limits = Limits {
        resources_max: 1,
        holds_per_agent_max: 2,
        waits_per_lease_max: 1,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.reply("a", enter("one", 2, &a, None));
    let reply = h.reply("b", enter("two", 2, &b, None));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::ResourceExhausted,
            "1 resources are in use, the limit"
        )
    );
    let reply = h.reply("a", lock_acquire("one", &a, None));
    assert_eq!(refusal(&reply).0, ErrorCode::ResourceExhausted);
    // A second wait of lease a is one past waits_per_lease_max.
    let mut h = Harness::with_limits(Limits {
        waits_per_lease_max: 1,
        ..Limits::DEFAULTS
    });
    let [a] = h.leases(["a"], 5_000);
    h.reply("a", enter("one", 2, &a, None));
    let reply = h.reply("a", enter("two", 2, &a, None));
    assert_eq!(refusal(&reply).0, ErrorCode::ResourceExhausted);
}

#[test]
fn barriers_survive_a_snapshot_and_a_machine_without_any_writes_none() {
    let mut h = Harness::new();
    let ([a, _], _) = full_round(&mut h, ["a", "b"]);
    h.reply("a", leave("b", &a, Some(60_000)));
    let c = h.lease("c", 5_000);
    h.reply("c", enter("b", 2, &c, Some(60_000)));
    let bytes = h.sm.snapshot();
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert!(restored.snapshot() == bytes);
    assert_eq!(
        restored.wait_deadline_next_ms(),
        h.sm.wait_deadline_next_ms()
    );
    let text = String::from_utf8(bytes).expect("UTF-8");
    assert!(
        text.contains(r#""barriers":{"b":{"filling":{"count":2,"arrivals":[{"#),
        "{text}"
    );
    assert!(
        !String::from_utf8(StateMachine::default().snapshot())
            .expect("UTF-8")
            .contains("barriers")
    );
}

// ------------------------------------------------------------------------------------------
// Curator's double barrier (ZooKeeper recipes) and its known bugs, impossible here.
// ------------------------------------------------------------------------------------------

/// Curator's `leave` ignored its timeout and answered success to one member while others had
/// not left (the others, timed out, answered failure): here a leave is answered success only
/// in the entry where the whole round has left, every leaver at once, and a leave that times
/// out is answered `timeout` at its deadline and has not left.
#[test]
fn a_leave_succeeds_only_when_every_member_has_left_and_a_timed_out_one_has_not() {
    let mut h = Harness::new();
    let ([a, b, c], generation) = full_round(&mut h, ["a", "b", "c"]);
    h.send_as("b", "b-out", leave("b", &b, Some(5_000)));
    h.send_as("c", "c-out", leave("b", &c, Some(5_000)));
    h.now_ms += 5_000;
    let (_, events) = expire_waits(&mut h);
    assert_eq!(
        responses(&events),
        vec![
            ("b".into(), "b-out".into(), timeout()),
            ("c".into(), "c-out".into(), timeout())
        ],
        "both at their deadline, neither with success"
    );
    // The sleeper leaves last: b and c timed out and have not left, so it is not let out.
    let (reply, events) = h.send_as("a", "a-out", leave("b", &a, Some(5_000)));
    assert_eq!((reply, responses(&events)), (Reply::Queued, vec![]));
    h.now_ms += 5_000;
    let (_, events) = expire_waits(&mut h);
    assert_eq!(
        responses(&events),
        vec![("a".into(), "a-out".into(), timeout())]
    );
    // When all do leave, all are answered together.
    h.reply("b", leave("b", &b, None));
    h.reply("c", leave("b", &c, None));
    let (reply, events) = h.send("a", leave("b", &a, None));
    assert_eq!(reply, passed(generation));
    assert_eq!(responses(&events).len(), 2);
}

/// Curator counted more members than its quantity (children over `memberQty`) and its leave
/// then looped forever past its timeout: here the member over the count starts the next round
/// instead of joining a passed one, a round's leave counts exactly its own members, and a leave
/// with `wait_ms` ends at its deadline.
#[test]
fn a_member_over_the_count_starts_the_next_round_and_a_leave_ends_at_its_deadline() {
    let mut h = Harness::new();
    let ([a, b], first) = full_round(&mut h, ["a", "b"]);
    let c = h.lease("c", 5_000);
    assert_eq!(h.reply("c", enter("b", 2, &c, None)), Reply::Queued);
    assert_eq!(
        inspect(&h, "b").1,
        vec!["c".to_string()],
        "c waits for round two"
    );
    h.send_as("a", "a-out", leave("b", &a, Some(1_000)));
    h.now_ms += 1_000;
    let (_, events) = expire_waits(&mut h);
    assert_eq!(
        responses(&events),
        vec![("a".into(), "a-out".into(), timeout())]
    );
    h.reply("a", leave("b", &a, None));
    let (reply, _) = h.send("b", leave("b", &b, None));
    assert_eq!(
        reply,
        passed(first),
        "c is not in round one: two members left it"
    );
    assert_eq!(inspect(&h, "b"), (vec![], vec!["c".into()], Some(2), None));
}

/// Curator's timed-out `enter` left its member counted, so a late arrival found the count
/// reached and passed alone while the others had given up: here an arrival that times out is
/// out of the round, and a late one waits for a full round of live members.
#[test]
fn arrivals_that_timed_out_do_not_let_a_late_one_through() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.send_as("b", "b-in", enter("b", 3, &b, Some(5_000)));
    h.send_as("c", "c-in", enter("b", 3, &c, Some(5_000)));
    h.now_ms += 5_000;
    let (_, events) = expire_waits(&mut h);
    assert_eq!(
        responses(&events),
        vec![
            ("b".into(), "b-in".into(), timeout()),
            ("c".into(), "c-in".into(), timeout())
        ]
    );
    h.now_ms += 15_000;
    assert_eq!(
        h.reply("a", enter("b", 3, &a, Some(5_000))),
        Reply::Queued,
        "the late arrival is alone in its round"
    );
    assert_eq!(inspect(&h, "b"), (vec![], vec!["a".into()], Some(3), None));
}

/// Curator's barrier could not be reused while its last round was leaving: an `enter` that saw
/// the previous round's ready node passed at once, alone. Here it waits for its own round.
#[test]
fn an_arrival_while_the_last_round_leaves_waits_for_its_own_round() {
    let mut h = Harness::new();
    let ([a, _b], _) = full_round(&mut h, ["a", "b"]);
    h.reply("a", leave("b", &a, None));
    let c = h.lease("c", 5_000);
    assert_eq!(h.reply("c", enter("b", 2, &c, None)), Reply::Queued);
}
