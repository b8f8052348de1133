"""The life of one request, without I/O: shared by the threaded client and ``hivekeeper.aio``.

The Rust SDK's ``Agent::call`` as a state machine. A driver (a thread waiting on the shared
condition, or a coroutine waiting on the event loop) waits until :meth:`RequestLoop.wake_from`
says what ended the wait, or until :meth:`RequestLoop.wait_until`; it feeds the wake to
:meth:`RequestLoop.advance`, and publishes when told::

     id = {boot}-{n}; pending[id] = Slot
     ┌▶ connect: wait for a subscribed link ───────────────(deadline)──▶ Disconnected
     │   │ publish (the caller's thread or task, QoS 1)
     │  attempt: wait for the response ──── ok / refusal ─────────────▶ result / ServiceError
     │   │ attempt timeout, link lost, `unavailable` or `rate_limited`
     │  pause: jittered backoff (a late response still completes it) ─(deadline)──▶ NoResponse
     └───┘ resend the SAME id: the service answers it with the first outcome

A response can arrive in any phase: the slot is the same throughout, so a late answer to
attempt 1 completes the request even while attempt 2 is in flight.
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional

from .backoff import Backoff
from .config import AgentConfig
from .connection import Shared, Slot
from .errors import Disconnected, HivekeeperError, NoResponse, ServiceError, service_error
from .protocol import ACQUIRE_OPS, WATCH_POLL_OP, WATCH_POLL_WAIT_MS_DEFAULT, Response

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

log = logging.getLogger("hivekeeper")

#: The codes that change nothing and pass: the same id again after a jittered pause.
RETRIED_CODES = frozenset({"unavailable", "rate_limited"})


@dataclass(frozen=True)
class Patience:
    """How long one request may take: per attempt, and in all (``None``: no limit; the
    session's loss ends it)."""

    #: How long one attempt waits for its response before the same id is sent again.
    attempt_s: float
    #: How long the request is retried in all.
    total_s: Optional[float]

    @staticmethod
    def for_op(config: AgentConfig, op: str, wait_ms: Optional[int]) -> "Patience":
        """How patient a request for ``op`` is (the Rust SDK's ``patience_for``)."""
        attempt_s = config.request_timeout_ms / 1000.0
        deadline_s = config.request_deadline_ms / 1000.0
        wait_resend_s = config.wait_resend_ms / 1000.0
        if op in ACQUIRE_OPS and wait_ms is None:
            # Queued until granted or the lease ends: no deadline. A resend of a queued id
            # takes no second slot and recovers a lost grant.
            return Patience(wait_resend_s, None)
        if op == WATCH_POLL_OP:
            # The service holds a poll up to `wait_ms` before it answers: an attempt waits
            # that long plus one ordinary attempt, or every idle poll would be resent (a
            # resend of a pending poll is a second poll on the service).
            poll_ms = wait_ms if isinstance(wait_ms, int) else WATCH_POLL_WAIT_MS_DEFAULT
            poll_s = max(poll_ms, 0) / 1000.0
            return Patience(poll_s + attempt_s, poll_s + deadline_s)
        if op in ACQUIRE_OPS and isinstance(wait_ms, int) and wait_ms > 0:
            # The service answers by `wait_ms` at the latest (grant or `timeout`).
            wait_s = wait_ms / 1000.0
            return Patience(min(wait_s, wait_resend_s) + attempt_s, wait_s + deadline_s)
        return Patience(attempt_s, deadline_s)


class Wake(NamedTuple):
    """Why a wait of the request loop ended."""

    #: ``"reply"``, ``"ready"``, ``"link_lost"``, ``"lapsed"`` or ``"closed"``.
    kind: str
    #: The response, for ``"reply"``.
    response: Optional[Response] = None
    #: The ready link's paho client, for ``"ready"``.
    client: Optional["mqtt.Client"] = None
    #: The link's epoch, for ``"ready"``.
    epoch: int = 0
    #: A paho client to disconnect (its node answered only ``unavailable`` for a while), for
    #: ``"reply"``.
    leave: Optional["mqtt.Client"] = None


class Action(NamedTuple):
    """What the driver does next."""

    #: ``"publish"`` (to :attr:`client`, then wait), ``"done"`` (return :attr:`result`) or
    #: ``"wait"``.
    kind: str
    #: The success's result fields, for ``"done"``.
    result: Optional[Dict[str, Any]] = None
    #: Where to publish, for ``"publish"``.
    client: Optional["mqtt.Client"] = None
    #: Whether the publish sends the id again (counted in ``resends_total``).
    resend: bool = False
    #: A paho client to disconnect before waiting: the agent leaves that broker.
    leave: Optional["mqtt.Client"] = None


@dataclass
class Abandon:
    """What to do with a grant that arrives after the caller stopped waiting: the request may
    still be queued at the service, so a grant must be released while the lease lives."""

    #: Called with the late response, on the connection thread (must not block).
    on_late: Callable[[Response], None]
    #: Who abandoned it (a session), so that its end can stop the listening.
    owner: object


@dataclass(frozen=True)
class Call:
    """One request as its caller asks for it, for either agent's request loop to carry out."""

    #: The op.
    op: str
    #: Its fields; ``None`` values are left out of the payload.
    fields: Dict[str, Any]
    #: How long it may take.
    patience: Patience
    #: Checked under the shared condition at every wake; an exception it returns ends the
    #: wait (a session's loss, a closed watch).
    interrupt: Optional[Callable[[], Optional[HivekeeperError]]] = None
    #: What becomes of a response that arrives after the caller stopped waiting (an acquire's
    #: grant is released); ``None``: it is dropped.
    abandon: Optional[Abandon] = None


class RequestIds:
    """Request ids ``{boot}-{n}``, unique per agent across process restarts.

    The service answers a repeated id with its first outcome, so an id must never repeat for
    a different request, not even after a restart under the same agent id: ``boot`` is 64
    random bits drawn once per agent.
    """

    def __init__(self) -> None:
        #: 16 hex digits, fixed for this agent's life.
        self.boot = secrets.token_hex(8)
        #: The last counter value handed out.
        self._n = 0
        #: Guards ``_n``: requests come from many threads.
        self._lock = threading.Lock()

    def next(self) -> str:
        """A fresh id, never the same twice for this instance."""
        with self._lock:
            self._n += 1
            return f"{self.boot}-{self._n}"


class RequestLoop:
    """One request's phases (see the module doc)."""

    def __init__(
        self,
        op: str,
        request_id: str,
        payload: bytes,
        patience: Patience,
        config: AgentConfig,
        now: float,
    ) -> None:
        #: The op, for messages.
        self.op = op
        #: The request id, the same on every attempt.
        self.request_id = request_id
        #: The encoded request, published as it is on every attempt.
        self.payload = payload
        #: How patient the request is.
        self.patience = patience
        #: When it started (monotonic seconds).
        self.started = now
        #: When it gives up; ``None``: never (a waiting acquire).
        self.deadline = None if patience.total_s is None else now + patience.total_s
        #: The pauses between attempts.
        self.backoff = Backoff(config.backoff_first_ms, config.backoff_cap_ms)
        #: Publishes so far.
        self.attempts = 0
        #: ``"connect"``, ``"attempt"`` or ``"pause"``.
        self.phase = "connect"
        #: The link epoch the last attempt was published under.
        self.epoch = 0
        #: When the current attempt or pause ends.
        self.until: Optional[float] = None
        #: The last ``unavailable``/``rate_limited``, raised if the deadline passes after it.
        self.last_refusal: Optional[ServiceError] = None
        #: Whether the final response arrived (nothing is left to listen for).
        self.answered = False

    def wait_until(self) -> Optional[float]:
        """Until when the driver waits for a wake (``None``: no time limit)."""
        return self.deadline if self.phase == "connect" else self.until

    def wake_from(
        self,
        slot: Slot,
        shared: Shared,
        interrupt: Optional[Callable[[], Optional[HivekeeperError]]],
        now: float,
    ) -> Optional[Wake]:
        """What ended the wait, or ``None`` to keep waiting; called with the condition held.
        Raises what ``interrupt`` returns (a session's loss)."""
        # A response wins over everything else that is ready at the same time.
        if slot.response is not None:
            response, slot.response = slot.response, None
            leave = None
            if response.code == "unavailable":
                leave = shared.note_unavailable(self.epoch, now)
            else:
                shared.note_answered()
            return Wake("reply", response, leave=leave)
        if shared.closed:
            return Wake("closed")
        if interrupt is not None:
            error = interrupt()
            if error is not None:
                raise error
        link = shared.link
        if self.phase == "connect" and link.ready and shared.client is not None:
            return Wake("ready", client=shared.client, epoch=link.epoch)
        if self.phase == "attempt" and (not link.ready or link.epoch != self.epoch):
            return Wake("link_lost")
        until = self.wait_until()
        if until is not None and now >= until:
            return Wake("lapsed")
        return None

    def advance(self, wake: Wake, now: float, link_ready: bool) -> Action:
        """The next step after ``wake``; raises the request's error when it fails."""
        if wake.kind == "reply":
            assert wake.response is not None
            response = wake.response
            if response.ok:
                self.answered = True
                return Action("done", result=response.result)
            error = service_error(response.code or "", response.message or "", response.error)
            if response.code not in RETRIED_CODES:
                self.answered = True
                raise error
            log.debug("%s %s: %s; resending after a pause", self.op, self.request_id, error.code)
            self.last_refusal = error
            self._pause(now)
            return Action("wait", leave=wake.leave)
        if wake.kind == "ready":
            self.attempts += 1
            self.epoch = wake.epoch
            self.until = _min(now + self.patience.attempt_s, self.deadline)
            self.phase = "attempt"
            return Action("publish", client=wake.client, resend=self.attempts > 1)
        if wake.kind in ("lapsed", "link_lost"):
            if self.deadline is not None and now >= self.deadline:
                waited_ms = int((now - self.started) * 1000)
                if self.last_refusal is not None:
                    raise self.last_refusal
                if link_ready:
                    raise NoResponse(self.op, waited_ms)
                raise Disconnected(f"{self.op}: not connected to any broker for {waited_ms} ms")
            if self.phase == "attempt":
                self._pause(now)
            else:
                self.phase = "connect"
            return Action("wait")
        raise Disconnected("the agent is closed")

    def _pause(self, now: float) -> None:
        self.phase = "pause"
        self.until = _min(now + self.backoff.next_delay_s(), self.deadline)


def _min(at: float, deadline: Optional[float]) -> float:
    return at if deadline is None else min(at, deadline)
