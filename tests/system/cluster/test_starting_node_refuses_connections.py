"""A node that has not finished starting refuses HTTP connections, rather than holding them.

A restarted cluster node commits its previous run's write-ahead log frames before it registers, under each topic's
failover lock, which may take seconds. Its ports were listened on from the start, so a client that picked it got
its connection accepted and its request held until the start was done; the nemesis saw every producer thread wait
2.7 s on a restarting node while the partitions they wrote had new leaders elsewhere. Now the HTTP port is bound
at once (a taken one still stops the start) and listened on only once the node serves: a client is refused at
once and tries another node. (The Kafka listener listens when it binds, as Kafka's broker accepts before it
serves: which node of a host gets the default port is settled there, and Kafka's clients find leaders through
Metadata, which names only registered nodes.)

The test holds the topic's failover lock, so the restarted node waits in its start for as long as the test likes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from kazoo.client import KazooClient

from logstore.node.membership import FAILOVER_LOCKS
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, produce_ok, until

pytestmark = pytest.mark.zookeeper


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_restarting_node_refuses_connections_until_it_serves(cluster: Callable[..., Server], zk: KazooClient) -> None:
    fixed = {"auto.leader.rebalance.enable": "false"}
    a = cluster(0, **{"linger.ms": 60_000}, **fixed)  # its acks=1 records stay frames in its log
    cluster(1, **fixed)
    state = create_topic(a, "t", zk, {0, 1})
    p = min(q for q, (leader, _epoch) in state.items() if leader == 0)
    produce_ok(a.url, "t", {"records": [{"value": "a0", "partition": p}]}, acks="1")
    assert not _refused(a.port)

    lock = zk.Lock(f"{FAILOVER_LOCKS}/t", "test")
    assert lock.acquire(timeout=30)
    try:
        a.kill()
        until(lambda: not zk.exists("/brokers/ids/0"), timeout_s=30)
        with ThreadPoolExecutor(1) as pool:
            restarted = pool.submit(a.restart)
            until(lambda: "0" in lock.contenders(), timeout_s=60)  # in its start, its ports bound, waiting
            assert _refused(a.port), "the HTTP port accepted a connection before the node serves"
            lock.release()
            restarted.result(timeout=90)
    finally:
        lock.release()
    assert httpx.get(f"{a.url}/readyz", timeout=10).status_code == 200
