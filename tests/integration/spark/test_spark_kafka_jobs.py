"""A job written for Spark's Kafka source and sink, run after swapping the format: save modes as Kafka's sink has
them, ``kafka.*`` options ignored, ``assign``, a missing sink topic created, and a query on a new checkpoint that
reuses a ``producerId`` writes every record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from logstore.errors import InvalidConfigError
from logstore.store import LogStore
from tests.support.helpers import assert_gap_free
from tests.support.spark_helpers import produce, read_batch, read_stream


def records(store: LogStore, topic: str) -> list[bytes]:
    return sorted(v for vs in assert_gap_free(store.catalog, topic).values() for v in vs)


def to_topic(df: DataFrame, store: LogStore, topic: str, checkpoint: Path, **options: str) -> None:
    writer = (
        df.selectExpr("key", "value")
        .writeStream.format("logstore")
        .option("topic", topic)
        .option("logstore.root", store.config.root)
        .option("checkpointLocation", str(checkpoint))
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.trigger(availableNow=True).start().awaitTermination()


@pytest.mark.spark
def test_a_new_checkpoint_reusing_a_producer_id_writes_every_record(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    src, dst = make_topic(partitions=3), make_topic(partitions=2)
    produce(store, src, [0, 1, 2] * 10)
    source = read_stream(spark, store, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger=10)
    to_topic(source, store, dst, tmp_path / "first", producerId="billing")
    assert len(records(store, dst)) == 30
    # The same job again on a new checkpoint: its batch ids start at 0, below the first query's last one.
    to_topic(source, store, dst, tmp_path / "second", producerId="billing")
    assert len(records(store, dst)) == 60


@pytest.mark.spark
def test_batch_writes_append_by_default_and_refuse_overwrite_and_ignore(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    df = spark.createDataFrame([("a",), ("b",)], "value string")

    def writer(df: DataFrame = df):  # type: ignore[no-untyped-def]
        return df.write.format("logstore").option("topic", t).option("logstore.root", store.config.root)

    writer().save()  # Spark's default mode, ErrorIfExists: Kafka's sink appends
    writer().mode("errorifexists").save()
    writer().mode("append").save()
    writer().save(mode="error")
    assert len(records(store, t)) == 8
    with pytest.raises(Exception, match="Overwrite save mode"):
        writer().mode("overwrite").save()
    with pytest.raises(InvalidConfigError, match="Ignore save mode"):
        writer().mode("ignore").save()
    assert len(records(store, t)) == 8
    # Other formats keep Spark's default: ErrorIfExists.
    with pytest.raises(Exception, match="DELTA_PATH_EXISTS"):
        df.write.format("delta").save(store.catalog.topic_path(t))


@pytest.mark.spark
def test_a_kafka_job_runs_after_swapping_the_format(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    src = make_topic(partitions=3)
    produce(store, src, [0, 1, 2] * 4)
    kafka = {"kafka.bootstrap.servers": "broker-1:9092", "kafka.security.protocol": "SSL"}
    df = read_stream(spark, store, subscribe=src, startingOffsets="earliest", **kafka)
    to_topic(df, store, "kafka-job-out", tmp_path / "ck", **kafka)  # a topic nobody created: created
    assert len(records(store, "kafka-job-out")) == 12
    assigned = read_batch(spark, store, assign=f'{{"{src}": [0, 2]}}', **kafka)
    assert sorted(r.partition for r in assigned.select("partition").distinct().collect()) == [0, 2]
    assert assigned.count() == 8


@pytest.mark.spark
def test_a_batch_read_of_an_empty_topic_is_empty(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)  # no records: Spark plans one partition without a task for a read of nothing
    assert read_batch(spark, store, subscribe=t).count() == 0
