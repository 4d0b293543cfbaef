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

import itertools
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from logstore.log import tables
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import _files, run_key_compaction
from tests.support.spark_helpers import drain, read_stream

HOUR_MS = 3600 * 1000
NOW_MS = 1_800_000_000_000
FILES = 10
PER_FILE = 10
N = FILES * PER_FILE
MERGED = [0, 2, 5]
"""The files OPTIMIZE rewrites into one: offsets [0, 9], [20, 29] and [50, 59] (non-adjacent)."""


def key_of(offset: int) -> bytes:
    return f"k{offset % 45}".encode()  # offsets 0..54 are superseded by offset + 45


def value_of(offset: int) -> bytes:
    return f"v{offset}".encode()


def write_files(store: LogStore, topic: str, ts_ms: Callable[[int], int]) -> None:
    """``FILES`` commits of ``PER_FILE`` records on partition 0; record ``o`` is stamped ``ts_ms(o)``."""
    w = TopicWriter(store.catalog, topic)
    for f in range(FILES):
        offsets = range(f * PER_FILE, (f + 1) * PER_FILE)
        batch = input_table(
            [0] * PER_FILE,
            [value_of(o) for o in offsets],
            keys=[key_of(o) for o in offsets],
            timestamps_ms=[ts_ms(o) for o in offsets],
        )
        w.append([ProducerBatch(batch)])


def optimize_like(store: LogStore, topic: str, picks: list[int]) -> None:
    """Commit what OPTIMIZE commits when it bins the (offset-ordered) files ``picks`` of partition 0 together."""
    dt = store.catalog.table(topic)
    files = _files.live_files(dt)[0]
    chosen = [files[i] for i in picks]
    data = pa.concat_tables([pq.read_table(f.path, schema=_files.FILE_SCHEMA) for f in chosen])
    merged = _files.write_segment(tables.table_path(dt), 0, data)
    _files.commit(dt, chosen, [merged], data_change=False, operation="OPTIMIZE")
    assert_interleaved(store, topic)


def layout(store: LogStore, topic: str) -> list[tuple[int, int]]:
    """Partition 0's live files as (min, max) offsets, by min offset."""
    return [(f.min_offset, f.max_offset) for f in _files.live_files(store.catalog.table(topic)).get(0, [])]


def overlapping(ranges: list[tuple[int, int]]) -> bool:
    """Whether some file holds an offset inside another file's [min, max] range."""
    return any(a_hi >= b_lo for (_, a_hi), (b_lo, _) in itertools.pairwise(sorted(ranges)))


def assert_interleaved(store: LogStore, topic: str) -> None:
    assert overlapping(layout(store, topic)), layout(store, topic)


def assert_disjoint(store: LogStore, topic: str) -> None:
    assert not overlapping(layout(store, topic)), layout(store, topic)


def fetch_all(store: LogStore, topic: str, start: int) -> list[int]:
    """Offsets a consumer reads from ``start`` to the high watermark, fetch by fetch."""
    got: list[int] = []
    pos = start
    while True:
        recs = store.fetch(topic, 0, pos, max_records=7).records
        if not len(recs):
            return got
        got += recs["offset"].to_pylist()
        assert recs["value"].to_pylist() == [value_of(o) for o in recs["offset"].to_pylist()]
        pos = got[-1] + 1


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
    small = max(f.size_bytes for f in _files.live_files(store.catalog.table(t))[0] if f.min_offset // 10 in MERGED)
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
