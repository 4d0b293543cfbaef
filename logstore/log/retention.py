"""Retention: delete a partition's oldest whole data files, as Kafka deletes closed segments.

For a topic whose ``cleanup.policy`` contains ``delete``, per partition, in
offset order from the log start:

* by time — a file goes when *all* its records are older than
  ``retention.ms`` (its ``max.timestamp`` statistic is before now minus
  ``retention.ms``); deletion stops at the first file that is not;
* by size — while the partition is larger than ``retention.bytes``, its
  oldest file goes as long as the partition stays at or above the limit
  without it (Kafka's rule: retention never cuts below ``retention.bytes``).

The newest file of a partition is never deleted (Kafka's active segment).
When files hold overlapping offset ranges (after Delta's ``OPTIMIZE``), the
prefix shrinks to the largest one whose every offset is below every kept
file's (:func:`logstore.log.file_changes.offset_prefix`): a record is never deleted
while one below it is kept.

One mechanism, two callers: the node runs it by itself every
``log.retention.check.interval.ms`` on the partitions it leads
(:mod:`logstore.node.retention`), and ``logstore maintain retention`` /
``maintain run`` run it from ``maintenance/``. No Spark is involved.

It reads only the Delta log and commits remove actions only — no file
is read, rewritten or added — so its cost follows the files it removes. The
commit records the partition's new log start offset, one past the largest
offset removed, in the ``logstore.lso.<p>`` app transaction
(:func:`logstore.log.catalog.log_start_offset`); fetches below it answer
``OFFSET_OUT_OF_RANGE``. Settings come from the topic's ``logstore.<key>``
properties over the service defaults.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence

import numpy as np
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from logstore.config import TopicConfig
from logstore.errors import ConcurrentTransactionsError
from logstore.log import file_changes, tables
from logstore.log.catalog import Catalog, app_log_start, high_watermark, log_start_offset
from logstore.log.file_changes import PartitionReport, Progress, print_progress
from logstore.log.files import DataFile

__all__ = ["num_files_to_delete", "plan_retention", "run_retention"]

_ATTEMPTS = 5


def num_files_to_delete(cols: file_changes.PartitionFiles, config: TopicConfig, now_ms: int) -> int:
    """How many of a partition's oldest files retention deletes (a prefix; never the last file).

    ``cols`` is in min-offset order; the prefix never ends inside a run of files whose ranges overlap.
    """
    n = len(cols)
    if "delete" not in config.cleanup_policy or n < 2:
        return 0
    closed = n - 1
    drop = 0
    if config.retention_ms >= 0:
        # Statistics keep ms, rounded down: max < cutoff in ms means every record is older than cutoff.
        old = cols.max_timestamp_ms[:closed] < now_ms - config.retention_ms  # NaN (no statistic) is never old
        drop = closed if old.all() else int(np.argmin(old))
    if config.retention_bytes >= 0:
        kept_after = np.cumsum(cols.size_bytes[::-1])[::-1]  # kept_after[i] = bytes of files i..n-1
        # Kafka's rule: file i goes only if the files after it still hold retention.bytes.
        fits = kept_after[1 : closed + 1] >= config.retention_bytes
        drop = max(drop, closed if fits.all() else int(np.argmin(fits)))
    return file_changes.offset_prefix(cols.min_offset, cols.max_offset, drop)


def plan_retention(files: Sequence[DataFile], config: TopicConfig, now_ms: int) -> list[DataFile]:
    """The files of one partition (offset order) that retention deletes: a prefix, never the last."""
    return list(files[: num_files_to_delete(file_changes.PartitionFiles.of(0, files, ""), config, now_ms)])


def run_retention(
    catalog: Catalog,
    topic: str,
    *,
    now_ms: int | None = None,
    progress: Progress = print_progress,
    partitions: Collection[int] | None = None,
) -> list[PartitionReport]:
    """Apply retention to every partition of ``topic`` (or those in ``partitions``) in one Delta commit.

    ``partitions`` limits it to some partitions (a node in cluster mode:
    those it leads); the reports cover only them. Safe beside the topic's
    writer: the commit only removes files and never changes the high
    watermark, which the writer's put-if-absent append steps over
    (:mod:`logstore.log.append`). Works on the log's add actions as columns and builds objects only for the
    files it removes, so its cost follows those files, not the table's size.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        ConcurrentTransactionsError: other maintenance kept removing the same
            files first (after a few re-plans).
    """
    for _attempt in range(_ATTEMPTS):
        dt = catalog.table(topic)
        count, config = catalog.topic_config(topic, dt)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        by_part = file_changes.partition_files(dt)
        if by_part is None:  # some file has no offset statistics: read them the slow way
            root = tables.table_path(dt)
            by_part = {p: file_changes.PartitionFiles.of(p, fs, root) for p, fs in file_changes.live_files(dt).items()}
        mine = range(count) if partitions is None else sorted(p for p in partitions if 0 <= p < count)
        drops = {p: num_files_to_delete(cols, config, now) for p, cols in by_part.items() if p in mine}
        starts = {p: _log_start(dt, p, by_part.get(p)) for p in mine}
        for p, n in drops.items():
            if n:
                starts[p] = max(starts[p], int(by_part[p].max_offset[:n].max()) + 1)
        removes = [by_part[p].file(i) for p, n in drops.items() for i in range(n)]
        version: int | None = None
        if removes:
            txns = {app_log_start(p): starts[p] for p, n in drops.items() if n}
            try:
                version = file_changes.commit(dt, removes, [], data_change=True, operation="retention", txns=txns)
            except CommitFailedError:
                continue  # another maintenance run removed some of these files; plan again
        reports = []
        for p in mine:
            gone = [f for f in removes if f.partition == p]
            r = PartitionReport(
                topic,
                p,
                files_removed=len(gone),
                bytes_removed=sum(f.size_bytes for f in gone),
                records_removed=sum(f.num_records for f in gone),
                log_start_offset=starts[p],
                version=version if gone else None,
            )
            progress(
                f"retention {topic}/{p}: removed {r.files_removed} files ({r.bytes_removed} bytes), "
                f"log start offset {r.log_start_offset}"
            )
            reports.append(r)
        return reports
    raise ConcurrentTransactionsError(f"retention of topic '{topic}': lost the commit race {_ATTEMPTS} times")


def _log_start(dt: DeltaTable, partition: int, cols: file_changes.PartitionFiles | None) -> int:
    """The partition's log start offset at the planned version (from the log only)."""
    top = int(cols.max_offset.max()) + 1 if cols is not None and len(cols) else 0
    return log_start_offset(dt, partition, max(top, high_watermark(dt, partition, [])))
