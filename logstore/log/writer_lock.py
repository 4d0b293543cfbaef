"""The writer lock of one topic table: writers on one host take turns, and a holder sees who waits.

Two files beside the table's ``_delta_log`` (ignored by Delta and by vacuum):

* ``_logstore_writer.lock`` — the lock itself (``flock``): exclusive for a writer
  that commits on its own (the embedded store, the Spark sink, a maintenance
  job), shared between the leaders of one topic in cluster mode (their
  per-partition leader epochs keep them apart) but never with an exclusive holder.
* ``_logstore_writer.intent`` — a writer waiting for the lock holds it shared, so
  a holder that keeps the lock across many commits (the ingest node's
  committer) can tell that another writer wants its turn and hand the lock over.

On an object store (``s3://`` roots) there is no file lock: the lock orders
this process's writers only, and the commit race does the rest. Across hosts
the lock means nothing: there the commit race decides (every commit is a
put-if-absent of the log's next version), so the lock is a matter of fairness
and of acks=1 promises (:mod:`logstore.log.promises`), not of safety.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator

from logstore.storage import is_object_store

__all__ = ["WriterLock"]

_LOCK = "_logstore_writer.lock"
_INTENT = "_logstore_writer.intent"


class WriterLock:
    """The writer lock of the table at ``table_root`` for the writers of this process (thread-safe).

    One thread of the process holds it at a time (a process-local lock in front of the file lock).
    """

    def __init__(self, table_root: str) -> None:
        self.root = table_root
        self._threads = threading.Lock()
        self._lock_fd: int | None = None
        self._intent_fd: int | None = None
        self._probe_fd: int | None = None
        self._files = not is_object_store(table_root)
        """Whether there are lock files (not on an object store: there only this process's threads take turns)."""

    @contextlib.contextmanager
    def exclusive(self, *, shared: bool = False) -> Iterator[None]:
        """Hold the lock, waiting for it; while it waits, a writer announces itself on the intent file.

        ``shared``: take the lock in shared mode, without announcing itself — for
        cluster leaders, which share a topic between them but not with a writer
        that takes it exclusively: while one holds it no leader commits or promises.
        """
        with self._threads:  # threads of this process
            if not self._files:
                yield
                return
            lock_fd = self._lock_file()
            if shared:
                fcntl.flock(lock_fd, fcntl.LOCK_SH)
                try:
                    yield
                finally:
                    fcntl.flock(lock_fd, fcntl.LOCK_UN)
                return
            if self._intent_fd is None:
                self._intent_fd = os.open(os.path.join(self.root, _INTENT), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._intent_fd, fcntl.LOCK_SH)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)  # other processes on this host
            finally:
                fcntl.flock(self._intent_fd, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)

    def try_exclusive(self, *, shared: bool = False) -> contextlib.AbstractContextManager[None] | None:
        """:meth:`exclusive` without waiting (nor announcing itself): None when another writer holds the lock.

        For a holder that must not block a shared worker thread (the ingest
        node's committer): it tries again later. The lock it returns may be let
        go of from another thread than the one that took it.
        """
        if not self._threads.acquire(blocking=False):
            return None
        if not self._files:
            return self._holding(None)
        try:
            lock_fd = self._lock_file()
            fcntl.flock(lock_fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            self._threads.release()
            return None
        except BaseException:
            self._threads.release()
            raise
        return self._holding(lock_fd)

    def others_waiting(self) -> bool:
        """Whether another writer waits for the lock (call while holding it)."""
        if not self._files:
            return False
        if self._probe_fd is None:
            self._probe_fd = os.open(os.path.join(self.root, _INTENT), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._probe_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._probe_fd, fcntl.LOCK_UN)
        return False

    def close(self) -> None:
        """Close the lock's files (releasing whatever this process still held through them)."""
        for fd in (self._lock_fd, self._intent_fd, self._probe_fd):
            if fd is not None:
                os.close(fd)
        self._lock_fd = self._intent_fd = self._probe_fd = None

    def _lock_file(self) -> int:
        if self._lock_fd is None:
            self._lock_fd = os.open(os.path.join(self.root, _LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        return self._lock_fd

    @contextlib.contextmanager
    def _holding(self, fd: int | None) -> Iterator[None]:
        """Let go of a lock taken by :meth:`try_exclusive` on exit (from any thread)."""
        try:
            yield
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._threads.release()
