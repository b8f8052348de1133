"""Same-id retries: a request whose answer is lost with its connection is sent again under
the same id on the next one, and the service answers it without taking a second queue slot.
Also the backoff's full jitter, which spaces those retries."""

from __future__ import annotations

import queue
import random
import re
import threading

import hivekeeper
from conftest import FAST, eventually, wait_for_waiters


def test_a_queued_acquire_survives_a_lost_connection_under_the_same_id(agents, names, proxy):
    lock = names("lock")
    holder = agents("holder")
    with hivekeeper.Agent(names("waiter"), [proxy.broker], **FAST) as waiter:
        with holder.session(ttl_ms=10_000) as held_by, waiter.session(ttl_ms=10_000) as session:
            held = held_by.lock(lock)
            got: "queue.Queue[hivekeeper.Guard]" = queue.Queue()
            thread = threading.Thread(target=lambda: got.put(session.lock(lock)))
            thread.start()
            wait_for_waiters(holder, "lock", lock, 1)
            proxy.cut()
            eventually(
                "the waiter reconnected and resent its acquire",
                lambda: (
                    True
                    if waiter.stats().connects_total >= 2 and waiter.stats().resends_total >= 1
                    else None
                ),
            )
            # The acquire went out twice, on the two connections, under ONE id.
            with proxy.lock:
                sent = bytes(proxy.sent)
            ids = re.findall(rb'\{"id":"([^"]+)","op":"lock\.acquire"', sent)
            assert len(ids) >= 2 and len(set(ids)) == 1, ids
            # And it holds one queue slot.
            waiters = holder.inspect("lock", lock).waiters
            assert [(w.agent, w.position) for w in waiters] == [(waiter.agent_id, 1)]
            held.release()
            guard = got.get(timeout=20)
            thread.join(timeout=5)
            assert guard.token > held.token
            assert session.state is hivekeeper.SessionState.LIVE
            guard.release()


def test_backoff_bounds_double_to_the_cap_and_delays_are_fully_jittered():
    backoff = hivekeeper.Backoff(30, 2_000)
    bounds = [round(backoff.next_bound_s() * 1000) for _ in range(10)]
    assert bounds == [30, 60, 120, 240, 480, 960, 1920, 2000, 2000, 2000]
    backoff.reset()
    assert round(backoff.next_bound_s() * 1000) == 30
    # Full jitter: each delay uniform in [0, bound]; seeded, so the check is deterministic.
    rng = random.Random(7)
    delays = []
    for _ in range(400):
        jittered = hivekeeper.Backoff(30, 2_000, rng=rng)
        delays.append([jittered.next_delay_s() for _ in range(9)])
    for step in range(9):
        bound = min(2.0, 0.030 * 2**step)
        column = [run[step] for run in delays]
        assert all(0.0 <= d <= bound for d in column)
        assert min(column) < bound / 10, "full jitter reaches near zero"
        mean = sum(column) / len(column)
        assert 0.4 * bound < mean < 0.6 * bound, (step, mean, bound)


class Interrupted(Exception):
    """Raised inside a waiting thread, as Ctrl-C would be in the main one."""


def test_an_abandoned_acquire_releases_the_grant_that_arrives_later(agents, names):
    import ctypes

    lock = names("lock")
    holder, waiter = agents("holder"), agents("waiter")
    with holder.session(ttl_ms=10_000) as held_by, waiter.session(ttl_ms=10_000) as session:
        held = held_by.lock(lock)
        outcome: "queue.Queue[BaseException]" = queue.Queue()

        def wait() -> None:
            try:
                session.lock(lock)
            except BaseException as error:  # noqa: BLE001 - the test inspects it
                outcome.put(error)

        thread = threading.Thread(target=wait)
        thread.start()
        wait_for_waiters(holder, "lock", lock, 1)
        # The caller leaves while its acquire is queued at the service.
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(Interrupted)
        )
        assert isinstance(outcome.get(timeout=20), Interrupted)
        thread.join(timeout=5)
        assert waiter.stats().requests_abandoned_total == 1
        held.release()
        # The service grants the queued request; the client gives it back at once.
        eventually(
            "the abandoned grant is released",
            lambda: True if holder.inspect("lock", lock).holders == [] else None,
        )
        assert session.state is hivekeeper.SessionState.LIVE
        with session.lock(lock, wait_ms=0) as again:
            assert again.token > held.token


def test_a_link_that_answers_only_unavailable_is_left_after_a_quarter_second():
    """As the Rust SDK: a member cut off from the majority keeps its broker up and answers
    everything ``unavailable``; after 0.25 s of nothing else the agent leaves that broker."""
    from hivekeeper.connection import Shared

    link_client = object()
    shared = Shared(brokers_total=2)
    shared.link.ready, shared.link.epoch, shared.client = True, 3, link_client
    assert shared.note_unavailable(3, 10.0) is None
    assert shared.note_unavailable(3, 10.2) is None
    assert shared.note_unavailable(3, 10.25) is link_client
    # Counting starts afresh; another answer resets it; a new link (epoch) too.
    assert shared.note_unavailable(3, 10.3) is None
    shared.note_answered()
    assert shared.note_unavailable(3, 10.6) is None
    assert shared.note_unavailable(4, 10.9) is None
    # With one broker there is nowhere to go.
    alone = Shared(brokers_total=1)
    alone.link.ready, alone.link.epoch, alone.client = True, 1, link_client
    alone.note_unavailable(1, 0.0)
    assert alone.note_unavailable(1, 1.0) is None
