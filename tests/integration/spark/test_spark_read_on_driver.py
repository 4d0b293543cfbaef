"""``maxRecordsReadOnDriver``: small micro-batches read while Spark plans them, handed to Spark from memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from logstore.store import LogStore
from tests.support.spark_helpers import batch_sizes, committed, drain, offsets_by_partition, produce, read_stream


@pytest.mark.spark
def test_a_query_reads_the_same_rows_on_the_driver_as_in_tasks(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=2)
    for _ in range(4):
        produce(store, t, [0, 1, 1, 0, 1], headers=[[("h", b"1")]] * 5)
    common = {"subscribe": t, "startingOffsets": "earliest", "maxOffsetsPerTrigger": 8, "includeHeaders": "true"}
    in_tasks, q = drain(read_stream(spark, store, **common), tmp_path / "tasks")
    assert batch_sizes(q) == [7, 7, 6]
    # 7-record batches over the limit go to tasks, the last one (6) is read on the driver; then all of them.
    for limit in (6, 7):
        on_driver, q = drain(
            read_stream(spark, store, **common, maxRecordsReadOnDriver=limit), tmp_path / f"driver-{limit}"
        )
        assert batch_sizes(q) == [7, 7, 6]
        assert_df_equality(on_driver, in_tasks, ignore_row_order=True)
    assert offsets_by_partition(in_tasks) == {0: list(range(8)), 1: list(range(12))}


@pytest.mark.spark
def test_a_group_query_reading_on_the_driver_commits_and_hands_over(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 1, 1])
    options = {"subscribe": t, "group": "g", "startingOffsets": "earliest", "maxRecordsReadOnDriver": 100}
    first = (
        read_stream(spark, store, **options)
        .writeStream.format("memory")
        .queryName("driver_group")
        .option("checkpointLocation", str(tmp_path / "first"))
        .start()
    )
    try:
        first.processAllAvailable()
        produce(store, t, [0])
        first.processAllAvailable()
        assert offsets_by_partition(spark.table("driver_group")) == {0: [0, 1], 1: [0, 1]}
    finally:
        first.stop()
    # Stopped, the query gave its lease back: the group's next query starts where it left off at once.
    produce(store, t, [1])
    rows, _ = drain(read_stream(spark, store, **options), tmp_path / "second")
    assert offsets_by_partition(rows) == {1: [2]}
    assert committed(store, "g", t) == {0: 2, 1: 3}
