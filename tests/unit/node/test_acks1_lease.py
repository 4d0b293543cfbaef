"""An acks=1 promise is answered only while the node's lease holds, through every door.

A cluster node answers an acks=1 batch with offsets promised at acceptance
once its write-ahead log frame is fsynced — but only while its lease holds
(docs/cluster.md: the lease ends before its ZooKeeper session may expire, and
after a lost session it holds again only once the node registered again);
otherwise it waits for the commit, which a new leader's claim would fence.
Here the node's only committer thread is held by a task of the test, so
nothing commits: an answer that comes anyway is a promise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest

from kafka_api.handlers import Handlers, Listener
from kafka_api.records import encode_batch
from logstore.config import LogstoreConfig
from logstore.errors import RequestTimedOutError
from logstore.log.schema import TOPIC_SCHEMA
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.wire.json_produce import parse_produce

_ONE = parse_produce(b'{"records": [{"value": "v", "partition": 0}]}')


@pytest.fixture
def stalled(config: LogstoreConfig) -> Iterator[Broker]:
    """A node whose one committer thread is busy with the test's task until the test ends."""
    LogStore(config).create_topic("t", 1)
    broker = Broker(dataclasses.replace(config, num_io_threads=1, request_timeout_ms=300))
    started, resume = threading.Event(), threading.Event()

    def stall() -> None:
        started.set()
        resume.wait(60)

    broker.pipeline("t")
    broker.committers.task(stall, "stall").run_soon()
    assert started.wait(10)
    try:
        yield broker
    finally:
        resume.set()
        broker.close()


def test_a_promise_is_answered_at_once_only_while_the_lease_holds(stalled: Broker) -> None:
    pipeline = stalled.pipeline("t")
    held = pipeline.submit(_ONE, "1")
    assert held.promised is not None
    assert asyncio.run(held.acknowledged(lambda: True, 300)) == ([0], [0])
    lapsed = pipeline.submit(_ONE, "1")
    assert lapsed.promised is not None
    with pytest.raises(RequestTimedOutError):  # it waits for its commit, which the stalled committer never makes
        asyncio.run(lapsed.acknowledged(lambda: False, 300))


def test_the_kafka_door_waits_for_the_commit_when_the_lease_lapsed(stalled: Broker) -> None:
    stalled.lease_valid = lambda: False  # type: ignore[method-assign]  # as after a lost ZooKeeper session
    handlers = Handlers(stalled, stalled.config, Listener("127.0.0.1", 9092))
    record = pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000], TOPIC_SCHEMA.field("timestamp").type),
            "timestamp_type": pa.array([0], TOPIC_SCHEMA.field("timestamp_type").type),
            "key": pa.array([None], pa.binary()),
            "value": pa.array([b"v"], pa.binary()),
            "headers": pa.array([[]], TOPIC_SCHEMA.field("headers").type),
        }
    )

    async def produce() -> dict[str, object]:
        wait = await handlers._submit("t", 0, encode_batch(record), "1")
        return await wait

    answer = asyncio.run(produce())
    assert answer["error_code"] == RequestTimedOutError.code, answer  # was 0: a promise past the lease
