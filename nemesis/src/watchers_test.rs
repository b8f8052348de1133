//! The watch workload's records as the checker reads them, and broken streams reported.

use hivekeeper_agent::KeyValue;
use hivekeeper_agent::protocol::kv::{EventKind as WireKind, KvEvent, WatchPage};
use hivekeeper_checker::linearizability::{Input, Operation, Outcome, Reply};
use hivekeeper_checker::watch::{Batch, Event, EventKind, Selector, Stream, Watcher};

use super::{advance, batch, check, committed};
use crate::history::History;
use crate::keys::{FinalRead, KeyOp};

fn key_op(input: Input, outcome: Outcome) -> KeyOp {
    KeyOp {
        agent: "a".into(),
        request: 1,
        op: Operation {
            client_id: 0,
            call_ns: 0,
            return_ns: 10,
            input,
            outcome,
        },
        error: None,
    }
}

fn put_event(revision: u64, key: &str, value: &str) -> Event {
    Event {
        revision,
        kind: EventKind::Put,
        key: key.into(),
        value: Some(value.into()),
    }
}

fn kv(key: &str, value: &str, mod_revision: u64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision: mod_revision,
        mod_revision,
        version: 1,
        lease: None,
    }
}

/// Acknowledged puts, successful compare-and-sets, deletes that deleted and the final
/// read; nothing of a failed compare, a delete of nothing or an unanswered put.
fn history() -> History {
    let put = |key: &str, value: &str, revision| {
        key_op(
            Input::Put {
                key: key.into(),
                value: value.into(),
            },
            Outcome::Ok(Reply::Put {
                revision: Some(revision),
            }),
        )
    };
    let cas = |value: &str, succeeded, revision| {
        key_op(
            Input::CompareAndSet {
                key: "p/k1".into(),
                expected: hivekeeper_checker::linearizability::Expected::ModRevision(0),
                value: value.into(),
            },
            Outcome::Ok(Reply::CompareAndSet {
                succeeded,
                revision: Some(revision),
            }),
        )
    };
    let delete = |deleted, revision| {
        key_op(
            Input::Delete { key: "p/k0".into() },
            Outcome::Ok(Reply::Delete {
                deleted: Some(deleted),
                revision: Some(revision),
            }),
        )
    };
    let unanswered = key_op(
        Input::Put {
            key: "p/k0".into(),
            value: "lost".into(),
        },
        Outcome::Unknown,
    );
    History {
        key_ops: vec![
            put("p/k0", "v2", 2),
            cas("v3", true, 3),
            cas("no", false, 3),
            delete(true, 4),
            delete(false, 4),
            unanswered,
        ],
        final_read: Some(FinalRead {
            invoke_us: 100,
            complete_us: 110,
            keys: vec!["p/k0".into(), "p/k1".into()],
            revision: 4,
            kvs: vec![kv("p/k1", "v3", 3)],
        }),
        ..History::default()
    }
}

#[test]
fn the_committed_writes_are_the_acknowledged_ones_and_the_final_read() {
    let delete = Event {
        revision: 4,
        kind: EventKind::Delete,
        key: "p/k0".into(),
        value: None,
    };
    assert_eq!(
        committed(&history()),
        vec![
            put_event(2, "p/k0", "v2"),
            put_event(3, "p/k1", "v3"),
            delete,
            put_event(3, "p/k1", "v3"),
        ]
    );
}

#[test]
fn an_answer_becomes_a_batch_with_its_bookmark_and_moves_the_cursor() {
    let page = WatchPage {
        events: vec![
            KvEvent {
                revision: 2,
                kind: WireKind::Put,
                kv: kv("p/k0", "v2", 2),
            },
            KvEvent {
                revision: 4,
                kind: WireKind::Delete,
                kv: kv("p/k0", "v2", 2),
            },
        ],
        next: 4,
        next_key: None,
        progress: None,
    };
    let got = batch(&page);
    assert_eq!(got.progress, Some(4));
    assert_eq!(got.events[0], put_event(2, "p/k0", "v2"));
    assert_eq!(got.events[1].kind, EventKind::Delete);
    assert_eq!(got.events[1].value, None);
    assert_eq!(advance(1, &page), 4);
    let bookmark = WatchPage {
        events: Vec::new(),
        next: 4,
        next_key: None,
        progress: Some(9),
    };
    assert_eq!(batch(&bookmark).progress, Some(9));
    assert_eq!(advance(4, &bookmark), 9);
    // Never backwards.
    assert_eq!(advance(12, &bookmark), 12);
}

fn watcher(batches: Vec<Batch>) -> Watcher {
    Watcher {
        id: "w".into(),
        selector: Selector::Prefix("p/".into()),
        streams: vec![Stream {
            after: 1,
            batches,
            compacted: None,
        }],
    }
}

#[test]
fn faithful_streams_pass() {
    let mut history = history();
    let delete = Event {
        revision: 4,
        kind: EventKind::Delete,
        key: "p/k0".into(),
        value: None,
    };
    history.watchers = vec![watcher(vec![
        Batch {
            events: vec![put_event(2, "p/k0", "v2"), put_event(3, "p/k1", "v3")],
            progress: Some(3),
        },
        Batch {
            events: vec![delete],
            progress: Some(4),
        },
    ])];
    let verdict = check(&history);
    assert_eq!(verdict.anomalies, 0, "{:?}", verdict.samples);
    assert_eq!(verdict.ops, 3);
}

#[test]
fn a_missed_write_and_a_duplicate_are_reported() {
    let mut history = history();
    // Revision 3 never arrives though the stream's bookmark passed it, and revision 2 comes
    // twice.
    history.watchers = vec![watcher(vec![
        Batch {
            events: vec![put_event(2, "p/k0", "v2")],
            progress: Some(2),
        },
        Batch {
            events: vec![put_event(2, "p/k0", "v2")],
            progress: Some(5),
        },
    ])];
    let verdict = check(&history);
    assert!(verdict.anomalies >= 2, "{:?}", verdict.samples);
    let text = verdict.samples.join("\n");
    assert!(text.contains("reliable broken"), "{text}");
    assert!(text.contains("unique broken"), "{text}");
}
