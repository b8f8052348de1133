//! The keys workload's records as the checker reads them, and a broken history reported.

use hivekeeper_agent::{KeyRead, KeyValue};
use hivekeeper_checker::linearizability::{Expected, Input, Operation, Outcome, Reply};
use hivekeeper_checker::watch::{Batch, Event, EventKind, Selector, Stream, Watcher};

use super::{BUDGET, FinalRead, KeyOp, applied_twice, check, get_reply};
use crate::history::History;

/// An operation of agent `a`, request `request`, over `[call_us, return_us]`.
fn op(request: u64, call_us: u64, return_us: u64, input: Input, outcome: Outcome) -> KeyOp {
    KeyOp {
        agent: "a".into(),
        request,
        op: Operation {
            client_id: 0,
            call_ns: call_us * 1_000,
            return_ns: return_us * 1_000,
            input,
            outcome,
        },
        error: None,
    }
}

fn put(request: u64, at_us: u64, value: &str, revision: u64) -> KeyOp {
    let input = Input::Put {
        key: "k".into(),
        value: value.into(),
    };
    let reply = Reply::Put {
        revision: Some(revision),
    };
    op(request, at_us, at_us + 10, input, Outcome::Ok(reply))
}

fn get(request: u64, at_us: u64, value: Option<&str>, mod_revision: u64) -> KeyOp {
    let input = Input::Get { key: "k".into() };
    let reply = Reply::Get {
        value: value.map(String::from),
        mod_revision: value.map(|_| mod_revision),
    };
    op(request, at_us, at_us + 10, input, Outcome::Ok(reply))
}

fn kv(value: &str, mod_revision: u64) -> KeyValue {
    KeyValue {
        key: "k".into(),
        value: value.into(),
        create_revision: mod_revision,
        mod_revision,
        version: 1,
        lease: None,
    }
}

fn final_read(at_us: u64, kvs: Vec<KeyValue>) -> FinalRead {
    FinalRead {
        invoke_us: at_us,
        complete_us: at_us + 10,
        keys: vec!["k".into()],
        revision: 100,
        kvs,
    }
}

#[test]
fn a_read_becomes_the_checkers_get_reply() {
    let absent = KeyRead {
        revision: 7,
        kv: None,
    };
    assert_eq!(
        get_reply(&absent),
        Reply::Get {
            value: None,
            mod_revision: None
        }
    );
    let present = KeyRead {
        revision: 9,
        kv: Some(kv("v", 4)),
    };
    assert_eq!(
        get_reply(&present),
        Reply::Get {
            value: Some("v".into()),
            mod_revision: Some(4)
        }
    );
}

#[test]
fn a_sequential_history_with_its_final_read_is_linearizable() {
    let cas = op(
        3,
        200,
        210,
        Input::CompareAndSet {
            key: "k".into(),
            expected: Expected::ModRevision(6),
            value: "a-3".into(),
        },
        Outcome::Ok(Reply::CompareAndSet {
            succeeded: true,
            revision: Some(8),
        }),
    );
    let history = History {
        key_ops: vec![put(1, 0, "a-1", 6), get(2, 100, Some("a-1"), 6), cas],
        final_read: Some(final_read(300, vec![kv("a-3", 8)])),
        ..History::default()
    };
    let verdict = check(&history, &BUDGET);
    assert_eq!(verdict.anomalies, 0, "{:?}", verdict.samples);
    // Three operations and the final read's get of the one key.
    assert_eq!(verdict.ops, 4);
}

#[test]
fn a_write_applied_again_after_it_was_overwritten_is_reported_with_its_request() {
    // a-1 acknowledged at 5, overwritten by a-2 at 7; then a-1 is read back at 9: the stale
    // copy of request 1 applied a second time.
    let history = History {
        key_ops: vec![
            put(1, 0, "a-1", 5),
            put(2, 100, "a-2", 7),
            get(3, 200, Some("a-1"), 9),
        ],
        ..History::default()
    };
    let verdict = check(&history, &BUDGET);
    // Not linearizable (one key), and a-1 seen at two revisions.
    assert_eq!(verdict.anomalies, 2, "{:?}", verdict.samples);
    let text = verdict.samples.join("\n");
    assert!(text.contains("key \"k\" is not linearizable"), "{text}");
    assert!(text.contains("a request 3"), "{text}");
    assert!(text.contains("applied twice"), "{text}");
    assert!(text.contains("@5") && text.contains("@9"), "{text}");
}

#[test]
fn a_stale_final_read_is_reported() {
    let history = History {
        key_ops: vec![put(1, 0, "a-1", 5), put(2, 100, "a-2", 7)],
        final_read: Some(final_read(300, vec![kv("a-1", 5)])),
        ..History::default()
    };
    let verdict = check(&history, &BUDGET);
    assert_eq!(verdict.anomalies, 1, "{:?}", verdict.samples);
    assert!(
        verdict
            .samples
            .iter()
            .any(|s| s.contains("final read @100")),
        "{:?}",
        verdict.samples
    );
}

#[test]
fn every_wrong_key_is_reported_not_only_the_first() {
    let on = |key: &str, mut op: KeyOp| {
        match &mut op.op.input {
            Input::Put { key: k, .. } | Input::Get { key: k } => *k = key.into(),
            _ => unreachable!(),
        }
        op
    };
    let history = History {
        key_ops: vec![
            on("k1", put(1, 0, "a-1", 5)),
            on("k1", get(2, 100, None, 0)),
            on("k2", put(3, 200, "a-3", 6)),
            on("k2", get(4, 300, Some("never written"), 6)),
        ],
        ..History::default()
    };
    let verdict = check(&history, &BUDGET);
    assert_eq!(verdict.anomalies, 2, "{:?}", verdict.samples);
}

#[test]
fn a_value_a_watcher_saw_at_another_revision_than_its_reply_is_applied_twice() {
    let event = |revision| Event {
        revision,
        kind: EventKind::Put,
        key: "k".into(),
        value: Some("a-1".into()),
    };
    let watcher = Watcher {
        id: "w".into(),
        selector: Selector::Prefix(String::new()),
        streams: vec![Stream {
            after: 0,
            batches: vec![Batch {
                events: vec![event(5), event(12)],
                progress: Some(12),
            }],
            compacted: None,
        }],
    };
    let history = History {
        key_ops: vec![put(1, 0, "a-1", 5)],
        watchers: vec![watcher],
        ..History::default()
    };
    let found = applied_twice(&history);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("@12 (seen by watcher w)"), "{found:?}");
    assert!(found[0].contains("a request 1's reply"), "{found:?}");
}
