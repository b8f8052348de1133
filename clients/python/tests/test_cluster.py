"""Failover: an agent reconnects to the second member of a 3-member cluster when the first is
killed, and its session and hold survive."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

import hivekeeper
from conftest import FAST, Node, bounded, eventually, free_ports


@pytest.fixture
def cluster(binary: Path, tmp_path: Path):
    peers = free_ports(3)
    initial = ",".join(f"n{i + 1}=127.0.0.1:{port}" for i, port in enumerate(peers))
    nodes: List[Node] = []
    try:
        for i in range(3):
            name = f"n{i + 1}"
            args = ["--name", name, "--initial-cluster", initial]
            nodes.append(Node(binary, tmp_path / name, args).start())
        eventually(
            "one member leads",
            lambda: (
                True
                if sum(node.metric("hivekeeper_raft_is_leader") == 1.0 for node in nodes) == 1
                else None
            ),
            within_s=60,
        )
        yield nodes
    finally:
        for node in nodes:
            node.kill()


def test_reconnects_to_the_next_member_when_the_first_is_killed(cluster, names):
    brokers = [node.broker for node in cluster]
    with hivekeeper.Agent(names("drone"), brokers, **FAST) as agent:
        assert agent.broker == brokers[0]
        with agent.session(ttl_ms=15_000) as session:
            guard = session.lock(names("pad"))
            cluster[0].kill()
            moved = eventually(
                "the agent moves to another member",
                lambda: agent.broker if agent.broker not in (None, brokers[0]) else None,
                within_s=30,
            )
            assert moved == brokers[1], "the next broker of the list is tried first"
            # Requests work through the survivor (after an election if n1 led), the lease
            # lived on, and the hold with it.
            assert agent.fence_check(names("pad"), guard.token) == hivekeeper.FenceCheck(
                valid=True, current=guard.token
            )
            with session.lock(names("other"), wait_ms=0) as other:
                assert other.token > 0
            assert session.state is hivekeeper.SessionState.LIVE
            assert agent.stats().connection_errors_total >= 1
            assert agent.stats().connects_total >= 2
            guard.release()


def test_a_member_without_a_majority_answers_unavailable(cluster, names):
    cluster[0].kill()
    cluster[1].kill()
    with hivekeeper.Agent(
        names("drone"),
        [cluster[2].broker],
        request_timeout_ms=500,
        request_deadline_ms=4_000,
        backoff_first_ms=20,
        backoff_cap_ms=200,
    ) as agent:
        # Resent under the same id with backoff until the deadline, then raised.
        with pytest.raises(hivekeeper.Unavailable) as unavailable:
            agent.fence_check(names("pad"), 1)
        assert unavailable.value.code == "unavailable"
        assert agent.stats().resends_total >= 1


def test_a_watch_fails_over_to_another_member_and_misses_nothing(cluster, names):
    brokers = [node.broker for node in cluster]
    prefix = names("fleet") + "/"
    with (
        hivekeeper.Agent(names("watcher"), brokers, **FAST) as watcher,
        hivekeeper.Agent(names("writer"), brokers[::-1], **FAST) as writer,
    ):
        start = writer.kv.get_prefix(prefix).revision
        written = [writer.kv.put(f"{prefix}{i}", str(i)).revision for i in range(3)]
        seen: List[hivekeeper.WatchEvent] = []
        with bounded(watcher.kv.watch(prefix=prefix, after=start, wait_ms=1000)) as watch:
            seen += [next(watch) for _ in range(3)]
            assert watcher.broker == brokers[0]
            cluster[0].kill()
            written += [writer.kv.put(f"{prefix}{i}", str(i)).revision for i in range(3, 6)]
            seen += [next(watch) for _ in range(3)]
        assert watcher.broker != brokers[0]
        assert [e.revision for e in seen] == written
        assert [e.key for e in seen] == [f"{prefix}{i}" for i in range(6)]
