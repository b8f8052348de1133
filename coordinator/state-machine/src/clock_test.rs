//! The replicated clock (`clock.rs`): a leader clock that jumps ahead by more than a TTL and
//! back, or goes back, neither freezes expiry nor ends anything early. Each test says what the
//! machine did before the clock stepped (the largest stamp was the time), so each fails there.

use std::sync::Arc;

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Command, Event, LeaseEnd, LeaseId, Limits, Reply, ResourceKey};

/// Ten minutes: far more than the TTLs below, less than a step (`lease_ttl_ms_max`, 1 h).
const JUMP_MS: u64 = 600_000;

fn expired(lease: &str) -> Reply {
    Reply::Expired {
        leases: vec![LeaseId::parse(lease).expect("a wire lease id")],
    }
}

fn nothing_expired() -> Reply {
    Reply::Expired { leases: vec![] }
}

fn lease_ended(agent: &str, lease: &str) -> Event {
    Event::LeaseEnded {
        agent: Arc::from(agent),
        lease: LeaseId::parse(lease).expect("a wire lease id"),
        reason: LeaseEnd::Expired,
    }
}

#[test]
fn the_first_entry_sets_the_clock_and_honest_stamps_are_the_clock() {
    let mut h = Harness::new();
    h.lease("a", 1_000);
    assert_eq!(h.sm.now_ms(), 1_000_000);
    h.now_ms += 250;
    h.lease("b", 1_000);
    assert_eq!(h.sm.now_ms(), 1_000_250);
    assert_eq!(h.sm.stamp_last_ms(), 1_000_250);
    // No stamp differs from the clock: the snapshot has nothing new (format 1's bytes).
    let snapshot = String::from_utf8(h.sm.snapshot()).expect("JSON");
    assert!(!snapshot.contains("stamp_last_ms"), "{snapshot}");
}

#[test]
fn a_lease_granted_after_a_forward_jump_expires_after_its_ttl_of_replicated_time() {
    let mut h = Harness::new();
    let real_ms = h.now_ms;
    // The leader's clock runs 10 minutes ahead: the machine's clock follows it (one step).
    h.now_ms = real_ms + JUMP_MS;
    let a = h.lease("a", 1_000);
    assert_eq!(h.sm.now_ms(), real_ms + JUMP_MS);
    // The clock comes back (NTP, or a member with a correct clock leads): that entry moves
    // the machine's clock by nothing, and it remembers the stamp it measures the next from.
    h.now_ms = real_ms + 10;
    let (reply, events) = h.expire(&[&a]);
    assert_eq!((reply, events), (nothing_expired(), vec![]));
    assert_eq!(h.sm.now_ms(), real_ms + JUMP_MS);
    assert_eq!(h.sm.stamp_last_ms(), real_ms + 10);
    // 999 ms of stamps later the lease is still young; at 1,000 ms its TTL has run on the
    // machine's clock and it expires. Before the clock stepped, the machine's clock stood at
    // the jumped time until the stamps caught up: no expiry for 10 minutes.
    h.now_ms = real_ms + 10 + 999;
    assert_eq!(h.expire(&[&a]), (nothing_expired(), vec![]));
    h.now_ms = real_ms + 10 + 1_000;
    assert_eq!(h.expire(&[&a]), (expired(&a), vec![lease_ended("a", &a)]));
    assert_eq!(h.sm.now_ms(), real_ms + JUMP_MS + 1_000);
    // A lease granted now, after the jump and back, also lives exactly its TTL of stamps.
    let b = h.lease("b", 2_000);
    h.now_ms += 1_999;
    assert_eq!(h.expire(&[&b]), (nothing_expired(), vec![]));
    h.now_ms += 1;
    assert_eq!(h.expire(&[&b]), (expired(&b), vec![lease_ended("b", &b)]));
}

#[test]
fn a_jump_further_than_a_step_moves_the_clock_one_step() {
    let mut h = Harness::with_limits(Limits {
        lease_ttl_ms_max: 60_000,
        ..Limits::DEFAULTS
    });
    let a = h.lease("a", 30_000);
    let start_ms = h.sm.now_ms();
    assert_eq!(h.sm.clock_step_ms_max(), 60_000);
    // A year ahead: the clock moves one step (60 s), not a year.
    h.now_ms += 365 * 86_400_000;
    let (reply, events) = h.expire(&[&a]);
    assert_eq!(h.sm.now_ms(), start_ms + 60_000);
    // 60 s of machine time is more than a's 30 s TTL: a leader that proposes it (its own
    // monotonic clock says the TTL ran) is not refused.
    assert_eq!((reply, events), (expired(&a), vec![lease_ended("a", &a)]));
    // The clock runs on with the stamps from the new, jumped base.
    h.now_ms += 5;
    h.lease("b", 30_000);
    assert_eq!(h.sm.now_ms(), start_ms + 60_005);
    assert_eq!(h.sm.clock_at(h.now_ms + 70_000), start_ms + 120_005);
}

