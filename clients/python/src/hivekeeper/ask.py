"""``Ask``: what one acquire asks the service for, built once for the threaded and the asyncio
session (the Rust SDK's ``Resource``): a lock (exclusive or shared), a multi-lock, permits, a
waypoint or a route (kept by a guard), a leadership (``election.campaign``, kept by a
``Leadership``) or a barrier's round (``barrier.enter``, kept by a ``Barrier`` until it
leaves).

An ask names the op and its own fields (everything but ``name``, ``lease`` and ``wait_ms``,
which the session adds), the kind the session claims it under, and what the guard keeps of it
(the priority, a route's volumes, a lock's mode). A multi-lock (``lock.acquire_all``) names
its locks by ``names`` and is claimed under each of them, so a session cannot hold one of its
locks under a second guard either. A route is a waypoint reservation of its name
(PROTOCOL.md section 8.9.1): it is claimed, fenced and inspected as kind ``"waypoint"``, so a
session cannot hold a route and a waypoint of one name under two guards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .airspace import PRIORITY_ROUTINE, VolumeLike, wire_volumes
from .errors import BadRequest
from .protocol import (
    ACQUIRE_OP,
    LOCK_ACQUIRE_ALL_OP,
    LOCK_EXCLUSIVE,
    LOCK_RELEASE_ALL_OP,
    LOCK_SHARED,
    RELEASE_OP,
)


@dataclass(frozen=True)
class Ask:
    """One acquire: its op and fields, and what its guard keeps."""

    #: ``"lock"``, ``"sem"`` or ``"waypoint"`` (routes too): the claim's and the guard's kind.
    kind: str
    #: The resource's name.
    name: str
    #: The acquire op (``lock.acquire``, ..., ``route.reserve``).
    op: str
    #: The op's fields besides ``name``, ``lease`` and ``wait_ms``; ``None`` values are left
    #: out of the request.
    fields: Dict[str, Any]
    #: The priority asked for (0, routine, when none was given or the kind has none).
    priority: int = PRIORITY_ROUTINE
    #: A route's volumes as sent; ``None`` for everything else.
    volumes: Optional[List[Dict[str, Any]]] = None
    #: The field of the grant's answer that carries its fencing token (a barrier's round
    #: answers its ``generation``).
    answer: str = "token"
    #: Every lock of a multi-lock, as asked (``name`` is the first); ``None`` for one resource.
    names: Optional[Tuple[str, ...]] = None
    #: A lock's mode, ``"exclusive"`` or ``"shared"``; ``None`` for every other kind.
    mode: Optional[str] = None

    @property
    def is_multi_lock(self) -> bool:
        """Whether it takes several locks at once (``lock.acquire_all``)."""
        return self.names is not None

    @property
    def claims(self) -> Tuple[Tuple[str, str], ...]:
        """The ``(kind, name)`` the session claims while it acquires and holds: one per lock
        of a multi-lock."""
        return tuple((self.kind, name) for name in self.names or (self.name,))

    @property
    def target(self) -> Dict[str, Any]:
        """The field that names what is acquired or released: ``name``, or a multi-lock's
        ``names``."""
        return {"names": list(self.names)} if self.names is not None else {"name": self.name}

    @property
    def is_route(self) -> bool:
        """Whether it reserves a route (``route.reserve``)."""
        return self.volumes is not None

    @property
    def release_op(self) -> str:
        """The op that releases the grant."""
        if self.is_route:
            return "route.release"
        return LOCK_RELEASE_ALL_OP if self.is_multi_lock else RELEASE_OP[self.kind]

    def release_request(self, lease: str, token: int) -> Dict[str, Any]:
        """The request that gives the grant of ``token`` back: an election names its
        leadership by the token (``election.resign``), everything else by the lease."""
        op = self.release_op
        if op == RELEASE_OP["election"]:
            return {"op": op, "name": self.name, "token": token}
        return {"op": op, **self.target, "lease": lease}


def lock(name: str, shared: bool, max_hold_ms: Optional[int]) -> Ask:
    """The FIFO lock ``name``, exclusive or shared, held at most ``max_hold_ms`` (sent only
    when given; an exclusive acquire sends no ``mode``, the service's default)."""
    mode = LOCK_SHARED if shared else LOCK_EXCLUSIVE
    return Ask("lock", name, ACQUIRE_OP["lock"], _lock_fields(mode, max_hold_ms), mode=mode)


def lock_all(names: Sequence[str], shared: bool, max_hold_ms: Optional[int]) -> Ask:
    """The locks ``names`` as one multi-lock, all in one mode, held at most ``max_hold_ms``.
    :class:`~hivekeeper.BadRequest` for one string or no name (the service bounds the rest:
    64 names, none twice)."""
    if isinstance(names, str):
        raise BadRequest(
            "bad_request", f"{LOCK_ACQUIRE_ALL_OP}: `names` is a list of lock names, not {names!r}"
        )
    listed = tuple(names)
    if not listed:
        raise BadRequest("bad_request", f"{LOCK_ACQUIRE_ALL_OP}: `names` names no lock")
    mode = LOCK_SHARED if shared else LOCK_EXCLUSIVE
    fields = _lock_fields(mode, max_hold_ms)
    return Ask("lock", listed[0], LOCK_ACQUIRE_ALL_OP, fields, names=listed, mode=mode)


def _lock_fields(mode: str, max_hold_ms: Optional[int]) -> Dict[str, Any]:
    """A lock acquire's own fields: exclusive, the service's default, is left out."""
    return {"max_hold_ms": max_hold_ms, "mode": None if mode == LOCK_EXCLUSIVE else mode}


def semaphore(name: str, limit: int, permits: int, max_hold_ms: Optional[int]) -> Ask:
    """``permits`` of the semaphore ``name`` of capacity ``limit``, held at most
    ``max_hold_ms`` (sent only when given)."""
    fields = {"limit": limit, "permits": permits, "max_hold_ms": max_hold_ms}
    return Ask("sem", name, ACQUIRE_OP["sem"], fields)


def election(name: str, value: str) -> Ask:
    """The leadership of the election ``name``, announcing ``value``."""
    return Ask("election", name, ACQUIRE_OP["election"], {"value": value})


def barrier(name: str, count: int) -> Ask:
    """A place in the round of ``count`` members of the barrier ``name``."""
    return Ask("barrier", name, ACQUIRE_OP["barrier"], {"count": count}, answer="generation")


def waypoint(
    name: str,
    lat: Optional[float],
    lon: Optional[float],
    radius_m: Optional[float],
    alt_min_m: Optional[float],
    alt_max_m: Optional[float],
    start_ms: Optional[int],
    end_ms: Optional[int],
    priority: Optional[int],
) -> Ask:
    """The waypoint ``name``, its cylinder, window and priority (each sent only when given)."""
    fields = {
        "lat": lat,
        "lon": lon,
        "radius_m": radius_m,
        "alt_min_m": alt_min_m,
        "alt_max_m": alt_max_m,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "priority": priority,
    }
    return Ask("waypoint", name, ACQUIRE_OP["waypoint"], fields, held_priority(priority))


def route(name: str, volumes: Sequence[VolumeLike], priority: Optional[int]) -> Ask:
    """The route ``name``: ``volumes`` as one intent, at ``priority`` (sent only when given)."""
    wire = wire_volumes("route.reserve", volumes)
    fields = {"volumes": wire, "priority": priority}
    return Ask("waypoint", name, "route.reserve", fields, held_priority(priority), wire)


def held_priority(priority: Optional[int]) -> int:
    """The priority a grant holds: the one asked for, routine when none was. A value the
    service refuses never makes a guard, so any value passes here."""
    return PRIORITY_ROUTINE if priority is None else priority
