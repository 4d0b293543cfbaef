"""The ingest node's write-ahead log, behind ``acks=1``.

It lives in the core because not only the node reads it: a writer that finds
a stopped node's acks=1 promises on its topic replays that node's frames
before it commits (:mod:`logstore.log.promises`).

A produce request with ``acks=1`` is answered once its records are in this
log and fsynced — before the Delta commit. Concurrent requests share one fsync
(group fsync): the log's writer takes every frame queued since its last fsync,
writes them, fsyncs once and releases all their waiters. The writer is a
serial task (:mod:`logstore.common.workers`) on the process's ``wal`` pool of
``WAL_THREADS`` threads, shared by every topic's log: one log writes one group
at a time, in frame order, and a log with nothing queued costs no thread.

Layout: ``<wal.dir>/<topic>/<first-frame>.wal`` segments of frames
``[u32 length][u32 crc32][header JSON]\\n[Arrow IPC stream]``. A torn frame at
the tail (a crash mid-write) is cut off on open. Once every frame of a segment
is committed to Delta, the segment is deleted. After a restart the remaining
frames are replayed through the idempotent writer, so each lands exactly once.

A group write that fails midway (a full disk, an I/O error) fails every frame
of the group and leaves no torn bytes behind: the segment is cut back to its
last good frame, or — when even that fails — later frames go to a new
segment. Recovery therefore never stops at a torn frame with acknowledged
frames behind it. Frames queued after a failed one are failed too until the
failed frames are reported committed (:meth:`WriteAheadLog.committed_through`):
an acknowledged frame never has an unlogged, uncommitted batch ahead of it.

One process at a time owns a WAL directory (:class:`DirectoryLock`).

On an object store (``wal.dir``, or ``logstore.root``'s ``_wal``, an ``s3://`` URI) each group is one
object ``<first-frame>.wal`` created with a put-if-absent (:mod:`logstore.storage`): a frame's waiters
are released once S3 acknowledged the object, so an acks=1 answer survives the loss of its node. An
object lands whole or not at all, so there is no torn tail to cut; an object is deleted once every frame
in it is committed to Delta.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import io
import logging
import os
import socket
import struct
import threading
import uuid
import zlib
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from logstore.common.fsync import fsync_path
from logstore.common.workers import WorkerPool, shared_pool
from logstore.config import LogstoreConfig
from logstore.errors import KafkaStorageError
from logstore.storage import ObjectExists, PreconditionFailed, absolute, is_object_store, join, storage_for

__all__ = [
    "WAL_THREADS",
    "DirectoryLock",
    "Frame",
    "WriteAheadLog",
    "node_id_in",
    "read_frames",
    "topics_with_frames",
    "wal_dir_of",
]

log = logging.getLogger("logstore.ingest.wal")

_HEAD = struct.Struct("<II")
_SEGMENT_BYTES = 64 * 1024 * 1024
WAL_THREADS = 4
"""Threads of the process's ``wal`` pool: group writes (and fsyncs) of different topics' logs in flight at once."""


@dataclass(frozen=True)
class Frame:
    """One logged produce batch."""

    number: int
    """Position in this topic's log, from 0, never reused while frames remain."""
    header: dict[str, Any]
    """producer_id / sequence of the batch as it will be committed."""
    records: pa.Table


