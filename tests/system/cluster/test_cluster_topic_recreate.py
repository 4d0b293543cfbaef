"""A topic deleted through one node and created again: every node writes the new topic at once, from offset 0.

Each node of the cluster had a pipeline (a writer) of the old topic; only the
node that served DELETE closes its own. The others notice by the topic's ID —
in its znode and beside its table — and open the new topic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest
from kazoo.client import KazooClient

from tests.support.server import Server
from tests.system.cluster.cluster_helpers import PARTITIONS, create_topic, produce_ok

pytestmark = pytest.mark.zookeeper

FEW_SECONDS = 10.0


def _znode_topic_id(zk: KazooClient, topic: str) -> str:
    return str(json.loads(zk.get(f"/brokers/topics/{topic}")[0])["topic_id"])


def test_a_topic_deleted_and_created_again_is_written_through_every_node_from_offset_0(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    a, b, c = (cluster(i) for i in (1, 2, 3))
    create_topic(a, "t", zk, {1, 2, 3})
    old_id = _znode_topic_id(zk, "t")
    assert httpx.get(f"{a.url}/v1/topics/t").json()["topic_id"] == old_id
    for node in (a, b, c):  # every node writes, so every leader has a pipeline of the old topic
        for p in range(PARTITIONS):
            produce_ok(node.url, "t", {"records": [{"value": f"old-{node.port}-{p}", "partition": p}]})

    assert httpx.delete(f"{a.url}/v1/topics/t", timeout=30).status_code == 204
    create_topic(a, "t", zk, {1, 2, 3})
    new_id = _znode_topic_id(zk, "t")
    assert new_id != old_id
    assert {t["name"]: t["topic_id"] for t in httpx.get(f"{b.url}/v1/metadata").json()["topics"]} == {"t": new_id}

    started = time.monotonic()
    for round_, node in enumerate((b, c)):
        for p in range(PARTITIONS):
            got = produce_ok(node.url, "t", {"records": [{"value": f"new-{round_}-{p}", "partition": p}]})
            assert got == [{"partition": p, "offset": round_}]
    assert time.monotonic() - started < FEW_SECONDS
    for node in (a, b, c):
        for p in range(PARTITIONS):
            r = httpx.get(f"{node.url}/v1/topics/t/partitions/{p}/records", params={"offset": 0})
            assert [x["value"] for x in r.json()["records"]] == [f"new-0-{p}", f"new-1-{p}"]