#[test]
fn a_clock_that_goes_back_neither_extends_a_lease_nor_ends_it_early() {
    let mut h = Harness::new();
    let start_ms = h.now_ms;
    let a = h.lease("a", 1_000);
    h.now_ms = start_ms + 400;
    assert_eq!(h.expire(&[&a]), (nothing_expired(), vec![]));
    // The leader's clock goes back 10 minutes: the machine's clock stands still for that entry
    // (never backwards, so the lease is not younger)...
    h.now_ms = start_ms + 400 - JUMP_MS;
    assert_eq!(h.expire(&[&a]), (nothing_expired(), vec![]));
    assert_eq!(h.sm.now_ms(), start_ms + 400);
    // ...and then moves with the stamps again: the remaining 600 ms of TTL run in 600 ms of
    // stamps, not early (599 ms) and not 10 minutes late, as when the largest stamp was the time.
    h.now_ms += 599;
    assert_eq!(h.expire(&[&a]), (nothing_expired(), vec![]));
    h.now_ms += 1;
    assert_eq!(h.expire(&[&a]), (expired(&a), vec![lease_ended("a", &a)]));
}

#[test]
fn a_wait_deadline_runs_on_the_stepped_clock_after_the_clock_goes_back() {
    let mut h = Harness::new();
    let start_ms = h.now_ms;
    let [a, b] = h.leases(["a", "b"], 60_000);
    h.reply("a", lock_acquire("l", &a, None));
    assert_eq!(
        h.send_as("b", "b-wait", lock_acquire("l", &b, Some(500))).0,
        Reply::Queued
    );
    assert_eq!(h.sm.wait_deadline_next_ms(), Some(start_ms + 500));
    let term = h.term;
    // Back by a minute, no entry since: nothing is due, but the keeper proposes anyway, so
    // the next steps are measured from the new stamp (else the clock would stand still until
    // the leader's clock caught up with the old stamp, a minute later).
    h.now_ms = start_ms - 60_000;
    assert!(h.sm.wait_expiry_due(h.now_ms));
    assert_eq!(
        h.apply(Command::ExpireWaits { term }),
        (Reply::WaitsExpired { count: 0 }, vec![])
    );
    assert!(!h.sm.wait_expiry_due(h.now_ms));
    h.now_ms += 499;
    assert!(!h.sm.wait_expiry_due(h.now_ms));
    assert_eq!(
        h.apply(Command::ExpireWaits { term }),
        (Reply::WaitsExpired { count: 0 }, vec![])
    );
    h.now_ms += 1;
    assert!(h.sm.wait_expiry_due(h.now_ms));
    let (reply, events) = h.apply(Command::ExpireWaits { term });
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    assert_eq!(
        events,
        vec![Event::Respond {
            key: ResourceKey::new(ResourceKind::Lock, &Arc::from("l")),
            agent: Arc::from("b"),
            request_id: "b-wait".into(),
            reply: Reply::refused(
                ErrorCode::Timeout,
                "wait_ms elapsed before the resource was granted"
            ),
        }]
    );
}

#[test]
fn a_wait_longer_than_a_step_is_carried_to_its_deadline_one_step_per_entry() {
    let mut h = Harness::with_limits(Limits {
        lease_ttl_ms_max: 60_000,
        ..Limits::DEFAULTS
    });
    let start_ms = h.now_ms;
    let [a, b] = h.leases(["a", "b"], 60_000);
    h.reply("a", lock_acquire("l", &a, None));
    h.send_as("b", "b-wait", lock_acquire("l", &b, Some(100_000)));
    let term = h.term;
    // 30 s without an entry: not due, and no full step to take.
    assert!(!h.sm.wait_expiry_due(start_ms + 30_000));
    // 2 minutes without an entry: the deadline is not reached by one step, but a full step
    // is there to take, so the keeper proposes and the clock moves 60 s.
    h.now_ms = start_ms + 120_000;
    assert!(h.sm.wait_expiry_due(h.now_ms));
    h.apply(Command::ExpireWaits { term });
    assert_eq!(h.sm.now_ms(), start_ms + 60_000);
    // From the new stamp, 40 s more reach the deadline.
    h.now_ms += 39_999;
    assert!(!h.sm.wait_expiry_due(h.now_ms));
    h.now_ms += 1;
    assert!(h.sm.wait_expiry_due(h.now_ms));
    let (reply, _) = h.apply(Command::ExpireWaits { term });
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
}
