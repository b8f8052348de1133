"""hivekeeper.aio against a real node: the same semantics from asyncio, and cancellation.

Each test runs its own event loop (``asyncio.run``), so the suite needs no asyncio plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, TypeVar

import pytest

import hivekeeper
import hivekeeper.aio
from conftest import FAST

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(main(), 120))  # type: ignore[arg-type]


async def eventually_async(what: str, check: Callable[[], Awaitable[Optional[Any]]]) -> Any:
    deadline = time.monotonic() + 20
    while True:
        value = await check()
        if value is not None:
            return value
        assert time.monotonic() < deadline, f"not within 20 s: {what}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def aio_agents(node, names, *suffixes: str) -> AsyncIterator[List[hivekeeper.aio.Agent]]:
    """Connected asyncio agents on the shared node, closed at the end of the block."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                hivekeeper.aio.Agent(names(suffix), [node.broker], **FAST)
            )
            for suffix in suffixes
        ]


async def waiters(agent: hivekeeper.aio.Agent, name: str, count: int) -> None:
    async def enough() -> Optional[bool]:
        return True if len((await agent.inspect("lock", name)).waiters) >= count else None

    await eventually_async(f"{count} waiter(s) on {name}", enough)


def test_the_five_lines_and_fencing(node, names):
    async def main() -> None:
        async with hivekeeper.aio.Agent(names("drone"), brokers=[node.broker], **FAST) as agent:
            async with agent.session(ttl_ms=5000) as s:
                async with s.lock(names("pad"), wait_ms=2000) as g:
                    assert await g.fence_check() == hivekeeper.FenceCheck(True, g.token)
                    holders = (await agent.inspect("lock", names("pad"))).holders
                    assert [(h.agent, h.token) for h in holders] == [(agent.agent_id, g.token)]
                assert await agent.fence_check(names("pad"), g.token) == hivekeeper.FenceCheck(
                    False, 0
                )
            assert s.state is hivekeeper.SessionState.REVOKED

    run(main)


def test_fifo_handover_try_acquire_and_wait_timeout(node, names):
    lock = names("lock")

    async def main() -> None:
        async with aio_agents(node, names, "a", "b", "c") as (a, b, c):
            sa, sb, sc = [await x.session(ttl_ms=10_000) for x in (a, b, c)]
            held = await sa.lock(lock)
            with pytest.raises(hivekeeper.WouldBlock):
                await sb.lock(lock, wait_ms=0)
            with pytest.raises(hivekeeper.Timeout):
                await sb.lock(lock, wait_ms=200)
            second = asyncio.ensure_future(sb.lock(lock))
            await waiters(a, lock, 1)
            third = asyncio.ensure_future(sc.lock(lock))
            await waiters(a, lock, 2)
            await held.release()
            g2 = await second
            assert not third.done(), "the third waits behind the second"
            await g2.release()
            g3 = await third
            assert held.token < g2.token < g3.token
            await g3.release()
            for s in (sa, sb, sc):
                await s.revoke()

    run(main)


def test_a_cancelled_acquire_releases_the_grant_that_arrives_later(node, names):
    lock = names("lock")

    async def main() -> None:
        async with aio_agents(node, names, "holder", "waiter") as (holder, waiter):
            async with holder.session(ttl_ms=10_000) as hs, waiter.session(ttl_ms=10_000) as ws:
                held = await hs.lock(lock)
                task = asyncio.ensure_future(ws.lock(lock))
                await waiters(holder, lock, 1)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert waiter.stats().requests_abandoned_total == 1
                await held.release()

                async def released() -> Optional[bool]:
                    return True if (await holder.inspect("lock", lock)).holders == [] else None

                await eventually_async("the abandoned grant is released", released)
                async with ws.lock(lock, wait_ms=0) as again:
                    assert again.token > held.token

    run(main)


def test_semaphore_waypoint_and_errors(node, names):
    async def main() -> None:
        async with hivekeeper.aio.Agent(names("a"), [node.broker], **FAST) as a:
            async with a.session(ttl_ms=10_000) as s:
                async with s.semaphore(names("sem"), limit=2, permits=2):
                    # Another lease of the same agent is another holder.
                    async with a.session(ttl_ms=10_000) as other:
                        with pytest.raises(hivekeeper.WouldBlock):
                            await other.semaphore(names("sem"), limit=2, wait_ms=0)
                        with pytest.raises(hivekeeper.LimitMismatch):
                            await other.semaphore(names("sem"), limit=3, wait_ms=0)
                async with s.waypoint(names("pad"), 47.0, 8.0, radius_m=5, wait_ms=0) as g:
                    assert g.token > 0
                with pytest.raises(hivekeeper.NotHolder):
                    await a.request("lock.release", name=names("none"), lease=s.lease)
                with pytest.raises(hivekeeper.UnknownOp):
                    await a.request("lock.steal")
                async with s.lock(names("lock"), wait_ms=0):
                    with pytest.raises(hivekeeper.AlreadyHeld):
                        await s.lock(names("lock"), wait_ms=0)
        with pytest.raises(hivekeeper.ConfigError):
            hivekeeper.aio.Agent("bad/id", [node.broker])

    run(main)


def test_an_operator_revoke_ends_a_waiting_acquire(node, names):
    lock = names("lock")

    async def main() -> None:
        async with aio_agents(node, names, "a", "b") as (a, b):
            lost = []
            async with a.session(ttl_ms=10_000) as sa:
                held = await sa.lock(lock)
                sb = await b.session(ttl_ms=10_000, on_lost=lost.append)
                waiting = asyncio.ensure_future(sb.lock(lock))
                await waiters(a, lock, 1)
                await a.request("admin.revoke", lease=sb.lease)
                with pytest.raises((hivekeeper.SessionLost, hivekeeper.LeaseNotFound)):
                    await waiting
                assert await sb.wait_lost(timeout=10) is hivekeeper.SessionState.EXPIRED
                assert sb.lost.is_set()
                assert hivekeeper.SessionState.EXPIRED in lost
                await held.release()

    run(main)


def test_refused_credentials_end_the_connect_at_once(start_node):
    node = start_node("--auth")

    async def main() -> None:
        # The deadline is far beyond the suite's patience: only the final refusal ends it.
        with pytest.raises(hivekeeper.CredentialsRefused) as refused:
            await hivekeeper.aio.Agent.connect(
                "drone-9", [node.broker], secret="0" * 64, request_deadline_ms=600_000
            )
        assert str(refused.value) == (
            f"credentials refused by {node.broker}: bad username or password"
        )

    run(main)
