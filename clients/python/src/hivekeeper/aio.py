"""``hivekeeper.aio``: the client for asyncio programs, on the same protocol core.

::

    import hivekeeper.aio
    async with hivekeeper.aio.Agent("drone-7", brokers=["127.0.0.1:1883"]) as agent:
        async with agent.session(ttl_ms=5000) as s:
            async with s.lock("pad-3", wait_ms=2000) as g:
                await land(fencing_token=g.token)

The same semantics as the threaded client, because the same code decides them: the request's
phases (``request_loop.RequestLoop``: same-id resends, backoff, deadlines), the session's
deadline, jeopardy and keepalive cadence (``session.SessionBase._step``), the guard's release
bookkeeping (``guard.GuardBase``), and the connection thread that owns paho-mqtt (failover,
routing). What differs is only how a request or a session waits: a coroutine on its event loop,
woken through ``Shared.notify`` (``loop.call_soon_threadsafe``) instead of a thread on the
shared condition. Keepalives are tasks instead of threads.

Keys are ``agent.kv`` / ``session.kv`` (:class:`Kv`, the requests and results of
``kv.KvBase``), watches are async iterators (:class:`Watch`, the cursor of
``watch.WatchCursor``), and :class:`KvCache` keeps its map with a task (``kv_cache.CacheState``),
all three in ``aio_kv``. Elections and barriers are in ``aio_recipes``; the lock and permit
calls of :class:`Session` are ``locks.LockCalls`` and its waypoint and route calls
``reservations.ReservationCalls``, shared with the threaded session.

**Cancellation.** Cancelling a task that waits for a grant (``task.cancel()``,
``asyncio.wait_for``) is safe: the request may still be queued at the service, so a grant that
arrives later is released, as the Rust SDK does for a dropped future. The connection thread
and the shared condition are held only for instants, never across an ``await``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Dict,
    Generator,
    Generic,
    Optional,
    Sequence,
    Set,
    TypeVar,
)

from . import ask as asks
from .agent import AgentBase
from .airspace import AirspaceCalls, AirspacePage, Preempted, VolumeLike
from .ask import Ask
from .election import Leader
from .errors import Disconnected, HivekeeperError, LeaseNotFound
from .guard import GuardBase
from .locks import LockCalls
from .protocol import FenceCheck, Inspection
from .request_loop import Call, Patience
from .reservations import ReservationCalls
from .session import SessionBase, SessionState

__all__ = [
    "Agent",
    "Barrier",
    "Guard",
    "Kv",
    "KvCache",
    "Leadership",
    "Observer",
    "Session",
    "Watch",
]

log = logging.getLogger("hivekeeper")

T = TypeVar("T")

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    #: The parameters of a call that :func:`awaited` keeps.
    Params = ParamSpec("Params")


def awaited(call: "Callable[Params, Awaitable[T]]") -> "Callable[Params, Coroutine[Any, Any, T]]":
    """``call``, written once for both clients, as a coroutine function of its signature:
    what ``inspect.iscoroutinefunction`` and ``unittest.mock.AsyncMock`` expect of this
    module's awaited calls."""

    @functools.wraps(call)
    async def run(*args: "Params.args", **kwargs: "Params.kwargs") -> T:
        return await call(*args, **kwargs)

    return run


class Opening(Generic[T]):
    """An awaitable that is also an ``async with`` of what it yields: ``s = await
    agent.session(...)`` or ``async with agent.session(...) as s:``."""

    def __init__(self, opening: Awaitable[T]) -> None:
        #: The coroutine that makes the session or guard.
        self._opening = opening
        #: What it made, for ``__aexit__``.
        self._opened: Optional[Any] = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._opening.__await__()

    async def __aenter__(self) -> T:
        opened = await self._opening
        self._opened = opened
        return opened

    async def __aexit__(self, *exc: Any) -> None:
        if self._opened is not None:
            await self._opened.__aexit__(*exc)


