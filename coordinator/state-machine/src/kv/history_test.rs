//! The event history and watch pages: cursors, `next` and `progress`, revisions never split,
//! bounds and compaction.

use crate::kv_test::{
    CLIENT, delete_event, history, key, kv, no_holds, prefix, put, put_event, space_with,
};
use crate::{Compacted, Cursor, Deleted, KeySpace, KvLimits, Txn, TxnOp, WatchPage};
use hivekeeper_protocol::kv::{ANSWER_BYTES_MAX, json_len};

// ----- history and watch pages -------------------------------------------------------------

/// Revisions 1 to 4: `a` (1), `b/1` and `b/2` by txn (2), `a` again (3), `b/1` deleted (4).
fn watched() -> KeySpace {
    let mut space = KeySpace::default();
    space.put(1, CLIENT, put("a", "1")).expect("put");
    let txn = Txn {
        success: vec![TxnOp::Put(put("b/1", "x")), TxnOp::Put(put("b/2", "y"))],
        ..Txn::default()
    };
    space.txn(2, CLIENT, txn, &no_holds).expect("txn");
    space.put(3, CLIENT, put("a", "2")).expect("put");
    space.delete(4, CLIENT, &key("b/1")).expect("delete");
    space
}

#[test]
fn a_watch_page_holds_the_matching_events_after_the_cursor() {
    let space = watched();
    assert_eq!(
        space.events_after(1, &key("a"), 10),
        Ok(WatchPage {
            events: vec![put_event(3, kv("a", "2", 1, 3, 2))],
            next: 4,
            next_key: None,
            progress: Some(4),
        }),
        "nothing else matched up to 4: the cursor moves to it"
    );
    assert_eq!(
        space.events_after(0, &prefix("b/"), 10),
        Ok(WatchPage {
            events: vec![
                put_event(2, kv("b/1", "x", 2, 2, 1)),
                put_event(2, kv("b/2", "y", 2, 2, 1)),
                delete_event(4, kv("b/1", "x", 2, 2, 1)),
            ],
            next: 4,
            next_key: None,
            progress: Some(4),
        })
    );
}

#[test]
fn an_idle_watch_gets_progress_and_no_events() {
    let space = watched();
    let page = space.events_after(4, &prefix(""), 10);
    assert_eq!(
        page,
        Ok(WatchPage {
            events: vec![],
            next: 4,
            next_key: None,
            progress: Some(4)
        })
    );
    let page = space.events_after(0, &key("nothing"), 10);
    assert_eq!(
        page,
        Ok(WatchPage {
            events: vec![],
            next: 4,
            next_key: None,
            progress: Some(4)
        })
    );
}

#[test]
fn a_cursor_ahead_of_the_key_space_never_goes_backwards() {
    let space = watched();
    let page = space.events_after(9, &prefix(""), 10);
    assert_eq!(
        page,
        Ok(WatchPage {
            events: vec![],
            next: 9,
            next_key: None,
            progress: Some(9)
        })
    );
}

#[test]
fn a_full_page_stops_between_revisions_and_says_where() {
    let space = watched();
    let first = space.events_after(0, &prefix(""), 2).expect("page");
    assert_eq!(
        first,
        WatchPage {
            events: vec![put_event(1, kv("a", "1", 1, 1, 1))],
            next: 1,
            next_key: None,
            progress: None,
        },
        "revision 2's two events do not fit beside revision 1's: they wait for the next page"
    );
    let second = space
        .events_after(first.next, &prefix(""), 2)
        .expect("page");
    assert_eq!(
        second,
        WatchPage {
            events: vec![
                put_event(2, kv("b/1", "x", 2, 2, 1)),
                put_event(2, kv("b/2", "y", 2, 2, 1)),
            ],
            next: 2,
            next_key: None,
            progress: None,
        }
    );
    let third = space
        .events_after(second.next, &prefix(""), 2)
        .expect("page");
    assert_eq!(
        third,
        WatchPage {
            events: vec![
                put_event(3, kv("a", "2", 1, 3, 2)),
                delete_event(4, kv("b/1", "x", 2, 2, 1)),
            ],
            next: 4,
            next_key: None,
            progress: Some(4),
        },
        "a page that reaches the end is a bookmark too"
    );
}

