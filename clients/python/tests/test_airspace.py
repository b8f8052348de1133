"""4D airspace against a real node: time windows, routes granted all or nothing, amend,
priority with preemption and its vacate deadline, and ``airspace.query`` paging.

Each test flies at a spot of its own (``spot``) so that no two tests' reservations can
conflict on the shared node; windows start a minute or more ahead, so none ends by itself
while a test runs.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from typing import Callable, Tuple

import pytest

import hivekeeper
from conftest import FAST, eventually, wait_for_waiters
from hivekeeper import Area, Conflict, Preempted, Volume

#: Metres of latitude per degree, near enough: 0.001 degrees is about 111 m, so two volumes
#: of radius 50 m that far apart do not conflict.
LEG_DEG = 0.001
#: The service's default `reservation_vacate_ms`.
VACATE_MS = 5_000


def spot(index: int) -> Tuple[float, float]:
    """A point of this file's test number ``index``, far (11 km) from every other's."""
    return (46.0 + index * 0.1, 8.5)


def now_ms() -> int:
    """UTC ms since the Unix epoch: the node runs on this machine's clock."""
    return int(time.time() * 1000)


def volume(lat: float, lon: float, start_ms: int, end_ms: int, radius_m: float = 50.0) -> Volume:
    """A cylinder of ``radius_m`` from the ground to 120 m during ``[start_ms, end_ms)``."""
    return Volume(lat, lon, radius_m, 0.0, 120.0, start_ms, end_ms)


def in_thread(call: Callable[[], object]) -> "queue.Queue[object]":
    """Runs ``call`` on a thread; its result (or exception) arrives on the queue."""
    outcome: "queue.Queue[object]" = queue.Queue()

    def run() -> None:
        try:
            outcome.put(call())
        except BaseException as error:  # noqa: BLE001 - handed to the test to assert on
            outcome.put(error)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def granted(waiting: "queue.Queue[object]", timeout_s: float = 20) -> hivekeeper.Guard:
    """The guard an acquire run by :func:`in_thread` returned; what it raised instead fails
    the test."""
    outcome = waiting.get(timeout=timeout_s)
    assert isinstance(outcome, hivekeeper.Guard), outcome
    return outcome


def test_a_future_window_is_granted_now_and_only_crossing_windows_wait(agents, names):
    lat, lon = spot(1)
    a, b = agents("a"), agents("b")
    t0 = now_ms()
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        area = dict(lat=lat, lon=lon, radius_m=50, alt_min_m=0, alt_max_m=120)
        # A slot a minute from now is granted now, with its token.
        slot = sa.waypoint(
            names("slot-a"), **area, start_ms=t0 + 60_000, end_ms=t0 + 120_000, wait_ms=0
        )
        assert slot.token > 0
        holders = a.inspect("waypoint", slot.name).holders
        assert [(h.agent, h.token, h.start_ms, h.end_ms) for h in holders] == [
            (a.agent_id, slot.token, t0 + 60_000, t0 + 120_000)
        ]
        assert holders[0].area == Area(lat, lon, 50.0, 0.0, 120.0)
        # The same airspace in a crossing window: would_block.
        crossing = names("slot-b")
        with pytest.raises(hivekeeper.WouldBlock) as refused:
            sb.waypoint(crossing, **area, start_ms=t0 + 90_000, end_ms=t0 + 150_000, wait_ms=0)
        assert refused.value.code == "would_block"
        # A window that starts where the first ends does not cross it (half-open windows).
        later = sb.waypoint(
            names("slot-c"), **area, start_ms=t0 + 120_000, end_ms=t0 + 180_000, wait_ms=0
        )
        assert later.token > slot.token
        # The crossing window waits in the queue and is granted when the slot is released.
        waiting = in_thread(
            lambda: sb.waypoint(crossing, **area, start_ms=t0 + 90_000, end_ms=t0 + 100_000)
        )
        wait_for_waiters(a, "waypoint", crossing, 1)
        waiter = a.inspect("waypoint", crossing).waiters[0]
        assert (waiter.agent, waiter.position, waiter.start_ms, waiter.end_ms) == (
            b.agent_id,
            1,
            t0 + 90_000,
            t0 + 100_000,
        )
        assert waiting.empty()
        slot.release()
        crossed = granted(waiting)
        assert crossed.token > later.token > slot.token
        # Windows the service refuses, each saying why.
        with pytest.raises(hivekeeper.BadRequest) as empty:
            sb.waypoint(names("empty"), **area, start_ms=t0 + 70_000, end_ms=t0 + 70_000)
        assert empty.value.message == (
            "waypoint.reserve: the window is empty: "
            f"`end_ms` ({t0 + 70_000}) is not after `start_ms` ({t0 + 70_000})"
        )
        with pytest.raises(hivekeeper.BadRequest) as past:
            sb.waypoint(names("past"), **area, start_ms=t0 - 20_000, end_ms=t0 - 10_000)
        assert re.fullmatch(
            r"waypoint\.reserve: the window is in the past: "
            rf"`end_ms` \({t0 - 10_000}\) is not after the entry's time \(\d+\)",
            past.value.message,
        ), past.value.message


