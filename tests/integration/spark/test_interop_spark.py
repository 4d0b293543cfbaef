"""Both engines on one table: Spark reads and maintains what delta-rs wrote, and back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logstore.groups.offsets import LATEST_OFFSETS_SQL
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from tests.support.helpers import assert_gap_free
from tests.support.spark_helpers import produce_mixed

pytestmark = pytest.mark.spark


def test_spark_reads_what_the_writer_wrote(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    produce_mixed(store, t)
    got = spark.read.format("delta").load(store.catalog.topic_path(t))
    utc = dt.UTC
    expected = spark.createDataFrame(
        [
            (0, 0, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc), 0, b"k1", b"a", [("h", b"1")]),
            (0, 1, dt.datetime(1970, 1, 1, 0, 0, 3, tzinfo=utc), 0, b"k1", None, []),
            (1, 0, dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=utc), 0, None, b"b", []),
        ],
        got.schema,
    )
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_writer_keeps_appending_gap_free_after_spark_optimize(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    for i in range(6):
        w.append([ProducerBatch(input_table([0, 1, 0], [f"{i}-{k}".encode() for k in range(3)]))])
    path = store.catalog.topic_path(t)
    assert len(store.reader(t).partition_view(0).files) == 6
    spark.sql(f"OPTIMIZE delta.`{path}`")
    reader = store.reader(t)
    assert len(reader.partition_view(0).files) == 1
    assert reader.fetch(0, 0, max_records=100).records["offset"].to_pylist() == list(range(12))
    # the writer's snapshot predates OPTIMIZE; it commits on top without a conflict
    for _ in range(3):
        w.append([ProducerBatch(input_table([0, 1], [b"after"] * 2))])
    values = assert_gap_free(store.catalog, t)
    assert len(values[0]) == 15 and len(values[1]) == 9
    assert TopicWriter(store.catalog, t).high_watermark(0) == 15


def test_delta_rs_reads_what_spark_wrote(spark: SparkSession, store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1)
    store.append(t, [ProducerBatch(input_table([0, 0], [b"a", b"b"]))])
    path = store.catalog.topic_path(t)
    schema = spark.read.format("delta").load(path).schema
    rows = [(0, 2 + i, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 0, None, f"spark-{i}".encode(), []) for i in range(3)]
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(path)
    r = store.fetch(t, 0, 0)
    assert r.records["value"].to_pylist() == [b"a", b"b", b"spark-0", b"spark-1", b"spark-2"]
    assert r.high_watermark == 5  # recovered from Spark's file statistics
    w = TopicWriter(store.catalog, t)
    w.append([ProducerBatch(input_table([0], [b"c"]))])
    assert assert_gap_free(store.catalog, t)[0][-1] == b"c"


def test_documented_sql_shows_latest_committed_offsets(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0] * 5 + [1] * 5, [b"v"] * 10))])
    store.commit_offsets("g", t, {0: 5, 1: 2})
    store.commit_offsets("g", t, {0: 3})
    got = spark.sql(LATEST_OFFSETS_SQL.format(path=store.offsets.path)).select(
        "group", "topic", "partition", "committed_offset"
    )
    expected = spark.createDataFrame([("g", t, 0, 3), ("g", t, 1, 2)], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    assert got.filter(F.col("partition") == 0).count() == 1
