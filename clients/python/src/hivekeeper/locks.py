"""Locks (exclusive and shared), multi-locks and semaphore permits: the acquire calls that
the threaded :class:`~hivekeeper.Session` and ``hivekeeper.aio.Session`` share, written once
(PROTOCOL.md sections 6.1 and 8.4 to 8.7).

A lock is held **exclusive** (one holder) or **shared** (any number of shared holders, never
beside an exclusive one). Its queue is strict FIFO whatever the mode, so a queued writer
blocks every reader behind it and is never starved::

    read_lock ─┐                    (held shared by both)
    read_lock ─┴─▶ write_lock waits ─▶ read_lock queued behind it waits for the writer
    write_lock ── guard.downgrade() ──▶ held shared, same token; queued readers join it

A **multi-lock** (:meth:`LockCalls.lock_all`) takes up to 64 locks in one grant with one
token, or queues FIFO as a unit: no deadlock, whatever order agents name the locks in.

``max_hold_ms`` bounds a hold on the service's clock, whether or not its lease lives; when it
runs out the guard learns it (:attr:`~hivekeeper.Guard.ended`, with
:attr:`~hivekeeper.Guard.end_reason` ``"max_hold"``). A session opened with
``lock_delay_ms`` has its locks granted to nobody for that long after its lease expires.

Each call returns what the session's ``_hold`` makes of the ask: a
:class:`~hivekeeper.Guard` on the threaded session, an awaitable that is also an
``async with`` of a ``hivekeeper.aio.Guard`` on the asyncio one.
"""

from __future__ import annotations

from typing import Generic, Optional, Sequence, TypeVar

from . import ask as asks
from .ask import Ask

#: What a session's acquire call returns (a guard, or an awaitable of one).
H = TypeVar("H")


class LockCalls(Generic[H]):
    """The lock and permit acquires of a session; ``H`` is what :meth:`_hold` returns.

    Every call waits as ``wait_ms`` says: ``None`` in the service's queue while the session
    is live; ``0`` tries once (:class:`~hivekeeper.WouldBlock` if not granted at once); ``n``
    at most ``n`` ms (:class:`~hivekeeper.Timeout`). :class:`~hivekeeper.SessionLost` if the
    session stops being live first. ``max_hold_ms`` (at least 1, at most the service's
    longest lease TTL; absent: no bound) ends the hold that long after its grant."""

    def _hold(self, ask: Ask, wait_ms: Optional[int]) -> H:
        """Acquires ``ask`` the session's way."""
        raise NotImplementedError

    def lock(
        self, name: str, wait_ms: Optional[int] = None, *, max_hold_ms: Optional[int] = None
    ) -> H:
        """Takes the FIFO lock ``name``, exclusive (:meth:`write_lock`)."""
        return self.write_lock(name, wait_ms, max_hold_ms=max_hold_ms)

    def write_lock(
        self, name: str, wait_ms: Optional[int] = None, *, max_hold_ms: Optional[int] = None
    ) -> H:
        """Takes the lock ``name`` exclusive: granted when nobody holds it and nobody waits
        before. Its guard can :meth:`~hivekeeper.Guard.downgrade` to shared."""
        return self._hold(asks.lock(name, False, max_hold_ms), wait_ms)

    def read_lock(
        self, name: str, wait_ms: Optional[int] = None, *, max_hold_ms: Optional[int] = None
    ) -> H:
        """Takes the lock ``name`` shared: beside other shared holders, when no exclusive
        holder holds it and no exclusive request waits before. A shared hold is never
        upgraded: release it, then :meth:`write_lock`."""
        return self._hold(asks.lock(name, True, max_hold_ms), wait_ms)

    def lock_all(
        self,
        names: Sequence[str],
        shared: bool = False,
        wait_ms: Optional[int] = None,
        *,
        max_hold_ms: Optional[int] = None,
    ) -> H:
        """Takes the locks ``names`` (1 to 64, none twice, in any order) all at once, in one
        mode, as one multi-lock (``lock.acquire_all``): one guard with one token for all of
        them, granted in one entry or queued FIFO as a unit. The guard's release (or the end
        of its block) releases them all (``lock.release_all``); their ``max_hold_ms`` ends
        them together. :class:`~hivekeeper.AlreadyHeld` when this session holds or acquires
        one of them already."""
        return self._hold(asks.lock_all(names, shared, max_hold_ms), wait_ms)

    def semaphore(
        self,
        name: str,
        limit: int,
        permits: int = 1,
        wait_ms: Optional[int] = None,
        *,
        max_hold_ms: Optional[int] = None,
    ) -> H:
        """Takes ``permits`` of the counting semaphore ``name`` of capacity ``limit`` (the
        first acquirer fixes it; another value is :class:`~hivekeeper.LimitMismatch`)."""
        return self._hold(asks.semaphore(name, limit, permits, max_hold_ms), wait_ms)