def test_window_and_priority_are_sent_only_when_given(names, proxy):
    lat, lon = spot(2)
    with hivekeeper.Agent(names("a"), [proxy.broker], **FAST) as a:
        with a.session(ttl_ms=10_000) as s:
            plain = s.waypoint(names("plain"), lat, lon, radius_m=5, wait_ms=0)
            t0 = now_ms()
            timed = s.waypoint(
                names("timed"),
                lat + LEG_DEG,
                lon,
                radius_m=5,
                wait_ms=0,
                start_ms=t0 + 60_000,
                end_ms=t0 + 120_000,
                priority=0,
            )
            assert timed.token > plain.token
            assert (plain.priority, timed.priority) == (0, 0)
    with proxy.lock:
        sent = bytes(proxy.sent)
    reserves = re.findall(rb'\{"id":"[^"]+","op":"waypoint\.reserve"[^}]*\}', sent)
    assert len(reserves) == 2, reserves
    assert b'"start_ms"' not in reserves[0] and b'"end_ms"' not in reserves[0]
    assert b'"priority"' not in reserves[0]
    assert (
        f'"start_ms":{t0 + 60_000},"end_ms":{t0 + 120_000},"priority":0'.encode() in (reserves[1])
    )


def test_a_route_is_granted_all_or_nothing_and_queues_as_a_unit(agents, names):
    lat, lon = spot(3)
    a, b = agents("a"), agents("b")
    t0 = now_ms()
    first = volume(lat, lon, t0 + 60_000, t0 + 120_000)
    second = volume(lat + LEG_DEG, lon, t0 + 120_000, t0 + 180_000)
    route = names("route")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        # Another drone holds the second leg's airspace at that time.
        blocker = sa.waypoint(
            names("blocker"),
            lat + LEG_DEG,
            lon,
            radius_m=20,
            start_ms=t0 + 150_000,
            end_ms=t0 + 160_000,
            wait_ms=0,
        )
        with pytest.raises(hivekeeper.WouldBlock) as refused:
            sb.route(route, [first, second], wait_ms=0)
        assert refused.value.message == (
            f'route "{route}" conflicts with a held or earlier waiting reservation'
        )
        # Nothing of it is held: the free first leg was not taken either.
        assert a.airspace_query(volume=first).conflicts == []
        assert a.inspect("waypoint", route).holders == []
        # Queued as a unit (plain dicts work as volumes too), granted when the blocker goes.
        waiting = in_thread(lambda: sb.route(route, [first.to_wire(), second.to_wire()]))
        wait_for_waiters(a, "waypoint", route, 1)
        [waiter] = a.inspect("waypoint", route).waiters
        assert (waiter.agent, waiter.position, waiter.volumes) == (b.agent_id, 1, [first, second])
        assert a.airspace_query(volume=first).conflicts == [], "a waiter holds nothing"
        blocker.release()
        guard = granted(waiting)
        assert guard.token > blocker.token
        assert (guard.kind, guard.name, guard.is_route, guard.volumes) == (
            "waypoint",
            route,
            True,
            [first, second],
        )
        [holder] = a.inspect("waypoint", route).holders
        assert (holder.agent, holder.token, holder.volumes) == (
            b.agent_id,
            guard.token,
            [first, second],
        )
        assert b.fence_check(route, guard.token, kind="waypoint") == hivekeeper.FenceCheck(
            True, guard.token
        )
        # A second acquire of the route's name in this session is refused locally.
        with pytest.raises(hivekeeper.AlreadyHeld):
            sb.waypoint(route, wait_ms=0)
        guard.release()
        assert a.inspect("waypoint", route).holders == []
        assert b.fence_check(route, guard.token, kind="waypoint").valid is False


