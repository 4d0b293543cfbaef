"""A topic whose registration ZooKeeper failed is registered by a later request, not left unknown to the controller.

A node opening a topic's pipeline tells the controller the topic and its partition count
(:meth:`~logstore.node.broker.Broker.pipeline`). When ZooKeeper does not answer, that request gets a retriable
``KAFKA_STORAGE_ERROR``; the pipeline stays open, and the next request must try the registration again rather than
find the pipeline open and skip it (the controller would never give the topic's new partitions leaders).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from logstore.cluster.zookeeper_server import ZooKeeperServer
from logstore.errors import KafkaStorageError
from logstore.node.broker import Broker
from tests.system.cluster.cluster_helpers import node_config

pytestmark = pytest.mark.zookeeper

SESSION_MS = 4000


def _registered(connect: str, topic: str) -> bool:
    zk = KazooClient(hosts=f"{connect}/logstore")
    zk.start(timeout=10)
    try:
        return zk.exists(f"/brokers/topics/{topic}") is not None
    finally:
        zk.stop()
        zk.close()


def test_a_registration_zookeeper_failed_is_retried_by_the_next_request(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    zk = own_zookeeper
    proc = zk.spawn()
    zk.wait_serving(proc)
    broker = Broker(node_config(tmp_path / "data", zk.connect))
    try:
        broker.start()
        broker.store.create_topic("orders", 2)  # as another process creates it: not yet known to the controller
        proc.kill()
        proc.wait()

        with pytest.raises(KafkaStorageError, match="ZooKeeper did not answer registering topic 'orders'"):
            broker.pipeline("orders")
        assert broker.pipeline_if_open("orders") is None, "a request would find the pipeline open and not register"

        proc = zk.spawn()
        zk.wait_serving(proc)
        deadline = time.monotonic() + 3 * SESSION_MS / 1000 + 10
        while True:  # as a client retries a retriable error, until the node has reconnected
            try:
                broker.pipeline("orders")
                break
            except KafkaStorageError:
                assert time.monotonic() < deadline, "the topic was never registered after ZooKeeper returned"
                time.sleep(0.2)
        assert broker.pipeline_if_open("orders") is not None
        assert _registered(zk.connect, "orders")
    finally:
        broker.close()
        proc.kill()
        proc.wait()
