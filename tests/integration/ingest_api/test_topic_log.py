"""Offsets for a timestamp (Kafka's ListOffsets) and a topic's maintenance history, over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from logstore.config import load_config
from logstore.log.catalog import Catalog
from maintenance import run_retention, run_vacuum
from tests.support.server import Server


def _records(ts: int, n: int) -> dict[str, Any]:
    return {"records": [{"value": f"v{i}", "partition": 0, "timestamp": ts + i} for i in range(n)]}


def test_offset_for_a_timestamp_is_the_first_at_or_after_it(server: Callable[..., Server]) -> None:
    srv = server()
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
        assert c.post("/v1/topics/t/records", json=_records(1_000, 5)).is_success  # offsets 0-4 at 1000-1004
        assert c.post("/v1/topics/t/records", json=_records(2_000, 5)).is_success  # offsets 5-9 at 2000-2004

        def offset(ts: int, partition: int = 0) -> Any:
            r = c.get(f"/v1/topics/t/partitions/{partition}/offsets", params={"timestamp": ts})
            return r.json()["offset"] if r.is_success else r.status_code

        assert [offset(0), offset(1_002), offset(1_005), offset(2_004), offset(9_999)] == [0, 2, 5, 9, 10]
        assert offset(5, partition=1) == 0  # empty: the high watermark
        assert offset(5, partition=2) == 404
        assert offset(2**63 // 1000 + 1) == 422  # past what a Parquet timestamp (µs) holds: invalid, not a server error
        assert c.get("/v1/topics/missing/partitions/0/offsets", params={"timestamp": 0}).status_code == 404


def test_maintenance_history_lists_retention_and_vacuum_not_produce(server: Callable[..., Server]) -> None:
    srv = server()
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1, "config": {"retention.ms": 1000}}).is_success
        for i in range(3):  # three commits, three files, all long expired
            assert c.post("/v1/topics/t/records", json=_records(1_000 + i, 2)).is_success
        assert c.get("/v1/topics/t/maintenance").json() == {"topic": "t", "operations": []}
        catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(srv.root)}))
        run_retention(catalog, "t", progress=lambda *_: None)
        run_vacuum(catalog, "t", retention_hours=0, enforce_retention_duration=False, progress=lambda *_: None)
        ops = c.get("/v1/topics/t/maintenance").json()["operations"]
        assert [o["operation"] for o in ops] == ["vacuum-end", "vacuum-start", "retention"]
        # retention keeps the newest file (Kafka's active segment); vacuum then deletes the two it removed
        assert ops[2]["files_removed"] == 2 and ops[2]["files_added"] == 0
        assert ops[0]["files_removed"] == 2
        assert [o["version"] for o in ops] == sorted((o["version"] for o in ops), reverse=True)
        assert len(c.get("/v1/topics/t/maintenance", params={"limit": 1}).json()["operations"]) == 1
        assert c.get("/v1/topics/missing/maintenance").status_code == 404
