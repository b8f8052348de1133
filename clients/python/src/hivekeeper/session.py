"""``Session``: a lease kept alive in the background, and the client's own deadline on it.

The Rust SDK's ``session.rs``, with threads::

               keepalive acked, new deadline in the future
           ┌──────────────────────────────────────────────┐
           ▼                                              │
         LIVE ── deadline passes (no ack in time) ──▶ JEOPARDY
           │                                              │
           ├── lease.expired / lease.revoked event,  ─────┴──▶ EXPIRED   (final)
           │   or a lease_not_found answer
           └── revoke() / the `with` block ends ──────────────▶ REVOKED   (final)

     deadline = send time of the last acknowledged keepalive + TTL - keepalive_margin

**The client gives up first (DESIGN.md section 5.3).** The service expires a lease no earlier
than TTL after it *received* the last keepalive, which it received after it was sent. So while
the local monotonic clock has not passed the deadline above, the lease is certainly alive;
once it has, the session is in *jeopardy*: :attr:`Session.lost` is set and ``on_lost`` is
called, still ``margin`` before the service could expire the lease and grant what it held to
anyone else.

Jeopardy is not the end. Keepalives continue, and one acknowledged in time proves the lease
alive (a live lease has lost nothing it held), so the session returns to LIVE with its guards
and tokens intact, as in Chubby: :attr:`Session.lost` is cleared again. EXPIRED and REVOKED
are final.

Keepalives go out every TTL/3 (or ``keepalive_every_ms``) from the grant's send time, each
under a fresh request id on its own short-lived thread (a task in ``hivekeeper.aio``), so a
slow one never delays the next.
Each gives up after TTL - margin, when its send time can no longer move the deadline; it is
resent only when the connection was lost before its answer, never on a mere timeout (the next
keepalive, with a later send time, does better, and resends would multiply the load on a
service that is already too slow).

All session state lives under the agent's one condition (``Shared.cond``), which every wait
of the client watches: a request waiting for a grant sees the session's loss at once.
:class:`SessionBase` decides (the deadline, jeopardy, the cadence: :meth:`SessionBase._step`);
:class:`Session` and ``hivekeeper.aio.Session`` only wait and send, each its own way.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Set, Tuple, Type, TypeVar

from . import ask as asks
from .ask import Ask
from .errors import (
    AlreadyHeld,
    ConfigError,
    HivekeeperError,
    LeaseNotFound,
    MalformedResponse,
    SessionLost,
)
from .guard_events import GuardEvents
from .locks import LockCalls
from .protocol import FenceCheck, Inspection, Response
from .request_loop import Abandon, Call, Patience
from .reservations import ReservationCalls

if TYPE_CHECKING:
    from .agent import Agent, AgentBase
    from .barrier import Barrier
    from .election import Leadership
    from .guard import Guard
    from .kv import Kv

log = logging.getLogger("hivekeeper")

#: A session class, for the plan of its grant.
S = TypeVar("S", bound="SessionBase")


class SessionState(enum.Enum):
    """Where a session stands, as the client knows it."""

    #: The lease is certainly alive: the deadline is in the future.
    LIVE = "live"
    #: The deadline passed without an acknowledged keepalive: the lease may be about to
    #: expire. Treat guards as lost; a late acknowledgement can bring LIVE back.
    JEOPARDY = "jeopardy"
    #: The service said the lease is gone (``lease.expired`` event or ``lease_not_found``).
    EXPIRED = "expired"
    #: The session was revoked.
    REVOKED = "revoked"

    def is_live(self) -> bool:
        """Whether the session can be used: only LIVE."""
        return self is SessionState.LIVE

    def is_ended(self) -> bool:
        """Whether the lease is known to be over: EXPIRED or REVOKED."""
        return self in (SessionState.EXPIRED, SessionState.REVOKED)

    def __str__(self) -> str:
        return self.value


def grant_fields(agent: "AgentBase", ttl_ms: int, lock_delay_ms: int) -> Dict[str, Any]:
    """The fields of the ``lease.grant`` of a session; :class:`ConfigError` for a TTL the
    keepalive settings cannot serve. A ``lock_delay_ms`` of 0 (none, the service's default)
    is left out."""
    check_ttl(agent, ttl_ms)
    return {"ttl_ms": ttl_ms, "lock_delay_ms": lock_delay_ms or None}


def check_ttl(agent: "AgentBase", ttl_ms: int) -> None:
    """Refuses a TTL the keepalive settings cannot serve (:class:`ConfigError`)."""
    config = agent.config
    margin_ms = config.keepalive_margin_ms
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
        raise ConfigError(f"ttl_ms must be an integer, not {ttl_ms!r}")
    if ttl_ms <= 2 * margin_ms:
        raise ConfigError(
            f"ttl_ms ({ttl_ms}) must be more than twice keepalive_margin_ms ({margin_ms}), "
            "or the session would be in jeopardy before its second keepalive"
        )
    every_ms = config.keepalive_every_ms
    if every_ms is not None and ttl_ms <= 2 * every_ms:
        raise ConfigError(
            f"ttl_ms ({ttl_ms}) must be more than twice keepalive_every_ms ({every_ms}): "
            "one lost keepalive must not cost the lease"
        )


def _grant_token(ask: Ask, result: Dict[str, Any]) -> Optional[int]:
    """The fencing token a grant's answer carries (``ask.answer``), or ``None``."""
    token = result.get(ask.answer)
    return None if isinstance(token, bool) or not isinstance(token, int) else token


class SessionBase(GuardEvents):
    """What the threaded :class:`Session` and ``hivekeeper.aio.Session`` share: the state,
    the deadline and the keepalive cadence (decided by :meth:`_step`), the claims, the
    bookkeeping around acquires and the events routed to guards (:class:`GuardEvents`).
    Each only sends and waits its own way."""

    def __init__(
        self,
        agent: "AgentBase",
        ttl_ms: int,
        granted: Dict[str, Any],
        sent: float,
        on_lost: Optional[Callable[[SessionState], None]],
        lock_delay_ms: int = 0,
    ) -> None:
        lease = granted.get("lease")
        if not isinstance(lease, str):
            raise MalformedResponse(f"lease.grant succeeded without a `lease`: {granted}")
        granted_ttl_ms = granted.get("ttl_ms", ttl_ms)
        ttl_s = granted_ttl_ms / 1000.0
        config = agent.config
        #: The agent the lease belongs to.
        self.agent = agent
        #: The opaque lease id, as the service granted it.
        self.lease: str = lease
        #: The lease's TTL as the service granted it.
        self.ttl_ms: int = granted_ttl_ms
        #: How long the service grants the locks of this lease to nobody after it expires or
        #: an operator revokes it (PROTOCOL.md section 6.1); 0: not at all.
        self.lock_delay_ms = lock_delay_ms
        #: Set while the session is not LIVE (jeopardy, expired, revoked); cleared if a
        #: keepalive brings it back from jeopardy. ``session.lost.wait(t)`` races a critical
        #: section against the loss.
        self.lost = threading.Event()
        #: Called by the keeper with each new state that is not LIVE.
        self._on_lost = on_lost
        #: How much earlier than the TTL the session gives up, seconds.
        self._margin_s = min(config.keepalive_margin_ms / 1000.0, ttl_s / 2)
        #: How often a keepalive goes out, seconds. The service may grant another TTL than
        #: asked: the period follows the granted one.
        every_ms = config.keepalive_every_ms
        self._period_s = ttl_s / 3 if every_ms is None else min(every_ms / 1000.0, ttl_s / 2)
        #: Everything below is guarded by the agent's condition.
        self._cond = agent._shared.cond
        #: The state; changed only through :meth:`_set_state`.
        self._state = SessionState.LIVE
        #: Send time (monotonic) of the last acknowledged keepalive (or the grant) + TTL - margin.
        #: ``sent`` was taken before the grant's first send: the lease cannot have been
        #: created earlier, so this is on the safe side even if a retry was answered.
        self._deadline = sent + ttl_s - self._margin_s
        #: When the next keepalive goes out (monotonic).
        self._next_keepalive = sent + self._period_s
        #: A lease end seen elsewhere (an event, a ``lease_not_found`` answer, a revoke) for the
        #: keeper to apply.
        self._end_requested: Optional[SessionState] = None
        #: What this session holds or is acquiring: ``(kind, name)``. A second guard for a
        #: hold would release it under the first one's feet.
        self._claims: Set[Tuple[str, str]] = set()
        self._init_guard_events()

    @classmethod
    def _granting(
        cls: Type[S],
        agent: "AgentBase",
        ttl_ms: int,
        on_lost: Optional[Callable[[SessionState], None]],
        lock_delay_ms: int,
    ) -> Tuple[Dict[str, Any], Callable[[Dict[str, Any]], S]]:
        """The plan of a session's grant, for either agent to carry out: the fields of its
        ``lease.grant`` (:class:`ConfigError` for a TTL the keepalive settings cannot serve),
        and what makes the session of the grant's answer (registered, its keeper started).
        The send time is taken now, before the first send: the lease cannot have been created
        earlier."""
        fields = grant_fields(agent, ttl_ms, lock_delay_ms)
        sent = time.monotonic()

        def opened(granted: Dict[str, Any]) -> S:
            session = cls(agent, ttl_ms, granted, sent, on_lost, lock_delay_ms)
            session._register()
            session._start_keeper()
            return session

        return fields, opened

    def _register(self) -> None:
        with self._cond:
            self.agent._sessions.append(self)
            self.agent._shared.event_handlers.append(self._on_event)
        log.info("session granted: lease %s, ttl %d ms", self.lease, self.ttl_ms)

    def _start_keeper(self) -> None:
        """Starts the keeper (a thread, or a task) that runs :meth:`_step`."""
        raise NotImplementedError

    # -- what the session is ----------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The state right now."""
        with self._cond:
            return self._state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(lease={self.lease!r}, ttl_ms={self.ttl_ms}, state={self.state})"
        )

    # -- acquiring: the parts before and after the request ------------------------------------

    def _begin_acquire(self, ask: Ask, wait_ms: Optional[int]) -> Call:
        """Claims the resource (each lock of a multi-lock); the acquire's call, which a
        session's loss interrupts and whose late grant is released."""
        with self._cond:
            if not self._state.is_live():
                raise SessionLost(self._state)
            for kind, name in ask.claims:
                if (kind, name) in self._claims:
                    raise AlreadyHeld(kind, name)
            self._claims.update(ask.claims)
        fields: Dict[str, Any] = {
            **ask.target,
            "lease": self.lease,
            **ask.fields,
            "wait_ms": wait_ms,
        }
        abandon = Abandon(on_late=self._late_answer(ask), owner=self)
        patience = self.agent._patience_for(ask.op, wait_ms)
        return Call(ask.op, fields, patience, self._interrupt, abandon)

    @contextmanager
    def _acquiring(self, ask: Ask) -> Iterator[None]:
        """Around an acquire's request: when it fails, the claims are given back (and a
        ``lease_not_found`` ends the session)."""
        try:
            yield
        except BaseException as error:
            self._unclaim(*ask.claims)
            if isinstance(error, LeaseNotFound):
                self._request_end(SessionState.EXPIRED)
            raise

    def _granted(self, ask: Ask, result: Dict[str, Any]) -> int:
        """The grant's token (a barrier's generation); :class:`SessionLost` (and the grant
        given back) if the session was lost meanwhile."""
        token = _grant_token(ask, result)
        if token is None:
            self._unclaim(*ask.claims)
            raise MalformedResponse(f"{ask.op} granted without a `{ask.answer}`: {result}")
        with self._cond:
            state = self._state
        if not state.is_live():
            self._unclaim(*ask.claims)
            self._release_later(ask.release_request(self.lease, token))
            raise SessionLost(state)
        return token

    def _interrupt(self) -> Optional[HivekeeperError]:
        """Ends an acquire's wait when the session is lost (called under the condition)."""
        return None if self._state.is_live() else SessionLost(self._state)

    def _late_answer(self, ask: Ask) -> Callable[[Response], None]:
        """What to do with the answer of an acquire its caller left: release a grant."""

        def on_late(response: Response) -> None:
            # On the connection thread, condition held: never block here.
            token = _grant_token(ask, response.result) if response.ok else None
            if token is not None and not self._state.is_ended():
                log.debug(
                    "releasing the grant of an abandoned acquire of %s %r", ask.kind, ask.name
                )
                self._release_later(ask.release_request(self.lease, token))

        return on_late

    def _release_later(self, request: Dict[str, Any]) -> None:
        """Sends the release ``request`` (``{"op": ..., fields}``) in the background; never
        blocks (any thread)."""
        raise NotImplementedError

    def _unclaim(self, *keys: Tuple[str, str]) -> None:
        with self._cond:
            for key in keys:
                self._claims.discard(key)
                self._forget_guard_routes(key)

    # -- the keeper's decisions ---------------------------------------------------------------

    def _request_end(self, state: SessionState) -> None:
        """Asks the keeper to end the session (an expiry seen elsewhere, or a revoke)."""
        with self._cond:
            if self._end_requested is None:
                self._end_requested = state
            self.agent._shared.notify()

    def _on_event(self, event: Dict[str, Any]) -> None:
        if self._route_to_guard(event):
            return
        # An operator's admin.revoke ends the lease as surely as an expiry.
        if (
            event.get("event") in ("lease.expired", "lease.revoked")
            and event.get("lease") == self.lease
        ):
            self._request_end(SessionState.EXPIRED)

    def _set_state(self, state: SessionState) -> None:
        """Changes the state (condition held) and the :attr:`lost` event with it."""
        self._state = state
        if state.is_live():
            self.lost.clear()
        else:
            self.lost.set()
        self.agent._shared.notify()

    def _step(self, now: float) -> Tuple[str, Optional[float]]:
        """The keeper's next move (condition held): ``("end", None)``, ``("jeopardy", None)``,
        ``("send", None)`` (a keepalive is due) or ``("wait", until)``."""
        if self._end_requested is not None:
            self._end(self._end_requested)
            return "end", None
        if self._state is SessionState.LIVE and now >= self._deadline:
            log.warning(
                "lease %s: no keepalive acknowledged in time: session in jeopardy", self.lease
            )
            self._set_state(SessionState.JEOPARDY)
            return "jeopardy", None
        if now >= self._next_keepalive:
            # After a stall: one keepalive now and the cadence from there.
            self._next_keepalive = max(self._next_keepalive + self._period_s, now)
            return "send", None
        wake = self._next_keepalive
        if self._state is SessionState.LIVE:
            wake = min(wake, self._deadline)
        return "wait", wake

    def _reported(self, state: SessionState, reported: SessionState) -> SessionState:
        """Calls ``on_lost`` when ``state`` is a new state that is not LIVE; the keeper's
        keeper thread or task calls it with no lock held."""
        if state is not reported and not state.is_live() and self._on_lost is not None:
            try:
                self._on_lost(state)
            except Exception:  # noqa: BLE001 - the application's callback must not stop the keeper
                log.exception("on_lost callback failed")
        return state

    def _end(self, state: SessionState) -> None:
        """Final state (condition held): stop listening for this lease."""
        log.info("lease %s: session %s", self.lease, state)
        self._set_state(state)
        self._end_guard_routes()
        self._claims.clear()
        shared = self.agent._shared
        if self._on_event in shared.event_handlers:
            shared.event_handlers.remove(self._on_event)
        if self in self.agent._sessions:
            self.agent._sessions.remove(self)
        self.agent._forget_abandoned(self)

    def _revoke_call(self, patience: Patience) -> Call:
        return Call("lease.revoke", {"lease": self.lease}, patience)

    def _keepalive_call(self) -> Call:
        """A keepalive, one attempt for its whole useful life: its send time can move the
        deadline only until TTL - margin (see the module doc)."""
        useful_s = self.ttl_ms / 1000.0 - self._margin_s
        return Call("lease.keepalive", {"lease": self.lease}, Patience(useful_s, useful_s))

    def _keepalive_failed(self, error: HivekeeperError) -> None:
        if isinstance(error, LeaseNotFound):
            self._request_end(SessionState.EXPIRED)
        else:
            log.debug("lease %s: keepalive failed: %s", self.lease, error)

    def _acked(self, sent: float) -> None:
        """A keepalive sent at ``sent`` was acknowledged: the service received it after
        ``sent``, so the lease lives at least until ``sent`` + TTL."""
        with self._cond:
            deadline = sent + self.ttl_ms / 1000.0 - self._margin_s
            if deadline > self._deadline:
                self._deadline = deadline
            if self._state is SessionState.JEOPARDY and self._deadline > time.monotonic():
                log.info("lease %s: keepalive acknowledged in time: session live again", self.lease)
                self._set_state(SessionState.LIVE)
            self.agent._shared.notify()


