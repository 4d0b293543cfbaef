"""Segment compaction: merge runs of small adjacent files of a partition towards ``segment.bytes``.

Many small commits leave many small files; every file costs a reader an open
and the writer's commits a little more log to carry. Per partition, in offset
order, adjacent files smaller than ``segment.bytes`` are grouped greedily into
bins of at most ``segment.bytes`` (input bytes); each bin of two or more files
becomes one file holding the same records, sorted by offset, so a file's
``[min, max]`` offset range stays a contiguous slice of the partition and the
readers' offset pruning stays sharp. Files already at ``segment.bytes`` are
left alone, and nothing changes across a bin boundary.

Files whose offset ranges overlap (Delta's ``OPTIMIZE`` bins files by size,
not offset) form a run (:func:`logstore.log.reader.offset_runs`) that is binned
as one unit and always rewritten, whatever its size, into files of about
``segment.bytes`` with disjoint ranges in offset order: compaction repairs
such a layout.

Records and offsets are unchanged, so the commit (per partition: remove the
bin's files, add the merged file) says ``dataChange=false``. Bins are
rewritten as Spark tasks when a SparkSession is given (each task reads its
files with Arrow and writes the merged one into the table directory, so the
bytes of every record are copied as they are), else in this process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.exceptions import CommitFailedError

from logstore.log import file_changes, tables
from logstore.log.catalog import Catalog
from logstore.log.files import DataFile
from logstore.log.reader import offset_runs
from maintenance.report import PartitionReport, Progress, print_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["plan_segments", "run_segment_compaction"]


def plan_segments(files: Sequence[DataFile], segment_bytes: int) -> list[list[DataFile]]:
    """Bins of adjacent small files (offset order) to merge; only bins of two or more files.

    A run of files with overlapping offset ranges never straddles a bin boundary,
    and a run of two or more files is always in a bin (alone when it is at least
    ``segment_bytes`` big).
    """
    bins: list[list[DataFile]] = []
    current: list[DataFile] = []
    size = 0
    for run in offset_runs(files):
        run_size = sum(f.size_bytes for f in run)
        if run_size >= segment_bytes:
            bins += [current, run]  # a big file alone is left as it is (bins of one are dropped)
            current, size = [], 0
            continue
        if current and size + run_size > segment_bytes:
            bins.append(current)
            current, size = [], 0
        current += run
        size += run_size
    bins.append(current)
    return [b for b in bins if len(b) >= 2]


def _rewrite_bin(task: tuple[str, int, list[str], int, str]) -> list[file_changes.NewFile]:
    """Merge one bin's files into ``pieces`` files of consecutive offset ranges (on a Spark executor or in-process).

    The files take the topic's current codec (``compression``), whatever codecs the merged ones had.
    """
    root, partition, paths, pieces, compression = task
    data = pa.concat_tables([pq.read_table(p, schema=file_changes.FILE_SCHEMA) for p in paths]).sort_by("offset")
    step = max(1, math.ceil(len(data) / max(1, pieces)))
    return [
        file_changes.write_segment(root, partition, data.slice(i, step), compression) for i in range(0, len(data), step)
    ]


def run_segment_compaction(
    catalog: Catalog,
    topic: str,
    *,
    spark: SparkSession | None = None,
    segment_bytes: int | None = None,
    progress: Progress = print_progress,
) -> list[PartitionReport]:
    """Compact every partition of ``topic``; one Delta commit per partition that changed.

    ``segment_bytes`` overrides the topic's ``segment.bytes``. A partition
    whose commit loses a race with other maintenance (which removed one of its
    input files) is left as it was, its merged files deleted, for the next run.
    """
    dt = catalog.table(topic)
    count, config = catalog.topic_config(topic, dt)
    target = segment_bytes if segment_bytes is not None else config.segment_bytes
    by_part = file_changes.live_files(dt)
    root = tables.table_path(dt)
    plans = {p: plan_segments(by_part.get(p, []), target) for p in range(count)}
    codec = file_changes.topic_codec(catalog, config)
    tasks = [
        (root, p, [f.path for f in b], math.ceil(sum(f.size_bytes for f in b) / max(1, target)), codec)
        for p in range(count)
        for b in plans[p]
    ]
    if tasks and spark is not None:
        written = spark.sparkContext.parallelize(tasks, len(tasks)).map(_rewrite_bin).collect()
    else:
        written = [_rewrite_bin(t) for t in tasks]
    starts = file_changes.log_start_offsets(catalog, topic)
    reports = []
    i = 0
    for p in range(count):
        bins = plans[p]
        new = [f for files in written[i : i + len(bins)] for f in files]
        i += len(bins)
        removes = [f for b in bins for f in b]
        version = None
        if removes:
            try:
                version = file_changes.commit(dt, removes, new, data_change=False, operation="segment-compaction")
            except CommitFailedError:
                file_changes.discard(root, new)
                progress(f"compact {topic}/{p}: skipped, other maintenance changed its files first")
                removes, new = [], []
        r = PartitionReport(
            topic,
            p,
            files_removed=len(removes),
            bytes_removed=sum(f.size_bytes for f in removes),
            files_added=len(new),
            bytes_added=sum(f.size_bytes for f in new),
            log_start_offset=starts[p],
            version=version,
        )
        progress(
            f"compact {topic}/{p}: merged {r.files_removed} files ({r.bytes_removed} bytes) "
            f"into {r.files_added} ({r.bytes_added} bytes)"
        )
        reports.append(r)
    return reports
