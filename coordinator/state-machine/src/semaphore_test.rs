//! Semaphores: capacity fixed while in use, weighted permits, strict FIFO.

use hivekeeper_protocol::{ErrorCode, ResourceKind};

use super::test_support::*;
use super::{Limits, Reply};

fn holders(h: &Harness) -> Vec<String> {
    h.occupants(ResourceKind::Sem, "gw").0
}

#[test]
fn never_more_holders_than_the_limit() {
    let mut h = Harness::new();
    let leases: Vec<String> = (0..10).map(|i| h.lease(&format!("s{i}"), 5_000)).collect();
    let mut granted = 0;
    for (i, lease) in leases.iter().enumerate() {
        match h.reply(&format!("s{i}"), sem_acquire("gw", 3, lease, 1, None)) {
            Reply::Granted { .. } => granted += 1,
            Reply::Queued => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(granted, 3);
    assert_eq!(h.occupants(ResourceKind::Sem, "gw").1.len(), 7);
    for (i, lease) in leases.iter().enumerate().take(7) {
        let (_, events) = h.send(&format!("s{i}"), sem_release("gw", lease));
        assert_eq!(
            responses(&events).len(),
            1,
            "one permit freed, one waiter granted"
        );
        assert_eq!(holders(&h).len(), 3);
    }
}

#[test]
fn the_first_acquirer_fixes_the_limit_until_the_semaphore_is_idle() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    h.reply("a", sem_acquire("gw", 3, &a, 1, None));
    let reply = h.reply("b", sem_acquire("gw", 4, &b, 1, None));
    assert!(matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::LimitMismatch,
            ..
        }
    ));
    h.reply("a", sem_release("gw", &a));
    assert!(matches!(
        h.reply("b", sem_acquire("gw", 4, &b, 4, None)),
        Reply::Granted { .. }
    ));
    let inspect = Op::Inspect {
        kind: ResourceKind::Sem,
        name: "gw".into(),
    };
    assert!(matches!(
        h.sm.query("x", &inspect),
        Reply::Inspect { limit: Some(4), .. }
    ));
}

#[test]
fn head_of_line_request_is_not_starved_by_smaller_ones() {
    let mut h = Harness::new();
    let (a, big, small) = (
        h.lease("a", 5_000),
        h.lease("big", 5_000),
        h.lease("small", 5_000),
    );
    h.reply("a", sem_acquire("gw", 4, &a, 2, None));
    // 2 of 4 free: the 3-permit request waits at the head...
    assert_eq!(
        h.reply("big", sem_acquire("gw", 4, &big, 3, None)),
        Reply::Queued
    );
    // ...and a 1-permit request that would fit does not overtake it.
    assert_eq!(
        h.reply("small", sem_acquire("gw", 4, &small, 1, None)),
        Reply::Queued
    );
    // A try while waiting does not jump the queue either; asking for other permits while
    // waiting is refused.
    let try_small = h.reply("small", sem_acquire("gw", 4, &small, 1, Some(0)));
    assert!(
        matches!(
            try_small,
            Reply::Refused {
                code: ErrorCode::WouldBlock,
                ..
            }
        ),
        "{try_small:?}"
    );
    let other_permits = h.reply("small", sem_acquire("gw", 4, &small, 2, None));
    assert!(
        matches!(
            &other_permits,
            Reply::Refused { code: ErrorCode::BadRequest, message }
                if message.ends_with("with 1 permits")
        ),
        "{other_permits:?}"
    );
    let (_, events) = h.send("a", sem_release("gw", &a));
    let granted: Vec<String> = responses(&events)
        .into_iter()
        .map(|(agent, ..)| agent)
        .collect();
    assert_eq!(
        granted,
        vec!["big", "small"],
        "head first, then whoever fits behind it"
    );
    assert_eq!(holders(&h), vec!["big", "small"]);
}

#[test]
fn weighted_try_acquire_would_block_when_permits_are_short() {
    let mut h = Harness::new();
    let (a, b) = (h.lease("a", 5_000), h.lease("b", 5_000));
    h.reply("a", sem_acquire("gw", 3, &a, 2, None));
    let reply = h.reply("b", sem_acquire("gw", 3, &b, 2, Some(0)));
    assert!(matches!(
        reply,
        Reply::Refused {
            code: ErrorCode::WouldBlock,
            ..
        }
    ));
    assert!(matches!(
        h.reply("b", sem_acquire("gw", 3, &b, 1, Some(0))),
        Reply::Granted { .. }
    ));
}

#[test]
fn cancelling_the_blocking_head_lets_the_waiters_behind_it_in() {
    let mut h = Harness::new();
    let (a, big, small) = (
        h.lease("a", 5_000),
        h.lease("big", 5_000),
        h.lease("small", 5_000),
    );
    h.reply("a", sem_acquire("gw", 4, &a, 2, None));
    h.send_as("big", "big-wait", sem_acquire("gw", 4, &big, 3, Some(50)));
    h.send_as("small", "small-wait", sem_acquire("gw", 4, &small, 2, None));
    let (reply, events) = h.apply(super::Command::CancelWait {
        agent: "big".into(),
        request_id: "big-wait".into(),
    });
    assert_eq!(reply, Reply::Cancelled { cancelled: true });
    let answers = responses(&events);
    assert!(
        matches!(&answers[0], (a, _, Reply::Refused { code: ErrorCode::Timeout, .. }) if a == "big")
    );
    assert!(matches!(&answers[1], (a, _, Reply::Granted { .. }) if a == "small"));
}

#[test]
fn release_without_a_hold_is_not_holder() {
    let mut h = Harness::with_limits(Limits::DEFAULTS);
    let a = h.lease("a", 5_000);
    assert!(matches!(
        h.reply("a", sem_release("gw", &a)),
        Reply::Refused {
            code: ErrorCode::NotHolder,
            ..
        }
    ));
}