class Session(SessionBase, LockCalls["Guard"], ReservationCalls["Guard"]):
    """A lease held by this agent and kept alive in the background; locks (exclusive, shared,
    several at once), semaphore permits and waypoint and route reservations are taken through
    it (see :class:`~hivekeeper.locks.LockCalls` and
    :class:`~hivekeeper.reservations.ReservationCalls`), each as a
    :class:`~hivekeeper.Guard` carrying its fencing token.

    Made by :meth:`Agent.session`. As a context manager, the lease is revoked when the block
    ends (releasing everything it holds, in one log entry).
    """

    #: The agent, typed as the threaded one.
    agent: "Agent"
    #: The keeper thread: keepalives on their cadence, the deadline, the state.
    _keeper: threading.Thread

    def _start_keeper(self) -> None:
        self._keeper = threading.Thread(
            target=self._keep, name=f"hivekeeper-session-{self.lease}", daemon=True
        )
        self._keeper.start()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Optional[type], *_: object) -> None:
        if exc_type is None:
            self.revoke()
            return
        # The block failed: revoke, but do not hide its exception behind ours.
        try:
            self.revoke()
        except HivekeeperError as error:
            log.debug("revoke of lease %s failed (it will expire): %s", self.lease, error)

    def revoke(self) -> None:
        """Ends the lease now: the service releases everything it holds and drops its waits in
        one log entry. Guards of this session become inert. Revoking a lease that is already
        gone is a success."""
        self._revoke(self.agent._patience_for("lease.revoke", None))

    def _revoke(self, patience: Patience) -> None:
        if self.state.is_ended():
            return
        try:
            self.agent._call(self._revoke_call(patience))
        except LeaseNotFound:
            pass
        self._request_end(SessionState.REVOKED)
        if threading.current_thread() is not self._keeper:
            self._keeper.join(timeout=5.0)

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[SessionState]:
        """Blocks until the session is not LIVE (at most ``timeout`` seconds); returns that
        state, or ``None`` if it stayed live."""
        with self._cond:
            if self._cond.wait_for(lambda: not self._state.is_live(), timeout):
                return self._state
            return None

    # -- acquiring --------------------------------------------------------------------------

    def campaign(self, name: str, value: str, wait_ms: Optional[int] = None) -> "Leadership":
        """Campaigns for the leadership of the election ``name``, announcing ``value`` (what
        the leader's key ``$election/{name}`` holds, e.g. its address), and returns the
        :class:`~hivekeeper.Leadership` once this session leads. Candidates are served in
        arrival order; ``wait_ms`` as for :meth:`lock`. As a context manager the leadership
        is resigned when the block ends."""
        from .election import Leadership

        ask = asks.election(name, value)
        return Leadership(self, ask, self._take(ask, wait_ms))

    def barrier(self, name: str, count: int) -> "Barrier":
        """The double barrier ``name`` of ``count`` members, for this session to
        :meth:`~hivekeeper.Barrier.enter` and :meth:`~hivekeeper.Barrier.leave`. Sends
        nothing by itself."""
        from .barrier import Barrier

        return Barrier(self, name, count)

    @property
    def kv(self) -> "Kv":
        """Keys and watches as ``agent.kv``, except that a put binds the key to this
        session's lease unless it names another: the key goes when the session ends (expiry
        or revoke), which is how presence is kept. A leased put raises
        :class:`~hivekeeper.SessionLost` when the session is not live."""
        from .kv import session_kv

        return session_kv(self)

    def fence_check(self, resource: str, token: int, kind: str = "lock") -> FenceCheck:
        """``fence.check`` (see :meth:`Agent.fence_check`); needs no live session."""
        return self.agent.fence_check(resource, token, kind)

    def inspect(self, kind: str, name: str) -> Inspection:
        """``inspect`` (see :meth:`Agent.inspect`); needs no live session."""
        return self.agent.inspect(kind, name)

    def _acquire(self, ask: Ask, wait_ms: Optional[int]) -> "Guard":
        from .guard import Guard

        return Guard(self, ask, self._take(ask, wait_ms))

    def _hold(self, ask: Ask, wait_ms: Optional[int]) -> "Guard":
        return self._acquire(ask, wait_ms)

    def _take(self, ask: Ask, wait_ms: Optional[int]) -> int:
        """Asks for ``ask`` and waits for the grant; its token."""
        call = self._begin_acquire(ask, wait_ms)
        with self._acquiring(ask):
            result = self.agent._call(call)
        return self._granted(ask, result)

    def _release_later(self, request: Dict[str, Any]) -> None:
        threading.Thread(target=self._release_now, args=(request,), daemon=True).start()

    def _release_now(self, request: Dict[str, Any]) -> None:
        try:
            self.agent.request(**request)
        except HivekeeperError as error:
            log.debug("background %s of %r failed: %s", request["op"], request["name"], error)

    # -- the keeper -------------------------------------------------------------------------

    def _keep(self) -> None:
        """The keeper thread: waits as :meth:`_step` says, sends keepalives on their own
        threads, reports losses."""
        reported = SessionState.LIVE
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    action, until = self._step(now)
                    if action != "wait" or until is None:
                        break
                    self._cond.wait(until - now)
                state = self._state
            if action == "send":
                threading.Thread(target=self._keepalive, daemon=True).start()
            reported = self._reported(state, reported)
            if state.is_ended():
                return

    def _keepalive(self) -> None:
        """One keepalive, under its own request id, retried only across lost connections."""
        sent = time.monotonic()
        try:
            self.agent._call(self._keepalive_call())
        except HivekeeperError as error:
            self._keepalive_failed(error)
            return
        self._acked(sent)
