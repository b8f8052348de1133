"""The observer's decisions without I/O: which leaders a read and the answers of a watch on
``$election/{name}`` make, handovers folded, and whose agent an item names."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from hivekeeper import Leader
from hivekeeper.election import LeaderFollower, Mirror
from hivekeeper.kv import GetResult, KeyValue
from hivekeeper.watch import WatchEvent, WatchPage

KEY = "$election/gw"
#: The revisions of log entry `n`: n << 16, then one per further change (PROTOCOL.md 8.22).
E5, E6, E7, E9 = 5 << 16, 6 << 16, 7 << 16, 9 << 16


def key(value: str, token: int, mod: int) -> KeyValue:
    return KeyValue.from_wire(
        {"key": KEY, "value": value, "create_revision": token, "mod_revision": mod, "version": 1}
    )


def put(revision: int, value: str, token: int) -> WatchEvent:
    return WatchEvent(revision, "put", key(value, token, revision))


def delete(revision: int, value: str, token: int) -> WatchEvent:
    return WatchEvent(revision, "delete", key(value, token, token))


def page(events: List[WatchEvent], more: bool = False) -> WatchPage:
    """An answer; ``more``: the page was full, more events wait (no ``progress``)."""
    last = events[-1].revision if events else 0
    return WatchPage(events, last, None if more else last)


def read(revision: int, kv: Optional[KeyValue]) -> GetResult:
    return GetResult(revision=revision, kvs=[] if kv is None else [kv], next_after=None)


def states(follower: LeaderFollower, *pages: WatchPage) -> List[Mirror]:
    return [state for p in pages for state in follower.advance(p)]


def test_the_first_read_is_always_an_item_and_the_watch_starts_after_it():
    follower = LeaderFollower("gw")
    assert follower.key == KEY
    assert follower.load(read(E5 + 3, None)) == [None]
    assert follower.after == E5 + 3
    leading = LeaderFollower("gw")
    assert leading.load(read(E6, key("a:1", E5, E5))) == [("a:1", E5)]


def test_a_handover_in_one_answer_yields_the_new_leader_only():
    follower = LeaderFollower("gw")
    follower.load(read(E5, key("a:1", E5, E5)))
    handover = [delete(E6, "a:1", E5), put(E6 + 1, "b:1", E6 + 1)]
    assert states(follower, page(handover)) == [("b:1", E6 + 1)]


def test_a_handover_cut_between_two_answers_yields_no_none():
    follower = LeaderFollower("gw")
    follower.load(read(E5, key("a:1", E5, E5)))
    first = page([delete(E6, "a:1", E5)], more=True)
    assert follower.advance(first) == [], "held: the put of the same entry may follow"
    assert follower.advance(page([put(E6 + 1, "b:1", E6 + 1)])) == [("b:1", E6 + 1)]


def test_nobody_leading_after_a_whole_entry_is_a_none():
    follower = LeaderFollower("gw")
    follower.load(read(E5, key("a:1", E5, E5)))
    # The last answer: the resign left nobody leading.
    assert follower.advance(page([delete(E6, "a:1", E5)])) == [None]
    # A delete and a put of two entries: someone campaigned later.
    follower.load(read(E6, key("a:1", E5, E5)))
    resigned_then_won = [delete(E7, "a:1", E5), put(E9, "c:1", E9)]
    assert states(follower, page(resigned_then_won)) == [None, ("c:1", E9)]
    # A held delete whose next answer starts another entry.
    follower.advance(page([delete(E9 + (1 << 16), "c:1", E9)], more=True))
    later = 11 << 16
    assert follower.advance(page([put(later, "d:1", later)])) == [None, ("d:1", later)]


def test_a_proclaim_is_an_item_and_nothing_else_repeats():
    follower = LeaderFollower("gw")
    follower.load(read(E5, key("a:1", E5, E5)))
    assert follower.advance(page([put(E6, "a:2", E5)])) == [("a:2", E5)]
    assert follower.advance(page([put(E7, "a:2", E5)])) == [], "the same value again"
    # A reload (after compaction) shows only a change.
    assert follower.load(read(E9, key("a:2", E5, E7))) == []
    assert follower.load(read(E9, key("a:3", E5, E9))) == [("a:3", E5)]


def test_the_agent_comes_from_election_leader_while_the_token_leads():
    follower = LeaderFollower("gw")
    first = ("a:1", E5)
    assert follower.needs_agent(first)
    asked: Dict[str, Any] = {"leader": {"agent": "drone-a", "value": "a:1", "token": E5}}
    assert follower.hand_out(first, asked) == Leader("drone-a", "a:1", E5)
    # A proclaim keeps the agent without asking.
    assert not follower.needs_agent(("a:2", E5))
    assert follower.hand_out(("a:2", E5)) == Leader("drone-a", "a:2", E5)
    # Asked too late: another token leads now, so the agent is unknown.
    late = {"leader": {"agent": "drone-c", "value": "c:1", "token": E9}}
    assert follower.hand_out(("b:1", E6 + 1), late) == Leader(None, "b:1", E6 + 1)
    assert follower.hand_out(None) is None
    assert not follower.needs_agent(None)
