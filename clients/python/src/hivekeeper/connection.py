"""The connection thread: one paho-mqtt client per connection, failover along the broker
list with jittered backoff, and the routing of what arrives.

::

    brokers ─▶ new paho Client ─▶ connect() ─▶ loop_forever() ─┬─ CONNACK ok ─▶ SUBSCRIBE rsp+evt
       ▲                                                       ├─ SUBACK ok  ─▶ ready, epoch + 1
       │ next broker,                                          ├─ rsp/{agent} ─▶ pending[id]
       │ jittered backoff                                      ├─ evt/{agent} ─▶ event handlers
       └────────── connect error, CONNACK/SUBACK refused, loss ┘  (unknown id, undecodable: counted)

A fresh paho ``Client`` per connection (``reconnect_on_failure=False``): paho would reconnect
to the same host, with a backoff of its own that has no jitter, and it would replay its own
queue of unacknowledged publishes on the new connection. The client resends by request id
itself (the service deduplicates), so nothing of an old connection is worth keeping.

Everything the request side waits on (the pending map, the link) is guarded by ONE condition,
:attr:`Shared.cond`, notified on every change (:meth:`Shared.notify`, which also wakes the
event loop of a ``hivekeeper.aio`` agent). paho is never called while it is held: paho
calls our callbacks under its own locks, so holding ours while calling paho could deadlock.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from .backoff import Backoff
from .config import AgentConfig, BrokerAddr
from .errors import CredentialsRefused, HivekeeperError
from .protocol import Response, Topics, decode_event, decode_response

log = logging.getLogger("hivekeeper")

#: How long a broker may keep answering ``unavailable`` before the agent leaves it for the next
#: one (as the Rust SDK): longer than an election takes to settle (a node waits for the new
#: leader before it answers at all), short enough that a client of a member cut off from the
#: majority moves before its session's keepalives run out.
UNAVAILABLE_FAILOVER_S = 0.25

#: The CONNACK reason codes (as paho reports them, MQTT 5 values for 3.1.1's 4 and 5) that
#: refuse the credentials, with the words :class:`~hivekeeper.CredentialsRefused` uses.
CREDENTIALS_REFUSALS = {134: "bad username or password", 135: "not authorized"}

#: paho's default of 20 unacknowledged QoS 1 publishes would queue a pipelining agent's
#: requests inside paho; a request is small, so allow many more in flight.
INFLIGHT_MAX = 1000


@dataclass
class Link:
    """The state of the MQTT link, watched by every request in flight."""

    #: Connected AND subscribed: a request published now can get its response.
    ready: bool = False
    #: Counts subscriptions made. A request remembers the epoch it was published under; a
    #: change means its response may have been lost with the old connection.
    epoch: int = 0
    #: Index in the broker list of the current (or last) broker.
    broker: int = 0


@dataclass
class Slot:
    """A caller's place in the pending map: where its response is put."""

    #: The response, once it arrived; the caller takes it out (and may re-arm the slot).
    response: Optional[Response] = None
    #: Called (on the connection thread, condition held) with a response that arrives after
    #: the caller gave up; set only for an abandoned acquire.
    on_late: Optional[Callable[[Response], None]] = None
    #: Who abandoned it (a session), so that its end stops the listening.
    owner: Optional[object] = None


@dataclass
class Counters:
    """Monotonic counters of what the connection and the requests did (see ``Agent.stats``)."""

    #: MQTT connections accepted (CONNACK), the first one included.
    connects_total: int = 0
    #: Connection attempts or connections that failed; each one moved to the next broker.
    connection_errors_total: int = 0
    #: Requests sent again under the same id.
    resends_total: int = 0
    #: Responses whose id no caller was waiting for (a duplicate, or after the caller gave up).
    responses_unknown_total: int = 0
    #: Payloads on the response topic that were not a response.
    responses_undecodable_total: int = 0
    #: Payloads on the event topic that were not an event.
    events_undecodable_total: int = 0
    #: Acquires whose caller stopped waiting; a grant that still arrives is released.
    requests_abandoned_total: int = 0