def test_amend_keeps_the_token_or_keeps_the_old_route(agents, names):
    lat, lon = spot(4)
    a, b = agents("a"), agents("b")
    t0 = now_ms()
    legs = [
        volume(lat, lon, t0 + 60_000, t0 + 120_000),
        volume(lat + LEG_DEG, lon, t0 + 120_000, t0 + 180_000),
    ]
    route = names("route")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        guard = sb.route(route, legs, wait_ms=0)
        [before] = a.inspect("waypoint", route).holders
        # A delayed flight: the second leg a minute longer. Granted at once, same token.
        delayed = [legs[0], volume(lat + LEG_DEG, lon, t0 + 120_000, t0 + 240_000)]
        guard.amend(delayed)
        assert guard.volumes == delayed
        [after] = a.inspect("waypoint", route).holders
        assert (after.token, after.since_ms, after.volumes) == (
            guard.token,
            before.since_ms,
            delayed,
        )
        # Another drone holds a third leg's airspace: the amend is refused, the route kept.
        third_spot = (lat + 2 * LEG_DEG, lon)
        sa.waypoint(
            names("blocker"),
            *third_spot,
            radius_m=20,
            start_ms=t0 + 250_000,
            end_ms=t0 + 260_000,
            wait_ms=0,
        )
        with pytest.raises(hivekeeper.WouldBlock) as refused:
            guard.amend([*delayed, volume(*third_spot, t0 + 240_000, t0 + 300_000)])
        assert refused.value.message == (
            f'route "{route}": the new volumes conflict with a held or earlier waiting '
            "reservation; the old route is kept"
        )
        assert guard.volumes == delayed
        [kept] = a.inspect("waypoint", route).holders
        assert (kept.token, kept.volumes) == (guard.token, delayed)
        assert a.fence_check(route, guard.token, kind="waypoint").valid
        # An amend may change the priority; absent, it restates the guard's.
        guard.amend(delayed, priority=1)
        assert guard.priority == 1
        guard.amend(delayed)
        [restated] = a.inspect("waypoint", route).holders
        assert (restated.token, restated.priority, guard.priority) == (guard.token, 1, 1)
        # Only a route amends.
        lock = sb.lock(names("lock"), wait_ms=0)
        with pytest.raises(hivekeeper.BadRequest) as not_a_route:
            lock.amend(delayed)
        assert not_a_route.value.message == f"route.amend: the lock {lock.name!r} is not a route"
        with pytest.raises(hivekeeper.BadRequest):
            guard.amend(delayed[0])  # type: ignore[arg-type]  # one volume, not a list
        guard.release()
        with pytest.raises(hivekeeper.NotHolder):
            guard.amend(delayed)


