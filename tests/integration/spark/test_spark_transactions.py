"""Spark sees a transaction's records only once it commits: format("delta"), format("logstore") and SQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession

from tests.support.server import Server

pytestmark = pytest.mark.spark

StartServer = Callable[..., Server]


def transaction(c: httpx.Client, tid: str, values: list[str], end: str | None) -> None:
    epoch = c.post(f"/v1/transactions/{tid}/init", json={}).json()["producer_epoch"]
    records: dict[str, Any] = {"records": [{"value": v, "partition": i % 2} for i, v in enumerate(values)]}
    r = c.post("/v1/topics/t/records", params={"transactional_id": tid, "producer_epoch": epoch}, json=records)
    assert r.status_code == 200, r.text
    if end is not None:
        assert c.post(f"/v1/transactions/{tid}/{end}", json={"producer_epoch": epoch}).status_code == 200


def test_spark_reads_committed_transactions_only(spark: SparkSession, server: StartServer) -> None:
    node = server()
    c = node.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    transaction(c, "aborted", ["a0", "a1", "a2"], "abort")
    transaction(c, "committed", ["c0", "c1", "c2", "c3"], "commit")
    transaction(c, "open", ["o0", "o1"], None)

    path = str(node.root / "topics" / "t")
    delta = spark.read.format("delta").load(path)
    assert sorted(r.value.decode() for r in delta.select("value").collect()) == ["c0", "c1", "c2", "c3"]
    assert spark.sql(f"SELECT count(*) AS n FROM delta.`{path}`").collect()[0].n == 4
    source = (
        spark.read.format("logstore")
        .option("logstore.root", str(node.root))
        .option("subscribe", "t")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    rows = sorted((r.partition, r.offset, r.value.decode()) for r in source.collect())
    assert rows == [(0, 0, "c0"), (0, 1, "c2"), (1, 0, "c1"), (1, 1, "c3")]