class Agent(AgentBase, AirspaceCalls[Awaitable[AirspacePage]]):
    """The asyncio agent: ``async with hivekeeper.aio.Agent(agent_id, brokers, **settings) as
    agent`` connects (or ``await Agent.connect(...)``) and closes at the end.

    Settings, errors and semantics are those of :class:`hivekeeper.Agent`. Use it from one
    event loop; the connection runs on its own thread as in the threaded client.
    """

    #: Set (and replaced) on every change of the shared state: what coroutines wait on.
    #: Made on the agent's loop by :meth:`_start` (an Event made elsewhere may belong to
    #: another loop on Python 3.9).
    _changed: asyncio.Event

    def _created(self) -> None:
        """Nothing connects until the agent is on its event loop (:meth:`_start`)."""
        #: The event loop the agent runs on, set when it connects.
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        #: Keepalives and background releases in flight: the loop keeps only weak references.
        self._tasks: Set["asyncio.Task[Any]"] = set()

    @classmethod
    async def connect(
        cls, agent_id: str, brokers: Optional[Sequence[str]] = None, **settings: Any
    ) -> "Agent":
        """Creates the agent and waits until a broker accepted its subscriptions (at most
        ``request_deadline_ms``; :class:`~hivekeeper.CredentialsRefused` at once when a CONNACK
        refuses the credentials, :class:`~hivekeeper.Unreachable` otherwise)."""
        agent = cls(agent_id, brokers, **settings)
        await agent._start()
        return agent

    async def __aenter__(self) -> "Agent":
        if self._loop is None:
            await self._start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        with self._shared.cond:
            self._shared.watchers.append(self._wake)
        self._thread.start()
        deadline = time.monotonic() + self.config.request_deadline_ms / 1000.0
        while True:
            changed = self._changed
            with self._shared.cond:
                ready = self._shared.link.ready
                refused = self._shared.refused is not None
            now = time.monotonic()
            if ready:
                return
            if refused or now >= deadline:
                raise await self._loop.run_in_executor(None, self._not_connected)
            await self._wait_changed(changed, deadline - now)

    def _wake(self) -> None:
        """A change of the shared state, from any thread (condition held): wake the loop."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._bump)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _bump(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _wait_changed(self, changed: asyncio.Event, timeout_s: Optional[float]) -> None:
        """Waits until the state changes after ``changed`` was taken, or ``timeout_s``."""
        try:
            await asyncio.wait_for(changed.wait(), None if timeout_s is None else max(timeout_s, 0))
        except asyncio.TimeoutError:
            pass

    async def _wait_for(
        self, check: Callable[[], Optional[T]], timeout: Optional[float]
    ) -> Optional[T]:
        """Waits until ``check()`` (called on the loop after every change of the shared
        state) returns something other than ``None``, at most ``timeout`` seconds; returns
        it, or ``None``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            changed = self._changed
            value = check()
            if value is not None:
                return value
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            await self._wait_changed(changed, None if deadline is None else deadline - now)

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Runs ``work`` as a task of the agent's loop; callable from any thread."""
        loop = self._loop
        if loop is None:
            return

        def start() -> None:
            task = asyncio.ensure_future(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:
            pass  # the loop is closed

    async def close(self) -> None:
        """Revokes the sessions not yet ended (one attempt each), then closes the connection;
        every session ends. Idempotent."""
        for session in self._sessions_to_close():
            try:
                await session._revoke(self._close_patience())
            except HivekeeperError as error:
                log.debug("revoke at close failed (the lease will expire): %s", error)
                session._request_end(SessionState.REVOKED)
        if self._loop is not None:
            await self._loop.run_in_executor(None, self._stop_connection)

    def session(
        self,
        ttl_ms: int,
        on_lost: Optional[Callable[[SessionState], None]] = None,
        lock_delay_ms: int = 0,
    ) -> "Opening[Session]":
        """Takes a lease of ``ttl_ms`` and keeps it alive in the background; ``await`` it, or
        ``async with`` it to revoke the lease at the end. ``on_lost`` is called on the loop
        with each new state that is not LIVE; ``lock_delay_ms`` as for
        :meth:`hivekeeper.Agent.session`."""
        return Opening(Session._grant(self, ttl_ms, on_lost, lock_delay_ms))

    async def request(self, op: str, **fields: Any) -> Dict[str, Any]:
        """Sends any op and returns the success's result fields (see
        :meth:`hivekeeper.Agent.request`)."""
        return await self._call(self._request_call(op, fields))

    @property
    def kv(self) -> "Kv":
        """Keys and watches, with ``await``; see :attr:`hivekeeper.Agent.kv`."""
        return Kv(self)

    async def fence_check(self, resource: str, token: int, kind: str = "lock") -> FenceCheck:
        """``fence.check``: whether ``token`` is held right now on ``resource``."""
        return FenceCheck.from_result(
            await self.request("fence.check", name=resource, kind=kind, token=token)
        )

    async def inspect(self, kind: str, name: str) -> Inspection:
        """``inspect``: who holds ``name`` and who waits for it, in queue order."""
        return Inspection.from_result(await self.request("inspect", kind=kind, name=name))

    async def leader(self, name: str) -> Optional[Leader]:
        """``election.leader``: who leads ``name``; see :meth:`hivekeeper.Agent.leader`."""
        return Leader.from_result(await self.request("election.leader", name=name))

    def observe(self, name: str, wait_ms: Optional[int] = None) -> "Observer":
        """The leaders of the election ``name`` as an async iterator; see
        :meth:`hivekeeper.Agent.observe`."""
        return Observer(self, name, wait_ms)

    airspace_query = awaited(AirspaceCalls[Awaitable[AirspacePage]].airspace_query)

    async def _airspace_page(self, fields: Dict[str, Any]) -> AirspacePage:
        return AirspacePage.from_result(await self.request("airspace.query", **fields))

    async def _call(self, call: Call) -> Dict[str, Any]:
        """The request loop of ``request_loop``, waiting on the event loop."""
        if self._loop is None:
            raise Disconnected("not connected: use `async with Agent(...)` or `Agent.connect`")
        loop, slot = self._begin(call)
        try:
            while True:
                while True:
                    changed = self._changed
                    wake, link_ready, now = self._check(loop, slot, call.interrupt)
                    if wake is not None:
                        break
                    until = loop.wait_until()
                    await self._wait_changed(changed, None if until is None else until - now)
                result = self._step(loop, wake, link_ready)
                if result is not None:
                    return result
        finally:
            # Also on cancellation: an acquire left while queued releases a late grant.
            self._settle(loop, slot, call.abandon)


class Session(SessionBase, LockCalls["Opening[Guard]"], ReservationCalls["Opening[Guard]"]):
    """A lease kept alive by a keeper task; see :class:`hivekeeper.Session`. Its lock, permit
    and reservation calls (:class:`~hivekeeper.locks.LockCalls`,
    :class:`~hivekeeper.reservations.ReservationCalls`) return what to ``await``, or to
    ``async with`` to release at the end."""

    #: The agent, typed as the asyncio one.
    agent: Agent
    #: The keeper task, started by :meth:`_start_keeper`.
    _keeper: Optional["asyncio.Task[None]"] = None

    @staticmethod
    async def _grant(
        agent: Agent,
        ttl_ms: int,
        on_lost: Optional[Callable[[SessionState], None]],
        lock_delay_ms: int,
    ) -> "Session":
        fields, opened = Session._granting(agent, ttl_ms, on_lost, lock_delay_ms)
        return opened(await agent.request("lease.grant", **fields))

    def _start_keeper(self) -> None:
        self._keeper = asyncio.ensure_future(self._keep())

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type: Optional[type], *_: Any) -> None:
        if exc_type is None:
            await self.revoke()
            return
        try:
            await self.revoke()
        except HivekeeperError as error:
            log.debug("revoke of lease %s failed (it will expire): %s", self.lease, error)

    async def revoke(self) -> None:
        """Ends the lease now; see :meth:`hivekeeper.Session.revoke`."""
        await self._revoke(self.agent._patience_for("lease.revoke", None))

    async def _revoke(self, patience: Patience) -> None:
        if self.state.is_ended():
            return
        try:
            await self.agent._call(self._revoke_call(patience))
        except LeaseNotFound:
            pass
        self._request_end(SessionState.REVOKED)
        keeper = self._keeper
        if keeper is not None and keeper is not asyncio.current_task():
            try:
                await asyncio.wait_for(asyncio.shield(keeper), 5.0)
            except asyncio.TimeoutError:
                log.debug("lease %s: the keeper did not stop within 5 s", self.lease)

    async def wait_lost(self, timeout: Optional[float] = None) -> Optional[SessionState]:
        """Waits until the session is not LIVE (at most ``timeout`` seconds); returns that
        state, or ``None`` if it stayed live."""

        def lost() -> Optional[SessionState]:
            state = self.state
            return None if state.is_live() else state

        return await self.agent._wait_for(lost, timeout)

    def campaign(
        self, name: str, value: str, wait_ms: Optional[int] = None
    ) -> "Opening[Leadership]":
        """Campaigns for the leadership of ``name``; see :meth:`hivekeeper.Session.campaign`.
        ``await`` it, or ``async with`` it to resign at the end."""
        return Opening(self._campaign(asks.election(name, value), wait_ms))

    async def _campaign(self, ask: Ask, wait_ms: Optional[int]) -> "Leadership":
        return Leadership(self, ask, await self._take(ask, wait_ms))

    def barrier(self, name: str, count: int) -> "Barrier":
        """The double barrier ``name`` of ``count`` members; see
        :meth:`hivekeeper.Session.barrier`."""
        return Barrier(self, name, count)

    @property
    def kv(self) -> "Kv":
        """Keys and watches, a put bound to this session's lease by default; see
        :attr:`hivekeeper.Session.kv`."""
        return Kv(self.agent, self)

    async def fence_check(self, resource: str, token: int, kind: str = "lock") -> FenceCheck:
        """``fence.check``; needs no live session."""
        return await self.agent.fence_check(resource, token, kind)

    async def inspect(self, kind: str, name: str) -> Inspection:
        """``inspect``; needs no live session."""
        return await self.agent.inspect(kind, name)

    async def _acquire(self, ask: Ask, wait_ms: Optional[int]) -> "Guard":
        return Guard(self, ask, await self._take(ask, wait_ms))

    def _hold(self, ask: Ask, wait_ms: Optional[int]) -> "Opening[Guard]":
        return Opening(self._acquire(ask, wait_ms))

    async def _take(self, ask: Ask, wait_ms: Optional[int]) -> int:
        """Asks for ``ask`` and waits for the grant; its token."""
        call = self._begin_acquire(ask, wait_ms)
        with self._acquiring(ask):
            result = await self.agent._call(call)
        return self._granted(ask, result)

    def _release_later(self, request: Dict[str, Any]) -> None:
        self.agent._spawn(self._release_now(request))

    async def _release_now(self, request: Dict[str, Any]) -> None:
        try:
            await self.agent.request(**request)
        except HivekeeperError as error:
            log.debug("background %s of %r failed: %s", request["op"], request["name"], error)

    async def _keep(self) -> None:
        """The keeper task: waits as :meth:`_step` says, sends keepalives as tasks, reports
        losses."""
        reported = SessionState.LIVE
        while True:
            while True:
                changed = self.agent._changed
                with self._cond:
                    now = time.monotonic()
                    action, until = self._step(now)
                    state = self._state
                if action != "wait" or until is None:
                    break
                await self.agent._wait_changed(changed, until - now)
            if action == "send":
                self.agent._spawn(self._keepalive())
            reported = self._reported(state, reported)
            if state.is_ended():
                return

    async def _keepalive(self) -> None:
        sent = time.monotonic()
        try:
            await self.agent._call(self._keepalive_call())
        except HivekeeperError as error:
            self._keepalive_failed(error)
            return
        self._acked(sent)


