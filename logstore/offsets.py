"""Consumer-group offsets: the ``<root>/_offsets`` Delta table.

Each commit appends one row per (group, topic, partition) committed; the
logical row of a key is its latest commit. The committed offset is the next
offset the group will read (Kafka semantics).

"Latest" is the commit order, not a clock: every commit of a group carries
``commit_seq``, one more than the group's previous commit, and records it as
the Delta application transaction ``logstore.offsets.<group>``. Two commits of
one group that race both claim the same number; Delta lets only one of them
commit, the other re-reads and takes the next number. So two committers whose
clocks disagree can never move a group back. Rows written before
``commit_seq`` existed (null) are older than every row that has one, and are
ordered among themselves by ``commit_time``. Commits of different groups
never conflict.

The latest committed offsets, in Spark SQL (:data:`LATEST_OFFSETS_SQL`)::

    SELECT `group`, topic, `partition`,
           max_by(`offset`, struct(coalesce(commit_seq, -1), commit_time))     AS committed_offset,
           max_by(commit_time, struct(coalesce(commit_seq, -1), commit_time))  AS commit_time
    FROM delta.`<root>/_offsets`
    GROUP BY `group`, topic, `partition`

The table grows a file per commit; the ``offsets`` maintenance job compacts it
to the latest rows plus a bounded history (:mod:`maintenance.offsets`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from logstore import _delta
from logstore.errors import InvalidGroupIdError, InvalidRequestError, KafkaStorageError
from logstore.structs import GroupTopicPartition, OffsetCommit

__all__ = ["LATEST_OFFSETS_SQL", "OFFSETS_SCHEMA", "OffsetsStore", "app_offsets", "latest_rows"]

OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("group", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("commit_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("metadata", pa.string()),
        pa.field("commit_seq", pa.int64()),
    ]
)
"""Columns of ``_offsets``. ``commit_seq`` (the group's commit number) is null in rows older than it."""

_COMMIT_ATTEMPTS = 20

LATEST_OFFSETS_SQL = """\
SELECT `group`, topic, `partition`,
       max_by(`offset`, struct(coalesce(commit_seq, -1), commit_time))     AS committed_offset,
       max_by(commit_time, struct(coalesce(commit_seq, -1), commit_time))  AS commit_time
FROM delta.`{path}`
GROUP BY `group`, topic, `partition`"""
"""The one SQL statement that shows the latest committed offsets (format with ``path``)."""


def app_offsets(group: str) -> str:
    """The Delta ``txn`` app id that holds ``group``'s last ``commit_seq``."""
    return f"logstore.offsets.{group}"


class OffsetsStore:
    """Commits and reads consumer-group offsets under one root.

    Safe across processes: commits of one group are ordered by ``commit_seq``
    (see the module docstring), commits of different groups never conflict.
    The table is created on first commit.

    Args:
        root: the store's root directory.
        clock_ms: wall clock in ms, for ``commit_time`` (shown, not used to order commits).
    """

    def __init__(self, root: str, *, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.path = os.path.join(os.path.abspath(root), "_offsets")
        self._clock_ms = clock_ms
        self._dt: DeltaTable | None = None
        self._cache_version = -1
        self._cache: dict[GroupTopicPartition, OffsetCommit] = {}
        self._files: dict[str, pa.Table] = {}

    def commit(
        self,
        group: str,
        topic: str,
        offsets: Mapping[int, int],
        *,
        metadata: str | None = None,
    ) -> None:
        """Record ``offsets`` (partition → next offset to read) for ``group`` on ``topic``.

        Durable when it returns. Range checks against the topic belong to the caller.

        Raises:
            InvalidGroupIdError: empty group name.
            InvalidRequestError: a negative offset.
        """
        if not isinstance(group, str) or not group:
            raise InvalidGroupIdError("consumer group name must be a non-empty string")
        if not offsets:
            return
        for p, o in offsets.items():
            if o < 0:
                raise InvalidRequestError(f"committed offset for partition {p} must be >= 0, got {o}")
        for attempt in range(_COMMIT_ATTEMPTS):
            dt = self._table()
            if dt is not None:
                try:
                    _delta.refresh(dt)
                except (DeltaError, OSError) as e:
                    raise KafkaStorageError(f"cannot read the offsets of group '{group}': {e}") from e
            last = _delta.txn_version(dt, app_offsets(group)) if dt is not None else None
            seq = 0 if last is None else last + 1
            rows = _rows(group, topic, offsets, metadata, self._clock_ms() * 1000, seq)
            first = dt.version() + 1 if dt is not None else 0
            try:
                write_deltalake(
                    dt or self.path,
                    rows,
                    mode="append",
                    schema_mode="merge",  # a table from before commit_seq gains the column
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_offsets(group), seq)]),
                )
                _delta.sync_commits(self.path, first)  # delta-rs does not fsync what it writes
            except CommitFailedError as e:
                # Another commit of this group took number `seq` first: take the next one.
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise _delta.translate(e, f"commit of offsets of group '{group}'") from e
                continue
            except (DeltaError, OSError) as e:
                raise KafkaStorageError(f"cannot commit offsets of group '{group}': {e}") from e
            if self._dt is None:
                self._table()
            return

    def committed(self, group: str | None = None, topic: str | None = None) -> dict[GroupTopicPartition, OffsetCommit]:
        """Latest commits, of ``group`` and on ``topic`` when given."""
        latest = self._latest()
        return {
            k: v for k, v in latest.items() if (group is None or k[0] == group) and (topic is None or k[1] == topic)
        }

    def groups(self) -> list[str]:
        """Groups that have committed at least once, sorted."""
        return sorted({k[0] for k in self._latest()})

    def _table(self) -> DeltaTable | None:
        if self._dt is None:
            try:
                self._dt = _delta.open_table(self.path)
            except TableNotFoundError:
                return None
        return self._dt

    def _latest(self) -> dict[GroupTopicPartition, OffsetCommit]:
        dt = self._table()
        if dt is None:
            return {}
        _delta.refresh(dt)
        if dt.version() == self._cache_version:
            return self._cache
        files = [os.path.join(_delta.table_path(dt), p) for p in pa.table(dt.get_add_actions())["path"].to_pylist()]
        # Files never change once committed: read each one once, however often the table moves.
        self._files = {f: self._files.get(f) or pq.read_table(f, schema=OFFSETS_SCHEMA) for f in files}
        latest: dict[GroupTopicPartition, OffsetCommit] = {}
        if files:
            for row in latest_rows(pa.concat_tables(list(self._files.values()))).to_pylist():
                key = GroupTopicPartition(row["group"], row["topic"], row["partition"])
                latest[key] = OffsetCommit(row["offset"], row["commit_time"] // 1000, row["metadata"])
        self._cache, self._cache_version = latest, dt.version()
        return latest


def _rows(group: str, topic: str, offsets: Mapping[int, int], metadata: str | None, time_us: int, seq: int) -> pa.Table:
    n = len(offsets)
    return pa.Table.from_arrays(
        [
            pa.array([group] * n, pa.string()),
            pa.array([topic] * n, pa.string()),
            pa.array(list(offsets.keys()), pa.int32()),
            pa.array(list(offsets.values()), pa.int64()),
            pa.array([time_us] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([metadata] * n, pa.string()),
            pa.array([seq] * n, pa.int64()),
        ],
        schema=OFFSETS_SCHEMA,
    )


def latest_rows(data: pa.Table, keep: int = 1) -> pa.Table:
    """The last ``keep`` commits of each (group, topic, partition) in ``data`` (rows of ``_offsets``).

    Ordered by ``commit_seq`` (null: before any number), then ``commit_time``,
    then position in ``data`` (table order). ``commit_time`` comes back as µs
    since the epoch (int64).
    """
    n = len(data)
    ranked = pa.table(
        {
            "group": data["group"],
            "topic": data["topic"],
            "partition": data["partition"],
            "offset": data["offset"],
            "commit_time": pc.cast(data["commit_time"], pa.int64()),
            "metadata": data["metadata"],
            "commit_seq": data["commit_seq"],
            "_order": pc.fill_null(data["commit_seq"], -1),
            "_pos": pa.array(range(n), pa.int64()),
        }
    )
    ranked = ranked.sort_by(
        [
            ("group", "ascending"),
            ("topic", "ascending"),
            ("partition", "ascending"),
            ("_order", "descending"),
            ("commit_time", "descending"),
            ("_pos", "descending"),
        ]
    )
    if keep == 1:
        firsts = ranked.group_by(["group", "topic", "partition"], use_threads=False).aggregate([("_pos", "first")])
        picked = pc.is_in(ranked["_pos"], firsts["_pos_first"])
    else:
        # Rank within each key: the sort put each key's rows together, newest first.
        key_start = _run_starts(ranked)
        idx = np.arange(len(ranked))
        start_of = np.maximum.accumulate(np.where(key_start, idx, 0))
        picked = pa.array(idx - start_of < keep)
    return ranked.filter(picked).drop_columns(["_order", "_pos"])


def _run_starts(t: pa.Table) -> np.ndarray:
    """True where a row's (group, topic, partition) differs from the previous row's."""
    n = len(t)
    starts = np.zeros(n, dtype=bool)
    if n:
        starts[0] = True
    for col in ("group", "topic", "partition"):
        c = t[col].combine_chunks()
        starts[1:] |= pc.not_equal(c.slice(1), c.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return starts
