"""The wire protocol v1 as this client speaks it: topics, request encoding, response and
event decoding, the 4D volumes of routes and airspace queries, and the typed results of
``fence.check``, ``inspect``, ``airspace.query`` and the ``reservation.preempted`` event.

Pure: no I/O, no threads. docs/PROTOCOL.md is the reference; this module only checks locally
what the service could not answer under the request's id (a payload over 8192 bytes, or one
that is not JSON, is answered with ``"id": null``, which no caller could match).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

from .airspace import PRIORITY_ROUTINE, Area, Volume, area_from, volumes_from
from .errors import BadRequest, MalformedResponse, TooLarge

#: The largest request payload the service reads (PROTOCOL.md section 5).
REQUEST_BYTES_MAX = 8192

#: A multi-lock's acquire and release (PROTOCOL.md sections 8.5.2 and 8.5.3): the locks are
#: named by ``names``, not ``name``.
LOCK_ACQUIRE_ALL_OP = "lock.acquire_all"
LOCK_RELEASE_ALL_OP = "lock.release_all"
#: The op that makes an exclusive hold of a lock shared, keeping its token (section 8.5.1).
LOCK_DOWNGRADE_OP = "lock.downgrade"
#: A lock's ``mode`` (``lock.acquire``, ``lock.acquire_all``); absent means exclusive.
LOCK_EXCLUSIVE = "exclusive"
LOCK_SHARED = "shared"

#: The ops that may wait in the service (for a resource, a leadership, a barrier's round);
#: their patience depends on ``wait_ms``.
ACQUIRE_OPS = frozenset(
    {
        "lock.acquire",
        LOCK_ACQUIRE_ALL_OP,
        "sem.acquire",
        "waypoint.reserve",
        "route.reserve",
        "election.campaign",
        "barrier.enter",
        "barrier.leave",
    }
)

#: The long poll of a watch: the service holds it up to its ``wait_ms`` (default below)
#: before it answers, so an attempt must wait longer than that.
WATCH_POLL_OP = "watch.poll"
#: The service's ``wait_ms`` of a ``watch.poll`` that names none (PROTOCOL.md).
WATCH_POLL_WAIT_MS_DEFAULT = 30_000

#: Resource kinds, as ``fence.check`` and ``inspect`` name them.
KINDS = ("lock", "sem", "waypoint", "election", "barrier")

#: The acquire and release op of each kind. An election's release (``election.resign``) names
#: the leadership's token instead of the lease (``ask.release_request``); a barrier's is the
#: leave of the round its member passed.
ACQUIRE_OP = {
    "lock": "lock.acquire",
    "sem": "sem.acquire",
    "waypoint": "waypoint.reserve",
    "election": "election.campaign",
    "barrier": "barrier.enter",
}
RELEASE_OP = {
    "lock": "lock.release",
    "sem": "sem.release",
    "waypoint": "waypoint.release",
    "election": "election.resign",
    "barrier": "barrier.leave",
}

#: The event that tells a holder that its hold of a kind was taken away (PROTOCOL.md
#: section 10), naming the hold by ``name`` and ``token``.
LOST_EVENT = {
    "lock": "lock.lost",
    "sem": "sem.lost",
    "waypoint": "waypoint.lost",
    "election": "election.lost",
}
#: The kinds whose ``*.lost`` event says why a hold ended (``reason``): they take a
#: ``max_hold_ms`` (PROTOCOL.md section 6.1).
HOLD_TIME_KINDS = ("lock", "sem")
#: The ``reason`` of a ``lock.lost`` or ``sem.lost`` whose ``max_hold_ms`` ran out; the event
#: has no ``reason`` when the hold's lease ended (PROTOCOL.md section 6.1).
LOST_REASON_MAX_HOLD = "max_hold"


@dataclass(frozen=True)
class Topics:
    """The three topics of one agent under a prefix (PROTOCOL.md section 1)."""

    #: ``{prefix}/req/{agent}``: requests, agent to service.
    request: str
    #: ``{prefix}/rsp/{agent}``: exactly one final response per request id.
    response: str
    #: ``{prefix}/evt/{agent}``: unsolicited events.
    event: str

    @staticmethod
    def of(prefix: str, agent_id: str) -> "Topics":
        """The topics of ``agent_id``; a trailing ``/`` of the prefix is dropped."""
        prefix = prefix.rstrip("/")
        return Topics(
            request=f"{prefix}/req/{agent_id}",
            response=f"{prefix}/rsp/{agent_id}",
            event=f"{prefix}/evt/{agent_id}",
        )


def encode_request(request_id: str, op: str, fields: Mapping[str, Any]) -> bytes:
    """The JSON payload of one request; fields whose value is ``None`` are left out.

    Raises :class:`BadRequest` for a value JSON cannot carry (NaN, infinity, an object) and
    :class:`TooLarge` past 8192 bytes: the service would answer both with ``"id": null``.
    """
    body: Dict[str, Any] = {"id": request_id, "op": op}
    for key, value in fields.items():
        if key in ("id", "op"):
            raise BadRequest("bad_request", f"{op}: `{key}` is not a field of the op")
        if value is not None:
            body[key] = value
    try:
        payload = json.dumps(body, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as error:
        bad = [k for k, v in body.items() if isinstance(v, float) and not math.isfinite(v)]
        why = f"`{bad[0]}` is not a finite number" if bad else str(error)
        raise BadRequest("bad_request", f"{op}: {why}") from None
    if len(payload) > REQUEST_BYTES_MAX:
        raise TooLarge(
            "too_large",
            f"payload is {len(payload)} bytes, the maximum is {REQUEST_BYTES_MAX}",
        )
    return payload


@dataclass(frozen=True)
class Response:
    """One decoded response: ``id`` (``None`` when the service could not read it), and either
    the success's fields or the error's code and message."""

    #: The request id it answers.
    id: Optional[str]
    #: Whether it is a success.
    ok: bool
    #: The result fields of a success (everything but ``id`` and ``ok``).
    result: Dict[str, Any]
    #: The error code of a failure.
    code: Optional[str]
    #: The error message of a failure.
    message: Optional[str]
    #: The whole error object of a failure (``compacted`` carries ``compact_revision``).
    error: Optional[Dict[str, Any]] = None


def decode_response(payload: bytes) -> Response:
    """Decodes a response; raises ``ValueError`` when it is not one."""
    body = json.loads(payload)
    if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
        raise ValueError("not a response object")
    request_id = body.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ValueError("the id is not a string")
    if body["ok"]:
        result = {k: v for k, v in body.items() if k not in ("id", "ok")}
        return Response(request_id, True, result, None, None)
    error = body.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        raise ValueError("a failure without error.code")
    return Response(request_id, False, {}, error["code"], str(error.get("message", "")), error)


def decode_event(payload: bytes) -> Dict[str, Any]:
    """Decodes an event (``{"event": name, ...}``); raises ``ValueError`` when it is not one."""
    body = json.loads(payload)
    if not isinstance(body, dict) or not isinstance(body.get("event"), str):
        raise ValueError("not an event object")
    return body


@dataclass(frozen=True)
class FenceCheck:
    """The answer of ``fence.check``."""

    #: Whether the checked token is held right now, on that resource, by a live holder.
    valid: bool
    #: The newest token held on the resource right now; 0 when it is free.
    current: int

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "FenceCheck":
        """Builds it from a success's fields; :class:`MalformedResponse` when they lack it."""
        try:
            return FenceCheck(valid=bool(result["valid"]), current=int(result["current"]))
        except (KeyError, TypeError, ValueError):
            raise MalformedResponse(f"fence.check answered {dict(result)}") from None


