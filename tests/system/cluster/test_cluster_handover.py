"""A hand-over keeps what the leaving leader promised: acks=1 records answered before their commit land there.

A live leader's write-ahead log is never replayed by the next leader, so a partition may leave a live node
only once that node committed everything it accepted for it (docs/cluster.md, "A hand-over between live
nodes"). Here node 1 leads both partitions of a topic and holds acks=1 records promised offsets but not yet
committed (a long ``linger.ms``); node 2 joins, and an election asked for moves one partition to it. Every
promised record must be at its promised offset, and the partition's first commit by node 2 must come after
them, at a higher leader epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from logstore.cluster.placement import preferred_leaders
from logstore.config import load_config
from logstore.log.catalog import Catalog
from tests.support.helpers import assert_gap_free
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import leader_epochs_in_log, leaders, produce, until

pytestmark = pytest.mark.zookeeper

LINGER_MS = 3000
"""Node 1 commits a group this long after its first batch: the acks=1 records wait uncommitted meanwhile."""


def test_records_promised_by_the_leaving_leader_are_committed_before_the_partition_moves(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    first = cluster(1, **{"linger.ms": LINGER_MS, "auto.leader.rebalance.enable": "false"})
    r = httpx.post(f"{first.url}/v1/topics", json={"name": "t", "partitions": 2}, timeout=30)
    assert r.status_code == 201, r.text
    until(lambda: len(leaders(zk, "t", 2)) == 2)
    cluster(2, **{"auto.leader.rebalance.enable": "false"})
    until(lambda: zk.exists("/brokers/ids/2"))
    moving = next(p for p in (0, 1) if preferred_leaders([("t", 0), ("t", 1)], [1, 2])[("t", p)] == 2)
    before = leaders(zk, "t", 2)
    assert before[moving][0] == 1

    promised: dict[str, int] = {}
    sent = time.monotonic()
    for i in range(5):
        r = produce(first.url, "t", {"records": [{"value": f"promised-{i}", "partition": moving}]}, acks="1")
        assert r.status_code == 200, r.text
        promised[f"promised-{i}"] = r.json()["offsets"][0]["offset"]
    assert time.monotonic() - sent < LINGER_MS / 1000, "answered only after the commit: nothing was only promised"
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(tmp_path / "data")}))
    assert not assert_gap_free(catalog, "t").get(moving), "committed before the election: nothing was only promised"

    r = httpx.post(f"{first.url}/v1/cluster/elect-leaders", json={"partitions": None}, timeout=60)
    assert r.status_code == 200, r.text
    results = {p["partition"]: p for p in r.json()["partitions"]}
    assert results[moving] == {"topic": "t", "partition": moving, "leader": 2, "preferred": 2, "error": None}
    after = leaders(zk, "t", 2)
    assert after[moving] == (2, before[moving][1] + 1)

    # node 2 leads it now: a record through it lands after the promised ones
    r = produce(first.url, "t", {"records": [{"value": "after", "partition": moving}]}, acks="all")
    assert r.status_code == 200, r.text
    log = [v.decode() for v in assert_gap_free(catalog, "t")[moving]]
    assert {name: log.index(name) if name in log else None for name in promised} == promised, log
    assert log == [*sorted(promised, key=promised.__getitem__), "after"]
    epochs = leader_epochs_in_log(tmp_path / "data", "t")[moving]
    assert epochs == sorted(epochs) and epochs[-1] == after[moving][1], epochs
