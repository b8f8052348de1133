"""Elections and barriers against a real node: a handover between two sessions, a leadership
lost to an operator's revoke, the leaders observed in order, a barrier of three, and the same
from asyncio."""

from __future__ import annotations

import asyncio
import queue
import re
import threading
from typing import Any, List, Optional

import pytest

import hivekeeper
import hivekeeper.aio
from conftest import FAST, WORKSPACE, bounded, python_child, wait_for_waiters


def test_handover_between_two_sessions(agents, names):
    election = names("gw")
    a, b = agents("a"), agents("b")
    won: "queue.Queue[hivekeeper.Leadership]" = queue.Queue()
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        assert a.leader(election) is None
        with sa.campaign(election, "10.0.0.1:7000") as first:
            assert a.leader(election) == hivekeeper.Leader(a.agent_id, "10.0.0.1:7000", first.token)
            assert first.fence_check() == hivekeeper.FenceCheck(True, first.token)
            revision = first.proclaim("10.0.0.1:7001")
            assert revision > first.token and first.value == "10.0.0.1:7001"
            assert a.kv.get(f"$election/{election}").value == "10.0.0.1:7001"
            with pytest.raises(hivekeeper.WouldBlock):
                sb.campaign(election, "10.0.0.2:7000", wait_ms=0)
            candidate = threading.Thread(
                target=lambda: won.put(sb.campaign(election, "10.0.0.2:7000"))
            )
            candidate.start()
            wait_for_waiters(a, "election", election, 1)
            inspection = a.inspect("election", election)
            assert [h.value for h in inspection.holders] == ["10.0.0.1:7001"]
            assert [w.value for w in inspection.waiters] == ["10.0.0.2:7000"]
            assert won.empty(), "nobody else leads while the first one does"
        # The block's end resigned: the candidate leads, with a later token.
        second = won.get(timeout=20)
        candidate.join(timeout=20)
        assert second.token > first.token
        assert a.leader(election) == hivekeeper.Leader(b.agent_id, "10.0.0.2:7000", second.token)
        assert a.fence_check(election, first.token, "election").valid is False
        # The deposed token can neither proclaim nor resign.
        with pytest.raises(hivekeeper.NotHolder):
            a.request("election.proclaim", name=election, token=first.token, value="x")
        second.resign()
        second.resign()  # a second resign does nothing
        assert a.leader(election) is None


def test_a_leadership_is_lost_when_an_operator_revokes_its_lease(agents, names):
    election = names("gw")
    leader_agent, operator = agents("leader"), agents("operator")
    session = leader_agent.session(ttl_ms=10_000)
    leadership = session.campaign(election, "here")
    assert not leadership.is_lost()
    assert leadership.wait_lost(0.1) is False
    operator.request("admin.revoke", lease=session.lease)
    assert leadership.wait_lost(20), "the session's end or election.lost tells the leader"
    assert leadership.deposed.wait(20), "election.lost names this token"
    assert operator.leader(election) is None
    with pytest.raises(hivekeeper.SessionLost):
        leadership.resign()
    with pytest.raises(hivekeeper.SessionLost):
        leadership.proclaim("still here?")


def test_observe_yields_the_leaders_in_order(agents, names):
    election = names("gw")
    a, b, watcher = agents("a"), agents("b"), agents("watcher")
    seen: "queue.Queue[Any]" = queue.Queue()
    observer = bounded(watcher.observe(election, wait_ms=1000), within_s=60)

    def follow() -> None:
        for leader in observer:
            seen.put(leader)
        seen.put("end")

    follower = threading.Thread(target=follow)
    follower.start()

    def next_item() -> Optional[hivekeeper.Leader]:
        item = seen.get(timeout=20)
        assert item != "end", "the observer ended early"
        return item  # type: ignore[no-any-return]

    try:
        assert next_item() is None, "nobody leads at first"
        with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
            first = sa.campaign(election, "a:1")
            assert next_item() == hivekeeper.Leader(a.agent_id, "a:1", first.token)
            first.proclaim("a:2")
            assert next_item() == hivekeeper.Leader(a.agent_id, "a:2", first.token)
            won: "queue.Queue[hivekeeper.Leadership]" = queue.Queue()
            candidate = threading.Thread(target=lambda: won.put(sb.campaign(election, "b:1")))
            candidate.start()
            wait_for_waiters(a, "election", election, 1)
            first.resign()
            second = won.get(timeout=20)
            candidate.join(timeout=20)
            # The handover: the new leader, with no None between the two.
            assert next_item() == hivekeeper.Leader(b.agent_id, "b:1", second.token)
            second.resign()
            assert next_item() is None
            assert seen.empty()
    finally:
        observer.close()
        follower.join(timeout=20)
    assert seen.get(timeout=5) == "end"


