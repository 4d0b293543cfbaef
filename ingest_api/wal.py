"""The ingest node's write-ahead log, behind ``acks=1``.

A produce request with ``acks=1`` is answered once its records are in this
log and fsynced — before the Delta commit. Concurrent requests share one fsync
(group fsync): a writer thread takes every frame queued since its last fsync,
writes them, fsyncs once and releases all their waiters.

Layout: ``<wal.dir>/<topic>/<first-frame>.wal`` segments of frames
``[u32 length][u32 crc32][header JSON]\\n[Arrow IPC stream]``. A torn frame at
the tail (a crash mid-write) is cut off on open. Once every frame of a segment
is committed to Delta, the segment is deleted. After a restart the remaining
frames are replayed through the idempotent writer, so each lands exactly once.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson
import pyarrow as pa

from logstore.errors import KafkaStorageError
from logstore.fs import fsync_path

__all__ = ["Frame", "WriteAheadLog"]

_HEAD = struct.Struct("<II")
_SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Frame:
    """One logged produce batch."""

    number: int
    """Position in this topic's log, from 0, never reused while frames remain."""
    header: dict[str, Any]
    """producer_id / sequence of the batch as it will be committed."""
    records: pa.Table


class WriteAheadLog:
    """The write-ahead log of one topic on this node. Thread-safe."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.Condition()
        self._queue: list[tuple[bytes, Future[None]]] = []
        self._segments: list[tuple[int, str]] = []  # (first frame, path), ascending
        self._recovered = list(self._read_all())
        self._next = self._recovered[-1].number + 1 if self._recovered else 0
        self._file: BinaryIO | None = None
        self._file_bytes = 0
        self._last_in_segment: dict[str, int] = {}
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"wal-{os.path.basename(directory)}", daemon=True)
        self._thread.start()

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
            self._lock.notify()
        return number, fut

    def committed_through(self, frame: int) -> None:
        """Every frame up to ``frame`` is in Delta: drop segments that hold nothing newer."""
        with self._lock:
            current = self._segments[-1][1] if self._segments else None
            keep = []
            for first, path in self._segments:
                last = self._last_in_segment.get(path, -1)
                if path != current and last <= frame:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)
                else:
                    keep.append((first, path))
            self._segments = keep

    def discard_recovered(self) -> None:
        """The recovered frames are committed: delete the segments they came from."""
        for _first, path in list(self._segments):
            if path in self._recovered_paths:
                os.remove(path)
        self._segments = [s for s in self._segments if s[1] not in self._recovered_paths]
        self._recovered = []

    def close(self) -> None:
        """Flush what is queued and stop the writer thread."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join()
        if self._file is not None:
            self._file.close()

    # -- internals --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait()
                if not self._queue and self._closing:
                    return
                batch, self._queue = self._queue, []
                first_number = self._next - len(batch)
            try:
                f = self._segment_for(first_number)
                for data, _ in batch:
                    f.write(data)
                    self._file_bytes += len(data)
                f.flush()
                os.fsync(f.fileno())
                with self._lock:
                    self._last_in_segment[f.name] = first_number + len(batch) - 1
                for _, fut in batch:
                    fut.set_result(None)
            except OSError as e:
                err = KafkaStorageError(f"write-ahead log {self.dir} failed: {e}")
                for _, fut in batch:
                    fut.set_exception(err)

    def _segment_for(self, first_number: int) -> Any:
        if self._file is None or self._file_bytes >= _SEGMENT_BYTES:
            if self._file is not None:
                self._file.close()
            path = os.path.join(self.dir, f"{first_number:020d}.wal")
            self._file = open(path, "ab")  # noqa: SIM115 - kept open across writes
            self._file_bytes = 0
            with self._lock:
                self._segments.append((first_number, path))
            fsync_path(self.dir)
        return self._file

    def _read_all(self) -> Iterator[Frame]:
        self._recovered_paths: set[str] = set()
        names = sorted(n for n in os.listdir(self.dir) if n.endswith(".wal"))
        for name in names:
            path = os.path.join(self.dir, name)
            self._segments.append((int(name.removesuffix(".wal")), path))
            self._recovered_paths.add(path)
            with open(path, "rb") as f:
                data = f.read()
            pos = 0
            while pos + _HEAD.size <= len(data):
                length, crc = _HEAD.unpack_from(data, pos)
                payload = data[pos + _HEAD.size : pos + _HEAD.size + length]
                if len(payload) < length or zlib.crc32(payload) != crc:
                    break  # torn tail: never acknowledged
                head, _, ipc = payload.partition(b"\n")
                header = orjson.loads(head)
                records = pa.ipc.open_stream(ipc).read_all()
                yield Frame(header.pop("frame"), header, records)
                pos += _HEAD.size + length
            if pos < len(data):
                with open(path, "r+b") as f:
                    f.truncate(pos)
