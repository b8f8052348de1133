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
from typing import TYPE_CHECKING, Optional

from .errors import HivekeeperError, LeaseNotFound, SessionLost
from .protocol import RELEASE_OP, FenceCheck

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger("hivekeeper")


class Guard:
    """A granted lock, permits or waypoint reservation, with its fencing token."""

    def __init__(self, session: "Session", kind: str, name: str, token: int) -> None:
        #: The session the grant is bound to.
        self.session = session
        #: ``"lock"``, ``"sem"`` or ``"waypoint"``.
        self.kind = kind
        #: The resource's name.
        self.name = name
        #: The fencing token: strictly increasing per resource across grants, leader changes
        #: and restarts. Send it with every action the guard protects.
        self.token = token
        #: Whether :meth:`release` ran (or the guard was given back by the client).
        self._released = False

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type: Optional[type], *_: object) -> None:
        if self._released:
            return
        if self.session.state.is_ended():
            # The lease's end released it already; nothing to send.
            self._forget()
            return
        if exc_type is not None:
            # The block failed: release, but do not hide its exception behind ours.
            self._release_quietly()
            return
        self.release()

    @property
    def lost(self) -> threading.Event:
        """The session's :attr:`Session.lost <hivekeeper.Session.lost>`: set while the
        session is not LIVE, when the grant may be taken away before the client can tell."""
        return self.session.lost

    def is_lost(self) -> bool:
        """Whether the session is not LIVE right now: stop acting under this guard."""
        return not self.session.state.is_live()

    def fence_check(self) -> FenceCheck:
        """``fence.check`` of this guard's own token on its resource."""
        return self.session.agent.fence_check(self.name, self.token, self.kind)

    def release(self) -> None:
        """Releases the grant and waits for the service's answer.

        When the lease already ended, nothing is sent and :class:`~hivekeeper.SessionLost` is
        raised: the hold was gone before this release, which the application may want to
        know. A second release does nothing."""
        if self._released:
            return
        state = self.session.state
        if state.is_ended():
            self._forget()
            raise SessionLost(state)
        try:
            self.session.agent.request(
                RELEASE_OP[self.kind], name=self.name, lease=self.session.lease
            )
        except LeaseNotFound:
            from .session import SessionState

            self.session._request_end(SessionState.EXPIRED)
            raise
        finally:
            self._forget()

    def _release_quietly(self) -> None:
        try:
            self.release()
        except HivekeeperError as error:
            log.debug(
                "release of %s %r failed (the lease's end releases it): %s",
                self.kind,
                self.name,
                error,
            )

    def _forget(self) -> None:
        self._released = True
        self.session._unclaim((self.kind, self.name))

    def __repr__(self) -> str:
        return f"Guard(kind={self.kind!r}, name={self.name!r}, token={self.token})"
