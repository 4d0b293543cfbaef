"""One lock per key, created on first use: work on one key (a topic being opened or closed) waits for work on
that key only, never for another key's."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["KeyedLocks"]


class KeyedLocks:
    """A lock per key (thread-safe). Keys are never forgotten: a few dozen bytes each, one per topic name seen."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold ``key``'s lock, waiting for whoever holds it now."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            yield
