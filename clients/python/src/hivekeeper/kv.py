"""Keys and revisions (PROTOCOL.md section 8.22): the typed results of ``kv.put``,
``kv.get``, ``kv.delete`` and ``kv.txn``, the compare and op helpers of a txn, and
:class:`KvBase`, what the threaded :class:`Kv` and ``hivekeeper.aio.Kv`` share.

Every write is one entry of the replicated log and answers its ``revision``, from the same
strictly increasing counter as fencing tokens. A read answers the service's revision at the
time of the read: a watch from it (``after=revision``) misses nothing.

A :class:`Kv` is reached as ``agent.kv`` (plain keys) or ``session.kv`` (the same, but a put
binds the key to the session's lease by default: the key goes when the session ends, which
is what presence is made of). Each request is built and each answer parsed here, once; the
two clients only send and wait their own way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    TypeVar,
)

from .errors import LeaseNotFound, MalformedResponse, SessionLost

if TYPE_CHECKING:
    from .agent import Agent
    from .session import Session, SessionBase
    from .watch import Watch, WatchBase

T = TypeVar("T")
#: What a page read returns: a :class:`GetResult`, or an awaitable of one.
G = TypeVar("G")
#: The watch a :class:`KvBase` makes.
W = TypeVar("W", bound="WatchBase")

#: A plain request: the op, its fields (``None`` values left out), and how to read the answer.
Plan = Tuple[str, Dict[str, Any], Callable[[Mapping[str, Any]], T]]


@dataclass(frozen=True)
class KeyValue:
    """One key as the service stores it."""

    #: The key: 1 to 512 bytes of UTF-8.
    key: str
    #: Its value, a string (at most 8 KiB).
    value: str
    #: The revision of the put that created it.
    create_revision: int
    #: The revision of its last put.
    mod_revision: int
    #: Puts since it was created: 1 after the first.
    version: int
    #: The lease it is bound to (it goes when the lease ends); ``None`` when unbound.
    lease: Optional[str] = None

    @staticmethod
    def from_wire(kv: Mapping[str, Any]) -> "KeyValue":
        """Builds it from the wire's object; ``KeyError``/``TypeError`` when it lacks a field."""
        if not isinstance(kv, Mapping):
            raise TypeError("a key is an object")
        return KeyValue(
            key=_str(kv["key"]),
            value=_str(kv["value"]),
            create_revision=_int(kv["create_revision"]),
            mod_revision=_int(kv["mod_revision"]),
            version=_int(kv["version"]),
            lease=kv.get("lease"),
        )


@dataclass(frozen=True)
class GetResult:
    """The answer of ``kv.get``: the keys read and the revision the read saw."""

    #: The service's revision the read saw: a watch ``after`` it misses no later change.
    revision: int
    #: The keys, in byte order of their names; empty for a missing key.
    kvs: List[KeyValue]
    #: While more keys of a prefix follow: the ``after`` of the next page.
    next_after: Optional[str] = None

    @property
    def kv(self) -> Optional[KeyValue]:
        """The key of a single-key read; ``None`` when it does not exist."""
        return self.kvs[0] if self.kvs else None

    @property
    def value(self) -> Optional[str]:
        """The value of a single-key read; ``None`` when the key does not exist."""
        return self.kvs[0].value if self.kvs else None

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "GetResult":
        return _parse("kv.get", result, GetResult._from)

    @staticmethod
    def _from(result: Mapping[str, Any]) -> "GetResult":
        return GetResult(
            revision=_int(result["revision"]),
            kvs=_kvs(result.get("kvs", [])),
            next_after=result.get("next_after"),
        )


@dataclass(frozen=True)
class PutResult:
    """The answer of ``kv.put``."""

    #: The put's revision (the key's new ``mod_revision``).
    revision: int
    #: The key as it was before, when ``prev_kv=True`` was asked and it existed.
    prev_kv: Optional[KeyValue] = None

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "PutResult":
        return _parse(
            "kv.put",
            result,
            lambda r: PutResult(_int(r["revision"]), _maybe_kv(r.get("prev_kv"))),
        )


@dataclass(frozen=True)
class DeleteResult:
    """The answer of ``kv.delete``."""

    #: The delete's revision (taken even when nothing matched).
    revision: int
    #: How many keys went.
    deleted: int

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "DeleteResult":
        return _parse(
            "kv.delete", result, lambda r: DeleteResult(_int(r["revision"]), _int(r["deleted"]))
        )