@dataclass(frozen=True)
class Holder:
    """One holder in an ``inspect`` answer."""

    #: The holding agent.
    agent: str
    #: The hold's fencing token.
    token: int
    #: When it was granted, ms since the Unix epoch on the leader's clock.
    since_ms: int
    #: The lease the hold is bound to; ``None`` where authentication hides another agent's.
    lease: Optional[str] = None
    #: Permits held (semaphores only).
    permits: Optional[int] = None
    #: The cylinder held (waypoints reserved with geometry only).
    area: Optional[Area] = None
    #: The time window's start (waypoints reserved with a window only).
    start_ms: Optional[int] = None
    #: The time window's end, exclusive (waypoints whose window has an end only).
    end_ms: Optional[int] = None
    #: The route's volumes in flight order (routes only).
    volumes: Optional[List[Volume]] = None
    #: The reservation's priority (0, routine, for everything else).
    priority: int = PRIORITY_ROUTINE
    #: When a preempted reservation is ended unless released (preempted ones only).
    vacate_by_ms: Optional[int] = None
    #: The leader's value (elections only).
    value: Optional[str] = None


@dataclass(frozen=True)
class Waiter:
    """One waiter in an ``inspect`` answer, in queue order."""

    #: The waiting agent.
    agent: str
    #: 1 = the next to be granted.
    position: int
    #: When it started waiting, ms since the Unix epoch on the leader's clock.
    since_ms: int
    #: Permits asked for (semaphores only).
    permits: Optional[int] = None
    #: The cylinder asked for (waypoints with geometry only).
    area: Optional[Area] = None
    #: The time window's start asked for (waypoints with a window only).
    start_ms: Optional[int] = None
    #: The time window's end asked for (waypoints whose window has an end only).
    end_ms: Optional[int] = None
    #: The volumes asked for (routes only).
    volumes: Optional[List[Volume]] = None
    #: The priority asked for (0, routine, when the service leaves it out).
    priority: int = PRIORITY_ROUTINE
    #: The value the candidate campaigns with (elections only).
    value: Optional[str] = None


