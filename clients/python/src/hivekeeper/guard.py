"""``Guard``: proof of a grant (lock, permits, waypoint reservation) with its fencing token.

The token is the safety mechanism, the guard only a convenience (DESIGN.md section 5.2): pass
:attr:`Guard.token` to whatever the guard protects, and let that resource refuse a token older
than the newest it has seen (or ask the service with ``fence.check``). A guard cannot stop the
world when its lease is lost; the token lets the world stop a stale holder.

As a context manager the grant is released when the block ends. Python has no reliable
destructor, so a guard used without ``with`` must be released with :meth:`Guard.release`, or
goes with its session (revoking a session releases everything it holds).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Dict, Optional

from .errors import HivekeeperError, LeaseNotFound, SessionLost
from .protocol import RELEASE_OP, FenceCheck

if TYPE_CHECKING:
    from .session import Session, SessionBase

log = logging.getLogger("hivekeeper")


class GuardBase:
    """What the threaded :class:`Guard` and ``hivekeeper.aio.Guard`` share."""

    def __init__(self, session: "SessionBase", kind: str, name: str, token: int) -> None:
        #: The session the grant is bound to.
        self.session = session
        #: ``"lock"``, ``"sem"`` or ``"waypoint"``.
        self.kind = kind
        #: The resource's name.
        self.name = name
        #: The fencing token: strictly increasing per resource across grants, leader changes
        #: and restarts. Send it with every action the guard protects.
        self.token = token
        #: Whether the grant was released (or given back by the client).
        self._released = False

    @property
    def lost(self) -> threading.Event:
        """The session's ``lost`` event: set while the session is not LIVE, when the grant
        may be taken away before the client can tell."""
        return self.session.lost

    def is_lost(self) -> bool:
        """Whether the session is not LIVE right now: stop acting under this guard."""
        return not self.session.state.is_live()

    def _release_request(self) -> Optional[Dict[str, Any]]:
        """The release's op and fields, or ``None`` when there is nothing to send (released
        already). :class:`~hivekeeper.SessionLost` when the lease ended: the hold was gone
        before this release, which the application may want to know."""
        if self._released:
            return None
        state = self.session.state
        if state.is_ended():
            self._forget()
            raise SessionLost(state)
        return {"op": RELEASE_OP[self.kind], "name": self.name, "lease": self.session.lease}

    def _release_failed(self, error: BaseException) -> None:
        if isinstance(error, LeaseNotFound):
            from .session import SessionState

            self.session._request_end(SessionState.EXPIRED)

    def _skip_release_at_exit(self) -> bool:
        """Whether the end of a ``with`` block has nothing to release."""
        if self._released:
            return True
        if self.session.state.is_ended():
            # The lease's end released it already; nothing to send.
            self._forget()
            return True
        return False

    def _forget(self) -> None:
        self._released = True
        self.session._unclaim((self.kind, self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, name={self.name!r}, token={self.token})"


class Guard(GuardBase):
    """A granted lock, permits or waypoint reservation, with its fencing token."""

    def __init__(self, session: "Session", kind: str, name: str, token: int) -> None:
        super().__init__(session, kind, name, token)
        #: The session, typed as the threaded one.
        self.session: "Session" = session

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type: Optional[type], *_: object) -> None:
        if self._skip_release_at_exit():
            return
        if exc_type is None:
            self.release()
            return
        # The block failed: release, but do not hide its exception behind ours.
        try:
            self.release()
        except HivekeeperError as error:
            log.debug("release of %s %r failed: %s", self.kind, self.name, error)

    def fence_check(self) -> FenceCheck:
        """``fence.check`` of this guard's own token on its resource."""
        return self.session.agent.fence_check(self.name, self.token, self.kind)

    def release(self) -> None:
        """Releases the grant and waits for the service's answer.

        When the lease already ended, nothing is sent and :class:`~hivekeeper.SessionLost` is
        raised: the hold was gone before this release. A second release does nothing."""
        request = self._release_request()
        if request is None:
            return
        try:
            self.session.agent.request(**request)
        except BaseException as error:
            self._release_failed(error)
            raise
        finally:
            self._forget()