class WriteAheadLog:
    """The write-ahead log of one topic on this node. Thread-safe.

    ``pool``: where its writes run; default the process's ``wal`` pool.
    """

    def __init__(self, directory: str, *, pool: WorkerPool | None = None) -> None:
        self.dir = directory
        self._object = is_object_store(directory)
        self._storage = storage_for(directory)
        if not self._object:
            os.makedirs(directory, exist_ok=True)
        self._lock = threading.Lock()
        self._queue: list[tuple[bytes, Future[None]]] = []
        self._segments: list[tuple[int, str]] = []  # (first frame, path), ascending
        self._recovered = list(self._read_all())
        self._next = self._recovered[-1].number + 1 if self._recovered else 0
        self._file: io.FileIO | None = None
        self._file_bytes = 0
        self._last_in_segment: dict[str, int] = {}
        self._unlogged: int | None = None
        """Highest frame number that failed to be logged and is not yet known to be committed."""
        self._writer = (pool or shared_pool("wal", WAL_THREADS)).task(
            self._write_queued, f"write-ahead log {directory}"
        )

    def recovered(self) -> list[Frame]:
        """Frames found on open (not yet known to be committed), in order."""
        return self._recovered

    def append(self, header: dict[str, Any], records: pa.Table) -> tuple[int, Future[None]]:
        """Queue a frame; returns its number and a future done once it is fsynced."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, records.schema) as w:
            w.write_table(records)
        fut: Future[None] = Future()
        with self._lock:
            number = self._next
            self._next += 1
            payload = orjson.dumps({**header, "frame": number}) + b"\n" + sink.getvalue().to_pybytes()
            self._queue.append((_HEAD.pack(len(payload), zlib.crc32(payload)) + payload, fut))
        self._writer.run_soon()
        return number, fut

    def committed_through(self, frame: int) -> None:
        """Every frame up to ``frame`` is in Delta: drop segments that hold nothing newer."""
        with self._lock:
            if self._unlogged is not None and frame >= self._unlogged:
                self._unlogged = None  # the frames that failed are in Delta now
            # A local segment being appended to stays; an object is complete once written.
            current = self._segments[-1][1] if self._segments and not self._object else None
            keep = []
            for first, path in self._segments:
                last = self._last_in_segment.get(path, -1)
                if path != current and last <= frame:
                    with contextlib.suppress(FileNotFoundError):
                        self._storage.delete(path)
                else:
                    keep.append((first, path))
            self._segments = keep

    def discard_recovered(self) -> None:
        """The recovered frames are committed: delete the segments they came from."""
        for _first, path in list(self._segments):
            if path in self._recovered_paths:
                self._storage.delete(path)
        self._segments = [s for s in self._segments if s[1] not in self._recovered_paths]
        self._recovered = []

    def close(self) -> None:
        """Write what is queued, then stop writing (frames appended later are never written)."""
        self._writer.run_soon()
        self._writer.join()
        self._writer.close()
        if self._file is not None:
            self._file.close()

    # -- internals --------------------------------------------------------------

    def _write_queued(self) -> None:
        """The writer (a pool worker, one run at a time): write and fsync every queued frame as one group."""
        with self._lock:
            if not self._queue:
                return
            batch, self._queue = self._queue, []
            first_number = self._next - len(batch)
            last_number = first_number + len(batch) - 1
            behind = self._unlogged
            if behind is not None:
                self._unlogged = last_number
        if behind is not None:
            # Acknowledging these would promise offsets behind a batch that is neither
            # logged nor committed yet; they fail (retriably) until it is committed.
            err = KafkaStorageError(
                f"write-ahead log {self.dir}: frame {behind} ahead of these failed to be logged "
                "and is not committed yet; retry shortly"
            )
            for _, fut in batch:
                fut.set_exception(err)
            return
        try:
            self._write_group(first_number, [data for data, _ in batch])
        except Exception as e:  # any failure goes to the waiters; the log goes on with the next group
            log.error("write-ahead log %s: frames %d..%d failed: %r", self.dir, first_number, last_number, e)
            with self._lock:
                self._unlogged = last_number
            err = KafkaStorageError(f"write-ahead log {self.dir} failed: {e}")
            for _, fut in batch:
                fut.set_exception(err)
            return
        for _, fut in batch:
            fut.set_result(None)

    def _write_group(self, first_number: int, frames: list[bytes]) -> None:
        """Append and fsync ``frames``; on failure leave the segment as it was before (or retire it).

        On an object store: store them as one new object (whole, or not at all).
        """
        if self._object:
            path = join(self.dir, f"{first_number:020d}.wal")
            self._storage.put_if_absent(path, b"".join(frames))
            with self._lock:
                self._segments.append((first_number, path))
                self._last_in_segment[path] = first_number + len(frames) - 1
            return
        f = self._segment_for(first_number)
        start = self._file_bytes
        try:
            for data in frames:
                self._write(f, data)
                self._file_bytes += len(data)
            os.fsync(f.fileno())
        except BaseException:
            self._cut_back(f, start)
            raise
        with self._lock:
            self._last_in_segment[f.name] = first_number + len(frames) - 1

    def _write(self, f: io.FileIO, data: bytes) -> None:
        """Write all of ``data`` (unbuffered: nothing is left in memory to land after a cut-back)."""
        view = memoryview(data)
        while view:
            n = f.write(view)
            if not n:
                raise OSError(f"short write to {f.name}")
            view = view[n:]

    def _cut_back(self, f: io.FileIO, good: int) -> None:
        """Drop a failed group's bytes so no torn frame sits before later, acknowledged ones."""
        try:
            os.ftruncate(f.fileno(), good)  # the file is in append mode: later writes go to the new end
            os.fsync(f.fileno())
            self._file_bytes = good
        except (OSError, ValueError):
            # The segment cannot be repaired: retire it (recovery cuts it at its torn frame,
            # behind which nothing was acknowledged) and put later frames in a new one.
            with contextlib.suppress(OSError, ValueError):
                f.close()
            self._file = None

    def _segment_for(self, first_number: int) -> io.FileIO:
        if self._file is None or self._file_bytes >= _SEGMENT_BYTES:
            if self._file is not None:
                self._file.close()
            path = os.path.join(self.dir, f"{first_number:020d}.wal")
            self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - kept open across writes
            self._file_bytes = 0
            with self._lock:
                self._segments.append((first_number, path))
            fsync_path(self.dir)
        return self._file

    def _read_all(self) -> Iterator[Frame]:
        self._recovered_paths: set[str] = set()
        names = sorted(n for n in self._storage.list_names(self.dir) if n.endswith(".wal"))
        for name in names:
            path = join(self.dir, name)
            self._segments.append((int(name.removesuffix(".wal")), path))
            self._recovered_paths.add(path)
            data = self._storage.read(path)
            pos = yield from _frames_in(data)
            if pos < len(data) and not self._object:
                with open(path, "r+b") as f:
                    f.truncate(pos)