@dataclass(frozen=True)
class TxnOpResult:
    """The result of one op of the branch a txn ran, tagged by its verb."""

    #: ``"put"``, ``"delete"`` or ``"get"``.
    verb: str
    #: A put's previous key, when it asked for it and the key existed.
    prev_kv: Optional[KeyValue] = None
    #: A delete's count of keys gone.
    deleted: Optional[int] = None
    #: A get's keys.
    kvs: Optional[List[KeyValue]] = None
    #: A get of a prefix with more keys to follow: the ``after`` of the next page.
    next_after: Optional[str] = None

    @property
    def kv(self) -> Optional[KeyValue]:
        """A get of one key: the key, ``None`` when it does not exist (or not a get)."""
        return self.kvs[0] if self.kvs else None

    @staticmethod
    def _from(tagged: Mapping[str, Any]) -> "TxnOpResult":
        if not isinstance(tagged, Mapping) or len(tagged) != 1:
            raise TypeError("a txn result is an object with one verb")
        ((verb, body),) = tagged.items()
        if verb == "put":
            return TxnOpResult("put", prev_kv=_maybe_kv(body.get("prev_kv")))
        if verb == "delete":
            return TxnOpResult("delete", deleted=_int(body["deleted"]))
        if verb == "get":
            return TxnOpResult("get", kvs=_kvs(body["kvs"]), next_after=body.get("next_after"))
        raise TypeError(f"unknown txn result verb {verb!r}")


@dataclass(frozen=True)
class TxnResult:
    """The answer of ``kv.txn``: one revision, one branch."""

    #: The txn's revision (one log entry, all or nothing).
    revision: int
    #: Whether every compare held and the ``success`` branch ran (else ``failure`` did).
    succeeded: bool
    #: One per op of the branch that ran, in order.
    results: List[TxnOpResult]

    @staticmethod
    def from_result(result: Mapping[str, Any]) -> "TxnResult":
        return _parse(
            "kv.txn",
            result,
            lambda r: TxnResult(
                revision=_int(r["revision"]),
                succeeded=bool(r["succeeded"]),
                results=[TxnOpResult._from(x) for x in r.get("results", [])],
            ),
        )


class Compare:
    """The compares of a txn, as the plain dicts the wire takes (a dict of your own works
    too). ``op`` is ``"=="``, ``"!="``, ``"<"`` or ``">"``; a missing key has version and
    revisions 0, no lease, and a value ``!=`` every string."""

    @staticmethod
    def value(key: str, op: str, value: str) -> Dict[str, Any]:
        """The key's value compared with ``value`` (byte order)."""
        return _compare(key, "value", op, value)

    @staticmethod
    def version(key: str, op: str, version: int) -> Dict[str, Any]:
        """The key's version (puts since creation; 0: it does not exist)."""
        return _compare(key, "version", op, version)

    @staticmethod
    def create_revision(key: str, op: str, revision: int) -> Dict[str, Any]:
        """The revision that created the key (0: it does not exist)."""
        return _compare(key, "create_revision", op, revision)

    @staticmethod
    def mod_revision(key: str, op: str, revision: int) -> Dict[str, Any]:
        """The revision of the key's last put (0: it does not exist)."""
        return _compare(key, "mod_revision", op, revision)

    @staticmethod
    def lease(key: str, op: str, lease: Optional[str]) -> Dict[str, Any]:
        """The lease the key is bound to (``None``: unbound or missing)."""
        return _compare(key, "lease", op, lease)

    @staticmethod
    def holder(kind: str, name: str, token: int) -> Dict[str, Any]:
        """True while fencing ``token`` holds ``kind`` (``"lock"``, ``"sem"``,
        ``"waypoint"``) ``name``: a write fenced by a lock, checked inside the service."""
        return {"holder": {"kind": kind, "name": name}, "token": token}


def _compare(key: str, target: str, op: str, value: Any) -> Dict[str, Any]:
    """A compare of the key's ``target`` with ``value``, as the wire takes it."""
    return {"key": key, "target": target, "op": op, "value": value}


class Op:
    """The ops of a txn branch, tagged by their verb as the wire takes them."""

    @staticmethod
    def put(
        key: str, value: str, lease: Optional[str] = None, prev_kv: bool = False
    ) -> Dict[str, Any]:
        """Put ``value`` at ``key``, bound to ``lease`` when given (a txn names its leases
        explicitly, ``session.lease`` for the session's)."""
        return {"put": _fields(key=key, value=value, lease=lease, prev_kv=prev_kv or None)}

    @staticmethod
    def delete(key: str) -> Dict[str, Any]:
        """Delete ``key``."""
        return {"delete": {"key": key}}

    @staticmethod
    def delete_prefix(prefix: str) -> Dict[str, Any]:
        """Delete every key with ``prefix``."""
        return {"delete": {"prefix": prefix}}

    @staticmethod
    def get(key: str) -> Dict[str, Any]:
        """Read ``key`` as the txn sees it."""
        return {"get": {"key": key}}

    @staticmethod
    def get_prefix(
        prefix: str, after: Optional[str] = None, limit: Optional[int] = None
    ) -> Dict[str, Any]:
        """Read a page of the keys with ``prefix``."""
        return {"get": _fields(prefix=prefix, after=after, limit=limit)}


