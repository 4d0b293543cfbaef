"""The sink's writer without a JVM: a replayed micro-batch adds nothing, and many of them leak no file descriptors
or threads (queries on the session are in ``tests/integration/spark/test_spark_sink.py``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import StructType

from logstore.store import LogStore
from spark_sink import LogstoreBatchWriter, LogstoreStreamWriter, SinkRows
from tests.support.helpers import assert_gap_free


def test_a_replayed_batch_adds_nothing(store: LogStore, make_topic: Callable[..., str], tmp_path: Path) -> None:
    t = make_topic(partitions=2)
    schema = StructType.fromJson(
        {"type": "struct", "fields": [{"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}
    )
    writer = LogstoreStreamWriter({"topic": t, "logstore.root": store.config.root, "producerId": "q1"}, schema)
    rows = SinkRows(pa.table({"value": pa.array([b"a", b"b", b"c"], pa.binary())}))
    writer.commit([rows], 0)
    writer.commit([rows], 1)
    writer.commit([rows], 1)  # the driver crashed after the commit, before Spark recorded it
    writer.commit([rows, None], 0)
    values = assert_gap_free(store.catalog, t)
    assert sum(len(v) for v in values.values()) == 6
    writer.commit([rows], 2)
    assert sum(len(v) for v in assert_gap_free(store.catalog, t).values()) == 9


def test_many_micro_batches_leak_no_file_descriptors_or_threads(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    schema = StructType.fromJson(
        {"type": "struct", "fields": [{"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}
    )
    # The driver-side commit of every micro-batch (the stream writer's differs only by its producer id).
    writer = LogstoreBatchWriter({"topic": t, "logstore.root": store.config.root}, schema)
    rows = SinkRows(pa.table({"value": pa.array([b"x", b"y"], pa.binary())}))

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    writer.commit([rows])  # first use: pools and caches that live as long as the process
    fds_before, threads_before = fds(), threading.active_count()
    for _ in range(499):
        writer.commit([rows])
    assert fds() - fds_before < 10
    assert threading.active_count() - threads_before < 10
    assert sum(len(v) for v in assert_gap_free(store.catalog, t).values()) == 1000
