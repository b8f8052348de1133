"""Watches: the changes of a key or a prefix, in revision order, by long poll with a cursor
the client holds (``watch.poll``, PROTOCOL.md).

::

    after = rev (a kv.get's revision: nothing after it is missed)
    ┌▶ watch.poll {prefix | key, after, max_events, wait_ms}
    │    ├─ events ──────────▶ yield each in order; after = next
    │    ├─ none (idle) ─────▶ a bookmark: after = next (progress), nothing yielded
    │    ├─ compacted ───────▶ raise Compacted(compact_revision), the watch ends
    │    └─ link lost, timeout, unavailable: the SAME request again (the agent's retries and
    └────── failover), from the same cursor: nothing is skipped or repeated

The service keeps no state per watcher beyond the pending poll, so the cursor is the whole
watch: any member serves the next poll, and a watch made with ``after=watch.revision``
resumes where another one stopped. The events of one revision (a txn, a lease's keys) are
never split across answers.

:class:`WatchCursor` decides (pure); :class:`Watch` and ``hivekeeper.aio.Watch`` only send
and wait, each its own way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional

from .config import AgentConfig
from .errors import ConfigError, HivekeeperError, MalformedResponse
from .kv import KeyValue, _int
from .protocol import WATCH_POLL_OP, WATCH_POLL_WAIT_MS_DEFAULT
from .request_loop import Call, Patience

if TYPE_CHECKING:
    from .agent import Agent, AgentBase

#: The most events one poll may ask for (PROTOCOL.md).
MAX_EVENTS_MAX = 1000
#: The longest a poll may wait (PROTOCOL.md).
WAIT_MS_MAX = 60_000


@dataclass(frozen=True)
class WatchEvent:
    """One change of a watched key."""

    #: The change's revision.
    revision: int
    #: ``"put"`` or ``"delete"``.
    type: str
    #: The key after a put; the key as it was (its last ``mod_revision``) for a delete.
    kv: KeyValue

    @property
    def key(self) -> str:
        """The changed key."""
        return self.kv.key

    @staticmethod
    def from_wire(event: Mapping[str, Any]) -> "WatchEvent":
        kind = event["type"]
        if kind not in ("put", "delete"):
            raise TypeError(f"unknown event type {kind!r}")
        return WatchEvent(_int(event["revision"]), kind, KeyValue.from_wire(event["kv"]))


@dataclass(frozen=True)
class WatchPage:
    """The answer of one ``watch.poll``."""

    #: The events, in revision order (none: the poll waited and nothing matched).
    events: List[WatchEvent]
    #: The cursor to poll from next.
    next: int
    #: Set when no event matched: the revision up to which nothing did (a bookmark).
    progress: Optional[int] = None
    #: Set when the answer is a fragment of a revision too large for one answer: the last
    #: key sent of revision ``next + 1``, the next poll's ``after_key``.
    next_key: Optional[str] = None


class WatchClosed(HivekeeperError):
    """The watch was closed while a poll was pending (ends the iteration, never raised to
    the application)."""


class WatchCursor:
    """The state of one watch, without I/O: what to poll for, and the cursor it moves."""

    def __init__(
        self,
        key: Optional[str],
        prefix: Optional[str],
        after: int,
        max_events: Optional[int],
        wait_ms: Optional[int],
    ) -> None:
        if (key is None) == (prefix is None):
            raise ConfigError("watch: give exactly one of `key` and `prefix`")
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ConfigError(f"watch: `after` must be a revision (an integer >= 0), not {after!r}")
        if max_events is not None and not 1 <= max_events <= MAX_EVENTS_MAX:
            raise ConfigError(f"watch: `max_events` must be 1 to {MAX_EVENTS_MAX}")
        if wait_ms is not None and not 0 <= wait_ms <= WAIT_MS_MAX:
            raise ConfigError(f"watch: `wait_ms` must be 0 to {WAIT_MS_MAX}")
        #: The watched key, or ``None``.
        self.key = key
        #: The watched prefix, or ``None``.
        self.prefix = prefix
        #: Every event with a revision above this one is still to come: the cursor.
        self.after = after
        #: The most events one answer may carry (``None``: the service's default, 100).
        self.max_events = max_events
        #: How long the service holds an idle poll (``None``: its default, 30 s).
        self.wait_ms = wait_ms
        #: The last bookmark seen (an idle poll's ``progress``).
        self.progress: Optional[int] = None
        #: While a revision too large for one answer comes in fragments: the last key
        #: received of revision ``after + 1``, and its events so far (handed out whole with
        #: the answer that ends the revision).
        self.after_key: Optional[str] = None
        self._fragments: List[WatchEvent] = []

    def fields(self) -> Dict[str, Any]:
        """The poll's fields from where the cursor stands."""
        fields: Dict[str, Any] = {"after": self.after}
        if self.after_key is not None:
            fields["after_key"] = self.after_key
        if self.key is not None:
            fields["key"] = self.key
        else:
            fields["prefix"] = self.prefix
        if self.max_events is not None:
            fields["max_events"] = self.max_events
        if self.wait_ms is not None:
            fields["wait_ms"] = self.wait_ms
        return fields

    def patience(self, config: AgentConfig) -> Patience:
        """A poll waits ``wait_ms`` plus one ordinary attempt before it is sent again, and is
        sent again for as long as the watch lives: the cursor makes a resend harmless."""
        poll_ms = WATCH_POLL_WAIT_MS_DEFAULT if self.wait_ms is None else self.wait_ms
        return Patience((poll_ms + config.request_timeout_ms) / 1000.0, None)

    def advance(self, result: Mapping[str, Any]) -> WatchPage:
        """Reads one answer and moves the cursor to its ``next``, never backwards. A
        fragment (``next_key``) is kept, and its revision handed out whole, in the page of
        the answer that ends it."""
        try:
            events = [WatchEvent.from_wire(e) for e in result.get("events", [])]
            next_rev = _int(result["next"])
            progress = result.get("progress")
            if progress is not None:
                progress = _int(progress)
            next_key = result.get("next_key")
            if next_key is not None and not isinstance(next_key, str):
                raise TypeError("next_key")
        except (KeyError, TypeError, ValueError):
            raise MalformedResponse(f"{WATCH_POLL_OP} answered {dict(result)}") from None
        if next_key is not None:
            if next_rev < self.after or any(e.revision != next_rev + 1 for e in events):
                raise MalformedResponse(
                    f"{WATCH_POLL_OP}: a fragment of revision {next_rev + 1} behind the cursor "
                    f"{self.after} or with events of another revision"
                )
            after_key = self.after_key
            self._fragments.extend(
                e for e in events if after_key is None or e.kv.key > after_key
            )
            self.after = next_rev
            self.after_key = next_key
            return WatchPage([], next_rev, None, next_key)
        self.after_key = None
        events = self._fragments + events
        self._fragments = []
        revisions = [e.revision for e in events]
        if revisions != sorted(revisions) or any(r <= self.after for r in revisions):
            raise MalformedResponse(
                f"{WATCH_POLL_OP}: events out of order or not after {self.after}: {revisions}"
            )
        if next_rev < self.after or (revisions and next_rev < revisions[-1]):
            raise MalformedResponse(
                f"{WATCH_POLL_OP}: `next` {next_rev} is behind the cursor {self.after}"
            )
        self.after = next_rev
        if progress is not None:
            self.progress = progress
        return WatchPage(events, next_rev, progress)


