"""The topic writer's commit path: data files plus one put-if-absent Delta commit.

delta-rs's own write path rebuilds the table's file state on every commit,
so its commit latency grows with the number of live files. A log append needs
none of that: this module writes the partition files with pyarrow and then
creates ``_delta_log/<version>.json`` atomically — ``os.link`` of a finished
temp file fails if the version exists — which is the Delta protocol's
"mutual exclusion on the commit file" for file systems with atomic links
(local disks, NFS). Commit cost therefore stays flat as the log grows.

What goes into a commit is plain Delta: ``commitInfo``, ``txn`` and ``add``
actions with statistics (``numRecords``, min/max of ``offset``, ``timestamp``
and ``timestamp_type``, null counts), readable and writable by delta-rs and
Delta Spark alike. Checkpoints are written by delta-rs on a background thread
every ``checkpoint.interval`` versions, off the commit path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from logstore._delta import file_stats, open_table, refresh
from logstore._fs import fsync_path
from logstore.errors import KafkaStorageError

__all__ = ["LogAppender", "VersionTaken"]

_ENGINE = "logstore"
# Keys and timestamps repeat within a batch; offsets, values and headers rarely do.
_DICTIONARY_COLUMNS = ["key", "timestamp", "timestamp_type"]
# Row-group statistics serve offset and time pruning; min/max of values would only cost.
_STATISTICS_COLUMNS = ["offset", "timestamp", "timestamp_type"]
# Writers waiting for the writer lock hold a shared lock on this file.
_INTENT = "_logstore_writer.intent"


class VersionTaken(Exception):
    """Another committer created this version first."""

    def __init__(self, version: int) -> None:
        super().__init__(f"version {version} exists")
        self.version = version


@dataclass(frozen=True)
class _File:
    add: dict[str, Any]
    path: str


class LogAppender:
    """Writes data files and commit files of one local Delta table.

    Thread-safe for distinct commits; a :class:`~logstore.writer.TopicWriter`
    drives it from one thread.
    """

    def __init__(self, table_root: str, checkpoint_interval: int, *, fsync: bool = True) -> None:
        self.root = table_root
        self.log_dir = os.path.join(table_root, "_delta_log")
        self._checkpoint_interval = checkpoint_interval
        self._fsync = fsync
        self._checkpoints = _Checkpointer(table_root)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fsync")
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._intent_fd: int | None = None
        self._probe_fd: int | None = None

    # -- data files -------------------------------------------------------------

    def write_files(self, records: pa.Table) -> list[_File]:
        """One Parquet file per partition of ``records`` (sorted by partition, then offset)."""
        parts = records["partition"].to_numpy()
        if not len(parts):
            return []
        bounds = np.flatnonzero(np.diff(parts)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(parts)]])
        data = records.drop_columns(["partition"])
        files = []
        now_ms = time.time_ns() // 1_000_000
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            p = int(parts[s])
            chunk = data.slice(s, e - s)
            rel = f"partition={p}/part-{uuid.uuid4()}-c000.snappy.parquet"
            path = os.path.join(self.root, rel)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with pa.OSFile(path, "wb") as sink:
                    pq.write_table(
                        chunk,
                        sink,
                        compression="snappy",
                        use_dictionary=_DICTIONARY_COLUMNS,
                        write_statistics=_STATISTICS_COLUMNS,
                    )
                size = os.path.getsize(path)
            except OSError as err:
                raise KafkaStorageError(f"cannot write {path}: {err}") from err
            add = {
                "path": rel,
                "partitionValues": {"partition": str(p)},
                "size": size,
                "modificationTime": now_ms,
                "dataChange": True,
                "stats": file_stats(chunk),
            }
            files.append(_File(add, path))
        return files

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold this table's writer lock (``<table>/_logstore_writer.lock``, ignored by Delta and vacuum).

        While it waits for the lock, a writer announces itself with a shared lock on
        ``<table>/_logstore_writer.intent``, so a holder that keeps the lock across
        commits (the ingest node, see :meth:`others_waiting`) hands it over.
        """
        with self._lock:  # threads of this process
            if self._lock_fd is None:
                self._lock_fd = os.open(os.path.join(self.root, "_logstore_writer.lock"), os.O_RDWR | os.O_CREAT, 0o644)
            if self._intent_fd is None:
                self._intent_fd = os.open(os.path.join(self.root, _INTENT), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._intent_fd, fcntl.LOCK_SH)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)  # other processes on this host
            finally:
                fcntl.flock(self._intent_fd, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def others_waiting(self) -> bool:
        """Whether another writer waits for this table's writer lock (call while holding it)."""
        if self._probe_fd is None:
            self._probe_fd = os.open(os.path.join(self.root, _INTENT), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._probe_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._probe_fd, fcntl.LOCK_UN)
        return False

    def discard(self, files: Sequence[_File]) -> None:
        """Delete data files that no commit references (after a lost race)."""
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                os.remove(f.path)

    # -- commits ----------------------------------------------------------------

    def commit(
        self,
        version: int,
        files: Sequence[_File],
        txns: Sequence[tuple[str, int]],
        info: dict[str, Any] | None = None,
    ) -> None:
        """Create commit ``version`` with these adds and app transactions.

        Raises:
            VersionTaken: the version exists (another committer won).
            KafkaStorageError: the commit file could not be written.
        """
        now_ms = time.time_ns() // 1_000_000
        commit_info = {
            "timestamp": now_ms,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": '["partition"]'},
            "isBlindAppend": True,
            "engineInfo": _ENGINE,
            "clientVersion": _ENGINE,
            "operationMetrics": {
                "numFiles": str(len(files)),
                "numOutputRows": str(sum(orjson.loads(f.add["stats"])["numRecords"] for f in files)),
                "numOutputBytes": str(sum(f.add["size"] for f in files)),
            },
            **(info or {}),
        }
        lines = [orjson.dumps({"commitInfo": commit_info})]
        lines += [orjson.dumps({"txn": {"appId": a, "version": v, "lastUpdated": now_ms}}) for a, v in txns]
        lines += [orjson.dumps({"add": f.add}) for f in files]
        final = os.path.join(self.log_dir, f"{version:020d}.json")
        tmp = os.path.join(self.log_dir, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
        # The commit points at the data files: they, and their directory entries, must be on
        # disk before it is. Their fsyncs run in parallel with the commit file's own.
        synced = (
            [
                self._pool.submit(fsync_path, p)
                for p in {f.path for f in files} | {os.path.dirname(f.path) for f in files}
            ]
            if self._fsync
            else []
        )
        try:
            with open(tmp, "wb") as fh:
                fh.write(b"\n".join(lines) + b"\n")
                fh.flush()
                if self._fsync:
                    os.fsync(fh.fileno())
            for fut in synced:
                fut.result()
            try:
                os.link(tmp, final)  # atomic, and fails if the version exists
            except FileExistsError:
                raise VersionTaken(version) from None
            finally:
                os.remove(tmp)
            if self._fsync:
                fsync_path(self.log_dir)
        except OSError as err:
            raise KafkaStorageError(f"cannot write commit {final}: {err}") from err
        if version % self._checkpoint_interval == 0:
            self._checkpoints.request()

    def actions_since(self, version: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """(version, action) of every commit from ``version`` on, until the first missing one."""
        v = version
        while True:
            try:
                with open(os.path.join(self.log_dir, f"{v:020d}.json"), "rb") as fh:
                    text = fh.read()
            except FileNotFoundError:
                return
            for line in text.splitlines():
                if line.strip():
                    yield v, orjson.loads(line)
            v += 1

    def wait_for_checkpoints(self) -> None:
        """Block until the checkpoints requested so far are written."""
        self._checkpoints.wait_idle()

    def close(self) -> None:
        self._checkpoints.close()
        self._pool.shutdown(wait=False)
        for fd in (self._lock_fd, self._intent_fd, self._probe_fd):
            if fd is not None:
                os.close(fd)
        self._lock_fd = self._intent_fd = self._probe_fd = None


class _Checkpointer:
    """Writes Delta checkpoints with delta-rs on its own thread, one at a time."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._cond = threading.Condition()
        self._wanted = False
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        with self._cond:
            self._wanted = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="delta-checkpoint", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self) -> None:
        """Block until every requested checkpoint is written."""
        with self._cond:
            while self._wanted or self._busy:
                self._cond.wait()

    def _run(self) -> None:
        table: DeltaTable | None = None
        while True:
            with self._cond:
                while not self._wanted and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._wanted, self._busy = False, True
            try:
                if table is None:
                    table = open_table(self._root)
                else:
                    refresh(table)
                table.create_checkpoint()
            except Exception:
                table = None
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
