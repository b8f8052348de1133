"""``Ask``: what one acquire asks the service for, built once for the threaded and the asyncio
session (the Rust SDK's ``Resource``): a lock, permits, a waypoint or a route (kept by a
guard), a leadership (``election.campaign``, kept by a ``Leadership``) or a barrier's round
(``barrier.enter``, kept by a ``Barrier`` until it leaves).

An ask names the op and its own fields (everything but ``name``, ``lease`` and ``wait_ms``,
which the session adds), the kind the session claims it under, and what the guard keeps of it
(the priority, a route's volumes). A route is a waypoint reservation of its name
(PROTOCOL.md section 8.9.1): it is claimed, fenced and inspected as kind ``"waypoint"``, so a
session cannot hold a route and a waypoint of one name under two guards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from .airspace import PRIORITY_ROUTINE, VolumeLike, wire_volumes
from .protocol import ACQUIRE_OP, RELEASE_OP


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

    @property
    def is_route(self) -> bool:
        """Whether it reserves a route (``route.reserve``)."""
        return self.volumes is not None

    @property
    def release_op(self) -> str:
        """The op that releases the grant."""
        return "route.release" if self.is_route else RELEASE_OP[self.kind]

    def release_request(self, lease: str, token: int) -> Dict[str, Any]:
        """The request that gives the grant of ``token`` back: an election names its
        leadership by the token (``election.resign``), everything else by the lease."""
        return release_request(self.release_op, self.name, lease, token)


def release_request(op: str, name: str, lease: str, token: int) -> Dict[str, Any]:
    """The release ``op`` of ``name``, as held by ``lease`` under ``token``."""
    if op == RELEASE_OP["election"]:
        return {"op": op, "name": name, "token": token}
    return {"op": op, "name": name, "lease": lease}


def lock(name: str) -> Ask:
    """The FIFO lock ``name``."""
    return Ask("lock", name, ACQUIRE_OP["lock"], {})


def semaphore(name: str, limit: int, permits: int) -> Ask:
    """``permits`` of the semaphore ``name`` of capacity ``limit``."""
    return Ask("sem", name, ACQUIRE_OP["sem"], {"limit": limit, "permits": permits})


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
