"""The local form of :class:`~logstore.storage.Storage`: a directory on a POSIX file system (or NFS).

Put-if-absent is ``os.link`` of a finished, fsynced temporary file (a link
fails if the name exists: the Delta protocol's mutual exclusion on file
systems with atomic links); a conditional replace is a rename under an
``flock`` of a lock file beside the object. Entity tags are
``<mtime_ns>-<size>-<inode>`` in hex: any rewrite changes one of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs

from logstore.common.fsync import fsync_path
from logstore.storage._base import ObjectExists, PreconditionFailed

__all__ = ["LocalStorage"]


class LocalStorage:
    """Files under local paths (see the module docstring); thread-safe, one per process."""

    delta_options: dict[str, str] = {}  # noqa: RUF012 - read only, shared by design

    def __init__(self) -> None:
        self._fs = pafs.LocalFileSystem()
        self._replacing = threading.Lock()

    def check(self, location: str) -> None:
        pass  # a missing directory is created on first write

    def read(self, location: str) -> bytes:
        with open(location, "rb") as f:
            return f.read()

    def read_range(self, location: str, start: int, length: int) -> bytes:
        with open(location, "rb") as f:
            f.seek(start)
            return f.read(length)

    def read_versioned(self, location: str) -> tuple[bytes, str]:
        with open(location, "rb") as f:
            return f.read(), _etag(os.fstat(f.fileno()))

    def exists(self, location: str) -> bool:
        return os.path.exists(location)

    def put(self, location: str, data: bytes) -> None:
        tmp = self._write_temp(location, data)
        try:
            os.replace(tmp, location)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        fsync_path(os.path.dirname(location))

    def put_if_absent(self, location: str, data: bytes) -> str:
        tmp = self._write_temp(location, data)
        try:
            try:
                os.link(tmp, location)  # atomic, and fails if the name exists
            except FileExistsError:
                raise ObjectExists(location) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        fsync_path(os.path.dirname(location))
        return _etag(os.stat(location))

    def replace(self, location: str, data: bytes, etag: str) -> str:
        with self._locked(location):
            try:
                current = _etag(os.stat(location))
            except FileNotFoundError:
                raise PreconditionFailed(location) from None
            if current != etag:
                raise PreconditionFailed(location)
            self.put(location, data)
            return _etag(os.stat(location))

    def list_names(self, prefix: str) -> list[str]:
        try:
            return sorted(os.listdir(prefix))
        except FileNotFoundError:
            return []

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(location)

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(prefix, ignore_errors=True)

    def arrow(self, location: str) -> tuple[pafs.FileSystem, str]:
        return self._fs, location

    def _write_temp(self, location: str, data: bytes) -> str:
        directory = os.path.dirname(location)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(location)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    @contextlib.contextmanager
    def _locked(self, location: str) -> Iterator[None]:
        """Replacements of one object, by this process's threads and by other processes, one at a time."""
        lock_path = os.path.join(os.path.dirname(location), f".{os.path.basename(location)}.lock")
        with self._replacing, open(lock_path, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _etag(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"
