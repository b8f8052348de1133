//! Retries (dedup) and snapshots.

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{AgentRequest, Command, IDLE_CLOCK_STEP_MS_MAX, Limits, LogMeta, Reply, StateMachine};

#[test]
fn retry_returns_the_same_reply() {
    let mut h = Harness::new();
    let (first, _) = h.send_as("a", "grant-1", lease_grant(5_000));
    let (again, events) = h.send_as("a", "grant-1", lease_grant(5_000));
    assert_eq!(first, again);
    assert!(events.is_empty(), "no second lease");
    assert_eq!(h.sm.leases().count(), 1);
    let Reply::Lease { lease, .. } = first else {
        panic!("{first:?}")
    };
    let lease = lease.to_string();
    let (granted, _) = h.send_as("a", "acq-1", lock_acquire("l", &lease, None));
    h.send_as("a", "rel-1", lock_release("l", &lease));
    // A late retry of the acquire gets the original grant, and does not take the lock again.
    let (replayed, events) = h.send_as("a", "acq-1", lock_acquire("l", &lease, None));
    assert_eq!(replayed, granted);
    assert!(events.is_empty());
    assert_eq!(h.occupants(ResourceKind::Lock, "l").0, Vec::<String>::new());
    // Refusals are remembered too.
    let (refused, _) = h.send_as("a", "rel-2", lock_release("l", &lease));
    assert!(matches!(
        refused,
        Reply::Refused {
            code: ErrorCode::NotHolder,
            ..
        }
    ));
    h.send_as("a", "acq-2", lock_acquire("l", &lease, None));
    assert_eq!(
        h.send_as("a", "rel-2", lock_release("l", &lease)).0,
        refused
    );
}

#[test]
fn a_retried_wait_keeps_its_single_queue_slot() {
    let mut h = Harness::new();
    let (a, b, c) = (
        h.lease("a", 5_000),
        h.lease("b", 5_000),
        h.lease("c", 5_000),
    );
    h.reply("a", lock_acquire("l", &a, None));
    assert_eq!(
        h.send_as("b", "b-1", lock_acquire("l", &b, None)).0,
        Reply::Queued
    );
    h.reply("c", lock_acquire("l", &c, None));
    // The reply was lost; b retries (maybe through another node): same slot, still second.
    assert_eq!(
        h.send_as("b", "b-1", lock_acquire("l", &b, None)).0,
        Reply::Queued
    );
    assert_eq!(h.occupants(ResourceKind::Lock, "l").1, vec!["b", "c"]);
    let (_, events) = h.send("a", lock_release("l", &a));
    let (_, _, grant) = responses(&events).remove(0);
    assert_eq!(h.send_as("b", "b-1", lock_acquire("l", &b, None)).0, grant);
}

