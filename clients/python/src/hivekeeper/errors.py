"""Every exception the client raises, one class per protocol error code.

The service's refusals arrive as a :class:`ServiceError` subclass named after the protocol's
code (docs/PROTOCOL.md section 9), carrying ``code`` and the server's ``message``:
``would_block`` is :class:`WouldBlock`, ``lease_not_found`` is :class:`LeaseNotFound`, and so
on. A code this client does not know yet is a plain :class:`ServiceError` with that ``code``
(the protocol says to treat it as a failure of the request).

``unavailable`` and ``rate_limited`` normally never reach the application: like the Rust SDK,
the client resends the same request id after a jittered backoff until the request's deadline.
They are raised only by the deadline's last answer.

The client's own failures are not service codes: :class:`ConfigError` (nothing was sent),
:class:`CredentialsRefused` (a broker's CONNACK refused the credentials: final, at once),
:class:`Unreachable` (no broker accepted the connection), :class:`Disconnected` and
:class:`NoResponse` (a request's deadline passed without or with a connection),
:class:`SessionLost` (the session is no longer live), :class:`AlreadyHeld` and
:class:`MalformedResponse`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class HivekeeperError(Exception):
    """The base of every exception this package raises."""


class ConfigError(HivekeeperError, ValueError):
    """The configuration or an argument (such as a TTL) is unusable; nothing was sent."""


class Unreachable(HivekeeperError):
    """No broker of the list accepted the agent's connection within the wait."""

    def __init__(self, brokers: str, waited_ms: int, last_error: Optional[str]) -> None:
        why = f" (last error: {last_error})" if last_error else ""
        super().__init__(f"no broker of {brokers} accepted a connection within {waited_ms} ms{why}")
        #: The broker list, as configured.
        self.brokers = brokers
        #: How long the agent tried.
        self.waited_ms = waited_ms
        #: What the last connection attempt failed with, for a human.
        self.last_error = last_error


class CredentialsRefused(HivekeeperError):
    """A broker refused the agent's CONNECT for its credentials: its CONNACK said "bad username
    or password" (no such account, a wrong secret, or none given to a service with
    authentication on) or "not authorized" (with mutual TLS, a client id other than the
    certificate's CN).

    Final: raised as soon as the CONNACK arrives, not after ``request_deadline_ms``, since the
    same credentials would be refused again.
    """

    def __init__(self, broker: str, reason: str) -> None:
        super().__init__(f"credentials refused by {broker}: {reason}")
        #: The broker that refused, ``host:port``.
        self.broker = broker
        #: The refusal: ``"bad username or password"`` or ``"not authorized"``.
        self.reason = reason


class Disconnected(HivekeeperError):
    """A request's deadline passed while the agent had no connection (or it was closed)."""


class NoResponse(HivekeeperError):
    """A request's deadline passed while connected, without a final response.

    The service is slow, down behind a live broker, or the responses are lost. This is not the
    protocol's ``timeout`` code (an acquire's ``wait_ms`` ran out): that is :class:`Timeout`.
    """

    def __init__(self, op: str, waited_ms: int) -> None:
        super().__init__(f"{op}: no response within {waited_ms} ms")
        #: The op that went unanswered.
        self.op = op
        #: How long the client kept resending it.
        self.waited_ms = waited_ms


class SessionLost(HivekeeperError):
    """The session is not live: in jeopardy, expired or revoked.

    Whatever was done under its guards must stop. ``state`` says which (a
    :class:`hivekeeper.SessionState`).
    """

    def __init__(self, state: object) -> None:
        super().__init__(f"the session is lost ({state})")
        #: The session's state when the call gave up.
        self.state = state


class AlreadyHeld(HivekeeperError):
    """This session already holds the resource or is acquiring it.

    Refused locally: the service would answer with the existing token, and two guards sharing
    one hold would release it under each other.
    """

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"this session already holds or is acquiring {kind} {name!r}")
        #: ``"lock"``, ``"sem"`` or ``"waypoint"``.
        self.kind = kind
        #: The resource's name.
        self.name = name


