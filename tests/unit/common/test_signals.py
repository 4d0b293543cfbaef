"""Signals: a notification from another thread wakes the coroutines listening for its key, and only them."""

from __future__ import annotations

import asyncio
import threading

from logstore.common.signals import Signals


def test_a_notification_from_another_thread_wakes_the_listeners_of_its_key_only() -> None:
    signals = Signals()

    async def main() -> tuple[bool, bool]:
        with signals.listen("a") as a, signals.listen("b") as b:
            threading.Thread(target=signals.notify, args=("a",)).start()
            await asyncio.wait_for(a.wait(), 5)
            await asyncio.sleep(0.05)
            return a.is_set(), b.is_set()

    assert asyncio.run(main()) == (True, False)
    assert signals._listeners == {}  # every listener left with its block


def test_wait_returns_at_a_notification_or_at_its_timeout() -> None:
    signals = Signals()

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await signals.wait(None, 0.05)  # nobody notifies
        timed_out = loop.time() - t0
        loop.call_later(0.02, signals.notify)
        t1 = loop.time()
        await signals.wait(None, 10)
        return timed_out, loop.time() - t1

    timed_out, woken = asyncio.run(main())
    assert 0.05 <= timed_out < 1
    assert woken < 5


def test_a_notification_before_listening_is_not_seen() -> None:
    signals = Signals()
    signals.notify("a")

    async def main() -> bool:
        with signals.listen("a") as a:
            await asyncio.sleep(0.02)
            return a.is_set()

    assert asyncio.run(main()) is False
