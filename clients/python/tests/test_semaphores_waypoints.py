"""Semaphore limits and waypoint conflicts against a real node."""

from __future__ import annotations

import queue
import threading

import pytest

import hivekeeper
from conftest import wait_for_waiters


def test_semaphore_never_exceeds_its_limit(agents, names):
    sem = names("chargers")
    a, b, c = agents("a"), agents("b"), agents("c")
    with (
        a.session(ttl_ms=10_000) as sa,
        b.session(ttl_ms=10_000) as sb,
        c.session(ttl_ms=10_000) as sc,
    ):
        first = sa.semaphore(sem, limit=3, permits=2)
        second = sb.semaphore(sem, limit=3, permits=1, wait_ms=0)
        assert second.token > first.token
        with pytest.raises(hivekeeper.WouldBlock):
            sc.semaphore(sem, limit=3, permits=1, wait_ms=0)
        with pytest.raises(hivekeeper.LimitMismatch) as mismatch:
            sc.semaphore(sem, limit=4, wait_ms=0)
        assert mismatch.value.code == "limit_mismatch"
        with pytest.raises(hivekeeper.BadRequest):
            sc.semaphore(sem, limit=3, permits=5, wait_ms=0)
        seen = a.inspect("sem", sem)
        assert seen.limit == 3
        assert sorted((h.agent, h.permits) for h in seen.holders) == sorted(
            [(a.agent_id, 2), (b.agent_id, 1)]
        )
        # A waiter for 2 permits queues until enough are given back.
        got: "queue.Queue[hivekeeper.Guard]" = queue.Queue()
        thread = threading.Thread(target=lambda: got.put(sc.semaphore(sem, limit=3, permits=2)))
        thread.start()
        wait_for_waiters(a, "sem", sem, 1)
        second.release()
        assert got.empty(), "1 free permit is not enough for a request of 2"
        first.release()
        third = got.get(timeout=20)
        thread.join(timeout=5)
        assert third.token > second.token
        assert c.fence_check(sem, third.token, kind="sem").valid
        third.release()


def test_waypoint_conflicts_by_name_and_by_cylinder(agents, names):
    pad, other = names("pad"), names("other")
    a, b = agents("a"), agents("b")
    lat, lon = 47.3769, 8.5417
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        held = sa.waypoint(pad, lat, lon, radius_m=10, alt_min_m=0, alt_max_m=100, wait_ms=0)
        # Same name: a conflict whatever the geometry.
        with pytest.raises(hivekeeper.WouldBlock):
            sb.waypoint(pad, wait_ms=0)
        # About 5.6 m away (0.00005 degrees of latitude) with radius 10: closer than 20 m and
        # the same altitude band.
        with pytest.raises(hivekeeper.WouldBlock):
            sb.waypoint(
                other, lat + 0.00005, lon, radius_m=10, alt_min_m=50, alt_max_m=150, wait_ms=0
            )
        # The same spot in a separate altitude band does not conflict.
        with sb.waypoint(
            other, lat, lon, radius_m=10, alt_min_m=100.5, alt_max_m=200, wait_ms=0
        ) as stacked:
            assert stacked.token > 0
        # About 111 m away does not conflict either.
        with sb.waypoint(other, lat + 0.001, lon, radius_m=10, wait_ms=0) as far:
            assert far.token > 0
        # Geometry without lat/lon is bad input, refused by the service.
        with pytest.raises(hivekeeper.BadRequest) as bad:
            sb.waypoint(names("nowhere"), radius_m=5, wait_ms=0)
        assert "lat" in bad.value.message
        # A waiter for the conflicting cylinder is granted once the holder releases.
        got: "queue.Queue[hivekeeper.Guard]" = queue.Queue()
        thread = threading.Thread(
            target=lambda: got.put(sb.waypoint(other, lat + 0.00005, lon, radius_m=10))
        )
        thread.start()
        wait_for_waiters(a, "waypoint", other, 1)
        held.release()
        granted = got.get(timeout=20)
        thread.join(timeout=5)
        assert granted.token > held.token
        granted.release()