def test_an_emergency_route_preempts_a_routine_holder_that_releases(agents, names):
    lat, lon = spot(5)
    a, b = agents("survey"), agents("medevac")
    t0 = now_ms()
    survey, medevac = names("survey"), names("medevac")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        routine = sa.route(survey, [volume(lat, lon, t0 + 60_000, t0 + 600_000)], wait_ms=0)
        assert routine.priority == 0 and not routine.preempted.is_set()
        assert routine.vacate_by_ms is None
        emergency_volumes = [volume(lat + 0.0003, lon, t0 + 100_000, t0 + 300_000, radius_m=30)]
        # A try would preempt: it is refused and preempts nobody.
        with pytest.raises(hivekeeper.WouldBlock):
            sb.route(medevac, emergency_volumes, wait_ms=0, priority=3)
        assert not routine.preempted.is_set()
        sent_ms = now_ms()
        waiting = in_thread(lambda: sb.route(medevac, emergency_volumes, priority=3))
        notice = routine.wait_preempted(timeout=20)
        seen_ms = now_ms()
        assert notice is not None and notice == routine.preemption
        assert notice.priority == 3
        # The deadline is the preempting entry's time plus reservation_vacate_ms.
        assert sent_ms + VACATE_MS <= notice.vacate_by_ms <= seen_ms + VACATE_MS, notice
        assert routine.vacate_by_ms == notice.vacate_by_ms
        [holder] = a.inspect("waypoint", survey).holders
        assert (holder.token, holder.priority, holder.vacate_by_ms) == (
            routine.token,
            0,
            notice.vacate_by_ms,
        )
        [waiter] = a.inspect("waypoint", medevac).waiters
        assert (waiter.agent, waiter.priority) == (b.agent_id, 3)
        assert waiting.empty(), "granted only once the holder vacates"
        routine.release()
        emergency = granted(waiting)
        assert emergency.token > routine.token
        assert emergency.priority == 3 and not emergency.preempted.is_set()
        assert a.fence_check(survey, routine.token, kind="waypoint").valid is False
        assert a.fence_check(medevac, emergency.token, kind="waypoint").valid
        emergency.release()


def test_a_preemption_withdrawn_then_told_again_for_a_waypoint(agents, names):
    lat, lon = spot(11)
    a, b = agents("a"), agents("b")
    pad = names("pad")
    news: "queue.Queue[dict]" = queue.Queue()
    a.add_event_handler(
        lambda event: news.put(event) if event["event"].startswith("reservation.") else None
    )
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        routine = sa.waypoint(pad, lat, lon, radius_m=20, wait_ms=0)
        # An emergency that gives up: its deadline is withdrawn, the holder keeps its pad.
        with pytest.raises(hivekeeper.Timeout):
            sb.waypoint(names("landing"), lat, lon, radius_m=20, wait_ms=500, priority=3)
        assert routine.wait_preemption_withdrawn(timeout=20)
        told = [news.get(timeout=20), news.get(timeout=20)]
        assert [(e["event"], e["name"], e["token"], e["kind"]) for e in told] == [
            ("reservation.preempted", pad, routine.token, "waypoint"),
            ("reservation.preemption_withdrawn", pad, routine.token, "waypoint"),
        ]
        assert (routine.preempted.is_set(), routine.preemption, routine.vacate_by_ms) == (
            False,
            None,
            None,
        )
        [holder] = a.inspect("waypoint", pad).holders
        assert (holder.token, holder.vacate_by_ms) == (routine.token, None)
        # One that waits preempts it again, with a new deadline.
        waiting = in_thread(
            lambda: sb.waypoint(names("landing"), lat, lon, radius_m=20, priority=3)
        )
        notice = routine.wait_preempted(timeout=20)
        assert notice is not None and notice.priority == 3
        assert notice.vacate_by_ms > told[0]["vacate_by_ms"], "a new deadline"
        assert not routine.preemption_withdrawn.is_set()
        routine.release()
        emergency = granted(waiting)
        assert (emergency.token > routine.token, emergency.priority, emergency.is_route) == (
            True,
            3,
            False,
        )
        emergency.release()


