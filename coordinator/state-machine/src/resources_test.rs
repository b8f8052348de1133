//! `admin.resources`: order, counts, filters and paging (resources.rs).

use hivekeeper_protocol::{ErrorCode, ResourceInfo, ResourceKind};

use super::Reply;
use super::test_support::{Harness, lock_acquire, pad, sem_acquire};
use hivekeeper_protocol::Op;

/// The page `query` answers: `(kind/name holders waiters)` rows and the cursor.
fn page(
    h: &Harness,
    kind: Option<ResourceKind>,
    prefix: Option<&str>,
    after: Option<&str>,
    limit: Option<u32>,
) -> (Vec<String>, Option<String>) {
    let op = Op::AdminResources {
        kind,
        prefix: prefix.map(str::to_string),
        after: after.map(str::to_string),
        limit,
    };
    match h.sm.query("operator", &op) {
        Reply::Resources {
            resources,
            next_after,
        } => (
            resources
                .iter()
                .map(
                    |ResourceInfo {
                         kind,
                         name,
                         holders,
                         waiters,
                     }| {
                        format!("{}/{name} {holders} {waiters}", kind.as_str())
                    },
                )
                .collect(),
            next_after,
        ),
        other => panic!("admin.resources failed: {other:?}"),
    }
}

/// Two locks (one with two waiters), a semaphore with two holders, a held pad and a pad
/// name only waited for (blocked by its neighbour's cylinder).
fn swarm() -> Harness {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 60_000);
    h.reply("a", lock_acquire("door/2", &a, None));
    h.reply("b", lock_acquire("door/2", &b, None));
    h.reply("c", lock_acquire("door/2", &c, None));
    h.reply("b", lock_acquire("door/1", &b, None));
    h.reply("a", sem_acquire("chargers", 4, &a, 1, None));
    h.reply("c", sem_acquire("chargers", 4, &c, 2, None));
    h.reply("a", pad("pad-1", &a, 0.0, 3.0, None));
    let reply = h.reply("b", pad("pad-2", &b, 2.0, 3.0, None));
    assert_eq!(
        reply,
        Reply::Queued,
        "2 m from pad-1 with 3 m radii: it waits"
    );
    h
}

#[test]
fn every_resource_in_kind_then_name_order_with_its_counts() {
    let h = swarm();
    assert_eq!(
        page(&h, None, None, None, None),
        (
            vec![
                "lock/door/1 1 0".to_string(),
                "lock/door/2 1 2".into(),
                "sem/chargers 2 0".into(),
                "waypoint/pad-1 1 0".into(),
                "waypoint/pad-2 0 1".into(),
            ],
            None
        )
    );
}

#[test]
fn kind_and_prefix_filter() {
    let h = swarm();
    assert_eq!(
        page(&h, Some(ResourceKind::Waypoint), None, None, None).0,
        vec!["waypoint/pad-1 1 0", "waypoint/pad-2 0 1"]
    );
    assert_eq!(
        page(&h, None, Some("door/"), None, None).0,
        vec!["lock/door/1 1 0", "lock/door/2 1 2"]
    );
    assert_eq!(
        page(&h, Some(ResourceKind::Sem), Some("door"), None, None),
        (vec![], None)
    );
}

#[test]
fn pages_follow_the_cursor_across_kinds_to_the_end() {
    let h = swarm();
    let (first, next) = page(&h, None, None, None, Some(2));
    assert_eq!(first, vec!["lock/door/1 1 0", "lock/door/2 1 2"]);
    assert_eq!(next.as_deref(), Some("lock/door/2"));
    let (second, next) = page(&h, None, None, next.as_deref(), Some(2));
    assert_eq!(second, vec!["sem/chargers 2 0", "waypoint/pad-1 1 0"]);
    assert_eq!(next.as_deref(), Some("waypoint/pad-1"));
    let (last, next) = page(&h, None, None, next.as_deref(), Some(2));
    assert_eq!((last, next), (vec!["waypoint/pad-2 0 1".to_string()], None));
    // A page that ends exactly at the last resource says no more follow.
    assert_eq!(page(&h, None, None, None, Some(5)).1, None);
}

#[test]
fn a_bad_cursor_or_limit_is_bad_request() {
    let h = swarm();
    for (after, limit) in [
        (Some("door/1"), None),
        (Some("lock/"), None),
        (None, Some(0)),
        (None, Some(101)),
    ] {
        let op = Op::AdminResources {
            kind: None,
            prefix: None,
            after: after.map(str::to_string),
            limit,
        };
        assert!(
            matches!(
                h.sm.query("operator", &op),
                Reply::Refused {
                    code: ErrorCode::BadRequest,
                    ..
                }
            ),
            "{after:?} {limit:?}"
        );
    }
}
