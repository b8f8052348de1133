"""Read-write locks, multi-locks, max-hold and lock-delay against a real node, threaded and
asyncio (PROTOCOL.md sections 6.1 and 8.4 to 8.5.3)."""

from __future__ import annotations

import asyncio
import queue
import re
import threading
import time
from typing import Callable, List

import pytest

import hivekeeper
import hivekeeper.aio
from conftest import WORKSPACE, eventually, python_child, wait_for_waiters
from hivekeeper import ask as asks
from test_aio import aio_agents, run, waiters


def in_background(acquire: Callable[[], hivekeeper.Guard]) -> "queue.Queue[hivekeeper.Guard]":
    """Runs ``acquire`` on a thread; its guard arrives on the queue when granted."""
    granted: "queue.Queue[hivekeeper.Guard]" = queue.Queue()
    threading.Thread(target=lambda: granted.put(acquire()), daemon=True).start()
    return granted


def holder_tokens(agent: hivekeeper.Agent, name: str) -> List[int]:
    return sorted(h.token for h in agent.inspect("lock", name).holders)


def test_the_wire_of_a_lock_is_unchanged_and_modes_and_bounds_are_sent_only_when_asked():
    # A plain lock sends what it sent before read-write locks: no mode, no bound.
    assert {k: v for k, v in asks.lock("x", False, None).fields.items() if v is not None} == {}
    shared = asks.lock("x", True, 500)
    assert shared.target == {"name": "x"}
    assert shared.fields == {"max_hold_ms": 500, "mode": "shared"}
    multi = asks.lock_all(["b", "a"], False, None)
    assert multi.op == "lock.acquire_all" and multi.target == {"names": ["b", "a"]}
    assert multi.claims == (("lock", "b"), ("lock", "a"))
    assert multi.release_request("L", 7) == {
        "op": "lock.release_all",
        "names": ["b", "a"],
        "lease": "L",
    }
    with pytest.raises(hivekeeper.BadRequest):
        asks.lock_all("pad-1", False, None)
    with pytest.raises(hivekeeper.BadRequest):
        asks.lock_all([], False, None)


def test_read_locks_coexist_a_writer_waits_for_them_and_a_later_reader_for_the_writer(
    agents, names
):
    lock = names("lock")
    r1, r2, w, r3 = agents("r1"), agents("r2"), agents("w"), agents("r3")
    with (
        r1.session(ttl_ms=10_000) as s1,
        r2.session(ttl_ms=10_000) as s2,
        w.session(ttl_ms=10_000) as sw,
        r3.session(ttl_ms=10_000) as s3,
    ):
        first, second = s1.read_lock(lock, wait_ms=0), s2.read_lock(lock, wait_ms=0)
        assert first.mode == second.mode == "shared"
        assert first.token != second.token
        assert holder_tokens(r1, lock) == sorted([first.token, second.token])
        writer = in_background(lambda: sw.write_lock(lock))
        wait_for_waiters(r1, "lock", lock, 1)
        # Strict FIFO: a reader behind a queued writer waits, though only readers hold it.
        reader = in_background(lambda: s3.read_lock(lock))
        wait_for_waiters(r1, "lock", lock, 2)
        first.release()
        assert writer.empty(), "the writer waits for every reader"
        second.release()
        written = writer.get(timeout=20)
        assert written.mode == "exclusive"
        assert holder_tokens(r1, lock) == [written.token]
        assert reader.empty(), "the reader queued behind the writer waits for it"
        written.release()
        read = reader.get(timeout=20)
        assert read.token > written.token > second.token


