"""4D airspace on the wire (PROTOCOL.md sections 8.8 to 8.9.5): the volumes of a route or an
airspace query, the cylinder ``inspect`` and ``airspace.query`` show, a page of
``airspace.query``, the ``reservation.preempted`` notice, and :class:`AirspaceCalls`, the
query as both agents offer it.

Pure: no I/O, no threads (the agents send the query). The names are the protocol's and the Rust SDK's
(``hivekeeper_protocol::Volume``, ``Area``; ``hivekeeper_agent::Preempted``). The service
validates every value (ranges, windows, counts) and answers ``bad_request`` naming the
problem; this module only converts, so there is one set of rules, the service's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Generic, List, Mapping, Optional, Sequence, TypeVar, Union

from .errors import BadRequest, MalformedResponse

#: Priorities (PROTOCOL.md section 8.9.4): 0 is routine, the default; 3 is emergency.
PRIORITY_ROUTINE = 0
PRIORITY_EMERGENCY = 3


@dataclass(frozen=True)
class Volume:
    """One 4D volume: a vertical cylinder of ``radius_m`` around ``lat``/``lon`` (degrees,
    WGS84) between ``alt_min_m`` and ``alt_max_m``, held during ``[start_ms, end_ms)`` (UTC ms
    since the Unix epoch, end exclusive).

    A route's volume needs every field; the one ``volume`` of ``airspace.query`` may leave
    the window out (absent start: from the service's time; absent end: no end). A plain dict
    with these keys is accepted wherever a ``Volume`` is."""

    #: Latitude of the axis, degrees.
    lat: float
    #: Longitude of the axis, degrees.
    lon: float
    #: Radius, metres (0 to 10 000).
    radius_m: float
    #: Bottom of the altitude band, metres.
    alt_min_m: float
    #: Top of the altitude band, metres (at least ``alt_min_m``).
    alt_max_m: float
    #: Start of the time window, UTC ms; ``None`` only in an airspace query.
    start_ms: Optional[int] = None
    #: End of the time window, exclusive, UTC ms; ``None`` only in an airspace query.
    end_ms: Optional[int] = None

    def to_wire(self) -> Dict[str, Any]:
        """The JSON object the protocol takes; an absent window bound is left out."""
        wire: Dict[str, Any] = {
            "lat": self.lat,
            "lon": self.lon,
            "radius_m": self.radius_m,
            "alt_min_m": self.alt_min_m,
            "alt_max_m": self.alt_max_m,
        }
        if self.start_ms is not None:
            wire["start_ms"] = self.start_ms
        if self.end_ms is not None:
            wire["end_ms"] = self.end_ms
        return wire

    @staticmethod
    def from_wire(wire: Mapping[str, Any]) -> "Volume":
        """A volume as the service shows it (``inspect``, ``airspace.query``); ``KeyError`` or
        ``TypeError`` when it is not one."""
        return Volume(
            lat=wire["lat"],
            lon=wire["lon"],
            radius_m=wire["radius_m"],
            alt_min_m=wire["alt_min_m"],
            alt_max_m=wire["alt_max_m"],
            start_ms=wire.get("start_ms"),
            end_ms=wire.get("end_ms"),
        )


#: What the calls that take volumes accept for one.
VolumeLike = Union[Volume, Mapping[str, Any]]


def wire_volume(volume: VolumeLike) -> Dict[str, Any]:
    """One volume as the request carries it: a :class:`Volume`'s fields, or a dict's as given
    (the service names whatever is wrong with them)."""
    if isinstance(volume, Volume):
        return volume.to_wire()
    if isinstance(volume, Mapping):
        return dict(volume)
    raise BadRequest(
        "bad_request", f"a volume is a hivekeeper.Volume or a dict, not {type(volume).__name__}"
    )


def wire_volumes(op: str, volumes: Sequence[VolumeLike]) -> List[Dict[str, Any]]:
    """A route's volumes as the request carries them. One volume where a list belongs is
    refused here (``bad_request``): iterating a dict would send its keys."""
    if isinstance(volumes, (Volume, Mapping, str, bytes)):
        raise BadRequest(
            "bad_request", f"{op}: `volumes` is a list of volumes, not {type(volumes).__name__}"
        )
    return [wire_volume(volume) for volume in volumes]


@dataclass(frozen=True)
class Area:
    """The cylinder of a waypoint reservation as ``inspect`` and ``airspace.query`` show it
    (the Rust SDK's ``Geometry``); an altitude side without a bound is ``None``."""

    #: Latitude of the axis, degrees.
    lat: float
    #: Longitude of the axis, degrees.
    lon: float
    #: Radius, metres.
    radius_m: float
    #: Bottom of the altitude band, metres; ``None``: no lower bound.
    alt_min_m: Optional[float] = None
    #: Top of the altitude band, metres; ``None``: no upper bound.
    alt_max_m: Optional[float] = None

    @staticmethod
    def from_wire(wire: Mapping[str, Any]) -> "Area":
        """``KeyError`` or ``TypeError`` when ``wire`` is not an area."""
        return Area(
            lat=wire["lat"],
            lon=wire["lon"],
            radius_m=wire["radius_m"],
            alt_min_m=wire.get("alt_min_m"),
            alt_max_m=wire.get("alt_max_m"),
        )


def area_from(wire: Optional[Mapping[str, Any]]) -> Optional[Area]:
    """An optional ``area`` field."""
    return None if wire is None else Area.from_wire(wire)


def volumes_from(wire: Optional[Sequence[Mapping[str, Any]]]) -> Optional[List[Volume]]:
    """An optional ``volumes`` field."""
    return None if wire is None else [Volume.from_wire(v) for v in wire]


@dataclass(frozen=True)
class Preempted:
    """A ``reservation.preempted`` event for a guard's reservation: a request of a higher
    ``priority`` needs its airspace. Vacate it and release the guard by ``vacate_by_ms``; then
    the service ends it (a route whole) and its token stops being valid."""

    #: When the service ends the reservation unless released first: UTC ms since the Unix
    #: epoch, on the service's clock.
    vacate_by_ms: int
    #: The priority of the request that preempts it (1 to 3).
    priority: int

    @staticmethod
    def from_event(event: Mapping[str, Any]) -> Optional["Preempted"]:
        """The notice in a ``reservation.preempted`` event; ``None`` when the event is not one
        or lacks its fields (events are a courtesy: a malformed one is ignored)."""
        if event.get("event") != "reservation.preempted":
            return None
        vacate_by_ms, priority = event.get("vacate_by_ms"), event.get("priority")
        if not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (vacate_by_ms, priority)
        ):
            return None
        return Preempted(vacate_by_ms=vacate_by_ms, priority=priority)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Conflict:
    """One row of an ``airspace.query`` answer: a held reservation the queried volume or route
    would conflict with in space and time."""

    #: The reservation's (waypoint) name.
    name: str
    #: ``"waypoint"`` or ``"route"``.
    kind: str
    #: Who holds it; ``None`` where authentication hides another agent's (only observers and
    #: admins see every row's).
    agent: Optional[str] = None
    #: The lease it is bound to; hidden as ``agent`` is.
    lease: Optional[str] = None
    #: A waypoint's cylinder.
    area: Optional[Area] = None
    #: A waypoint's window start; ``None``: a waypoint without a window (all time).
    start_ms: Optional[int] = None
    #: A waypoint's window end, exclusive; ``None``: no end.
    end_ms: Optional[int] = None
    #: A route's volumes that conflict (only those), in flight order.
    volumes: Optional[List[Volume]] = None
    #: Their positions in the route, from 0.
    volume_indexes: Optional[List[int]] = None
    #: Its priority (absent on the wire: 0, routine). A strictly higher one would preempt it.
    priority: int = PRIORITY_ROUTINE

    @staticmethod
    def from_wire(wire: Mapping[str, Any]) -> "Conflict":
        """``KeyError`` or ``TypeError`` when ``wire`` is not a row."""
        return Conflict(
            name=wire["name"],
            kind=wire["kind"],
            agent=wire.get("agent"),
            lease=wire.get("lease"),
            area=area_from(wire.get("area")),
            start_ms=wire.get("start_ms"),
            end_ms=wire.get("end_ms"),
            volumes=volumes_from(wire.get("volumes")),
            volume_indexes=wire.get("volume_indexes"),
            priority=wire.get("priority", PRIORITY_ROUTINE),
        )


@dataclass(frozen=True)
class AirspacePage:
    """One page of an ``airspace.query`` answer."""

    #: The conflicting held reservations, in name order (UTF-8 bytes).
    conflicts: List[Conflict]
    #: The last name of this page when more follow: pass it as ``after`` for the next page;
    #: ``None`` on the last page.
    next_after: Optional[str] = None

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "AirspacePage":
        """Builds it from a success's fields; :class:`MalformedResponse` when they lack it."""
        try:
            return AirspacePage(
                conflicts=[Conflict.from_wire(row) for row in result["conflicts"]],
                next_after=result.get("next_after"),
            )
        except (KeyError, TypeError):
            raise MalformedResponse(f"airspace.query answered {dict(result)}") from None


def airspace_query_fields(
    volume: Optional[VolumeLike],
    volumes: Optional[Sequence[VolumeLike]],
    limit: Optional[int],
    after: Optional[str],
) -> Dict[str, Any]:
    """The fields of an ``airspace.query`` (``None`` ones are left out). Giving both or
    neither of ``volume`` and ``volumes`` is sent as given: the service's ``bad_request``
    says which."""
    return {
        "volume": None if volume is None else wire_volume(volume),
        "volumes": None if volumes is None else wire_volumes("airspace.query", volumes),
        "limit": limit,
        "after": after,
    }


#: What an agent's query returns: a page, or an awaitable of one.
P = TypeVar("P")


class AirspaceCalls(Generic[P]):
    """``airspace.query`` as the threaded and the asyncio agent both offer it; ``P`` is what
    :meth:`_airspace_page` returns (the asyncio agent offers it as a coroutine function,
    ``aio.awaited``)."""

    def _airspace_page(self, fields: Dict[str, Any]) -> P:
        """Sends the query the agent's way; its page."""
        raise NotImplementedError

    def airspace_query(
        self,
        volume: Optional[VolumeLike] = None,
        volumes: Optional[Sequence[VolumeLike]] = None,
        limit: Optional[int] = None,
        after: Optional[str] = None,
    ) -> P:
        """``airspace.query``: one page of the held reservations (waypoints with geometry,
        routes) that the cylinder ``volume`` or the route ``volumes`` would conflict with in
        space and time, reserving nothing. Give exactly one of them. ``limit`` (1 to 100,
        default 100) bounds the page; pass the page's ``next_after`` as ``after`` for the
        next one (``None``: the last page). Needs no session."""
        return self._airspace_page(airspace_query_fields(volume, volumes, limit, after))
