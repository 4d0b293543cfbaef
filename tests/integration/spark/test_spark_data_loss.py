"""failOnDataLoss: records deleted before a query read them fail the query, or are skipped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from logstore.store import LogStore
from maintenance import run_retention
from tests.support.spark_helpers import drain, offsets_by_partition, produce, read_stream

pytestmark = pytest.mark.spark


def delete_below(store: LogStore, topic: str, partition: int, offset: int) -> None:
    """Retention keeping only the newest file, which starts at ``offset``: the log start offset moves up to it."""
    store.alter_topic(topic, config={"retention.bytes": 0})
    run_retention(store.catalog, topic, progress=lambda _: None)
    assert store.describe_topic(topic).partitions[partition].log_start_offset == offset


def first_run(spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path) -> str:
    """A query reads offsets 0-2; then 3-8 arrive and retention deletes everything below 6."""
    t = make_topic(partitions=1)
    produce(store, t, [0] * 3)
    rows, _ = drain(read_stream(spark, store, subscribe=t, startingOffsets="earliest"), tmp_path)
    assert rows.count() == 3
    produce(store, t, [0] * 3)
    produce(store, t, [0] * 3)
    delete_below(store, t, 0, 6)
    return t


def test_fail_on_data_loss_names_topic_partition_and_both_offsets(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = first_run(spark, store, make_topic, tmp_path)
    with pytest.raises(
        StreamingQueryException,
        match=rf"OFFSET_OUT_OF_RANGE.*3\.\.5 of topic '{t}' partition 0.*log start offset 6.*its offset 3",
    ):
        drain(read_stream(spark, store, subscribe=t), tmp_path)


def test_without_fail_on_data_loss_the_query_continues_at_the_log_start(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = first_run(spark, store, make_topic, tmp_path)
    rows, _ = drain(read_stream(spark, store, subscribe=t, failOnDataLoss="false"), tmp_path)
    assert offsets_by_partition(rows) == {0: [0, 1, 2, 6, 7, 8]}
