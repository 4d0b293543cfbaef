"""Wake-ups across threads: a thread says something happened to a key, and coroutines waiting for that key
wake on their own event loops (a topic committed; the cluster's leaders changed)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterator
from typing import TypeVar

__all__ = ["Signals"]

T = TypeVar("T")


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
    def listen(self, *keys: Hashable) -> Iterator[asyncio.Event]:
        """An event set by every :meth:`notify` of any of ``keys`` (none given: the key None) from now until the
        block ends (on an event loop).

        The event stays set until cleared: clear it before each look at what it guards, so a notification
        that comes during the look is not lost.
        """
        entry = (asyncio.get_running_loop(), asyncio.Event())
        keys = keys or (None,)
        with self._guard:
            for key in keys:
                self._listeners.setdefault(key, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._guard:
                for key in keys:
                    listeners = self._listeners[key]
                    listeners.discard(entry)
                    if not listeners:
                        del self._listeners[key]

    async def poll(
        self,
        keys: Collection[Hashable],
        look: Callable[[], Awaitable[T]],
        done: Callable[[T], bool],
        wait_s: float,
        *,
        every_s: float,
    ) -> T:
        """A long poll (on an event loop): ``look()`` until ``done`` says its result is enough or ``wait_s``
        seconds have passed; the last result.

        Between looks it waits for a notification of one of ``keys``, which wakes it at once, or ``every_s``
        seconds (for what notifies nobody). It listens from before each look, so a notification that comes
        while a look reads is not missed.
        """
        deadline = time.monotonic() + wait_s
        with self.listen(*keys) as notified:
            while True:
                notified.clear()
                result = await look()
                left = deadline - time.monotonic()
                if done(result) or left <= 0:
                    return result
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(notified.wait(), min(left, every_s))
