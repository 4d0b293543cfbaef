"""/v1/stats of a running node: records/s, bytes/s and lag over HTTP (the sampler is in
``tests/unit/ingest_api/test_stats.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.server import Server


def test_rates_and_lag_over_http(server: Callable[..., Server]) -> None:
    srv = server(**{"stats.sample.ms": 100})
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
        first = c.get("/v1/stats/topics/t").json()  # sampled on demand: no sweep needed yet
        assert first["latest"]["records"] == 0 and first["interval_ms"] == 100
        body = {"records": [{"value": "x" * 100, "partition": i % 2} for i in range(50)]}
        assert c.post("/v1/topics/t/records", json=body).is_success
        assert c.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"0": 5, "1": 0}}).is_success

        def latest() -> dict[str, Any]:
            return dict(c.get("/v1/stats/topics/t").json()["latest"])

        _wait(lambda: latest()["records"] == 50)
        samples = c.get("/v1/stats/topics/t").json()["samples"]
        # the growth from 0 to 50 records shows as a positive rate in exactly the sample that saw it
        grew = [s for s in samples if s["records_per_s"] > 0]
        assert len(grew) == 1 and grew[0]["bytes_per_s"] > 0
        assert [s["time_ms"] for s in samples] == sorted(s["time_ms"] for s in samples)
        listed = c.get("/v1/stats/topics").json()
        assert [t["topic"] for t in listed["topics"]] == ["t"]
        described = c.get("/v1/topics/t").json()
        assert listed["topics"][0]["latest"]["size_bytes"] == sum(p["size_bytes"] for p in described["partitions"])

        group = c.get("/v1/stats/groups/g").json()
        assert group["samples"][-1]["lag"] == 45
        assert group["samples"][-1]["topics"] == {"t": {"0": 20, "1": 25}}
        assert c.post("/v1/groups/g/reset", json={"topic": "t", "to": "latest"}).is_success
        _wait(lambda: c.get("/v1/stats/groups").json()["groups"][0]["latest"]["lag"] == 0)
        assert c.get("/v1/stats/topics/missing").status_code == 404
        assert c.get("/v1/stats/groups/missing").status_code == 404


def _wait(condition: Callable[[], bool], timeout_s: float = 20) -> None:
    """Poll an HTTP condition (the sampler runs every 100 ms in the server)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        time.sleep(0.05)