class KvBase(Generic[G, W]):
    """What the threaded :class:`Kv` and ``hivekeeper.aio.Kv`` share: each request as a
    :data:`Plan` (op, fields, parser), the session's part in a leased put, and the calls
    written once for both: :meth:`get_page` (sent by :meth:`_read`, whose result ``G`` is a
    :class:`GetResult` or an awaitable of one) and :meth:`watch` (a ``W`` of
    :meth:`_watch_type`)."""

    def __init__(self, agent: Any, session: Optional["SessionBase"] = None) -> None:
        #: The agent that sends the requests.
        self.agent = agent
        #: The session whose lease a put binds keys to by default; ``None`` for ``agent.kv``.
        self.session = session

    def __repr__(self) -> str:
        bound = f", lease={self.session.lease!r}" if self.session is not None else ""
        return f"{type(self).__name__}(agent={self.agent.agent_id!r}{bound})"

    def _read(self, plan: "Plan[GetResult]") -> G:
        """Sends a read the client's way."""
        raise NotImplementedError

    def _watch_type(self) -> Type[W]:
        """The client's watch."""
        raise NotImplementedError

    def get_page(
        self,
        prefix: str,
        after: Optional[str] = None,
        limit: Optional[int] = None,
        serializable: bool = False,
    ) -> G:
        """``kv.get`` of one page of the keys with ``prefix`` (``limit`` 1 to 1000), after the
        key ``after`` (the previous page's ``next_after``)."""
        return self._read(self._get_plan(None, prefix, after, limit, serializable))

    def watch(
        self,
        prefix: Optional[str] = None,
        key: Optional[str] = None,
        after: int = 0,
        max_events: Optional[int] = None,
        wait_ms: Optional[int] = None,
    ) -> W:
        """The changes of ``prefix`` (or of one ``key``) with revision > ``after``, in order,
        as an iterator of :class:`~hivekeeper.WatchEvent` (see :class:`~hivekeeper.Watch`);
        from ``hivekeeper.aio``, an async iterator:
        ``async for event in kv.watch(prefix="hive/", after=rev)``."""
        return self._watch_type()(self.agent, key, prefix, after, max_events, wait_ms)

    def _get_plan(
        self,
        key: Optional[str] = None,
        prefix: Optional[str] = None,
        after: Optional[str] = None,
        limit: Optional[int] = None,
        serializable: bool = False,
    ) -> "Plan[GetResult]":
        fields = _fields(
            key=key, prefix=prefix, after=after, limit=limit, serializable=serializable or None
        )
        return "kv.get", fields, GetResult.from_result

    def _put_plan(
        self, key: str, value: str, lease: Optional[str], prev_kv: bool
    ) -> Tuple["Plan[PutResult]", Optional["SessionBase"]]:
        """The put, and the session whose lease it names (which must be live)."""
        session = None
        if lease is None and self.session is not None:
            session = self.session
            lease = session.lease
        elif self.session is not None and lease == self.session.lease:
            session = self.session
        if session is not None:
            state = session.state
            if not state.is_live():
                raise SessionLost(state)
        fields = _fields(key=key, value=value, lease=lease, prev_kv=prev_kv or None)
        return ("kv.put", fields, PutResult.from_result), session

    @staticmethod
    def _delete_plan(
        key: Optional[str] = None, prefix: Optional[str] = None
    ) -> "Plan[DeleteResult]":
        return "kv.delete", _fields(key=key, prefix=prefix), DeleteResult.from_result

    @staticmethod
    def _txn_plan(
        compare: Iterable[Mapping[str, Any]],
        success: Iterable[Mapping[str, Any]],
        failure: Iterable[Mapping[str, Any]],
    ) -> "Plan[TxnResult]":
        fields = {
            "compare": [dict(c) for c in compare],
            "success": [dict(o) for o in success],
            "failure": [dict(o) for o in failure],
        }
        return "kv.txn", fields, TxnResult.from_result

    def _put_failed(self, session: Optional["SessionBase"], error: BaseException) -> None:
        """A leased put answered ``lease_not_found``: the session's lease is gone."""
        from .session import SessionState

        if session is not None and isinstance(error, LeaseNotFound):
            session._request_end(SessionState.EXPIRED)

    @staticmethod
    def _merge_pages(pages: List[GetResult]) -> GetResult:
        """Every page of a prefix as one result, at the first page's revision: a watch from it
        replays whatever changed while the later pages were read, so it misses nothing."""
        kvs = [kv for page in pages for kv in page.kvs]
        return GetResult(revision=pages[0].revision, kvs=kvs, next_after=None)


