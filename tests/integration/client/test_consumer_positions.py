"""The Python ``Consumer``'s positions as confluent-kafka's: assign, seek, position, committed, pause/resume,
offsets_for_times and watermarks, for assigned partitions and for a group member."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from logstore.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Consumer,
    Message,
    Producer,
    RemoteStore,
    TopicPartition,
)
from logstore.errors import InvalidRequestError
from tests.support.server import Server

StartServer = Callable[..., Server]


def produce(url: str, topic: str, partition: int, values: list[str], ts0: int = 1_000_000) -> None:
    with Producer({"bootstrap.servers": url, "linger.ms": 0}) as p:
        for i, v in enumerate(values):
            p.produce(topic, v, partition=partition, timestamp=ts0 + i)


def take(c: Consumer, n: int) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + 30
    while len(out) < n:
        assert time.monotonic() < deadline, [(m.partition(), m.offset()) for m in out]
        out += c.consume(n - len(out), 0.5)
    return out


def where(msgs: list[Message]) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for m in msgs]


def test_assigned_partitions_seek_position_commit_pause(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 2)
    produce(srv.url, "t", 0, [f"a{i}" for i in range(10)])
    produce(srv.url, "t", 1, [f"b{i}" for i in range(5)])
    host_port = srv.url.removeprefix("http://")
    c = Consumer({"bootstrap.servers": host_port, "group.id": "g", "enable.auto.commit": False})

    c.assign([TopicPartition("t", 0, 3), TopicPartition("t", 1, OFFSET_BEGINNING)])
    assert c.assignment() == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert [tp.offset for tp in c.position(c.assignment())] == [3, 0]
    got = take(c, 12)
    assert sorted(where(got)) == [(0, o) for o in range(3, 10)] + [(1, o) for o in range(5)]
    assert [tp.offset for tp in c.position([TopicPartition("t", 0), TopicPartition("t", 1)])] == [10, 5]

    c.seek(TopicPartition("t", 0, 1))
    (m,) = take(c, 1)
    assert (m.partition(), m.offset(), m.value()) == (0, 1, b"a1")
    assert c.position([TopicPartition("t", 0)])[0].offset == 2

    c.commit(offsets=[TopicPartition("t", 0, 2)], asynchronous=False)
    assert [tp.offset for tp in c.committed([TopicPartition("t", 0), TopicPartition("t", 1)])] == [2, OFFSET_INVALID]
    assert c.get_watermark_offsets(TopicPartition("t", 0)) == (0, 10)
    times = c.offsets_for_times([TopicPartition("t", 0, 1_000_005), TopicPartition("t", 0, 9_000_000)])
    assert [tp.offset for tp in times] == [5, OFFSET_END]

    c.seek(TopicPartition("t", 0, OFFSET_END))
    c.pause([TopicPartition("t", 1)])
    produce(srv.url, "t", 1, ["b5"])
    produce(srv.url, "t", 0, ["a10"])
    (m,) = take(c, 1)
    assert (m.partition(), m.offset()) == (0, 10)  # partition 1 is paused
    assert c.consume(10, 0.3) == []
    c.resume([TopicPartition("t", 1)])
    assert where(take(c, 1)) == [(1, 5)]

    with pytest.raises(InvalidRequestError, match="t-7 is not assigned"):
        c.seek(TopicPartition("t", 7, 0))
    c.unassign()
    assert c.assignment() == []
    c.close()

    again = Consumer({"bootstrap.servers": srv.url, "group.id": "g", "auto.offset.reset": "earliest"})
    again.assign([TopicPartition("t", 0, OFFSET_STORED), TopicPartition("t", 1)])  # the group's commit, else reset
    assert [tp.offset for tp in again.position(again.assignment())] == [2, 0]
    again.close()


def test_a_group_member_seeks_and_pauses_its_partitions(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1)
    produce(srv.url, "t", 0, [f"v{i}" for i in range(6)])
    c = Consumer(
        {
            "bootstrap.servers": srv.url,
            "group.id": "members",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "heartbeat.interval.ms": 100,
        }
    )
    c.subscribe(["t"])
    assert where(take(c, 6)) == [(0, o) for o in range(6)]
    assert c.position([TopicPartition("t", 0)])[0].offset == 6

    c.seek(TopicPartition("t", 0, 2))
    assert where(take(c, 2)) == [(0, 2), (0, 3)]

    c.pause([TopicPartition("t", 0)])
    produce(srv.url, "t", 0, ["v6"])
    assert c.consume(10, 0.3) == []
    c.resume([TopicPartition("t", 0)])
    assert where(take(c, 3)) == [(0, 4), (0, 5), (0, 6)]  # nothing skipped by the pause
    with pytest.raises(InvalidRequestError):
        c.assign([TopicPartition("t", 0)])
    c.close()