class Guard(GuardBase):
    """A grant with its fencing token; see :class:`hivekeeper.Guard`."""

    def __init__(self, session: Session, ask: Ask, token: int) -> None:
        super().__init__(session, ask, token)
        #: The session, typed as the asyncio one.
        self.session: Session = session

    async def __aenter__(self) -> "Guard":
        return self

    async def __aexit__(self, exc_type: Optional[type], *_: Any) -> None:
        if self._skip_release_at_exit():
            return
        if exc_type is None:
            await self.release()
            return
        try:
            await self.release()
        except HivekeeperError as error:
            log.debug("release of %s %r failed: %s", self.kind, self.name, error)

    async def fence_check(self, name: Optional[str] = None) -> FenceCheck:
        """``fence.check`` of this guard's own token; see :meth:`hivekeeper.Guard.fence_check`."""
        return await self.session.agent.fence_check(name or self.name, self.token, self.kind)

    async def release(self) -> None:
        """Releases the grant; see :meth:`hivekeeper.Guard.release`."""
        request = self._release_request()
        if request is None:
            return
        try:
            await self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        finally:
            self._forget()

    async def downgrade(self) -> None:
        """Makes the exclusive hold shared, same token; see :meth:`hivekeeper.Guard.downgrade`."""
        request = self._downgrade_request()
        try:
            result = await self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        self._downgraded(result)

    async def wait_ended(self, timeout: Optional[float] = None) -> Optional[str]:
        """Waits until the hold :attr:`ended` (at most ``timeout`` seconds); its
        :attr:`end_reason`, or ``None``."""

        def reason() -> Optional[str]:
            return self.end_reason if self.ended.is_set() else None

        return await self.session.agent._wait_for(reason, timeout)

    async def amend(self, volumes: Sequence[VolumeLike], priority: Optional[int] = None) -> None:
        """Replaces the route's volumes, keeping its token when granted at once;
        :class:`~hivekeeper.WouldBlock` and the old route kept otherwise. See
        :meth:`hivekeeper.Guard.amend`."""
        request = self._amend_request(volumes, priority)
        try:
            result = await self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        self._amended(request, result)

    async def wait_preempted(self, timeout: Optional[float] = None) -> Optional[Preempted]:
        """Waits until a vacate deadline stands (at most ``timeout`` seconds); returns the
        notice (:attr:`vacate_by_ms`, the preemptor's priority), or ``None`` if none came."""

        def notice() -> Optional[Preempted]:
            with self.session._cond:
                return self.preemption

        return await self.session.agent._wait_for(notice, timeout)

    async def wait_preemption_withdrawn(self, timeout: Optional[float] = None) -> bool:
        """Waits until the service withdraws the vacate deadline (at most ``timeout``
        seconds); whether it did."""

        def withdrawn() -> Optional[bool]:
            return True if self.preemption_withdrawn.is_set() else None

        return await self.session.agent._wait_for(withdrawn, timeout) is not None


# Keys, and the recipes that build on the Guard above (a leadership is one): imported last,
# so that ``hivekeeper.aio.Kv``, ``Leadership`` and the others are this module's names.
from .aio_kv import Kv, KvCache, Watch  # noqa: E402
from .aio_recipes import Barrier, Leadership, Observer  # noqa: E402
