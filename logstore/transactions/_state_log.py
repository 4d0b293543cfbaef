"""The ``<root>/_transactions/`` Delta table: one row per state transition of a transactional id.

The table is the coordinator's log, as Kafka's ``__transaction_state`` topic
is: every transition the coordinator decides (``Empty`` after an ``init``,
``Ongoing`` when a transaction begins, ``PrepareCommit`` when a commit is
decided, ``CompleteCommit``, ``CompleteAbort``) is appended as a row and
fsynced before the coordinator acts on it. The newest row of a
``transactional_id`` (highest ``row_seq``) is its state; a node that starts
reads them all back, rolls every ``PrepareCommit`` forward and aborts every
``Ongoing`` transaction.

The first row creates the table with delta-rs; every later one is a data file
and a put-if-absent commit file made by the core's
:class:`~logstore.log.append.LogAppender`, as a topic's commits are (a few ms,
flat as the table grows, where delta-rs's ``write_deltalake`` costs ~30 ms and
grows). A version taken by another writer is stepped over.

In cluster mode every node writes the one table, each for the ids it
coordinates, and the writes of an id are **fenced**: a node that takes an id
over (:meth:`StateLog.take_over`) commits the id's next coordinator epoch as a
Delta ``txn`` action (app id ``logstore.transactions.coordinator.<tid>``), and
every later row of the id carries its epoch in a put-if-absent commit on the
next version that is made only while no commit before it holds a newer epoch
for the id (the versions before it are all known: the snapshot read, then the
commits read after each lost race), as group offsets are fenced. A deposed
coordinator's write fails with ``NOT_COORDINATOR`` and nothing of it lands.

Every ``compact_every`` rows the log compacts itself, as Kafka compacts
``__transaction_state``: one commit replaces every file with one holding the
newest row of each id (``dataChange=false``), and a vacuum deletes the files
removed more than the vacuum retention (7 days) ago, so the table and the
start-up read stay as small as the number of ids.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from logstore.common.fsync import fsync_path
from logstore.errors import ConcurrentTransactionsError, KafkaStorageError, LogstoreError, NotCoordinatorError
from logstore.log import tables
from logstore.log.append import CommitInDoubt, LogAppender, StaleVersion, VersionTaken

__all__ = ["STATE_SCHEMA", "StateLog", "StateRow", "app_coordinator"]

log = logging.getLogger("logstore.transactions")

_COMMIT_ATTEMPTS = 20
_CHECKPOINT_INTERVAL = 100
_COMMIT_INFO = {"operationParameters": {"mode": "Append", "partitionBy": "[]"}}
COMPACT_EVERY = 1000
"""Rows appended between two compactions of the state log."""
_VACUUM_RETENTION_HOURS = 168

STATE_SCHEMA = pa.schema(
    [
        pa.field("transactional_id", pa.string(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int64(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("transaction_seq", pa.int64(), nullable=False),
        pa.field("timeout_ms", pa.int64(), nullable=False),
        pa.field("partitions", pa.string(), nullable=False),
        pa.field("group_offsets", pa.string(), nullable=False),
        pa.field("result", pa.string(), nullable=False),
        pa.field("start_ms", pa.int64()),
        pa.field("update_ms", pa.int64(), nullable=False),
        pa.field("row_seq", pa.int64(), nullable=False),
    ]
)
"""Columns of ``_transactions``. ``partitions``: JSON ``{topic: [partition, …]}``; ``group_offsets``: JSON
``[[group, topic, partition, offset], …]``; ``result``: JSON ``[[topic, partition, first, last], …]`` (offsets
the commit gave, on ``CompleteCommit``), or on ``PrepareCommit`` the commit's manifest ``{"staged": [[topic,
partition, files, records], …], "topic_ids": {topic: id}}`` (see :attr:`StateRow.staged`); ``start_ms``: when
the transaction began (null when none is open);
``row_seq``: the order of rows, increasing through the table."""


def app_coordinator(tid: str) -> str:
    """The Delta ``txn`` app id holding the coordinator epoch of ``tid`` (its fence)."""
    return f"logstore.transactions.coordinator.{tid}"


@dataclass(frozen=True)
class StateRow:
    """One transition of a transactional id, as stored."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    transaction_seq: int
    """The number of the transaction within its id (0, 1, …): its records' sequence in the topic tables."""
    timeout_ms: int
    partitions: dict[str, list[int]]
    group_offsets: list[tuple[str, str, int, int]]
    result: list[tuple[str, int, int, int]]
    start_ms: int | None
    update_ms: int
    staged: list[tuple[str, int, int, int]] = field(default_factory=list)
    """``PrepareCommit``: what the transaction staged, (topic, partition, the topic's staged files, the partition's
    staged records), checked before its commit appends anything; empty in other states (and in a ``PrepareCommit``
    written before manifests were)."""
    topic_ids: dict[str, str] = field(default_factory=dict)
    """``PrepareCommit``: the ID (``logstore.topic.id``) of each topic the transaction staged records for, when it
    staged them."""