def test_downgrade_keeps_the_token_and_lets_a_queued_reader_in(agents, names):
    lock = names("lock")
    a, b = agents("a"), agents("b")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        with sa.write_lock(lock) as written:
            reader = in_background(lambda: sb.read_lock(lock))
            wait_for_waiters(a, "lock", lock, 1)
            written.downgrade()
            assert written.mode == "shared"
            read = reader.get(timeout=20)
            assert holder_tokens(a, lock) == sorted([written.token, read.token])
            assert written.fence_check() == hivekeeper.FenceCheck(True, read.token)
            # Only an exclusive single lock downgrades: nothing is sent otherwise.
            for not_exclusive in (written, read):
                with pytest.raises(hivekeeper.BadRequest, match="downgrade"):
                    not_exclusive.downgrade()
            read.release()
        with sa.semaphore(names("sem"), limit=2) as permits:
            with pytest.raises(hivekeeper.BadRequest, match="downgrade"):
                permits.downgrade()


def test_lock_all_holds_every_name_with_one_token_and_its_release_frees_them_all(agents, names):
    locks = [names("bay-1"), names("bay-2"), names("bay-3")]
    a, b = agents("a"), agents("b")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        with sa.lock_all(locks) as multi:
            assert multi.is_multi_lock and multi.names == tuple(locks)
            for name in locks:
                assert multi.fence_check(name) == hivekeeper.FenceCheck(True, multi.token)
                assert holder_tokens(b, name) == [multi.token]
                with pytest.raises(hivekeeper.WouldBlock):
                    sb.read_lock(name, wait_ms=0)
            # The session holds each of them: a second guard on one would release it.
            with pytest.raises(hivekeeper.AlreadyHeld):
                sa.lock(locks[1], wait_ms=0)
            # Queued as a unit behind it, in another order.
            waiting = in_background(lambda: sb.lock_all(list(reversed(locks)), shared=True))
            wait_for_waiters(a, "lock", locks[0], 1)
        # Leaving the block sent one lock.release_all: the waiting multi-lock has them all.
        after = waiting.get(timeout=20)
        assert after.token > multi.token and after.mode == "shared"
        for name in locks:
            assert holder_tokens(a, name) == [after.token]
        after.release()
        for name in locks:
            with sa.lock(name, wait_ms=0):
                pass


def test_max_hold_ends_the_guard_with_reason_max_hold_and_the_session_lives_on(agents, names):
    lock, sem, bays = names("lock"), names("sem"), [names("bay-1"), names("bay-2")]
    a, b = agents("a"), agents("b")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        with sa.lock(lock, max_hold_ms=300) as held:
            assert held.max_hold_ms == 300
            waiting = in_background(lambda: sb.lock(lock))
            assert held.wait_ended(timeout=20) == hivekeeper.END_MAX_HOLD
            assert held.is_lost() and sa.state is hivekeeper.SessionState.LIVE
            # The next waiter was granted in the entry that ended the hold.
            assert waiting.get(timeout=20).token > held.token
            with pytest.raises(hivekeeper.NotHolder, match="max_hold"):
                held.downgrade()
        # The end of the block sent nothing: the hold was gone. The name is free to claim.
        with pytest.raises(hivekeeper.WouldBlock):
            sa.lock(lock, wait_ms=0)
        permits = sa.semaphore(sem, limit=1, max_hold_ms=200)
        assert permits.wait_ended(timeout=20) == hivekeeper.END_MAX_HOLD
        with pytest.raises(hivekeeper.NotHolder):
            permits.release()
        multi = sa.lock_all(bays, max_hold_ms=200)
        assert multi.wait_ended(timeout=20) == hivekeeper.END_MAX_HOLD
        with sa.lock_all(bays, wait_ms=0) as again:
            assert again.token > multi.token


