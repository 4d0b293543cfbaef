"""Transactions against hostile or unlucky input, over real HTTP to a real ``logstore serve``.

A transactional id that names another id's staging, a plain producer naming itself as a commit's producer,
a topic deleted or created again under a transaction, group offsets no plain commit would take: none of them
may lose an acknowledged record, make part of a transaction visible, or wedge an id.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa
import pytest

from logstore.wire.arrow_produce import ARROW_STREAM, PRODUCER_ID_HEADER, SEQUENCE_HEADER, encode_produce
from tests.integration.transactions.test_transactions_api import create, end, error, init, produce, table_rows
from tests.support.server import Server

StartServer = Callable[..., Server]


@pytest.fixture
def node(server: StartServer) -> Server:
    return server()


def state(c: httpx.Client, tid: str) -> str:
    r = c.get(f"/v1/transactions/{tid}")
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


def values(c: httpx.Client, topic: str, partition: int = 0) -> list[Any]:
    r = c.get(f"/v1/topics/{topic}/partitions/{partition}/records", params={"offset": 0})
    assert r.status_code == 200, r.text
    return [x["value"] for x in r.json()["records"]]


def test_dot_ids_are_refused_and_a_commit_whose_staging_is_lost_is_never_answered_complete(node: Server) -> None:
    c = node.client()
    create(c, "t")
    # "." and ".." would stage into the staging root or another id's directory ("." of transaction 0 into id "0")
    for dots in ("%2E", "%2E%2E"):
        error(c.post(f"/v1/transactions/{dots}/init", json={}), 400, "INVALID_REQUEST")

    epoch = init(c, "0")
    assert produce(c, "t", [{"value": "kept", "partition": 0}], "0", epoch).status_code == 200
    # the staged files go (a disk lost, an operator's mistake): the decided commit must not pretend it completed
    shutil.rmtree(node.root / "_transactions" / "_staged" / "0" / "0")
    error(end(c, "0", "commit", epoch), 503, "KAFKA_STORAGE_ERROR")
    assert state(c, "0") == "PrepareCommit"
    assert values(c, "t") == [] and table_rows(node.root, "t") == []
    error(end(c, "0", "abort", epoch), 409, "INVALID_TXN_STATE")  # the producer may not undo a decision
    # the way out: an administrator's abort ends a decided commit that cannot complete; nothing of it is visible
    assert end(c, "0", "abort", None).status_code == 200
    assert state(c, "0") == "CompleteAbort"
    epoch = init(c, "0")
    assert produce(c, "t", [{"value": "again", "partition": 0}], "0", epoch).status_code == 200
    assert end(c, "0", "commit", epoch).status_code == 200
    assert values(c, "t") == ["again"]


def test_the_producer_a_commit_appends_with_is_reserved(node: Server) -> None:
    c = node.client()
    create(c, "t")
    r = c.post("/v1/transactions/tx/init", json={})
    assert r.status_code == 200, r.text
    pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
    forged = {"producer_id": f"__txn.{pid}", "sequence": 0, "records": [{"value": "forged", "partition": 0}]}
    error(c.post("/v1/topics/t/records", json=forged), 400, "INVALID_REQUEST")
    arrow = encode_produce(pa.table({"value": pa.array([b"forged"], pa.binary())}))
    headers = {"content-type": ARROW_STREAM, PRODUCER_ID_HEADER: f"__txn.{pid}", SEQUENCE_HEADER: "1000000"}
    error(c.post("/v1/topics/t/records", content=arrow, headers=headers), 400, "INVALID_REQUEST")
    # the transaction's commit is not taken for a retry, nor wedged by a sequence gap
    assert produce(c, "t", [{"value": "real", "partition": 0}], "tx", epoch).status_code == 200
    r = end(c, "tx", "commit", epoch)
    assert r.status_code == 200, r.text
    assert values(c, "t") == ["real"]


@pytest.mark.parametrize(("recreate", "code"), [(None, "UNKNOWN_TOPIC_OR_PARTITION"), (1, "INCONSISTENT_TOPIC_ID")])
def test_a_topic_deleted_or_created_again_under_a_transaction_aborts_it_whole(
    node: Server, recreate: int | None, code: str
) -> None:
    c = node.client()
    create(c, "a")
    create(c, "b", partitions=4)
    epoch = init(c, "tx")
    assert produce(c, "a", [{"value": "A", "partition": 0}], "tx", epoch).status_code == 200
    assert produce(c, "b", [{"value": "B", "partition": 3}], "tx", epoch).status_code == 200
    assert c.delete("/v1/topics/b").status_code in (200, 204)
    if recreate is not None:
        create(c, "b", partitions=recreate)
    r = end(c, "tx", "commit", epoch)
    assert r.status_code >= 400 and r.json()["error_code"] == code, r.text
    assert state(c, "tx") == "CompleteAbort"
    assert values(c, "a") == [] and table_rows(node.root, "a") == []  # nothing of it, not half
    # the id is not wedged: the same producer goes on
    assert produce(c, "a", [{"value": "A2", "partition": 0}], "tx", epoch).status_code == 200
    assert end(c, "tx", "commit", epoch).status_code == 200
    assert values(c, "a") == ["A2"]


def test_transactional_group_offsets_name_existing_topics_and_partitions(node: Server) -> None:
    c = node.client()
    create(c, "t")
    epoch = init(c, "tx")

    def send(topic: str, partition: int, offset: int) -> httpx.Response:
        body = {
            "producer_epoch": epoch,
            "group": "g",
            "offsets": [{"topic": topic, "partition": partition, "offset": offset}],
        }
        return c.post("/v1/transactions/tx/offsets", json=body)

    error(send("no-such-topic", 0, 1), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    error(send("t", 7, 0), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert send("t", 0, 0).status_code == 200
    assert end(c, "tx", "commit", epoch).status_code == 200
    r = c.get("/v1/groups/g")
    assert r.status_code == 200, r.text
    assert [(t["topic"], [p["partition"] for p in t["partitions"]]) for t in r.json()["topics"]] == [("t", [0])]


def test_partitions_added_under_a_transaction_do_not_abort_it(node: Server) -> None:
    c = node.client()
    create(c, "grown", partitions=2)
    epoch = init(c, "tx")
    assert produce(c, "grown", [{"value": "x", "partition": 1}], "tx", epoch).status_code == 200
    r = c.patch("/v1/topics/grown", json={"partitions": 4})
    assert r.status_code == 200, r.text
    r = end(c, "tx", "commit", epoch)
    assert r.status_code == 200, r.text
    assert values(c, "grown", 1) == ["x"]
