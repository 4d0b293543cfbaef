"""The node's retention thread: a topic that fails is logged and counted; the others and the next passes run."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import pytest

from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.node.metrics import Metrics
from logstore.node.retention import RetentionThread
from logstore.store import LogStore
from logstore.structs import ProducerBatch

HOUR_MS = 3600 * 1000


def old_files(store: LogStore, topic: str, commits: int) -> None:
    w = TopicWriter(store.catalog, topic)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    for c in range(commits):
        w.append([ProducerBatch(input_table([0, 0], [f"{c}a".encode(), f"{c}b".encode()], timestamps_ms=[old] * 2))])
    w.close()


def test_a_failing_topic_is_logged_and_the_others_and_later_passes_still_run(
    store: LogStore, make_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    broken, good, compacted = (
        make_topic(retention_ms=HOUR_MS),
        make_topic(retention_ms=HOUR_MS),
        make_topic(retention_ms=HOUR_MS, cleanup_policy="compact"),
    )
    for t in (broken, good, compacted):
        old_files(store, t, 3)
    version = store.catalog.table(broken).version()
    with open(os.path.join(store.catalog.topic_path(broken), "_delta_log", f"{version + 1:020d}.json"), "w") as f:
        f.write("not a delta commit\n")
    metrics = Metrics()
    thread = RetentionThread(store.catalog, lambda topic: None, metrics, interval_ms=10)

    with caplog.at_level(logging.INFO, logger="logstore.retention"):
        removed = thread.run_pass()

    assert [(r.topic, r.files_removed, r.log_start_offset) for r in removed] == [(good, 2, 4)]
    assert store.describe_topic(compacted).partitions[0].log_start_offset == 0  # compact only: retention leaves it
    assert metrics.retention_failures._value.get() == 1
    assert any(broken in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while thread.passes < 3:  # the thread keeps going past the broken topic
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        thread.stop()
    assert metrics.retention_failures._value.get() >= 3


def test_only_the_partitions_the_node_leads(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2, retention_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    for _ in range(3):
        w.append([ProducerBatch(input_table([0, 1], [b"a", b"b"], timestamps_ms=[old] * 2))])
    w.close()

    removed = RetentionThread(store.catalog, lambda topic: frozenset({1}), Metrics(), interval_ms=10).run_pass()

    assert [(r.partition, r.files_removed) for r in removed] == [(1, 2)]
    assert [p.log_start_offset for p in store.describe_topic(t).partitions] == [0, 2]