def test_a_guard_ends_with_its_lease_and_the_lock_delay_holds_the_lock_back(agents, names):
    lock = names("lock")
    a, b, operator = agents("a"), agents("b"), agents("operator")
    with a.session(ttl_ms=10_000, lock_delay_ms=1_500) as sa, b.session(ttl_ms=10_000) as sb:
        assert sa.lock_delay_ms == 1_500
        held = sa.lock(lock)
        revoked_at = time.monotonic()
        operator.request("admin.revoke", lease=sa.lease)
        assert held.wait_ended(timeout=20) == hivekeeper.END_LEASE
        eventually("the lease's end", lambda: True if not holder_tokens(b, lock) else None)
        with pytest.raises(hivekeeper.WouldBlock, match="delay"):
            sb.lock(lock, wait_ms=0)
        with sb.lock(lock) as next_holder:
            # The delay counts from the lease's end, after the revoke was sent; a generous
            # bound, not a timing measurement.
            assert time.monotonic() - revoked_at >= 1.0
            assert next_holder.token > held.token


def test_asyncio_read_locks_a_queued_writer_and_a_reader_behind_it(node, names):
    lock = names("lock")

    async def main() -> None:
        async with aio_agents(node, names, "r1", "r2", "w", "r3") as agents_:
            sessions = [await agent.session(ttl_ms=10_000) for agent in agents_]
            s1, s2, sw, s3 = sessions
            first, second = await s1.read_lock(lock), await s2.read_lock(lock, wait_ms=0)
            writer = asyncio.ensure_future(sw.write_lock(lock))
            await waiters(agents_[0], lock, 1)
            reader = asyncio.ensure_future(s3.read_lock(lock))
            await waiters(agents_[0], lock, 2)
            await first.release()
            await second.release()
            written = await writer
            assert written.mode == "exclusive" and not reader.done()
            await written.release()
            assert (await reader).token > written.token
            for session in sessions:
                await session.revoke()

    run(main)


def test_asyncio_downgrade_lets_a_queued_reader_in_with_the_same_token(node, names):
    lock = names("lock")

    async def main() -> None:
        async with aio_agents(node, names, "a", "b") as (a, b):
            async with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
                async with sa.write_lock(lock) as written:
                    reader = asyncio.ensure_future(sb.read_lock(lock))
                    await waiters(a, lock, 1)
                    token = written.token
                    await written.downgrade()
                    read = await reader
                    assert written.token == token and written.mode == "shared"
                    holders = (await a.inspect("lock", lock)).holders
                    assert sorted(h.token for h in holders) == sorted([token, read.token])
                    with pytest.raises(hivekeeper.BadRequest):
                        await written.downgrade()
                    await read.release()

    run(main)


def test_asyncio_lock_all_with_one_token_released_together(node, names):
    locks = [names("bay-1"), names("bay-2")]

    async def main() -> None:
        async with aio_agents(node, names, "a", "b") as (a, b):
            async with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
                async with sa.lock_all(locks) as multi:
                    for name in locks:
                        assert await multi.fence_check(name) == hivekeeper.FenceCheck(
                            True, multi.token
                        )
                    with pytest.raises(hivekeeper.WouldBlock):
                        await sb.lock(locks[1], wait_ms=0)
                async with sb.lock_all(locks, wait_ms=0) as after:
                    assert after.token > multi.token

    run(main)


def test_asyncio_max_hold_ends_the_guard(node, names):
    lock = names("lock")

    async def main() -> None:
        async with aio_agents(node, names, "a") as (a,):
            async with a.session(ttl_ms=10_000) as sa:
                async with sa.read_lock(lock, max_hold_ms=200) as held:
                    assert await held.wait_ended(timeout=20) == hivekeeper.END_MAX_HOLD
                    assert held.is_lost() and sa.state is hivekeeper.SessionState.LIVE
                async with sa.lock(lock, wait_ms=0) as again:
                    assert again.token > held.token

    run(main)


def test_the_readme_example_runs(node):
    readme = (WORKSPACE / "clients" / "python" / "README.md").read_text()
    section = re.search(r"^## Read-write locks(.*?)^## Keys and watches", readme, re.S | re.M)
    assert section is not None
    (example,) = re.findall(r"```python\n(.*?)```", section.group(1), re.S)
    child = python_child(example.replace("127.0.0.1:1883", node.broker))
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, f"{example}\n{out}\n{err}"
    assert "bays" in out, out
