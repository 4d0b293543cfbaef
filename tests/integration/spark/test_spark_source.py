"""format("logstore") reads like Spark's Kafka source: schema, starting and ending offsets, rate limits."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from chispa import assert_df_equality
from chispa.schema_comparer import assert_schema_equality
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from logstore.store import LogStore
from spark_source import KAFKA_ARROW_SCHEMA
from tests.support.spark_helpers import (
    batch_sizes,
    drain,
    offsets_by_partition,
    produce,
    produce_mixed,
    read_batch,
    read_stream,
)

pytestmark = pytest.mark.spark

# Spark's KafkaRecordToRowConverter.kafkaSchema and headersType, field for field.
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
)


def test_schema_is_the_kafka_source_schema(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic()
    assert_schema_equality(read_stream(spark, store, subscribe=t).schema, KAFKA_SCHEMA)
    assert_schema_equality(read_batch(spark, store, subscribe=t).schema, KAFKA_SCHEMA)
    with_headers = StructType([*KAFKA_SCHEMA.fields, HEADERS])
    assert_schema_equality(read_stream(spark, store, subscribe=t, includeHeaders="true").schema, with_headers)
    # What read() yields is exactly the Arrow schema Spark derives for it.
    assert KAFKA_ARROW_SCHEMA.equals(to_arrow_schema(KAFKA_SCHEMA, timezone="UTC"))


def test_batch_read_returns_records_as_the_kafka_source_does(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    produce_mixed(store, t)
    got = read_batch(spark, store, subscribe=t, includeHeaders="true")
    utc = dt.UTC
    expected = spark.createDataFrame(
        [
            (b"k1", b"a", t, 0, 0, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc), 0, [("h", b"1")]),
            (b"k1", None, t, 0, 1, dt.datetime(1970, 1, 1, 0, 0, 3, tzinfo=utc), 0, []),
            (None, b"b", t, 1, 0, dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=utc), 0, []),
        ],
        got.schema,
    )
    assert_df_equality(got, expected, ignore_row_order=True)


def test_batch_read_between_starting_and_ending_offsets(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    for _ in range(3):
        produce(store, t, [0, 0, 1, 1])  # three files per partition: 0-1, 2-3, 4-5
    got = read_batch(
        spark,
        store,
        topic=t,
        startingOffsets=json.dumps({t: {"0": 1, "1": -2}}),
        endingOffsets=json.dumps({t: {"0": 5, "1": -1}}),
    )
    assert offsets_by_partition(got) == {0: [1, 2, 3, 4], 1: [0, 1, 2, 3, 4, 5]}


@pytest.mark.parametrize(
    ("starting", "expected"),
    [
        ("earliest", {0: [0, 1, 2, 3], 1: [0, 1]}),
        ("latest", {}),
        ('{"T": {"0": 3, "1": -2}}', {0: [3], 1: [0, 1]}),
        ('{"T": {"0": -1, "1": 1}}', {1: [1]}),
    ],
)
def test_streaming_starting_offsets(
    spark: SparkSession,
    store: LogStore,
    make_topic: Callable[..., str],
    tmp_path: Path,
    starting: str,
    expected: dict[int, list[int]],
) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 0, 1])
    produce(store, t, [0, 0, 1])
    rows, _ = drain(read_stream(spark, store, subscribe=t, startingOffsets=starting.replace("T", t)), tmp_path)
    assert offsets_by_partition(rows) == expected


def test_streaming_starting_timestamp(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 0, 1, 1], timestamps_ms=[1000, 2000, 1000, 5000])
    rows, _ = drain(read_stream(spark, store, subscribe=t, startingTimestamp=2000), tmp_path)
    assert offsets_by_partition(rows) == {0: [1], 1: [1]}


def test_starting_offsets_json_must_name_every_partition(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    with pytest.raises(Exception, match=r"INVALID_CONFIG.*partition 1"):
        read_batch(spark, store, subscribe=t, startingOffsets=json.dumps({t: {"0": 0}})).collect()


def test_max_offsets_per_trigger_limits_every_batch(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=1)
    for _ in range(5):
        produce(store, t, [0] * 5)
    rows, q = drain(
        read_stream(spark, store, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=10), tmp_path
    )
    assert batch_sizes(q) == [10, 10, 5]
    assert offsets_by_partition(rows) == {0: list(range(25))}


def test_max_offsets_per_trigger_is_shared_by_backlog(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=3)
    produce(store, t, [0] * 30 + [1] * 10 + [2] * 2)
    rows, q = drain(
        read_stream(spark, store, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=8), tmp_path
    )
    sizes = batch_sizes(q)
    assert all(s <= 8 for s in sizes) and sum(sizes) == 42
    assert len(sizes) >= 42 // 8
    assert offsets_by_partition(rows) == {0: list(range(30)), 1: list(range(10)), 2: [0, 1]}


def test_available_now_reads_what_was_there_at_start_in_limited_batches(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 1] * 6)
    _rows, q = drain(
        read_stream(spark, store, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=4), tmp_path
    )
    assert batch_sizes(q) == [4, 4, 4]
    produce(store, t, [0, 1])
    _more, q2 = drain(
        read_stream(spark, store, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=4), tmp_path
    )
    assert batch_sizes(q2) == [2]  # resumed from the checkpoint: only the new records


def test_new_partitions_and_pattern_topics_are_picked_up(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=1)
    produce(store, t, [0, 0])
    df = read_stream(spark, store, subscribePattern="topic-.*", startingOffsets="earliest")
    q = df.writeStream.format("memory").queryName("picked_up").option("checkpointLocation", str(tmp_path)).start()
    try:
        q.processAllAvailable()
        store.alter_topic(t, partitions=2)
        produce(store, t, [1, 1, 1])
        other = make_topic(partitions=1)
        produce(store, other, [0])
        q.processAllAvailable()
    finally:
        q.stop()
    got = spark.table("picked_up")
    assert offsets_by_partition(got.filter(got.topic == t)) == {0: [0, 1], 1: [0, 1, 2]}
    assert got.filter(got.topic == other).count() == 1


def test_large_slices_are_split_across_tasks(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1)
    for _ in range(6):
        produce(store, t, [0] * 10)
    df = read_batch(spark, store, subscribe=t, maxRecordsPerPartition=20)
    assert df.rdd.getNumPartitions() == 3
    assert offsets_by_partition(df) == {0: list(range(60))}


def test_small_slices_share_a_task(spark: SparkSession, store: LogStore, make_topic: Callable[..., str]) -> None:
    t, u = make_topic(partitions=4), make_topic(partitions=2)
    produce(store, t, [0, 1, 2, 3] * 5)
    produce(store, u, [0, 1] * 3)
    df = read_batch(spark, store, subscribePattern=f"{t}|{u}")
    assert df.rdd.getNumPartitions() == 1  # six partitions of a few records: one Python task, not six
    assert offsets_by_partition(df.where(df.topic == t)) == {p: list(range(5)) for p in range(4)}
    assert offsets_by_partition(df.where(df.topic == u)) == {p: list(range(3)) for p in range(2)}
    # Slices of the task budget or more (at most maxRecordsPerPartition records) keep a task each.
    assert read_batch(spark, store, subscribe=t, maxRecordsPerPartition=5).rdd.getNumPartitions() == 4
    assert read_batch(spark, store, subscribe=t, maxRecordsPerPartition=10).rdd.getNumPartitions() == 2
