"""The keys of ``hivekeeper.aio``: :class:`Kv` (``agent.kv`` / ``session.kv``, the requests
and results of ``kv.KvBase``), :class:`Watch` (an async iterator on the cursor of
``watch.WatchCursor``) and :class:`KvCache` (its map kept by a task, ``kv_cache.CacheState``).
Import them from ``hivekeeper.aio``, which imports this module after its ``Agent``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Mapping,
    Optional,
    Type,
    TypeVar,
)

from .aio import awaited
from .errors import Compacted, HivekeeperError
from .kv import DeleteResult, GetResult, KeyValue, KvBase, Plan, PutResult, TxnResult
from .kv_cache import CacheState
from .watch import WatchBase, WatchClosed, WatchEvent, WatchPage

if TYPE_CHECKING:
    from .aio import Agent

log = logging.getLogger("hivekeeper")

T = TypeVar("T")


class Kv(KvBase[Awaitable[GetResult], "Watch"]):
    """Keys from asyncio: ``agent.kv`` or ``session.kv``; see :class:`hivekeeper.Kv`. The
    requests and results are the threaded client's (``kv.KvBase``)."""

    agent: Agent

    async def get(self, key: str, serializable: bool = False) -> GetResult:
        """``kv.get`` of one key; see :meth:`hivekeeper.Kv.get`."""
        return await self._run(self._get_plan(key=key, serializable=serializable))

    get_page = awaited(KvBase[Awaitable[GetResult], "Watch"].get_page)

    async def get_prefix(
        self, prefix: str, limit: Optional[int] = None, serializable: bool = False
    ) -> GetResult:
        """Every key with ``prefix``, at the first page's revision; see
        :meth:`hivekeeper.Kv.get_prefix`."""
        pages = [await self.get_page(prefix, None, limit, serializable)]
        while pages[-1].next_after is not None:
            pages.append(await self.get_page(prefix, pages[-1].next_after, limit, serializable))
        return self._merge_pages(pages)

    async def put(
        self, key: str, value: str, lease: Optional[str] = None, prev_kv: bool = False
    ) -> PutResult:
        """``kv.put``; see :meth:`hivekeeper.Kv.put`."""
        plan, session = self._put_plan(key, value, lease, prev_kv)
        try:
            return await self._run(plan)
        except BaseException as error:
            self._put_failed(session, error)
            raise

    async def delete(self, key: str) -> DeleteResult:
        """``kv.delete`` of one key."""
        return await self._run(self._delete_plan(key=key))

    async def delete_prefix(self, prefix: str) -> DeleteResult:
        """``kv.delete`` of every key with ``prefix``."""
        return await self._run(self._delete_plan(prefix=prefix))

    async def txn(
        self,
        compare: Iterable[Mapping[str, Any]] = (),
        success: Iterable[Mapping[str, Any]] = (),
        failure: Iterable[Mapping[str, Any]] = (),
    ) -> TxnResult:
        """``kv.txn``; see :meth:`hivekeeper.Kv.txn`."""
        return await self._run(self._txn_plan(compare, success, failure))

    def _read(self, plan: Plan[GetResult]) -> Awaitable[GetResult]:
        return self._run(plan)

    def _watch_type(self) -> Type["Watch"]:
        return Watch

    async def _run(self, plan: "Plan[T]") -> T:
        op, fields, parse = plan
        return parse(await self.agent.request(op, **fields))


class Watch(WatchBase):
    """The changes of a key or prefix as an async iterator; see :class:`hivekeeper.Watch`
    (the same cursor, retries and ending). Cancelling the task that iterates ends the pending
    poll's wait; :meth:`close` ends it from anywhere."""

    #: The agent that polls.
    agent: "Agent"

    async def __aenter__(self) -> "Watch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> WatchEvent:
        while not self._closed:
            if self._buffer:
                return self._buffer.pop(0)
            page = None if self._ended else await self.poll()
            if page is None:
                break
            self._buffer.extend(page.events)
        raise StopAsyncIteration

    async def poll(self) -> Optional[WatchPage]:
        """One long poll, bookmark included, its events the caller's (see
        :meth:`hivekeeper.Watch.poll`); ``None`` once the watch has ended."""
        if self._ended:
            return None
        try:
            result = await self.agent._call(self._poll_call())
            page = self.cursor.advance(result)
        except WatchClosed:
            self._ended = True
            return None
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._ended = True
            raise
        return page


