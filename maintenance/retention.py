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
The job reads only the Delta log and commits remove actions only — no file
is read, rewritten or added — so its cost follows the files it removes. The
log start offset (the smallest offset of the remaining files) moves up;
fetches below it answer ``OFFSET_OUT_OF_RANGE``. Settings come from the
topic's ``logstore.<key>`` properties over the service defaults.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from deltalake.exceptions import CommitFailedError

from logstore.catalog import Catalog
from logstore.config import TopicConfig
from logstore.errors import ConcurrentTransactionsError
from maintenance import _files
from maintenance.report import PartitionReport, Progress, print_progress

__all__ = ["plan_retention", "run_retention"]

_ATTEMPTS = 5


def plan_retention(files: Sequence[_files.LiveFile], config: TopicConfig, now_ms: int) -> list[_files.LiveFile]:
    """The files of one partition (offset order) that retention deletes: a prefix, never the last."""
    if "delete" not in config.cleanup_policy or len(files) < 2:
        return []
    closed = list(files[:-1])
    drop = 0
    if config.retention_ms >= 0:
        cutoff = now_ms - config.retention_ms
        while drop < len(closed):
            newest = closed[drop].max_timestamp_ms
            if newest is None or newest >= cutoff:
                break
            drop += 1
    if config.retention_bytes >= 0:
        remaining = sum(f.size_bytes for f in files[drop:])
        while drop < len(closed) and remaining - closed[drop].size_bytes >= config.retention_bytes:
            remaining -= closed[drop].size_bytes
            drop += 1
    return closed[:drop]


def run_retention(
    catalog: Catalog,
    topic: str,
    *,
    now_ms: int | None = None,
    progress: Progress = print_progress,
) -> list[PartitionReport]:
    """Apply retention to every partition of ``topic`` in one Delta commit.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        ConcurrentTransactionsError: other maintenance kept removing the same
            files first (after a few re-plans).
    """
    for _attempt in range(_ATTEMPTS):
        dt = catalog.table(topic)
        count, config = catalog.topic_config(topic, dt)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        by_part = _files.live_files(dt)
        plans = {p: plan_retention(by_part.get(p, []), config, now) for p in range(count)}
        removes = [f for files in plans.values() for f in files]
        version: int | None = None
        if removes:
            try:
                version = _files.commit(dt, removes, [], data_change=True, operation="retention")
            except CommitFailedError:
                continue  # another maintenance run removed some of these files; plan again
        starts = _files.log_start_offsets(catalog, topic)
        reports = []
        for p in range(count):
            gone = plans[p]
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
