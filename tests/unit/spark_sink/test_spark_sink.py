"""The sink's writer without a JVM: a replayed micro-batch adds nothing, and many of them leak no file descriptors
or threads (queries on the session are in ``tests/integration/spark/test_spark_sink.py``)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from logstore.errors import InvalidConfigError, UnknownTopicOrPartitionError
from logstore.store import LogStore
from spark_sink import LogstoreBatchWriter, LogstoreStreamWriter, SinkRows
from tests.support.helpers import assert_gap_free

SCHEMA = StructType.fromJson(
    {"type": "struct", "fields": [{"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}
)


def checkpoint(tmp_path: Path) -> str:
    """A new query's checkpoint, as Spark starts one: ``metadata`` holds the query's id."""
    path = tmp_path / f"ck-{uuid.uuid4()}"
    path.mkdir()
    (path / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    return str(path)


def test_a_replayed_batch_adds_nothing(store: LogStore, make_topic: Callable[..., str], tmp_path: Path) -> None:
    t = make_topic(partitions=2)
    schema = SCHEMA
    options = {"topic": t, "logstore.root": store.config.root, "producerId": "q1"}
    writer = LogstoreStreamWriter({**options, "checkpointLocation": checkpoint(tmp_path)}, schema)
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


def test_a_new_checkpoint_with_the_same_producer_id_writes_every_batch(
    store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=2)
    options = {"topic": t, "logstore.root": store.config.root, "producerId": "billing"}
    rows = SinkRows(pa.table({"value": pa.array([b"a", b"b", b"c"], pa.binary())}))
    for _ in range(2):  # the same job twice, each time on a new checkpoint: batch ids start at 0 again
        writer = LogstoreStreamWriter({**options, "checkpointLocation": checkpoint(tmp_path)}, SCHEMA)
        for batch in range(5):
            writer.commit([rows], batch)
    assert sum(len(v) for v in assert_gap_free(store.catalog, t).values()) == 30


def test_a_stream_without_a_checkpoint_location_is_refused(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    with pytest.raises(InvalidConfigError, match="checkpointLocation"):
        LogstoreStreamWriter({"topic": t, "logstore.root": store.config.root, "producerId": "q1"}, SCHEMA)


def test_overwrite_is_refused_before_anything_is_read(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    with pytest.raises(InvalidConfigError, match="Overwrite"):
        LogstoreBatchWriter({"topic": t, "logstore.root": store.config.root}, SCHEMA, overwrite=True)


def test_a_missing_topic_is_created_with_the_default_partitions_unless_auto_creation_is_off(
    store: LogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGSTORE_NUM_PARTITIONS", "3")
    options = {"logstore.root": store.config.root, "kafka.bootstrap.servers": "broker:9092"}
    with pytest.raises(UnknownTopicOrPartitionError, match=r"auto\.create\.topics\.enable"):
        LogstoreBatchWriter({**options, "topic": "off", "auto.create.topics.enable": "false"}, SCHEMA)
    assert not store.catalog.exists("off")
    writer = LogstoreBatchWriter({**options, "topic": "made"}, SCHEMA)
    assert len(store.describe_topic("made").partitions) == 3
    writer.commit([SinkRows(pa.table({"value": pa.array([b"x"], pa.binary())}))])
    assert sum(len(v) for v in assert_gap_free(store.catalog, "made").values()) == 1
