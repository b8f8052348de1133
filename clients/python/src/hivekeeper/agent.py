"""``Agent``: one MQTT connection to the service and the request loop on top of it.

A request's life (``Agent._call``), the Rust SDK's ``Agent::call``::

     id = {boot}-{n}; pending[id] = Slot
     ┌▶ Connect: wait for a subscribed link ───────────────(deadline)──▶ Disconnected
     │   │ publish (caller's thread, QoS 1)
     │  Attempt: wait for the response ──── ok / refusal ─────────────▶ result / ServiceError
     │   │ attempt timeout, link lost, `unavailable` or `rate_limited`
     │  Pause: jittered backoff (a late response still completes it) ─(deadline)──▶ NoResponse
     └───┘ resend the SAME id: the service answers it with the first outcome

A response can arrive in any phase: the slot is the same throughout, so a late answer to
attempt 1 completes the request even while attempt 2 is in flight.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from .backoff import Backoff
from .config import AgentConfig, BrokerAddr, config_from
from .connection import Connection, Counters, Shared, Slot, tls_context
from .errors import (
    ConfigError,
    Disconnected,
    HivekeeperError,
    MalformedResponse,
    NoResponse,
    ServiceError,
    Unreachable,
    service_error,
)
from .protocol import (
    ACQUIRE_OPS,
    FenceCheck,
    Inspection,
    Response,
    Topics,
    encode_request,
)

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from .session import Session, SessionState

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


class Wake(NamedTuple):
    """Why a wait of the request loop ended."""

    #: ``"reply"``, ``"ready"``, ``"link_lost"``, ``"lapsed"`` or ``"closed"``.
    kind: str
    #: The response, for ``"reply"``.
    response: Optional[Response]
    #: The ready link's paho client, for ``"ready"``.
    client: Optional["mqtt.Client"]
    #: The link's epoch: the new one for ``"ready"``, the caller's otherwise.
    epoch: int


@dataclass
class Abandon:
    """What to do with a grant that arrives after the caller stopped waiting: the request may
    still be queued at the service, so a grant must be released while the lease lives."""

    #: Called with the late response, on the connection thread (must not block).
    on_late: Callable[[Response], None]
    #: Who abandoned it (a session), so that its end can stop the listening.
    owner: object


class RequestIds:
    """Request ids ``{boot}-{n}``, unique per agent across process restarts.

    The service answers a repeated id with its first outcome, so an id must never repeat for
    a different request, not even after a restart under the same agent id: ``boot`` is 64
    random bits drawn once per :class:`Agent`.
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


