"""A leader killed holding acks=1 promises and restarted at once keeps them: every record at its promised offset.

The new leader of a dead node's partitions replays the write-ahead logs of the nodes not registered in ZooKeeper
(docs/cluster.md, failover). A node restarted at once registers again as soon as its old session has expired,
possibly before the new leader claimed its partitions: the new leader then took it for live, skipped its log and
committed other records at the offsets its acks=1 records were promised, and those records landed later at other
offsets, or never. A restarted node therefore commits its previous run's frames before it registers.

The test holds the topic's failover lock, so the new leader can claim nothing until the restarted node is either
registered (and the new leader sees it live) or waiting for that lock itself to replay its own frames first.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from kazoo.client import KazooClient

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.node.membership import FAILOVER_LOCKS
from tests.support.helpers import assert_gap_free
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, led_by, produce_ok, until

pytestmark = pytest.mark.zookeeper

FIXED_LEADERS = {"auto.leader.rebalance.enable": "false"}
"""No preferred-leader election: the restarted node leads nothing of the topic again during the test."""


def _sees(node: Server, node_id: int) -> bool:
    """Whether ``node``'s view of the cluster counts ``node_id`` live (registered)."""
    nodes = httpx.get(f"{node.url}/v1/metadata", timeout=10).json()["nodes"]
    return node_id in {n["node_id"] for n in nodes}


def test_acks1_records_of_a_leader_restarted_at_once_stay_at_their_promised_offsets(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    # A long linger: the acks=1 records are promised offsets and logged, not committed, when node 0 is killed.
    a = cluster(0, **{"linger.ms": 60_000}, **FIXED_LEADERS)
    b = cluster(1, **FIXED_LEADERS)
    state = create_topic(a, "t", zk, {0, 1})
    p = min(q for q, (leader, _epoch) in state.items() if leader == 0)
    acked: dict[str, int] = {}
    for name in ("a0", "a1", "a2"):
        body = {"records": [{"value": name, "partition": p}]}
        acked[name] = produce_ok(a.url, "t", body, acks="1")[0]["offset"]
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(a.root)}))
    assert acked == {"a0": 0, "a1": 1, "a2": 2}
    assert assert_gap_free(catalog, "t").get(p, []) == [], "promised, not committed yet"

    lock = zk.Lock(f"{FAILOVER_LOCKS}/t", "test")
    assert lock.acquire(timeout=30)
    try:
        a.kill()
        until(lambda: not zk.exists("/brokers/ids/0"), timeout_s=30)  # its session expired: the id is free
        until(lambda: led_by(zk, "t", {1}), timeout_s=30)  # node 1 is the leader of p, not yet claimed
        with ThreadPoolExecutor(1) as pool:
            restarted = pool.submit(a.restart)
            # Registered and seen live by node 1 (which then skips its log), or replaying its frames first.
            until(lambda: _sees(b, 0) or "0" in lock.contenders(), timeout_s=60)
            lock.release()
            restarted.result(timeout=90)
    finally:
        lock.release()

    acked["b0"] = produce_ok(b.url, "t", {"records": [{"value": "b0", "partition": p}]})[0]["offset"]
    log = [v.decode() for v in assert_gap_free(catalog, "t").get(p, [])]
    assert {name: log.index(name) if name in log else None for name in acked} == acked, log
    assert len(log) == len(acked), log
