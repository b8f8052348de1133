"""``GuardEvents``: how a session hands the events about its holds to their guards.

The service names a hold in an event by its resource's name and its token; the session that
claimed the resource finds the guard and tells it:

=====================================================  ====================================
event                                                  the guard learns
=====================================================  ====================================
``lock.lost``, ``sem.lost``                            :attr:`GuardBase.ended` and why
``reservation.preempted``, ``...preemption_withdrawn``  its vacate deadline, or that it is off
``election.lost``                                      :attr:`LeadershipBase.deposed`
=====================================================  ====================================

An event for a resource the session does not claim is another session's (every session of
the agent sees every event). An event can overtake the answer that makes its guard (the
grant's response and the event travel on two topics): news for a claimed resource whose guard
does not exist yet is kept until it does, and dropped with the claim. The session's end ends
every hold and leadership at once. Everything here runs under the agent's condition.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Dict, Optional, Set, Tuple

from .airspace import Preempted
from .guard import END_LEASE, end_reason
from .protocol import HOLD_TIME_KINDS, LOST_EVENT

if TYPE_CHECKING:
    from .agent import AgentBase
    from .election import LeadershipBase
    from .guard import GuardBase

#: The ``reservation.*`` events of a preemption and of its withdrawal.
PREEMPTION_EVENTS = ("reservation.preempted", "reservation.preemption_withdrawn")
#: The kind of hold each ``lock.lost`` and ``sem.lost`` is about, by event name.
HOLD_LOST_KIND = {LOST_EVENT[kind]: kind for kind in HOLD_TIME_KINDS}


def named_hold(event: Dict[str, Any]) -> Optional[Tuple[str, int]]:
    """The ``name`` and ``token`` an event names its hold by, or ``None`` when it lacks them."""
    name, token = event.get("name"), event.get("token")
    if not isinstance(name, str) or isinstance(token, bool) or not isinstance(token, int):
        return None
    return name, token


class GuardEvents:
    """The routing tables of a session's guards and the handlers of their events; a part of
    :class:`~hivekeeper.session.SessionBase`."""

    #: The agent whose events these are (the session's).
    agent: "AgentBase"
    #: The agent's condition, which guards every table here.
    _cond: threading.Condition
    #: What the session holds or is acquiring: ``(kind, name)``.
    _claims: Set[Tuple[str, str]]

    def _init_guard_events(self) -> None:
        #: The guards of waypoints and routes, by name: the ones a ``reservation.preempted``
        #: event can be for.
        self._reservations: Dict[str, "GuardBase"] = {}
        #: The last preemption news for a claimed name, ``(token, notice)``: a
        #: ``reservation.preempted`` notice, or ``None`` after
        #: ``reservation.preemption_withdrawn``. Kept until the claim ends: the news can
        #: arrive before its grant's guard exists.
        self._preemptions: Dict[str, Tuple[int, Optional[Preempted]]] = {}
        #: The leaderships this session holds, by election name: the ones an
        #: ``election.lost`` event can be for.
        self._leaderships: Dict[str, "LeadershipBase"] = {}
        #: The guards of locks and permits by claim (a multi-lock's under each of its locks):
        #: the ones a ``lock.lost`` or ``sem.lost`` event can be for.
        self._holds: Dict[Tuple[str, str], "GuardBase"] = {}
        #: The end of a claimed hold told before its guard existed, ``(token, reason)``: the
        #: event can overtake its grant's answer (a ``max_hold_ms`` of a few ms).
        self._hold_ends: Dict[Tuple[str, str], Tuple[int, str]] = {}

    def _route_to_guard(self, event: Dict[str, Any]) -> bool:
        """Hands ``event`` to the guard it is for, if it is a guard's event; whether it was."""
        name = event.get("event")
        if name in PREEMPTION_EVENTS:
            self._on_preemption_event(event)
        elif name == LOST_EVENT["election"]:
            self._on_election_lost(event)
        elif name in HOLD_LOST_KIND:
            self._on_hold_lost(HOLD_LOST_KIND[name], event)
        else:
            return False
        return True

    def _forget_guard_routes(self, key: Tuple[str, str]) -> None:
        """The claim ``key`` ended: its guard hears nothing more."""
        self._holds.pop(key, None)
        self._hold_ends.pop(key, None)
        kind, name = key
        if kind == "waypoint":
            self._reservations.pop(name, None)
            self._preemptions.pop(name, None)
        elif kind == "election":
            self._leaderships.pop(name, None)

    def _end_guard_routes(self) -> None:
        """The lease ended: every hold and leadership went with it, in the entry that ended
        it (an event that arrives after this end finds no guard to go to)."""
        for guard in list(self._holds.values()):
            guard._hold_ended(END_LEASE)
        for leadership in self._leaderships.values():
            leadership._deposed()
        self._holds.clear()
        self._hold_ends.clear()
        self._reservations.clear()
        self._preemptions.clear()
        self._leaderships.clear()

    # -- the end of a hold: lock.lost, sem.lost -----------------------------------------------

    def _watch_hold(self, guard: "GuardBase") -> None:
        """Routes the ``lock.lost`` or ``sem.lost`` of ``guard``'s hold to it, and an end that
        was told before the guard existed."""
        with self._cond:
            for key in guard.claims:
                self._holds[key] = guard
            for key in guard.claims:
                told = self._hold_ends.get(key)
                if told is not None and told[0] == guard.token:
                    guard._hold_ended(told[1])
                    return

    def _on_hold_lost(self, kind: str, event: Dict[str, Any]) -> None:
        """A ``lock.lost`` or ``sem.lost``: for this session's hold of that name and token, if
        it has one (the agent's other sessions see the event too)."""
        named = named_hold(event)
        if named is None:
            return  # events are a courtesy: a malformed one tells nothing
        name, token = named
        key = (kind, name)
        with self._cond:
            if key not in self._claims:
                return
            guard = self._holds.get(key)
            if guard is None:
                self._hold_ends[key] = (token, end_reason(event))
            elif guard.token == token:
                guard._hold_ended(end_reason(event))

    # -- preemption ---------------------------------------------------------------------------

    def _watch_preemption(self, guard: "GuardBase") -> None:
        """Routes the preemption events of ``guard``'s reservation to it, and the news that
        arrived before the guard existed."""
        with self._cond:
            self._reservations[guard.name] = guard
            seen = self._preemptions.get(guard.name)
            if seen is not None and seen[0] == guard.token:
                guard._preemption_news(seen[1])

    def _on_preemption_event(self, event: Dict[str, Any]) -> None:
        """A ``reservation.preempted`` or ``reservation.preemption_withdrawn`` event: for this
        session's reservation of that name and token, if it has one (the agent's other
        sessions see the event too). Events of one reservation arrive in the order the
        service sent them, so the last one says where it stands."""
        named = named_hold(event)
        if named is None:
            return
        name, token = named
        notice = Preempted.from_event(event)
        if notice is None and event.get("event") != PREEMPTION_EVENTS[1]:
            return  # a malformed reservation.preempted: events are a courtesy
        with self._cond:
            if ("waypoint", name) not in self._claims:
                return
            self._preemptions[name] = (token, notice)
            guard = self._reservations.get(name)
            if guard is not None and guard.token == token:
                guard._preemption_news(notice)
            self.agent._shared.notify()

    # -- elections ----------------------------------------------------------------------------

    def _watch_leadership(self, leadership: "LeadershipBase") -> None:
        """Routes the ``election.lost`` event of ``leadership`` to it."""
        with self._cond:
            self._leaderships[leadership.name] = leadership

    def _on_election_lost(self, event: Dict[str, Any]) -> None:
        """An ``election.lost`` event: for this session's leadership of that name and token,
        if it has one (the agent's other sessions see the event too)."""
        name, token = event.get("name"), event.get("token")
        with self._cond:
            leadership = self._leaderships.get(name) if isinstance(name, str) else None
            if leadership is not None and leadership.token == token:
                leadership._deposed()
