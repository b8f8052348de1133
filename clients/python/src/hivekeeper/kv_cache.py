"""``KvCache``: a local copy of every key under a prefix, kept in step with the service.

::

    kv.get_prefix(prefix) ──▶ map, revision R
      └▶ watch(prefix, after=R) ──▶ each event: put → map[key] = kv, delete → map.pop(key)
           └─ Compacted ──▶ get_prefix again (the map is replaced) and watch from its revision

Reads are local and never block; :meth:`KvCache.wait_until` waits for the map to satisfy a
condition (a config version, a member present). :class:`CacheState` is the map and how an
event or a reload changes it (pure); :class:`KvCache` runs it on a thread and
``hivekeeper.aio.KvCache`` as a task.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, List, Optional

from .errors import Compacted, HivekeeperError
from .kv import GetResult, KeyValue, Kv
from .watch import Watch, WatchEvent

log = logging.getLogger("hivekeeper")


class CacheState:
    """The cached keys and the revision they are complete up to."""

    def __init__(self, prefix: str) -> None:
        #: The prefix every cached key starts with.
        self.prefix = prefix
        #: The keys, by name.
        self.kvs: Dict[str, KeyValue] = {}
        #: Every change up to this revision is in :attr:`kvs`; the watch polls after it.
        self.revision = 0
        #: How many times the map was read whole (1 after the first load; more after a
        #: ``compacted``).
        self.loads = 0

    def load(self, read: GetResult) -> None:
        """Replaces the map with a whole read of the prefix."""
        self.kvs = {kv.key: kv for kv in read.kvs}
        self.revision = read.revision
        self.loads += 1

    def apply(self, event: WatchEvent, cursor: int) -> None:
        """One event, in revision order; ``cursor`` is the watch's cursor after it. A put
        older than what the map has (a key read by a later page of the load) changes
        nothing."""
        if event.type == "put":
            held = self.kvs.get(event.key)
            if held is None or held.mod_revision <= event.kv.mod_revision:
                self.kvs[event.key] = event.kv
        else:
            held = self.kvs.get(event.key)
            if held is not None and held.mod_revision <= event.revision:
                del self.kvs[event.key]
        self.revision = max(self.revision, min(event.revision, cursor))

    def caught_up(self, cursor: int) -> None:
        """A poll's answer was applied whole: the map is complete up to ``cursor``."""
        self.revision = max(self.revision, cursor)


class KvCache:
    """Every key under ``prefix``, kept in step by a background thread (see the module doc).

    ``KvCache(agent.kv, "hive/config/")`` loads the prefix before it returns (errors of the
    first read are raised there), then follows it. Thread-safe. Use it as a context manager
    or call :meth:`close`. If following fails for good (the agent closed, the prefix became
    unreadable), :attr:`error` says why and the map stays as it was.
    """

    def __init__(
        self,
        kv: Kv,
        prefix: str,
        on_change: Optional[Callable[[List[WatchEvent]], None]] = None,
        wait_ms: Optional[int] = None,
    ) -> None:
        #: How the cache reads and watches.
        self.kv = kv
        #: The watched prefix.
        self.prefix = prefix
        #: Called on the cache's thread with each batch of events applied (an empty list
        #: after a reload); it must return quickly.
        self._on_change = on_change
        #: The ``wait_ms`` of each poll (``None``: the service's default).
        self._wait_ms = wait_ms
        #: Guards the state; notified on every change.
        self._cond = threading.Condition()
        #: The map and its revision.
        self._state = CacheState(prefix)
        #: The error that stopped the following, if one did.
        self.error: Optional[BaseException] = None
        #: The watch in progress (closed by :meth:`close`).
        self._watch: Optional[Watch] = None
        #: Set by :meth:`close`.
        self._closed = False
        self._state.load(kv.get_prefix(prefix))
        #: The thread that follows the prefix.
        self._thread = threading.Thread(
            target=self._follow, name=f"hivekeeper-kvcache-{prefix}", daemon=True
        )
        self._thread.start()

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: str) -> Optional[KeyValue]:
        """The cached key, or ``None``."""
        with self._cond:
            return self._state.kvs.get(key)

    def value(self, key: str) -> Optional[str]:
        """The cached key's value, or ``None``."""
        kv = self.get(key)
        return None if kv is None else kv.value

    def snapshot(self) -> Dict[str, KeyValue]:
        """A copy of the map."""
        with self._cond:
            return dict(self._state.kvs)

    def __len__(self) -> int:
        with self._cond:
            return len(self._state.kvs)

    def __contains__(self, key: object) -> bool:
        with self._cond:
            return key in self._state.kvs

    @property
    def revision(self) -> int:
        """Every change up to this revision is in the map."""
        with self._cond:
            return self._state.revision

    @property
    def loads(self) -> int:
        """How many whole reads of the prefix were made (more than 1 after ``compacted``)."""
        with self._cond:
            return self._state.loads

    def wait_until(
        self, check: Callable[[Dict[str, KeyValue]], bool], timeout: Optional[float] = None
    ) -> bool:
        """Waits until ``check(map)`` is true (at most ``timeout`` seconds); whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: check(self._state.kvs), timeout)

    def wait_revision(self, revision: int, timeout: Optional[float] = None) -> bool:
        """Waits until the map is complete up to ``revision`` (a write's, say)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._state.revision >= revision, timeout)

    # -- the end ----------------------------------------------------------------------------

    def __enter__(self) -> "KvCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops following; the map keeps what it has. Idempotent."""
        with self._cond:
            self._closed = True
            watch = self._watch
        if watch is not None:
            watch.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10.0)

    # -- the thread -------------------------------------------------------------------------

    def _follow(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                watch = self.kv.watch(
                    prefix=self.prefix, after=self._state.revision, wait_ms=self._wait_ms
                )
                self._watch = watch
            try:
                while True:
                    page = watch.poll()
                    with self._cond:
                        for event in page.events:
                            self._state.apply(event, page.next)
                        self._state.caught_up(page.next)
                        self._cond.notify_all()
                    if page.events:
                        self._changed(page.events)
            except StopIteration:
                return
            except Compacted as compacted:
                log.info("kv cache %r: %s; reading the prefix again", self.prefix, compacted)
                if not self._reload():
                    return
            except HivekeeperError as error:
                self._fail(error)
                return

    def _reload(self) -> bool:
        """Reads the prefix whole again (the agent's retries apply); whether the cache goes
        on."""
        try:
            read = self.kv.get_prefix(self.prefix)
        except HivekeeperError as error:
            self._fail(error)
            return False
        with self._cond:
            self._state.load(read)
            self._cond.notify_all()
        self._changed([])
        return True

    def _fail(self, error: BaseException) -> None:
        log.warning("kv cache %r: stopped following: %s", self.prefix, error)
        with self._cond:
            self.error = error
            self._cond.notify_all()

    def _changed(self, events: List[WatchEvent]) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(events)
        except Exception:  # noqa: BLE001 - the application's callback must not stop the cache
            log.exception("kv cache on_change callback failed")
