"""In cluster mode each node applies retention by itself, to the partitions it leads only."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from kazoo.client import KazooClient

from logstore.client import RemoteStore
from tests.support.parsers import server_metric
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, produce_ok, until

pytestmark = pytest.mark.zookeeper

HOUR_MS = 3600 * 1000


def test_each_node_removes_old_files_of_the_partitions_it_leads(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    nodes = {i: cluster(i, **{"log.retention.check.interval.ms": 100}) for i in (1, 2)}
    state = create_topic(nodes[1], "logs", zk, {1, 2})
    r = httpx.patch(f"{nodes[1].url}/v1/topics/logs", json={"config": {"retention.ms": HOUR_MS}}, timeout=30)
    assert r.status_code == 200, r.text
    old_ms = int(time.time() * 1000) - 2 * HOUR_MS
    for p, (leader, _epoch) in state.items():
        url = nodes[leader].url
        for c in range(3):  # three commits, three files, two hours old
            produce_ok(url, "logs", {"records": [{"value": f"old-{c}", "partition": p, "timestamp": old_ms}]})
        produce_ok(url, "logs", {"records": [{"value": "young", "partition": p}]})
    remote = RemoteStore(nodes[1].url)

    until(lambda: all(q.log_start_offset == 3 for q in remote.describe_topic("logs").partitions))

    for i, node in nodes.items():
        led = sum(1 for leader, _ in state.values() if leader == i)
        assert led and server_metric(node, "logstore_retention_files_removed_total", '{topic="logs"}') == 3 * led
    for q in remote.describe_topic("logs").partitions:
        assert (q.high_watermark, q.num_records) == (4, 1)
