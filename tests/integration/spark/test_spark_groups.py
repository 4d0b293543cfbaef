"""Consumer groups on the Spark source: start from the group, commit after every batch, one live query."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

import logstore_cli
from logstore.groups.offsets import LATEST_OFFSETS_SQL, OFFSETS_SCHEMA, OffsetsStore
from logstore.store import LogStore
from tests.support.spark_helpers import batch_sizes, committed, drain, offsets_by_partition, produce, read_stream


@pytest.mark.spark
def test_group_offsets_reach_the_high_watermark_after_available_now(
    spark: SparkSession,
    store: LogStore,
    make_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    t = make_topic(partitions=3)
    produce(store, t, [0] * 7 + [1] * 5 + [2] * 2)
    _, q = drain(
        read_stream(spark, store, subscribe=t, group="billing", startingOffsets="earliest", maxOffsetsPerTrigger=5),
        tmp_path,
    )
    assert len(batch_sizes(q)) >= 3  # the last of several batches was committed too
    hws = {p.partition: p.high_watermark for p in store.describe_topic(t).partitions}
    assert committed(store, "billing", t) == hws == {0: 7, 1: 5, 2: 2}
    lag = {(g.partition, g.committed_offset, g.high_watermark, g.lag) for g in store.describe_group("billing")}
    assert lag == {(0, 7, 7, 0), (1, 5, 5, 0), (2, 2, 2, 0)}
    # `logstore groups describe` shows the query's position.
    produce(store, t, [1, 1])
    assert logstore_cli.main(["groups", "describe", "billing", "--root", store.config.root]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[2:] for r in rows] == [["0", "7", "7", "0"], ["1", "5", "7", "2"], ["2", "2", "2", "0"]]


@pytest.mark.spark
def test_a_new_query_of_a_group_starts_at_its_committed_offsets(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 0, 0, 1, 1])
    store.commit_offsets("g", t, {0: 2})  # partition 1 never committed: startingOffsets applies
    rows, _ = drain(read_stream(spark, store, subscribe=t, group="g", startingOffsets="earliest"), tmp_path / "a")
    assert offsets_by_partition(rows) == {0: [2], 1: [0, 1]}
    produce(store, t, [0, 1])
    # Another query (new checkpoint) of the same group picks up where the first one left off.
    rows, _ = drain(read_stream(spark, store, subscribe=t, group="g", startingOffsets="earliest"), tmp_path / "b")
    assert offsets_by_partition(rows) == {0: [3], 1: [2]}
    assert committed(store, "g", t) == {0: 4, 1: 3}


@pytest.mark.spark
def test_a_second_live_query_of_a_group_fails_fast(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=1)
    produce(store, t, [0, 0])
    first = (
        read_stream(spark, store, subscribe=t, group="g", startingOffsets="earliest")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "first"))
        .start()
    )
    try:
        first.processAllAvailable()
        second = (
            read_stream(spark, store, subscribe=t, group="g")
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "second"))
            .start()
        )
        with pytest.raises(StreamingQueryException, match=f"GROUP_SUBSCRIBED_TO_TOPIC.*'g'.*'{t}'"):
            second.awaitTermination()
        # Another group reads the same topic at the same time.
        rows, _ = drain(read_stream(spark, store, subscribe=t, group="other", startingOffsets="earliest"), tmp_path)
        assert rows.count() == 2
    finally:
        first.stop()
    # Stopping the first query released its lease: the group can start a new query.
    third = (
        read_stream(spark, store, subscribe=t, group="g")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "third"))
        .trigger(availableNow=True)
        .start()
    )
    third.awaitTermination()
    assert committed(store, "g", t) == {0: 2}


@pytest.mark.spark
def test_the_latest_offsets_sql_follows_commit_order_not_clocks(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path)
    path = os.path.join(root, "_offsets")
    old_schema = pa.schema([f for f in OFFSETS_SCHEMA if f.name != "commit_seq"])
    # A table from before commit numbers: its rows are ordered by their clocks.
    old = pa.table(
        {
            "group": ["g", "g", "h"],
            "topic": ["t"] * 3,
            "partition": [0, 1, 0],
            "offset": [7, 5, 9],
            "commit_time": [3, 2, 1],
        }
    )
    write_deltalake(path, old.append_column("metadata", pa.nulls(3, pa.string())).cast(old_schema))
    ahead = OffsetsStore(root, clock_ms=lambda: 2_000_000_000_000)
    behind = OffsetsStore(root, clock_ms=lambda: 1_000_000_000_000)
    ahead.commit("g", "t", {0: 10})
    behind.commit("g", "t", {0: 3})  # the latest commit, from a clock behind
    rows = spark.sql(LATEST_OFFSETS_SQL.format(path=path)).collect()
    got = {(r["group"], r["topic"], r["partition"]): r["committed_offset"] for r in rows}
    assert got == {("g", "t", 0): 3, ("g", "t", 1): 5, ("h", "t", 0): 9}
    assert got == {k: v[0] for k, v in OffsetsStore(root).committed().items()}
