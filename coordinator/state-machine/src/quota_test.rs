//! Per-agent quotas: one agent cannot take more than its share; the refusal names the bound
//! and its value, changes nothing, and leaves the other agents' requests alone.

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Limits, Reply, StateMachine};

fn tight() -> Limits {
    Limits {
        leases_per_agent_max: 2,
        waits_per_lease_max: 1,
        holds_per_agent_max: 3,
        ..Limits::DEFAULTS
    }
}

fn exhausted(message: &str) -> Reply {
    Reply::refused(ErrorCode::ResourceExhausted, message)
}

#[test]
fn an_agent_gets_at_most_leases_per_agent_max_leases() {
    let mut h = Harness::with_limits(tight());
    let first = h.lease("flood", 5_000);
    h.lease("flood", 5_000);
    let (reply, events) = h.send("flood", lease_grant(5_000));
    assert_eq!(
        reply,
        exhausted("agent flood has 2 leases alive: leases_per_agent_max is 2")
    );
    assert!(events.is_empty());
    assert_eq!(h.sm.lease_count(), 2);
    // Another agent is not affected.
    h.lease("other", 5_000);
    // A lease that ends gives its place back.
    h.reply("flood", Op::LeaseRevoke { lease: first });
    h.lease("flood", 5_000);
}

#[test]
fn an_agent_holds_and_waits_for_at_most_holds_per_agent_max_resources() {
    let mut h = Harness::with_limits(tight());
    let (a1, a2) = (h.lease("a", 5_000), h.lease("a", 5_000));
    let b = h.lease("b", 5_000);
    h.reply("b", lock_acquire("busy", &b, None));
    h.reply("a", lock_acquire("l1", &a1, None));
    h.reply("a", sem_acquire("s", 4, &a2, 1, None));
    // The third: a wait (it counts, it becomes a hold without asking again).
    assert_eq!(h.reply("a", lock_acquire("busy", &a1, None)), Reply::Queued);
    let refusal = exhausted("agent a holds 2 resources and waits for 1: holds_per_agent_max is 3");
    // Over the bound on every kind, free or not, with either lease; nothing changes.
    for op in [
        lock_acquire("l2", &a2, None),
        lock_acquire("busy", &a2, Some(0)),
        sem_acquire("s2", 4, &a1, 1, None),
        sem_acquire("s", 4, &a1, 1, None),
        pad("p", &a1, 0.0, 3.0, None),
    ] {
        let (reply, events) = h.send("a", op);
        assert_eq!(reply, refusal);
        assert!(events.is_empty());
    }
    assert_eq!(h.occupants(ResourceKind::Sem, "s2").0, Vec::<String>::new());
    // What the agent already has is answered as before (a re-acquire takes nothing new).
    assert!(matches!(
        h.reply("a", lock_acquire("l1", &a1, None)),
        Reply::Granted { .. }
    ));
    assert!(matches!(
        h.reply("a", sem_acquire("s", 4, &a2, 1, None)),
        Reply::Granted { .. }
    ));
    // Another agent is not affected.
    assert!(matches!(
        h.reply("b", lock_acquire("l2", &b, None)),
        Reply::Granted { .. }
    ));
    // A release gives the place back.
    h.reply("a", lock_release("l1", &a1));
    assert!(matches!(
        h.reply("a", pad("p", &a1, 0.0, 3.0, None)),
        Reply::Granted { .. }
    ));
}

#[test]
fn a_lease_waits_for_at_most_waits_per_lease_max_resources() {
    let mut h = Harness::with_limits(tight());
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    let b2 = h.lease("b", 5_000);
    h.reply("b", lock_acquire("x", &b, None));
    h.reply("b", sem_acquire("y", 1, &b, 1, None));
    h.reply("b", pad("z", &b2, 0.0, 3.0, None));
    assert_eq!(h.reply("a", lock_acquire("x", &a, None)), Reply::Queued);
    let refusal = |lease: &str| {
        exhausted(&format!(
            "lease {lease} waits for 1 resources: waits_per_lease_max is 1"
        ))
    };
    for op in [
        sem_acquire("y", 1, &a, 1, None),
        pad("z", &a, 0.0, 3.0, None),
    ] {
        let (reply, events) = h.send("a", op);
        assert_eq!(reply, refusal(&a));
        assert!(events.is_empty());
    }
    // A try (`wait_ms: 0`) never waits, so it is answered `would_block`, not the bound.
    assert_eq!(
        h.reply("a", sem_acquire("y", 1, &a, 1, Some(0))),
        Reply::refused(
            ErrorCode::WouldBlock,
            "semaphore \"y\" has 0 of 1 permits free and 0 waiters"
        )
    );
    assert_eq!(h.occupants(ResourceKind::Sem, "y").1, Vec::<String>::new());
}

#[test]
fn the_counts_survive_a_snapshot_restore() {
    let mut h = Harness::with_limits(tight());
    let a = h.lease("a", 5_000);
    h.lease("a", 5_000);
    h.reply("a", lock_acquire("l", &a, None));
    h.sm = StateMachine::restore(&h.sm.snapshot()).expect("a fresh snapshot restores");
    assert_eq!(
        h.reply("a", lease_grant(5_000)),
        exhausted("agent a has 2 leases alive: leases_per_agent_max is 2")
    );
    // The expiry of a lease with a hold gives back both the lease and the hold.
    h.now_ms += 5_000;
    h.expire(&[&a]);
    h.lease("a", 5_000);
}

#[test]
fn new_bounds_at_their_defaults_stay_out_of_the_snapshot() {
    let text = String::from_utf8(Harness::new().sm.snapshot()).expect("JSON");
    assert!(!text.contains("per_agent_max\":1000"), "{text}");
    assert!(!text.contains("waits_per_lease_max"), "{text}");
    let mut h = Harness::with_limits(tight());
    h.lease("a", 5_000);
    let text = String::from_utf8(h.sm.snapshot()).expect("JSON");
    assert!(text.contains("\"leases_per_agent_max\":2"), "{text}");
    let restored = StateMachine::restore(text.as_bytes()).expect("restores");
    assert_eq!(restored.limits(), &tight());
}
