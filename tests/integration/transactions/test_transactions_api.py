"""Transactions over real HTTP to a real ``logstore serve``: docs/transactions.md, end to end.

Whatever a transaction stages, the topic tables hold nothing of it until it commits — checked with fetch and
with delta-rs reading the table directly — and a commit's records take consecutive offsets per partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from tests.support.server import Server

StartServer = Callable[..., Server]


@pytest.fixture
def node(server: StartServer) -> Server:
    return server()


def create(c: httpx.Client, name: str, partitions: int = 1) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def init(c: httpx.Client, tid: str, **body: Any) -> int:
    r = c.post(f"/v1/transactions/{tid}/init", json=body)
    assert r.status_code == 200, r.text
    return int(r.json()["producer_epoch"])


def produce(c: httpx.Client, topic: str, records: list[dict[str, Any]], tid: str, epoch: int) -> httpx.Response:
    return c.post(
        f"/v1/topics/{topic}/records",
        params={"transactional_id": tid, "producer_epoch": epoch},
        json={"records": records},
    )


def end(c: httpx.Client, tid: str, what: str, epoch: int | None) -> httpx.Response:
    return c.post(f"/v1/transactions/{tid}/{what}", json={"producer_epoch": epoch})


def error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code, r.text


def table_rows(root: Path, topic: str) -> list[dict[str, Any]]:
    """What any Delta reader sees in the topic table (delta-rs, no logstore code)."""
    rows = DeltaTable(str(root / "topics" / topic)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def fetch(c: httpx.Client, topic: str, partition: int = 0) -> dict[str, Any]:
    r = c.get(
        f"/v1/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "isolation_level": "read_committed"},
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["last_stable_offset"] == body["high_watermark"]
    return body


def test_commit_across_two_topics_is_visible_at_once_with_consecutive_offsets(node: Server) -> None:
    c = node.client()
    create(c, "orders", partitions=2)
    create(c, "audit")
    epoch = init(c, "tx-1")
    for i in range(3):
        r = produce(
            c, "orders", [{"value": f"o{i}", "partition": i % 2}, {"value": f"p{i}", "partition": 0}], "tx-1", epoch
        )
        assert r.status_code == 200, r.text
        assert [o["offset"] for o in r.json()["offsets"]] == [None, None]
        # another producer writes between the transaction's produces
        assert (
            c.post("/v1/topics/orders/records", json={"records": [{"value": f"x{i}", "partition": 0}]}).status_code
            == 200
        )
    assert produce(c, "audit", [{"value": "a0"}, {"value": "a1"}], "tx-1", epoch).status_code == 200

    # open: nowhere to be seen
    assert [r["value"] for r in table_rows(node.root, "orders")] == [b"x0", b"x1", b"x2"]
    assert table_rows(node.root, "audit") == []
    assert fetch(c, "audit")["records"] == []
    assert c.get("/v1/transactions/tx-1").json()["state"] == "Ongoing"

    r = end(c, "tx-1", "commit", epoch)
    assert r.status_code == 200, r.text
    ranges = {(o["topic"], o["partition"]): (o["first_offset"], o["last_offset"]) for o in r.json()["offsets"]}
    assert ranges == {("orders", 0): (3, 7), ("orders", 1): (0, 0), ("audit", 0): (0, 1)}

    orders = table_rows(node.root, "orders")
    p0 = [(r["offset"], r["value"]) for r in orders if r["partition"] == 0]
    assert p0 == [
        (0, b"x0"), (1, b"x1"), (2, b"x2"),
        (3, b"o0"), (4, b"p0"), (5, b"p1"), (6, b"o2"), (7, b"p2"),
    ]  # fmt: skip
    assert [(r["offset"], r["value"]) for r in orders if r["partition"] == 1] == [(0, b"o1")]
    assert [r["value"] for r in table_rows(node.root, "audit")] == [b"a0", b"a1"]
    assert [r["value"] for r in fetch(c, "audit")["records"]] == ["a0", "a1"]
    assert c.get("/v1/transactions/tx-1").json()["state"] == "CompleteCommit"

    # a retry of the answered commit gets the same answer and writes nothing
    again = end(c, "tx-1", "commit", epoch)
    assert again.status_code == 200 and again.json() == r.json()
    assert len(table_rows(node.root, "orders")) == 9


def test_abort_leaves_nothing_in_the_table_nor_on_storage(node: Server) -> None:
    c = node.client()
    create(c, "t")
    epoch = init(c, "tx-a")
    assert produce(c, "t", [{"key": "k", "value": "v"}] * 5, "tx-a", epoch).status_code == 200
    staged = node.root / "_transactions" / "_staged" / "tx-a"
    assert any(p.suffix == ".arrow" for p in staged.rglob("*"))
    r = end(c, "tx-a", "abort", epoch)
    assert r.status_code == 200, r.text
    assert table_rows(node.root, "t") == []
    assert fetch(c, "t")["records"] == [] and fetch(c, "t")["high_watermark"] == 0
    assert not any(p.suffix == ".arrow" for p in staged.rglob("*"))
    assert c.get("/v1/transactions/tx-a").json()["state"] == "CompleteAbort"
    error(end(c, "tx-a", "commit", epoch), 409, "INVALID_TXN_STATE")
    # the next transaction of the same producer starts clean
    assert produce(c, "t", [{"value": "w"}], "tx-a", epoch).status_code == 200
    assert end(c, "tx-a", "commit", epoch).status_code == 200
    assert [(r["offset"], r["value"]) for r in table_rows(node.root, "t")] == [(0, b"w")]


def test_a_zombie_is_fenced_and_none_of_its_records_is_visible(node: Server) -> None:
    c = node.client()
    create(c, "t")
    old = init(c, "tx-z")
    assert produce(c, "t", [{"value": "zombie-1"}], "tx-z", old).status_code == 200
    new = init(c, "tx-z")
    assert new == old + 1
    error(produce(c, "t", [{"value": "zombie-2"}], "tx-z", old), 409, "PRODUCER_FENCED")
    error(end(c, "tx-z", "commit", old), 409, "PRODUCER_FENCED")
    error(
        c.post(
            "/v1/transactions/tx-z/offsets",
            json={"producer_epoch": old, "group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}]},
        ),
        409,
        "PRODUCER_FENCED",
    )
    assert produce(c, "t", [{"value": "fresh"}], "tx-z", new).status_code == 200
    assert end(c, "tx-z", "commit", new).status_code == 200
    assert [r["value"] for r in table_rows(node.root, "t")] == [b"fresh"]
    error(end(c, "tx-z", "abort", old), 409, "PRODUCER_FENCED")


def committed(c: httpx.Client, group: str) -> dict[tuple[str, int], int]:
    r = c.get(f"/v1/groups/{group}")
    if r.status_code == 404:
        return {}
    assert r.status_code == 200, r.text
    return {(t["topic"], p["partition"]): p["committed_offset"] for t in r.json()["topics"] for p in t["partitions"]}


def test_group_offsets_commit_with_the_transaction_only(node: Server) -> None:
    c = node.client()
    create(c, "in")
    create(c, "out")
    assert c.post("/v1/topics/in/records", json={"records": [{"value": str(i)} for i in range(4)]}).status_code == 200
    epoch = init(c, "tx-g")
    offsets = {"producer_epoch": epoch, "group": "etl", "offsets": [{"topic": "in", "partition": 0, "offset": 2}]}

    assert produce(c, "out", [{"value": "0"}, {"value": "1"}], "tx-g", epoch).status_code == 200
    assert c.post("/v1/transactions/tx-g/offsets", json=offsets).status_code == 200
    assert committed(c, "etl") == {}
    assert end(c, "tx-g", "abort", epoch).status_code == 200
    assert committed(c, "etl") == {}

    assert produce(c, "out", [{"value": "0"}, {"value": "1"}], "tx-g", epoch).status_code == 200
    assert c.post("/v1/transactions/tx-g/offsets", json=offsets).status_code == 200
    assert committed(c, "etl") == {}
    assert end(c, "tx-g", "commit", epoch).status_code == 200
    assert committed(c, "etl") == {("in", 0): 2}
    assert [r["value"] for r in table_rows(node.root, "out")] == [b"0", b"1"]


def test_bad_input_gets_kafka_errors(node: Server) -> None:
    c = node.client()
    create(c, "t")
    error(produce(c, "t", [{"value": "v"}], "never", 0), 404, "TRANSACTIONAL_ID_NOT_FOUND")
    error(end(c, "never", "commit", 0), 404, "TRANSACTIONAL_ID_NOT_FOUND")
    error(c.get("/v1/transactions/never"), 404, "TRANSACTIONAL_ID_NOT_FOUND")
    error(c.post("/v1/transactions/x/init", json={"transaction_timeout_ms": 0}), 400, "INVALID_TRANSACTION_TIMEOUT")
    r = c.post("/v1/transactions/x/init", json={"transaction_timeout_ms": 900_001})
    error(r, 400, "INVALID_TRANSACTION_TIMEOUT")
    assert "transaction.max.timeout.ms" in r.json()["message"]
    epoch = init(c, "tx-e")
    error(end(c, "tx-e", "commit", epoch), 409, "INVALID_TXN_STATE")  # nothing open
    error(end(c, "tx-e", "commit", None), 400, "INVALID_REQUEST")
    r = c.post("/v1/topics/t/records", params={"transactional_id": "tx-e"}, json={"records": [{"value": "v"}]})
    error(r, 400, "INVALID_REQUEST")
    r = c.post(
        "/v1/topics/t/records",
        params={"transactional_id": "tx-e", "producer_epoch": epoch},
        json={"records": [{"value": "v"}], "producer_id": "p", "sequence": 0},
    )
    error(r, 400, "INVALID_REQUEST")
    error(produce(c, "t", [{"value": "v", "partition": 5}], "tx-e", epoch), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    error(produce(c, "t", [{"value": "v"}], "tx-e", epoch + 1), 409, "PRODUCER_FENCED")
    assert table_rows(node.root, "t") == []


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(server: StartServer) -> None:
    node = server(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50})
    c = node.client()
    create(c, "t")
    epoch = init(c, "tx-t", transaction_timeout_ms=300)
    assert produce(c, "t", [{"value": "late"}], "tx-t", epoch).status_code == 200
    deadline = time.monotonic() + 20
    while c.get("/v1/transactions/tx-t").json()["state"] != "CompleteAbort":
        assert time.monotonic() < deadline, "the coordinator never aborted the timed-out transaction"
        time.sleep(0.05)
    assert c.get("/v1/transactions/tx-t").json()["producer_epoch"] == epoch + 1
    error(end(c, "tx-t", "commit", epoch), 409, "PRODUCER_FENCED")
    assert table_rows(node.root, "t") == []


def test_list_and_describe(node: Server) -> None:
    c = node.client()
    create(c, "t", partitions=3)
    epoch = init(c, "b-tx", transaction_timeout_ms=5000)
    init(c, "a-tx")
    assert produce(c, "t", [{"value": "v", "partition": 2}], "b-tx", epoch).status_code == 200
    listed = c.get("/v1/transactions").json()["transactions"]
    assert [t["transactional_id"] for t in listed] == ["a-tx", "b-tx"]
    b = c.get("/v1/transactions/b-tx").json()
    assert b["state"] == "Ongoing" and b["transaction_timeout_ms"] == 5000 and b["producer_epoch"] == epoch
    assert b["topics"] == [{"topic": "t", "partitions": [2]}] and b["transaction_start_ms"] > 0
