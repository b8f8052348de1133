"""Fixtures: real ``hivekeeper serve`` processes on free loopback ports, killed at the end.

The binary: ``$HIVEKEEPER_BIN`` (the Rust test ``tests/python_client.rs`` sets it to the one
cargo built), else the newest of the workspace's ``target/debug/hivekeeper`` and
``target/release/hivekeeper``, else ``cargo build --bin hivekeeper`` builds it. No mock of the
service anywhere.

Every wait is bounded; a node that fails to start fails the test with the tail of its log.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, TypeVar

import pytest

import hivekeeper

#: The workspace root: clients/python/tests/ is three levels below it.
WORKSPACE = Path(__file__).resolve().parents[3]
#: How long a node may take to print "hivekeeper ready" (a debug build on a busy machine).
READY_S = 60.0
#: How often a start on ports taken meanwhile is retried.
START_ATTEMPTS = 5

T = TypeVar("T")
W = TypeVar("W")


def hivekeeper_binary() -> Path:
    """The ``hivekeeper`` binary to test (see the module doc)."""
    explicit = os.environ.get("HIVEKEEPER_BIN")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            pytest.fail(f"HIVEKEEPER_BIN={explicit} is not a file")
        return path
    built = [WORKSPACE / "target" / profile / "hivekeeper" for profile in ("debug", "release")]
    existing = [path for path in built if path.is_file()]
    if existing:
        return max(existing, key=lambda path: path.stat().st_mtime)
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.fail(
            "no hivekeeper binary: set HIVEKEEPER_BIN, or install Rust and run "
            "`cargo build --bin hivekeeper` in the workspace"
        )
    subprocess.run([cargo, "build", "--bin", "hivekeeper"], cwd=WORKSPACE, check=True)
    return built[0]


def free_ports(n: int) -> List[int]:
    """``n`` distinct ports the OS had free, every listener held until all are picked."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def eventually(what: str, check: Callable[[], Optional[T]], within_s: float = 20.0) -> T:
    """Polls ``check`` until it returns something other than ``None``; fails after
    ``within_s`` seconds saying what it waited for."""
    deadline = time.monotonic() + within_s
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"not within {within_s} s: {what}")
        time.sleep(0.05)


class Node:
    """A running ``hivekeeper serve``, SIGKILLed by :meth:`kill`."""

    def __init__(self, binary: Path, data_dir: Path, extra_args: List[str]) -> None:
        #: The binary it runs.
        self.binary = binary
        #: Its data dir (the caller's; kept across restarts).
        self.data_dir = data_dir
        #: More ``serve`` arguments.
        self.extra_args = extra_args
        #: The agent endpoint's port.
        self.mqtt_port = 0
        #: The /metrics port.
        self.metrics_port = 0
        #: The process, while it runs.
        self.process: Optional[subprocess.Popen] = None
        #: Everything it printed, collected by a reader thread.
        self.lines: List[str] = []

    @property
    def broker(self) -> str:
        """``127.0.0.1:port`` of its agent endpoint."""
        return f"127.0.0.1:{self.mqtt_port}"

    def start(self) -> "Node":
        """Starts it on free ports; ports taken meanwhile are replaced, a bounded number of
        times."""
        last = ""
        for _ in range(START_ATTEMPTS):
            self.mqtt_port, self.metrics_port = free_ports(2)
            outcome = self._spawn()
            if outcome is None:
                return self
            if "address already in use" not in outcome.lower():
                pytest.fail(f"hivekeeper serve did not start:\n{outcome}")
            last = outcome
        pytest.fail(f"hivekeeper serve found its ports taken {START_ATTEMPTS} times:\n{last}")

    def _spawn(self) -> Optional[str]:
        """Runs the process until it is ready (``None``) or has exited (its log tail)."""
        self.lines = []
        env = dict(os.environ, NO_COLOR="1")
        env.pop("RUST_LOG", None)
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "serve",
                "--data-dir",
                str(self.data_dir),
                "--mqtt-listen",
                self.broker,
                "--metrics-listen",
                f"127.0.0.1:{self.metrics_port}",
                *self.extra_args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            errors="replace",
        )
        process = self.process
        lines = self.lines
        threading.Thread(
            target=lambda: [lines.append(line) for line in process.stdout or []], daemon=True
        ).start()
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if any("hivekeeper ready" in line for line in list(lines)):
                return None
            if process.poll() is not None:
                time.sleep(0.1)
                self.process = None
                return self.tail()
            time.sleep(0.02)
        self.kill()
        return f"not ready within {READY_S} s:\n{self.tail()}"

    def tail(self, n: int = 40) -> str:
        """The last ``n`` lines it printed."""
        return "".join(self.lines[-n:])

    def signal(self, sig: int) -> None:
        """Sends ``sig`` (SIGSTOP, SIGCONT, ...) to the running process."""
        assert self.process is not None, "the node is not running"
        self.process.send_signal(sig)

    def kill(self) -> None:
        """``kill -9``: no shutdown."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def metric(self, name: str) -> Optional[float]:
        """The value of an unlabelled metric, or ``None`` (not served, or absent)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2
            ) as response:
                text = response.read().decode()
        except OSError:
            return None
        match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else None


