//! What one watch answer on `$election/{name}` shows an observer: one item per change, and no
//! `None` between the two halves of a handover.

use hivekeeper_protocol::KeyValue;
use hivekeeper_protocol::kv::EventKind;

use super::*;

/// The mirror key's event at `revision`: a put of the leadership `token` with `value`, or its
/// delete.
fn event(revision: u64, kind: EventKind, token: u64, value: &str) -> KvEvent {
    KvEvent {
        revision,
        kind,
        kv: KeyValue {
            key: "$election/gw".into(),
            value: value.into(),
            create_revision: token,
            mod_revision: revision,
            version: 1,
            lease: None,
        },
    }
}

/// One item per revision, as the watch groups them.
fn answer(events: Vec<KvEvent>) -> Vec<WatchItem> {
    events
        .into_iter()
        .map(|event| WatchItem::Changes {
            revision: event.revision,
            events: vec![event],
        })
        .collect()
}

fn leader(token: u64, value: &str, revision: u64) -> Option<Leader> {
    Some(Leader {
        token,
        value: value.into(),
        agent: None,
        revision,
    })
}

#[test]
fn a_handover_in_one_answer_is_the_new_leader_alone() {
    let items = answer(vec![
        event(20, EventKind::Delete, 10, "a"),
        event(21, EventKind::Put, 21, "b"),
    ]);
    assert_eq!(leader_changes(items), vec![leader(21, "b", 21)]);
}

#[test]
fn a_delete_that_ends_an_answer_is_nobody_leading() {
    let items = answer(vec![
        event(10, EventKind::Put, 10, "a"),
        event(12, EventKind::Delete, 10, "a"),
    ]);
    assert_eq!(leader_changes(items), vec![leader(10, "a", 10), None]);
}

#[test]
fn proclaims_and_leaders_come_in_order_and_bookmarks_show_nothing() {
    let mut items = answer(vec![
        event(10, EventKind::Put, 10, "a"),
        event(11, EventKind::Put, 10, "a2"),
        event(14, EventKind::Delete, 10, "a2"),
        event(15, EventKind::Put, 15, "b"),
    ]);
    items.push(WatchItem::Progress { revision: 16 });
    assert_eq!(
        leader_changes(items),
        vec![
            leader(10, "a", 10),
            leader(10, "a2", 11),
            leader(15, "b", 15)
        ]
    );
    assert_eq!(
        leader_changes(vec![WatchItem::Progress { revision: 3 }]),
        vec![]
    );
}

#[test]
fn a_leader_is_the_same_only_with_its_token_and_value() {
    let a = leader(10, "a", 10).expect("a leader");
    let later = Leader {
        agent: Some("drone-7".into()),
        revision: 30,
        ..a.clone()
    };
    assert!(a.same_as(&later), "a put that changes nothing is no change");
    assert!(!a.same_as(&leader(10, "b", 11).expect("a leader")));
    assert!(!a.same_as(&leader(11, "a", 11).expect("a leader")));
}
