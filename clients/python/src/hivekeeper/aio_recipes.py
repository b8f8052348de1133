"""The elections and barriers of ``hivekeeper.aio``: the decisions of ``election`` and
``barrier`` (:class:`~hivekeeper.election.LeadershipBase`,
:class:`~hivekeeper.election.LeaderFollower`, :class:`~hivekeeper.barrier.BarrierBase`),
waiting on the event loop. Import them from ``hivekeeper.aio``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List, Optional

from .barrier import BarrierBase
from .election import Leader, LeaderFollower, LeadershipBase, Mirror
from .errors import Compacted, HivekeeperError
from .protocol import RELEASE_OP, FenceCheck

if TYPE_CHECKING:
    from .aio import Agent, Session, Watch
    from .ask import Ask

log = logging.getLogger("hivekeeper")


class Leadership(LeadershipBase):
    """This session leads an election; see :class:`hivekeeper.Leadership`. ``async with``
    resigns at the end."""

    def __init__(self, session: "Session", ask: "Ask", token: int) -> None:
        super().__init__(session, ask, token)
        #: The session, typed as the asyncio one.
        self.session: "Session" = session

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, exc_type: Optional[type], *_: Any) -> None:
        if self._skip_resign_at_exit():
            return
        if exc_type is None:
            await self.resign()
            return
        try:
            await self.resign()
        except HivekeeperError as error:
            log.debug("resign of election %r failed: %s", self.name, error)

    async def proclaim(self, value: str) -> int:
        """Announces ``value``; see :meth:`hivekeeper.Leadership.proclaim`."""
        request = self._proclaim_request(value)
        try:
            result = await self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        return self._proclaimed(value, result)

    async def resign(self) -> None:
        """Steps down; see :meth:`hivekeeper.Leadership.resign`."""
        request = self._resign_request()
        if request is None:
            return
        try:
            await self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        finally:
            self._forget()

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until :meth:`is_lost` (at most ``timeout`` seconds); whether it is."""

        def lost() -> Optional[bool]:
            return True if self.is_lost() else None

        return await self.session.agent._wait_for(lost, timeout) is not None

    async def fence_check(self) -> FenceCheck:
        """``fence.check`` of this leadership's token."""
        return await self.session.agent.fence_check(self.name, self.token, "election")


class Barrier(BarrierBase):
    """A double barrier for one session; see :class:`hivekeeper.Barrier`. ``async with``
    enters at the start and leaves at the end."""

    def __init__(self, session: "Session", name: str, count: int) -> None:
        super().__init__(session, name, count)
        #: The session, typed as the asyncio one.
        self.session: "Session" = session

    async def __aenter__(self) -> "Barrier":
        await self.enter()
        return self

    async def __aexit__(self, exc_type: Optional[type], *_: Any) -> None:
        if not self.entered:
            return
        if exc_type is None:
            await self.leave()
            return
        try:
            await self.leave()
        except HivekeeperError as error:
            log.debug("leave of barrier %r failed: %s", self.name, error)

    async def enter(self, wait_ms: Optional[int] = None) -> int:
        """Enters the filling round and waits until it is full; see
        :meth:`hivekeeper.Barrier.enter`."""
        return self._entered_at(await self.session._take(self._ask, wait_ms))

    async def leave(self, wait_ms: Optional[int] = None) -> int:
        """Leaves the round and waits until all its members left; see
        :meth:`hivekeeper.Barrier.leave`."""
        fields, patience = self._leave_request(wait_ms)
        agent = self.session.agent
        try:
            result = await agent._call(
                RELEASE_OP["barrier"], fields, patience, interrupt=self.session._interrupt
            )
        except BaseException as error:
            self._leave_failed(error)
            raise
        return self._left(result)


class Observer:
    """The leaders of an election as an async iterator of ``Optional[Leader]``; see
    :class:`hivekeeper.Observer` (the same items, from the same decisions)."""

    def __init__(self, agent: "Agent", name: str, wait_ms: Optional[int] = None) -> None:
        #: The agent that reads and polls.
        self.agent = agent
        #: The decisions.
        self.follower = LeaderFollower(name)
        #: The ``wait_ms`` of each poll (``None``: the service's default).
        self.wait_ms = wait_ms
        #: States seen and not yet handed out.
        self._buffer: List[Mirror] = []
        #: The watch in progress.
        self._watch: Optional["Watch"] = None
        #: Set by :meth:`close`.
        self._closed = False

    async def __aenter__(self) -> "Observer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Ends the observation; a pending poll stops at once. Idempotent, any thread."""
        self._closed = True
        watch = self._watch
        if watch is not None:
            watch.close()

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Optional[Leader]:
        follower = self.follower
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            if self._watch is None:
                self._buffer.extend(follower.load(await self.agent.kv.get(follower.key)))
                self._watch = self.agent.kv.watch(
                    key=follower.key, after=follower.after, wait_ms=self.wait_ms
                )
                if self._closed:
                    self._watch.close()
                continue
            try:
                page = await self._watch.poll()
            except Compacted as compacted:
                log.info("observe %r: %s; reading the key again", follower.name, compacted)
                self._watch = None
                continue
            if page is None:
                raise StopAsyncIteration
            self._buffer.extend(follower.advance(page))
        state = self._buffer.pop(0)
        asked = None
        if follower.needs_agent(state):
            asked = await self.agent.request("election.leader", name=follower.name)
        return follower.hand_out(state, asked)
