//! Hand-written watch histories: one that keeps every guarantee, and for each guarantee at least
//! one that breaks it.

use hivekeeper_checker::watch::{
    Batch, Event, EventKind, Rule, Selector, Stream, Violation, ViolationKind, WatchInputError,
    Watcher, check,
};

fn put(revision: u64, key: &str, value: &str) -> Event {
    Event {
        revision,
        kind: EventKind::Put,
        key: key.into(),
        value: Some(value.into()),
    }
}

fn delete(revision: u64, key: &str) -> Event {
    Event {
        revision,
        kind: EventKind::Delete,
        key: key.into(),
        value: None,
    }
}

fn batch(events: &[Event], progress: Option<u64>) -> Batch {
    Batch {
        events: events.to_vec(),
        progress,
    }
}

fn stream(after: u64, batches: Vec<Batch>) -> Stream {
    Stream {
        after,
        batches,
        compacted: None,
    }
}

fn prefix_watcher(id: &str, streams: Vec<Stream>) -> Watcher {
    Watcher {
        id: id.into(),
        selector: Selector::Prefix("cfg/".into()),
        streams,
    }
}

/// Revision 1 puts cfg/a, 2 puts other/x (not matched), 3 is a txn over cfg/a and cfg/b,
/// 4 deletes cfg/b, 5 puts cfg/c.
fn history() -> Vec<Event> {
    vec![
        put(1, "cfg/a", "1"),
        put(2, "other/x", "x"),
        put(3, "cfg/a", "2"),
        put(3, "cfg/b", "1"),
        delete(4, "cfg/b"),
        put(5, "cfg/c", "1"),
    ]
}

fn violations(watchers: &[Watcher]) -> Vec<Violation> {
    check(&history(), watchers).expect("well-formed input")
}

/// The rules broken, each once, in order.
fn rules(watchers: &[Watcher]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = violations(watchers).iter().map(Violation::rule).collect();
    rules.sort();
    rules.dedup();
    rules
}

#[test]
fn a_faithful_watcher_keeps_every_guarantee() {
    // Across a reconnect (answers 1 and 2 came from another member) and an idle bookmark.
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            0,
            vec![
                batch(&[put(1, "cfg/a", "1")], Some(2)),
                batch(&[put(3, "cfg/a", "2"), put(3, "cfg/b", "1")], None),
                batch(&[delete(4, "cfg/b")], None),
                batch(&[], Some(4)),
                batch(&[put(5, "cfg/c", "1")], Some(9)),
            ],
        )],
    );
    let exact = Watcher {
        id: "exact".into(),
        selector: Selector::Key("cfg/b".into()),
        streams: vec![stream(
            2,
            vec![batch(&[put(3, "cfg/b", "1"), delete(4, "cfg/b")], Some(5))],
        )],
    };
    assert_eq!(violations(&[watcher, exact]), vec![]);
}

#[test]
fn a_compacted_answer_ends_a_stream_and_a_new_one_resumes_from_a_read() {
    let watcher = prefix_watcher(
        "w",
        vec![
            Stream {
                after: 0,
                batches: vec![batch(&[put(1, "cfg/a", "1")], None)],
                compacted: Some(3),
            },
            stream(4, vec![batch(&[put(5, "cfg/c", "1")], None)]),
        ],
    );
    assert_eq!(violations(&[watcher]), vec![]);
}

#[test]
fn ordered_rejects_an_event_below_an_earlier_one() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            3,
            vec![batch(&[put(5, "cfg/c", "1"), delete(4, "cfg/b")], None)],
        )],
    );
    assert_eq!(rules(&[watcher]), vec![Rule::Ordered]);
}

#[test]
fn unique_rejects_an_event_delivered_twice() {
    // A member that served the resumed poll repeated revision 5: the same event twice.
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            4,
            vec![
                batch(&[put(5, "cfg/c", "1")], None),
                batch(&[put(5, "cfg/c", "1")], None),
            ],
        )],
    );
    let found = violations(&[watcher]);
    assert!(found.iter().any(|v| v.rule() == Rule::Unique), "{found:?}");
    // Within one answer too.
    let twice = prefix_watcher(
        "w",
        vec![stream(
            4,
            vec![batch(&[put(5, "cfg/c", "1"), put(5, "cfg/c", "1")], None)],
        )],
    );
    assert_eq!(rules(&[twice]), vec![Rule::Unique]);
}

#[test]
fn reliable_rejects_a_gap() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            0,
            vec![
                batch(&[put(1, "cfg/a", "1")], None),
                batch(&[delete(4, "cfg/b")], None),
            ],
        )],
    );
    let found = violations(&[watcher]);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .all(|v| v.kind == ViolationKind::Missed { covered: 4 })
    );
    assert_eq!(
        found[0].to_string(),
        "watcher \"w\" stream 0, revision 3 key \"cfg/a\": reliable broken: never arrived, \
         though the stream reached revision 4"
    );
}

#[test]
fn reliable_rejects_a_bookmark_that_skips_an_event() {
    // The bookmark says nothing matched up to 5, yet revision 5 wrote cfg/c.
    let watcher = prefix_watcher("w", vec![stream(4, vec![batch(&[], Some(5))])]);
    assert_eq!(rules(&[watcher]), vec![Rule::Reliable]);
}