def test_a_holder_that_does_not_vacate_is_ended_at_the_deadline_and_fenced(agents, names):
    lat, lon = spot(6)
    a, b = agents("survey"), agents("medevac")
    t0 = now_ms()
    survey, medevac = names("survey"), names("medevac")
    lost: "queue.Queue[dict]" = queue.Queue()
    a.add_event_handler(
        lambda event: lost.put(event) if event["event"] == "waypoint.lost" else None
    )
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        routine = sa.route(survey, [volume(lat, lon, t0 + 60_000, t0 + 600_000)], wait_ms=0)
        waiting = in_thread(
            lambda: sb.route(medevac, [volume(lat, lon, t0 + 60_000, t0 + 120_000)], priority=2)
        )
        notice = routine.wait_preempted(timeout=20)
        assert notice is not None and notice.priority == 2
        # Not released: the service ends it at the deadline and grants the emergency.
        emergency = granted(waiting, timeout_s=VACATE_MS / 1000 + 20)
        assert emergency.token > routine.token
        assert lost.get(timeout=20) == {
            "event": "waypoint.lost",
            "name": survey,
            "token": routine.token,
        }
        assert now_ms() >= notice.vacate_by_ms
        # The late holder is fenced, and the service no longer knows its route.
        assert a.fence_check(survey, routine.token, kind="waypoint").valid is False
        with pytest.raises(hivekeeper.NotHolder):
            routine.amend([volume(lat + 0.01, lon, t0 + 60_000, t0 + 120_000)])
        with pytest.raises(hivekeeper.NotHolder):
            routine.release()
        emergency.release()


def test_an_amend_in_the_way_keeps_the_deadline_and_one_out_of_the_way_drops_it(agents, names):
    lat, lon = spot(7)
    a, b = agents("survey"), agents("medevac")
    t0 = now_ms()
    survey, medevac = names("survey"), names("medevac")
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        legs = [
            volume(lat, lon, t0 + 60_000, t0 + 120_000),
            volume(lat + LEG_DEG, lon, t0 + 120_000, t0 + 180_000),
        ]
        routine = sa.route(survey, legs, wait_ms=0)
        waiting = in_thread(
            lambda: sb.route(medevac, [volume(lat, lon, t0 + 60_000, t0 + 90_000)], priority=3)
        )
        notice = routine.wait_preempted(timeout=20)
        assert notice is not None
        # A shorter first leg lies inside the old one: granted while the emergency waits, but
        # still in its way, so the deadline stands.
        shorter = [volume(lat, lon, t0 + 60_000, t0 + 80_000), legs[1]]
        routine.amend(shorter)
        [holder] = a.inspect("waypoint", survey).holders
        assert (holder.token, holder.volumes, holder.vacate_by_ms) == (
            routine.token,
            shorter,
            notice.vacate_by_ms,
        )
        assert routine.preempted.is_set() and routine.vacate_by_ms == notice.vacate_by_ms
        assert waiting.empty()
        # Without the first leg the route is out of the way: the same token, the deadline
        # withdrawn, and the emergency granted in the same entry.
        routine.amend(legs[1:])
        emergency = granted(waiting)
        assert emergency.token > routine.token
        assert routine.wait_preemption_withdrawn(timeout=20)
        assert not routine.preempted.is_set() and routine.vacate_by_ms is None
        [holder] = a.inspect("waypoint", survey).holders
        assert (holder.token, holder.volumes, holder.vacate_by_ms) == (
            routine.token,
            legs[1:],
            None,
        )
        assert a.fence_check(survey, routine.token, kind="waypoint").valid
        emergency.release()
        routine.release()


