"""The HTTP API over real HTTP to a real `logstore serve`: every endpoint and error of docs/design.md §3."""

from __future__ import annotations

import base64
import concurrent.futures
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from logstore.log.partitioner import murmur2, to_positive
from tests.support.server import Server

StartServer = Callable[..., Server]


@pytest.fixture
def api(server: StartServer) -> httpx.Client:
    return server().client()


def create(c: httpx.Client, name: str, partitions: int = 1, **config: Any) -> dict[str, Any]:
    r = c.post("/v1/topics", json={"name": name, "partitions": partitions, "config": config})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def produce(
    c: httpx.Client, topic: str, records: list[dict[str, Any]], acks: str = "all", **extra: Any
) -> httpx.Response:
    return c.post(f"/v1/topics/{topic}/records", params={"acks": acks}, json={"records": records, **extra})


def error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error_code"] == code, body
    return str(body["message"])


def test_topics_lifecycle(api: httpx.Client) -> None:
    t = create(api, "orders", 2, **{"retention.ms": 1000})
    assert [p["partition"] for p in t["partitions"]] == [0, 1]
    assert t["config"]["retention.ms"] == 1000
    error(api.post("/v1/topics", json={"name": "orders", "partitions": 1}), 409, "TOPIC_ALREADY_EXISTS")
    assert api.get("/v1/topics").json() == {"topics": ["orders"]}
    r = api.patch("/v1/topics/orders", json={"partitions": 3, "config": {"cleanup.policy": "compact"}})
    assert len(r.json()["partitions"]) == 3 and r.json()["config"]["cleanup.policy"] == "compact"
    error(api.patch("/v1/topics/orders", json={"partitions": 1}), 400, "INVALID_PARTITIONS")
    error(api.patch("/v1/topics/orders", json={"config": {"nope": 1}}), 400, "INVALID_CONFIG")
    assert api.delete("/v1/topics/orders").status_code == 204
    error(api.get("/v1/topics/orders"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    error(api.post("/v1/topics", json={"name": "bad name", "partitions": 1}), 400, "INVALID_TOPIC_EXCEPTION")
    error(api.post("/v1/topics", json={"name": "z", "partitions": 0}), 400, "INVALID_PARTITIONS")
    error(api.post("/v1/topics", json={"name": "z", "partitions": "many"}), 422, "INVALID_REQUEST")


def test_produce_and_fetch_round_trip(api: httpx.Client) -> None:
    create(api, "t", 4)
    records = [
        {"key": "user-1", "value": "hello", "headers": {"h": "v", "bin": {"b64": "AP8="}}, "timestamp": 1732200000000},
        {"key": {"b64": base64.b64encode(b"\xff\x00").decode()}, "value": {"b64": "gA=="}},
        {"value": None, "key": "user-1"},
        {"value": "explicit", "partition": 3},
    ]
    r = produce(api, "t", records)
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    p_user = to_positive(murmur2(b"user-1")) % 4
    assert offsets[0] == {"partition": p_user, "offset": 0}
    assert offsets[2] == {"partition": p_user, "offset": 1}
    assert offsets[1]["partition"] == to_positive(murmur2(b"\xff\x00")) % 4
    assert offsets[3]["partition"] == 3
    got = api.get(f"/v1/topics/t/partitions/{p_user}/records", params={"offset": 0}).json()
    assert got["high_watermark"] == 2 and got["log_start_offset"] == 0
    first, tomb = got["records"]
    assert (first["key"], first["value"], first["timestamp"]) == ("user-1", "hello", 1732200000000)
    assert first["headers"] == {"h": "v", "bin": {"b64": "AP8="}}
    assert tomb["value"] is None
    p1 = offsets[1]["partition"]
    bin_rec = api.get(f"/v1/topics/t/partitions/{p1}/records", params={"offset": offsets[1]["offset"]}).json()[
        "records"
    ][0]
    assert bin_rec["key"] == {"b64": base64.b64encode(b"\xff\x00").decode()} and bin_rec["value"] == {"b64": "gA=="}


def test_the_answer_names_each_records_partition_and_offset_in_request_order(api: httpx.Client) -> None:
    """Both answers (acks=all after the commit, acks=1 once logged) list every record, in the request's order."""
    create(api, "t", partitions=3)
    sent = [{"value": f"v{i}", "partition": (7 * i) % 3} for i in range(500)]
    next_offset = [0, 0, 0]
    for acks in ("all", "1", "all"):
        r = produce(api, "t", sent, acks=acks)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        want = []
        for rec in sent:
            p = rec["partition"]
            want.append({"partition": p, "offset": next_offset[p]})
            next_offset[p] += 1
        assert r.json() == {"offsets": want}, acks
    for p in range(3):
        got = api.get(f"/v1/topics/t/partitions/{p}/records", params={"offset": 0, "max_records": 2000}).json()
        assert [rec["offset"] for rec in got["records"]] == list(range(next_offset[p]))


def test_acks_levels(api: httpx.Client) -> None:
    create(api, "t")
    assert produce(api, "t", [{"value": "a"}], acks="0").status_code == 202
    one = produce(api, "t", [{"value": "b"}, {"value": "c"}], acks="1")
    assert one.status_code == 200
    assert [o["offset"] for o in one.json()["offsets"]] == [1, 2]
    assert produce(api, "t", [{"value": "d"}]).json()["offsets"] == [{"partition": 0, "offset": 3}]
    values = [r["value"] for r in api.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).json()["records"]]
    assert values == ["a", "b", "c", "d"]
    error(produce(api, "t", [{"value": "x"}], acks="2"), 422, "INVALID_REQUEST")


def test_idempotent_producer(api: httpx.Client) -> None:
    create(api, "t", 2)
    body = [{"key": "k", "value": "v1"}, {"value": "v2"}]
    first = produce(api, "t", body, producer_id="p-1", sequence=0)
    again = produce(api, "t", body, producer_id="p-1", sequence=0)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    # sequences increase but may skip (the ones between went to other partitions); one below is refused
    assert produce(api, "t", body, producer_id="p-1", sequence=5).status_code == 200
    msg = error(produce(api, "t", body, producer_id="p-1", sequence=1), 409, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert "committed sequence 5" in msg
    total = sum(p["high_watermark"] for p in api.get("/v1/topics/t").json()["partitions"])
    assert total == 4
    error(produce(api, "t", body, producer_id="p-1"), 400, "INVALID_REQUEST")


def test_limits_and_bad_input(server: StartServer) -> None:
    api = server(**{"max.request.size": 20000}).client()
    create(api, "t", 2, **{"message.max.bytes": 100})
    error(produce(api, "t", [{"value": "x" * 101}]), 413, "MESSAGE_TOO_LARGE")
    error(produce(api, "t", [{"value": "x" * 90}] * 300), 413, "RECORD_LIST_TOO_LARGE")
    error(produce(api, "nope", [{"value": "x"}]), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    error(produce(api, "t", [{"value": "x", "partition": 2}]), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    error(api.post("/v1/topics/t/records", content=b"{not json"), 400, "INVALID_REQUEST")
    error(api.post("/v1/topics/t/records", json=[1, 2]), 400, "INVALID_REQUEST")
    error(produce(api, "t", [{"value": 5}]), 400, "INVALID_REQUEST")
    error(produce(api, "t", [{"value": {"b64": "!!"}}]), 400, "INVALID_REQUEST")
    error(produce(api, "t", [{"value": "x", "timestamp": -1}]), 400, "INVALID_TIMESTAMP")
    error(produce(api, "t", [{"value": "x", "colour": "red"}]), 400, "INVALID_REQUEST")
    error(api.get("/v1/topics/t/partitions/0/records", params={"offset": 5}), 416, "OFFSET_OUT_OF_RANGE")
    error(api.get("/v1/topics/t/partitions/0/records"), 422, "INVALID_REQUEST")
    # nothing above disturbed the log
    assert produce(api, "t", [{"value": "ok", "partition": 0}]).json()["offsets"] == [{"partition": 0, "offset": 0}]


def test_auto_create_topics(server: StartServer) -> None:
    api = server(**{"auto.create.topics.enable": "true", "num.partitions": 3}).client()
    assert produce(api, "fresh", [{"value": "x"}]).status_code == 200
    assert len(api.get("/v1/topics/fresh").json()["partitions"]) == 3


def test_full_buffer_is_429_with_retry_after(server: StartServer) -> None:
    api = server(**{"buffer.memory": 1000, "linger.ms": 3000, "batch.size": 10_000_000}).client()
    create(api, "t")
    assert produce(api, "t", [{"value": "x" * 600}], acks="0").status_code == 202  # waits for linger
    r = produce(api, "t", [{"value": "y" * 600}], acks="0")
    error(r, 429, "THROTTLING_QUOTA_EXCEEDED")
    assert r.headers["retry-after"] == "1"


def test_buffer_memory_counts_what_small_records_hold_in_memory(server: StartServer) -> None:
    # 1,000 one-byte values are 1,000 bytes of values, but with their offsets and partitions
    # the records hold ~9 KB: two such requests do not fit in 12,000 bytes of buffer.memory.
    api = server(**{"buffer.memory": 12_000, "linger.ms": 3000, "batch.size": 10_000_000}).client()
    create(api, "t")
    tiny = [{"value": "x"} for _ in range(1000)]
    assert produce(api, "t", tiny, acks="0").status_code == 202  # waits for linger
    error(produce(api, "t", tiny, acks="0"), 429, "THROTTLING_QUOTA_EXCEEDED")


def test_long_poll_returns_when_records_arrive(api: httpx.Client) -> None:
    create(api, "t")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(api.get, "/v1/topics/t/partitions/0/records", params={"offset": 0, "wait_ms": 20000})
        assert produce(api, "t", [{"value": "late"}]).status_code == 200
        got = waiting.result(timeout=20).json()
    assert [r["value"] for r in got["records"]] == ["late"]
    empty = api.get("/v1/topics/t/partitions/0/records", params={"offset": 1, "wait_ms": 50}).json()
    assert empty["records"] == [] and empty["high_watermark"] == 1


def test_fetch_limits(api: httpx.Client) -> None:
    create(api, "t")
    produce(api, "t", [{"value": "x" * 100} for _ in range(10)])
    r = api.get("/v1/topics/t/partitions/0/records", params={"offset": 2, "max_records": 3}).json()
    assert [x["offset"] for x in r["records"]] == [2, 3, 4]
    r = api.get("/v1/topics/t/partitions/0/records", params={"offset": 0, "max_bytes": 250}).json()
    assert len(r["records"]) == 2


def test_groups(api: httpx.Client) -> None:
    create(api, "t", 2)
    produce(api, "t", [{"value": "x", "partition": 0}] * 5 + [{"value": "y", "partition": 1}] * 2)
    r = api.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"0": 3, "1": 2}})
    assert r.status_code == 200, r.text
    desc = api.get("/v1/groups/g").json()
    assert desc["group"] == "g"
    assert desc["topics"][0]["partitions"] == [
        {"partition": 0, "committed_offset": 3, "high_watermark": 5, "lag": 2},
        {"partition": 1, "committed_offset": 2, "high_watermark": 2, "lag": 0},
    ]
    assert api.get("/v1/groups").json() == {"groups": ["g"]}
    reset = api.post("/v1/groups/g/reset", json={"topic": "t", "to": "earliest"}).json()
    assert [p["committed_offset"] for p in reset["topics"][0]["partitions"]] == [0, 0]
    reset = api.post("/v1/groups/g/reset", json={"topic": "t", "to": {"offset": 4}}).json()
    assert [p["committed_offset"] for p in reset["topics"][0]["partitions"]] == [4, 2]
    error(api.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"0": 99}}), 416, "OFFSET_OUT_OF_RANGE")
    error(api.get("/v1/groups/nobody"), 404, "GROUP_ID_NOT_FOUND")
    error(api.post("/v1/groups/g/reset", json={"topic": "t", "to": "yesterday"}), 422, "INVALID_REQUEST")


def test_operations_endpoints(api: httpx.Client) -> None:
    create(api, "t")
    produce(api, "t", [{"value": "x"}])
    api.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"0": 0}})
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").status_code == 200
    text = api.get("/metrics").text
    assert 'logstore_records_in_total{topic="t"} 1.0' in text
    assert 'logstore_high_watermark{partition="0",topic="t"} 1.0' in text
    assert 'logstore_group_lag{group="g",partition="0",topic="t"} 1.0' in text
    assert "logstore_produce_latency_seconds_bucket" in text
    assert api.get("/openapi.json").json()["paths"]["/v1/topics/{topic}/records"]["post"]["requestBody"]
    assert api.get("/docs").status_code == 200
