"""What maintenance reads from a topic's Delta log, how it commits file changes, and what it reports.

Used by the node's own retention (:mod:`logstore.log.retention`, run by
:mod:`logstore.node.retention`) and by every job of ``maintenance/``. Every
maintenance job plans from the Delta log alone (add actions and their
statistics) and commits with delta-rs ``create_write_transaction``: remove
actions for the files it drops or replaces, add actions for the files it
wrote. Such a commit carries no ``logstore.*`` app transaction and records no
read predicate. Under Delta's optimistic concurrency (delta-rs 1.6):

* a maintenance commit made from a stale snapshot rebases over the writer's
  appends — appends never make maintenance fail;
* the ``TopicWriter`` commits through its own log append (``logstore/log/append.py``):
  when a maintenance commit took the version it wanted, it steps over commits that
  only remove files or rewrite them with ``dataChange=false`` (retention, segment
  compaction) and re-reads the table after one that changes data (key compaction).
  Its offsets come from the high watermark, which maintenance never changes, so a
  racing writer loses and duplicates nothing;
* two maintenance commits that remove the same file conflict: the second
  fails with ``CommitFailedError`` and changes nothing.

Files may hold overlapping offset ranges (Delta's ``OPTIMIZE`` bins them by
size); jobs remove or rewrite a partition's files only in whole runs between
:func:`logstore.log.reader.offset_cuts`, never part of such a run.

The table protocol stays (1, 2): only plain add and remove actions are
written, never deletion vectors or other table features.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.transaction import AddAction, RemoveAction, Transaction

from logstore.config import TopicConfig
from logstore.log import tables
from logstore.log.catalog import Catalog
from logstore.log.compression import file_suffix, parquet_codec
from logstore.log.files import DataFile, data_files, file_stats, offsets_sorted
from logstore.log.reader import offset_cuts
from logstore.log.schema import TOPIC_SCHEMA

__all__ = [
    "FILE_SCHEMA",
    "NewFile",
    "PartitionFiles",
    "PartitionReport",
    "Progress",
    "commit",
    "discard",
    "live_files",
    "log_start_offsets",
    "offset_prefix",
    "partition_files",
    "print_progress",
    "topic_codec",
    "write_segment",
]

FILE_SCHEMA = pa.schema([f for f in TOPIC_SCHEMA if f.name != "partition"])
"""Columns inside a data file (``partition`` lives in the directory name)."""

ROW_GROUP_BYTES = 1 << 20
"""Uncompressed bytes per Parquet row group in files maintenance writes (about a fetch's worth)."""

_MAINTENANCE_METADATA = "logstore.maintenance"

Progress = Callable[[str], None]
"""Receives one line per topic and partition as a job goes (``print`` by default)."""


def print_progress(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class PartitionReport:
    """One job's effect on one partition (one Delta commit, or none)."""

    topic: str
    partition: int
    files_removed: int = 0
    bytes_removed: int = 0
    files_added: int = 0
    bytes_added: int = 0
    records_removed: int = 0
    """Records gone from the log (retention, key compaction); 0 for segment compaction."""
    log_start_offset: int = 0
    """The partition's log start offset after the job."""
    version: int | None = None
    """The Delta version of the job's commit; None when it changed nothing."""


@dataclass(frozen=True)
class NewFile:
    """A data file a job wrote into the table directory, not yet committed."""

    log_path: str
    partition: int
    size_bytes: int
    num_records: int
    min_offset: int
    max_offset: int
    stats: str
    modification_time_ms: int


def live_files(dt_: DeltaTable) -> dict[int, list[DataFile]]:
    """Partition → its live files in offset order, from the Delta log only (:func:`logstore.log.files.data_files`).

    Offset order is by min offset; ranges may overlap (see :func:`offset_prefix`).
    Empty files are left out.
    """
    out: dict[int, list[DataFile]] = {}
    for f in data_files(dt_):
        out.setdefault(f.partition, []).append(f)
    return out


@dataclass(frozen=True)
class PartitionFiles:
    """One partition's live files as columns, in offset order (for jobs that touch few of many files)."""

    partition: int
    log_paths: pa.Array
    min_offset: np.ndarray
    max_offset: np.ndarray
    num_records: np.ndarray
    size_bytes: np.ndarray
    modification_time_ms: np.ndarray
    max_timestamp_ms: np.ndarray
    """float64 ms; NaN where a file has no timestamp statistic."""
    root: str

    def __len__(self) -> int:
        return len(self.min_offset)

    @classmethod
    def of(cls, partition: int, files: Sequence[DataFile], root: str) -> PartitionFiles:
        """Columns from :class:`~logstore.log.files.DataFile` objects (offset order)."""
        return cls(
            partition,
            pa.array([f.log_path for f in files], pa.string()),
            np.array([f.min_offset for f in files], np.int64),
            np.array([f.max_offset for f in files], np.int64),
            np.array([f.num_records for f in files], np.int64),
            np.array([f.size_bytes for f in files], np.int64),
            np.array([f.modification_time_ms for f in files], np.int64),
            np.array([np.nan if f.max_timestamp_ms is None else f.max_timestamp_ms for f in files], np.float64),
            root,
        )

    def file(self, i: int) -> DataFile:
        """File ``i`` as a :class:`~logstore.log.files.DataFile`."""
        log_path = self.log_paths[i].as_py()
        ts = self.max_timestamp_ms[i]
        return DataFile(
            path=os.path.join(self.root, unquote(log_path)),
            partition=self.partition,
            min_offset=int(self.min_offset[i]),
            max_offset=int(self.max_offset[i]),
            num_records=int(self.num_records[i]),
            size_bytes=int(self.size_bytes[i]),
            modification_time_ms=int(self.modification_time_ms[i]),
            log_path=log_path,
            max_timestamp_ms=None if np.isnan(ts) else int(ts),
        )


def partition_files(dt_: DeltaTable) -> dict[int, PartitionFiles] | None:
    """Partition → live files as columns, sorted by offset, without a Python object per file.

    Returns None when some file lacks offset statistics (use :func:`live_files`).
    """
    actions = pa.table(dt_.get_add_actions(flatten=True))
    out: dict[int, PartitionFiles] = {}
    if actions.num_rows == 0:
        return out
    cols = actions.column_names
    if not {"min.offset", "max.offset", "num_records"} <= set(cols) or any(
        actions[c].null_count for c in ("min.offset", "max.offset", "num_records")
    ):
        return None
    actions = actions.filter(pc.greater(actions["num_records"], 0))
    actions = actions.take(
        pc.sort_indices(actions, [("partition.partition", "ascending"), ("min.offset", "ascending")])
    )
    parts = actions["partition.partition"].to_numpy()
    if "max.timestamp" in cols:
        ts = actions["max.timestamp"].cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        max_ts = ts.to_numpy(zero_copy_only=False).astype(np.float64)
    else:
        max_ts = np.full(actions.num_rows, np.nan)
    root = tables.table_path(dt_)
    bounds = np.flatnonzero(np.diff(parts)) + 1
    for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(parts)]]), strict=True):
        if hi <= lo:
            continue
        out[int(parts[lo])] = PartitionFiles(
            int(parts[lo]),
            actions["path"].slice(lo, hi - lo).combine_chunks(),
            actions["min.offset"].slice(lo, hi - lo).to_numpy(),
            actions["max.offset"].slice(lo, hi - lo).to_numpy(),
            actions["num_records"].slice(lo, hi - lo).to_numpy(),
            actions["size_bytes"].slice(lo, hi - lo).to_numpy(),
            actions["modification_time"].slice(lo, hi - lo).to_numpy(),
            max_ts[lo:hi],
            root,
        )
    return out


