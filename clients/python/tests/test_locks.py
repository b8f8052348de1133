"""FIFO locks against a real node: handover order, try-acquire, wait timeouts, fencing, and
the expiry of a killed holder's lease."""

from __future__ import annotations

import queue
import threading
import time

import pytest

import hivekeeper
from conftest import kill9, python_child, wait_for_waiters


def test_fifo_handover_between_python_agents(agents, names):
    lock = names("lock")
    holder, second, third = agents("a"), agents("b"), agents("c")
    granted: "queue.Queue[tuple]" = queue.Queue()

    def wait_for_lock(agent: hivekeeper.Agent, session: hivekeeper.Session) -> None:
        guard = session.lock(lock)
        granted.put((agent.agent_id, guard.token))
        time.sleep(0.05)
        guard.release()

    with (
        holder.session(ttl_ms=10_000) as s1,
        second.session(ttl_ms=10_000) as s2,
        third.session(ttl_ms=10_000) as s3,
    ):
        first = s1.lock(lock)
        threads = []
        # The second agent queues first, then the third: the queue is served in that order.
        for agent, session, waiting in ((second, s2, 1), (third, s3, 2)):
            thread = threading.Thread(target=wait_for_lock, args=(agent, session))
            thread.start()
            threads.append(thread)
            wait_for_waiters(holder, "lock", lock, waiting)
        waiters = holder.inspect("lock", lock).waiters
        assert [(w.agent, w.position) for w in waiters] == [
            (second.agent_id, 1),
            (third.agent_id, 2),
        ]
        assert granted.empty(), "nobody is granted while the lock is held"
        first.release()
        order = [granted.get(timeout=20), granted.get(timeout=20)]
        for thread in threads:
            thread.join(timeout=20)
        assert [agent for agent, _ in order] == [second.agent_id, third.agent_id]
        tokens = [first.token] + [token for _, token in order]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3, tokens


def test_try_acquire_raises_would_block_then_succeeds(agents, names):
    lock = names("lock")
    a, b = agents("a"), agents("b")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        held = sa.lock(lock, wait_ms=0)
        with pytest.raises(hivekeeper.WouldBlock) as refused:
            sb.lock(lock, wait_ms=0)
        assert refused.value.code == "would_block"
        assert a.inspect("lock", lock).waiters == [], "a try-acquire never queues"
        held.release()
        with sb.lock(lock, wait_ms=0) as guard:
            assert guard.token > held.token


def test_wait_timeout_raises_timeout_and_leaves_the_queue(agents, names):
    lock = names("lock")
    a, b = agents("a"), agents("b")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        with sa.lock(lock):
            started = time.monotonic()
            with pytest.raises(hivekeeper.Timeout) as ran_out:
                sb.lock(lock, wait_ms=300)
            assert ran_out.value.code == "timeout"
            # The service ends the wait no earlier than wait_ms (an upper bound would be a
            # timing assertion on a noisy machine).
            assert time.monotonic() - started >= 0.3
            assert a.inspect("lock", lock).waiters == []
        # Nothing was left behind: the lock is free for b now.
        with sb.lock(lock, wait_ms=0):
            pass


def test_fencing_tokens_refuse_a_stale_holder(agents, names):
    lock = names("lock")
    a, b = agents("a"), agents("b")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        old = sa.lock(lock)
        assert old.fence_check() == hivekeeper.FenceCheck(valid=True, current=old.token)
        old.release()
        assert a.fence_check(lock, old.token) == hivekeeper.FenceCheck(valid=False, current=0)
        with sb.lock(lock) as new:
            assert new.token > old.token
            assert b.fence_check(lock, old.token) == hivekeeper.FenceCheck(
                valid=False, current=new.token
            )
            assert b.fence_check(lock, new.token).valid
            # The same name as a semaphore is another resource: its own kind is checked.
            assert b.fence_check(lock, new.token, kind="sem") == hivekeeper.FenceCheck(
                valid=False, current=0
            )
            # A protected resource that remembers the highest token refuses the old holder.
            highest_seen = max(old.token, new.token)
            assert old.token < highest_seen


HOLDER = """
import sys, hivekeeper
broker, agent_id, lock = sys.argv[1:4]
agent = hivekeeper.Agent(agent_id, [broker])
session = agent.session(ttl_ms=1000)
guard = session.lock(lock)
print(guard.token, session.lease, flush=True)
import time
time.sleep(120)
"""


def test_a_killed_holders_lease_expires_and_the_waiter_gets_the_lock(node, agents, names):
    lock = names("lock")
    child = python_child(HOLDER, node.broker, names("killed"), lock)
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line, f"the holder printed nothing: {child.stderr.read() if child.stderr else ''}"
        dead_token, dead_lease = int(line.split()[0]), line.split()[1]
        waiter = agents("waiter")
        with waiter.session(ttl_ms=10_000) as session:
            got: "queue.Queue[hivekeeper.Guard]" = queue.Queue()
            thread = threading.Thread(target=lambda: got.put(session.lock(lock)))
            thread.start()
            wait_for_waiters(waiter, "lock", lock, 1)
            kill9(child)
            # SIGKILL: no revoke, no release. The lease expires one TTL after its last keepalive.
            guard = got.get(timeout=30)
            thread.join(timeout=5)
            assert guard.token > dead_token
            assert waiter.fence_check(lock, dead_token) == hivekeeper.FenceCheck(
                valid=False, current=guard.token
            )
            with pytest.raises(hivekeeper.LeaseNotFound):
                waiter.request("lease.keepalive", lease=dead_lease)
            guard.release()
    finally:
        if child.poll() is None:
            kill9(child)
