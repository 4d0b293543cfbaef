"""Key compaction (Kafka's log cleaner): keep the latest record per key. A Spark job.

For a topic whose ``cleanup.policy`` contains ``compact``, per partition:

* the *cleanable* region is the run of files from the log start whose records
  are all older than ``min.compaction.lag.ms`` (file ``max.timestamp``
  statistic); it stops at the first file holding a younger record, so the
  active tail is never touched, and it ends only where no kept file holds an
  offset below its end (:func:`logstore.log.file_changes.offset_prefix`: files with
  overlapping offset ranges, as Delta's ``OPTIMIZE`` leaves them, are
  cleaned together or not at all);
* a record of the cleanable region is dropped when a later record of the
  partition has the same key (a window over ``(partition, key)`` at the
  table version the job planned from), or when it is a tombstone (null value)
  older than ``delete.retention.ms``. Records without a key are kept.

Kept records keep their offsets, so consumers see gaps, never renumbering.
A partition with something to drop has its whole cleanable region rewritten
(as Kafka's cleaner recopies the segments it cleans) into files of about
``segment.bytes``, sorted by offset, in one Delta commit that removes the old
files. The commit touches no app transaction, so the high watermark, the log
start offset and the writer's epoch stay as they were: as in Kafka, compaction
never moves the log start offset, and a fetch from it returns the first record
kept. The commit conflicts only with other maintenance that removed one of the
same files (the partition is then left for the next run).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake.exceptions import CommitFailedError

from logstore.log import file_changes, tables
from logstore.log.catalog import Catalog
from logstore.log.files import DataFile
from maintenance.report import PartitionReport, Progress, print_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["run_key_compaction"]

_WRITTEN_SCHEMA = (
    "partition int, log_path string, size_bytes long, num_records long, "
    "min_offset long, max_offset long, stats string, modification_time_ms long"
)


def _segment_writer(
    root: str, segment_bytes: int, compression: str
) -> Callable[[tuple[pa.Scalar, ...], pa.Table], pa.Table]:
    """A Spark grouped-map function: one partition's kept records → data files of about ``segment_bytes``.

    The files take the topic's current codec (``compression``, pyarrow's name).
    """

    def write(key: tuple[pa.Scalar, ...], records: pa.Table) -> pa.Table:
        partition = int(key[0].as_py())
        records = records.sort_by("offset")
        pieces = max(1, math.ceil(records.nbytes / segment_bytes))
        step = math.ceil(len(records) / pieces)
        out = [
            file_changes.write_segment(root, partition, records.slice(i, step), compression)
            for i in range(0, len(records), step)
        ]
        return pa.Table.from_pylist(
            [
                {
                    "partition": f.partition,
                    "log_path": f.log_path,
                    "size_bytes": f.size_bytes,
                    "num_records": f.num_records,
                    "min_offset": f.min_offset,
                    "max_offset": f.max_offset,
                    "stats": f.stats,
                    "modification_time_ms": f.modification_time_ms,
                }
                for f in out
            ],
            schema=pa.schema(
                [
                    ("partition", pa.int32()),
                    ("log_path", pa.string()),
                    ("size_bytes", pa.int64()),
                    ("num_records", pa.int64()),
                    ("min_offset", pa.int64()),
                    ("max_offset", pa.int64()),
                    ("stats", pa.string()),
                    ("modification_time_ms", pa.int64()),
                ]
            ),
        )

    return write


def run_key_compaction(
    catalog: Catalog,
    topic: str,
    *,
    spark: SparkSession,
    now_ms: int | None = None,
    progress: Progress = print_progress,
) -> list[PartitionReport]:
    """Key-compact every partition of ``topic`` (see the module docstring).

    ``now_ms`` is the clock the lag and tombstone ages are measured against.
    A topic without ``compact`` in its ``cleanup.policy`` is left alone.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    table = catalog.table(topic)
    count, config = catalog.topic_config(topic, table)
    if "compact" not in config.cleanup_policy:
        progress(f"clean {topic}: cleanup.policy={config.cleanup_policy}, nothing to do")
        return []
    now = int(time.time() * 1000) if now_ms is None else now_ms
    lag_cutoff = now - config.min_compaction_lag_ms
    by_part = file_changes.live_files(table)
    dirty: dict[int, list[DataFile]] = {}
    for p, files in by_part.items():
        old = 0
        for f in files:
            if f.max_timestamp_ms is None or f.max_timestamp_ms >= lag_cutoff:
                break
            old += 1
        region = files[: file_changes.offset_prefix([f.min_offset for f in files], [f.max_offset for f in files], old)]
        if region:
            dirty[p] = region

    dropped: dict[int, int] = {}
    written: dict[int, list[file_changes.NewFile]] = {}
    root = tables.table_path(table)
    if dirty:
        tombstone_cutoff = dt.datetime.fromtimestamp((now - config.delete_retention_ms) / 1000, dt.UTC)
        ends = spark.createDataFrame(
            [(p, max(f.max_offset for f in files)) for p, files in dirty.items()], "partition int, _dirty_end long"
        )
        records = (
            spark.read.format("delta").option("versionAsOf", table.version()).load(catalog.topic_path(topic))
        ).join(F.broadcast(ends), "partition")
        latest = F.max("offset").over(Window.partitionBy("partition", "key"))
        superseded = F.col("key").isNotNull() & (F.col("offset") < F.col("_latest"))
        expired = F.col("value").isNull() & (F.col("timestamp") < F.lit(tombstone_cutoff))
        cleanable = (
            records.withColumn("_latest", latest)
            .where(F.col("offset") <= F.col("_dirty_end"))
            .withColumn("_drop", superseded | expired)
            .drop("_latest", "_dirty_end")
            .cache()
        )
        try:
            for row in cleanable.groupBy("partition").agg(F.sum(F.col("_drop").cast("long")).alias("n")).collect():
                if row["n"]:
                    dropped[int(row["partition"])] = int(row["n"])
            if dropped:
                kept = cleanable.where(F.col("partition").isin(list(dropped)) & ~F.col("_drop")).drop("_drop")
                rows = (
                    kept.groupBy("partition")
                    .applyInArrow(
                        _segment_writer(root, config.segment_bytes, file_changes.topic_codec(catalog, config)),
                        _WRITTEN_SCHEMA,
                    )
                    .collect()
                )
                for w in rows:
                    written.setdefault(int(w["partition"]), []).append(
                        file_changes.NewFile(
                            w["log_path"],
                            int(w["partition"]),
                            int(w["size_bytes"]),
                            int(w["num_records"]),
                            int(w["min_offset"]),
                            int(w["max_offset"]),
                            w["stats"],
                            int(w["modification_time_ms"]),
                        )
                    )
        finally:
            cleanable.unpersist()

    versions: dict[int, int] = {}
    for p in sorted(dropped):
        new = sorted(written.get(p, []), key=lambda f: f.min_offset)
        try:
            versions[p] = file_changes.commit(table, dirty[p], new, data_change=True, operation="key-compaction")
        except CommitFailedError:
            file_changes.discard(root, new)
            progress(f"clean {topic}/{p}: skipped, other maintenance changed its files first")
    starts = file_changes.log_start_offsets(catalog, topic)
    reports = []
    for p in range(count):
        done = p in versions
        removed = dirty.get(p, []) if done else []
        new = written.get(p, []) if done else []
        r = PartitionReport(
            topic,
            p,
            files_removed=len(removed),
            bytes_removed=sum(f.size_bytes for f in removed),
            files_added=len(new),
            bytes_added=sum(f.size_bytes for f in new),
            records_removed=dropped.get(p, 0) if done else 0,
            log_start_offset=starts[p],
            version=versions.get(p),
        )
        progress(
            f"clean {topic}/{p}: dropped {r.records_removed} records, rewrote {r.files_removed} files "
            f"({r.bytes_removed} bytes) into {r.files_added} ({r.bytes_added} bytes), "
            f"log start offset {r.log_start_offset}"
        )
        reports.append(r)
    return reports
