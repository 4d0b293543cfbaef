"""Compaction of ``<root>/_offsets``, the consumer-group offsets table.

Every offset commit appends one small file (a query with a 1 s trigger: 86,400
a day), and a reader of the latest offsets reads them all. This job rewrites
the table as one file holding, per (group, topic, partition), the latest
``offsets.history.commits`` commits (the latest one is what the group reads
from; the others are a short history for ``DESCRIBE HISTORY``-style audits),
in one Delta commit that removes the files it read and adds the new one. It
then vacuums the table, deleting files removed more than the vacuum retention
ago (Delta's 7 days by default), so the disk follows the log.

Concurrent offset commits lose nothing. The compaction's commit removes only
the files of the snapshot it read and carries none of the groups' app
transactions; an offset commit is an append of a new file. Delta (delta-rs 1.6) rebases the one over
the other either way: a commit made after the snapshot stays in the table
beside the compacted file, and as its ``commit_seq`` is higher than anything
compacted it stays the latest. Two compactions that race both claim
the app transaction ``logstore.groups.offsets-compaction``: the second fails with
``CONCURRENT_TRANSACTIONS`` and changes nothing (Delta does not refuse two
commits removing the same files with ``dataChange=false`` by itself).

The compaction changes no group's committed offsets, so its add and remove
actions say ``dataChange=false`` (a Delta streaming reader of ``_offsets``
skips the commit).

Runs on the driver (or any process that can reach the root): it reads every
row of ``_offsets`` into memory once, a few tens of bytes per commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from logstore.groups.offsets import OFFSETS_SCHEMA, OffsetsStore, latest_rows
from logstore.log import tables
from maintenance.report import PartitionReport, Progress, print_progress
from maintenance.vacuum import DEFAULT_RETENTION_HOURS

__all__ = [
    "OFFSETS_TABLE",
    "OffsetsCompaction",
    "commit_offsets_compaction",
    "plan_offsets_compaction",
    "run_offsets_compaction",
]

OFFSETS_TABLE = "_offsets"
"""The name the job's reports use for the offsets table (in place of a topic)."""

_MAINTENANCE_METADATA = "logstore.maintenance"
_APP_COMPACTION = "logstore.groups.offsets-compaction"
"""App transaction every compaction carries: of two racing compactions, Delta lets one commit."""


@dataclass(frozen=True)
class OffsetsCompaction:
    """A planned compaction: the files of one snapshot and the rows to keep from them."""

    table: DeltaTable
    removes: list[tuple[str, int]]
    """(path as the add action spells it, size in bytes) of every file of the snapshot."""
    kept: pa.Table
    """The rows to keep, in the table's columns."""
    rows_read: int
    run: int
    """This compaction's number (the last one's + 1), claimed in the commit."""


def plan_offsets_compaction(table: DeltaTable, *, keep: int) -> OffsetsCompaction:
    """Read the table's current files and pick the latest ``keep`` commits of every key."""
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions["path"].to_pylist()
    sizes = actions["size_bytes"].to_pylist()
    root = tables.table_path(table)
    names = [f.name for f in table.schema().fields]
    schema = pa.schema([OFFSETS_SCHEMA.field(n) for n in names])
    data = pa.concat_tables([pq.read_table(os.path.join(root, unquote(p)), schema=OFFSETS_SCHEMA) for p in paths])
    kept = latest_rows(data, keep) if len(data) else data
    kept = kept.set_column(
        kept.schema.get_field_index("commit_time"),
        "commit_time",
        kept["commit_time"].cast(pa.int64()).cast(OFFSETS_SCHEMA.field("commit_time").type),
    )
    last = tables.txn_version(table, _APP_COMPACTION)
    removes = list(zip(paths, sizes, strict=True))
    return OffsetsCompaction(
        table, removes, kept.select(names).cast(schema), len(data), 0 if last is None else last + 1
    )


def commit_offsets_compaction(plan: OffsetsCompaction) -> tuple[int, int]:
    """Write the kept rows as one file and commit it in place of the planned files.

    Returns (bytes written, the table version after the commit).

    Raises:
        ConcurrentTransactionsError: another compaction removed the files first;
            nothing changed.
        KafkaStorageError: the file or the commit could not be written.
    """
    root = tables.table_path(plan.table)
    rel = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    full = os.path.join(root, rel)
    try:
        pq.write_table(plan.kept, full, compression="snappy")
        with open(full, "rb") as f:
            os.fsync(f.fileno())  # the commit will point at it: it must be on disk first
        size = os.path.getsize(full)
        now_ms = int(time.time() * 1000)
        stats = json.dumps({"numRecords": len(plan.kept)})
        actions: list[AddAction | RemoveAction] = [
            RemoveAction(path=p, data_change=False, deletion_timestamp=now_ms, size=s, partition_values={})
            for p, s in plan.removes
        ]
        actions.append(AddAction(rel, size, {}, now_ms, False, stats))
        before = plan.table.version()
        plan.table.create_write_transaction(
            actions,
            "append",
            plan.kept.schema,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(_APP_COMPACTION, plan.run)],
                custom_metadata={
                    _MAINTENANCE_METADATA: {"operation": "offsets-compaction", "removed": len(plan.removes), "added": 1}
                },
            ),
        )
    except CommitFailedError as e:
        _remove_quietly(full)  # certainly not in the log: another commit won
        raise tables.translate(e, "compaction of _offsets") from e
    except (DeltaError, OSError) as e:
        # The outcome may be unknown: the file stays (vacuum deletes it if no version refers to it).
        raise tables.translate(e, "compaction of _offsets") from e
    tables.refresh(plan.table)
    tables.sync_commits(root, before + 1)  # delta-rs does not fsync its commit file
    return size, plan.table.version()


def run_offsets_compaction(
    root: str,
    *,
    keep: int,
    vacuum_retention_hours: int = DEFAULT_RETENTION_HOURS,
    enforce_retention_duration: bool = True,
    progress: Progress = print_progress,
) -> list[PartitionReport]:
    """Compact ``<root>/_offsets`` to the latest ``keep`` commits per key, then vacuum it.

    Nothing to do (no table, or already one file) reports nothing removed.

    Raises:
        ConcurrentTransactionsError: another compaction committed first.
        KafkaStorageError: the table cannot be read or written, or vacuum refused
            its retention window.
    """
    path = OffsetsStore(root).path
    try:
        table = tables.open_table(path)
    except TableNotFoundError:
        progress(f"offsets {OFFSETS_TABLE}: no offsets committed yet")
        return []
    report = PartitionReport(OFFSETS_TABLE, 0)
    if len(pa.table(table.get_add_actions(flatten=True))) > 1:
        plan = plan_offsets_compaction(table, keep=keep)
        written, version = commit_offsets_compaction(plan)
        report = PartitionReport(
            OFFSETS_TABLE,
            0,
            files_removed=len(plan.removes),
            bytes_removed=sum(s for _, s in plan.removes),
            files_added=1,
            bytes_added=written,
            records_removed=plan.rows_read - len(plan.kept),
            version=version,
        )
    try:
        deleted = table.vacuum(
            retention_hours=vacuum_retention_hours,
            dry_run=False,
            enforce_retention_duration=enforce_retention_duration,
        )
    except DeltaError as e:
        raise tables.translate(e, "vacuum of _offsets") from e
    progress(
        f"offsets {OFFSETS_TABLE}: {report.files_removed} files ({report.records_removed} old commits) compacted "
        f"into {report.files_added}; vacuum deleted {len(deleted)} unreferenced files"
    )
    return [report]


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