def read_frames(directory: str, skip: Callable[[dict[str, Any]], bool] = lambda _header: False) -> list[Frame]:
    """Every intact frame of a topic's write-ahead log directory, in order, without taking or changing it.

    For a new leader replaying a departed node's acks=1 records: that node may
    be a paused process still holding its directory (and appending to it), so
    nothing is locked, cut or deleted here; a torn tail (a frame being written)
    ends a segment's frames as on recovery. A segment deleted meanwhile (its
    frames were committed) is skipped, and so is a frame whose header ``skip``
    rejects (its records are not decoded).
    """
    storage = storage_for(directory)
    names = sorted(n for n in storage.list_names(directory) if n.endswith(".wal"))
    frames: list[Frame] = []
    for name in names:
        try:
            data = storage.read(join(directory, name))
        except FileNotFoundError:
            continue
        gen = _frames_in(data, skip)
        while True:
            try:
                frames.append(next(gen))
            except StopIteration:
                break
    return frames


def _frames_in(
    data: bytes, skip: Callable[[dict[str, Any]], bool] = lambda _header: False
) -> Generator[Frame, None, int]:
    """The intact frames of one segment's bytes; returns (as the generator's value) where they end."""
    pos = 0
    while pos + _HEAD.size <= len(data):
        length, crc = _HEAD.unpack_from(data, pos)
        payload = data[pos + _HEAD.size : pos + _HEAD.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break  # torn tail: never acknowledged
        head, _, ipc = payload.partition(b"\n")
        header = orjson.loads(head)
        pos += _HEAD.size + length
        number = header.pop("frame")
        if skip(header):
            continue
        yield Frame(number, header, pa.ipc.open_stream(ipc).read_all())
    return pos


class DirectoryLock:
    """Exclusive ownership of a directory by one process (``flock`` on ``<dir>/node.lock``).

    The kernel releases the lock when the process dies — also on kill -9 — so a
    restart after a crash takes it again at once. The file names the holder
    (pid, host, since) for the error a second process gets.

    On an object store there is no ``flock``: ``node.lock`` is an object created
    with a put-if-absent and deleted on release. One left by a process that died
    on this host is taken over (a conditional replace); one left by a process on
    another host stays until that node starts again there, or someone who knows
    it is gone deletes the object (the error names it).

    Raises:
        KafkaStorageError: another live process holds the directory.
    """

    def __init__(self, directory: str, what: str = "directory") -> None:
        self.path = join(directory, "node.lock")
        self._fd: int | None = None
        self._token: str | None = None
        if is_object_store(directory):
            self._token = self._take_object(directory, what)
            return
        os.makedirs(directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise KafkaStorageError(
                f"{what} {directory} is in use by another process ({holder}); "
                "stop it first, or give this one its own logstore.root / wal.dir"
            ) from None
        since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        info = orjson.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since})
        os.ftruncate(fd, 0)
        os.pwrite(fd, info + b"\n", 0)
        os.fsync(fd)
        self._fd = fd

    def _take_object(self, directory: str, what: str) -> str:
        """Create (or take over from a dead process of this host) the ``node.lock`` object; its token."""
        storage = storage_for(self.path)
        token = uuid.uuid4().hex
        since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        info = orjson.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since, "token": token})
        try:
            storage.put_if_absent(self.path, info)
            return token
        except ObjectExists:
            pass
        try:
            data, etag = storage.read_versioned(self.path)
            holder = orjson.loads(data)
        except (FileNotFoundError, orjson.JSONDecodeError):
            holder, etag = {}, ""
        if not isinstance(holder, dict) or _alive(holder):
            raise KafkaStorageError(
                f"{what} {directory} is in use by another process ({_describe(holder)}); stop it first, or give this "
                f"one its own logstore.root / wal.dir (if that process is gone for good, delete {self.path})"
            )
        try:
            storage.replace(self.path, info, etag)  # only if no one else took it over since
        except PreconditionFailed:
            raise KafkaStorageError(f"{what} {directory} was just taken by another process") from None
        return token

    def release(self) -> None:
        if self._token is not None:
            storage = storage_for(self.path)
            with contextlib.suppress(FileNotFoundError, orjson.JSONDecodeError):
                if orjson.loads(storage.read(self.path)).get("token") == self._token:
                    storage.delete(self.path)
            self._token = None
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def _alive(holder: dict[str, Any]) -> bool:
    """False only for a holder that ran on this host in a process that is gone."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_holder(fd: int) -> str:
    try:
        info = orjson.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, orjson.JSONDecodeError):
        info = {}
    return _describe(info)


def _describe(info: object) -> str:
    if not isinstance(info, dict) or "pid" not in info:
        return "holder unknown"
    return f"pid {info.get('pid')} on host {info.get('host')} since {info.get('since')}"


def wal_dir_of(config: LogstoreConfig) -> str:
    """The node's write-ahead log directory: ``wal.dir``, or ``<logstore.root>/_wal``.

    In cluster mode the default is ``<logstore.root>/_wal/<node.id>``: on the
    shared storage, next to the other nodes' ones, where a new leader finds a
    departed node's acks=1 records (a ``wal.dir`` set in cluster mode should
    likewise be one ``<node.id>`` directory among its peers'). On an ``s3://``
    root the default is in the bucket too (``wal.dir`` may name a local directory instead).
    """
    if config.wal_dir:
        return absolute(config.wal_dir)
    if config.zookeeper_connect:
        return join(absolute(config.root), "_wal", str(config.node_id))
    return join(absolute(config.root), "_wal")


def node_id_in(wal_dir: str) -> str:
    """The id of the node whose write-ahead log this is (``<wal_dir>/node.id``), made up on first use."""
    storage = storage_for(wal_dir)
    path = join(wal_dir, "node.id")
    try:
        return storage.read(path).decode().strip()
    except FileNotFoundError:
        pass
    with contextlib.suppress(ObjectExists):  # made meanwhile by a process that held the directory before
        storage.put_if_absent(path, uuid.uuid4().hex[:12].encode())
    return storage.read(path).decode().strip()


def topics_with_frames(wal_dir: str) -> list[str]:
    """The topics whose write-ahead log in ``wal_dir`` holds frames (left by a previous run), sorted."""
    storage = storage_for(wal_dir)
    local = not is_object_store(wal_dir)
    return [
        name
        for name in storage.list_names(wal_dir)
        if (not local or os.path.isdir(os.path.join(wal_dir, name)))
        and any(n.endswith(".wal") for n in storage.list_names(join(wal_dir, name)))
    ]