#[test]
fn a_revision_larger_than_max_events_comes_whole() {
    let space = watched();
    let page = space.events_after(1, &prefix(""), 1).expect("page");
    assert_eq!(page.events.len(), 2);
    assert!(page.events.iter().all(|event| event.revision == 2));
    assert_eq!((page.next, page.progress), (2, None));
    let page = space.events_after(1, &prefix(""), 0).expect("page");
    assert_eq!(
        page.events.len(),
        2,
        "even with max_events 0 a page makes progress"
    );
}

#[test]
fn only_the_matching_events_of_a_revision_count_against_max_events() {
    let space = watched();
    let page = space.events_after(1, &key("b/2"), 1).expect("page");
    assert_eq!(
        page,
        WatchPage {
            events: vec![put_event(2, kv("b/2", "y", 2, 2, 1))],
            next: 4,
            next_key: None,
            progress: Some(4),
        }
    );
}

#[test]
fn the_history_drops_the_oldest_whole_revisions_past_history_events_max() {
    let limits = KvLimits {
        history_events_max: 3,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, put("a", "1")).expect("put");
    let txn = Txn {
        success: vec![TxnOp::Put(put("b", "1")), TxnOp::Put(put("c", "1"))],
        ..Txn::default()
    };
    space.txn(2, CLIENT, txn, &no_holds).expect("txn");
    assert_eq!((space.history_len(), space.compact_revision()), (3, 0));
    space.put(3, CLIENT, put("a", "2")).expect("put");
    assert_eq!(
        space.compact_revision(),
        1,
        "revision 1 alone is dropped: 3 events left"
    );
    space.put(4, CLIENT, put("a", "3")).expect("put");
    assert_eq!(
        space.compact_revision(),
        2,
        "revision 2's two events go together, never one of them"
    );
    assert_eq!(
        history(&space)
            .iter()
            .map(|event| event.revision)
            .collect::<Vec<_>>(),
        [3, 4]
    );
    assert_eq!(
        space.events_after(1, &prefix(""), 10),
        Err(Compacted {
            compact_revision: 2
        })
    );
    let page = space
        .events_after(2, &prefix(""), 10)
        .expect("at the compaction is served");
    assert_eq!(page.events.len(), 2);
    space.check_invariants().expect("invariants hold");
}

#[test]
fn the_history_is_bounded_in_bytes() {
    let limits = KvLimits {
        history_bytes_max: 10,
        ..KvLimits::default()
    };
    let mut space = KeySpace::new(limits);
    space.put(1, CLIENT, put("a", "1234")).expect("put");
    space.put(2, CLIENT, put("b", "1234")).expect("put");
    assert_eq!(space.compact_revision(), 0);
    space.put(3, CLIENT, put("c", "1")).expect("put");
    assert_eq!(space.compact_revision(), 1);
    assert_eq!(space.history_len(), 2);
    space.check_invariants().expect("invariants hold");
}

#[test]
fn a_revision_over_the_bounds_alone_is_compacted_whole() {
    let limits = KvLimits {
        history_events_max: 2,
        ..KvLimits::default()
    };
    let mut space = space_with(limits, &[("a", "1"), ("b", "2"), ("c", "3")]);
    assert_eq!(
        space.delete(4, CLIENT, &prefix("")),
        Ok(Deleted { deleted: 3 })
    );
    assert_eq!((space.history_len(), space.compact_revision()), (0, 4));
    assert_eq!(
        space.events_after(3, &prefix(""), 10),
        Err(Compacted {
            compact_revision: 4
        })
    );
    assert_eq!(
        space.events_after(4, &prefix(""), 10),
        Ok(WatchPage {
            events: vec![],
            next: 4,
            next_key: None,
            progress: Some(4)
        })
    );
    space.check_invariants().expect("invariants hold");
}

// ----- answers that fit one packet ----------------------------------------------------------

/// 600 keys under `fleet/` with 100-byte values (about 170 bytes of JSON each as a key, so
/// about 100 KiB together, twice [`ANSWER_BYTES_MAX`]), put at revisions 1 to 600.
fn fleet() -> KeySpace {
    let mut space = KeySpace::default();
    let value = "v".repeat(100);
    for i in 0..600u64 {
        let name = format!("fleet/drone-{i:04}/status");
        space.put(i + 1, CLIENT, put(&name, &value)).expect("put");
    }
    space
}

