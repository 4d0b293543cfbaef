"""Transactions in cluster mode: one coordinator node per transactional id, forwarded to, failed over exactly once.

Real ZooKeeper and three real ``logstore serve`` nodes over one root. A
transaction across two topics whose partitions have different leaders is made
entirely through a node that does not coordinate its id; and when the
coordinator is killed with SIGKILL after it decided a commit (before the commit
completed), the id's next coordinator completes it exactly once and aborts the
transaction the dead one left open.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable
from kazoo.client import KazooClient

from logstore.client import Producer
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, until

pytestmark = pytest.mark.zookeeper

SWEEP_MS = 300
"""``transaction.abort.timed.out.transaction.cleanup.interval.ms`` of the nodes: how soon a successor sweeps."""


def coordinator_of(node: Server, tid: str) -> int:
    """The node coordinating ``tid``: placed as a group of the same name is."""
    r = httpx.get(f"{node.url}/v1/groups/{tid}/coordinator", timeout=10)
    assert r.status_code == 200, r.text
    return int(r.json()["node_id"])


def tid_on(node: Server, owner: int, prefix: str) -> str:
    return next(t for t in (f"{prefix}-{i}" for i in range(1000)) if coordinator_of(node, t) == owner)


def call(node: Server, tid: str, what: str, body: dict[str, object]) -> dict[str, object]:
    r = httpx.post(f"{node.url}/v1/transactions/{tid}/{what}", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return dict(r.json())


def stage(node: Server, tid: str, epoch: int, topic: str, partition: int, values: list[str]) -> None:
    r = httpx.post(
        f"{node.url}/v1/topics/{topic}/records",
        params={"transactional_id": tid, "producer_epoch": str(epoch)},
        json={"records": [{"partition": partition, "value": v} for v in values]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert {o["offset"] for o in r.json()["offsets"]} == {None}


def read(node: Server, topic: str, partition: int) -> list[tuple[int, str]]:
    r = httpx.get(f"{node.url}/v1/topics/{topic}/partitions/{partition}/records", params={"offset": 0}, timeout=30)
    assert r.status_code == 200, r.text
    return [(rec["offset"], rec["value"]) for rec in r.json()["records"]]


def state_in_table(root: Path, tid: str) -> str | None:
    rows = DeltaTable(str(root / "_transactions")).to_pyarrow_table().to_pylist()
    mine = sorted((r for r in rows if r["transactional_id"] == tid), key=lambda r: r["row_seq"])
    return mine[-1]["state"] if mine else None


def two_leaders(nodes: dict[int, Server], zk: KazooClient, avoid: set[int]) -> tuple[int, int, int, int]:
    """(partition of "debits", its leader, partition of "credits", its leader): two different leaders not in avoid."""
    debits = create_topic(nodes[1], "debits", zk, set(nodes))
    credits = create_topic(nodes[1], "credits", zk, set(nodes))
    for pd, (ld, _) in sorted(debits.items()):
        for pc, (lc, _) in sorted(credits.items()):
            if ld != lc and not {ld, lc} & avoid:
                return pd, ld, pc, lc
    raise AssertionError(f"no two partitions with different leaders outside {avoid}: {debits} {credits}")


def test_a_transaction_across_two_leaders_commits_through_a_node_that_does_not_coordinate_it(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    nodes = {i: cluster(i) for i in (1, 2, 3)}
    pd, _, pc, _ = two_leaders(nodes, zk, set())
    tid = "payments-0"
    owner = coordinator_of(nodes[1], tid)
    via = nodes[next(i for i in nodes if i != owner)]
    refused = httpx.post(f"{via.url}/v1/transactions/{tid}/init", params={"forward": "false"}, json={}, timeout=10)
    assert refused.status_code == 421 and refused.json()["error_code"] == "NOT_COORDINATOR", refused.text

    epoch = int(call(via, tid, "init", {})["producer_epoch"])  # type: ignore[call-overload]
    stage(via, tid, epoch, "debits", pd, ["alice-10", "bob-10"])
    stage(via, tid, epoch, "credits", pc, ["carol+20"])
    assert read(via, "debits", pd) == [] and read(via, "credits", pc) == []  # nothing visible while open
    desc = httpx.get(f"{via.url}/v1/transactions/{tid}", timeout=10).json()
    assert desc["state"] == "Ongoing" and {t["topic"] for t in desc["topics"]} == {"debits", "credits"}

    answer = call(via, tid, "commit", {"producer_epoch": epoch})
    ranges = {(o["topic"], o["partition"]): (o["first_offset"], o["last_offset"]) for o in answer["offsets"]}  # type: ignore[attr-defined]
    assert ranges == {("debits", pd): (0, 1), ("credits", pc): (0, 0)}
    for n in nodes.values():
        assert read(n, "debits", pd) == [(0, "alice-10"), (1, "bob-10")]
        assert read(n, "credits", pc) == [(0, "carol+20")]
    assert call(via, tid, "commit", {"producer_epoch": epoch}) == answer  # a retry: the same answer, nothing again
    listed = httpx.get(f"{nodes[owner].url}/v1/transactions", timeout=10).json()["transactions"]
    assert [(t["transactional_id"], t["state"]) for t in listed] == [(tid, "CompleteCommit")]

    # The Python producer sends a transaction's records to any node (not to the partitions' leaders).
    producer = Producer(nodes[1].url, transactional_id="payments-1")
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce("debits", "dave-5", partition=pd)
    producer.produce("credits", "erin+5", partition=pc)
    producer.commit_transaction()
    producer.close()
    assert read(via, "debits", pd)[2:] == [(2, "dave-5")] and read(via, "credits", pc)[1:] == [(1, "erin+5")]


def test_after_a_kill_of_the_coordinator_its_successor_completes_the_decided_commit_once_and_aborts_the_open_one(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    cfg = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": SWEEP_MS}
    nodes = {i: cluster(i, **cfg) for i in (1, 2, 3)}
    owner = coordinator_of(nodes[1], "decided-0")
    pd, _, pc, stalled = two_leaders(nodes, zk, {owner})
    decided, undecided = "decided-0", tid_on(nodes[1], owner, "open")
    via = nodes[next(i for i in nodes if i != owner)]

    e1 = int(call(via, decided, "init", {})["producer_epoch"])  # type: ignore[call-overload]
    stage(via, decided, e1, "debits", pd, ["d1", "d2"])
    stage(via, decided, e1, "credits", pc, ["c1"])
    e2 = int(call(via, undecided, "init", {})["producer_epoch"])  # type: ignore[call-overload]
    stage(via, undecided, e2, "debits", pd, ["never"])

    # The leader of the credits partition is paused: the coordinator decides the commit, then waits on it.
    paused = nodes[stalled].proc
    assert paused is not None
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        with httpx.Client(timeout=httpx.Timeout(1.0)) as client, pytest.raises(httpx.TimeoutException):
            client.post(f"{nodes[owner].url}/v1/transactions/{decided}/commit", json={"producer_epoch": e1})
        until(lambda: state_in_table(tmp_path / "data", decided) == "PrepareCommit")
        nodes[owner].kill()
    finally:
        os.kill(paused.pid, signal.SIGCONT)

    live = [n for i, n in nodes.items() if i != owner]
    until(lambda: state_in_table(tmp_path / "data", decided) == "CompleteCommit", timeout_s=60)
    until(lambda: state_in_table(tmp_path / "data", undecided) == "CompleteAbort", timeout_s=60)
    for n in live:  # exactly once, at consecutive offsets; nothing of the open transaction
        assert read(n, "debits", pd) == [(0, "d1"), (1, "d2")]
        assert read(n, "credits", pc) == [(0, "c1")]
    retried = call(live[0], decided, "commit", {"producer_epoch": e1})  # the producer's retry: the same offsets
    assert {(o["topic"], o["first_offset"], o["last_offset"]) for o in retried["offsets"]} == {  # type: ignore[attr-defined]
        ("debits", 0, 1),
        ("credits", 0, 0),
    }
    fenced = httpx.post(f"{live[0].url}/v1/transactions/{undecided}/commit", json={"producer_epoch": e2}, timeout=30)
    assert fenced.status_code == 409 and fenced.json()["error_code"] == "PRODUCER_FENCED", fenced.text
    assert not (tmp_path / "data" / "_transactions" / "_staged" / undecided).exists() or not any(
        (tmp_path / "data" / "_transactions" / "_staged" / undecided).rglob("*.arrow")
    )
