"""Consumer-group offsets: the ``<root>/_offsets`` Delta table.

Each commit appends one row per (group, topic, partition) committed; the
logical row of a key is its latest commit (``commit_time``, then table order).
The committed offset is the next offset the group will read (Kafka semantics).
Appends never conflict, so many groups and queries commit concurrently.

The latest committed offsets, in Spark SQL::

    SELECT `group`, topic, `partition`,
           max_by(`offset`, commit_time) AS committed_offset,
           max(commit_time)              AS commit_time
    FROM delta.`<root>/_offsets`
    GROUP BY `group`, topic, `partition`
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from logstore import _delta
from logstore.errors import InvalidGroupIdError, InvalidRequestError, KafkaStorageError

__all__ = ["OFFSETS_SCHEMA", "LATEST_OFFSETS_SQL", "OffsetsStore"]

OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("group", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("commit_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("metadata", pa.string()),
    ]
)

LATEST_OFFSETS_SQL = """\
SELECT `group`, topic, `partition`,
       max_by(`offset`, commit_time) AS committed_offset,
       max(commit_time)              AS commit_time
FROM delta.`{path}`
GROUP BY `group`, topic, `partition`"""
"""The one SQL statement that shows the latest committed offsets (format with ``path``)."""


class OffsetsStore:
    """Commits and reads consumer-group offsets under one root.

    Safe across processes (every commit is a blind Delta append). The table is
    created on first commit.
    """

    def __init__(self, root: str) -> None:
        self.path = os.path.join(os.path.abspath(root), "_offsets")
        self._dt: DeltaTable | None = None
        self._cache_version = -1
        self._cache: dict[tuple[str, str, int], tuple[int, int, str | None]] = {}
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
        now = time.time_ns() // 1000
        n = len(offsets)
        rows = pa.Table.from_arrays(
            [
                pa.array([group] * n, pa.string()),
                pa.array([topic] * n, pa.string()),
                pa.array(list(offsets.keys()), pa.int32()),
                pa.array(list(offsets.values()), pa.int64()),
                pa.array([now] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([metadata] * n, pa.string()),
            ],
            schema=OFFSETS_SCHEMA,
        )
        try:
            write_deltalake(self._table() or self.path, rows, mode="append")
            _delta.sync_commits(self.path, self._dt.version() if self._dt is not None else 0)  # delta-rs skips fsync
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot commit offsets of group '{group}': {e}") from e
        if self._dt is None:
            self._table()

    def committed(
        self, group: str | None = None, topic: str | None = None
    ) -> dict[tuple[str, str, int], tuple[int, int, str | None]]:
        """Latest commits: (group, topic, partition) → (offset, commit time in ms, metadata)."""
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

    def _latest(self) -> dict[tuple[str, str, int], tuple[int, int, str | None]]:
        dt = self._table()
        if dt is None:
            return {}
        _delta.refresh(dt)
        if dt.version() == self._cache_version:
            return self._cache
        files = [os.path.join(_delta.table_path(dt), p) for p in pa.table(dt.get_add_actions())["path"].to_pylist()]
        # Files never change once committed: read each one once, however often the table moves.
        self._files = {f: self._files.get(f) or pq.read_table(f, schema=OFFSETS_SCHEMA) for f in files}
        latest: dict[tuple[str, str, int], tuple[int, int, str | None]] = {}
        if files:
            data = pa.concat_tables(list(self._files.values()))
            data = data.sort_by([("commit_time", "ascending")])
            times = pc.cast(data["commit_time"], pa.int64())
            for g, t, p, o, ts, m in zip(
                data["group"].to_pylist(),
                data["topic"].to_pylist(),
                data["partition"].to_pylist(),
                data["offset"].to_pylist(),
                times.to_pylist(),
                data["metadata"].to_pylist(),
                strict=True,
            ):
                latest[(g, t, p)] = (o, ts // 1000, m)
        self._cache, self._cache_version = latest, dt.version()
        return latest