@dataclass(frozen=True)
class Inspection:
    """The answer of ``inspect``: who holds a resource and who waits for it."""

    #: The holders.
    holders: List[Holder]
    #: The waiters, in queue order.
    waiters: List[Waiter]
    #: The capacity (semaphores only).
    limit: Optional[int] = None
    #: The real number of holders, only when the answer was cut to fit one packet.
    holders_total: Optional[int] = None
    #: The real number of waiters, only when the answer was cut to fit one packet.
    waiters_total: Optional[int] = None
    #: How many members the filling round needs (barriers only, while a round fills).
    count: Optional[int] = None
    #: How many members of passed rounds wait in ``barrier.leave`` (barriers only).
    leaving: Optional[int] = None

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "Inspection":
        """Builds it from a success's fields; :class:`MalformedResponse` when they lack it."""
        try:
            return Inspection._from(result)
        except (KeyError, TypeError):
            raise MalformedResponse(f"inspect answered {dict(result)}") from None

    @staticmethod
    def _from(result: Mapping[str, Any]) -> "Inspection":
        holders = [
            Holder(
                agent=h["agent"],
                token=h["token"],
                since_ms=h["since_ms"],
                lease=h.get("lease"),
                vacate_by_ms=h.get("vacate_by_ms"),
                **_held_or_asked(h),
            )
            for h in result["holders"]
        ]
        waiters = [
            Waiter(
                agent=w["agent"],
                position=w["position"],
                since_ms=w["since_ms"],
                **_held_or_asked(w),
            )
            for w in result["waiters"]
        ]
        return Inspection(
            holders=holders,
            waiters=waiters,
            limit=result.get("limit"),
            holders_total=result.get("holders_total"),
            waiters_total=result.get("waiters_total"),
            count=result.get("count"),
            leaving=result.get("leaving"),
        )


def _held_or_asked(entry: Mapping[str, Any]) -> Dict[str, Any]:
    """The fields a :class:`Holder` and a :class:`Waiter` share, from an ``inspect`` entry:
    what is held or asked for (permits, cylinder, window, volumes, priority, value)."""
    return {
        "permits": entry.get("permits"),
        "area": area_from(entry.get("area")),
        "start_ms": entry.get("start_ms"),
        "end_ms": entry.get("end_ms"),
        "volumes": volumes_from(entry.get("volumes")),
        "priority": entry.get("priority", PRIORITY_ROUTINE),
        "value": entry.get("value"),
    }