def test_airspace_query_lists_conflicts_a_page_at_a_time(agents, names):
    lat, lon = spot(8)
    a, b = agents("a"), agents("b")
    t0 = now_ms()
    window = (t0 + 60_000, t0 + 120_000)
    with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
        # Names in byte order: .1-pad < .2-route < .3-pad (the page order).
        pad = sa.waypoint(
            names("1-pad"), lat, lon, 10, 0, 50, start_ms=window[0], end_ms=window[1], wait_ms=0
        )
        far_leg = volume(lat + 5 * LEG_DEG, lon, *window)
        # 22 m from the pad, above its band: it conflicts with the query, not with the pad.
        near_leg = Volume(lat + 0.0002, lon, 20.0, 60.0, 120.0, *window)
        route = sb.route(names("2-route"), [far_leg, near_leg], wait_ms=0, priority=1)
        high = sb.waypoint(names("3-pad"), lat, lon, 5, 60, 120, wait_ms=0)
        # Elsewhere and at another time: not listed.
        sb.waypoint(names("4-far"), lat + 0.01, lon, 10, wait_ms=0)
        sb.waypoint(
            names("5-later"), lat, lon, 10, start_ms=window[1], end_ms=window[1] + 1_000, wait_ms=0
        )
        query = volume(lat, lon, *window)
        rows = {
            pad.name: Conflict(
                name=pad.name,
                kind="waypoint",
                agent=a.agent_id,
                lease=sa.lease,
                area=Area(lat, lon, 10.0, 0.0, 50.0),
                start_ms=window[0],
                end_ms=window[1],
            ),
            route.name: Conflict(
                name=route.name,
                kind="route",
                agent=b.agent_id,
                lease=sb.lease,
                volumes=[near_leg],
                volume_indexes=[1],
                priority=1,
            ),
            high.name: Conflict(
                name=high.name,
                kind="waypoint",
                agent=b.agent_id,
                lease=sb.lease,
                area=Area(lat, lon, 5.0, 60.0, 120.0),
            ),
        }
        whole = a.airspace_query(volume=query)
        assert whole == hivekeeper.AirspacePage(list(rows.values()), None)
        first = b.airspace_query(volume=query, limit=2)
        assert first == hivekeeper.AirspacePage([rows[pad.name], rows[route.name]], route.name)
        rest = b.airspace_query(volume=query, limit=2, after=first.next_after)
        assert rest == hivekeeper.AirspacePage([rows[high.name]], None)
        # A route as the query: the conflicts of any of its volumes.
        by_route = a.airspace_query(volumes=[far_leg.to_wire()], limit=1)
        assert by_route == hivekeeper.AirspacePage(
            [
                Conflict(
                    name=route.name,
                    kind="route",
                    agent=b.agent_id,
                    lease=sb.lease,
                    volumes=[far_leg],
                    volume_indexes=[0],
                    priority=1,
                )
            ],
            None,
        )
        # Bad queries are the service's bad_request, with its message.
        with pytest.raises(hivekeeper.BadRequest) as neither:
            a.airspace_query()
        assert neither.value.message == (
            "airspace.query: give `volume` (one cylinder) or `volumes` (a route of 1 to 64 volumes)"
        )
        with pytest.raises(hivekeeper.BadRequest) as both:
            a.airspace_query(volume=query, volumes=[query])
        assert both.value.message == "airspace.query: give `volume` or `volumes`, not both"
        with pytest.raises(hivekeeper.BadRequest) as zero:
            a.airspace_query(volume=query, limit=0)
        assert zero.value.message == "airspace.query: `limit` is 0, it must be from 1 to 100"


