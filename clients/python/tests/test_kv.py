"""Keys against a real node: each kv op, its typed result and its errors, leased keys that go
with their session, a counter by txn, and watches (events in order, bookmarks, resuming from a
cursor and across a cut connection, KvCache, asyncio)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List

import pytest

import hivekeeper
import hivekeeper.aio
from conftest import FAST, bounded, eventually
from hivekeeper import Compare, Op


def test_put_get_delete_answer_typed_results_with_revisions(agents, names):
    kv = agents("a").kv
    key = names("config")
    first = kv.put(key, "rate=2")
    assert isinstance(first, hivekeeper.PutResult) and first.revision > 0 and first.prev_kv is None
    second = kv.put(key, "rate=5", prev_kv=True)
    assert second.revision > first.revision
    assert second.prev_kv is not None and second.prev_kv.value == "rate=2"
    assert second.prev_kv.version == 1

    read = kv.get(key)
    assert read.revision >= second.revision
    assert read.kv == hivekeeper.KeyValue(key, "rate=5", first.revision, second.revision, 2)
    assert read.value == "rate=5"
    assert kv.get(key, serializable=True).value == "rate=5"

    gone = kv.delete(key)
    assert gone == hivekeeper.DeleteResult(gone.revision, 1) and gone.revision > second.revision
    assert kv.get(key).kv is None and kv.get(key).value is None
    assert kv.delete(key).deleted == 0


def test_get_prefix_pages_in_byte_order_and_delete_prefix(agents, names):
    kv = agents("a").kv
    prefix = names("jobs") + "/"
    for i in (3, 1, 4, 0, 2):
        kv.put(f"{prefix}{i}", f"job {i}")
    kv.put(names("jobsx"), "not under the prefix")

    page = kv.get_page(prefix, limit=2)
    assert [x.key for x in page.kvs] == [f"{prefix}0", f"{prefix}1"]
    assert page.next_after == f"{prefix}1"
    everything = kv.get_prefix(prefix, limit=2)
    assert [x.key for x in everything.kvs] == [f"{prefix}{i}" for i in range(5)]
    assert everything.next_after is None and everything.revision >= page.revision

    assert kv.delete_prefix(prefix).deleted == 5
    assert kv.get_prefix(prefix).kvs == []
    assert kv.get(names("jobsx")).value == "not under the prefix"


def test_bad_keys_reserved_keys_and_leases_raise_their_exceptions(agents, names):
    a, b = agents("a"), agents("b")
    with pytest.raises(hivekeeper.BadRequest) as long_key:
        a.kv.put("k" * 513, "v")
    assert "513" in long_key.value.message
    with pytest.raises(hivekeeper.BadRequest):
        a.kv.put("", "v")
    with pytest.raises(hivekeeper.BadRequest) as reserved:
        a.kv.put("$svc/x", "v")
    assert "reserved" in reserved.value.message
    with pytest.raises(hivekeeper.BadRequest):
        a.kv.delete("$svc/x")
    with pytest.raises(hivekeeper.BadRequest):
        a.kv.delete_prefix("$")
    # Reading a `$` key is allowed.
    assert a.kv.get("$svc/none").kv is None
    with pytest.raises(hivekeeper.LeaseNotFound):
        a.kv.put(names("k"), "v", lease="00000000deadbeef")
    with b.session(ttl_ms=10_000) as sb:
        with pytest.raises(hivekeeper.Forbidden):
            a.kv.put(names("k"), "v", lease=sb.lease)
    with pytest.raises(hivekeeper.ConfigError):
        a.kv.watch(prefix="p", key="k")


def test_a_key_put_through_a_session_goes_when_the_session_ends(agents, names):
    a, observer = agents("a"), agents("observer")
    key = names("presence")
    with a.session(ttl_ms=10_000) as s:
        put = s.kv.put(key, "up")
        held = observer.kv.get(key).kv
        assert held is not None and held.lease == s.lease and held.mod_revision == put.revision
        # An explicit lease=None on agent.kv is an unbound key.
        a.kv.put(names("plain"), "stays")
    assert s.state is hivekeeper.SessionState.REVOKED
    assert observer.kv.get(key).kv is None
    assert observer.kv.get(names("plain")).value == "stays"
    with pytest.raises(hivekeeper.SessionLost):
        s.kv.put(key, "up again")


def test_a_counter_incremented_by_txn_from_two_threads_counts_every_increment(agents, names):
    key = names("counter")
    a, b = agents("a"), agents("b")
    increments = 15

    def increment(kv: hivekeeper.Kv) -> None:
        for _ in range(increments):
            while True:
                current = kv.get(key).kv
                if current is None:
                    compare, value = Compare.version(key, "==", 0), 1
                else:
                    compare = Compare.mod_revision(key, "==", current.mod_revision)
                    value = int(current.value) + 1
                if kv.txn([compare], [Op.put(key, str(value))]).succeeded:
                    break

    threads = [threading.Thread(target=increment, args=(x.kv,)) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    final = a.kv.get(key).kv
    assert final is not None and final.value == str(2 * increments)
    assert final.version == 2 * increments


def test_txn_runs_one_branch_and_fences_a_write_by_a_lock(agents, names):
    a = agents("a")
    key = names("k")
    a.kv.put(key, "1")
    failed = a.kv.txn(
        [Compare.value(key, "==", "2")],
        [Op.put(key, "3")],
        [Op.get(key), Op.get_prefix(key), Op.delete(names("none"))],
    )
    assert not failed.succeeded
    assert [r.verb for r in failed.results] == ["get", "get", "delete"]
    assert failed.results[0].kv is not None and failed.results[0].kv.value == "1"
    assert failed.results[2].deleted == 0
    with a.session(ttl_ms=10_000) as s:
        with s.lock(names("mission"), wait_ms=0) as g:
            fenced = a.kv.txn(
                [Compare.holder("lock", names("mission"), g.token)],
                [Op.put(key, "landing", prev_kv=True), Op.delete_prefix(names("tmp/"))],
            )
            assert fenced.succeeded and fenced.results[0].prev_kv is not None
        stale = a.kv.txn(
            [Compare.holder("lock", names("mission"), g.token)], [Op.put(key, "stale")]
        )
        assert not stale.succeeded
    assert a.kv.get(key).value == "landing"
    with pytest.raises(hivekeeper.BadRequest):
        a.kv.txn(success=[Op.put(key, "x"), Op.delete(key)])


def test_compacted_carries_its_revision():
    error = hivekeeper.errors.service_error("compacted", "behind", {"compact_revision": 42})
    assert isinstance(error, hivekeeper.Compacted) and error.compact_revision == 42


# -- watches ----------------------------------------------------------------------------------


def _changes(events: List[hivekeeper.WatchEvent]) -> List[tuple]:
    return [(e.type, e.key, e.kv.value if e.type == "put" else None) for e in events]


def test_a_watch_sees_every_change_in_order_from_a_read_revision(agents, names):
    a = agents("a")
    prefix = names("hive") + "/"
    start = a.kv.get_prefix(prefix).revision
    a.kv.put(prefix + "x", "1")
    a.kv.put(prefix + "y", "2")
    a.kv.put(names("other"), "not watched")
    a.kv.txn(success=[Op.put(prefix + "x", "3"), Op.delete(prefix + "y")])
    with bounded(a.kv.watch(prefix=prefix, after=start, wait_ms=2000)) as w:
        events = [next(w) for _ in range(4)]
    assert _changes(events) == [
        ("put", prefix + "x", "1"),
        ("put", prefix + "y", "2"),
        ("put", prefix + "x", "3"),
        ("delete", prefix + "y", None),
    ]
    revisions = [e.revision for e in events]
    assert revisions[0] > start and revisions[0] < revisions[1] < revisions[2]
    assert revisions[2] == revisions[3], "one txn, one revision"


def test_an_idle_watch_gets_bookmarks_and_its_cursor_moves(agents, names):
    a = agents("a")
    key = names("idle")
    start = a.kv.put(key, "v").revision
    a.kv.put(names("elsewhere"), "moves the revision")
    with a.kv.watch(key=key, after=start, wait_ms=200) as w:
        t0 = time.monotonic()
        page = w.poll()
        assert page.events == [] and page.progress is not None
        assert time.monotonic() - t0 >= 0.15, "the service held the poll"
        assert w.revision == page.next >= start


def test_a_watch_resumes_from_its_cursor_and_across_a_cut_connection(agents, names, proxy):
    a = agents("a")
    prefix = names("resume") + "/"
    start = a.kv.get_prefix(prefix).revision
    for i in range(3):
        a.kv.put(f"{prefix}{i}", str(i))
    with hivekeeper.Agent(names("b"), [proxy.broker], **FAST) as b:
        first = bounded(b.kv.watch(prefix=prefix, after=start, wait_ms=1000))
        seen = [next(first), next(first)]
        first.close()
        assert list(first) == []
        second = bounded(b.kv.watch(prefix=prefix, after=first.revision, wait_ms=1000))
        seen.append(next(second))
        assert [e.key for e in seen] == [f"{prefix}{i}" for i in range(3)]

        got: List[hivekeeper.WatchEvent] = []
        reader = threading.Thread(target=lambda: got.extend([next(second), next(second)]))
        reader.start()
        time.sleep(0.3)
        proxy.cut()
        a.kv.put(prefix + "3", "3")
        time.sleep(0.3)
        proxy.cut()
        a.kv.put(prefix + "4", "4")
        reader.join(timeout=30)
        second.close()
        assert [e.key for e in got] == [prefix + "3", prefix + "4"]
        assert b.stats().connects_total >= 2


def test_a_kv_cache_follows_a_prefix(agents, names):
    a, writer = agents("a"), agents("writer")
    prefix = names("cfg") + "/"
    writer.kv.put(prefix + "rate", "2")
    changes: List[int] = []
    with hivekeeper.KvCache(
        a.kv, prefix, on_change=lambda ev: changes.append(len(ev)), wait_ms=1000
    ) as cache:
        assert cache.value(prefix + "rate") == "2" and cache.loads == 1
        writer.kv.put(prefix + "rate", "5")
        written = writer.kv.put(prefix + "mode", "survey").revision
        assert cache.wait_revision(written, timeout=10)
        assert cache.value(prefix + "rate") == "5" and cache.value(prefix + "mode") == "survey"
        writer.kv.delete(prefix + "rate")
        assert cache.wait_until(lambda m: prefix + "rate" not in m, timeout=10)
        assert set(cache.snapshot()) == {prefix + "mode"}
        with writer.session(ttl_ms=10_000) as s:
            s.kv.put(prefix + "member", "up")
            assert cache.wait_until(lambda m: prefix + "member" in m, timeout=10)
        assert cache.wait_until(lambda m: prefix + "member" not in m, timeout=10)
        assert cache.error is None and sum(changes) >= 4


def test_asyncio_watch_and_cache(node, names):
    prefix = names("aio") + "/"

    async def main() -> None:
        async with hivekeeper.aio.Agent(names("a"), [node.broker], **FAST) as agent:
            start = (await agent.kv.get_prefix(prefix)).revision
            async with agent.session(ttl_ms=10_000) as s:
                await s.kv.put(prefix + "drone-1", "up")
            await agent.kv.put(prefix + "cfg", "x")
            seen = []
            async with agent.kv.watch(prefix=prefix, after=start, wait_ms=1000) as w:
                async for event in w:
                    seen.append((event.type, event.key))
                    if len(seen) == 3:
                        break
            assert seen == [
                ("put", prefix + "drone-1"),
                ("delete", prefix + "drone-1"),
                ("put", prefix + "cfg"),
            ]
            cache = await hivekeeper.aio.KvCache.start(agent.kv, prefix, wait_ms=1000)
            assert cache.get(prefix + "cfg") is not None
            await agent.kv.put(prefix + "cfg", "y")
            assert await cache.wait_until(
                lambda m: m.get(prefix + "cfg") is not None and m[prefix + "cfg"].value == "y", 10
            )
            await cache.close()
            assert cache.error is None
            # A task waiting in a long poll can be cancelled; the agent goes on.
            quiet = agent.kv.watch(key=prefix + "quiet", after=(await agent.kv.get("x")).revision)
            waiting = asyncio.ensure_future(quiet.__anext__())
            await asyncio.sleep(0.2)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert (await agent.kv.get(prefix + "cfg")).value == "y"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_compacted_cursor_raises_and_a_lagging_cache_reads_the_prefix_again(start_node, names):
    node = start_node()
    prefix = names("c") + "/"
    with hivekeeper.Agent(names("a"), [node.broker], **FAST) as agent:
        start = agent.kv.put(prefix + "first", "1").revision
        gate = threading.Event()
        # The cache's thread stalls in its callback while the history moves on without it.
        cache = hivekeeper.KvCache(
            agent.kv, prefix, on_change=lambda events: gate.wait(60), wait_ms=500
        )
        agent.kv.put(prefix + "stall", "the cache's thread waits in on_change")
        # Past the history's 10,000 events: 160 txns of 64 puts each.
        agent.kv.delete(prefix + "first")
        for _ in range(160):
            agent.kv.txn(success=[Op.put(f"{prefix}k{i:02}", "x") for i in range(64)])
        behind = bounded(agent.kv.watch(prefix=prefix, after=start))
        with pytest.raises(hivekeeper.Compacted) as compacted:
            next(behind)
        assert compacted.value.compact_revision is not None
        assert compacted.value.compact_revision > start
        assert list(behind) == [], "the watch ends after Compacted"
        # Re-read and watch from the read's revision, as the error says.
        read = agent.kv.get_prefix(prefix)
        assert len(read.kvs) == 65
        assert agent.kv.watch(prefix=prefix, after=read.revision, wait_ms=0).poll().events == []
        gate.set()
        with cache:
            assert cache.wait_until(lambda m: len(m) == 65, timeout=30)
            assert cache.loads == 2 and cache.error is None
            assert prefix + "first" not in cache and cache.value(prefix + "k00") == "x"


def _queue_worker(session: hivekeeper.Session, watch: hivekeeper.Watch, done: List[str]) -> None:
    """The README's work queue recipe, ending when ``watch`` is closed."""
    kv = session.kv
    todo = {x.key for x in kv.get_prefix(watch.cursor.prefix + "jobs/").kvs}
    jobs, claims = watch.cursor.prefix + "jobs/", watch.cursor.prefix + "claims/"
    while True:
        for job in sorted(todo):
            claim = job.replace(jobs, claims, 1)
            taken = kv.txn(
                [Compare.version(job, ">", 0), Compare.version(claim, "==", 0)],
                [Op.put(claim, session.agent.agent_id, lease=session.lease), Op.get(job)],
            )
            if taken.succeeded:
                job_kv = taken.results[1].kv
                assert job_kv is not None
                done.append(job_kv.value)
                kv.txn(success=[Op.delete(job), Op.delete(claim)])
        todo.clear()
        event = next(watch, None)
        if event is None:
            return
        if event.type == "put" and event.key.startswith(jobs):
            todo.add(event.key)
        elif event.type == "delete" and event.key.startswith(claims):
            todo.add(event.key.replace(claims, jobs, 1))