@dataclass
class Shared:
    """What the connection thread shares with the request side, under :attr:`cond`."""

    #: Guards every field below; notified on every change.
    cond: threading.Condition = field(default_factory=threading.Condition)
    #: Callers waiting for a response, by request id.
    pending: Dict[str, Slot] = field(default_factory=dict)
    #: The link state.
    link: Link = field(default_factory=Link)
    #: The paho client of the ready link, for publishing; ``None`` while not ready.
    client: Optional[mqtt.Client] = None
    #: Counters.
    counters: Counters = field(default_factory=Counters)
    #: Called with each decoded event, on the connection thread (they must not block).
    event_handlers: List[Callable[[Dict[str, Any]], None]] = field(default_factory=list)
    #: Set by ``Agent.close``: no more connections, every wait ends.
    closed: bool = False
    #: Why the last connection attempt failed, for :class:`~hivekeeper.Unreachable`.
    last_error: Optional[str] = None
    #: A refusal no retry can fix (a CONNACK refusing the credentials): connecting ends with
    #: it at once.
    refused: Optional[HivekeeperError] = None
    #: Called (condition held) on every change, besides waking the threads waiting on
    #: :attr:`cond`: how an asyncio loop learns of one (``hivekeeper.aio``). They must not block.
    watchers: List[Callable[[], None]] = field(default_factory=list)
    #: How many brokers the agent has (leaving one makes sense only with another to go to).
    brokers_total: int = 1
    #: Since when the link of this epoch has answered only ``unavailable``: ``(epoch, t)``.
    unavailable_since: Optional[Tuple[int, float]] = None

    def note_unavailable(self, epoch: int, now: float) -> Optional[mqtt.Client]:
        """A request sent under link ``epoch`` was answered ``unavailable``; call with
        :attr:`cond` held. Returns the paho client to disconnect (outside the condition) once
        that link has answered nothing else for :data:`UNAVAILABLE_FAILOVER_S`: a member cut
        off from the majority answers ``unavailable`` to everything, and stays connected."""
        since = self.unavailable_since
        if since is None or since[0] != epoch:
            self.unavailable_since = (epoch, now)
            return None
        if now - since[1] < UNAVAILABLE_FAILOVER_S or self.brokers_total < 2:
            return None
        self.unavailable_since = None
        if self.link.ready and self.link.epoch == epoch:
            return self.client
        return None

    def note_answered(self) -> None:
        """Any other answer: the link's node reaches a leader; call with :attr:`cond` held."""
        self.unavailable_since = None

    def notify(self) -> None:
        """Wakes every waiter, threads and event loops alike; call with :attr:`cond` held."""
        self.cond.notify_all()
        for watcher in self.watchers:
            watcher()


def tls_context(config: AgentConfig) -> Optional[ssl.SSLContext]:
    """The TLS context of :attr:`AgentConfig.tls_ca` (and the client certificate); ``None``
    without TLS. Reads the files now, so a missing one fails at ``Agent`` creation."""
    if config.tls_ca is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.tls_ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.tls_cert is not None:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


