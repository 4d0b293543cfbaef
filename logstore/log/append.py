"""The topic writer's commit path: data files plus one put-if-absent Delta commit.

delta-rs's own write path rebuilds the table's file state on every commit,
so its commit latency grows with the number of live files. A log append needs
none of that: this module writes the partition files with pyarrow and then
creates ``_delta_log/<version>.json`` atomically — ``os.link`` of a finished
temp file fails if the version exists — which is the Delta protocol's
"mutual exclusion on the commit file" for file systems with atomic links
(local disks, NFS); on an object store it is a PUT with ``If-None-Match: *``
(:mod:`logstore.storage`), as delta-rs commits there. Commit cost therefore
stays flat as the log grows.
Before linking version v it checks (one ``stat``) that v-1 exists, so a
writer whose view predates log cleanup re-reads instead of re-creating a
deleted version. Each commit carries a random ``logstore.commitId``; an error
at or after the link is settled by reading the version back.

What goes into a commit is plain Delta: ``commitInfo``, ``txn`` and ``add``
actions with statistics (``numRecords``, min/max of ``offset``, ``timestamp``
and ``timestamp_type``, null counts), readable and writable by delta-rs and
Delta Spark alike. Checkpoints are written by delta-rs every
``checkpoint.interval`` versions, off the commit path, and fsynced (with
``commit.fsync``) since delta-rs does not.

Background threads are the process's, not a table's: the data files' fsyncs
run on one pool of ``_FSYNC_THREADS`` threads (:func:`_fsync_pool`), and the
checkpoints of every table on one ``delta-checkpoint`` worker
(:func:`logstore.common.workers.shared_pool`), a table at a time — so a process
with thousands of open tables has the same few threads as one with a single
table.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from logstore._cpus import usable_cores
from logstore.common.fsync import fsync_path
from logstore.common.workers import shared_pool
from logstore.errors import KafkaStorageError
from logstore.log._delta import COMMIT_ID, file_stats, last_checkpoint, open_table, refresh, sync_checkpoint
from logstore.log.compression import file_suffix
from logstore.storage import ObjectExists, StorageUnreachable, is_object_store, join, storage_for

__all__ = ["CommitInDoubt", "LogAppender", "NewFile", "StaleVersion", "VersionTaken"]

log = logging.getLogger(__name__)

_ENGINE = "logstore"
# Keys and timestamps repeat within a batch; offsets, values and headers rarely do.
_DICTIONARY_COLUMNS = ["key", "timestamp", "timestamp_type"]
# Row-group statistics serve offset and time pruning; min/max of values would only cost.
_STATISTICS_COLUMNS = ["offset", "timestamp", "timestamp_type"]
# Writers waiting for the writer lock hold a shared lock on this file.
_FSYNC_THREADS = 8
"""Data-file and directory fsyncs in flight at once, for every table of the process together."""
_FSYNC_TASKS = 4
"""Tasks one commit's fsyncs are split into (its data files and their directories, each task a few of them)."""
_CHECKPOINT_POOL = "delta-checkpoint"
_CHECKPOINT_ACTIONS_PER_COMMIT = 100
"""A checkpoint rewrites the table's whole state, one action per data file (delta-rs: ~10 µs of CPU each, with
the replay before it). One of ``n`` actions is written at most once every ``n / 100`` commits, so a commit pays
for about 100 actions of checkpoint however many files the table gathers between compactions (at 40,000 files a
checkpoint costs ~0.4 s of CPU: every 100 commits, 4 ms a commit; every 400, 1 ms)."""
_PAGE_BYTES = 1024 * 1024
"""Target data page size (Parquet's default). A reader decodes a page whole, so a fetch bounded by bytes
can stop only at page boundaries."""


_fsync_executor: tuple[int, ThreadPoolExecutor] | None = None
_pools_lock = threading.Lock()


def _fsync_pool() -> ThreadPoolExecutor:
    """The process's fsync threads (created on first use, again in a forked child); every appender shares them."""
    global _fsync_executor
    with _pools_lock:
        if _fsync_executor is None or _fsync_executor[0] != os.getpid():
            _fsync_executor = (os.getpid(), ThreadPoolExecutor(_FSYNC_THREADS, thread_name_prefix="fsync"))
        return _fsync_executor[1]


