"""A hand-over keeps what the leaving leader promised: acks=1 records answered before their commit land there.

A live leader's write-ahead log is never replayed by the next leader, so a partition may leave a live node
only once that node committed everything it accepted for it (docs/cluster.md, "A hand-over between live
nodes"). The leaving node holds acks=1 records promised offsets but not yet committed (a long
``linger.ms``) when an election is asked for. Either it drains and the partition moves: every promised
record is at its promised offset, before the new leader's first commit at a higher leader epoch. Or it
dies in the middle of the hand-over (paused, then killed): the ordinary failover takes the partition at
the next epoch and replays its write-ahead log, so the promised records are at their offsets all the same.
"""

from __future__ import annotations

import json
import signal
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


def test_a_leader_that_dies_during_its_hand_over_is_failed_over_and_its_promises_replayed(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    # Node 3 starts first and is the controller; node 1 leads partitions and will hand one over.
    manual = {"auto.leader.rebalance.enable": "false"}
    third = cluster(3, **manual)
    until(lambda: zk.exists("/controller") and json.loads(zk.get("/controller")[0])["node_id"] == 3)
    first = cluster(1, **{**manual, "linger.ms": 20_000})
    r = httpx.post(f"{third.url}/v1/topics", json={"name": "t", "partitions": 3}, timeout=30)
    assert r.status_code == 201, r.text
    until(lambda: len(leaders(zk, "t", 3)) == 3)
    cluster(2, **manual)
    until(lambda: zk.exists("/brokers/ids/2"))
    tps = [("t", p) for p in range(3)]
    moving = next(p for p in range(3) if preferred_leaders(tps, [1, 2, 3])[("t", p)] == 2)
    before = leaders(zk, "t", 3)
    assert before[moving][0] == 1, before

    promised = {}
    for i in range(3):
        r = produce(first.url, "t", {"records": [{"value": f"promised-{i}", "partition": moving}]}, acks="1")
        assert r.status_code == 200, r.text
        promised[f"promised-{i}"] = r.json()["offsets"][0]["offset"]
    assert first.proc is not None
    first.proc.send_signal(signal.SIGSTOP)  # node 1 can neither commit nor drain: the hand-over cannot finish
    try:
        catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(tmp_path / "data")}))
        assert not assert_gap_free(catalog, "t").get(moving), "committed before the pause: nothing was only promised"
        r = httpx.post(f"{third.url}/v1/cluster/elect-leaders", params={"timeout_ms": 500}, timeout=30)
        assert r.status_code == 200, r.text
        assert {p["partition"]: p["error"] for p in r.json()["partitions"]}[moving] == "REQUEST_TIMED_OUT"
        state = json.loads(zk.get(f"/brokers/topics/t/partitions/{moving}/state")[0])
        assert state == {"leader": 1, "leader_epoch": before[moving][1], "handover_to": 2}, state
    finally:
        first.kill()  # dies in the middle of its hand-over

    # its session expires: the failover moves the partition at the next epoch and replays node 1's log
    until(lambda: leaders(zk, "t", 3)[moving][0] in (2, 3), timeout_s=30)
    after = json.loads(zk.get(f"/brokers/topics/t/partitions/{moving}/state")[0])
    assert after["leader_epoch"] == before[moving][1] + 1 and "handover_to" not in after, after
    until(lambda: len(assert_gap_free(catalog, "t").get(moving, [])) >= len(promised), timeout_s=30)
    log = [v.decode() for v in assert_gap_free(catalog, "t")[moving]]
    assert {name: log.index(name) if name in log else None for name in promised} == promised, log