class Connection:
    """The connection thread's body; runs until :attr:`Shared.closed`."""

    def __init__(
        self,
        config: AgentConfig,
        brokers: List[BrokerAddr],
        topics: Topics,
        tls: Optional[ssl.SSLContext],
        shared: Shared,
    ) -> None:
        #: The validated configuration.
        self.config = config
        #: The parsed broker list, tried in order.
        self.brokers = brokers
        #: The agent's topics.
        self.topics = topics
        #: TLS to every broker, or ``None``.
        self.tls = tls
        #: State shared with the request side.
        self.shared = shared
        shared.brokers_total = len(brokers)
        #: Set by :meth:`stop`: wakes a backoff sleep at once.
        self.stopping = threading.Event()
        #: The paho client of the connection being made or served, for :meth:`stop`.
        self._current: Optional[mqtt.Client] = None

    def stop(self) -> None:
        """Ends the thread: no reconnect, and the current connection is closed."""
        with self.shared.cond:
            self.shared.closed = True
            client = self.shared.client
            self.shared.client = None
            self.shared.link.ready = False
            self.shared.notify()
        self.stopping.set()
        for c in (client, self._current):
            if c is not None:
                try:
                    c.disconnect()
                except Exception:  # noqa: BLE001 - a dying socket may refuse; we leave anyway
                    pass

    def run(self) -> None:
        """Connects, serves the connection until it fails, backs off, moves to the next."""
        backoff = Backoff(self.config.backoff_first_ms, self.config.backoff_cap_ms)
        index = 0
        while not self.stopping.is_set():
            broker = self.brokers[index]
            why = self._serve(broker, index, backoff)
            if self.stopping.is_set():
                return
            with self.shared.cond:
                self.shared.client = None
                self.shared.link.ready = False
                self.shared.counters.connection_errors_total += 1
                self.shared.last_error = f"{broker}: {why}"
                self.shared.notify()
            delay_s = backoff.next_delay_s()
            index = (index + 1) % len(self.brokers)
            log.warning(
                "connection to %s failed: %s; next %s in %.0f ms",
                broker,
                why,
                self.brokers[index],
                delay_s * 1000,
            )
            self.stopping.wait(delay_s)

    def _serve(self, broker: BrokerAddr, index: int, backoff: Backoff) -> str:
        """One connection, from CONNECT until it ends; returns why it ended."""
        failure: List[str] = []
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.config.agent_id,
            clean_session=True,
            protocol=mqtt.MQTTv311,
            reconnect_on_failure=False,
        )
        client.max_inflight_messages_set(INFLIGHT_MAX)
        client.connect_timeout = float(self.config.connect_timeout_s)
        if self.config.secret is not None:
            # Username = the agent id: the service checks it equals the client id.
            client.username_pw_set(self.config.agent_id, self.config.secret)
        if self.tls is not None:
            client.tls_set_context(self.tls)

        def on_connect(c: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
            if reason.is_failure:
                failure.append(f"CONNACK refused: {reason}")
                refusal = CREDENTIALS_REFUSALS.get(reason.value)
                if refusal is not None:
                    with self.shared.cond:
                        self.shared.refused = CredentialsRefused(str(broker), refusal)
                        self.shared.notify()
                c.disconnect()
                return
            with self.shared.cond:
                self.shared.counters.connects_total += 1
            log.info("connected to %s; subscribing", broker)
            # The session is clean and the endpoint keeps nothing: subscribe on every CONNACK.
            c.subscribe([(self.topics.response, 1), (self.topics.event, 1)])

        def on_subscribe(c: mqtt.Client, _u: Any, _mid: int, codes: Any, _p: Any) -> None:
            if any(code.is_failure for code in codes):
                failure.append("the broker refused the subscription")
                c.disconnect()
                return
            backoff.reset()
            with self.shared.cond:
                if self.shared.closed:
                    return
                self.shared.client = c
                self.shared.link.ready = True
                self.shared.link.epoch += 1
                self.shared.link.broker = index
                self.shared.last_error = None
                self.shared.notify()

        def on_message(_c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
            self._route(message.topic, bytes(message.payload))

        client.on_connect = on_connect
        client.on_subscribe = on_subscribe
        client.on_message = on_message
        self._current = client
        try:
            client.connect(broker.host, broker.port, keepalive=self.config.mqtt_keepalive_s)
        except Exception as error:  # noqa: BLE001 - socket, TLS and DNS errors alike
            return f"connect: {error}"
        sock = client.socket()
        if isinstance(sock, socket.socket):
            # Without it a request/response pair can wait ~40 ms for Nagle + delayed ACK
            # (DESIGN.md section 7); paho does not set it.
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if self.stopping.is_set():
            client.disconnect()
            return "closed"
        try:
            rc = client.loop_forever()
        except Exception as error:  # noqa: BLE001 - a broken socket mid-read
            return f"connection lost: {error}"
        finally:
            try:
                client.disconnect()
            except Exception:  # noqa: BLE001 - already closed
                pass
        if failure:
            return failure[0]
        return f"connection lost ({mqtt.error_string(rc)})"

    def _route(self, topic: str, payload: bytes) -> None:
        """Delivers a response to its caller or an event to the handlers. Never blocks."""
        decode: Callable[[bytes], Any]
        deliver: Callable[[Any], None]
        if topic == self.topics.response:
            decode, deliver = decode_response, self._deliver_response
            counter = "responses_undecodable_total"
        elif topic == self.topics.event:
            decode, deliver = decode_event, self._deliver_event
            counter = "events_undecodable_total"
        else:
            return
        try:
            decoded: Any = decode(payload)
        except ValueError as error:
            # Unknown events are to be ignored (PROTOCOL.md section 10), but counted.
            with self.shared.cond:
                counters = self.shared.counters
                setattr(counters, counter, getattr(counters, counter) + 1)
            log.debug("undecodable payload on %s dropped: %s", topic, error)
            return
        deliver(decoded)

    def _deliver_response(self, response: Response) -> None:
        shared = self.shared
        with shared.cond:
            slot = shared.pending.get(response.id) if response.id is not None else None
            if slot is None or (slot.on_late is None and slot.response is not None):
                shared.counters.responses_unknown_total += 1
                log.debug("response to no waiting request dropped: %s", response)
            elif slot.on_late is not None:
                del shared.pending[response.id]  # type: ignore[arg-type]
                slot.on_late(response)
            else:
                slot.response = response
                shared.notify()

    def _deliver_event(self, event: Dict[str, Any]) -> None:
        with self.shared.cond:
            handlers = list(self.shared.event_handlers)
        for handler in handlers:
            try:
                handler(event)
            except Exception:  # noqa: BLE001 - one bad handler must not stop the others
                log.exception("event handler failed")
