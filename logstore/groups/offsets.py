"""Consumer-group offsets: the ``<root>/_offsets`` Delta table.

Each commit appends one row per (group, topic, partition) committed; the
logical row of a key is its latest commit. The committed offset is the next
offset the group will read (Kafka semantics).

"Latest" is the commit order, not a clock: every commit of a group carries
``commit_seq``, one more than the group's previous commit, and records it as
the Delta application transaction ``logstore.groups.offsets.<group>``. Two commits of
one group that race both claim the same number; only one of them creates the
next commit file (put-if-absent, as a topic's committer commits), the other
reads the commit that won, finds the group's number taken and takes the next.
So two committers whose clocks disagree can never move a group back. Rows written before
``commit_seq`` existed (null) are older than every row that has one, and are
ordered among themselves by ``commit_time``. Commits of different groups
never conflict.

Deleting a topic deletes every group's offsets on it, as Kafka does
(:meth:`OffsetsStore.delete_topic`, one Delta commit that removes the rows, as
:meth:`OffsetsStore.delete_group` removes a group's): a group reading the topic
created again under the same name starts from its ``auto.offset.reset`` /
``startingOffsets``, as a new group does.

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

import threading
import time
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from logstore.errors import (
    ConcurrentTransactionsError,
    InvalidGroupIdError,
    InvalidRequestError,
    KafkaStorageError,
    NotCoordinatorError,
)
from logstore.log import tables
from logstore.log.append import CommitInDoubt, LogAppender, NewFile, StaleVersion, VersionTaken
from logstore.log.files import read_parquet
from logstore.storage import absolute, join, storage_for
from logstore.structs import GroupTopicPartition, OffsetCommit

__all__ = ["LATEST_OFFSETS_SQL", "OFFSETS_SCHEMA", "OffsetsStore", "app_fence", "app_offsets", "latest_rows"]

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
_CHECKPOINT_INTERVAL = 100
"""Commits between checkpoints of ``_offsets`` (as ``checkpoint.interval``'s default for topics)."""
_COMMIT_INFO = {"operationParameters": {"mode": "Append", "partitionBy": "[]"}}

LATEST_OFFSETS_SQL = """\
SELECT `group`, topic, `partition`,
       max_by(`offset`, struct(coalesce(commit_seq, -1), commit_time))     AS committed_offset,
       max_by(commit_time, struct(coalesce(commit_seq, -1), commit_time))  AS commit_time
FROM delta.`{path}`
GROUP BY `group`, topic, `partition`"""
"""The one SQL statement that shows the latest committed offsets (format with ``path``)."""


def app_offsets(group: str) -> str:
    """The Delta ``txn`` app id that holds ``group``'s last ``commit_seq``."""
    return f"logstore.groups.offsets.{group}"


def app_fence(group: str, topic: str) -> str:
    """The Delta ``txn`` app id that holds the newest lease generation of ``group`` on ``topic`` (its fence).

    The topic first: a topic's name has no ``/``, so no two (group, topic) pairs share an id.
    """
    return f"logstore.groups.fence.{topic}/{group}"


class OffsetsStore:
    """Commits and reads consumer-group offsets under one root.

    Safe across processes: commits of one group are ordered by ``commit_seq``
    (see the module docstring), commits of different groups never conflict.
    Safe across threads: a read answers with the table as it was when the read
    began or later, never older than a commit that completed before it began.
    The table is created on first commit.

    Args:
        root: the store's root directory.
        clock_ms: wall clock in ms, for ``commit_time`` (shown, not used to order commits).
    """

    def __init__(self, root: str, *, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.path = join(absolute(root), "_offsets")
        self._storage = storage_for(self.path)
        self._clock_ms = clock_ms
        self._dt: DeltaTable | None = None
        self._handle_lock = threading.RLock()
        """One thread at a time moves or reads the shared delta-rs handle (a refresh while another thread lists
        its files would let that thread file an older snapshot under the newer version)."""
        self._cache_version = -1
        self._cache: dict[GroupTopicPartition, OffsetCommit] = {}
        self._files: dict[str, pa.Table] = {}
        self._appender: LogAppender | None = None
        self._append_lock = threading.Lock()
        self._known = -1
        """The newest version of the table this store has seen: its own commits and those it read after a race."""
        self._seqs: dict[str, int] = {}
        """``txn`` versions of the commits read after the handle's version, up to ``_known``."""

    def commit(
        self,
        group: str,
        topic: str,
        offsets: Mapping[int, int],
        *,
        metadata: str | None = None,
        fence: int | None = None,
    ) -> None:
        """Record ``offsets`` (partition → next offset to read) for ``group`` on ``topic``.

        Durable when it returns. Range checks against the topic belong to the caller.

        ``fence``: the generation of the group's lease of ``topic`` that the
        committer holds (:mod:`logstore.groups.leases`), its fencing token. The
        commit is refused when the table holds a newer one (:meth:`fence`):
        another committer took the group over since, and may have read the
        group's offsets already. None: not fenced.

        Raises:
            InvalidGroupIdError: empty group name.
            InvalidRequestError: a negative offset.
            NotCoordinatorError: ``fence`` is older than the table's; nothing was committed.
        """
        if not isinstance(group, str) or not group:
            raise InvalidGroupIdError("consumer group name must be a non-empty string")
        if not offsets:
            return
        for p, o in offsets.items():
            if o < 0:
                raise InvalidRequestError(f"committed offset for partition {p} must be >= 0, got {o}")
        self._write(group, topic, offsets, metadata, fence)

    def fence(self, group: str, topic: str, generation: int) -> None:
        """Record lease ``generation`` of ``group`` on ``topic``: commits fenced with an older one are refused.

        One commit without rows, durable when it returns. Whoever takes a
        group's lease of a topic calls it before it reads the group's offsets:
        a commit of the previous holder either landed before it (and is read)
        or is refused — never answered and unseen.

        Raises:
            NotCoordinatorError: the table holds a newer generation.
        """
        if not isinstance(group, str) or not group:
            raise InvalidGroupIdError("consumer group name must be a non-empty string")
        self._write(group, topic, {}, None, generation)

    def _write(
        self, group: str, topic: str, offsets: Mapping[int, int], metadata: str | None, fence: int | None
    ) -> None:
        dt = self._table()
        if dt is None or "commit_seq" not in dt.schema().to_arrow().names:
            if fence is None:
                self._commit_with_delta_rs(group, topic, offsets, metadata)  # creates the table, or adds the column
                self._table()
                return
            # A fenced commit goes through the appender, whose put-if-absent makes the fence check exact:
            # create the table (or add the column) with no rows first.
            self._commit_with_delta_rs(group, topic, {}, None)
            dt = self._table()
            assert dt is not None
        with self._append_lock:  # the race state below is this store's; other processes race by version
            self._append(dt, group, topic, offsets, metadata, fence)

    def _append(
        self,
        dt: DeltaTable,
        group: str,
        topic: str,
        offsets: Mapping[int, int],
        metadata: str | None,
        fence: int | None,
    ) -> None:
        """Commit one data file and the group's next ``commit_seq`` with the core's log appender.

        delta-rs's ``write_deltalake`` rebuilds the table's state for every
        commit (~30 ms, growing with the commits since the last checkpoint);
        this writes the file and creates the next commit file by link, as a
        topic's committer does (~3 ms). The race Delta's app transaction
        settles is settled here the same way: the version was taken → read the
        commits that took it; if one carries this group's ``txn``, take the
        number after it (a new file), else try the next version with the same file.

        With ``fence``, the commit also carries the lease generation
        (:func:`app_fence`) and is made only while every commit before its
        version holds none newer: the versions up to the one it creates are
        all known here (the handle's snapshot, then those read after each race).
        Without ``offsets`` it is the fence alone.
        """
        app = app_offsets(group)
        guard = app_fence(group, topic)
        appender = self._appender_()
        time_us = self._clock_ms() * 1000
        for _ in range(_COMMIT_ATTEMPTS):
            with self._handle_lock:  # the version and the group's number from one snapshot
                if dt.version() > self._known:  # the handle moved past what this store read itself
                    self._known, self._seqs = dt.version(), {}
                last = self._txn(dt, app)
            seq = 0 if last is None else last + 1
            files = [appender.small_file(_rows(group, topic, offsets, metadata, time_us, seq))] if offsets else []
            txns = ([(app, seq)] if offsets else []) + ([(guard, fence)] if fence is not None else [])
            version = self._known + 1
            while True:
                if fence is not None:
                    self._check_fence(dt, group, topic, fence, files)
                try:
                    appender.commit(version, files, txns, info=_COMMIT_INFO)
                except VersionTaken:
                    if self._read_since(version, app) and offsets:
                        break  # this group committed meanwhile: next number
                    version = self._known + 1
                    continue
                except StaleVersion:
                    self._reload(dt, group)  # log cleanup since this store's last look: from the checkpoint
                    break
                except CommitInDoubt as e:
                    if not self._settled(appender, e):
                        break
                except KafkaStorageError:
                    appender.discard(files)  # nothing was committed
                    raise
                self._known = version
                self._seqs.update(txns)
                return
            appender.discard(files)
        raise ConcurrentTransactionsError(
            f"commit of offsets of group '{group}' lost the race {_COMMIT_ATTEMPTS} times; retry"
        )

    def _txn(self, dt: DeltaTable, app: str) -> int | None:
        """``app``'s ``txn`` version as of ``_known`` (call with the handle's lock held)."""
        return self._seqs[app] if app in self._seqs else tables.txn_version(dt, app)

    def _check_fence(self, dt: DeltaTable, group: str, topic: str, fence: int, files: list[NewFile]) -> None:
        with self._handle_lock:
            held = self._txn(dt, app_fence(group, topic))
        if held is not None and held > fence:
            self._appender_().discard(files)
            raise NotCoordinatorError(
                f"consumer group '{group}' was taken over on topic '{topic}' (lease generation {held}, this "
                f"committer's {fence}): nothing was committed; its members join again at its coordinator"
            )

    def _reload(self, dt: DeltaTable, group: str) -> None:
        try:
            with self._handle_lock:
                tables.refresh(dt)
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot read the offsets of group '{group}': {e}") from e
        self._known = -1

    def _settled(self, appender: LogAppender, e: CommitInDoubt) -> bool:
        try:
            return appender.settle(e.version, e.commit_id)
        except OSError as again:
            raise KafkaStorageError(f"commit of offsets may or may not have landed: {e}; {again}") from again

    def _read_since(self, version: int, app: str) -> bool:
        """Take in the ``txn`` actions of the commits from ``version`` on; True if one is ``app``'s."""
        raced = False
        for v, action in self._appender_().actions_since(version):
            self._known = max(self._known, v)
            txn = action.get("txn")
            if txn is not None:
                self._seqs[txn["appId"]] = int(txn["version"])
                raced = raced or txn["appId"] == app
        return raced

    def _appender_(self) -> LogAppender:
        if self._appender is None:
            self._appender = LogAppender(self.path, _CHECKPOINT_INTERVAL)
        return self._appender

    def _commit_with_delta_rs(self, group: str, topic: str, offsets: Mapping[int, int], metadata: str | None) -> None:
        """The first commit (it creates the table) and one into a table without ``commit_seq`` (it adds it)."""
        for attempt in range(_COMMIT_ATTEMPTS):
            with self._handle_lock:  # write_deltalake moves the handle it is given
                dt = self._table()
                if dt is not None:
                    try:
                        tables.refresh(dt)
                    except (DeltaError, OSError) as e:
                        raise KafkaStorageError(f"cannot read the offsets of group '{group}': {e}") from e
                last = tables.txn_version(dt, app_offsets(group)) if dt is not None else None
                seq = 0 if last is None else last + 1
                rows = _rows(group, topic, offsets, metadata, self._clock_ms() * 1000, seq)
                first = dt.version() + 1 if dt is not None else 0
                try:
                    write_deltalake(
                        dt or self.path,
                        rows,
                        storage_options=None if dt is not None else self._storage.delta_options or None,
                        mode="append",
                        schema_mode="merge",  # a table from before commit_seq gains the column
                        commit_properties=CommitProperties(app_transactions=[Transaction(app_offsets(group), seq)]),
                    )
                    tables.sync_commits(self.path, first)  # delta-rs does not fsync what it writes
                except CommitFailedError as e:
                    # Another commit of this group took number `seq` first: take the next one.
                    if attempt == _COMMIT_ATTEMPTS - 1:
                        raise tables.translate(e, f"commit of offsets of group '{group}'") from e
                    continue
                except (DeltaError, OSError) as e:
                    raise KafkaStorageError(f"cannot commit offsets of group '{group}': {e}") from e
                return

    def delete_group(self, group: str) -> int:
        """Remove every committed offset of ``group`` (Kafka's DeleteGroups); returns how many rows went.

        One Delta commit that removes the group's rows (files holding other groups are rewritten without
        them); durable when it returns. The group's ``commit_seq`` stays in the table's application
        transactions, so a group of that name that commits again continues the sequence. A concurrent
        commit of another group conflicting with the rewrite is retried. Whether the group may be deleted
        (no live reader) is the caller's business.

        Raises:
            KafkaStorageError: the table could not be read or changed.
        """
        return self._delete_where('"group" = ' + _sql_text(group), f"the offsets of group '{group}'")

    def delete_topic(self, topic: str) -> int:
        """Remove every group's committed offsets on ``topic`` (Kafka deletes them with it); returns how many rows went.

        As :meth:`delete_group`, one Delta commit, durable when it returns: a group that commits on a
        topic created again under that name starts a fresh history.

        Raises:
            KafkaStorageError: the table could not be read or changed.
        """
        return self._delete_where("topic = " + _sql_text(topic), f"the offsets of topic '{topic}'")

    def _delete_where(self, predicate: str, what: str) -> int:
        dt = self._table()
        if dt is None:
            return 0
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                with self._handle_lock:  # delete moves the handle
                    tables.refresh(dt)
                    metrics = dt.delete(predicate)
                    tables.sync_commits(self.path, dt.version())
            except CommitFailedError as e:
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise tables.translate(e, f"deletion of {what}") from e
                continue
            except (DeltaError, OSError) as e:
                raise KafkaStorageError(f"cannot delete {what}: {e}") from e
            return int(metrics.get("num_deleted_rows", 0))
        raise AssertionError("unreachable")  # pragma: no cover

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
        with self._handle_lock:
            if self._dt is None:
                try:
                    self._dt = tables.open_table(self.path)
                except TableNotFoundError:
                    return None
            return self._dt

    def _latest(self) -> dict[GroupTopicPartition, OffsetCommit]:
        """The latest commits at the table's newest version; thread-safe.

        The version and its files are taken from the handle in one step, and
        the answer is cached under that version only when nothing newer is
        cached: a slow reader of an older snapshot never files it under a newer
        version, which would hide commits from every later reader until the
        table moves again.
        """
        dt = self._table()
        if dt is None:
            return {}
        with self._handle_lock:
            tables.refresh(dt)
            version = dt.version()
            if version == self._cache_version:
                return self._cache
            root = tables.table_path(dt)
            files = [join(root, p) for p in pa.table(dt.get_add_actions())["path"].to_pylist()]
        # Files never change once committed: read each one once, however often the table moves.
        known = self._files
        read = {f: known.get(f) or read_parquet(f, schema=OFFSETS_SCHEMA) for f in files}
        latest: dict[GroupTopicPartition, OffsetCommit] = {}
        if files:
            for row in latest_rows(pa.concat_tables(list(read.values()))).to_pylist():
                key = GroupTopicPartition(row["group"], row["topic"], row["partition"])
                latest[key] = OffsetCommit(row["offset"], row["commit_time"] // 1000, row["metadata"])
        with self._handle_lock:
            if version > self._cache_version:
                self._cache, self._cache_version, self._files = latest, version, read
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


def _sql_text(value: str) -> str:
    """``value`` as a SQL string literal (quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"
