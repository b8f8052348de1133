//! The watch's cursor rules, and its loop against a scripted source: what is yielded, which
//! `after` each poll sends, and when the stream ends.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use hivekeeper_protocol::KeyValue;
use hivekeeper_protocol::kv::EventKind;

use super::*;

fn event(revision: u64, kind: EventKind, key: &str) -> KvEvent {
    KvEvent {
        revision,
        kind,
        kv: KeyValue {
            key: key.into(),
            value: format!("v{revision}"),
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            lease: None,
        },
    }
}

fn page(events: Vec<KvEvent>, next: u64, progress: Option<u64>) -> WatchPage {
    WatchPage {
        events,
        next,
        next_key: None,
        progress,
    }
}

#[test]
fn events_come_one_item_per_revision_and_the_cursor_moves_to_next() {
    let mut cursor = Cursor::new(10);
    let items = cursor.absorb(page(
        vec![
            event(11, EventKind::Put, "a"),
            event(12, EventKind::Put, "a"),
            event(12, EventKind::Delete, "b"),
        ],
        12,
        None,
    ));
    assert_eq!(
        items,
        vec![
            WatchItem::Changes {
                revision: 11,
                events: vec![event(11, EventKind::Put, "a")],
            },
            WatchItem::Changes {
                revision: 12,
                events: vec![
                    event(12, EventKind::Put, "a"),
                    event(12, EventKind::Delete, "b")
                ],
            },
        ]
    );
    assert_eq!(cursor.after, 12);
}

#[test]
fn an_event_at_or_below_the_cursor_is_never_yielded_again() {
    let mut cursor = Cursor::new(12);
    let items = cursor.absorb(page(
        vec![
            event(12, EventKind::Put, "a"),
            event(13, EventKind::Put, "a"),
        ],
        13,
        None,
    ));
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].revision(), 13);
}

#[test]
fn an_idle_answer_is_a_bookmark_that_moves_the_cursor() {
    let mut cursor = Cursor::new(5);
    let items = cursor.absorb(page(Vec::new(), 40, Some(40)));
    assert_eq!(items, vec![WatchItem::Progress { revision: 40 }]);
    assert_eq!(cursor.after, 40);
    // The same bookmark again moves nothing, and is still handed on: the watch is alive.
    assert_eq!(
        cursor.absorb(page(Vec::new(), 40, Some(40))),
        vec![WatchItem::Progress { revision: 40 }]
    );
}

#[test]
fn the_cursor_never_goes_backwards() {
    let mut cursor = Cursor::new(50);
    let items = cursor.absorb(page(Vec::new(), 30, Some(30)));
    assert_eq!(items, vec![WatchItem::Progress { revision: 50 }]);
    assert_eq!(cursor.after, 50);
}

/// A source that answers from a script and records each poll's `after`.
struct Script {
    answers: VecDeque<Result<WatchPage, AgentError>>,
    afters: Arc<Mutex<Vec<u64>>>,
}

impl Source for Script {
    async fn poll(
        &mut self,
        after: u64,
        _after_key: Option<String>,
    ) -> Result<WatchPage, AgentError> {
        self.afters.lock().expect("not poisoned").push(after);
        self.answers
            .pop_front()
            .unwrap_or_else(|| Err(AgentError::Config("the script ran out".into())))
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_connection_is_polled_again_from_the_same_cursor_and_compacted_ends_the_stream() {
    let afters = Arc::new(Mutex::new(Vec::new()));
    let script = Script {
        answers: VecDeque::from([
            Ok(page(vec![event(8, EventKind::Put, "a")], 8, None)),
            Err(AgentError::Disconnected),
            Err(AgentError::Timeout {
                op: "watch.poll",
                waited_ms: 1,
            }),
            Ok(page(Vec::new(), 20, Some(20))),
            Err(AgentError::Compacted {
                compact_revision: 25,
            }),
        ]),
        afters: Arc::clone(&afters),
    };
    let shared = Arc::new(AtomicU64::new(7));
    let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
    let items: Vec<_> = run(script, Arc::clone(&shared), backoff).collect().await;
    assert_eq!(
        items,
        vec![
            Ok(WatchItem::Changes {
                revision: 8,
                events: vec![event(8, EventKind::Put, "a")],
            }),
            Ok(WatchItem::Progress { revision: 20 }),
            Err(AgentError::Compacted {
                compact_revision: 25
            }),
        ]
    );
    assert_eq!(*afters.lock().expect("not poisoned"), vec![7, 8, 8, 8, 20]);
    assert_eq!(shared.load(Ordering::Acquire), 20);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_other_than_unavailable_is_yielded_once_and_ends_the_stream() {
    let script = Script {
        answers: VecDeque::from([Err(AgentError::Service {
            code: ErrorCode::ResourceExhausted,
            message: "64 polls".into(),
        })]),
        afters: Arc::new(Mutex::new(Vec::new())),
    };
    let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
    let items: Vec<_> = run(script, Arc::new(AtomicU64::new(0)), backoff)
        .collect()
        .await;
    assert_eq!(items.len(), 1);
    assert!(
        matches!(&items[0], Err(AgentError::Service { code, .. }) if *code == ErrorCode::ResourceExhausted)
    );
}

fn fragment(events: Vec<KvEvent>, next: u64, next_key: &str) -> WatchPage {
    WatchPage {
        events,
        next,
        next_key: Some(next_key.into()),
        progress: None,
    }
}

/// A revision too large for one answer comes in fragments: each is kept and polled on from
/// its last key, and the revision is yielded whole, in one item, with the answer that ends it.
#[test]
fn fragments_of_one_revision_are_yielded_as_one_item() {
    let mut cursor = Cursor::new(10);
    let first = cursor.absorb(fragment(
        vec![
            event(12, EventKind::Delete, "a"),
            event(12, EventKind::Delete, "b"),
        ],
        11,
        "b",
    ));
    assert!(first.is_empty(), "nothing yielded mid-revision");
    assert_eq!((cursor.after, cursor.after_key.as_deref()), (11, Some("b")));
    // A resent poll's answer repeating a fragment adds nothing twice.
    let again = cursor.absorb(fragment(vec![event(12, EventKind::Delete, "b")], 11, "b"));
    assert!(again.is_empty());
    let second = cursor.absorb(fragment(vec![event(12, EventKind::Delete, "c")], 11, "c"));
    assert!(second.is_empty());
    assert_eq!(cursor.after_key.as_deref(), Some("c"));
    let last = cursor.absorb(page(
        vec![
            event(12, EventKind::Delete, "d"),
            event(13, EventKind::Put, "e"),
        ],
        13,
        Some(13),
    ));
    assert_eq!(
        last,
        vec![
            WatchItem::Changes {
                revision: 12,
                events: vec![
                    event(12, EventKind::Delete, "a"),
                    event(12, EventKind::Delete, "b"),
                    event(12, EventKind::Delete, "c"),
                    event(12, EventKind::Delete, "d"),
                ],
            },
            WatchItem::Changes {
                revision: 13,
                events: vec![event(13, EventKind::Put, "e")],
            },
        ]
    );
    assert_eq!((cursor.after, cursor.after_key), (13, None));
}