class Kv(KvBase[GetResult, "Watch"]):
    """Keys, from the threaded client: ``agent.kv`` or ``session.kv`` (see the module doc).
    Thread-safe, as the agent is. Retries are the agent's: the same request id again, which
    the service answers with the first outcome, so a retried put is applied once."""

    agent: "Agent"

    def get(self, key: str, serializable: bool = False) -> GetResult:
        """``kv.get`` of one key: ``.kv`` / ``.value`` are ``None`` when it does not exist.
        Linearizable; ``serializable=True`` reads the receiving member's replica (faster,
        possibly behind)."""
        return self._run(self._get_plan(key=key, serializable=serializable))

    def get_prefix(
        self, prefix: str, limit: Optional[int] = None, serializable: bool = False
    ) -> GetResult:
        """Every key with ``prefix`` (``""``: every key), paging through ``next_after``; the
        result's ``revision`` is the first page's (see :meth:`KvBase._merge_pages`)."""
        pages = [self.get_page(prefix, None, limit, serializable)]
        while pages[-1].next_after is not None:
            pages.append(self.get_page(prefix, pages[-1].next_after, limit, serializable))
        return self._merge_pages(pages)

    def put(
        self, key: str, value: str, lease: Optional[str] = None, prev_kv: bool = False
    ) -> PutResult:
        """``kv.put``. ``lease`` binds the key to a live lease of this agent (it goes when the
        lease ends); on ``session.kv`` it defaults to the session's lease, and
        :class:`~hivekeeper.SessionLost` is raised when the session is not live.
        ``prev_kv=True`` answers the key as it was."""
        plan, session = self._put_plan(key, value, lease, prev_kv)
        try:
            return self._run(plan)
        except BaseException as error:
            self._put_failed(session, error)
            raise

    def delete(self, key: str) -> DeleteResult:
        """``kv.delete`` of one key (``deleted`` 0 when it did not exist)."""
        return self._run(self._delete_plan(key=key))

    def delete_prefix(self, prefix: str) -> DeleteResult:
        """``kv.delete`` of every key with ``prefix``, at one revision (the service's ``$``
        keys excepted)."""
        return self._run(self._delete_plan(prefix=prefix))

    def txn(
        self,
        compare: Iterable[Mapping[str, Any]] = (),
        success: Iterable[Mapping[str, Any]] = (),
        failure: Iterable[Mapping[str, Any]] = (),
    ) -> TxnResult:
        """``kv.txn``: if every compare holds (:class:`Compare`), the ``success`` ops
        (:class:`Op`), else the ``failure`` ones; one revision, all or nothing."""
        return self._run(self._txn_plan(compare, success, failure))

    def _read(self, plan: "Plan[GetResult]") -> GetResult:
        return self._run(plan)

    def _watch_type(self) -> Type["Watch"]:
        from .watch import Watch

        return Watch

    def _run(self, plan: "Plan[T]") -> T:
        op, fields, parse = plan
        return parse(self.agent.request(op, **fields))


def session_kv(session: "Session") -> Kv:
    """``session.kv``: puts bound to the session's lease by default."""
    return Kv(session.agent, session)


# -- parsing --------------------------------------------------------------------------------


def _fields(**fields: Any) -> Dict[str, Any]:
    """The fields given, without the ``None`` ones."""
    return {k: v for k, v in fields.items() if v is not None}


def _parse(op: str, result: Mapping[str, Any], build: Callable[[Mapping[str, Any]], T]) -> T:
    try:
        return build(result)
    except (KeyError, TypeError, ValueError):
        raise MalformedResponse(f"{op} answered {dict(result)}") from None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _kvs(kvs: Any) -> List[KeyValue]:
    if not isinstance(kvs, list):
        raise TypeError("kvs is an array")
    return [KeyValue.from_wire(kv) for kv in kvs]


def _maybe_kv(kv: Any) -> Optional[KeyValue]:
    return None if kv is None else KeyValue.from_wire(kv)
