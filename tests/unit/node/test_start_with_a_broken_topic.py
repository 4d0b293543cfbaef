"""One topic whose table cannot be read never keeps a node from starting: the others are served.

A topic left broken on the storage (a log the node cannot open) used to end ``Broker.start``, so the node
could not start at all — and in a cluster, after a whole-cluster restart, no node could.
"""

from __future__ import annotations

import os

from logstore.config import LogstoreConfig
from logstore.node.broker import Broker
from logstore.store import LogStore
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
