"""Threads are fixed pools, not a set per topic: a node's thread count does not grow with its topics.

Background work of every table and topic — data-file fsyncs, Delta
checkpoints, write-ahead log writes, commits — runs as serial tasks
(:mod:`logstore.common.workers`) on a few process-wide or node-wide pools. A task
never runs twice at once, no request to run it is lost, and no exception ends
a worker.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from logstore.common.workers import WorkerPool
from logstore.config import LogstoreConfig, load_config
from logstore.log.append import _Checkpointer
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.node import committer
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from logstore.wire.json_produce import parse_produce
from tests.support.helpers import assert_gap_free


def _threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def _batch(partition: int = 0) -> ProducerBatch:
    return ProducerBatch(input_table(pa.array([partition], pa.int32()), pa.array([b"x"], pa.binary())))


# -- the pool ----------------------------------------------------------------------


def test_an_exception_in_a_task_does_not_end_the_worker() -> None:
    pool = WorkerPool(1, "test-pool")
    ran: list[str] = []

    def fail() -> None:
        ran.append("fail")
        raise RuntimeError("boom")

    failing, working = pool.task(fail, "failing"), pool.task(lambda: ran.append("ok"), "working")
    failing.run_soon()
    failing.join()
    working.run_soon()
    working.join()
    assert ran == ["fail", "ok"]
    assert pool.threads == 1
    pool.shutdown()


def test_a_task_never_runs_twice_at_once_and_loses_no_request() -> None:
    pool = WorkerPool(4, "test-pool")
    queue: list[int] = []
    seen: list[int] = []
    lock = threading.Lock()
    running = [0]
    overlaps = [0]

    def drain() -> None:
        running[0] += 1
        overlaps[0] += running[0] > 1
        with lock:
            got, queue[:] = list(queue), []
        seen.extend(got)
        running[0] -= 1

    task = pool.task(drain, "drain")

    def produce(k: int) -> None:
        for i in range(500):
            with lock:
                queue.append(k * 1000 + i)
            task.run_soon()

    producers = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    task.join()
    assert overlaps == [0]
    assert sorted(seen) == sorted(k * 1000 + i for k in range(4) for i in range(500))
    for k in range(4):  # one producer's items in its order
        assert [x for x in seen if x // 1000 == k] == [k * 1000 + i for i in range(500)]
    pool.shutdown()


def test_deadlines_run_tasks_from_one_timer_thread() -> None:
    pool = WorkerPool(2, "test-pool")
    done = threading.Event()
    ran: list[int] = []
    tasks = [pool.task(lambda k=k: ran.append(k), f"t{k}") for k in range(50)]
    now = time.monotonic()
    for k, task in enumerate(tasks):
        task.run_at(now + 0.001 * (50 - k))
    last = pool.task(done.set, "last")
    last.run_at(now + 0.1)
    assert done.wait(10)
    for task in tasks:
        task.join()
    assert sorted(ran) == list(range(50))
    assert pool.threads <= 3  # two workers and the timer, for 51 deadlines
    pool.shutdown()


# -- Delta checkpoints and fsyncs ----------------------------------------------------


def test_a_failing_checkpoint_does_not_end_the_checkpoint_worker(tmp_path: Path) -> None:
    config = load_config(environ={}, overrides={"logstore.root": str(tmp_path / "data"), "checkpoint.interval": 1000})
    store = LogStore(config)
    store.create_topic("t", 1)
    TopicWriter(store.catalog, "t").append([_batch()])
    os.makedirs(tmp_path / "not-a-table")
    broken = _Checkpointer(str(tmp_path / "not-a-table"), fsync=True)
    broken.request()
    broken.wait_idle()  # it failed (logged): there is no table to checkpoint
    table = store.catalog.topic_path("t")
    working = _Checkpointer(table, fsync=True)
    working.request()
    working.wait_idle()
    assert os.path.exists(os.path.join(table, "_delta_log", "_last_checkpoint"))
    assert _threads("delta-checkpoint") == 1


def test_writers_of_many_tables_share_the_fsync_and_checkpoint_threads(tmp_path: Path) -> None:
    config = load_config(environ={}, overrides={"logstore.root": str(tmp_path / "data"), "checkpoint.interval": 2})
    store = LogStore(config)
    writers = []
    for k in range(30):
        store.create_topic(f"t{k}", 1)
        w = TopicWriter(store.catalog, f"t{k}")
        for _ in range(3):  # past checkpoint.interval: each table asks for a checkpoint
            w.append([_batch()])
        writers.append(w)
    assert _threads("fsync") <= 8
    assert _threads("delta-checkpoint") == 1
    for w in writers:
        w.close()  # one writer's close leaves the shared threads to the others
    assert all(
        os.path.exists(os.path.join(store.catalog.topic_path(f"t{k}"), "_delta_log", "_last_checkpoint"))
        for k in range(30)
    )
    store.create_topic("after", 1)
    TopicWriter(store.catalog, "after").append([_batch()])  # fsyncs still run after the others closed


def _broker(tmp_path: Path, **config: object) -> Broker:
    return Broker(load_config(environ={}, overrides={"logstore.root": str(tmp_path / "data"), **config}))


def test_each_topic_commits_in_submit_order_on_the_shared_pool(tmp_path: Path) -> None:
    broker = _broker(tmp_path, **{"num.io.threads": 2, "linger.ms": 1})
    topics = [f"t{k}" for k in range(20)]
    for t in topics:
        broker.store.create_topic(t, 1)
    submitted: dict[str, list[Future[AppendResult]]] = {t: [] for t in topics}
    try:
        for i in range(30):  # interleaved over the topics, none waited for: the committers run in turns
            for t in topics:
                body = b'{"records": [{"value": "%s-%d"}]}' % (t.encode(), i)
                submitted[t].append(broker.pipeline(t).submit(parse_produce(body), "1" if i % 3 else "all").committed)
        for t in topics:
            assert [f.result(timeout=60).offsets.to_pylist() for f in submitted[t]] == [[i] for i in range(30)]
    finally:
        broker.close()
    for t in topics:
        assert assert_gap_free(broker.store.catalog, t) == {0: [f"{t}-{i}".encode() for i in range(30)]}
    assert _threads("committer") == 0  # the node's pool stopped with it


def test_a_topic_whose_writer_lock_is_taken_holds_up_no_other_topic(tmp_path: Path, config: LogstoreConfig) -> None:
    broker = _broker(tmp_path, **{"num.io.threads": 1})
    for t in ("busy", "free"):
        broker.store.create_topic(t, 1)
    one = parse_produce(b'{"records": [{"value": "x"}]}')
    try:
        busy = broker.pipeline("busy")
        broker.pipeline("free")
        other = TopicWriter(broker.store.catalog, "busy", join=True)  # a cooperative writer (the Spark sink)
        waiting = threading.Thread(target=lambda: other.append([_batch()]))
        waiting.start()  # it announces itself; the node hands the lock over and it commits
        waiting.join(timeout=30)
        assert not waiting.is_alive()
        with other.hold():  # and now keeps it
            stuck = busy.submit(one, "all").committed
            # The only committer thread is not stuck waiting for "busy"'s lock: "free" commits.
            assert broker.pipeline("free").submit(one, "all").committed.result(timeout=30).offsets.to_pylist() == [0]
            assert not stuck.done()
        assert stuck.result(timeout=30).offsets.to_pylist() == [1]
        other.close()
    finally:
        broker.close()


def test_an_idle_topic_lets_go_of_its_writer_lock_and_takes_it_again_for_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(committer, "_IDLE_RELEASE_S", 0.2)
    broker = _broker(tmp_path)
    broker.store.create_topic("t", 1)
    one = parse_produce(b'{"records": [{"value": "x"}]}')
    try:
        pipeline = broker.pipeline("t")
        assert pipeline.submit(one, "all").committed.result(timeout=30).offsets.to_pylist() == [0]
        other = TopicWriter(broker.store.catalog, "t", join=True)
        deadline = time.monotonic() + 10
        held = other.try_hold()  # without announcing itself: only an idle node's release lets it in
        while held is None and time.monotonic() < deadline:
            time.sleep(0.05)
            held = other.try_hold()
        assert held is not None
        with held:
            later = pipeline.submit(one, "1")
            assert later.promised is None  # the node does not hold the lock: no offset can be promised
        assert later.committed.result(timeout=30).offsets.to_pylist() == [1]
        other.close()
    finally:
        broker.close()


def test_no_route_hands_a_dependency_to_the_thread_pool(config: LogstoreConfig) -> None:
    # FastAPI runs a plain `def` dependency in its thread pool: a hop to another thread and back, and a turn of
    # the GIL, on every request (produce to an open topic made one for the broker lookup alone).
    import inspect

    from fastapi.routing import APIRoute

    from ingest_api.app import create_app

    def is_async(call: Any) -> bool:  # a function, or an object whose __call__ is (HTTPBearer)
        return inspect.iscoroutinefunction(call if inspect.isroutine(call) else call.__call__)

    def sync_calls(dependant: Any) -> list[str]:
        out = [] if dependant.call is None or is_async(dependant.call) else [repr(dependant.call)]
        for sub in dependant.dependencies:
            out += sync_calls(sub)
        return out

    def api_routes(routes: list[Any]) -> list[APIRoute]:
        out = []
        for r in routes:
            if isinstance(r, APIRoute):
                out.append(r)
            elif hasattr(r, "original_router"):  # an included router (FastAPI >= 0.165 keeps it as a route)
                out += api_routes(r.original_router.routes)
        return out

    routes = api_routes(create_app(config).routes)
    assert any(r.path.endswith("/{topic}/records") for r in routes)
    for route in routes:
        assert sync_calls(route.dependant) == [], route.path
