"""Vacuum: delete data files no version within the retention window still references.

Retention and compaction only *remove* files from the Delta log; the files
stay on disk so readers and time travel at older versions keep working. Vacuum
deletes those older than ``retention_hours`` — by default Delta's 7 days
(``delta.deletedFileRetentionDuration``), which is far longer than any fetch
or Spark batch reads one version. Shorter windows must be asked for
explicitly (``enforce_retention_duration=False``), as Delta requires.
"""

from __future__ import annotations

import os
from urllib.parse import unquote

from deltalake.exceptions import DeltaError

from logstore.log import file_changes, tables
from logstore.log.catalog import Catalog
from maintenance.report import PartitionReport, Progress, print_progress

__all__ = ["DEFAULT_RETENTION_HOURS", "run_vacuum"]

DEFAULT_RETENTION_HOURS = 168
"""Delta's default ``delta.deletedFileRetentionDuration`` (7 days)."""


def run_vacuum(
    catalog: Catalog,
    topic: str,
    *,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    enforce_retention_duration: bool = True,
    progress: Progress = print_progress,
) -> list[PartitionReport]:
    """Delete unreferenced files of ``topic`` older than ``retention_hours``.

    Raises:
        KafkaStorageError: delta-rs refused (e.g. a window below the table's
            ``delta.deletedFileRetentionDuration`` while it is enforced).
    """
    table = catalog.table(topic)
    root = tables.table_path(table)
    try:
        # A dry run first, to know the sizes of what is about to go.
        candidates = table.vacuum(
            retention_hours=retention_hours, dry_run=True, enforce_retention_duration=enforce_retention_duration
        )
        sizes = {rel: _size(root, rel) for rel in candidates}
        deleted = table.vacuum(
            retention_hours=retention_hours,
            dry_run=False,
            enforce_retention_duration=enforce_retention_duration,
        )
    except DeltaError as e:
        raise tables.translate(e, f"vacuum of topic '{topic}'") from e
    by_part: dict[int, tuple[int, int]] = {}
    for rel in deleted:
        part = _partition_of(rel)
        n, size = by_part.get(part, (0, 0))
        by_part[part] = (n + 1, size + sizes.get(rel, 0))
    starts = file_changes.log_start_offsets(catalog, topic)
    reports = []
    for p, start in enumerate(starts):
        n, size = by_part.get(p, (0, 0))
        reports.append(PartitionReport(topic, p, files_removed=n, bytes_removed=size, log_start_offset=start))
        progress(f"vacuum {topic}/{p}: deleted {n} unreferenced files")
    return reports


def _partition_of(rel: str) -> int:
    for piece in rel.split("/"):
        if piece.startswith("partition="):
            try:
                return int(piece.removeprefix("partition="))
            except ValueError:
                break
    return -1


def _size(root: str, rel: str) -> int:
    try:
        return os.path.getsize(rel if os.path.isabs(rel) else os.path.join(root, unquote(rel)))
    except OSError:
        return 0
