"""Agent configuration: one :class:`AgentConfig`, its defaults in one :data:`DEFAULTS`, the
cross-field rules in :meth:`AgentConfig.validate`.

The names and defaults are the Rust SDK's (``agent-sdk/src/config.rs``), so a setting means the
same thing in both clients. Every duration carries its unit in its name.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from .errors import ConfigError

#: An agent id: the last segment of its topics and its MQTT client id (PROTOCOL.md section 1).
AGENT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class Defaults:
    """The default value of every :class:`AgentConfig` field, in one place."""

    #: The agent endpoint of ``hivekeeper serve`` with no flags.
    broker: str = "127.0.0.1:1883"
    #: See :attr:`AgentConfig.topic_prefix`.
    topic_prefix: str = "hk/v1"
    #: See :attr:`AgentConfig.request_timeout_ms`.
    request_timeout_ms: int = 2_000
    #: See :attr:`AgentConfig.request_deadline_ms`.
    request_deadline_ms: int = 30_000
    #: See :attr:`AgentConfig.wait_resend_ms`.
    wait_resend_ms: int = 10_000
    #: See :attr:`AgentConfig.backoff_first_ms`.
    backoff_first_ms: int = 30
    #: See :attr:`AgentConfig.backoff_cap_ms`.
    backoff_cap_ms: int = 2_000
    #: See :attr:`AgentConfig.keepalive_margin_ms`.
    keepalive_margin_ms: int = 200
    #: See :attr:`AgentConfig.mqtt_keepalive_s`.
    mqtt_keepalive_s: int = 5
    #: See :attr:`AgentConfig.connect_timeout_s`.
    connect_timeout_s: int = 5


#: The defaults, the same as the Rust SDK's ``DEFAULTS``.
DEFAULTS = Defaults()


@dataclass
class AgentConfig:
    """How an agent reaches the service and how patient it is.

    ``agent_id`` has no default: two agents sharing an id would take each other's MQTT
    connection (the id is also the MQTT client id), so it must be chosen.
    """

    #: ``[A-Za-z0-9_.-]{1,64}``: the last segment of the agent's topics, its MQTT client id,
    #: and the owner the service binds every lease to. Unique among live agents.
    agent_id: str
    #: Brokers to try in order, ``host:port`` or ``mqtt://host:port``; at least one. On every
    #: connection error the agent moves to the next (every member of a cluster serves every
    #: agent, so any will do).
    brokers: List[str] = field(default_factory=lambda: [DEFAULTS.broker])
    #: Topic prefix shared with the service.
    topic_prefix: str = DEFAULTS.topic_prefix
    #: How long one attempt of a request waits for its response before the SAME request id is
    #: sent again; the service answers a retry with the first outcome.
    request_timeout_ms: int = DEFAULTS.request_timeout_ms
    #: How long a request is retried in all before :class:`~hivekeeper.NoResponse` (or
    #: :class:`~hivekeeper.Disconnected`). An acquire with ``wait_ms`` adds it to this; one
    #: without ``wait_ms`` has no deadline (it waits while its session is live).
    request_deadline_ms: int = DEFAULTS.request_deadline_ms
    #: While an acquire waits in the service's queue, its id is resent this often, which
    #: recovers a grant whose response was lost (a resend takes no second queue slot).
    wait_resend_ms: int = DEFAULTS.wait_resend_ms
    #: Upper bound of the first backoff delay; each later bound doubles up to
    #: :attr:`backoff_cap_ms`. Each delay is drawn uniformly below its bound (full jitter).
    backoff_first_ms: int = DEFAULTS.backoff_first_ms
    #: Largest backoff delay.
    backoff_cap_ms: int = DEFAULTS.backoff_cap_ms
    #: How much earlier than the lease's TTL the client gives up (DESIGN.md section 5.3): the
    #: session is in jeopardy once send time of the last acknowledged keepalive + TTL - margin
    #: has passed on the local monotonic clock.
    keepalive_margin_ms: int = DEFAULTS.keepalive_margin_ms
    #: How often a session sends a lease keepalive; ``None``: every third of its TTL.
    keepalive_every_ms: Optional[int] = None
    #: MQTT keepalive (PINGREQ interval), seconds: a silent broker is noticed after about
    #: 1.5 times this and the agent fails over.
    mqtt_keepalive_s: int = DEFAULTS.mqtt_keepalive_s
    #: How long one TCP connect plus TLS handshake may take, seconds, before the next broker.
    connect_timeout_s: int = DEFAULTS.connect_timeout_s
    #: The agent's secret for a service with authentication on (``hivekeeper agent add``
    #: prints it): the MQTT password, with the agent id as the username. ``None``: anonymous.
    secret: Optional[str] = field(default=None, repr=False)
    #: PEM CA certificate(s) the brokers' certificates must chain to; set, every broker is
    #: reached over TLS and its certificate must name the host as written in :attr:`brokers`.
    tls_ca: Optional[str] = None
    #: PEM client certificate for mutual TLS (with :attr:`tls_key` and :attr:`tls_ca`); the
    #: agent endpoint takes its CN as the agent's identity, so it must equal the agent id.
    tls_cert: Optional[str] = None
    #: PEM private key of :attr:`tls_cert`.
    tls_key: Optional[str] = None

    def validate(self) -> None:
        """Checks every field and the rules between them; raises :class:`ConfigError`.

        :class:`~hivekeeper.Agent` calls it, so a bad configuration fails at once rather than
        as a strange timeout later.
        """
        if not isinstance(self.agent_id, str) or not AGENT_ID.fullmatch(self.agent_id):
            raise ConfigError(
                f"agent_id: {self.agent_id!r} must be 1 to 64 characters of [A-Za-z0-9_.-]"
            )
        if isinstance(self.brokers, str) or not self.brokers:
            raise ConfigError("brokers: a list of at least one host:port is needed")
        for broker in self.brokers:
            BrokerAddr.parse(broker)
        check_topic_prefix(self.topic_prefix)
        for name in (
            "request_timeout_ms",
            "request_deadline_ms",
            "wait_resend_ms",
            "backoff_first_ms",
            "backoff_cap_ms",
            "keepalive_margin_ms",
            "mqtt_keepalive_s",
            "connect_timeout_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
        if self.request_deadline_ms < self.request_timeout_ms:
            raise ConfigError(
                f"request_deadline_ms ({self.request_deadline_ms}) must be at least "
                f"request_timeout_ms ({self.request_timeout_ms}): a request must get at least "
                "one full attempt"
            )
        if self.wait_resend_ms < self.request_timeout_ms:
            raise ConfigError(
                f"wait_resend_ms ({self.wait_resend_ms}) must be at least request_timeout_ms "
                f"({self.request_timeout_ms}): a waiting acquire is never resent more often "
                "than an ordinary request"
            )
        if self.backoff_first_ms > self.backoff_cap_ms:
            raise ConfigError(
                f"backoff_first_ms ({self.backoff_first_ms}) must be in "
                f"[1, backoff_cap_ms = {self.backoff_cap_ms}]"
            )
        every = self.keepalive_every_ms
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every <= 0
        ):
            raise ConfigError(
                f"keepalive_every_ms must be a positive integer (or None: TTL / 3), not {every!r}"
            )
        if self.secret is not None and self.secret == "":
            raise ConfigError("secret: empty (leave it out for a service without authentication)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError(
                "tls_cert and tls_key go together: a client certificate needs its key"
            )
        if self.tls_cert is not None and self.tls_ca is None:
            raise ConfigError("tls_cert needs tls_ca: a client certificate is only sent over TLS")

    def replace(self, **changes: object) -> "AgentConfig":
        """A copy with ``changes`` applied (unknown names raise :class:`ConfigError`)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {', '.join(unknown)}; "
                f"the settings are {', '.join(sorted(known))}"
            )
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class BrokerAddr:
    """A broker's host and port, from ``host:port``, ``mqtt://host:port`` or ``[v6]:port``."""

    #: Host name or IP address (IPv6 without brackets).
    host: str
    #: TCP port.
    port: int

    @staticmethod
    def parse(text: str) -> "BrokerAddr":
        """Parses one entry of :attr:`AgentConfig.brokers`.

        URL schemes other than ``mqtt://`` and ``tcp://`` are refused: TLS is chosen by
        :attr:`AgentConfig.tls_ca`, not by the address.
        """
        if not isinstance(text, str):
            raise ConfigError(f"broker {text!r}: expected a host:port string")

        def bad(why: str) -> ConfigError:
            return ConfigError(f"broker {text!r}: {why}")

        rest = text
        if "://" in text:
            scheme, rest = text.split("://", 1)
            if scheme not in ("mqtt", "tcp"):
                raise bad(f"scheme {scheme!r} is not supported; use host:port or mqtt://host:port")
        if rest.endswith("/"):
            rest = rest[:-1]
        host, sep, port = rest.rpartition(":")
        if not sep:
            raise bad("expected host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host or "/" in host or " " in host:
            raise bad("the host is empty or contains '/' or a space")
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise bad("the port must be a number from 1 to 65535")
        return BrokerAddr(host, int(port))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def check_topic_prefix(prefix: str) -> None:
    """Refuses a prefix the service would never use (PROTOCOL.md section 1)."""
    if not isinstance(prefix, str):
        raise ConfigError(f"topic_prefix: {prefix!r} is not a string")
    trimmed = prefix.rstrip("/")
    if not trimmed or any(level == "" for level in trimmed.split("/")):
        raise ConfigError(f"topic_prefix: {prefix!r} is empty or has an empty level")
    if any(c in trimmed for c in "+#\x00"):
        raise ConfigError(f"topic_prefix: {prefix!r} contains an MQTT wildcard or NUL")


def config_from(
    agent_id: str, brokers: Optional[Sequence[str]], settings: Dict[str, Any]
) -> AgentConfig:
    """The :class:`AgentConfig` of an ``Agent(agent_id, brokers, **settings)`` call, validated."""
    base = AgentConfig(agent_id=agent_id)
    if brokers is not None:
        if isinstance(brokers, str):
            raise ConfigError("brokers: a list of host:port strings, not one string")
        base.brokers = list(brokers)
    config = base.replace(**settings)
    config.validate()
    return config
