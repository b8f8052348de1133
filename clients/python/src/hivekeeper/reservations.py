"""Waypoint and route reservations: the acquire calls that the threaded
:class:`~hivekeeper.Session` and ``hivekeeper.aio.Session`` share, written once (PROTOCOL.md
sections 8.8 to 8.9.5).

A waypoint is a name and, optionally, a vertical cylinder, a time window and a priority; a
route is a waypoint reservation of its name made of 1 to 64 4D volumes, granted all or nothing
with one token. A reservation in the way only of lower priorities preempts them instead of
waiting behind them.

Each call returns what the session's ``_hold`` makes of the ask, as in
:class:`~hivekeeper.locks.LockCalls`: a :class:`~hivekeeper.Guard` on the threaded session, an
awaitable that is also an ``async with`` of a ``hivekeeper.aio.Guard`` on the asyncio one.
"""

from __future__ import annotations

from typing import Generic, Optional, Sequence, TypeVar

from . import ask as asks
from .airspace import VolumeLike
from .ask import Ask

#: What a session's acquire call returns (a guard, or an awaitable of one).
H = TypeVar("H")


class ReservationCalls(Generic[H]):
    """The waypoint and route reservations of a session; ``H`` is what :meth:`_hold`
    returns. ``wait_ms`` waits as for :meth:`~hivekeeper.locks.LockCalls.lock`."""

    def _hold(self, ask: Ask, wait_ms: Optional[int]) -> H:
        """Acquires ``ask`` the session's way."""
        raise NotImplementedError

    def waypoint(
        self,
        name: str,
        lat: Optional[float] = None,
        lon: Optional[float] = None,
        radius_m: Optional[float] = None,
        alt_min_m: Optional[float] = None,
        alt_max_m: Optional[float] = None,
        wait_ms: Optional[int] = None,
        *,
        start_ms: Optional[int] = None,
        end_ms: Optional[int] = None,
        priority: Optional[int] = None,
    ) -> H:
        """Reserves the waypoint ``name`` and, with ``lat``/``lon``, the vertical cylinder of
        ``radius_m`` around it between ``alt_min_m`` and ``alt_max_m`` (absent: unbounded).
        It conflicts with a reservation of the same name, or one whose cylinder is closer than
        the sum of the radii with an overlapping altitude band and an overlapping time
        window. ``wait_ms`` as for :meth:`~hivekeeper.locks.LockCalls.lock`.

        ``start_ms``/``end_ms`` (UTC ms since the Unix epoch) hold it during
        ``[start_ms, end_ms)`` only; absent, from the request on / until released. A future
        window is granted now when nothing conflicts with it, and the service ends the
        reservation by itself at ``end_ms``. ``priority`` 0 (routine, the default) to 3
        (emergency): a reservation in the way only of lower priorities preempts them
        (:attr:`Guard.preempted <hivekeeper.Guard.preempted>`) instead of waiting behind
        them. Each is sent only when given."""
        ask = asks.waypoint(
            name, lat, lon, radius_m, alt_min_m, alt_max_m, start_ms, end_ms, priority
        )
        return self._hold(ask, wait_ms)

    def route(
        self,
        name: str,
        volumes: Sequence[VolumeLike],
        wait_ms: Optional[int] = None,
        priority: Optional[int] = None,
    ) -> H:
        """Reserves the route ``name`` (``route.reserve``): 1 to 64 4D ``volumes``
        (:class:`~hivekeeper.Volume` or dicts with ``lat``, ``lon``, ``radius_m``,
        ``alt_min_m``, ``alt_max_m``, ``start_ms``, ``end_ms``) as one intent, granted all or
        nothing with one token, or queued FIFO as a unit. ``wait_ms`` as for
        :meth:`~hivekeeper.locks.LockCalls.lock`; ``priority`` as for :meth:`waypoint`. The
        guard amends (:meth:`Guard.amend <hivekeeper.Guard.amend>`) and releases the
        route."""
        return self._hold(asks.route(name, volumes, priority), wait_ms)
