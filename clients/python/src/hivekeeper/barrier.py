"""Double barriers (PROTOCOL.md section 8.24): ``session.barrier(name, count)``.

The service counts the members in its log, so the client only asks and waits::

    enter() ──▶ waits until `count` members arrived ──▶ generation (the round passed)
    leave() ──▶ waits until every member of that round left ──▶ the same generation

Between a granted :meth:`Barrier.enter` and a granted :meth:`Barrier.leave` the session is a
member of the round: it holds the barrier (``fence.check`` with kind ``"barrier"`` of the
generation is valid), claimed as a guard's resource is, so the session cannot enter it twice.
An enter that fails or times out is out of the round; a leave that times out has *not* left
(the member may leave again, and the others wait for it); a ``not_holder`` leave was in no
passed round. The lease's end takes the member out of its round.

:class:`BarrierBase` decides; :class:`Barrier` and ``hivekeeper.aio.Barrier`` only send and
wait, each their own way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping, Optional

from . import ask as asks
from .ask import Ask
from .errors import HivekeeperError, LeaseNotFound, MalformedResponse, NotHolder, SessionLost
from .protocol import RELEASE_OP
from .request_loop import Call

if TYPE_CHECKING:
    from .session import Session, SessionBase

log = logging.getLogger("hivekeeper")


class BarrierBase:
    """What the threaded :class:`Barrier` and ``hivekeeper.aio.Barrier`` share."""

    def __init__(self, session: "SessionBase", name: str, count: int) -> None:
        #: The session whose lease is the member.
        self.session = session
        #: The barrier's name.
        self.name = name
        #: How many members a round has.
        self.count = count
        #: The generation of the round this session is in (entered, not yet left), or the last
        #: one it left; ``None`` before the first round passed.
        self.generation: Optional[int] = None

    @property
    def _ask(self) -> Ask:
        return asks.barrier(self.name, self.count)

    @property
    def entered(self) -> bool:
        """Whether the session is a member of a passed round that it has not left."""
        with self.session._cond:
            return ("barrier", self.name) in self.session._claims

    def _entered_at(self, generation: int) -> int:
        self.generation = generation
        return generation

    def _leave_call(self, wait_ms: Optional[int]) -> Call:
        """The leave, which the session's loss interrupts. :class:`~hivekeeper.SessionLost`
        when the session is not live, :class:`~hivekeeper.NotHolder` when it entered no
        round."""
        state = self.session.state
        if not state.is_live():
            raise SessionLost(state)
        if not self.entered:
            raise NotHolder("not_holder", f"barrier.leave: {self.name!r} was not entered")
        op = RELEASE_OP["barrier"]
        fields = {"name": self.name, "lease": self.session.lease, "wait_ms": wait_ms}
        patience = self.session.agent._patience_for(op, wait_ms)
        return Call(op, fields, patience, self.session._interrupt)

    def _left(self, result: Mapping[str, Any]) -> int:
        """Every member of the round left; its generation."""
        generation = result.get("generation")
        if isinstance(generation, bool) or not isinstance(generation, int):
            raise MalformedResponse(f"barrier.leave answered {dict(result)}")
        self.session._unclaim(("barrier", self.name))
        self.generation = generation
        return generation

    def _leave_failed(self, error: BaseException) -> None:
        """A leave that was refused: ``not_holder`` was in no round, ``lease_not_found`` ended
        the session; a timeout (or another failure) has not left."""
        if isinstance(error, NotHolder):
            self.session._unclaim(("barrier", self.name))
        elif isinstance(error, LeaseNotFound):
            from .session import SessionState

            self.session._request_end(SessionState.EXPIRED)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, count={self.count}, "
            f"generation={self.generation})"
        )


class Barrier(BarrierBase):
    """A double barrier for one session: :meth:`enter`, work, :meth:`leave`; reusable for the
    next round. As a context manager it enters when the block starts and leaves when it ends
    (each waiting while the session lives)."""

    def __init__(self, session: "Session", name: str, count: int) -> None:
        super().__init__(session, name, count)
        #: The session, typed as the threaded one.
        self.session: "Session" = session

    def __enter__(self) -> "Barrier":
        self.enter()
        return self

    def __exit__(self, exc_type: Optional[type], *_: object) -> None:
        if not self.entered:
            return
        if exc_type is None:
            self.leave()
            return
        # The block failed: leave, so that the others go on, without hiding its exception.
        try:
            self.leave()
        except HivekeeperError as error:
            log.debug("leave of barrier %r failed: %s", self.name, error)

    def enter(self, wait_ms: Optional[int] = None) -> int:
        """Enters the round that fills now and waits until it has :attr:`count` members; the
        round's generation. ``wait_ms`` as for :meth:`Session.lock`: ``0``
        :class:`~hivekeeper.WouldBlock` unless this arrival fills the round, ``n``
        :class:`~hivekeeper.Timeout` (out of the round again). :class:`~hivekeeper.BadRequest`
        when the filling round has another count; :class:`~hivekeeper.AlreadyHeld` when
        this session is in a round it has not left."""
        return self._entered_at(self.session._take(self._ask, wait_ms))

    def leave(self, wait_ms: Optional[int] = None) -> int:
        """Leaves the round and waits until all its members left; its generation.
        :class:`~hivekeeper.Timeout` after ``wait_ms``: still a member, leave again."""
        call = self._leave_call(wait_ms)
        try:
            result = self.session.agent._call(call)
        except BaseException as error:
            self._leave_failed(error)
            raise
        return self._left(result)
