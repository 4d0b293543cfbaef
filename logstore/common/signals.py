"""Wake-ups across threads: a thread says something happened to a key, and coroutines waiting for that key
wake on their own event loops (a topic committed; the cluster's leaders changed)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Hashable, Iterator

__all__ = ["Signals"]


class Signals:
    """Coroutines, on any event loops, waiting for news of a key; notified from any thread."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._listeners: dict[Hashable, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def notify(self, key: Hashable = None) -> None:
        """Set the event of every coroutine listening for ``key`` now (from any thread; never waits)."""
        with self._guard:
            listeners = list(self._listeners.get(key, ()))
        for loop, event in listeners:
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: no one is left to wake
                loop.call_soon_threadsafe(event.set)

    @contextlib.contextmanager
    def listen(self, key: Hashable = None) -> Iterator[asyncio.Event]:
        """An event set by every :meth:`notify` of ``key`` from now until the block ends (on an event loop).

        The event stays set until cleared: clear it before each look at what it guards, so a notification
        that comes during the look is not lost.
        """
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._guard:
            self._listeners.setdefault(key, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._guard:
                listeners = self._listeners[key]
                listeners.discard(entry)
                if not listeners:
                    del self._listeners[key]

    async def wait(self, key: Hashable, timeout_s: float) -> None:
        """Return after the next :meth:`notify` of ``key``, or after ``timeout_s`` seconds."""
        with self.listen(key) as event, contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
