"""Sessions: revoke releases everything, jeopardy and the way back to live, expiry events."""

from __future__ import annotations

import queue
import signal
import time

import pytest

import hivekeeper
from conftest import FAST, eventually


def test_revoking_a_session_releases_what_it_holds(agents, names):
    a, b = agents("a"), agents("b")
    lock, sem = names("lock"), names("sem")
    states: "queue.Queue[hivekeeper.SessionState]" = queue.Queue()
    with b.session(ttl_ms=10_000) as sb:
        with a.session(ttl_ms=10_000, on_lost=states.put) as sa:
            sa.lock(lock)
            sa.semaphore(sem, limit=1)
            assert not sa.lost.is_set()
        assert sa.state is hivekeeper.SessionState.REVOKED
        assert sa.lost.is_set()
        assert states.get(timeout=5) is hivekeeper.SessionState.REVOKED
        with sb.lock(lock, wait_ms=0), sb.semaphore(sem, limit=1, wait_ms=0):
            pass


def test_an_operator_revoke_expires_the_session(agents, names):
    a, operator = agents("a"), agents("operator")
    with a.session(ttl_ms=10_000) as session:
        guard = session.lock(names("lock"))
        operator.request("admin.revoke", lease=session.lease)
        assert session.wait_lost(timeout=10) is hivekeeper.SessionState.EXPIRED
        assert guard.is_lost()
        with pytest.raises(hivekeeper.SessionLost):
            session.lock(names("other"), wait_ms=0)


def test_jeopardy_then_live_again_when_keepalives_get_through(start_node, names):
    node = start_node()
    states: "queue.Queue[hivekeeper.SessionState]" = queue.Queue()
    # Deadline = last acknowledged keepalive's send time + 8000 - 3900 ms, keepalives every
    # second. A node stopped for 5.5 s puts the session in jeopardy (3.1 to 4.1 s after the
    # stop) and is resumed 1.5 s or more before the service could expire the lease.
    with hivekeeper.Agent(
        names("drone"),
        [node.broker],
        **{
            **FAST,
            "keepalive_margin_ms": 3_900,
            "keepalive_every_ms": 1_000,
            "mqtt_keepalive_s": 30,
        },
    ) as agent:
        with agent.session(ttl_ms=8_000, on_lost=states.put) as session:
            guard = session.lock(names("pad"))
            time.sleep(1.5)  # a keepalive or two acknowledged
            stopped_at = time.monotonic()
            node.signal(signal.SIGSTOP)
            try:
                seen = session.wait_lost(timeout=10)
                flagged = session.lost.is_set() and guard.is_lost() and guard.lost.is_set()
                # Resumed 5.5 s after the stop, however late the loss was noticed.
                time.sleep(max(0.0, stopped_at + 5.5 - time.monotonic()))
            finally:
                node.signal(signal.SIGCONT)
            assert seen is hivekeeper.SessionState.JEOPARDY
            assert flagged, "in jeopardy, session.lost is set and the guard reports lost"
            assert states.get(timeout=1) is hivekeeper.SessionState.JEOPARDY
            eventually(
                "the session is live again",
                lambda: True if session.state is hivekeeper.SessionState.LIVE else None,
            )
            assert not session.lost.is_set()
            # The lease lived throughout: the hold and its token are intact.
            assert guard.fence_check() == hivekeeper.FenceCheck(valid=True, current=guard.token)
            guard.release()


def test_events_reach_the_handlers(agents, names):
    a, operator = agents("a"), agents("operator")
    events: "queue.Queue[dict]" = queue.Queue()
    a.add_event_handler(events.put)
    session = a.session(ttl_ms=10_000)
    guard = session.lock(names("lock"))
    operator.request("admin.revoke", lease=session.lease)
    seen = [events.get(timeout=10), events.get(timeout=10)]
    assert sorted(seen, key=lambda e: e["event"]) == [
        {"event": "lease.revoked", "lease": session.lease},
        {"event": "lock.lost", "name": names("lock"), "token": guard.token},
    ]


def test_closing_the_agent_revokes_its_sessions(agents, names, node):
    observer = agents("observer")
    agent = hivekeeper.Agent(names("closing"), [node.broker], **FAST)
    session = agent.session(ttl_ms=30_000)
    session.lock(names("lock"))

    def live_leases() -> set:
        return {lease["lease"] for lease in observer.request("admin.leases")["leases"]}

    assert session.lease in live_leases()
    agent.close()
    assert session.state is hivekeeper.SessionState.REVOKED
    assert session.lease not in live_leases()
    with observer.session(ttl_ms=10_000) as other, other.lock(names("lock"), wait_ms=0):
        pass
    with pytest.raises(hivekeeper.Disconnected):
        agent.request("inspect", kind="lock", name=names("lock"))


def test_keepalives_hold_a_short_lease_through_several_ttls(agents, names):
    agent = agents("a")
    with agent.session(ttl_ms=1_500) as session:
        guard = session.lock(names("lock"))
        # Three TTLs: without keepalives (every TTL/3) the lease would have expired twice.
        lost = session.wait_lost(timeout=4.5)
        assert lost is None, f"the session was lost: {lost}"
        assert guard.fence_check() == hivekeeper.FenceCheck(valid=True, current=guard.token)