class KvCache:
    """Every key under ``prefix``, kept in step by a task of the agent's loop; see
    :class:`hivekeeper.KvCache`. ``cache = await KvCache.start(agent.kv, prefix)`` loads the
    prefix and starts following; ``await cache.close()`` stops."""

    def __init__(self, kv: Kv, prefix: str, wait_ms: Optional[int] = None) -> None:
        #: How the cache reads and watches.
        self.kv = kv
        #: The watched prefix.
        self.prefix = prefix
        #: The ``wait_ms`` of each poll (``None``: the service's default).
        self._wait_ms = wait_ms
        #: The map and its revision (touched only on the loop).
        self._state = CacheState(prefix)
        #: The error that stopped the following, if one did.
        self.error: Optional[BaseException] = None
        #: The watch in progress.
        self._watch: Optional[Watch] = None
        #: The following task.
        self._task: Optional["asyncio.Task[None]"] = None
        #: Set (and replaced) on every change of the map.
        self._changed = asyncio.Event()

    @classmethod
    async def start(cls, kv: Kv, prefix: str, wait_ms: Optional[int] = None) -> "KvCache":
        """Loads the prefix (its errors are raised here), then follows it."""
        cache = cls(kv, prefix, wait_ms)
        cache._state.load(await kv.get_prefix(prefix))
        cache._task = asyncio.ensure_future(cache._follow())
        return cache

    async def __aenter__(self) -> "KvCache":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def get(self, key: str) -> Optional[KeyValue]:
        """The cached key, or ``None``."""
        return self._state.kvs.get(key)

    def snapshot(self) -> Dict[str, KeyValue]:
        """A copy of the map."""
        return dict(self._state.kvs)

    @property
    def revision(self) -> int:
        """Every change up to this revision is in the map."""
        return self._state.revision

    @property
    def loads(self) -> int:
        """How many whole reads of the prefix were made."""
        return self._state.loads

    async def wait_until(
        self, check: Callable[[Dict[str, KeyValue]], bool], timeout: Optional[float] = None
    ) -> bool:
        """Waits until ``check(map)`` is true (at most ``timeout`` seconds); whether it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            changed = self._changed
            if check(self._state.kvs):
                return True
            if self.error is not None or (self._task is not None and self._task.done()):
                return check(self._state.kvs)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            try:
                await asyncio.wait_for(changed.wait(), None if deadline is None else deadline - now)
            except asyncio.TimeoutError:
                pass

    async def close(self) -> None:
        """Stops following; the map keeps what it has. Idempotent."""
        if self._watch is not None:
            self._watch.close()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10.0)
            except asyncio.TimeoutError:
                self._task.cancel()

    def _bump(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _follow(self) -> None:
        while True:
            watch = self.kv.watch(
                prefix=self.prefix, after=self._state.revision, wait_ms=self._wait_ms
            )
            self._watch = watch
            try:
                while True:
                    page = await watch.poll()
                    if page is None:
                        return
                    for event in page.events:
                        self._state.apply(event, page.next)
                    self._state.caught_up(page.next)
                    self._bump()
            except Compacted as compacted:
                log.info("kv cache %r: %s; reading the prefix again", self.prefix, compacted)
                try:
                    self._state.load(await self.kv.get_prefix(self.prefix))
                except HivekeeperError as error:
                    self.error = error
                    self._bump()
                    return
                self._bump()
            except HivekeeperError as error:
                log.warning("kv cache %r: stopped following: %s", self.prefix, error)
                self.error = error
                self._bump()
                return
