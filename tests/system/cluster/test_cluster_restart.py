"""A cluster node restarted while it still leads its partitions (a one-node cluster, a whole-cluster restart).

Placement is sticky, so the node leads the same partitions again and replays its own write-ahead log when it
claims them (docs/design.md §8). acks=1 batches it accepts after the restart must not take the sequences of
those logged frames: the idempotent writer would take them for retries and drop records it acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from logstore.config import load_config
from logstore.log.catalog import Catalog
from tests.support.helpers import assert_gap_free
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, produce_ok, until

pytestmark = pytest.mark.zookeeper


def test_acks1_records_before_and_after_a_restart_of_a_leading_node_are_all_kept(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    # A long linger: the acks=1 records stay in the write-ahead log, not yet committed, when the node is killed.
    node = cluster(0, **{"linger.ms": 5000})
    create_topic(node, "t", zk, {0})
    acked: dict[str, int] = {}
    for name in ("a0", "a1", "a2"):
        # produce_ok: ZooKeeper names the node leader a moment before the node has claimed the partition
        acked[name] = produce_ok(node.url, "t", {"records": [{"value": name, "partition": 0}]}, acks="1")[0]["offset"]
    node.kill()
    until(lambda: not zk.exists("/brokers/ids/0"), timeout_s=30)  # its session expired: the id is free again

    node.restart()
    for name in ("b0", "b1", "b2"):
        acked[name] = produce_ok(node.url, "t", {"records": [{"value": name, "partition": 0}]}, acks="1")[0]["offset"]
    acked["c0"] = produce_ok(node.url, "t", {"records": [{"value": "c0", "partition": 0}]}, acks="all")[0]["offset"]

    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(node.root)}))
    until(lambda: len(assert_gap_free(catalog, "t").get(0, [])) >= len(acked), timeout_s=30)
    log = [v.decode() for v in assert_gap_free(catalog, "t")[0]]
    assert {name: log.index(name) if name in log else None for name in acked} == acked, log
    assert len(log) == len(acked), log
