"""Elections (PROTOCOL.md section 8.23): a :class:`Leadership` won by ``session.campaign`` and
the leaders of an election followed by ``agent.observe``.

The service runs the election: candidates are served in arrival order, each leadership is
fenced by a token (``fence.check`` with kind ``"election"``), and the leader is mirrored as the
key ``$election/{name}`` (its value the leader's, its ``create_revision`` the token). The
client only asks and waits, as for a lock::

    campaign ──▶ (queued behind the leader) ──▶ token: this session leads
       leading ── proclaim(value) ──▶ the key's value changes, same token
       leading ── resign() / the `with` block ends ──▶ the next candidate leads, same entry
       leading ── the lease ends ──▶ election.lost {name, token}: deposed

**Observing.** :class:`LeaderFollower` turns the answers of a watch on the key into leaders,
without I/O: the first item is the leader at the initial ``kv.get`` (``None``: nobody leads),
then one item per change of who leads or of the leader's value. A handover (the old leader's
key deleted, the new one's created, two revisions of one log entry) yields the new leader
only, never a ``None`` between the two, even when an answer ends between them: an answer that
ends with a delete while more events wait (no ``progress``) keeps the ``None`` until the next
answer shows whether a put of the same entry follows. A ``None`` is yielded only when nobody
leads after a whole entry. The key does not say which agent leads: the observer asks
``election.leader`` for each new token when handing it out, and :attr:`Leader.agent` is
``None`` when that leadership had already ended by then.

:class:`LeadershipBase` and :class:`LeaderFollower` decide; :class:`Leadership` and
:class:`Observer` (and their ``hivekeeper.aio`` twins) only send and wait, each their own way.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Generator, Iterator, List, Mapping, Optional, Tuple

from .errors import Compacted, MalformedResponse, NotHolder, SessionLost
from .guard import Guard, GuardBase
from .watch import WatchPage

if TYPE_CHECKING:
    from .agent import Agent
    from .ask import Ask
    from .kv import GetResult
    from .session import SessionBase

log = logging.getLogger("hivekeeper")

#: The prefix of the keys that mirror the leaders (PROTOCOL.md section 8.23).
ELECTION_KEY_PREFIX = "$election/"
#: A revision is ``log position << 16`` plus one per further change of the entry
#: (PROTOCOL.md section 8.22): two revisions of one entry agree above these bits.
ENTRY_SHIFT = 16

#: What the mirror key says at a revision: ``(value, token)``, or ``None`` when nobody leads.
Mirror = Optional[Tuple[str, int]]
#: A step of an observation, as :meth:`LeaderFollower.steps` asks its driver, and the answer
#: it takes: ``("read", key)``, the ``kv.get`` of the key; ``("watch", after)``, start a watch
#: of the key after that revision (``None``); ``("poll", None)``, the watch's next answer
#: (``None`` once it ended, or the :class:`~hivekeeper.Compacted` it raised);
#: ``("ask", name)``, the ``election.leader`` answer; ``("item", leader)``, hand it out
#: (``None``).
Step = Tuple[str, Any]


@dataclass(frozen=True)
class Leader:
    """Who leads an election: the answer of ``election.leader``, or an item of ``observe``."""

    #: The leading agent; ``None`` in an ``observe`` item whose leadership had already ended
    #: when the observer asked who held it.
    agent: Optional[str]
    #: The value the leader announces.
    value: str
    #: The leadership's fencing token.
    token: int

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> Optional["Leader"]:
        """The ``leader`` of an ``election.leader`` answer (``None``: nobody leads)."""
        try:
            leader = result["leader"]
            if leader is None:
                return None
            token = leader["token"]
            if isinstance(token, bool) or not isinstance(token, int):
                raise TypeError("token")
            return Leader(str(leader["agent"]), str(leader["value"]), token)
        except (KeyError, TypeError):
            raise MalformedResponse(f"election.leader answered {dict(result)}") from None


def election_key(name: str) -> str:
    """The key that mirrors the leader of the election ``name``."""
    return ELECTION_KEY_PREFIX + name


class LeadershipBase(GuardBase):
    """What the threaded :class:`Leadership` and ``hivekeeper.aio.Leadership`` share: a
    guard of kind ``"election"`` (released by ``election.resign``, which names the token)
    with a value and the news of its loss."""

    def __init__(self, session: "SessionBase", ask: "Ask", token: int) -> None:
        super().__init__(session, ask, token)
        #: The value announced, as last proclaimed.
        self.value: str = ask.fields["value"]
        #: Set when this leadership is known to have ended: ``election.lost`` or the end of
        #: its session (its lease ended), or a ``not_holder`` answer to ``proclaim`` or
        #: ``resign``. Final. :meth:`is_lost` also counts a session in jeopardy.
        self.deposed = threading.Event()
        session._watch_leadership(self)

    def is_lost(self) -> bool:
        """Whether this session may no longer lead: deposed, or the session is not LIVE
        (in jeopardy the leadership may be taken away before the client can tell)."""
        return self.deposed.is_set() or super().is_lost()

    def _lost_now(self) -> bool:
        """:meth:`is_lost` with the session's condition held."""
        return self.deposed.is_set() or not self.session._state.is_live()

    def _deposed(self) -> None:
        """The service said the leadership ended (session condition held)."""
        self.deposed.set()
        self.session.agent._shared.notify()

    def _not_leading(self, op: str) -> NotHolder:
        return NotHolder("not_holder", f"{op}: the leadership {self.token} of {self.name!r} ended")

    def _proclaim_request(self, value: str) -> Dict[str, Any]:
        """The proclaim; :class:`~hivekeeper.SessionLost` when the session is not live,
        :class:`~hivekeeper.NotHolder` when deposed (nothing to send)."""
        state = self.session.state
        if not state.is_live():
            raise SessionLost(state)
        if self.deposed.is_set():
            raise self._not_leading("election.proclaim")
        return {"op": "election.proclaim", "name": self.name, "token": self.token, "value": value}

    def _proclaimed(self, value: str, result: Mapping[str, Any]) -> int:
        """The put's revision; the leadership announces ``value`` from now on."""
        revision = result.get("revision")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise MalformedResponse(f"election.proclaim answered {dict(result)}")
        with self.session._cond:
            self.value = value
        return revision

    def _request_failed(self, error: BaseException) -> None:
        """A ``not_holder`` answer: this token leads no more."""
        super()._request_failed(error)
        if isinstance(error, NotHolder):
            with self.session._cond:
                self._deposed()

    def _release_request(self) -> Optional[Dict[str, Any]]:
        """The resign; as a guard's release, and :class:`~hivekeeper.NotHolder` without
        sending anything when deposed."""
        if not self._released and self.deposed.is_set() and not self.session.state.is_ended():
            self._forget()
            raise self._not_leading("election.resign")
        return super()._release_request()

    def _skip_release_at_exit(self) -> bool:
        if not self._released and self.deposed.is_set():
            self._forget()
        return super()._skip_release_at_exit()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, token={self.token})"