_writer_executor: tuple[int, ThreadPoolExecutor] | None = None


def _writer_pool() -> ThreadPoolExecutor:
    """The process's data-file writers, one per usable core (at most 4), shared by every appender (created on
    first use, again in a forked child)."""
    global _writer_executor
    with _pools_lock:
        if _writer_executor is None or _writer_executor[0] != os.getpid():
            threads = min(4, usable_cores())
            _writer_executor = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix="parquet-writer"))
        return _writer_executor[1]


def _fsync_all(paths: Sequence[str]) -> list[Future[None]]:
    """fsync ``paths`` on the fsync pool, in at most ``_FSYNC_TASKS`` tasks of a few paths each: as parallel as
    a commit's few files need, without a task (and its hand-off, under the interpreter lock) per path."""
    per_task = -(-len(paths) // _FSYNC_TASKS) or 1
    return [_fsync_pool().submit(_fsync_each, paths[i : i + per_task]) for i in range(0, len(paths), per_task)]


def _fsync_each(paths: Sequence[str]) -> None:
    for path in paths:
        fsync_path(path)


def _by_partition(records: pa.Table) -> list[tuple[int, pa.Table]]:
    """Each partition's rows of ``records`` (in their order, without the ``partition`` column), by partition.

    A commit's records are its requests' batches. When every batch lists its
    partitions in ascending order — a key-less request goes to one partition
    — each partition's table is made of slices of them, without a copy, so a
    commit does not hold a second copy of its records while it writes them.
    Otherwise (keyed records spread over the partitions) the records are
    copied once, sorted by partition.
    """
    batches = records.to_batches()
    parts = [batch.column("partition").to_numpy() for batch in batches]
    if any(np.any(p[1:] < p[:-1]) for p in parts):
        order = np.argsort(np.concatenate(parts), kind="stable")
        batches = records.take(pa.array(order)).to_batches()
        parts = [batch.column("partition").to_numpy() for batch in batches]
    pieces: dict[int, list[pa.RecordBatch]] = {}
    for batch, batch_parts in zip(batches, parts, strict=True):
        bounds = (np.flatnonzero(np.diff(batch_parts)) + 1).tolist()
        for start, end in zip([0, *bounds], [*bounds, len(batch_parts)], strict=True):
            if end > start:
                pieces.setdefault(int(batch_parts[start]), []).append(batch.slice(start, end - start))
    return [(p, pa.Table.from_batches(pieces[p], records.schema).drop_columns(["partition"])) for p in sorted(pieces)]


def _rows_per_write(chunk: pa.Table) -> int:
    # The page size is checked only after each write batch of rows (1024 by default): with large
    # records one page would hold the whole file, so size the batches to close a page near _PAGE_BYTES.
    # Keys and values make a record's size; their offsets say it without a pass over the data.
    row_bytes = max(1, (_binary_bytes(chunk["key"]) + _binary_bytes(chunk["value"])) // max(1, len(chunk)))
    return max(1, min(1024, _PAGE_BYTES // row_bytes))


def _binary_bytes(column: pa.ChunkedArray) -> int:
    """Bytes of a binary column's values, from the first and last offset of each chunk."""
    total = 0
    for chunk in column.chunks:
        offsets = chunk.buffers()[1]
        if len(chunk) and offsets is not None:
            ends = np.frombuffer(offsets, np.int32)
            total += int(ends[chunk.offset + len(chunk)] - ends[chunk.offset])
    return total


class VersionTaken(Exception):
    """Another committer created this version first."""

    def __init__(self, version: int) -> None:
        super().__init__(f"version {version} exists")
        self.version = version


class StaleVersion(Exception):
    """The version to create is not the log's next one (log cleanup removed the commits before it)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"version {version} is not the next version of the log")
        self.version = version


class CommitInDoubt(Exception):
    """A commit file may or may not have been created; :meth:`LogAppender.settle` decides which."""

    def __init__(self, version: int, commit_id: str, reason: str) -> None:
        super().__init__(f"commit {version} may or may not have landed: {reason}")
        self.version = version
        self.commit_id = commit_id


@dataclass(frozen=True)
class NewFile:
    """A data file written for a commit that has not happened yet: its Delta ``add`` action and its local path."""

    add: dict[str, Any]
    path: str
    made_dir: bool = False
    """Its directory was created for it (a partition's first file): the directory above is fsynced too."""


class LogAppender:
    """Writes data files and commit files of one Delta table, in a local directory or on an object store.

    Thread-safe for distinct commits; a :class:`~logstore.log.writer.TopicWriter`
    drives it from one thread.
    """

    def __init__(self, table_root: str, checkpoint_interval: int, *, fsync: bool = True) -> None:
        self.root = table_root
        self.log_dir = join(table_root, "_delta_log")
        self._storage = storage_for(table_root)
        self._object = is_object_store(table_root)
        self._checkpoint_interval = checkpoint_interval
        self._fsync = fsync
        self._checkpoints = _Checkpointer(table_root, fsync=fsync)

    # -- data files -------------------------------------------------------------

    def write_files(self, records: pa.Table, compression: str = "snappy") -> list[NewFile]:
        """One Parquet file per partition of ``records``, its rows in the order ``records`` has them.

        ``compression``: pyarrow's codec for the files (:func:`logstore.log.compression.parquet_codec`).
        """
        now_ms = time.time_ns() // 1_000_000
        suffix = file_suffix(compression)
        by_partition = _by_partition(records)
        if len(by_partition) == 1:
            return [self._write_file(p, chunk, compression, suffix, now_ms) for p, chunk in by_partition]
        # Files of several partitions are written at once: Parquet encoding and the file system's calls let go
        # of the interpreter lock, so a commit's files take about as long as its largest on an idle core.
        written = [
            _writer_pool().submit(self._write_file, p, chunk, compression, suffix, now_ms) for p, chunk in by_partition
        ]
        wait(written)  # every file ended, so none is still being written when an error is raised
        return [f.result() for f in written]  # in partition order

    def _write_file(self, partition: int, chunk: pa.Table, compression: str, suffix: str, now_ms: int) -> NewFile:
        """One partition's data file and its ``add`` action.

        Raises:
            KafkaStorageError: the file cannot be written.
        """
        rel = f"partition={partition}/part-{uuid.uuid4()}-c000.{suffix}parquet"
        path = join(self.root, rel)
        try:
            size, made_dir = self._write_parquet(path, chunk, compression)
        except OSError as err:
            raise KafkaStorageError(f"cannot write {path}: {err}") from err
        add = {
            "path": rel,
            "partitionValues": {"partition": str(partition)},
            "size": size,
            "modificationTime": now_ms,
            "dataChange": True,
            "stats": file_stats(chunk),
        }
        return NewFile(add, path, made_dir)

    def _write_parquet(self, path: str, chunk: pa.Table, compression: str) -> tuple[int, bool]:
        """Write one data file (locally not yet fsynced: :meth:`commit` does that); its size in bytes, and
        whether its directory was created for it."""
        made_dir = False
        if self._object:
            fs, where = self._storage.arrow(path)
            sink: pa.NativeFile = fs.open_output_stream(where)
        else:
            try:
                sink = pa.OSFile(path, "wb")
            except FileNotFoundError:  # the partition's first file: its directory is made once, not checked each time
                os.makedirs(os.path.dirname(path), exist_ok=True)
                made_dir = True
                sink = pa.OSFile(path, "wb")
        with sink:
            pq.write_table(
                chunk,
                sink,
                compression=compression,
                use_dictionary=_DICTIONARY_COLUMNS,
                write_statistics=_STATISTICS_COLUMNS,
                write_batch_size=_rows_per_write(chunk),
            )
            size = sink.tell()
        return int(size), made_dir

    def small_file(self, rows: pa.Table) -> NewFile:
        """A snappy Parquet file of ``rows`` for an unpartitioned bookkeeping table (``_offsets``,
        ``_transactions``), written but not committed nor (locally) fsynced, with its ``add`` action.

        Raises:
            KafkaStorageError: the file cannot be written.
        """
        rel = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        path = join(self.root, rel)
        try:
            fs, where = self._storage.arrow(path)
            with fs.open_output_stream(where) as sink:
                pq.write_table(rows, sink, compression="snappy")
                size = sink.tell()
        except OSError as err:
            raise KafkaStorageError(f"cannot write {path}: {err}") from err
        add = {
            "path": rel,
            "partitionValues": {},
            "size": size,
            "modificationTime": time.time_ns() // 1_000_000,
            "dataChange": True,
            "stats": orjson.dumps({"numRecords": len(rows)}).decode(),
        }
        return NewFile(add, path)

    def discard(self, files: Sequence[NewFile]) -> None:
        """Delete data files that no commit references (after a lost race)."""
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                self._storage.delete(f.path)

    # -- commits ----------------------------------------------------------------

    def commit(
        self,
        version: int,
        files: Sequence[NewFile],
        txns: Sequence[tuple[str, int]],
        info: dict[str, Any] | None = None,
    ) -> str:
        """Create commit ``version`` with these adds and app transactions; returns its commit id.

        Durable when it returns (with ``fsync``): the data files, the commit
        file and their directory entries are on disk. The commit id (a random
        ``logstore.commitId`` in ``commitInfo``) is what :meth:`settle` looks
        for when the outcome of a commit is in doubt.

        Raises:
            VersionTaken: the version exists (another committer won).
            StaleVersion: ``version`` is not the next version: log cleanup removed
                the commits after the caller's last one. Re-read the table.
            CommitInDoubt: an error at or after creating the commit file left its
                outcome unknown; :meth:`settle` decides it later.
            KafkaStorageError: the commit file could not be written; nothing was committed.
        """
        commit_id = uuid.uuid4().hex
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
            COMMIT_ID: commit_id,
        }
        lines = [orjson.dumps({"commitInfo": commit_info})]
        lines += [orjson.dumps({"txn": {"appId": a, "version": v, "lastUpdated": now_ms}}) for a, v in txns]
        lines += [orjson.dumps({"add": f.add}) for f in files]
        if self._object:
            self._commit_object(version, b"\n".join(lines) + b"\n", commit_id)
            return commit_id
        final = self._commit_path(version)
        tmp = os.path.join(self.log_dir, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
        # The commit points at the data files: they, and their directory entries, must be on
        # disk before it is. Their fsyncs run in parallel with the commit file's own.
        dirs = {os.path.dirname(f.path) for f in files}
        dirs |= {os.path.dirname(os.path.dirname(f.path)) for f in files if f.made_dir}  # a new partition's entry
        synced = _fsync_all(sorted({f.path for f in files} | dirs)) if self._fsync else []
        try:
            try:
                with open(tmp, "wb") as fh:
                    fh.write(b"\n".join(lines) + b"\n")
                    fh.flush()
                    if self._fsync:
                        os.fsync(fh.fileno())
                for fut in synced:
                    fut.result()
            except OSError as err:
                raise KafkaStorageError(f"cannot write commit {final}: {err}") from err
            self._check_next(version)
            try:
                os.link(tmp, final)  # atomic, and fails if the version exists
            except FileExistsError:
                raise VersionTaken(version) from None
            except OSError as err:
                # A link can fail after it was made (a lost reply over NFS): read back to know.
                self._decide(version, commit_id, err)
            else:
                try:
                    self._after_link()
                except OSError as err:
                    self._decide(version, commit_id, err)
                else:
                    self._committed(version)
        finally:
            # A leftover temp file is harmless (Delta ignores dot files); never let its removal hide the outcome.
            with contextlib.suppress(OSError):
                os.remove(tmp)
        return commit_id

    def _commit_object(self, version: int, body: bytes, commit_id: str) -> None:
        """:meth:`commit` on an object store: one put-if-absent of the commit object (data files are stored already)."""
        self._check_next(version)
        try:
            self._storage.put_if_absent(self._commit_path(version), body)
        except ObjectExists:
            # A PUT retried after its first reply was lost finds its own commit: read back whose it is.
            try:
                ours = self.settle(version, commit_id)
            except (OSError, KafkaStorageError) as again:  # S3 unreachable too: still in doubt
                raise CommitInDoubt(version, commit_id, f"version exists, reading it back: {again}") from again
            if not ours:
                raise VersionTaken(version) from None
            return
        except StorageUnreachable as err:
            # Every retry failed to reach S3, but an earlier attempt may have been stored (its reply lost).
            self._decide(version, commit_id, err)
            return
        except KafkaStorageError:
            raise  # refused credentials, a missing bucket: nothing was sent
        except OSError as err:
            self._decide(version, commit_id, err)
            return
        self._committed(version)

    def _after_link(self) -> None:
        """What must follow the link before the commit counts: its directory entry on disk."""
        if self._fsync and not self._object:
            fsync_path(self.log_dir)

    def _decide(self, version: int, commit_id: str, err: OSError | StorageUnreachable) -> None:
        """After an error at or after the link: return if the commit landed (and is durable), else raise."""
        try:
            landed = self.settle(version, commit_id)
        except (OSError, KafkaStorageError) as again:
            raise CommitInDoubt(version, commit_id, f"{err}; reading it back: {again}") from err
        if not landed:
            raise KafkaStorageError(f"cannot write commit {self._commit_path(version)}: {err}") from err

    def settle(self, version: int, commit_id: str) -> bool:
        """Whether commit ``commit_id`` is version ``version`` of the log; if it is, make it durable.

        Reads the version's commit file back (its ``commitInfo`` carries the id).

        Raises:
            OSError: the file could not be read, or its directory not synced.
        """
        try:
            first = self._storage.read(self._commit_path(version)).split(b"\n", 1)[0]
        except FileNotFoundError:
            return False
        try:
            landed = orjson.loads(first).get("commitInfo", {}).get(COMMIT_ID) == commit_id
        except orjson.JSONDecodeError:
            return False
        if landed:
            self._after_link()
            self._committed(version)
        return landed

    def _committed(self, version: int) -> None:
        """Request a checkpoint at every ``checkpoint.interval``-th version, unless the newest one is too recent.

        "Too recent" scales with its size (:data:`_CHECKPOINT_ACTIONS_PER_COMMIT`); a table of a few
        thousand files is checkpointed at every interval. Runs on the committing thread: one small file
        read per interval.
        """
        if version % self._checkpoint_interval:
            return
        last = last_checkpoint(self.root)
        if last is None or version - last.version >= last.actions // _CHECKPOINT_ACTIONS_PER_COMMIT:
            self._checkpoints.request()

    def _check_next(self, version: int) -> None:
        """Raise :class:`StaleVersion` unless ``version`` follows the log's newest version.

        Log cleanup deletes the commits older than a checkpoint; linking one of
        their names again would succeed, and readers, who start at the
        checkpoint, would never see it. One ``stat`` of the previous commit
        settles the usual case; only when it is missing is the checkpoint
        pointer read.
        """
        if version == 0 or self._storage.exists(self._commit_path(version - 1)):
            return
        last = last_checkpoint(self.root)
        if last is None or last.version != version - 1:
            raise StaleVersion(version)

    def _commit_path(self, version: int) -> str:
        return join(self.log_dir, f"{version:020d}.json")

    def actions_since(self, version: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """(version, action) of every commit from ``version`` on, until the first missing one."""
        v = version
        while True:
            try:
                text = self._storage.read(self._commit_path(v))
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
        self._checkpoints.close()  # the shared fsync threads and checkpoint worker go on serving other tables


class _Checkpointer:
    """Writes one table's Delta checkpoints with delta-rs on the process's checkpoint worker, one at a time.

    Requests made while a checkpoint is waiting or being written are merged
    into the next one. A checkpoint that fails is logged and tried again on
    the next request from a fresh table handle; the worker goes on.
    """

    def __init__(self, root: str, *, fsync: bool) -> None:
        self._root = root
        self._fsync = fsync
        self._table: DeltaTable | None = None
        self._task = shared_pool(_CHECKPOINT_POOL, 1).task(self._write, f"checkpoint of {root}")

    def request(self) -> None:
        self._task.run_soon()

    def wait_idle(self) -> None:
        """Block until every requested checkpoint is written."""
        self._task.join()

    def _write(self) -> None:
        table = self._table
        try:
            if table is None:
                table = open_table(self._root)
            else:
                refresh(table)
            table.create_checkpoint()
            if self._fsync:
                # delta-rs does not fsync: a checkpoint torn by a power loss would be the one readers trust.
                sync_checkpoint(self._root, table.version())
        except Exception:  # never ends the checkpoint worker: commits are durable without checkpoints
            # A checkpoint only speeds up opening; the next request tries again from a fresh handle.
            log.warning("checkpoint of %s failed", self._root, exc_info=True)
            table = None
        self._table = None if self._task.closed else table

    def close(self) -> None:
        """Request no more checkpoints (one being written finishes) and drop the table handle."""
        self._task.close()
        self._table = None
