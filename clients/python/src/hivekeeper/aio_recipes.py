"""The elections and barriers of ``hivekeeper.aio``: the decisions of ``election`` and
``barrier`` (:class:`~hivekeeper.election.LeadershipBase`,
:class:`~hivekeeper.election.LeaderFollower`, :class:`~hivekeeper.barrier.BarrierBase`),
waiting on the event loop; a leadership is an asyncio ``Guard``. Import them from
``hivekeeper.aio``, which imports this module after its ``Guard``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from .aio import Guard
from .barrier import BarrierBase
from .election import Leader, LeadershipBase, ObserverBase
from .errors import Compacted, HivekeeperError

if TYPE_CHECKING:
    from .aio import Agent, Session

log = logging.getLogger("hivekeeper")


class Leadership(LeadershipBase, Guard):
    """This session leads an election; see :class:`hivekeeper.Leadership`. ``async with``
    resigns at the end."""

    async def __aenter__(self) -> "Leadership":
        return self

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
        await self.release()

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until :meth:`is_lost` (at most ``timeout`` seconds); whether it is."""

        def lost() -> Optional[bool]:
            return True if self.is_lost() else None

        return await self.session.agent._wait_for(lost, timeout) is not None


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
        call = self._leave_call(wait_ms)
        try:
            result = await self.session.agent._call(call)
        except BaseException as error:
            self._leave_failed(error)
            raise
        return self._left(result)


class Observer(ObserverBase):
    """The leaders of an election as an async iterator of ``Optional[Leader]``; see
    :class:`hivekeeper.Observer` (the same items, from the same steps)."""

    agent: "Agent"

    async def __aenter__(self) -> "Observer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Optional[Leader]:
        reply: Any = None
        while not self._closed:
            try:
                need, what = self._steps.send(reply)
            except StopIteration:
                break  # the watch ended
            if need == "item":
                return what  # type: ignore[no-any-return]
            try:
                reply = await self._serve(need, what)
            except BaseException:
                self.close()
                raise
        raise StopAsyncIteration

    async def _serve(self, need: str, what: Any) -> Any:
        if need == "read":
            return await self.agent.kv.get(what)
        if need == "ask":
            return await self.agent.request("election.leader", name=what)
        if need == "watch":
            return self._start_watch(what)
        try:
            return await self._watch.poll()  # type: ignore[union-attr]
        except Compacted as compacted:
            return compacted