class Leadership(LeadershipBase, Guard):
    """This session leads an election (made by :meth:`Session.campaign`): its token, the
    value it announces, :meth:`proclaim` and :meth:`resign`. A guard of kind ``"election"``:
    as a context manager it resigns when the block ends; one used without ``with`` is
    resigned with :meth:`resign`, or goes with its session."""

    def __enter__(self) -> "Leadership":
        return self

    def proclaim(self, value: str) -> int:
        """Announces ``value`` instead (``election.proclaim``); the revision of the put of the
        leader's key. :class:`~hivekeeper.NotHolder` when this token leads no more (then
        :attr:`deposed` is set), :class:`~hivekeeper.SessionLost` when the session is not
        live; nothing changes then."""
        request = self._proclaim_request(value)
        try:
            result = self.session.agent.request(**request)
        except BaseException as error:
            self._request_failed(error)
            raise
        return self._proclaimed(value, result)

    def resign(self) -> None:
        """Steps down (``election.resign``): the next candidate leads in the same entry. When
        the leadership was already lost, nothing is sent and
        :class:`~hivekeeper.SessionLost` (the lease ended) or :class:`~hivekeeper.NotHolder`
        (deposed) is raised. A second resign does nothing."""
        self.release()

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Blocks until :meth:`is_lost` (at most ``timeout`` seconds); whether it is."""
        with self.session._cond:
            return self.session._cond.wait_for(self._lost_now, timeout)


class LeaderFollower:
    """The leaders of one election from a read and a watch of its key, without I/O (see the
    module doc)."""

    def __init__(self, name: str) -> None:
        #: The election's name.
        self.name = name
        #: Where the watch starts: the revision of the last read (set by :meth:`load`).
        self.after = 0
        #: What the key said at the cursor, as handed on; ``False`` before the first read.
        self._state: Any = False
        #: A delete at the end of an answer with more to come, with its revision.
        self._held: Optional[int] = None
        #: The last leader handed out, for its agent.
        self._last: Optional[Leader] = None

    @property
    def key(self) -> str:
        """The watched key."""
        return election_key(self.name)

    def load(self, read: "GetResult") -> List[Mirror]:
        """The key as read: a fresh cursor at the read's revision, and the state it shows if
        it differs from what was handed on (the first read always shows one); the watch
        starts after the read."""
        self.after = read.revision
        self._held = None
        kv = read.kv
        return self._changed([None if kv is None else (kv.value, kv.create_revision)])

    def advance(self, page: WatchPage) -> List[Mirror]:
        """The states an answer shows, handovers folded (see the module doc)."""
        seen: List[Mirror] = []
        held = self._held
        self._held = None
        for event in page.events:
            if held is not None and not _same_entry(held, event.revision):
                seen.append(None)
            held = None
            if event.type == "delete":
                held = event.revision
            else:
                seen.append((event.kv.value, event.kv.create_revision))
        if held is not None:
            if page.progress is None:
                self._held = held
            else:
                seen.append(None)
        return self._changed(seen)

    def _changed(self, seen: List[Mirror]) -> List[Mirror]:
        out = []
        for state in seen:
            if state != self._state:
                out.append(state)
                self._state = state
        return out

    def needs_agent(self, state: Mirror) -> bool:
        """Whether handing out ``state`` needs an ``election.leader`` to learn its agent."""
        return state is not None and (self._last is None or self._last.token != state[1])

    def hand_out(
        self, state: Mirror, asked: Optional[Mapping[str, Any]] = None
    ) -> Optional[Leader]:
        """The item for ``state``; ``asked`` is the ``election.leader`` answer when
        :meth:`needs_agent` said so."""
        if state is None:
            return None
        value, token = state
        agent = None
        if self._last is not None and self._last.token == token:
            agent = self._last.agent
        elif asked is not None:
            now = Leader.from_result(asked)
            agent = now.agent if now is not None and now.token == token else None
        self._last = Leader(agent, value, token)
        return self._last

    def steps(self) -> Generator[Step, Any, None]:
        """An observation as the steps its driver takes (see :data:`Step`), for ever: the
        read, a watch after it, then the items of each answer; a compacted history is read
        again. Ends when a poll answers ``None`` (the watch ended)."""
        pending: List[Mirror] = []
        while True:
            pending.extend(self.load((yield ("read", self.key))))
            yield ("watch", self.after)
            while True:
                while pending:
                    state = pending.pop(0)
                    asked = (yield ("ask", self.name)) if self.needs_agent(state) else None
                    yield ("item", self.hand_out(state, asked))
                page = yield ("poll", None)
                if page is None:
                    return
                if isinstance(page, Compacted):
                    log.info("observe %r: %s; reading the key again", self.name, page)
                    break
                pending.extend(self.advance(page))


def _same_entry(first: int, second: int) -> bool:
    return first >> ENTRY_SHIFT == second >> ENTRY_SHIFT


class ObserverBase:
    """What the threaded :class:`Observer` and ``hivekeeper.aio.Observer`` share: the steps
    of :meth:`LeaderFollower.steps` and the watch they ask for."""

    def __init__(self, agent: Any, name: str, wait_ms: Optional[int] = None) -> None:
        #: The agent that reads and polls.
        self.agent = agent
        #: The decisions.
        self.follower = LeaderFollower(name)
        #: The ``wait_ms`` of each poll (``None``: the service's default).
        self.wait_ms = wait_ms
        #: The follower's steps, driven by ``next``.
        self._steps = self.follower.steps()
        #: The watch in progress.
        self._watch: Optional[Any] = None
        #: Set by :meth:`close`.
        self._closed = False

    def close(self) -> None:
        """Ends the observation; a pending poll stops at once. Idempotent, any thread."""
        self._closed = True
        watch = self._watch
        if watch is not None:
            watch.close()

    def _start_watch(self, after: int) -> None:
        self._watch = self.agent.kv.watch(key=self.follower.key, after=after, wait_ms=self.wait_ms)
        if self._closed:
            self._watch.close()


class Observer(ObserverBase):
    """The leaders of an election, as an iterator of ``Optional[Leader]`` (threads): made by
    :meth:`Agent.observe`. The first item is the leader now (``None``: nobody leads), then one
    per change, in order (see the module doc). Lost connections and failover are retried from
    the same cursor; a compacted history is read again (one item if the leader changed
    meanwhile). It lives until :meth:`close` (any thread), the end of its ``with`` block, or
    an error."""

    agent: "Agent"

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Optional[Leader]]:
        return self

    def __next__(self) -> Optional[Leader]:
        reply: Any = None
        while not self._closed:
            need, what = self._steps.send(reply)  # StopIteration: the watch ended
            if need == "item":
                return what  # type: ignore[no-any-return]
            try:
                reply = self._serve(need, what)
            except BaseException:
                self.close()
                raise
        raise StopIteration

    def _serve(self, need: str, what: Any) -> Any:
        if need == "read":
            return self.agent.kv.get(what)
        if need == "ask":
            return self.agent.request("election.leader", name=what)
        if need == "watch":
            return self._start_watch(what)
        try:
            return self._watch.poll()  # type: ignore[union-attr]
        except StopIteration:
            return None
        except Compacted as compacted:
            return compacted