#[test]
fn atomic_rejects_a_revision_split_across_answers() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            2,
            vec![
                batch(&[put(3, "cfg/a", "2")], None),
                batch(&[put(3, "cfg/b", "1")], None),
            ],
        )],
    );
    let found = violations(&[watcher]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].kind,
        ViolationKind::SplitRevision { first_batch: 0 }
    );
    assert_eq!(found[0].batch, Some(1));
}

#[test]
fn atomic_rejects_a_revision_delivered_in_part() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            2,
            vec![
                batch(&[put(3, "cfg/a", "2")], None),
                batch(&[delete(4, "cfg/b")], None),
            ],
        )],
    );
    let found = violations(&[watcher]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, ViolationKind::PartialRevision);
    assert_eq!(found[0].key.as_deref(), Some("cfg/b"));
}

#[test]
fn bookmarkable_rejects_a_bookmark_going_back() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(5, vec![batch(&[], Some(8)), batch(&[], Some(7))])],
    );
    assert_eq!(rules(&[watcher]), vec![Rule::Bookmarkable]);
    // Nor below an event already received.
    let behind_event = prefix_watcher(
        "w",
        vec![stream(4, vec![batch(&[put(5, "cfg/c", "1")], Some(4))])],
    );
    assert_eq!(rules(&[behind_event]), vec![Rule::Bookmarkable]);
}

#[test]
fn bookmarkable_rejects_an_event_at_or_below_an_earlier_bookmark() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            4,
            vec![batch(&[], Some(5)), batch(&[put(5, "cfg/c", "1")], None)],
        )],
    );
    let found = violations(&[watcher]);
    assert!(
        found
            .iter()
            .any(|v| v.kind == ViolationKind::EventBehindBookmark { bookmark: 5 }),
        "{found:?}"
    );
}

#[test]
fn resumable_rejects_an_event_at_or_before_the_starting_cursor() {
    // The client resumed from 3 after a failover; the new member sent revision 3 again.
    let watcher = prefix_watcher(
        "w",
        vec![stream(
            3,
            vec![batch(&[put(3, "cfg/a", "2"), put(3, "cfg/b", "1")], None)],
        )],
    );
    let found = violations(&[watcher]);
    assert!(!found.is_empty());
    assert!(
        found.iter().all(|v| v.rule() == Rule::Resumable),
        "{found:?}"
    );
}

#[test]
fn resumable_rejects_a_compacted_answer_for_a_cursor_already_past_it() {
    let watcher = prefix_watcher(
        "w",
        vec![Stream {
            after: 4,
            batches: vec![batch(&[put(5, "cfg/c", "1")], None)],
            compacted: Some(5),
        }],
    );
    let found = violations(&[watcher]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].kind,
        ViolationKind::SpuriousCompaction { cursor: 5 }
    );
}

#[test]
fn resumable_holds_across_streams_only_if_the_new_stream_does_not_repeat() {
    // After compaction, restarting from a stale read repeats an event already received.
    let watcher = prefix_watcher(
        "w",
        vec![
            Stream {
                after: 4,
                batches: vec![batch(&[put(5, "cfg/c", "1")], None)],
                compacted: Some(6),
            },
            stream(4, vec![batch(&[put(5, "cfg/c", "1")], None)]),
        ],
    );
    let found = violations(&[watcher]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].kind,
        ViolationKind::Duplicate {
            first_stream: 0,
            first_batch: 0
        }
    );
    assert_eq!(found[0].stream, 1);
}

#[test]
fn consistent_rejects_an_event_that_differs_from_the_history() {
    let watcher = prefix_watcher(
        "w",
        vec![stream(4, vec![batch(&[put(5, "cfg/c", "2")], None)])],
    );
    let found = violations(&[watcher]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].to_string(),
        "watcher \"w\" stream 0 answer 0, revision 5 key \"cfg/c\": consistent broken: \
         received put \"cfg/c\"=\"2\" @5 but the history wrote put \"cfg/c\"=\"1\" @5"
    );
}

#[test]
fn consistent_rejects_a_key_outside_the_selector_and_disagreeing_watchers() {
    let outside = prefix_watcher(
        "w",
        vec![stream(1, vec![batch(&[put(2, "other/x", "x")], None)])],
    );
    assert_eq!(rules(&[outside]), vec![Rule::Consistent]);
    // Revision 9 is not in the history (an unknown put that applied); two watchers disagree.
    let first = prefix_watcher(
        "a",
        vec![stream(5, vec![batch(&[put(9, "cfg/z", "1")], None)])],
    );
    let second = prefix_watcher(
        "b",
        vec![stream(5, vec![batch(&[put(9, "cfg/z", "2")], None)])],
    );
    let found = violations(&[first, second]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].watcher, "b");
    assert!(matches!(
        found[0].kind,
        ViolationKind::DiffersFromWatcher { .. }
    ));
}

#[test]
fn malformed_input_is_a_typed_error() {
    let conflicting = [put(1, "k", "a"), put(1, "k", "b")];
    assert_eq!(
        check(&conflicting, &[]),
        Err(WatchInputError::ConflictingHistory {
            revision: 1,
            key: "k".into()
        })
    );
    let twins = [prefix_watcher("w", vec![]), prefix_watcher("w", vec![])];
    assert_eq!(
        check(&[], &twins),
        Err(WatchInputError::DuplicateWatcher { id: "w".into() })
    );
}