#[test]
fn a_key_page_stops_before_it_passes_the_answer_bound() {
    let space = fleet();
    let first = space.range("fleet/", None, 1_000);
    let bytes: usize = first.kvs.iter().map(json_len).sum();
    assert!(bytes <= ANSWER_BYTES_MAX, "{bytes} bytes");
    assert!(
        first.kvs.len() > 100 && first.kvs.len() < 600,
        "{}",
        first.kvs.len()
    );
    let last = first.kvs.last().expect("keys").key.clone();
    assert_eq!(first.next_after.as_deref(), Some(last.as_str()));
    // Paging on reads every key once.
    let mut seen = first.kvs.len();
    let mut after = first.next_after;
    while let Some(from) = after {
        let page = space.range("fleet/", Some(&from), 1_000);
        seen += page.kvs.len();
        after = page.next_after;
    }
    assert_eq!(seen, 600);
    // A key larger than the bound alone still comes, one per page.
    let mut big = KeySpace::default();
    let value = "\u{1}".repeat(8 * 1024); // escaped as \u0001: six bytes each
    big.put(1, CLIENT, put("big/1", &value)).expect("put");
    big.put(2, CLIENT, put("big/2", &value)).expect("put");
    let page = big.range("big/", None, 10);
    assert_eq!(page.kvs.len(), 1);
    assert_eq!(page.next_after.as_deref(), Some("big/1"));
}

#[test]
fn a_revision_too_large_for_one_answer_comes_in_fragments_in_key_order() {
    let mut space = fleet();
    space.put(601, CLIENT, put("other", "x")).expect("put");
    let deleted = space
        .delete(602, CLIENT, &prefix("fleet/"))
        .expect("delete");
    assert_eq!(deleted.deleted, 600);
    space.put(603, CLIENT, put("fleet/late", "y")).expect("put");

    let watch = prefix("fleet/");
    let mut cursor_after = 601;
    let mut cursor_key: Option<String> = None;
    let mut deletes: Vec<String> = Vec::new();
    let mut fragments = 0;
    loop {
        let cursor = Cursor {
            after: cursor_after,
            after_key: cursor_key.as_deref(),
        };
        let page = space.events_after(cursor, &watch, 1_000).expect("kept");
        let bytes: usize = page.events.iter().map(json_len).sum();
        assert!(bytes <= ANSWER_BYTES_MAX, "{bytes} bytes");
        match page.next_key {
            Some(next_key) => {
                fragments += 1;
                assert_eq!(page.next, 601, "the cursor stays before the revision");
                assert_eq!(page.progress, None);
                assert!(page.events.iter().all(|event| event.revision == 602));
                assert_eq!(page.events.last().map(|e| &e.kv.key), Some(&next_key));
                deletes.extend(page.events.into_iter().map(|event| event.kv.key));
                cursor_key = Some(next_key);
            }
            None => {
                // The rest of the revision, then the later ones as usual.
                let (rest, later): (Vec<_>, Vec<_>) = page
                    .events
                    .into_iter()
                    .partition(|event| event.revision == 602);
                deletes.extend(rest.into_iter().map(|event| event.kv.key));
                assert_eq!(later.len(), 1);
                assert_eq!(later[0].kv.key, "fleet/late");
                assert_eq!((page.next, page.progress), (603, Some(603)));
                break;
            }
        }
        cursor_after = page.next;
    }
    assert!(fragments >= 2, "{fragments} fragments");
    let mut sorted = deletes.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(deletes, sorted, "in key order, none twice");
    assert_eq!(deletes.len(), 600, "none missing");
}

#[test]
fn a_page_stops_before_a_whole_revision_that_would_pass_the_answer_bound() {
    let mut space = KeySpace::default();
    let value = "v".repeat(7_000);
    for i in 0..10u64 {
        space
            .put(i + 1, CLIENT, put(&format!("cfg/{i}"), &value))
            .expect("put");
    }
    let page = space.events_after(0, &prefix("cfg/"), 100).expect("kept");
    assert_eq!(page.next_key, None, "whole revisions, no fragment");
    assert_eq!(page.progress, None, "more remain");
    assert!(page.events.len() < 10 && page.events.len() >= 6);
    assert_eq!(page.next, page.events.len() as u64);
}