class WatchBase:
    """What the threaded :class:`Watch` and ``hivekeeper.aio.Watch`` share: the agent, the
    cursor, the events polled but not yet handed out, and closing. Each polls and iterates its
    own way."""

    #: The agent that polls.
    agent: "AgentBase"

    def __init__(
        self,
        agent: "AgentBase",
        key: Optional[str] = None,
        prefix: Optional[str] = None,
        after: int = 0,
        max_events: Optional[int] = None,
        wait_ms: Optional[int] = None,
    ) -> None:
        self.agent = agent
        #: The cursor and what is watched.
        self.cursor = WatchCursor(key, prefix, after, max_events, wait_ms)
        #: Events of the last answer not yet handed out.
        self._buffer: List[WatchEvent] = []
        #: Set by :meth:`close`; read under the agent's condition by the pending poll.
        self._closed = False
        #: Set once the iteration ended (closed, or an error was raised).
        self._ended = False
        #: One poll at a time: two would move one cursor twice (taken by the threaded
        #: watch's polls; asyncio's run on one loop).
        self._polling = threading.Lock()

    @property
    def revision(self) -> int:
        """The cursor: every change after it is still to come (events already handed out and
        bookmarks included). ``kv.watch(..., after=w.revision)`` resumes this watch.
        Events polled but not yet handed out by ``next()`` are after it too."""
        return self._buffer[0].revision - 1 if self._buffer else self.cursor.after

    def close(self) -> None:
        """Ends the watch: a pending poll stops waiting at once, and events polled but not
        yet handed out stay after :attr:`revision`. Idempotent, any thread."""
        shared = self.agent._shared
        with shared.cond:
            self._closed = True
            shared.notify()

    def _interrupt(self) -> Optional[HivekeeperError]:
        return WatchClosed("the watch is closed") if self._closed else None

    def _poll_call(self) -> Call:
        """The next poll, from where the cursor stands; :meth:`close` interrupts it."""
        patience = self.cursor.patience(self.agent.config)
        return Call(WATCH_POLL_OP, self.cursor.fields(), patience, self._interrupt)


class Watch(WatchBase):
    """The changes of a key or prefix, as an iterator of :class:`WatchEvent` (threads).

    Made by ``kv.watch(prefix=... | key=..., after=rev)``. Each ``next()`` long-polls as
    needed; idle polls move :attr:`revision` (bookmarks) without yielding. Lost connections,
    failover and ``unavailable`` are retried from the same cursor, without end: a watch lives
    until :meth:`close` (from any thread; the pending poll ends at once), the end of its
    ``with`` block, or an error. :class:`~hivekeeper.Compacted` is raised once, then the
    iteration ends: re-read with ``kv.get`` and watch from its ``revision``.
    """

    #: The agent that polls.
    agent: "Agent"

    def __repr__(self) -> str:
        what = (
            f"key={self.cursor.key!r}"
            if self.cursor.key is not None
            else (f"prefix={self.cursor.prefix!r}")
        )
        return f"Watch({what}, revision={self.revision})"

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        # Once closed, events polled but not handed out stay after :attr:`revision`: a watch
        # resumed from it gets them.
        while not self._closed:
            if self._buffer:
                return self._buffer.pop(0)
            if self._ended:
                break
            self._buffer.extend(self.poll().events)
        raise StopIteration

    def poll(self) -> WatchPage:
        """One long poll: its answer, bookmark included; the cursor moves past it, and its
        events are the caller's (the iterator does not hand them out again). The iterator uses
        it; call it directly to see bookmarks (an idle answer has no events and a
        ``progress``) or to take the events an answer at a time. Raises ``StopIteration`` once
        the watch has ended."""
        with self._polling:
            if self._ended:
                raise StopIteration
            try:
                result = self.agent._call(self._poll_call())
                page = self.cursor.advance(result)
            except WatchClosed:
                self._ended = True
                raise StopIteration from None
            except BaseException:
                self._ended = True
                raise
            return page
