"""The watch's cursor and the cache's map, without I/O: what a poll asks for, how an answer
moves the cursor, and how events and reloads change the map."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import hivekeeper
from hivekeeper.config import config_from
from hivekeeper.kv import GetResult, KeyValue
from hivekeeper.kv_cache import CacheState
from hivekeeper.watch import WatchCursor, WatchEvent


def kv(key: str, value: str, create: int, mod: int, version: int = 1) -> Dict[str, Any]:
    return {
        "key": key,
        "value": value,
        "create_revision": create,
        "mod_revision": mod,
        "version": version,
    }


def put(revision: int, key: str, value: str, create: int = 0) -> Dict[str, Any]:
    return {"revision": revision, "type": "put", "kv": kv(key, value, create or revision, revision)}


def test_a_poll_asks_from_the_cursor_and_waits_longer_than_wait_ms():
    cursor = WatchCursor(None, "hive/", 7, 50, 1500)
    assert cursor.fields() == {"after": 7, "prefix": "hive/", "max_events": 50, "wait_ms": 1500}
    config = config_from("a", None, {"request_timeout_ms": 1000})
    patience = cursor.patience(config)
    assert patience.attempt_s == 2.5 and patience.total_s is None
    default = WatchCursor("k", None, 0, None, None).patience(config)
    assert default.attempt_s == 31.0


def test_answers_move_the_cursor_forward_and_bookmarks_too():
    cursor = WatchCursor(None, "p/", 10, None, None)
    page = cursor.advance({"events": [put(11, "p/a", "1"), put(12, "p/b", "2")], "next": 12})
    assert [e.revision for e in page.events] == [11, 12] and cursor.after == 12
    idle = cursor.advance({"events": [], "next": 40, "progress": 40})
    assert idle.events == [] and idle.progress == 40 and cursor.after == 40 == cursor.progress


@pytest.mark.parametrize(
    "answer",
    [
        {"events": [], "next": 5},  # behind the cursor
        {"events": [put(10, "p/a", "1")], "next": 12},  # not after the cursor
        {"events": [put(12, "p/a", "1"), put(11, "p/b", "1")], "next": 12},  # out of order
        {"events": [{"revision": 11, "type": "touch", "kv": kv("p/a", "1", 11, 11)}], "next": 11},
        {"events": []},  # no next
    ],
)
def test_a_malformed_answer_is_refused_and_the_cursor_stays(answer):
    cursor = WatchCursor(None, "p/", 10, None, None)
    with pytest.raises(hivekeeper.MalformedResponse):
        cursor.advance(answer)
    assert cursor.after == 10


@pytest.mark.parametrize(
    "args",
    [
        ("k", "p", 0, None, None),
        (None, None, 0, None, None),
        ("k", None, -1, None, None),
        ("k", None, 0, 0, None),
        ("k", None, 0, 1001, None),
        ("k", None, 0, None, 60_001),
    ],
)
def test_a_watch_of_bad_arguments_is_refused_before_sending(args):
    with pytest.raises(hivekeeper.ConfigError):
        WatchCursor(*args)


def test_the_cache_replays_events_after_a_paged_load_without_going_backwards():
    state = CacheState("p/")
    # The load's first page was read at 10, a later page saw p/b's put at 12.
    state.load(
        GetResult(
            10,
            [KeyValue("p/a", "1", 5, 5, 1), KeyValue("p/b", "new", 12, 12, 1)],
        )
    )
    events = [
        WatchEvent.from_wire(put(11, "p/b", "old")),
        WatchEvent.from_wire({"revision": 11, "type": "delete", "kv": kv("p/a", "1", 5, 5)}),
        WatchEvent.from_wire(put(12, "p/b", "new")),
    ]
    for event in events:
        state.apply(event, 12)
    state.caught_up(12)
    assert {k: v.value for k, v in state.kvs.items()} == {"p/b": "new"} and state.revision == 12
    # A reload after `compacted` replaces the whole map.
    state.load(GetResult(30, [KeyValue("p/c", "3", 29, 29, 1)]))
    assert list(state.kvs) == ["p/c"] and state.revision == 30 and state.loads == 2


def test_a_raw_watch_poll_request_waits_longer_than_its_wait_ms():
    from hivekeeper.request_loop import Patience

    config = config_from("a", None, {"request_timeout_ms": 1000, "request_deadline_ms": 5000})
    assert Patience.for_op(config, "watch.poll", 20_000) == Patience(21.0, 25.0)
    assert Patience.for_op(config, "watch.poll", None) == Patience(31.0, 35.0)


def delete(revision: int, key: str) -> Dict[str, Any]:
    return {"revision": revision, "type": "delete", "kv": kv(key, "up", 3, 3)}


def test_a_revision_in_fragments_is_polled_on_from_its_last_key_and_handed_out_whole():
    cursor = WatchCursor(None, "fleet/", 10, None, None)
    first = cursor.advance(
        {"events": [delete(12, "fleet/a"), delete(12, "fleet/b")], "next": 11, "next_key": "fleet/b"}
    )
    assert first.events == [] and first.next_key == "fleet/b"
    assert cursor.fields() == {"after": 11, "after_key": "fleet/b", "prefix": "fleet/"}
    # An answer to a resent poll repeating the fragment adds nothing twice.
    cursor.advance({"events": [delete(12, "fleet/b")], "next": 11, "next_key": "fleet/b"})
    last = cursor.advance(
        {"events": [delete(12, "fleet/c"), put(13, "fleet/d", "x")], "next": 13, "progress": 13}
    )
    assert [(e.revision, e.kv.key) for e in last.events] == [
        (12, "fleet/a"),
        (12, "fleet/b"),
        (12, "fleet/c"),
        (13, "fleet/d"),
    ]
    assert cursor.fields() == {"after": 13, "prefix": "fleet/"}
    with pytest.raises(hivekeeper.MalformedResponse):
        cursor.advance({"events": [delete(20, "fleet/z")], "next": 12, "next_key": "fleet/z"})
