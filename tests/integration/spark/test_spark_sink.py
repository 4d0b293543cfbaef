"""writeStream / write with format("logstore"): partitioning, exactly-once, concurrent writers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from logstore.log.partitioner import Partitioner
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from tests.support.helpers import assert_gap_free
from tests.support.spark_helpers import read_stream


@pytest.mark.spark
def test_batch_write_partitions_keys_like_kafka(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=4)
    keys = [f"user-{i}" for i in range(20)]
    df = spark.createDataFrame(
        [(k, f"v{i}", None) for i, k in enumerate(keys)] + [(None, "pinned", 3)],
        "key string, value string, partition int",
    )
    df.write.format("logstore").mode("append").option("topic", t).option("logstore.root", store.config.root).save()
    got = {}
    for p in range(4):
        for r in store.fetch(t, p, 0, max_records=100).records.to_pylist():
            got[r["value"]] = (p, r["key"])
    part = Partitioner()
    for i, k in enumerate(keys):
        assert got[f"v{i}".encode()] == (part.partition_for_key(k.encode(), 4), k.encode())
    assert got[b"pinned"] == (3, None)
    assert_gap_free(store.catalog, t)


@pytest.mark.spark
def test_topic_column_and_headers(spark: SparkSession, store: LogStore, make_topic: Callable[..., str]) -> None:
    a, b = make_topic(), make_topic()
    df = spark.createDataFrame(
        [(a, b"1", [("h", b"x")]), (b, b"2", []), (a, b"3", None)],
        "topic string, value binary, headers array<struct<key: string, value: binary>>",
    )
    df.write.format("logstore").mode("append").option("logstore.root", store.config.root).save()
    ra = store.fetch(a, 0, 0).records.to_pylist()
    assert [(r["value"], r["headers"]) for r in ra] == [(b"1", [{"key": "h", "value": b"x"}]), (b"3", None)]
    assert [r["value"] for r in store.fetch(b, 0, 0).records.to_pylist()] == [b"2"]


@pytest.mark.spark
def test_stream_sink_stays_gap_free_under_a_concurrent_ingest_writer(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    src, dst = make_topic(partitions=2), make_topic(partitions=2)
    for i in range(10):
        store.append(src, [ProducerBatch(input_table([0, 1] * 10, [f"spark-{i}-{k}".encode() for k in range(20)]))])
    ingest = TopicWriter(store.catalog, dst)  # the ingest server: the topic's leader
    stop = threading.Event()
    ingested: list[bytes] = []

    def ingest_loop() -> None:
        n = 0
        while not stop.is_set() or n < 20:
            values = [f"ingest-{n}-{k}".encode() for k in range(3)]
            ingest.append([ProducerBatch(input_table([n % 2, 0, 1], values))])
            ingested.extend(values)
            n += 1

    thread = threading.Thread(target=ingest_loop)
    thread.start()
    try:
        q = (
            read_stream(spark, store, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger=40)
            .select("key", "value")
            .writeStream.format("logstore")
            .option("topic", dst)
            .option("logstore.root", store.config.root)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
    finally:
        stop.set()
        thread.join()
    assert len(q.recentProgress) >= 5
    values = assert_gap_free(store.catalog, dst)
    stored = [v for vs in values.values() for v in vs]
    assert len(stored) == len(set(stored))
    expected = {f"spark-{i}-{k}".encode() for i in range(10) for k in range(20)} | set(ingested)
    assert set(stored) == expected