def test_routes_preemption_and_queries_from_asyncio(node, names):
    import asyncio

    import hivekeeper.aio

    lat, lon = spot(9)
    t0 = now_ms()
    survey, medevac = names("survey"), names("medevac")

    async def main() -> None:
        async with hivekeeper.aio.Agent(names("a"), [node.broker], **FAST) as a:
            async with hivekeeper.aio.Agent(names("b"), [node.broker], **FAST) as b:
                async with a.session(ttl_ms=10_000) as sa, b.session(ttl_ms=10_000) as sb:
                    legs = [
                        volume(lat, lon, t0 + 60_000, t0 + 120_000),
                        volume(lat + LEG_DEG, lon, t0 + 120_000, t0 + 180_000),
                    ]
                    routine = await sa.route(survey, legs, wait_ms=0)
                    await routine.amend(legs[:1])
                    assert routine.volumes == legs[:1]
                    page = await b.airspace_query(volume=legs[0])
                    assert [(c.name, c.kind, c.volume_indexes) for c in page.conflicts] == [
                        (survey, "route", [0])
                    ]
                    assert await routine.wait_preempted(timeout=0.05) is None
                    assert await routine.wait_preemption_withdrawn(timeout=0.05) is False
                    # An emergency that gives up: told, then withdrawn.
                    with pytest.raises(hivekeeper.Timeout):
                        await sb.route(medevac, [legs[0]], wait_ms=300, priority=3)
                    assert await routine.wait_preemption_withdrawn(timeout=20) is True
                    assert not routine.preempted.is_set() and routine.vacate_by_ms is None
                    emergency_task = asyncio.ensure_future(sb.route(medevac, [legs[0]], priority=3))
                    notice = await routine.wait_preempted(timeout=20)
                    assert isinstance(notice, Preempted) and notice.priority == 3
                    assert routine.preempted.is_set()
                    assert not routine.preemption_withdrawn.is_set()
                    await routine.release()
                    emergency = await asyncio.wait_for(emergency_task, 20)
                    assert emergency.token > routine.token and emergency.priority == 3
                    check = await a.fence_check(survey, routine.token, kind="waypoint")
                    assert check.valid is False
                    await emergency.release()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_preemption_told_before_the_guard_exists_is_not_lost(node, agents, names):
    """The event can overtake the caller: the grant's answer is in, the caller has not made
    the guard yet, and the notice arrives. The asyncio caller below is held up (its loop
    blocked) exactly there, which a thread cannot be made to do on purpose."""
    import asyncio

    import hivekeeper.aio

    lat, lon = spot(10)
    t0 = now_ms()
    legs = [volume(lat, lon, t0 + 60_000, t0 + 120_000)]
    survey, medevac = names("survey"), names("medevac")
    blocker_agent, emergency_agent = agents("blocker"), agents("medevac")

    async def main() -> None:
        async with hivekeeper.aio.Agent(names("survey"), [node.broker], **FAST) as a:
            async with a.session(ttl_ms=10_000) as sa:
                told: "queue.Queue[dict]" = queue.Queue()
                a.add_event_handler(told.put)
                with blocker_agent.session(ttl_ms=10_000) as sx:
                    blocker = sx.route(names("blocker"), legs, wait_ms=0)
                    routine_task = asyncio.ensure_future(sa.route(survey, legs))
                    while not (await a.inspect("waypoint", survey)).waiters:
                        await asyncio.sleep(0.02)
                    # From here the loop is blocked: the grant and the event reach the
                    # connection thread while the acquire cannot make its guard.
                    blocker.release()
                    eventually(
                        "the survey route granted",
                        lambda: True if blocker_agent.inspect("waypoint", survey).holders else None,
                    )
                    with emergency_agent.session(ttl_ms=10_000) as se:
                        waiting = in_thread(lambda: se.route(medevac, legs, priority=3))
                        event = told.get(timeout=20)
                        assert event["event"] == "reservation.preempted", event
                        routine = await routine_task
                        assert routine.token == event["token"]
                        assert routine.preempted.is_set(), "the early notice was kept"
                        assert routine.vacate_by_ms == event["vacate_by_ms"]
                        await routine.release()
                        emergency = granted(waiting)
                        assert emergency.token > routine.token

    asyncio.run(asyncio.wait_for(main(), 120))
