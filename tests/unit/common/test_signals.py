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


def test_one_listener_of_several_keys_wakes_at_a_notification_of_any_of_them() -> None:
    signals = Signals()

    async def main() -> list[bool]:
        seen = []
        with signals.listen("a", "b") as ab:
            for key in ("b", "c", "a"):
                ab.clear()
                threading.Thread(target=signals.notify, args=(key,)).start()
                await asyncio.sleep(0.05)
                seen.append(ab.is_set())
        return seen

    assert asyncio.run(main()) == [True, False, True]
    assert signals._listeners == {}


def test_a_notification_before_listening_is_not_seen() -> None:
    signals = Signals()
    signals.notify("a")

    async def main() -> bool:
        with signals.listen("a") as a:
            await asyncio.sleep(0.02)
            return a.is_set()

    assert asyncio.run(main()) is False