class MalformedResponse(HivekeeperError):
    """A response lacked what its op promises (a grant without ``token``): a version mismatch."""


class ServiceError(HivekeeperError):
    """A refusal by the service: the protocol's error ``code`` and the server's ``message``."""

    #: The protocol code this class stands for; ``None`` only on the base class.
    CODE: Optional[str] = None

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        #: The protocol's machine-readable reason, e.g. ``"not_holder"``.
        self.code = code
        #: The service's explanation, for a human; its wording is not part of the protocol.
        self.message = message


class BadRequest(ServiceError):
    """``bad_request``: a field is missing, of the wrong type, out of range or unknown."""

    CODE = "bad_request"


class UnknownOp(ServiceError):
    """``unknown_op``: the op names no operation of the protocol."""

    CODE = "unknown_op"


class TooLarge(ServiceError):
    """``too_large``: the request is over 8192 bytes (raised locally, before sending)."""

    CODE = "too_large"


class LeaseNotFound(ServiceError):
    """``lease_not_found``: the lease expired, was revoked, or never existed."""

    CODE = "lease_not_found"


class NotHolder(ServiceError):
    """``not_holder``: a release named a resource the lease does not hold."""

    CODE = "not_holder"


class WouldBlock(ServiceError):
    """``would_block``: a try-acquire (``wait_ms=0``) found the resource taken."""

    CODE = "would_block"


class Timeout(ServiceError):
    """``timeout``: an acquire's ``wait_ms`` ran out before the grant; nothing is held."""

    CODE = "timeout"


class LimitMismatch(ServiceError):
    """``limit_mismatch``: a semaphore was asked for with another ``limit`` than it has."""

    CODE = "limit_mismatch"


class Unavailable(ServiceError):
    """``unavailable``: no leader or a minority; nothing was done (retried until the deadline)."""

    CODE = "unavailable"


class Forbidden(ServiceError):
    """``forbidden``: another agent's lease, or the agent's role may not send this op."""

    CODE = "forbidden"


class ResourceExhausted(ServiceError):
    """``resource_exhausted``: a bound of the service is reached; retry later."""

    CODE = "resource_exhausted"


class RateLimited(ServiceError):
    """``rate_limited``: over the agent's request rate (retried until the deadline)."""

    CODE = "rate_limited"


class Compacted(ServiceError):
    """``compacted``: a ``watch.poll`` asked for events after a revision the service no
    longer keeps. Re-read with ``kv.get`` and watch again from that read's ``revision``
    (:class:`~hivekeeper.KvCache` does both)."""

    CODE = "compacted"

    def __init__(self, code: str, message: str, compact_revision: Optional[int] = None) -> None:
        super().__init__(code, message)
        #: The oldest revision the service still has events after; ``None`` if the error
        #: object lacked it.
        self.compact_revision = compact_revision


_BY_CODE: Dict[str, Type[ServiceError]] = {
    cls.CODE: cls
    for cls in (
        BadRequest,
        UnknownOp,
        TooLarge,
        LeaseNotFound,
        NotHolder,
        WouldBlock,
        Timeout,
        LimitMismatch,
        Unavailable,
        Forbidden,
        ResourceExhausted,
        RateLimited,
        Compacted,
    )
    if cls.CODE is not None
}


def service_error(
    code: str, message: str, details: Optional[Mapping[str, Any]] = None
) -> ServiceError:
    """The exception for a failure response: the one place that maps codes to classes.
    ``details`` is the whole error object, for the codes that carry more than a message
    (``compacted`` carries ``compact_revision``)."""
    if code == Compacted.CODE:
        revision = (details or {}).get("compact_revision")
        valid = isinstance(revision, int) and not isinstance(revision, bool)
        return Compacted(code, message, revision if valid else None)
    cls = _BY_CODE.get(code, ServiceError)
    return cls(code, message)
