"""One topic whose table cannot be read never keeps a node from starting: the others are served.

A topic left broken on the storage (a log the node cannot open) used to end ``Broker.start``, so the node
could not start at all — and in a cluster, after a whole-cluster restart, no node could.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from logstore.config import LogstoreConfig
from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.epochs import LeaderEpochs
from logstore.log.schema import input_table
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from logstore.wire.json_produce import parse_produce


def test_a_topic_whose_table_cannot_be_read_is_skipped_at_start(config: LogstoreConfig) -> None:
    store = LogStore(config)
    store.create_topic("broken", 1)
    store.create_topic("fine", 1)
    broker = Broker(config)
    try:  # leave write-ahead log frames of both topics behind, as a crash would
        for topic in ("broken", "fine"):
            broker.pipeline(topic).submit(parse_produce(b'{"records": [{"value": "v"}]}'), "all")
    finally:
        broker.close()
    log_dir = os.path.join(store.catalog.topic_path("broken"), "_delta_log")
    for name in os.listdir(log_dir):
        if name.endswith(".json"):
            with open(os.path.join(log_dir, name), "wb") as f:
                f.write(b"{not json")
    os.makedirs(os.path.join(broker.wal_dir, "broken"), exist_ok=True)
    with open(os.path.join(broker.wal_dir, "broken", "00000000000000000000.wal"), "wb") as f:
        f.write(b"")  # a segment: start-up opens the topic to replay it

    again = Broker(config)
    try:
        again.start()  # raised the broken table's storage error
        assert again.ready
        sub = again.pipeline("fine").submit(parse_produce(b'{"records": [{"value": "w"}]}'), "all")
        assert sub.committed.result(timeout=30).offsets.to_pylist() == [1]
    finally:
        again.close()


def test_a_topic_deleted_while_its_pipeline_opens_is_an_unknown_topic(
    config: LogstoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delta-rs replays a table's log lazily: a delete between the writer's open and its first look at the
    log's app versions failed the produce with an unknown server error (500) in a cluster under faults."""
    store = LogStore(config)
    store.create_topic("going", 1)
    for i in range(3):
        store.append("going", [ProducerBatch(input_table(pa.array([0], pa.int32()), [f"v{i}".encode()]))])
    load = LeaderEpochs.load

    def deleted_first(self: LeaderEpochs, table: DeltaTable, num_partitions: int) -> None:
        LogStore(config).delete_topic("going")  # another node's DELETE, at the worst moment
        load(self, table, num_partitions)

    monkeypatch.setattr(LeaderEpochs, "load", deleted_first)
    broker = Broker(config)
    try:
        with pytest.raises(UnknownTopicOrPartitionError, match="deleted while it was opened"):
            broker.pipeline("going")
    finally:
        broker.close()