def offset_prefix(min_offsets: np.ndarray | Sequence[int], max_offsets: np.ndarray | Sequence[int], limit: int) -> int:
    """How many of a partition's first files (min-offset order), at most ``limit``, can go as a whole.

    The largest ``k <= limit`` such that every offset of the first ``k`` files is
    below every offset of the others, so removing or rewriting them leaves
    no record of their range behind in a kept file (0 if none).
    """
    cuts = offset_cuts(min_offsets, max_offsets)
    return int(np.flatnonzero(cuts[: max(0, limit) + 1])[-1])


def write_segment(table_root: str, partition: int, records: pa.Table, compression: str = "snappy") -> NewFile:
    """Write ``records`` (one partition, any column order) as one data file sorted by offset.

    ``compression`` is pyarrow's codec (:func:`topic_codec`; snappy, the node's own). Returns the add-action
    fields, statistics included, for :func:`commit`. Runs wherever the table directory
    is reachable (driver or Spark executor).
    """
    data = records.select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
    if not offsets_sorted(data["offset"]):
        data = data.sort_by("offset")
    rel = f"partition={partition}/part-00000-{uuid.uuid4()}-c000.{file_suffix(compression)}parquet"
    full = os.path.join(table_root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    # Row groups of about ROW_GROUP_BYTES keep a fetch from the middle of a big merged file reading
    # only the row groups around its offsets (Parquet statistics), not the whole file.
    rows = max(1024, int(len(data) * ROW_GROUP_BYTES / max(1, data.nbytes)))
    pq.write_table(data, full, compression=compression, row_group_size=rows, write_page_index=True)
    st = os.stat(full)
    off = pc.min_max(data["offset"])
    lo, hi = off["min"].as_py(), off["max"].as_py()
    return NewFile(rel, partition, st.st_size, len(data), lo, hi, file_stats(data), int(st.st_mtime * 1000))


def topic_codec(catalog: Catalog, config: TopicConfig) -> str:
    """The codec of files maintenance rewrites for a topic of effective config ``config``: its current one.

    Compaction merges files of any codec, so ``producer`` takes the node's ``compression.type``
    (:func:`logstore.log.compression.parquet_codec`).
    """
    return parquet_codec(config.compression_type, catalog.config.topic_defaults.compression_type)


def commit(
    dt_: DeltaTable,
    removes: Sequence[DataFile],
    adds: Sequence[NewFile],
    *,
    data_change: bool,
    operation: str,
    txns: Mapping[str, int] | None = None,
) -> int:
    """One Delta commit removing ``removes`` and adding ``adds``; returns its version.

    ``data_change=False`` marks a rewrite that leaves every record as it was
    (segment compaction), so streaming readers of the Delta table skip it.
    ``txns`` are app transactions (app id → version) the commit records, such
    as retention's ``logstore.lso.<p>``.
    ``dt_`` is left loaded at (at least) the new version.

    Raises:
        deltalake.exceptions.CommitFailedError: another commit removed one of
            ``removes`` first; nothing was committed.
    """
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(
            path=f.log_path,
            data_change=data_change,
            deletion_timestamp=now,
            size=f.size_bytes,
            partition_values={"partition": str(f.partition)},
        )
        for f in removes
    ]
    actions += [
        AddAction(
            a.log_path, a.size_bytes, {"partition": str(a.partition)}, a.modification_time_ms, data_change, a.stats
        )
        for a in adds
    ]
    run_id = str(uuid.uuid4())
    before = dt_.version()
    dt_.create_write_transaction(
        actions,
        "append",
        TOPIC_SCHEMA,
        ["partition"],
        commit_properties=CommitProperties(
            custom_metadata={
                _MAINTENANCE_METADATA: {
                    "operation": operation,
                    "id": run_id,
                    "removed": len(removes),
                    "added": len(adds),
                }
            },
            app_transactions=[Transaction(app, v, now) for app, v in (txns or {}).items()] or None,
        ),
    )
    tables.refresh(dt_)
    tables.sync_commits(tables.table_path(dt_), before + 1)  # delta-rs skips fsync; the commit must survive power loss
    # delta-rs does not return the version it committed at (it may have rebased over others' commits).
    for info in dt_.history(max(1, dt_.version() - before)):
        if (info.get(_MAINTENANCE_METADATA) or {}).get("id") == run_id:
            return int(info["version"])
    return dt_.version()


def log_start_offsets(catalog: Catalog, topic: str) -> list[int]:
    """Each partition's log start offset at the topic's newest version."""
    return [p.log_start_offset for p in catalog.describe_topic(topic).partitions]


def discard(table_root: str, files: Sequence[NewFile]) -> None:
    """Delete files a job wrote but could not commit (they are not in the log)."""
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(table_root, f.log_path))
