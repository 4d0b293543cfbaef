"""kill -9 of the node around a transaction's commit decision: decided commits roll forward exactly once, others
roll back.

The crash after the decision is made real by a topic whose commit cannot be written: the transaction's first
topic is appended, the second cannot be (its partition's data directory is a file; the node retries it), so the
commit is decided (``PrepareCommit`` in ``_transactions``) and half done when the node is killed.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from tests.support.server import Server

pytestmark = pytest.mark.crash

StartServer = Callable[..., Server]


def produce(c: httpx.Client, topic: str, values: list[str], tid: str, epoch: int) -> None:
    r = c.post(
        f"/v1/topics/{topic}/records",
        params={"transactional_id": tid, "producer_epoch": epoch},
        json={"records": [{"value": v} for v in values]},
    )
    assert r.status_code == 200, r.text


def values(root: Path, topic: str) -> list[tuple[int, bytes]]:
    rows = DeltaTable(str(root / "topics" / topic)).to_pyarrow_table(columns=["offset", "value"]).to_pylist()
    return sorted((r["offset"], r["value"]) for r in rows)


def start_transaction(node: Server) -> tuple[httpx.Client, int]:
    c = node.client()
    for name in ("a", "b"):
        assert c.post("/v1/topics", json={"name": name, "partitions": 1}).status_code == 201
    assert c.post("/v1/topics/a/records", json={"records": [{"value": "before"}]}).status_code == 200
    epoch = int(c.post("/v1/transactions/tx/init", json={}).json()["producer_epoch"])
    produce(c, "a", ["a0", "a1", "a2"], "tx", epoch)
    produce(c, "b", ["b0", "b1"], "tx", epoch)
    return c, epoch


def commit_quietly(url: str, epoch: int) -> None:
    """A commit whose answer never comes (the node is killed while it waits)."""
    with contextlib.suppress(httpx.TransportError), httpx.Client(base_url=url, timeout=60) as c:
        c.post("/v1/transactions/tx/commit", json={"producer_epoch": epoch})


def describe(c: httpx.Client) -> dict[str, Any]:
    r = c.get("/v1/transactions/tx")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_decided_commit_rolls_forward_exactly_once_after_kill_9(server: StartServer) -> None:
    node = server()
    c, epoch = start_transaction(node)
    blocker = node.root / "topics" / "b" / "partition=0"
    blocker.write_bytes(b"")  # topic b's next data file cannot be created
    # The node retries topic b's commit until storage comes back: the producer's commit waits, decided.
    committing = threading.Thread(target=commit_quietly, args=(node.url, epoch), daemon=True)
    committing.start()
    deadline = time.monotonic() + 30
    while describe(c)["state"] != "PrepareCommit" or len(values(node.root, "a")) < 4:
        assert time.monotonic() < deadline, "the commit was never decided"
        time.sleep(0.05)
    assert values(node.root, "a") == [(0, b"before"), (1, b"a0"), (2, b"a1"), (3, b"a2")]  # half done
    assert values(node.root, "b") == []
    node.kill()
    blocker.unlink()

    node.restart()
    c = node.client()
    assert describe(c)["state"] == "CompleteCommit"
    assert values(node.root, "a") == [(0, b"before"), (1, b"a0"), (2, b"a1"), (3, b"a2")]  # not twice
    assert values(node.root, "b") == [(0, b"b0"), (1, b"b1")]
    r = c.post("/v1/transactions/tx/commit", json={"producer_epoch": epoch})  # the producer's retry
    assert r.status_code == 200, r.text
    assert {(o["topic"], o["first_offset"], o["last_offset"]) for o in r.json()["offsets"]} == {
        ("a", 1, 3),
        ("b", 0, 1),
    }
    assert not any((node.root / "_transactions" / "_staged").rglob("*.arrow"))


def test_an_undecided_transaction_rolls_back_after_kill_9(server: StartServer) -> None:
    node = server()
    c, epoch = start_transaction(node)
    node.kill()

    node.restart()
    c = node.client()
    state = describe(c)
    assert state["state"] == "CompleteAbort" and state["producer_epoch"] == epoch + 1
    assert values(node.root, "a") == [(0, b"before")]
    assert values(node.root, "b") == []
    assert not any((node.root / "_transactions" / "_staged").rglob("*.arrow"))
    r = c.post("/v1/transactions/tx/commit", json={"producer_epoch": epoch})
    assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED", r.text


def test_transactions_under_repeated_kill_9_are_all_or_nothing_exactly_once(server: StartServer) -> None:
    """A producer commits transactions across two topics while the node is killed three times at random."""
    node = server()
    c = node.client()
    for name in ("a", "b"):
        assert c.post("/v1/topics", json={"name": name, "partitions": 2}).status_code == 201
    kills_done = threading.Event()

    def killer() -> None:
        rng = random.Random(7)
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 2.0))
            node.kill()
            node.restart()
        kills_done.set()

    acked: set[int] = set()
    sent: set[int] = set()
    threading.Thread(target=killer, daemon=True).start()
    client = httpx.Client(base_url=node.url, timeout=30)
    epoch: int | None = None
    i = 0
    deadline = time.monotonic() + 120
    last = None  # after the last kill, five more transactions
    while last is None or i < last:
        assert time.monotonic() < deadline
        if last is None and kills_done.is_set():
            last = i + 5
        try:
            if epoch is None:
                r = client.post("/v1/transactions/job/init", json={})
                assert r.status_code == 200, r.text
                epoch = int(r.json()["producer_epoch"])
            sent.add(i)
            for topic, n in (("a", 3), ("b", 2)):
                records = [{"key": f"k{j}", "value": f"t{i}-{topic}{j}"} for j in range(n)]
                r = client.post(
                    f"/v1/topics/{topic}/records",
                    params={"transactional_id": "job", "producer_epoch": epoch},
                    json={"records": records},
                )
                assert r.status_code == 200, r.text
            r = client.post("/v1/transactions/job/commit", json={"producer_epoch": epoch})
            assert r.status_code == 200, r.text
            acked.add(i)
        except (httpx.TransportError, AssertionError) as e:
            if isinstance(e, AssertionError) and "PRODUCER_FENCED" not in str(e) and "503" not in str(e):
                raise
            epoch = None  # the node restarted: its open transaction was aborted (or its decided one completed)
            wait_ready(node.url)
        i += 1
    kills_done.wait(60)
    wait_ready(node.url)

    by_txn: dict[int, list[tuple[str, int, int]]] = {}
    for topic in ("a", "b"):
        rows = DeltaTable(str(node.root / "topics" / topic)).to_pyarrow_table().to_pylist()
        for p in (0, 1):
            offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
            assert offsets == list(range(len(offsets))), f"{topic}/{p}: offsets are not gap-free"
        for r in rows:
            txn = int(r["value"].decode().split("-")[0][1:])
            by_txn.setdefault(txn, []).append((topic, r["partition"], r["offset"]))
    assert acked <= set(by_txn), "an acknowledged commit lost records"
    for txn, where in by_txn.items():
        assert txn in sent
        assert len(where) == 5, f"transaction {txn} is partly visible or doubled: {where}"
        for topic in ("a", "b"):
            for p in (0, 1):
                offs = sorted(o for t, q, o in where if (t, q) == (topic, p))
                assert offs == list(range(offs[0], offs[0] + len(offs))) if offs else True, (txn, topic, p, offs)
    assert len(acked) >= 10


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError("the node did not come back")
