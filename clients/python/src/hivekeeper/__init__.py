"""hivekeeper: the Python agent client of Hivekeeper.

A drone, a sensor or a service takes FIFO locks (exclusive or shared, one or several at once),
counting-semaphore permits, waypoint reservations and whole routes (4D volumes with time
windows and priorities), and shares keys and follows their changes, from a Hivekeeper service
over MQTT. A :class:`Session` is a lease the client keeps alive in the background; each grant
is a :class:`Guard` carrying its fencing token; ``agent.kv`` (or ``session.kv``, for keys that
go with the lease) reads and writes keys, watches a prefix and keeps a :class:`KvCache`;
``session.campaign`` wins a :class:`Leadership` of an election (``agent.observe`` follows its
leaders) and ``session.barrier`` lines agents up in a double :class:`Barrier`. The client
retries safely (a resend reuses the request id, which the service deduplicates), backs off with
full jitter, fails over between brokers, and gives up on a lease *before* the service could
hand its resources to someone else. The same semantics as the Rust SDK (``agent-sdk/``); the
wire protocol is docs/PROTOCOL.md.

::

    import hivekeeper
    with hivekeeper.Agent("drone-7", brokers=["127.0.0.1:1883"]) as agent:
        with agent.session(ttl_ms=5000) as s:
            with s.lock("pad-3", wait_ms=2000) as g:
                land(fencing_token=g.token)

For asyncio, ``hivekeeper.aio`` has the same ``Agent``, ``Session``, ``Guard``,
``Leadership``, ``Barrier`` and ``Observer`` with ``await``, on the same protocol core.

Layout: ``config`` (AgentConfig, DEFAULTS), ``request_loop`` (a request's phases, no I/O),
``agent`` (AgentBase, shared; Agent, threaded), ``connection`` (the paho-mqtt thread: failover,
routing), ``session`` (SessionBase: the deadline, jeopardy and keepalive cadence; Session, the
keeper thread), ``guard_events`` (the events a session hands to its guards), ``locks`` (the
lock, read-write lock, multi-lock and semaphore calls both sessions share), ``reservations``
(their waypoint and route calls), ``guard`` (Guard),
``aio`` (the asyncio Agent, Session and Guard), ``aio_kv`` (their keys),
``ask`` (what an acquire asks for), ``kv`` (keys: typed results, txn helpers, Kv),
``watch`` (the long-poll cursor, Watch), ``kv_cache`` (KvCache), ``election`` (Leadership,
Leader, Observer and the LeaderFollower that decides them), ``barrier`` (Barrier),
``aio_recipes`` (their asyncio twins), ``backoff`` (full jitter),
``protocol`` (wire encoding, typed results), ``airspace`` (volumes, airspace.query pages
and the call both agents share, preemption notices), ``errors`` (one exception per protocol code).
"""

from .agent import Agent
from .airspace import (
    PRIORITY_EMERGENCY,
    PRIORITY_ROUTINE,
    AirspacePage,
    Area,
    Conflict,
    Preempted,
    Volume,
)
from .backoff import Backoff
from .barrier import Barrier
from .config import DEFAULTS, AgentConfig, BrokerAddr
from .connection import Counters
from .election import Leader, Leadership, Observer
from .errors import (
    AlreadyHeld,
    BadRequest,
    Compacted,
    ConfigError,
    CredentialsRefused,
    Disconnected,
    Forbidden,
    HivekeeperError,
    LeaseNotFound,
    LimitMismatch,
    MalformedResponse,
    NoResponse,
    NotHolder,
    RateLimited,
    ResourceExhausted,
    ServiceError,
    SessionLost,
    Timeout,
    TooLarge,
    Unavailable,
    UnknownOp,
    Unreachable,
    WouldBlock,
)
from .guard import END_LEASE, END_MAX_HOLD, Guard
from .kv import (
    Compare,
    DeleteResult,
    GetResult,
    KeyValue,
    Kv,
    Op,
    PutResult,
    TxnOpResult,
    TxnResult,
)
from .kv_cache import KvCache
from .protocol import FenceCheck, Holder, Inspection, Waiter
from .session import Session, SessionState
from .watch import Watch, WatchEvent, WatchPage

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentConfig",
    "AirspacePage",
    "AlreadyHeld",
    "Area",
    "Backoff",
    "BadRequest",
    "Barrier",
    "BrokerAddr",
    "Compacted",
    "Compare",
    "ConfigError",
    "Conflict",
    "Counters",
    "CredentialsRefused",
    "DEFAULTS",
    "DeleteResult",
    "Disconnected",
    "END_LEASE",
    "END_MAX_HOLD",
    "FenceCheck",
    "Forbidden",
    "GetResult",
    "Guard",
    "HivekeeperError",
    "Holder",
    "Inspection",
    "KeyValue",
    "Kv",
    "KvCache",
    "LeaseNotFound",
    "Leader",
    "Leadership",
    "LimitMismatch",
    "MalformedResponse",
    "NoResponse",
    "NotHolder",
    "Observer",
    "Op",
    "PRIORITY_EMERGENCY",
    "PRIORITY_ROUTINE",
    "Preempted",
    "PutResult",
    "RateLimited",
    "ResourceExhausted",
    "ServiceError",
    "Session",
    "SessionLost",
    "SessionState",
    "Timeout",
    "TooLarge",
    "TxnOpResult",
    "TxnResult",
    "Unavailable",
    "UnknownOp",
    "Unreachable",
    "Volume",
    "Waiter",
    "Watch",
    "WatchEvent",
    "WatchPage",
    "WouldBlock",
]
