"""Files whose offset ranges overlap, as Delta's OPTIMIZE leaves them: nothing is skipped, repeated or lost.

OPTIMIZE bins files by size, not by offset: it can rewrite the files holding
[0, 9], [20, 29] and [50, 59] into one file holding all three while [10, 19],
[30, 39] and [40, 49] stay as they were. Here key compaction cleans such a
layout with Spark, and Spark's own OPTIMIZE builds one on a table whose
sizes make it bin non-adjacent files; the reader, retention, segment
compaction and the source's slices over it are in
``tests/unit/log/test_overlapping_files.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from logstore.log import file_changes
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import run_key_compaction
from tests.support.overlapping import (
    FILES,
    HOUR_MS,
    MERGED,
    NOW_MS,
    PER_FILE,
    N,
    assert_disjoint,
    assert_interleaved,
    fetch_all,
    layout,
    optimize_like,
    value_of,
    write_files,
)
from tests.support.spark_helpers import drain, read_stream


@pytest.mark.spark
def test_key_compaction_cleans_an_interleaved_run_whole_or_not_at_all(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1, cleanup_policy="compact", delete_retention_ms=24 * HOUR_MS)
    old = {o for f in [*MERGED, 1] for o in range(f * PER_FILE, (f + 1) * PER_FILE)}
    write_files(store, t, lambda o: NOW_MS - 5 * HOUR_MS if o in old else NOW_MS - (2 * HOUR_MS if o < 50 else 0))
    optimize_like(store, t, MERGED)

    def compact(now_ms: int) -> None:
        run_key_compaction(store.catalog, t, spark=spark, now_ms=now_ms, progress=lambda _: None)

    # min.compaction.lag.ms = 1h: [30, 49] is too young, so the run [0, 59] is left whole.
    store.alter_topic(t, config={"min.compaction.lag.ms": HOUR_MS})
    compact(NOW_MS - HOUR_MS)
    assert fetch_all(store, t, 0) == list(range(N))
    compact(NOW_MS)  # the whole run is cleanable now: 0..54 are superseded by offset + 45
    assert fetch_all(store, t, 0) == list(range(55, N))
    assert_disjoint(store, t)
    assert store.describe_topic(t).partitions[0].log_start_offset == 0


@pytest.mark.spark
def test_spark_optimize_layout_reads_every_record_once(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    t = make_topic(partitions=1)
    w = TopicWriter(store.catalog, t)
    for f in range(FILES):
        offsets = range(f * PER_FILE, (f + 1) * PER_FILE)
        # Files 1, 3, 4 and 6..9 carry big values: above OPTIMIZE's minFileSize, they are left alone.
        pad = 0 if f in MERGED else 2_000
        w.append([ProducerBatch(input_table([0] * PER_FILE, [value_of(o) + os.urandom(pad) for o in offsets]))])
    small = max(
        f.size_bytes for f in file_changes.live_files(store.catalog.table(t))[0] if f.min_offset // 10 in MERGED
    )
    spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(small + 1))
    try:
        spark.sql(f"OPTIMIZE delta.`{store.catalog.topic_path(t)}`")
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.minFileSize")
    assert_interleaved(store, t)
    assert (0, 59) in layout(store, t)

    for o in range(N):
        recs = store.fetch(t, 0, o, max_records=3).records
        assert recs["offset"].to_pylist() == list(range(o, min(o + 3, N)))
        assert recs["value"][0].as_py().startswith(value_of(o))
    query = read_stream(
        spark, store, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=15, maxRecordsPerPartition=4
    )
    rows, q = drain(query, tmp_path)
    offsets = sorted(r.offset for r in rows.select("offset").collect())
    assert offsets == list(range(N))
    assert len([p for p in q.recentProgress if p["numInputRows"]]) > 1  # the trigger limit did cut slices
