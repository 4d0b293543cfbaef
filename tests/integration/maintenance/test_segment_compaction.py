"""Segment compaction with Spark merges small adjacent files without changing a record or an offset."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from logstore.log.file_changes import live_files
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import run_segment_compaction
from tests.support.commits import small_commits
from tests.support.helpers import assert_gap_free

pytestmark = pytest.mark.spark

COLUMNS = ["partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"]


def test_compaction_keeps_every_record_and_reduces_files(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    w = small_commits(store, t, 12, 2)
    path = store.catalog.topic_path(t)
    before = spark.read.format("delta").load(path).select(COLUMNS).localCheckpoint()
    before_info = store.describe_topic(t)
    assert [p.num_files for p in before_info.partitions] == [12, 12]

    reports = run_segment_compaction(store.catalog, t, spark=spark, progress=lambda _: None)

    after = spark.read.format("delta").load(path).select(COLUMNS)
    assert_df_equality(before, after, ignore_row_order=True, ignore_nullable=True)
    info = store.describe_topic(t)
    assert [p.num_files for p in info.partitions] == [1, 1]
    assert [(p.log_start_offset, p.high_watermark) for p in info.partitions] == [(0, 24), (0, 24)]
    assert [r.files_removed for r in reports] == [12, 12] and [r.files_added for r in reports] == [1, 1]
    # the commit says no data changed, and the table stays writable by both engines
    version = reports[0].version
    assert version is not None
    log = os.path.join(path, "_delta_log", f"{version:020d}.json")
    with open(log) as f:
        actions = [json.loads(line) for line in f if line.strip()]
    assert all(a[k]["dataChange"] is False for a in actions for k in a if k in ("add", "remove"))
    assert store.catalog.table(t).protocol().min_writer_version == 2
    # merged files are sorted by offset and carry offset statistics the reader prunes with
    (merged,) = live_files(store.catalog.table(t))[0]
    assert (merged.min_offset, merged.max_offset, merged.num_records) == (0, 23, 24)
    assert store.fetch(t, 0, 10, max_records=5).records["offset"].to_pylist() == [10, 11, 12, 13, 14]
    # the writer that predates the compaction goes on appending gap-free
    w.append([ProducerBatch(input_table([0, 1], [b"after", b"after"]))])
    values = assert_gap_free(store.catalog, t)
    assert len(values[0]) == 25 and len(values[1]) == 25
