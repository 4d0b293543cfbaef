"""A producer dropped from a node's bounded idempotent state (``producer.state.max.entries``) is re-read from
the topic's Delta log when it retries over HTTP (the state itself is in ``tests/unit/log/test_producer_state.py``)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.server import Server

LIMIT = 3


def test_retry_of_an_evicted_producer_over_http(server: Callable[..., Server]) -> None:
    api = server(**{"producer.state.max.entries": LIMIT}).client()
    assert api.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201

    def produce(pid: str, seq: int) -> httpx.Response:
        body = {"records": [{"value": f"{pid}-{seq}-a"}, {"key": "k", "value": f"{pid}-{seq}-b"}]}
        return api.post("/v1/topics/t/records", json={**body, "producer_id": pid, "sequence": seq})

    first = {f"p{i}": produce(f"p{i}", 0) for i in range(4 * LIMIT)}
    assert all(r.status_code == 200 for r in first.values())
    again = produce("p0", 0)
    assert again.status_code == 200 and again.json() == first["p0"].json()
    assert produce("p0", 2).status_code == 200  # a sequence may skip: the ones between went elsewhere
    older = produce("p0", 1)
    assert older.status_code == 409 and older.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    total = sum(p["high_watermark"] for p in api.get("/v1/topics/t").json()["partitions"])
    assert total == 2 * (4 * LIMIT + 1)