def test_a_barrier_of_three(agents, names):
    barrier = names("start")
    members = [agents(suffix) for suffix in ("a", "b", "c")]
    sessions = [agent.session(ttl_ms=10_000) for agent in members]
    entered: "queue.Queue[int]" = queue.Queue()
    left: "queue.Queue[int]" = queue.Queue()
    go_on = threading.Event()

    def round_trip(session: hivekeeper.Session) -> None:
        b = session.barrier(barrier, 3)
        entered.put(b.enter())
        assert b.entered
        go_on.wait(20)
        left.put(b.leave())
        assert not b.entered and b.generation is not None

    threads = [threading.Thread(target=round_trip, args=(s,)) for s in sessions[:2]]
    try:
        for thread in threads:
            thread.start()
        wait_for_waiters(members[0], "barrier", barrier, 2)
        inspection = members[0].inspect("barrier", barrier)
        assert inspection.count == 3 and inspection.holders == []
        assert entered.empty(), "nobody passes before the third arrives"
        last = sessions[2].barrier(barrier, 3)
        with pytest.raises(hivekeeper.BadRequest):
            sessions[2].barrier(barrier, 4).enter(wait_ms=0)
        generation = last.enter()
        assert sorted([entered.get(timeout=20), entered.get(timeout=20)]) == [generation] * 2
        assert members[0].fence_check(barrier, generation, "barrier").valid
        with pytest.raises(hivekeeper.AlreadyHeld):
            last.enter()
        # The others have not left: a leave that may not wait has not left either.
        with pytest.raises(hivekeeper.WouldBlock):
            last.leave(wait_ms=0)
        assert last.entered
        go_on.set()
        assert last.leave() == generation
        assert [left.get(timeout=20), left.get(timeout=20)] == [generation] * 2
        assert not members[0].fence_check(barrier, generation, "barrier").valid
    finally:
        go_on.set()
        for thread in threads:
            thread.join(timeout=20)
        for session in sessions:
            session.revoke()


def test_elections_and_barriers_from_asyncio(node, names):
    async def main() -> None:
        election, barrier = names("gw"), names("start")
        async with hivekeeper.aio.Agent(names("a"), [node.broker], **FAST) as a:
            async with hivekeeper.aio.Agent(names("b"), [node.broker], **FAST) as b:
                async with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
                    observer = b.observe(election, wait_ms=1000)
                    seen: List[Optional[hivekeeper.Leader]] = [await observer.__anext__()]
                    async with sa.campaign(election, "a:1") as first:
                        seen.append(await observer.__anext__())
                        candidate = asyncio.ensure_future(sb.campaign(election, "b:1"))
                        while not (await a.inspect("election", election)).waiters:
                            await asyncio.sleep(0.05)
                    second = await asyncio.wait_for(candidate, 20)
                    seen.append(await observer.__anext__())
                    assert await second.wait_lost(0.05) is False
                    await second.resign()
                    seen.append(await observer.__anext__())
                    observer.close()
                    assert seen == [
                        None,
                        hivekeeper.Leader(a.agent_id, "a:1", first.token),
                        hivekeeper.Leader(b.agent_id, "b:1", second.token),
                        None,
                    ]
                    # A barrier of two, both from this loop.
                    ba, bb = sa.barrier(barrier, 2), sb.barrier(barrier, 2)
                    generations = await asyncio.gather(ba.enter(), bb.enter())
                    assert generations[0] == generations[1]
                    assert await asyncio.gather(ba.leave(), bb.leave()) == generations

    asyncio.run(asyncio.wait_for(main(), 120))


def test_the_readme_examples_run(node):
    readme = (WORKSPACE / "clients" / "python" / "README.md").read_text()
    sections = re.search(r"^## Elections\n(.*?)^## 4D airspace", readme, re.S | re.M)
    assert sections is not None
    examples = re.findall(r"```python\n(.*?)```", sections.group(1), re.S)
    assert len(examples) == 3
    for example in examples:
        child = python_child(example.replace("127.0.0.1:1883", node.broker))
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, f"{example}\n{out}\n{err}"
        assert out, example