class Agent:
    """A connected agent: one MQTT connection (client id = agent id) to one broker of the list
    at a time, served by its own thread, and the request loop on top.

    Creating it validates the settings, connects, and waits until a broker has accepted the
    agent's subscriptions (at most ``request_deadline_ms``): :class:`~hivekeeper.ConfigError`
    or :class:`~hivekeeper.Unreachable` otherwise. ``settings`` are the fields of
    :class:`~hivekeeper.AgentConfig` (``secret=``, ``tls_ca=``, ``backoff_first_ms=``, ...).

    Thread-safe: any number of threads may send requests and hold sessions. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        agent_id: str,
        brokers: Optional[Sequence[str]] = None,
        **settings: Any,
    ) -> None:
        config = config_from(agent_id, brokers, settings)
        brokers_parsed = [BrokerAddr.parse(b) for b in config.brokers]
        try:
            tls = tls_context(config)
        except (OSError, ValueError) as error:
            raise ConfigError(f"tls: {error}") from None
        #: The validated configuration.
        self.config: AgentConfig = config
        #: The parsed broker list.
        self._brokers = brokers_parsed
        #: The agent's topics.
        self._topics = Topics.of(config.topic_prefix, config.agent_id)
        #: The pending map, the link, counters and event handlers, shared with the thread.
        self._shared = Shared()
        #: Source of request ids.
        self._ids = RequestIds()
        #: Sessions not yet ended, revoked by :meth:`close`.
        self._sessions: List["Session"] = []
        self._connection = Connection(config, brokers_parsed, self._topics, tls, self._shared)
        self._thread = threading.Thread(
            target=self._connection.run,
            name=f"hivekeeper-{config.agent_id}",
            daemon=True,
        )
        self._thread.start()
        waited_ms = config.request_deadline_ms
        with self._shared.cond:
            ready = self._shared.cond.wait_for(
                lambda: self._shared.link.ready, timeout=waited_ms / 1000.0
            )
            last_error = self._shared.last_error
        if not ready:
            self._connection.stop()
            self._thread.join(timeout=5.0)
            raise Unreachable(", ".join(config.brokers), waited_ms, last_error)

    # -- context manager and lifetime ------------------------------------------------------

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Revokes the sessions not yet ended (best effort, one attempt each), then closes the
        connection. Idempotent. Every session of the agent ends (REVOKED: nothing keeps its
        lease alive any more; a lease whose revoke was lost expires after its TTL), and waits
        in the client end with :class:`~hivekeeper.Disconnected`."""
        from .session import SessionState

        with self._shared.cond:
            if self._shared.closed:
                return
            sessions = list(self._sessions)
        for session in sessions:
            try:
                session._revoke(Patience(self._attempt_s(), self._attempt_s()))
            except HivekeeperError as error:
                log.debug("revoke at close failed (the lease will expire): %s", error)
                session._request_end(SessionState.REVOKED)
        self._connection.stop()
        self._thread.join(timeout=10.0)

    # -- what the agent is --------------------------------------------------------------------

    @property
    def agent_id(self) -> str:
        """The agent id."""
        return self.config.agent_id

    @property
    def broker(self) -> Optional[str]:
        """The broker the agent is connected and subscribed to right now (``host:port``);
        ``None`` while it is reconnecting."""
        with self._shared.cond:
            link = self._shared.link
            return str(self._brokers[link.broker]) if link.ready else None

    def stats(self) -> Counters:
        """Counters since the agent was created (a copy)."""
        with self._shared.cond:
            return replace(self._shared.counters)

    def add_event_handler(self, handler: Callable[[Dict[str, Any]], None]) -> None:
        """Calls ``handler`` with every event the service sends this agent from now on
        (``{"event": "lock.lost", "name": ..., "token": ...}``), on the connection thread: it
        must return quickly. Events are a courtesy and can be missed (while reconnecting)."""
        with self._shared.cond:
            self._shared.event_handlers.append(handler)

    def remove_event_handler(self, handler: Callable[[Dict[str, Any]], None]) -> None:
        """Stops calling ``handler``."""
        with self._shared.cond:
            if handler in self._shared.event_handlers:
                self._shared.event_handlers.remove(handler)

    # -- requests -----------------------------------------------------------------------------

    def session(
        self,
        ttl_ms: int,
        on_lost: Optional[Callable[["SessionState"], None]] = None,
    ) -> "Session":
        """Takes a lease of ``ttl_ms`` and keeps it alive in the background (a
        :class:`~hivekeeper.Session`; use it as a context manager to revoke it at the end).

        ``on_lost`` is called (on the session's keeper thread) each time the session stops
        being live, with its new state."""
        from .session import Session

        return Session._grant(self, ttl_ms, on_lost)

    def request(self, op: str, **fields: Any) -> Dict[str, Any]:
        """Sends any op of the protocol and returns the success's result fields.

        For ops this client has no method for (``admin.*``, ops the service adds later).
        Resends the same id on timeouts, lost connections, ``unavailable`` and
        ``rate_limited``; every other refusal is raised as its :class:`ServiceError`
        subclass. Fields whose value is ``None`` are left out."""
        return self._call(op, fields, self._patience_for(op, fields.get("wait_ms")))

    def fence_check(self, resource: str, token: int, kind: str = "lock") -> FenceCheck:
        """``fence.check``: whether ``token`` is held right now on ``resource`` (a lock by
        default; pass ``kind="sem"`` or ``"waypoint"`` for the others)."""
        result = self.request("fence.check", resource=resource, kind=kind, token=token)
        try:
            return FenceCheck(valid=bool(result["valid"]), current=int(result["current"]))
        except (KeyError, TypeError, ValueError):
            raise MalformedResponse(f"fence.check answered {result}") from None

    def inspect(self, kind: str, name: str) -> Inspection:
        """``inspect``: who holds ``name`` (a ``"lock"``, ``"sem"`` or ``"waypoint"``) and who
        waits for it, in queue order."""
        result = self.request("inspect", kind=kind, name=name)
        try:
            return Inspection.from_result(result)
        except (KeyError, TypeError):
            raise MalformedResponse(f"inspect answered {result}") from None

    # -- the request loop ---------------------------------------------------------------------

    def _attempt_s(self) -> float:
        return self.config.request_timeout_ms / 1000.0

    def _patience_for(self, op: str, wait_ms: Optional[int]) -> Patience:
        """How patient a request for ``op`` is (the Rust SDK's ``patience_for``)."""
        attempt_s = self._attempt_s()
        deadline_s = self.config.request_deadline_ms / 1000.0
        wait_resend_s = self.config.wait_resend_ms / 1000.0
        if op in ACQUIRE_OPS and wait_ms is None:
            # Queued until granted or the lease ends: no deadline. A resend of a queued id
            # takes no second slot and recovers a lost grant.
            return Patience(wait_resend_s, None)
        if op in ACQUIRE_OPS and isinstance(wait_ms, int) and wait_ms > 0:
            # The service answers by `wait_ms` at the latest (grant or `timeout`).
            wait_s = wait_ms / 1000.0
            return Patience(min(wait_s, wait_resend_s) + attempt_s, wait_s + deadline_s)
        return Patience(attempt_s, deadline_s)

    def _call(
        self,
        op: str,
        fields: Dict[str, Any],
        patience: Patience,
        interrupt: Optional[Callable[[], Optional[HivekeeperError]]] = None,
        abandon: Optional[Abandon] = None,
    ) -> Dict[str, Any]:
        """The request loop (see the module doc).

        ``interrupt`` is checked under the shared condition at every wake; an exception it
        returns ends the wait (a session's loss). ``abandon`` says what to do with a response
        that arrives after the caller stopped waiting."""
        request_id = self._ids.next()
        payload = encode_request(request_id, op, fields)
        shared = self._shared
        slot = Slot()
        with shared.cond:
            if shared.closed:
                raise Disconnected("the agent is closed")
            shared.pending[request_id] = slot
        started = time.monotonic()
        deadline = None if patience.total_s is None else started + patience.total_s
        backoff = Backoff(self.config.backoff_first_ms, self.config.backoff_cap_ms)
        attempts = 0
        phase = "connect"
        epoch = 0
        until: Optional[float] = None
        # The last `unavailable`/`rate_limited`, raised if the deadline passes after it.
        last_refusal: Optional[ServiceError] = None
        answered = False
        try:
            while True:
                wake, response, client, epoch = self._wait(
                    slot, phase, epoch, until if phase != "connect" else deadline, interrupt
                )
                if wake == "reply":
                    assert response is not None
                    if response.ok:
                        answered = True
                        return response.result
                    error = service_error(response.code or "", response.message or "")
                    if response.code not in RETRIED_CODES:
                        answered = True
                        raise error
                    log.debug("%s %s: %s; resending after a pause", op, request_id, response.code)
                    last_refusal = error
                    phase, until = (
                        "pause",
                        _min(time.monotonic() + backoff.next_delay_s(), deadline),
                    )
                elif wake == "ready":
                    attempts += 1
                    if attempts > 1:
                        with shared.cond:
                            shared.counters.resends_total += 1
                        log.debug(
                            "%s %s: resending the same id (attempt %d)", op, request_id, attempts
                        )
                    until = _min(time.monotonic() + patience.attempt_s, deadline)
                    assert client is not None
                    # A publish that fails (the link just died) lapses below like a lost one.
                    try:
                        client.publish(self._topics.request, payload, qos=1)
                    except Exception as error:  # noqa: BLE001 - paho on a dying socket
                        log.debug("%s %s: publish failed: %s", op, request_id, error)
                    phase = "attempt"
                elif wake in ("lapsed", "link_lost"):
                    if deadline is not None and time.monotonic() >= deadline:
                        waited_ms = int((time.monotonic() - started) * 1000)
                        if last_refusal is not None:
                            raise last_refusal
                        with shared.cond:
                            ready = shared.link.ready
                        if ready:
                            raise NoResponse(op, waited_ms)
                        raise Disconnected(f"{op}: not connected to any broker for {waited_ms} ms")
                    if phase == "attempt":
                        phase, until = (
                            "pause",
                            _min(time.monotonic() + backoff.next_delay_s(), deadline),
                        )
                    else:
                        phase = "connect"
                else:  # "closed"
                    raise Disconnected("the agent is closed")
        finally:
            self._settle(request_id, slot, answered, abandon)

    def _wait(
        self,
        slot: Slot,
        phase: str,
        epoch: int,
        until: Optional[float],
        interrupt: Optional[Callable[[], Optional[HivekeeperError]]],
    ) -> Wake:
        """Waits for the response, the link change the phase wants, or ``until``."""
        shared = self._shared
        with shared.cond:
            while True:
                # A response wins over everything else that is ready at the same time.
                if slot.response is not None:
                    response, slot.response = slot.response, None
                    return Wake("reply", response, None, epoch)
                if shared.closed:
                    return Wake("closed", None, None, epoch)
                if interrupt is not None:
                    error = interrupt()
                    if error is not None:
                        raise error
                link = shared.link
                if phase == "connect" and link.ready and shared.client is not None:
                    return Wake("ready", None, shared.client, link.epoch)
                if phase == "attempt" and (not link.ready or link.epoch != epoch):
                    return Wake("link_lost", None, None, epoch)
                now = time.monotonic()
                if until is not None and now >= until:
                    return Wake("lapsed", None, None, epoch)
                shared.cond.wait(None if until is None else until - now)

    def _settle(
        self, request_id: str, slot: Slot, answered: bool, abandon: Optional[Abandon]
    ) -> None:
        """Takes the request out of the pending map, or, for an acquire left before its
        answer, keeps listening so that a grant that still arrives is released."""
        shared = self._shared
        late: Optional[Response] = None
        with shared.cond:
            if answered or abandon is None or shared.closed:
                shared.pending.pop(request_id, None)
                return
            shared.counters.requests_abandoned_total += 1
            if slot.response is not None:
                late = slot.response
                shared.pending.pop(request_id, None)
            else:
                slot.on_late = abandon.on_late
                slot.owner = abandon.owner
        if late is not None:
            abandon.on_late(late)

    def _forget_abandoned(self, owner: object) -> None:
        """Stops listening for the requests ``owner`` abandoned (its lease ended: nothing is
        left to release)."""
        with self._shared.cond:
            gone = [i for i, slot in self._shared.pending.items() if slot.owner is owner]
            for request_id in gone:
                del self._shared.pending[request_id]


def _min(at: float, deadline: Optional[float]) -> float:
    return at if deadline is None else min(at, deadline)