def test_the_work_queue_recipe_gives_a_crashed_workers_job_to_another(agents, names):
    producer, crasher, worker = agents("producer"), agents("crasher"), agents("worker")
    queue = names("queue") + "/"
    producer.kv.put(queue + "jobs/1", "survey field A")
    dead = crasher.session(ttl_ms=10_000)
    assert dead.kv.txn(success=[Op.put(queue + "claims/1", "crasher", lease=dead.lease)]).succeeded
    done: List[str] = []
    with worker.session(ttl_ms=10_000) as s:
        start = s.kv.get_prefix(queue).revision
        watch = bounded(s.kv.watch(prefix=queue, after=start, wait_ms=1000))
        thread = threading.Thread(target=_queue_worker, args=(s, watch, done))
        thread.start()
        producer.kv.put(queue + "jobs/2", "survey field B")
        eventually("job 2 done", lambda: True if done == ["survey field B"] else None)
        dead.revoke()  # the crasher's claim goes with its lease: job 1 is free again
        eventually("job 1 done", lambda: True if len(done) == 2 else None)
        watch.close()
        thread.join(timeout=10)
    assert done == ["survey field B", "survey field A"]
    assert producer.kv.get_prefix(queue).kvs == []


def test_closing_a_watch_ends_its_pending_poll_at_once(agents, names):
    a = agents("a")
    watch = a.kv.watch(key=names("quiet"), after=a.kv.get(names("quiet")).revision)
    threading.Timer(0.3, watch.close).start()
    t0 = time.monotonic()
    assert list(watch) == []  # the default 30 s poll, cut short
    assert time.monotonic() - t0 < 5
    with pytest.raises(StopIteration):
        watch.poll()
