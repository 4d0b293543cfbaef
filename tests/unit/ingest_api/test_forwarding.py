"""A forward to a leader lasts until the forwarding node's view says that leader is gone, and no longer.

The leader here is a real TCP server on loopback that reads the forwarded request and answers late or never
(as a paused node does); the forwarding node's broker is reduced to what the forward reads of it: its view of
the cluster and the signal that the view changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import types
from collections.abc import AsyncIterator
from typing import cast

import numpy as np
import orjson
import pyarrow as pa
import pytest

from ingest_api.forwarding import Forwarder, _forward_while_led, successor
from logstore.cluster import ClusterMetadata, NodeInfo, PartitionState
from logstore.common.signals import Signals
from logstore.errors import NotLeaderOrFollowerError
from logstore.node.broker import Broker
from logstore.node.routing import Share
from logstore.wire.arrow_produce import PRODUCE_SCHEMA
from logstore.wire.json_produce import ParsedRecords


def _view(leader: int, nodes: tuple[int, ...]) -> ClusterMetadata:
    return ClusterMetadata(
        1,
        1,
        tuple(NodeInfo(n, f"http://127.0.0.1:{9000 + n}") for n in nodes),
        {("t", 0): PartitionState(leader, 1), ("t", 1): PartitionState(leader, 1)},
    )


def test_a_leader_is_gone_once_it_is_unregistered_and_its_partitions_moved() -> None:
    assert successor(_view(2, (1, 2, 3)), "t", [0], 2) is None  # nothing happened
    assert successor(_view(3, (1, 2, 3)), "t", [0], 2) is None  # a hand-over: 2 is alive and answers
    assert successor(_view(2, (1, 3)), "t", [0], 2) is None  # unregistered for a moment, or not moved yet
    assert successor(_view(3, (1, 3)), "t", [0, 1], 2) == (3, NodeInfo(3, "http://127.0.0.1:9003"))
    assert successor(_view(4, (1, 3)), "t", [1], 2) == (4, None)  # moved to a node this view does not know yet
    assert successor(None, "t", [0], 2) is None


@contextlib.asynccontextmanager
async def _leader(answer_after_s: float | None) -> AsyncIterator[NodeInfo]:
    """A leader on loopback that reads a request and answers 200 after ``answer_after_s``, or never (None)."""

    connections: list[tuple[asyncio.StreamWriter, asyncio.Task[object] | None]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append((writer, asyncio.current_task()))
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        if answer_after_s is None:
            await asyncio.sleep(3600)
        await asyncio.sleep(answer_after_s)
        body = orjson.dumps({"offsets": [{"partition": 0, "offset": 41}]})
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield NodeInfo(2, f"http://127.0.0.1:{port}")
    finally:
        server.close()
        for writer, task in connections:
            writer.close()
            if task is not None:
                task.cancel()


def _share(leader: NodeInfo) -> Share:
    table = pa.Table.from_pylist([{"partition": 0, "value": b"v"}], schema=PRODUCE_SCHEMA)
    return Share(leader, np.arange(1), ParsedRecords.from_table(table, None, None))


def _broker(view: ClusterMetadata) -> Broker:
    return cast(Broker, types.SimpleNamespace(leadership=Signals(), view=view))


def _notify_from_the_watch_thread(broker: Broker, view: ClusterMetadata, after_s: float) -> None:
    def change() -> None:
        threading.Event().wait(after_s)
        broker.view = view
        broker.leadership.notify()

    threading.Thread(target=change).start()


def test_a_forward_to_a_silent_leader_is_answered_as_soon_as_the_leader_is_gone() -> None:
    async def main() -> NotLeaderOrFollowerError:
        forwarder = Forwarder()
        async with _leader(None) as leader:
            broker = _broker(_view(2, (1, 2, 3)))
            _notify_from_the_watch_thread(broker, _view(2, (1, 2, 3)), 0.05)  # a change that is not a move
            _notify_from_the_watch_thread(broker, _view(3, (1, 3)), 0.2)
            with pytest.raises(NotLeaderOrFollowerError) as caught:
                await asyncio.wait_for(_forward_while_led(broker, forwarder, "t", _share(leader), "all", None), 10)
        await forwarder.close()
        return caught.value

    error = asyncio.run(main())
    assert error.leader == (3, "http://127.0.0.1:9003")
    assert "may or may not have been written" in str(error)


def test_a_leader_handing_its_partitions_over_is_awaited() -> None:
    async def main() -> object:
        forwarder = Forwarder()
        async with _leader(0.4) as leader:
            broker = _broker(_view(2, (1, 2, 3)))
            _notify_from_the_watch_thread(broker, _view(3, (1, 2, 3)), 0.1)  # moved, but 2 is still registered
            placed = await _forward_while_led(broker, forwarder, "t", _share(leader), "all", None)
        await forwarder.close()
        return placed

    assert asyncio.run(main()) == ([0], [41])


def test_a_forward_cancelled_from_outside_leaves_no_task_and_no_listener_behind() -> None:
    async def main() -> tuple[list[str], Broker]:
        forwarder = Forwarder()
        async with _leader(None) as leader:
            broker = _broker(_view(2, (1, 2, 3)))
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):  # as the transaction coordinator's appender bounds a commit
                    await asyncio.gather(_forward_while_led(broker, forwarder, "t", _share(leader), "all", None))
        await forwarder.close()
        await asyncio.sleep(0.05)
        me = asyncio.current_task()
        return [repr(t.get_coro()) for t in asyncio.all_tasks() if t is not me and not t.done()], broker

    left, broker = asyncio.run(main())
    assert left == []
    assert broker.leadership._listeners == {}
