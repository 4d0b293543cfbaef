"""A node opens every topic of the cluster before it is given partitions of it.

Opening a topic (its table read, its write-ahead log opened) took 2 to 4 s of a failover in the 30-minute
nemesis when the node given a failed leader's partitions had never led one of that topic since it started:
the claim could begin only after the open. Opened ahead, the failover pays only for the claim.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from tests.support.server import Server
from tests.system.cluster.cluster_helpers import leaders, solo_topic_on_two_nodes, until

pytestmark = pytest.mark.zookeeper


def test_a_node_opens_a_topic_it_leads_no_partition_of_and_claims_it_when_the_leader_dies(
    cluster: Callable[..., Server], cluster_root: Path, zk: KazooClient
) -> None:
    nodes = {i: cluster(i) for i in (1, 2)}
    leader, standby = solo_topic_on_two_nodes(nodes, zk)
    # The other node has the topic open — its write-ahead log directory is there — without leading any of it.
    until(lambda: (cluster_root / "_wal" / str(standby) / "solo").is_dir())
    assert leaders(zk, "solo", 1)[0][0] == leader

    nodes[leader].kill()  # kill -9
    until(lambda: leaders(zk, "solo", 1)[0][0] == standby)
    r = until(
        lambda: (
            x
            if (
                x := httpx.post(f"{nodes[standby].url}/v1/topics/solo/records", json={"records": [{"value": "a"}]})
            ).status_code
            == 200
            else None
        )
    )
    assert isinstance(r, httpx.Response) and r.json()["offsets"] == [{"partition": 0, "offset": 0}]
