"""A topic deleted and created again under a query, its new ``_delta_log`` with the old inode.

The query must notice by the topic's ID: with ``failOnDataLoss=true`` it fails
naming the topic and both IDs; with ``false`` it reads the new topic from
offset 0 — never the old snapshot, never skipping the new topic's first records.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from logstore.config import load_config
from logstore.store import LogStore
from tests.support.inodes import recreate_reusing_log_inode
from tests.support.spark_helpers import produce, read_stream

pytestmark = pytest.mark.spark

ATTEMPTS = 4
_names = itertools.count()


def _recreated(
    spark: SparkSession, store: LogStore, tmp_path: Path, *, fail_on_data_loss: bool, running: bool
) -> Iterator[tuple[StreamingQuery, str, str, str]]:
    """Yields (query, topic, old ID, output table path) once the topic was created again with the old log inode.

    The query read the old topic to its end (36 records, 13 table versions) first;
    the new topic gets 3 records in 2 commits: fewer versions than the old one had.
    ``running``: the query runs on meanwhile; else it is stopped before the delete
    and started again from its checkpoint after.
    """
    other = LogStore(load_config(environ={}, path=None, overrides={"logstore.root": store.config.root}))
    for _ in range(ATTEMPTS):
        n = next(_names)
        topic, table = f"recreated-{n}", str(tmp_path / f"out-{n}")
        store.create_topic(topic, 1)
        for _ in range(12):
            produce(store, topic, [0] * 3, prefix="old-")
        old_id = store.catalog.topic_id(topic)
        assert old_id is not None
        df = read_stream(
            spark, store, subscribe=topic, startingOffsets="earliest", failOnDataLoss=str(fail_on_data_loss).lower()
        )
        writer = df.writeStream.format("delta").option("checkpointLocation", str(tmp_path / f"checkpoint-{n}"))
        q = writer.start(table)
        try:
            q.processAllAvailable()
            assert spark.read.format("delta").load(table).count() == 36
            if not running:
                q.stop()
            path = store.catalog.topic_path(topic)
            reused = recreate_reusing_log_inode(
                path, lambda t=topic: other.delete_topic(t), lambda t=topic: other.create_topic(t, 1)
            )
            if reused:
                produce(other, topic, [0, 0], prefix="new-")
                produce(other, topic, [0], prefix="new-2-")
                yield (q if running else writer.start(table)), topic, old_id, table
                return
        finally:
            for active in spark.streams.active:
                active.stop()
    pytest.skip("the file system did not hand the old _delta_log inode back")


def test_without_fail_on_data_loss_a_running_query_reads_the_topic_created_again_from_offset_0(
    spark: SparkSession, store: LogStore, tmp_path: Path
) -> None:
    for q, topic, _old_id, table in _recreated(spark, store, tmp_path, fail_on_data_loss=False, running=True):
        q.processAllAvailable()
        new = (
            spark.read.format("delta")
            .load(table)
            .where("CAST(value AS STRING) LIKE 'new-%'")
            .orderBy("offset")
            .collect()
        )
        assert [(r["offset"], bytes(r["value"]).decode()) for r in new] == [(0, "new-0"), (1, "new-1"), (2, "new-2-0")]
        assert {r["topic"] for r in new} == {topic}


def test_with_fail_on_data_loss_a_query_fails_naming_the_topic_and_both_ids(
    spark: SparkSession, store: LogStore, tmp_path: Path
) -> None:
    for q, topic, old_id, _table in _recreated(spark, store, tmp_path, fail_on_data_loss=True, running=False):
        new_id = store.catalog.topic_id(topic)
        with pytest.raises(StreamingQueryException) as failed:
            q.processAllAvailable()
        message = str(failed.value)
        assert "INCONSISTENT_TOPIC_ID" in message and f"topic '{topic}' was deleted and created again" in message
        assert old_id in message and str(new_id) in message