class StateLog:
    """Appends and reads the rows of ``<root>/_transactions/`` (thread-safe: one writer at a time)."""

    def __init__(self, root: str, *, fsync: bool = True, compact_every: int = COMPACT_EVERY) -> None:
        self.path = os.path.join(os.path.abspath(root), "_transactions")
        self._lock = threading.Lock()
        self._row_seq = 0
        self._version = -1
        """The newest version of the table this log knows of; -1: no table."""
        self._appender = LogAppender(self.path, _CHECKPOINT_INTERVAL, fsync=fsync)
        self._fsync = fsync
        self._compact_every = compact_every
        self._appended = 0
        """Rows appended since the last compaction (or since this log was opened)."""
        self._fences: dict[str, int] = {}
        """Coordinator epochs (``txn`` versions) of the commits read up to ``_version``; others: read the table."""

    def load(self) -> dict[str, StateRow]:
        """The newest row of every transactional id (empty when the table does not exist yet).

        Raises:
            KafkaStorageError: the table could not be read.
        """
        with self._lock:
            return self._load()

    def _load(self) -> dict[str, StateRow]:
        try:
            dt = DeltaTable(self.path)
            data = dt.to_pyarrow_table()
            self._version = dt.version()
            self._fences = {}  # the snapshot is newer than what was read: its fences are read from the table
        except TableNotFoundError:
            return {}
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot read the transaction log {self.path}: {e}") from e
        if not len(data):
            return {}
        data = data.sort_by([("row_seq", "ascending")])
        self._row_seq = max(self._row_seq, int(pc.max(data["row_seq"]).as_py()) + 1)
        latest: dict[str, StateRow] = {}
        for r in data.to_pylist():
            result = orjson.loads(r["result"])
            manifest = result if isinstance(result, dict) else {}
            latest[r["transactional_id"]] = StateRow(
                transactional_id=r["transactional_id"],
                producer_id=r["producer_id"],
                producer_epoch=r["producer_epoch"],
                state=r["state"],
                transaction_seq=r["transaction_seq"],
                timeout_ms=r["timeout_ms"],
                partitions={t: list(ps) for t, ps in orjson.loads(r["partitions"]).items()},
                group_offsets=[(g, t, int(p), int(o)) for g, t, p, o in orjson.loads(r["group_offsets"])],
                result=[] if manifest else [(t, int(p), int(f), int(last)) for t, p, f, last in result],
                start_ms=r["start_ms"],
                update_ms=r["update_ms"],
                staged=[(t, int(p), int(f), int(n)) for t, p, f, n in manifest.get("staged", [])],
                topic_ids=dict(manifest.get("topic_ids", {})),
            )
        return latest

    def take_over(self, tid: str, *, known_only: bool = False) -> tuple[int, StateRow | None]:
        """Become ``tid``'s coordinator: commit its next coordinator epoch, then read its newest row.

        ``known_only``: not when the table holds no row of ``tid`` (then (0, None), nothing written).

        Every row of ``tid`` a former coordinator committed is in the answer (its later ones are fenced), and
        this log's next rows order after them. Returns (the epoch to pass to :meth:`append`, the row or None).

        Raises:
            NotCoordinatorError: another node took ``tid`` over at the same moment.
            KafkaStorageError: the table could not be read or written.
        """
        with self._lock:
            if known_only and tid not in self._load():
                return 0, None
            self._ensure_table()
            app = app_coordinator(tid)
            epoch = self._fence_of(app) + 1
            self._commit(None, app, epoch, taking=True)
            row = self._load().get(tid)
            return epoch, row

    def append(self, row: StateRow, fence: int | None = None) -> None:
        """Append ``row``; durable (fsynced) when it returns.

        ``fence``: the coordinator epoch :meth:`take_over` gave (cluster mode); the row is refused when the table
        holds a newer one for the row's id. None: not fenced (a single node).

        Raises:
            NotCoordinatorError: another node took the id over; nothing was written.
            KafkaStorageError: the row could not be written or synced; it may or may not be in the table.
        """
        with self._lock:
            data = pa.Table.from_pylist(
                [
                    {
                        "transactional_id": row.transactional_id,
                        "producer_id": row.producer_id,
                        "producer_epoch": row.producer_epoch,
                        "state": row.state,
                        "transaction_seq": row.transaction_seq,
                        "timeout_ms": row.timeout_ms,
                        "partitions": orjson.dumps(row.partitions).decode(),
                        "group_offsets": orjson.dumps(row.group_offsets).decode(),
                        "result": orjson.dumps(
                            {"staged": row.staged, "topic_ids": row.topic_ids} if row.staged else row.result
                        ).decode(),
                        "start_ms": row.start_ms,
                        "update_ms": row.update_ms,
                        "row_seq": self._row_seq,
                    }
                ],
                schema=STATE_SCHEMA,
            )
            try:
                if self._version < 0 and fence is None:
                    write_deltalake(self.path, data, mode="append")  # creates the table
                    tables.sync_commits(self.path, 0)  # delta-rs does not fsync what it writes
                    self._version = DeltaTable(self.path).version()
                else:
                    self._ensure_table()
                    self._commit(data, app_coordinator(row.transactional_id), fence)
            except (DeltaError, OSError) as e:
                raise KafkaStorageError(f"cannot write the transaction log {self.path}: {e}") from e
            self._row_seq += 1
            self._appended += 1
            if self._appended >= self._compact_every:
                self._compact()

    def _compact(self) -> None:
        """Replace every file with one of the newest row per id; a failure is logged, the rows stay as they are."""
        self._appended = 0
        try:
            dt = DeltaTable(self.path)
            actions = pa.table(dt.get_add_actions(flatten=True))
            data = dt.to_pyarrow_table().sort_by([("row_seq", "descending")])
            seen: set[str] = set()
            keep = []
            for i, tid in enumerate(data["transactional_id"].to_pylist()):
                if tid not in seen:
                    seen.add(tid)
                    keep.append(i)
            kept = data.take(pa.array(keep, pa.int64())).sort_by("row_seq").cast(STATE_SCHEMA)
            file = self._appender.small_file(kept)
            if self._fsync:
                fsync_path(file.path)
            now_ms = time.time_ns() // 1_000_000
            removes: list[AddAction | RemoveAction] = [
                RemoveAction(path=p, data_change=False, deletion_timestamp=now_ms, size=s, partition_values={})
                for p, s in zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True)
            ]
            add = file.add
            removes.append(AddAction(add["path"], add["size"], {}, now_ms, False, add["stats"]))
            before = dt.version()
            dt.create_write_transaction(removes, "append", STATE_SCHEMA)
            tables.sync_commits(self.path, before + 1)
            self._version = DeltaTable(self.path).version()
            self._fences = {}  # versions were stepped over: fences are read from the table
            dt.vacuum(retention_hours=_VACUUM_RETENTION_HOURS, dry_run=False)
        except (DeltaError, OSError, LogstoreError) as e:
            log.warning("compaction of the transaction log %s failed (%s); its rows stay as they are", self.path, e)

    def _ensure_table(self) -> None:
        """Create the table (empty) unless it exists, and know its version (caller holds the lock)."""
        if self._version >= 0:
            return
        try:
            self._version = DeltaTable(self.path).version()
            return
        except TableNotFoundError:
            pass
        try:
            write_deltalake(self.path, STATE_SCHEMA.empty_table(), mode="append")
            tables.sync_commits(self.path, 0)
        except (DeltaError, OSError):  # another node created it meanwhile: read it
            pass
        self._version = DeltaTable(self.path).version()

    def _fence_of(self, app: str) -> int:
        """The newest coordinator epoch of ``app`` in the commits up to ``_version`` or later (0: none)."""
        if app not in self._fences:
            self._fences[app] = tables.txn_version(DeltaTable(self.path), app) or 0
        return self._fences[app]

    def _commit(self, data: pa.Table | None, app: str, fence: int | None, *, taking: bool = False) -> None:
        """One data file (if ``data``) and the next commit file, fenced by ``fence`` (caller holds the lock).

        ``taking``: the commit takes the id over, so the table must hold an older epoch than ``fence``;
        otherwise it must hold none newer.
        """
        files = [] if data is None else [self._appender.small_file(data)]
        txns = [] if fence is None else [(app, fence)]
        for _ in range(_COMMIT_ATTEMPTS):
            version = self._version + 1
            if fence is not None:
                held = self._fence_of(app)
                if held > fence or (taking and held >= fence):
                    self._appender.discard(files)
                    raise NotCoordinatorError(
                        f"{self.path}: another node coordinates this transactional id (coordinator epoch {held}, "
                        f"this node's {fence}); nothing was written"
                    )
            try:
                self._appender.commit(version, files, txns, info=_COMMIT_INFO)
            except VersionTaken:
                self._version = version
                for v, action in self._appender.actions_since(version):
                    self._version = max(self._version, v)
                    txn = action.get("txn")
                    if txn is not None and txn["appId"] in self._fences:
                        self._fences[txn["appId"]] = max(self._fences[txn["appId"]], int(txn["version"]))
                    elif txn is not None:
                        self._fences[txn["appId"]] = int(txn["version"])
                continue
            except StaleVersion:
                self._version = DeltaTable(self.path).version()
                self._fences = {}
                continue
            except CommitInDoubt as e:
                if not self._appender.settle(e.version, e.commit_id):
                    continue
            except KafkaStorageError:
                self._appender.discard(files)
                raise
            self._version = version
            if fence is not None:
                self._fences[app] = fence
            return
        self._appender.discard(files)
        raise ConcurrentTransactionsError(f"{self.path}: lost the commit race {_COMMIT_ATTEMPTS} times; retry")

    def close(self) -> None:
        """Finish a pending checkpoint and release the appender's thread."""
        self._appender.wait_for_checkpoints()
        self._appender.close()
