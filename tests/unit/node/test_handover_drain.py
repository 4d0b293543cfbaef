"""A partition handed over is drained only once every batch this node accepted for it is answered.

The hand-over of a preferred-leader election (docs/cluster.md) moves a partition away from a live node
only after that node says it drained: it accepts no more records for it, and every batch it accepted
for it — acks=1 batches promised offsets included — is committed or failed to its producer. Here the
node's commits fail (storage away) while a batch waits: the partition must not count as drained until
the commit lands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from logstore.config import LogstoreConfig
from logstore.errors import KafkaStorageError, LogstoreError, NotLeaderOrFollowerError
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from logstore.wire.json_produce import parse_produce


def _to(partition: int) -> bytes:
    return f'{{"records": [{{"value": "v", "partition": {partition}}}]}}'.encode()


def test_a_dropped_partition_is_drained_only_after_its_accepted_batches_are_answered(
    config: LogstoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    LogStore(config).create_topic("t", 2)
    broker = Broker(config)
    try:
        pipeline = broker.pipeline("t")
        accumulator = pipeline._accumulator
        accumulator.set_led(frozenset({0, 1}))  # as a cluster node leading both partitions
        storage_back, tried = threading.Event(), threading.Event()
        commit = pipeline.writer.append_held

        def away_until_back(batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
            if not storage_back.is_set():
                tried.set()
                raise KafkaStorageError("the table's storage is away (test)")
            return commit(batches)

        monkeypatch.setattr(pipeline.writer, "append_held", away_until_back)
        sub = pipeline.submit(parse_produce(_to(0)), "all")

        accumulator.drop_led({0})  # the hand-over begins
        with pytest.raises(NotLeaderOrFollowerError):
            pipeline.submit(parse_produce(_to(0)), "1")
        assert tried.wait(timeout=30)  # its commit failed: the batch waits for a retry
        assert not pipeline.drained(0), "drained while an accepted batch is not committed"
        assert not pipeline.drained(1), "a partition still led is never drained"

        storage_back.set()
        assert sub.committed.result(timeout=30).offsets.to_pylist() == [0]
        # answered by the commit, then taken off what is in flight: drained within moments
        deadline = time.monotonic() + 30
        while not pipeline.drained(0):
            assert time.monotonic() < deadline, "not drained after its batch was committed"
            time.sleep(0.01)
    finally:
        broker.close()
