"""``Agent``: one MQTT connection to the service and the request loop on top of it.

:class:`AgentBase` is what the threaded :class:`Agent` and ``hivekeeper.aio.Agent`` share: the
validated settings, the connection thread (``connection.py``), the pending map, request ids,
and the bookkeeping of a request's start and end. The request's phases are
``request_loop.RequestLoop``; each agent only waits its own way (a thread on the shared
condition, a coroutine on its event loop).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from .airspace import AirspaceCalls, AirspacePage
from .config import AgentConfig, BrokerAddr, config_from
from .connection import UNAVAILABLE_FAILOVER_S, Connection, Counters, Shared, Slot, tls_context
from .errors import ConfigError, Disconnected, HivekeeperError, Unreachable
from .protocol import FenceCheck, Inspection, Response, Topics, encode_request
from .request_loop import Abandon, Action, Call, Patience, RequestIds, RequestLoop, Wake

if TYPE_CHECKING:
    from .election import Leader, Observer
    from .kv import Kv
    from .session import Session, SessionState

log = logging.getLogger("hivekeeper")


class AgentBase:
    """What the threaded and the asyncio agent share (see the module doc)."""

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
        #: Sessions not yet ended, revoked by ``close``.
        self._sessions: List[Any] = []
        #: The connection thread's body.
        self._connection = Connection(config, brokers_parsed, self._topics, tls, self._shared)
        #: The connection thread, started by the subclass once it can be woken.
        self._thread = threading.Thread(
            target=self._connection.run,
            name=f"hivekeeper-{config.agent_id}",
            daemon=True,
        )
        self._created()

    def _created(self) -> None:
        """The end of the construction, each agent its own way: the threaded one connects at
        once, the asyncio one gets ready to connect on its event loop."""
        raise NotImplementedError

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

    # -- the parts of a request both agents share ------------------------------------------------

    def _not_connected(self) -> HivekeeperError:
        """Stops the connection thread; the error for an agent no broker accepted: the
        refusal that ended the wait at once, or :class:`~hivekeeper.Unreachable`."""
        with self._shared.cond:
            last_error = self._shared.last_error
            refused = self._shared.refused
        self._stop_connection()
        if refused is not None:
            return refused
        return Unreachable(
            ", ".join(self.config.brokers), self.config.request_deadline_ms, last_error
        )

    def _stop_connection(self) -> None:
        self._connection.stop()
        self._thread.join(timeout=10.0)

    def _patience_for(self, op: str, wait_ms: Optional[int]) -> Patience:
        return Patience.for_op(self.config, op, wait_ms)

    def _request_call(self, op: str, fields: Dict[str, Any]) -> Call:
        """The call of ``request(op, **fields)``: patient as its op and ``wait_ms`` say."""
        return Call(op, fields, self._patience_for(op, fields.get("wait_ms")))

    def _close_patience(self) -> Patience:
        """One attempt, for the revokes of ``close``."""
        attempt_s = self.config.request_timeout_ms / 1000.0
        return Patience(attempt_s, attempt_s)

    def _sessions_to_close(self) -> List[Any]:
        """The sessions not yet ended, or none if the agent is already closed."""
        with self._shared.cond:
            return [] if self._shared.closed else list(self._sessions)

    def _begin(self, call: Call) -> Tuple[RequestLoop, Slot]:
        """Encodes the request and puts its slot in the pending map."""
        request_id = self._ids.next()
        payload = encode_request(request_id, call.op, call.fields)
        slot = Slot()
        with self._shared.cond:
            if self._shared.closed:
                raise Disconnected("the agent is closed")
            self._shared.pending[request_id] = slot
        started = time.monotonic()
        loop = RequestLoop(call.op, request_id, payload, call.patience, self.config, started)
        return loop, slot

    def _check(
        self,
        loop: RequestLoop,
        slot: Slot,
        interrupt: Optional[Callable[[], Optional[HivekeeperError]]],
    ) -> Tuple[Optional[Wake], bool, float]:
        """Under the condition: what ended the wait (or ``None``), whether the link is ready,
        and the time it was checked at."""
        with self._shared.cond:
            now = time.monotonic()
            return loop.wake_from(slot, self._shared, interrupt, now), self._shared.link.ready, now

    def _step(self, loop: RequestLoop, wake: Wake, link_ready: bool) -> Optional[Dict[str, Any]]:
        """Advances the loop; publishes when it says so; the result once it is done."""
        action: Action = loop.advance(wake, time.monotonic(), link_ready)
        if action.leave is not None:
            log.warning(
                "%s: the broker answered only unavailable for %.0f ms (its node reaches no "
                "leader); trying the next broker",
                loop.op,
                UNAVAILABLE_FAILOVER_S * 1000,
            )
            try:
                action.leave.disconnect()
            except Exception:  # noqa: BLE001 - a dying socket; the connection thread moves on
                pass
        if action.kind == "done":
            return action.result
        if action.kind == "publish":
            if action.resend:
                with self._shared.cond:
                    self._shared.counters.resends_total += 1
                log.debug(
                    "%s %s: resending the same id (attempt %d)",
                    loop.op,
                    loop.request_id,
                    loop.attempts,
                )
            assert action.client is not None
            # A publish that fails (the link just died) lapses like a lost one.
            try:
                action.client.publish(self._topics.request, loop.payload, qos=1)
            except Exception as error:  # noqa: BLE001 - paho on a dying socket
                log.debug("%s %s: publish failed: %s", loop.op, loop.request_id, error)
        return None

    def _settle(self, loop: RequestLoop, slot: Slot, abandon: Optional[Abandon]) -> None:
        """Takes the request out of the pending map, or, for an acquire left before its
        answer, keeps listening so that a grant that still arrives is released."""
        shared = self._shared
        late: Optional[Response] = None
        with shared.cond:
            if loop.answered or abandon is None or shared.closed:
                shared.pending.pop(loop.request_id, None)
                return
            shared.counters.requests_abandoned_total += 1
            if slot.response is not None:
                late = slot.response
                shared.pending.pop(loop.request_id, None)
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


class Agent(AgentBase, AirspaceCalls[AirspacePage]):
    """A connected agent: one MQTT connection (client id = agent id) to one broker of the list
    at a time, served by its own thread, and the request loop on top.

    Creating it validates the settings, connects, and waits until a broker has accepted the
    agent's subscriptions (at most ``request_deadline_ms``): :class:`~hivekeeper.ConfigError`,
    :class:`~hivekeeper.CredentialsRefused` (at once, when a CONNACK refuses the credentials)
    or :class:`~hivekeeper.Unreachable` otherwise. ``settings`` are the fields of
    :class:`~hivekeeper.AgentConfig` (``secret=``, ``tls_ca=``, ``backoff_first_ms=``, ...).

    Thread-safe: any number of threads may send requests and hold sessions. Use it as a
    context manager, or call :meth:`close`.
    """

    def _created(self) -> None:
        """Connects: starts the connection thread and waits for a broker (see the class doc)."""
        self._thread.start()
        with self._shared.cond:
            ready = self._shared.cond.wait_for(
                lambda: self._shared.link.ready or self._shared.refused is not None,
                timeout=self.config.request_deadline_ms / 1000.0,
            )
            ready = ready and self._shared.link.ready
        if not ready:
            raise self._not_connected()

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

        for session in self._sessions_to_close():
            try:
                session._revoke(self._close_patience())
            except HivekeeperError as error:
                log.debug("revoke at close failed (the lease will expire): %s", error)
                session._request_end(SessionState.REVOKED)
        self._stop_connection()

    def session(
        self,
        ttl_ms: int,
        on_lost: Optional[Callable[["SessionState"], None]] = None,
        lock_delay_ms: int = 0,
    ) -> "Session":
        """Takes a lease of ``ttl_ms`` and keeps it alive in the background (a
        :class:`~hivekeeper.Session`; use it as a context manager to revoke it at the end).

        ``on_lost`` is called (on the session's keeper thread) with each new state that is
        not LIVE. ``lock_delay_ms`` (0 to 60 000; 0, the default, sends none): when the lease
        expires or an operator revokes it, each lock it held is granted to nobody for that
        long, so that a holder that has not noticed yet can stop before anyone else starts
        (PROTOCOL.md section 6.1). A release, or this session's own revoke, skips it."""
        from .session import Session

        fields, opened = Session._granting(self, ttl_ms, on_lost, lock_delay_ms)
        return opened(self.request("lease.grant", **fields))

    def request(self, op: str, **fields: Any) -> Dict[str, Any]:
        """Sends any op of the protocol and returns the success's result fields.

        For ops this client has no method for (``admin.*``, ops the service adds later).
        Resends the same id on timeouts, lost connections, ``unavailable`` and
        ``rate_limited``; every other refusal is raised as its
        :class:`~hivekeeper.ServiceError` subclass. Fields whose value is ``None`` are left
        out."""
        return self._call(self._request_call(op, fields))

    @property
    def kv(self) -> "Kv":
        """Keys and watches (``kv.get``, ``kv.put``, ``kv.delete``, ``kv.txn``,
        ``watch.poll``): a :class:`~hivekeeper.Kv`. Needs no session; ``session.kv`` binds
        puts to the session's lease."""
        from .kv import Kv

        return Kv(self)

    def fence_check(self, resource: str, token: int, kind: str = "lock") -> FenceCheck:
        """``fence.check``: whether ``token`` is held right now on ``resource`` (a lock by
        default; pass ``kind="sem"`` or ``"waypoint"`` for the others)."""
        return FenceCheck.from_result(
            self.request("fence.check", name=resource, kind=kind, token=token)
        )

    def inspect(self, kind: str, name: str) -> Inspection:
        """``inspect``: who holds ``name`` (a ``"lock"``, ``"sem"``, ``"waypoint"``,
        ``"election"`` or ``"barrier"``) and who waits for it, in queue order."""
        return Inspection.from_result(self.request("inspect", kind=kind, name=name))

    def leader(self, name: str) -> Optional["Leader"]:
        """``election.leader``: who leads the election ``name`` (agent, value, token), or
        ``None`` when nobody does. Linearizable; needs no session."""
        from .election import Leader

        return Leader.from_result(self.request("election.leader", name=name))

    def observe(self, name: str, wait_ms: Optional[int] = None) -> "Observer":
        """The leaders of the election ``name`` as an iterator of
        ``Optional[``:class:`~hivekeeper.Leader```]``: the leader now, then one item per
        change of who leads or of its value, a handover yielding the new leader without a
        ``None`` between (see :class:`~hivekeeper.Observer`). ``wait_ms`` is each poll's
        (default 30 s). Needs no session."""
        from .election import Observer

        return Observer(self, name, wait_ms)

    def _airspace_page(self, fields: Dict[str, Any]) -> AirspacePage:
        return AirspacePage.from_result(self.request("airspace.query", **fields))

    def _call(self, call: Call) -> Dict[str, Any]:
        """The request loop, waiting on the shared condition (see :class:`Call` for its
        ``interrupt`` and ``abandon``)."""
        loop, slot = self._begin(call)
        try:
            while True:
                with self._shared.cond:
                    while True:
                        wake, link_ready, now = self._check(loop, slot, call.interrupt)
                        if wake is not None:
                            break
                        until = loop.wait_until()
                        self._shared.cond.wait(None if until is None else until - now)
                result = self._step(loop, wake, link_ready)
                if result is not None:
                    return result
        finally:
            self._settle(loop, slot, call.abandon)