#[test]
fn dedup_memory_is_bounded_per_agent_and_in_agents() {
    let limits = Limits {
        dedup_per_agent_max: 2,
        dedup_agents_max: 2,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let (one, _) = h.send_as("a", "1", lease_grant(5_000));
    h.send_as("a", "2", lease_grant(5_000));
    assert_eq!(
        h.send_as("a", "1", lease_grant(5_000)).0,
        one,
        "still remembered"
    );
    h.send_as("a", "3", lease_grant(5_000));
    let (fresh, _) = h.send_as("a", "1", lease_grant(5_000));
    assert_ne!(fresh, one, "the oldest of three outcomes was forgotten");
    // Three agents, room for two: the least recently active (b) is forgotten.
    let (b_reply, _) = h.send_as("b", "x", lease_grant(5_000));
    h.send_as("a", "4", lease_grant(5_000));
    h.send_as("c", "x", lease_grant(5_000));
    assert_ne!(h.send_as("b", "x", lease_grant(5_000)).0, b_reply);
}

#[test]
fn one_agents_new_ids_never_forget_another_agents_outcomes() {
    let limits = Limits {
        dedup_per_agent_max: 4,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let (victim, _) = h.send_as("victim", "v-1", lease_grant(5_000));
    // A flood under one agent id: a hundred refused requests, each remembered.
    for i in 0..100 {
        h.send_as(
            "flood",
            &format!("f-{i}"),
            lock_release("l", "0000000000000001"),
        );
    }
    assert_eq!(
        h.send_as("victim", "v-1", lease_grant(5_000)).0,
        victim,
        "the victim's outcome is still remembered"
    );
    assert_eq!(h.sm.lease_count(), 1, "the retry took no second lease");
}

#[test]
fn the_agent_bound_forgets_agents_without_a_lease_first() {
    let limits = Limits {
        dedup_agents_max: 3,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    // The victim's last request is the oldest of all.
    let (victim, _) = h.send_as("victim", "v-1", lease_grant(5_000));
    // A flood under fresh agent ids, each with a refused request and no lease.
    for i in 0..10 {
        h.send_as(
            &format!("flood-{i}"),
            "x",
            lock_release("l", "0000000000000001"),
        );
    }
    assert_eq!(
        h.send_as("victim", "v-1", lease_grant(5_000)).0,
        victim,
        "the agent with a live lease is kept, though least recently active"
    );
    // The flood's oldest agents were forgotten: a retry is applied afresh (here refused the
    // same way, but answered from the machine, so the agent bound still holds).
    assert_eq!(h.sm.lease_count(), 1);
    // Without a live lease the victim is only as old as its last request.
    let Reply::Lease { lease, .. } = victim else {
        panic!("{victim:?}")
    };
    h.send_as(
        "victim",
        "v-2",
        Op::LeaseRevoke {
            lease: lease.to_string(),
        },
    );
    for i in 10..13 {
        h.send_as(
            &format!("flood-{i}"),
            "x",
            lock_release("l", "0000000000000001"),
        );
    }
    let (again, _) = h.send_as("victim", "v-1", lease_grant(5_000));
    assert_ne!(
        again, victim,
        "forgotten once it had no lease and went quiet"
    );
}

#[test]
fn tokens_keep_increasing_across_snapshot_restore() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    let before = Harness::token(&h.reply("a", lock_acquire("l", &a, None)));
    h.reply("b", lock_acquire("l", &b, None));
    let bytes = h.sm.snapshot();
    h.sm = StateMachine::restore(&bytes).expect("a fresh snapshot restores");
    assert_eq!(
        h.sm.snapshot(),
        bytes,
        "restore then snapshot gives the same bytes"
    );
    let (_, events) = h.send("a", lock_release("l", &a));
    let after = Harness::token(&responses(&events)[0].2);
    assert!(after > before);
}

#[test]
fn restore_refuses_garbage_another_format_and_broken_state() {
    assert!(StateMachine::restore(b"not json").is_err());
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    h.reply("a", lock_acquire("l", &a, None));
    let text = String::from_utf8(h.sm.snapshot()).expect("JSON");
    let other_format = text.replacen("\"format\":1", "\"format\":2", 1);
    assert!(StateMachine::restore(other_format.as_bytes()).is_err());
    // A lock held by a lease the snapshot does not have: refused by the invariant check.
    let orphaned = text.replacen("\"holder\":{\"lease\":1,", "\"holder\":{\"lease\":7,", 1);
    assert_ne!(orphaned, text);
    let err = StateMachine::restore(orphaned.as_bytes()).expect_err("an orphaned hold");
    assert!(err.to_string().contains("dead lease"), "{err}");
}

/// Moves the clock by `ms` in entries of one second at most (an unrelated agent's release):
/// the idle clock then keeps the machine clock's pace.
fn pass(h: &mut Harness, ms: u64) {
    let mut left = ms;
    while left > 0 {
        let step = left.min(IDLE_CLOCK_STEP_MS_MAX);
        h.now_ms += step;
        h.send("other", lock_release("l", "0000000000000001"));
        left -= step;
    }
}

/// An agent with no live lease is forgotten by the retry memory between one and two
/// `dedup_idle_ms` after its last outcome, an agent with a live lease never, and a restored
/// replica sweeps exactly as the live one (the sweep's entry and the idle clock are in the
/// snapshot).
#[test]
fn idle_agents_without_a_lease_are_forgotten_after_dedup_idle_ms() {
    let limits = Limits {
        dedup_idle_ms: 10_000,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    // The first entry does not move the idle clock; the grant and the revoke move it by 0.
    let gone = h.lease("gone", 5_000);
    let (revoked, _) = h.send_as(
        "gone",
        "rev-1",
        Op::LeaseRevoke {
            lease: gone.clone(),
        },
    );
    assert_eq!(revoked, Reply::Done);
    let (holder, _) = h.send_as("holder", "g-1", lease_grant(3_600_000));
    let revoke_again = |h: &mut Harness| {
        h.send_as(
            "gone",
            "rev-1",
            Op::LeaseRevoke {
                lease: gone.clone(),
            },
        )
        .0
    };

    // The first boundary: the first sweep, which forgets nothing (no sweep before it).
    pass(&mut h, 10_000);
    assert_eq!(h.sm.core.dedup.idle_clock_ms(), 10_000);
    assert_eq!(
        revoke_again(&mut h),
        Reply::Done,
        "remembered one boundary later"
    );

    // Just before the second boundary: "gone" recorded its last outcome before the first
    // sweep's entry (the retry above was answered from memory and recorded nothing), and has
    // no lease. The entry that crosses the boundary forgets it, on a restored replica alike.
    pass(&mut h, 9_000);
    h.now_ms += 1_000;
    let mut replica = StateMachine::restore(&h.sm.snapshot()).expect("a snapshot restores");
    let sweep = Command::Request {
        agent: "other".to_string(),
        request: AgentRequest {
            id: "sweep".to_string(),
            op: lock_release("l", "0000000000000001"),
            secret_hash: None,
        },
    };
    h.apply(sweep.clone());
    let meta = LogMeta {
        index: h.index,
        term: h.term,
        now_ms: h.now_ms,
    };
    replica.apply(meta, sweep).expect("the next index");
    assert_eq!(
        replica.snapshot(),
        h.sm.snapshot(),
        "a restored replica sweeps alike"
    );
    let fresh = revoke_again(&mut h);
    assert!(
        matches!(
            fresh,
            Reply::Refused {
                code: ErrorCode::LeaseNotFound,
                ..
            }
        ),
        "answered afresh once forgotten: {fresh:?}"
    );
    // The holder's lease is live: its first outcome is still remembered.
    assert_eq!(h.send_as("holder", "g-1", lease_grant(3_600_000)).0, holder);
}

/// Leaders whose wall clocks disagree by a minute take turns, each leader change stepping the
/// machine's clock a minute ahead (`clock.rs`): within two seconds of stamps the machine's
/// clock passes two `dedup_idle_ms`. The retry memory's idle clock moves a second per such
/// step, so a key write retried by a lease-less agent seconds later still gets its first
/// answer and is not applied twice.
#[test]
fn clock_jumps_of_leader_changes_do_not_forget_a_recent_write() {
    let limits = Limits {
        dedup_idle_ms: 60_000,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let put = || kv_put("mission/state", "climb");
    let (first, _) = h.send_as("planner", "put-1", put());
    let honest_ms = h.now_ms;
    let clock_before_ms = h.sm.now_ms();
    for turn in 1..=4u64 {
        // A member a minute ahead leads, then an honest one.
        h.now_ms = honest_ms + turn * 250 + 60_000;
        h.send("other", lock_release("l", "0000000000000001"));
        h.now_ms = honest_ms + turn * 250 + 100;
        h.send("other", lock_release("l", "0000000000000001"));
    }
    assert!(
        h.sm.now_ms() - clock_before_ms >= 2 * 60_000,
        "the machine's clock passed two periods"
    );
    assert!(h.sm.core.dedup.idle_clock_ms() < 10_000);
    let (retried, _) = h.send_as("planner", "put-1", put());
    assert_eq!(retried, first, "the retry gets the first answer");
    let Reply::KvPut(done) = &first else {
        panic!("a put's answer: {first:?}");
    };
    let read = h.sm.query(
        "planner",
        &Op::KvGet {
            key: Some("mission/state".into()),
            prefix: None,
            after: None,
            limit: None,
            serializable: Some(true),
        },
    );
    let Reply::KvPage(page) = &read else {
        panic!("a get's answer: {read:?}");
    };
    assert_eq!(page.kvs.len(), 1, "{read:?}");
    assert_eq!(
        (page.kvs[0].mod_revision, page.kvs[0].version),
        (done.revision, 1),
        "written once, at the first answer's revision"
    );
}