@pytest.fixture(scope="session")
def binary() -> Path:
    """The ``hivekeeper`` binary under test."""
    return hivekeeper_binary()


@pytest.fixture
def start_node(binary: Path, tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Starts nodes of the test's own (``start_node("--auth")``), all killed at its end."""
    nodes: List[Node] = []

    def start(*extra_args: str) -> Node:
        node = Node(binary, tmp_path / f"node-{len(nodes)}", list(extra_args))
        nodes.append(node)
        return node.start()

    yield start
    for node in nodes:
        node.kill()


@pytest.fixture(scope="session")
def node(binary: Path) -> Iterator[Node]:
    """One single-node service shared by the tests that only need a service (each test uses
    resource names of its own, see ``names``)."""
    root = Path(tempfile.mkdtemp(prefix="hk-pytest-"))
    started = Node(binary, root / "data", []).start()
    yield started
    started.kill()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Resource names and agent ids unique to the test: ``names("pad")``."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:40]

    def name(suffix: str) -> str:
        return f"{stem}.{suffix}"

    return name


#: Test-sized patience: answers come within milliseconds on loopback.
FAST: Dict[str, int] = {
    "request_timeout_ms": 1_000,
    "request_deadline_ms": 20_000,
    "wait_resend_ms": 2_000,
    "backoff_first_ms": 20,
    "backoff_cap_ms": 500,
}


@pytest.fixture
def agents(node: Node, names: Callable[[str], str]) -> Iterator[Callable[..., hivekeeper.Agent]]:
    """Agents on the shared node, ``agents("a")``, closed at the end of the test."""
    made: List[hivekeeper.Agent] = []

    def make(suffix: str, **settings: object) -> hivekeeper.Agent:
        agent = hivekeeper.Agent(names(suffix), [node.broker], **{**FAST, **settings})
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


def wait_for_waiters(agent: hivekeeper.Agent, kind: str, name: str, count: int) -> None:
    """Waits until ``count`` agents wait for ``kind`` ``name`` (so the next one queues behind)."""
    eventually(
        f"{count} waiter(s) on {kind} {name}",
        lambda: True if len(agent.inspect(kind, name).waiters) >= count else None,
    )


def python_child(script: str, *args: str) -> subprocess.Popen:
    """A Python child process running ``script`` with this interpreter (the installed
    package, nothing else), its stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-u", "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill9(process: subprocess.Popen) -> None:
    """SIGKILL: no cleanup, no revoke, the socket just closes."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


class Proxy:
    """A TCP proxy on loopback in front of a node, whose connections :meth:`cut` drops: what
    an agent sees when its network fails for a moment (the node lives on)."""

    def __init__(self, target_port: int) -> None:
        #: Where it forwards to.
        self.target_port = target_port
        #: The listening socket, on a free port.
        self.listener = socket.create_server(("127.0.0.1", 0))
        #: Both sockets of every connection it carries, for :meth:`cut`.
        self.sockets: List[socket.socket] = []
        #: Every byte the clients sent, over all connections: the requests as published.
        self.sent = bytearray()
        #: Guards ``sockets`` and ``sent``.
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def broker(self) -> str:
        """``127.0.0.1:port`` to give an agent."""
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink, record in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, record), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if record:
                    with self.lock:
                        self.sent += data
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Drops every connection it carries now; new ones are accepted as before."""
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture
def proxy(node: Node) -> Iterator[Proxy]:
    """A :class:`Proxy` in front of the shared node."""
    started = Proxy(node.mqtt_port)
    yield started
    started.close()


def bounded(watch: W, within_s: float = 30.0) -> W:
    """Closes ``watch`` after ``within_s`` seconds, so that a test waiting for an event that
    never comes fails (``StopIteration``) instead of hanging."""
    timer = threading.Timer(within_s, watch.close)  # type: ignore[attr-defined]
    timer.daemon = True
    timer.start()
    return watch
