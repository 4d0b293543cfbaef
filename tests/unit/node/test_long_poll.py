"""A long poll (``Broker.poll``, behind the HTTP long polls and Kafka's Fetch) wakes at once on a commit that
lands while it looks.

The poll used to start listening for commits only after a look found nothing: a commit landing during the
look (after it read) went unseen, and the poll slept until its 100 ms re-look. It now listens from before each
look. Real broker, real topic, a real commit made from inside the first look.
"""

from __future__ import annotations

import asyncio
import time

from logstore.config import LogstoreConfig
from logstore.node.broker import POLL_S, Broker
from logstore.store import LogStore
from logstore.structs import FetchResult
from logstore.wire.json_produce import parse_produce


def test_a_commit_during_a_look_wakes_the_poll_at_once(config: LogstoreConfig) -> None:
    LogStore(config).create_topic("t", 1)
    broker = Broker(config)
    looks: list[tuple[float, float, int]] = []  # (started, ended, records found)
    try:
        pipeline = broker.pipeline("t")

        async def look() -> FetchResult:
            started = time.monotonic()
            result = await asyncio.to_thread(broker.fetch, "t", 0, 0, 100, 1 << 20)
            if not looks:  # the first look has read (nothing); a commit lands before it ends
                record = parse_produce(b'{"records": [{"value": "x"}]}')
                pipeline.submit(record, "all").committed.result(timeout=30)
            looks.append((started, time.monotonic(), len(result.records)))
            return result

        result = asyncio.run(broker.poll(["t"], look, lambda r: len(r.records) > 0, 30))
    finally:
        broker.close()
    assert len(result.records) == 1
    assert [n for _, _, n in looks] == [0, 1]
    between = looks[1][0] - looks[0][1]
    assert between < POLL_S, f"the second look came {between * 1000:.0f} ms after the first: the commit was missed"


def test_a_poll_with_nothing_to_find_returns_at_its_deadline(config: LogstoreConfig) -> None:
    LogStore(config).create_topic("t", 1)
    broker = Broker(config)
    calls = 0

    async def look() -> FetchResult:
        nonlocal calls
        calls += 1
        return await asyncio.to_thread(broker.fetch, "t", 0, 0, 100, 1 << 20)

    try:
        started = time.monotonic()
        result = asyncio.run(broker.poll(["t"], look, lambda r: len(r.records) > 0, 0.35))
        took = time.monotonic() - started
    finally:
        broker.close()
    assert len(result.records) == 0
    assert 0.35 <= took < 5
    assert calls >= 3  # it looked again every POLL_S for other writers' commits
