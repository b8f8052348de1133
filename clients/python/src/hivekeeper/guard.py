"""``Guard``: proof of a grant (lock, multi-lock, permits, waypoint reservation, route) with
its fencing token.

The token is the safety mechanism, the guard only a convenience (DESIGN.md section 5.2): pass
:attr:`Guard.token` to whatever the guard protects, and let that resource refuse a token older
than the newest it has seen (or ask the service with ``fence.check``). A guard cannot stop the
world when its lease is lost; the token lets the world stop a stale holder.

As a context manager the grant is released when the block ends. Python has no reliable
destructor, so a guard used without ``with`` must be released with :meth:`Guard.release`, or
goes with its session (revoking a session releases everything it holds).

A waypoint's or a route's guard also learns when a higher priority preempts it
(``reservation.preempted``, PROTOCOL.md section 8.9.4): :attr:`GuardBase.preempted` is set and
:attr:`GuardBase.vacate_by_ms` says by when to vacate and release, as the Rust SDK's
``Guard::preempted()`` resolves; when the service drops the deadline
(``reservation.preemption_withdrawn``, the SDK's ``Guard::preemption_withdrawn()``),
``preempted`` is cleared and :attr:`GuardBase.preemption_withdrawn` set. A route's guard
replaces its volumes with ``amend`` (``route.amend``), keeping its token.

A lock's or a semaphore's guard learns when the service took its hold away while the session
may live on: a ``lock.lost`` or ``sem.lost`` for its token sets :attr:`GuardBase.ended`, and
:attr:`GuardBase.end_reason` tells a ``max_hold_ms`` that ran out (:data:`END_MAX_HOLD`) from
the lease's end (:data:`END_LEASE`, also set when the session ends). An exclusive lock's guard
turns shared with ``downgrade`` (``lock.downgrade``), keeping its token.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from .airspace import Preempted, Volume, VolumeLike, wire_volumes
from .errors import (
    BadRequest,
    HivekeeperError,
    LeaseNotFound,
    MalformedResponse,
    NotHolder,
    SessionLost,
)
from .protocol import (
    HOLD_TIME_KINDS,
    LOCK_DOWNGRADE_OP,
    LOCK_EXCLUSIVE,
    LOCK_SHARED,
    LOST_REASON_MAX_HOLD,
    FenceCheck,
)

if TYPE_CHECKING:
    from .ask import Ask
    from .session import Session, SessionBase

log = logging.getLogger("hivekeeper")

#: :attr:`GuardBase.end_reason` of a hold whose ``max_hold_ms`` ran out.
END_MAX_HOLD = LOST_REASON_MAX_HOLD
#: :attr:`GuardBase.end_reason` of a hold that went with its lease (the ``lock.lost`` or
#: ``sem.lost`` without a ``reason``, or the session's end).
END_LEASE = "lease"


def end_reason(event: Dict[str, Any]) -> str:
    """Why a ``lock.lost`` or ``sem.lost`` says its hold ended: its ``reason`` as sent (a
    reason this client does not know is still an end), :data:`END_LEASE` without one."""
    reason = event.get("reason")
    return reason if isinstance(reason, str) else END_LEASE


class GuardBase:
    """What the threaded :class:`Guard` and ``hivekeeper.aio.Guard`` share."""

    def __init__(self, session: "SessionBase", ask: "Ask", token: int) -> None:
        #: The session the grant is bound to.
        self.session = session
        #: ``"lock"``, ``"sem"`` or ``"waypoint"`` (a route is a waypoint reservation of its
        #: name: ``fence.check`` and ``inspect`` take this kind).
        self.kind = ask.kind
        #: The resource's name; a multi-lock's first lock.
        self.name = ask.name
        #: Every resource the guard holds: a multi-lock's locks, or the one of :attr:`name`.
        self.names = ask.names or (ask.name,)
        #: A lock's mode, ``"exclusive"`` or ``"shared"`` (:meth:`downgrade` makes it
        #: shared); ``None`` for every other kind.
        self.mode = ask.mode
        #: The ``max_hold_ms`` asked for: the service ends the hold that long after its grant
        #: (:attr:`ended`); ``None``: no bound.
        self.max_hold_ms: Optional[int] = ask.fields.get("max_hold_ms")
        #: The fencing token: strictly increasing per resource across grants, leader changes
        #: and restarts. Send it with every action the guard protects.
        self.token = token
        #: The priority the reservation holds, 0 (routine) to 3 (emergency); 0 for locks and
        #: semaphores, which have none. :meth:`amend` restates it.
        self.priority = ask.priority
        #: A route's volumes in flight order, as last granted (``amend`` replaces them);
        #: ``None`` for everything but a route.
        self.volumes: Optional[List[Volume]] = (
            None if ask.volumes is None else [Volume.from_wire(v) for v in ask.volumes]
        )
        #: Set while a vacate deadline stands, as far as the client was told: the service told
        #: this reservation (its name and token) that a higher priority preempts it, so vacate
        #: the airspace and release the guard before :attr:`vacate_by_ms`. Cleared when the
        #: service withdraws the deadline. Never set for a lock or a semaphore. Events are a
        #: courtesy (one sent while the agent reconnects is missed): the token is the safety
        #: mechanism.
        self.preempted = threading.Event()
        #: Set when the service dropped the vacate deadline of an earlier preemption
        #: (``reservation.preemption_withdrawn``): the reservation is kept, with its token, and
        #: need not be vacated. Cleared by a new preemption.
        self.preemption_withdrawn = threading.Event()
        #: The notice behind :attr:`preempted` (deadline and the preemptor's priority); ``None``
        #: while none stands. Changed under the session's condition.
        self.preemption: Optional[Preempted] = None
        #: Set when the hold is known to have ended without a release by this guard: the
        #: service took it away (``lock.lost``, ``sem.lost`` for its token) or the session
        #: ended. Final. Locks and semaphores only. Events are a courtesy (one sent while the
        #: agent reconnects is missed): the token is the safety mechanism.
        self.ended = threading.Event()
        #: Why the hold ended once :attr:`ended` is set: :data:`END_MAX_HOLD`,
        #: :data:`END_LEASE`, or a reason the service added later, as sent; ``None`` before.
        self.end_reason: Optional[str] = None
        #: What was asked: the release request comes from it.
        self._ask = ask
        #: Whether the grant was released (or given back by the client).
        self._released = False
        if self.kind == "waypoint":
            session._watch_preemption(self)
        if self.kind in HOLD_TIME_KINDS:
            session._watch_hold(self)

    @property
    def is_route(self) -> bool:
        """Whether the guard holds a route (``route.reserve``)."""
        return self.volumes is not None

    @property
    def is_multi_lock(self) -> bool:
        """Whether the guard holds a multi-lock (``lock.acquire_all``)."""
        return self._ask.is_multi_lock

    @property
    def claims(self) -> Tuple[Tuple[str, str], ...]:
        """The ``(kind, name)`` the guard's session holds it under: one per lock of a
        multi-lock."""
        return self._ask.claims

    @property
    def vacate_by_ms(self) -> Optional[int]:
        """When the service ends the preempted reservation unless released first (UTC ms, the
        service's clock); ``None`` while it is not preempted."""
        preemption = self.preemption
        return None if preemption is None else preemption.vacate_by_ms

    def _preemption_news(self, notice: Optional[Preempted]) -> None:
        """A ``reservation.preempted`` (``notice``) or ``reservation.preemption_withdrawn``
        (``None``) for this guard (session condition held)."""
        self.preemption = notice
        if notice is None:
            self.preempted.clear()
            self.preemption_withdrawn.set()
        else:
            self.preemption_withdrawn.clear()
            self.preempted.set()

    @property
    def lost(self) -> threading.Event:
        """The session's ``lost`` event: set while the session is not LIVE, when the grant
        may be taken away before the client can tell."""
        return self.session.lost

    def is_lost(self) -> bool:
        """Whether the hold :attr:`ended` or the session is not LIVE right now: stop acting
        under this guard."""
        return self.ended.is_set() or not self.session.state.is_live()

    def _hold_ended(self, reason: str) -> None:
        """The service took the hold away (session condition held): the guard ends, and its
        resources are the session's to acquire again."""
        if self._released or self.ended.is_set():
            return
        log.info("%s %r (token %d) ended: %s", self.kind, self.name, self.token, reason)
        self.end_reason = reason
        self.ended.set()
        self.session._unclaim(*self.claims)
        self.session.agent._shared.notify()

    def _downgrade_request(self) -> Dict[str, Any]:
        """The ``lock.downgrade``. :class:`~hivekeeper.BadRequest` for a guard that is not an
        exclusive single lock's, :class:`~hivekeeper.SessionLost` when the session is not live,
        :class:`~hivekeeper.NotHolder` when the hold ended (nothing to send)."""
        if self.kind != "lock" or self.is_multi_lock or self.mode != LOCK_EXCLUSIVE:
            what = "multi-lock" if self.is_multi_lock else f"{self.mode or self.kind} hold"
            raise BadRequest(
                "bad_request",
                f"{LOCK_DOWNGRADE_OP}: {self.name!r} is a {what}; only a single lock held "
                f"{LOCK_EXCLUSIVE} can be downgraded",
            )
        state = self.session.state
        if not state.is_live():
            raise SessionLost(state)
        if self.ended.is_set():
            raise self._ended_error(LOCK_DOWNGRADE_OP)
        return {"op": LOCK_DOWNGRADE_OP, "name": self.name, "lease": self.session.lease}

    def _downgraded(self, result: Dict[str, Any]) -> None:
        """The hold is shared now, under the same token."""
        if result.get("token") != self.token:
            raise MalformedResponse(
                f"{LOCK_DOWNGRADE_OP} answered {result}; the lock's token is {self.token}"
            )
        with self.session._cond:
            self.mode = LOCK_SHARED

    def _ended_error(self, op: str) -> NotHolder:
        return NotHolder(
            "not_holder",
            f"{op}: the hold {self.token} of {self.kind} {self.name!r} ended ({self.end_reason})",
        )

    def _release_request(self) -> Optional[Dict[str, Any]]:
        """The release's op and fields, or ``None`` when there is nothing to send (released
        already). :class:`~hivekeeper.SessionLost` when the lease ended: the hold was gone
        before this release, which the application may want to know."""
        if self._released:
            return None
        state = self.session.state
        if state.is_ended():
            self._forget()
            raise SessionLost(state)
        if self.ended.is_set():
            self._released = True
            raise self._ended_error(self._ask.release_op)
        return self._ask.release_request(self.session.lease, self.token)

    def _request_failed(self, error: BaseException) -> None:
        """After a failed release, amend or downgrade: a ``lease_not_found`` ends the
        session."""
        if isinstance(error, LeaseNotFound):
            from .session import SessionState

            self.session._request_end(SessionState.EXPIRED)

    def _amend_request(
        self, volumes: Sequence[VolumeLike], priority: Optional[int]
    ) -> Dict[str, Any]:
        """The ``route.amend`` request. :class:`~hivekeeper.BadRequest` for a guard that is
        not a route's, :class:`~hivekeeper.SessionLost` when the session is not live."""
        if not self.is_route:
            raise BadRequest(
                "bad_request", f"route.amend: the {self.kind} {self.name!r} is not a route"
            )
        state = self.session.state
        if not state.is_live():
            raise SessionLost(state)
        held = self.priority if priority is None else priority
        request = {
            "op": "route.amend",
            "name": self.name,
            "lease": self.session.lease,
            "volumes": wire_volumes("route.amend", volumes),
            # Absent means routine: an amend restates the priority as it restates the volumes.
            "priority": held if held else None,
        }
        return request

    def _amended(self, request: Dict[str, Any], result: Dict[str, Any]) -> None:
        """The amend was granted: the guard takes the new volumes and priority. Whether a
        vacate deadline still stands is the service's to say (an amend that keeps a volume
        the preemptor waits on leaves it; one out of its way drops it, and
        ``reservation.preemption_withdrawn`` says so)."""
        if result.get("token") != self.token:
            raise MalformedResponse(
                f"route.amend answered {result}; the route's token is {self.token}"
            )
        with self.session._cond:
            self.volumes = [Volume.from_wire(v) for v in request["volumes"]]
            self.priority = request["priority"] or 0

    def _skip_release_at_exit(self) -> bool:
        """Whether the end of a ``with`` block has nothing to release."""
        if self._released:
            return True
        if self.session.state.is_ended():
            # The lease's end released it already; nothing to send.
            self._forget()
            return True
        if self.ended.is_set():
            # The service took it away; its claims went then.
            self._released = True
            return True
        return False

    def _forget(self) -> None:
        self._released = True
        self.session._unclaim(*self.claims)

    def __repr__(self) -> str:
        route = ", route" if self.is_route else ""
        named = f"names={list(self.names)!r}" if self.is_multi_lock else f"name={self.name!r}"
        mode = "" if self.mode is None else f", mode={self.mode!r}"
        return (
            f"{type(self).__name__}(kind={self.kind!r}, {named}, token={self.token}{mode}{route})"
        )


class Guard(GuardBase):
    """A granted lock, permits, waypoint reservation or route, with its fencing token."""

    def __init__(self, session: "Session", ask: "Ask", token: int) -> None:
        super().__init__(session, ask, token)
        #: The session, typed as the threaded one.
        self.session: "Session" = session

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type: Optional[type], *_: object) -> None:
        if self._skip_release_at_exit():
            return
        if exc_type is None:
            self.release()
            return
        # The block failed: release, but do not hide its exception behind ours.
        try:
            self.release()
        except HivekeeperError as error:
            log.debug("release of %s %r failed: %s", self.kind, self.name, error)

    def fence_check(self, name: Optional[str] = None) -> FenceCheck:
        """``fence.check`` of this guard's own token on its resource (``name``: one of a
        multi-lock's locks, the first by default)."""
        return self.session.agent.fence_check(name or self.name, self.token, self.kind)

    def release(self) -> None:
        """Releases the grant and waits for the service's answer.

        When the lease already ended, nothing is sent and :class:`~hivekeeper.SessionLost` is
        raised: the hold was gone before this release; when the service took the hold away
        (:attr:`ended`, e.g. by its ``max_hold_ms``), :class:`~hivekeeper.NotHolder`. A second
        release does nothing."""
        request = self._release_request()
        if request is None:
            return
        try:
            self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        finally:
            self._forget()

    def downgrade(self) -> None:
        """Makes the exclusive hold of the lock shared (``lock.downgrade``), atomically and
        with the same token: nobody held the lock in between. The shared waiters at the head
        of its queue are granted beside it. :class:`~hivekeeper.BadRequest` (nothing sent) for
        a guard that is not a single lock held exclusive (a shared hold is never upgraded);
        :class:`~hivekeeper.NotHolder` when the hold ended; :class:`~hivekeeper.SessionLost`
        when the session is not live."""
        request = self._downgrade_request()
        try:
            result = self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        self._downgraded(result)

    def wait_ended(self, timeout: Optional[float] = None) -> Optional[str]:
        """Blocks until the hold :attr:`ended` (at most ``timeout`` seconds); its
        :attr:`end_reason`, or ``None`` if it did not end."""
        if not self.ended.wait(timeout):
            return None
        with self.session._cond:
            return self.end_reason

    def amend(self, volumes: Sequence[VolumeLike], priority: Optional[int] = None) -> None:
        """Replaces the route's volumes (``route.amend``), e.g. to extend a delayed flight or
        to free legs already flown. Granted at once, the route keeps its token (and
        :attr:`volumes` becomes the new ones); otherwise :class:`~hivekeeper.WouldBlock` and
        the old route is kept. It never waits and never preempts. ``priority`` changes the
        route's; absent, it keeps :attr:`priority`. :class:`~hivekeeper.NotHolder` when the
        route is no longer held (preempted and ended, or its window over)."""
        request = self._amend_request(volumes, priority)
        try:
            result = self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        self._amended(request, result)

    def wait_preempted(self, timeout: Optional[float] = None) -> Optional[Preempted]:
        """Blocks until a vacate deadline stands (at most ``timeout`` seconds); returns the
        notice, or ``None`` if none came (or it was withdrawn at once)."""
        if not self.preempted.wait(timeout):
            return None
        with self.session._cond:
            return self.preemption

    def wait_preemption_withdrawn(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the service withdraws the vacate deadline (at most ``timeout``
        seconds); whether it did."""
        return self.preemption_withdrawn.wait(timeout)
