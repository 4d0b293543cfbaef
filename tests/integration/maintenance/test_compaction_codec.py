"""Key compaction (Spark reads the files, LZ4_RAW too) rewrites them in the topic's current ``compression.type``."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from logstore.log.files import data_files
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import run_key_compaction

pytestmark = pytest.mark.spark

HOUR_MS = 3600 * 1000
NOW_MS = 1_800_000_000_000


def test_key_compaction_writes_the_topic_codec(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1, cleanup_policy="compact", compression_type="lz4")  # LZ4_RAW, which Spark reads too
    old = [NOW_MS - 2 * HOUR_MS] * 3
    store.append(
        t, [ProducerBatch(input_table([0] * 3, [b"1", b"2", b"3"], keys=[b"a", b"b", b"a"], timestamps_ms=old))]
    )
    store.alter_topic(t, config={"compression.type": "zstd"})
    store.append(t, [ProducerBatch(input_table([0, 0], [b"4", b"5"], keys=[b"b", b"c"], timestamps_ms=old[:2]))])

    (report,) = run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS, progress=lambda _: None)

    assert report.records_removed == 2
    files = data_files(store.catalog.table(t))
    codecs = set()
    for f in files:
        meta = pq.ParquetFile(f.path).metadata
        codecs |= {meta.row_group(0).column(c).compression for c in range(meta.num_columns)}
    assert codecs == {"ZSTD"}
    records = store.fetch(t, 0, 0).records
    assert records.select(["offset", "key", "value"]).to_pylist() == [
        {"offset": 2, "key": b"a", "value": b"3"},
        {"offset": 3, "key": b"b", "value": b"4"},
        {"offset": 4, "key": b"c", "value": b"5"},
    ]
